"""WTU testbench for cocotb + Verilator on the emitted Verilog (run by test_verilog.py).

The build's Config comes from the runner. Every stream test is parametrised by a named
idle/back-pressure crossing and compares every output beat, the counters and the error flag
with the golden block model.
"""
from __future__ import annotations

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

from golden.wtu import Row
from rtl import WicsumThresholdUnit
from verif.lib.cocotb_tb import BlockTB, named, test
from verif.lib.fcov import record
from verif.lib.pauses import CROSSINGS
from verif.lib.scoreboard import compare, compare_counters
from verif.wtu.model import (all_beats, expected, first_beat_index, random_rows,
                              schedule_rows)
from verif.wtu.timing import schedule

COUNTERS = ("rows", "buckets_visited", "buckets_skipped", "entries_read", "rows_refused")
NAMED = named(CROSSINGS)


class WtuTB(BlockTB):
    def __init__(self, dut):
        super().__init__(dut, WicsumThresholdUnit, sources={"i": lambda b: b.in_layout},
                         sinks={"o": lambda b: b.out_layout})

    async def after_reset(self):
        await ClockCycles(self.dut.clk, self.model.clear_cycles)

    async def run(self, heads, th_r=None):
        """Send the heads' rows at Th_r (default: the build's), take and compare every beat
        (``last`` only on each head's closing beat), then the counters and the error flag.
        Returns beats, the golden result, counters (since the call) and the error flag."""
        cfg = self.cfg if th_r is None else self.cfg.replace(th_r=th_r)
        self.registers(cfg.block_registers("wtu"))
        base = await self.perf()
        want, ref = expected(heads, cfg)
        send = cocotb.start_soon(self.source["i"].send(all_beats(heads, self.model.lanes)))
        got = []
        for ids in ref.heads:          # each head ends with its own `last` beat
            got += await self.sink["o"].take(len(ids) + 1, timeout=200_000, until_last="last")
        await send
        compare(got, want)
        await self.sink["o"].expect_quiet(8)
        await ReadOnly()
        err = int(self.dut.error.value)
        await RisingEdge(self.dut.clk)
        perf = await self.perf()
        compare_counters(perf, {f: ref.counters[f] for f in COUNTERS}, base=base)
        assert err == int(any(ref.refused))
        if ref.first_error:                  # the first error's code, head and row
            await ReadOnly()
            trace = (int(self.dut.error_code.value), int(self.dut.error_head.value),
                     int(self.dut.error_row.value))
            await RisingEdge(self.dut.clk)
            assert trace == ref.first_error, (trace, ref.first_error)
        for v, refused in zip(ref.visited, ref.refused):     # rows that matched, bit for bit
            if not refused and v:
                record(f"wtu:visited={int(v)}")
        return got, ref, {k: perf[k] - base[k] for k in perf}, err


@test()
@cocotb.parametrize(crossing=NAMED)
async def random_rows_crossed(dut, crossing):
    """Rows of many lengths and distributions (flat, peaky, exponential-like, uniform)."""
    tb = WtuTB(dut)
    tb.cross(crossing, seed=1)
    await tb.start()
    E = tb.model.row_entries
    k = list(CROSSINGS).index(crossing)
    rng = np.random.default_rng(10 + k)
    heads = [random_rows(rng, 3, (1, min(E, 300) + 1), kind=kind, invalid=0.05)
             for kind in ("exp", "flat", "peaky", "uniform")]
    await tb.run(heads, [0.3, 0.1, 0.6, 0.95, 0.5][k])


@test()
@cocotb.parametrize(crossing=NAMED)
async def worked_example_and_edges(dut, crossing):
    """PAPER.md's WTU example, then empty, flat, zero-sum, zero-count and extreme rows."""
    tb = WtuTB(dut)
    tb.cross(crossing, seed=2)
    await tb.start()
    paper = [[Row([40, 35, 30, 28, 10, 0], [500, 200, 90, 12, 197, 1], [1] * 6)]]
    edges = [[Row([], [], [])], [Row([5] * 5, [9] * 5, [1, 2, 3, 4, 5])],
             [Row([3, 1, 2], [0, 0, 0], [1, 1, 1])], [Row([9, 9, 1], [10, 10, 10], [1, 0, 1])],
             [Row([7, -8], [1, 1], [1, 1], [False, False])],
             [Row([-(1 << 21)] * 3 + [(1 << 21) - 1], [1, 2, 3, 40000], [65535] * 4)]]
    got, ref, perf, err = await tb.run(paper, 0.8)
    assert [g["cluster"] for g in got[:-1]] == [0, 1, 2, 3]
    if tb.model.buckets == 16:
        assert perf["buckets_visited"] == 5
    for th in (0.0, 0.3, 1.0):
        await tb.reset()
        await tb.run(edges, th)


@test()
@cocotb.parametrize(crossing=named(["none", "both"]))
async def bucket_bounds_and_equal_sums(dut, crossing):
    """Scores exactly on every bucket bound and one below it (a bound off by one counts them
    twice or in the wrong bucket), and running sums exactly equal to the threshold (the walk
    exits only once the sum is strictly greater: a >= compare exits a bucket early)."""
    tb = WtuTB(dut)
    tb.cross(crossing, seed=12)
    await tb.start()
    B = tb.model.buckets
    rng = np.random.default_rng(12)
    bounds = []
    for c in (1, 3, 7):                        # lo_k = k·c: smin 0, smax B·c - 1
        s = [k * c for k in range(B)] + [k * c - 1 for k in range(1, B)] + [B * c - 1]
        bounds.append([Row(s, rng.integers(1, 3000, len(s)), rng.integers(1, 9, len(s)))])
    equal = []
    for top in (1000, 4096):                   # the top bucket's Σ w·n is exactly th
        equal.append([Row([B * 5 - 1, 0], [top, top], [1, 1])])              # Th_r 0.5
        equal.append([Row([B * 5 - 1, 2, 0], [top, top, 2 * top], [1, 1, 1])])    # 0.25
    for th in (0.3, 0.5, 0.9):
        await tb.reset()
        await tb.run(bounds, th)
    await tb.reset()
    got, ref, _, _ = await tb.run(equal[0::2], 0.5)
    assert all(len(ids) == 2 for ids in ref.heads)          # the equal sum did not exit
    await tb.reset()
    got, ref, _, _ = await tb.run(equal[1::2], 0.25)
    assert all(len(ids) == 3 for ids in ref.heads)


@test()
async def long_row_refused(dut):
    """A row longer than the score memory is refused: error set with code 1, its head and
    row, the rest unaffected."""
    tb = WtuTB(dut)
    tb.cross("both", seed=3)
    await tb.start()
    E = tb.model.row_entries
    rng = np.random.default_rng(4)
    heads = [random_rows(rng, 1, min(E, 40)),
             random_rows(rng, 2, min(E, 64)) + random_rows(rng, 1, E + 1) +
             random_rows(rng, 1, E)]
    _, ref, perf, err = await tb.run(heads, 0.3)
    assert perf["rows_refused"] == 1 and err == 1 and ref.first_error == (1, 1, 2)


@test()
@cocotb.parametrize(preset=named(["paper", "tuned"]))
async def real_trace_rows(dut, preset):
    """Rows the golden ReSV run scored on the bundled real trace; the unit's selection is the
    one the golden run made for that KV head."""
    from verif.lib.traces import bundled
    from verif.wtu.model import trace_rows
    tb = WtuTB(dut)
    tb.cross("both" if preset == "paper" else "periodic", seed=5)
    await tb.start()
    tr, qt = bundled()
    run_cfg, r, picks, heads = trace_rows(tr, qt, preset, tb.cfg, n_groups=4)
    assert heads, "no real-trace row group fits the score memory"
    got, ref, perf, err = await tb.run(heads, run_cfg.th_r)
    for g, ids in zip(picks, ref.heads):
        mask = r.masks[run_cfg.th_r][g["layer"], g["step"], g["head"]]
        members = r.cluster_of[g["layer"], 0]
        chosen = {int(c) for c in np.unique(members[:len(mask)][mask])}
        assert chosen == {int(g["cluster"][i]) for i in ids}


@test()
async def reset_mid_row(dut):
    """A reset in the middle of a row (and of a head's union) leaves the unit clean."""
    tb = WtuTB(dut)
    tb.cross("both", seed=6)
    await tb.start()
    rng = np.random.default_rng(7)
    heads = [random_rows(rng, 4, (20, 60)) for _ in range(3)]
    tb.registers(tb.cfg.block_registers("wtu"))
    sender = cocotb.start_soon(tb.source["i"].send(all_beats(heads, tb.model.lanes)))
    tb.dut.o__ready.value = 1
    await ClockCycles(dut.clk, 150)
    sender.cancel()
    await tb.reset(3)
    await ReadOnly()
    assert int(dut.error.value) == 0
    await RisingEdge(dut.clk)
    assert all(v == 0 for v in (await tb.perf()).values())
    await tb.run([random_rows(rng, 3, (1, 80)) for _ in range(3)], 0.3)


@test()
async def row_cycles(dut):
    """With o ready and no idle cycles, the busy cycles, each row's first beat and each head's
    closing beat fall where :func:`verif.wtu.timing.schedule` says."""
    tb = WtuTB(dut)
    await tb.start()
    m = tb.model
    rng = np.random.default_rng(9)
    heads = [random_rows(rng, 4, n) for n in (1, m.lanes + 1, min(m.row_entries, 200))]
    heads.insert(1, [Row([], [], [])])
    _, ref, perf, err = await tb.run(heads, 0.3)
    sched = schedule(m, schedule_rows(heads, ref), ref.heads)
    assert perf["busy"] == sched["busy"], (perf["busy"], sched["busy"])
    starts = tb.source["i"].cycles
    firsts = [starts[i] - starts[0] for i in first_beat_index(heads, m.lanes)]
    assert firsts == sched["first_beats"], (firsts, sched["first_beats"])
