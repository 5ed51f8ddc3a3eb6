"""The cocotb stream source and sink of the testbench library checked on a real block (the exp
unit: one beat a cycle, a fixed latency, ``ready`` passed back through its pipeline), run by
``test_cocotb_tb.py``. What the blocks' own testbenches take for granted: a sink asleep
between beats records each beat's cycle as a cycle-by-cycle sink would, a source asleep
under back-pressure delivers every beat in order, and a missing beat fails at the timeout,
not later."""
from __future__ import annotations

import cocotb
import numpy as np
from cocotb.triggers import RisingEdge

from golden.attn import exp_registers
from golden.numerics import ExpUnit as GoldenExp
from rtl import ExpUnit
from verif.lib.cocotb_tb import BlockTB, cycle_now, test
from verif.lib.pauses import cycle_pause
from verif.lib.scoreboard import compare


class _TB(BlockTB):
    def __init__(self, dut):
        super().__init__(dut, ExpUnit, sources={"i": lambda b: b.in_layout},
                         sinks={"o": lambda b: b.out_layout})
        self.unit = GoldenExp.for_config(0.0123, self.cfg)
        self.registers(exp_registers(self.unit))

    def beats(self, k: int, seed: int):
        n = self.model.lanes
        xs = -np.random.default_rng(seed).integers(0, 1 << self.cfg.score_bits, k * n)
        want = self.unit(xs).reshape(k, n)
        return ([{"x": [int(v) for v in xs[i * n:(i + 1) * n]]} for i in range(k)],
                [{"w": [int(v) for v in w]} for w in want])

    async def through(self, k: int, seed: int):
        """``k`` random beats through the unit, its outputs equal to the golden unit's."""
        beats, want = self.beats(k, seed)
        send = cocotb.start_soon(self.source["i"].send(beats))
        got = await self.sink["o"].take(k, timeout=1000)
        await send
        compare(got, want)


@test()
async def sleeping_sink_records_the_cycles(dut):
    """The source idles 30 cycles before every beat (the sink sleeps between beats): every
    beat leaves exactly the unit's latency after it entered, by the cycles both sides
    record."""
    tb = _TB(dut)
    tb.source["i"].pauses = cycle_pause((1,) * 30 + (0,))
    await tb.start()
    await tb.through(12, 1)
    gaps = [b - a for a, b in zip(tb.source["i"].stamps, tb.sink["o"].stamps)]
    assert gaps == [tb.model.latency] * 12, gaps
    took = tb.sink["o"].cycles
    assert [b - a for a, b in zip(took, took[1:])] == [31] * 11, took


@test()
async def sleeping_source_under_backpressure(dut):
    """The sink takes one beat in 25 cycles (the source waits asleep for ``ready``): every
    beat arrives, in order, and none is taken twice."""
    tb = _TB(dut)
    tb.sink["o"].pauses = cycle_pause((1,) * 24 + (0,))
    await tb.start()
    await tb.through(40, 2)
    await tb.sink["o"].expect_quiet(20)


@test()
async def missing_beat_fails_at_the_timeout(dut):
    """Five beats sent, six asked for with a timeout of 40 cycles: the sink fails with the
    count taken, 40 cycles after the fifth beat (not later)."""
    tb = _TB(dut)
    await tb.start()
    beats, _ = tb.beats(5, 3)
    cocotb.start_soon(tb.source["i"].send(beats))
    try:
        await tb.sink["o"].take(6, timeout=40)
    except AssertionError as e:
        assert "no beat for 40 cycles, 5 of 6 taken" in str(e), e
    else:
        raise AssertionError("a missing beat was not reported")
    late = cycle_now() - tb.sink["o"].stamps[-1]
    assert 40 <= late <= 41, late
    await RisingEdge(dut.clk)
