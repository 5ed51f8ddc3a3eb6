"""Exp-unit testbench for cocotb + Verilator on the emitted Verilog (run by test_verilog.py):
every weight against ``golden.numerics.ExpUnit``."""
from __future__ import annotations

import cocotb
import numpy as np

from golden.attn import exp_registers
from golden.numerics import ExpUnit as GoldenExp
from rtl import ExpUnit
from verif.lib.cocotb_tb import BlockTB, named, test
from verif.lib.pauses import CROSSINGS
from verif.lib.scoreboard import compare


class ExpTB(BlockTB):
    def __init__(self, dut):
        super().__init__(dut, ExpUnit, sources={"i": lambda b: b.in_layout},
                         sinks={"o": lambda b: b.out_layout})

    async def run(self, xs, unit):
        n = self.model.lanes
        xs = list(map(int, xs)) + [0] * (-len(xs) % n)
        self.registers(exp_registers(unit))
        beats = [{"x": xs[i:i + n]} for i in range(0, len(xs), n)]
        send = cocotb.start_soon(self.source["i"].send(beats))
        got = await self.sink["o"].take(len(beats), timeout=10_000)
        await send
        want = unit(np.array(xs)).reshape(-1, n)
        compare(got, [{"w": [int(v) for v in w]} for w in want])
        await self.sink["o"].expect_quiet(8)


def _inputs(unit, x_bits):
    """Every table index (dense x near 0), every shift (x out to the input range)."""
    dense = -np.arange(0, 3000)
    sparse = -np.unique(np.geomspace(1, 2 ** (x_bits - 1), 300).astype(np.int64))
    return np.concatenate([dense, sparse])


@test()
@cocotb.parametrize(alpha=[1e-3, 0.0123, 0.5])
async def every_index_and_shift(dut, alpha):
    tb = ExpTB(dut)
    tb.cross("both", seed=1)
    await tb.start()
    unit = GoldenExp.for_config(alpha, tb.cfg)
    await tb.run(_inputs(unit, tb.cfg.score_bits + 1), unit)


@test()
@cocotb.parametrize(crossing=named(CROSSINGS))
async def random_differences(dut, crossing):
    tb = ExpTB(dut)
    tb.cross(crossing, seed=2)
    await tb.start()
    rng = np.random.default_rng(list(CROSSINGS).index(crossing))
    unit = GoldenExp.for_config(float(10 ** rng.uniform(-4, -0.5)), tb.cfg)
    lim = 1 << tb.cfg.score_bits
    await tb.run(-rng.integers(0, lim, 500), unit)


@test()
async def throughput(dut):
    """One beat a cycle, first weight latency cycles after the first input."""
    tb = ExpTB(dut)
    await tb.start()
    unit = GoldenExp.for_config(0.01, tb.cfg)
    await tb.run(-np.arange(64 * tb.model.lanes), unit)
    gaps = np.diff(tb.sink["o"].cycles)
    assert (gaps == 1).all()
    assert tb.sink["o"].stamps[0] - tb.source["i"].stamps[0] == tb.model.latency
