"""WTU testbench for cocotb + Verilator on the emitted Verilog (run by test_wtu_cocotb.py).

The parameter point comes in ``WTU_PARAMS`` (JSON). Every test crosses idle cycles at the
input with back-pressure at the output and compares every output beat and the counters with
the golden block model.
"""
from __future__ import annotations

import json
import os

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

from golden.wtu import Row
from rtl.wtu import WicsumThresholdUnit
from verif.streams import BlockTB
from verif.wtu_model import all_beats, expected, random_rows

PARAMS = json.loads(os.environ.get("WTU_PARAMS", "{}"))
CROSS = [(0.0, 0.0), (0.5, 0.0), (0.0, 0.5), (0.3, 0.3)]
COUNTERS = ("rows", "buckets_visited", "buckets_skipped", "entries_read", "rows_refused")


class WtuTB(BlockTB):
    def __init__(self, dut, seed=0):
        super().__init__(dut, WicsumThresholdUnit(**PARAMS), seed)

    async def after_reset(self):
        # the union memory clears itself after reset before the unit takes a row
        await ClockCycles(self.dut.clk, self.model.row_entries // self.model.lanes)

    async def run(self, heads, th_r, idle=0.0, stall=0.0):
        m = self.model
        thf = round(th_r * (1 << m.th_r_frac_bits))
        self.dut.th_r.value = thf
        want, ref = expected(heads, th_r_fixed=thf, th_r_frac_bits=m.th_r_frac_bits,
                             buckets=m.buckets, row_entries=m.row_entries, lanes=m.lanes)
        send = cocotb.start_soon(self.src.send(all_beats(heads, m.lanes), idle))
        got = await self.sink.take(len(want), stall, timeout=5_000_000)
        await send
        for k, (g, w) in enumerate(zip(got, want)):
            assert g == w, f"beat {k}: got {g}, want {w}"
        await ClockCycles(self.dut.clk, 4)
        await ReadOnly()
        perf, err = self.perf(), int(self.dut.error.value)
        await RisingEdge(self.dut.clk)
        return got, ref, perf, err


def _check_counters(perf, ref, err, base=None):
    for f in COUNTERS:
        assert perf[f] - (base or {}).get(f, 0) == ref.counters[f], f
    assert err == int(any(ref.refused))


@cocotb.test()
async def random_rows_crossed(dut):
    """Rows of many lengths and distributions (flat, peaky, exponential-like, uniform)."""
    tb = WtuTB(dut, seed=1)
    await tb.start()
    E = tb.model.row_entries
    for k, (idle, stall) in enumerate(CROSS):
        await tb.reset()
        rng = np.random.default_rng(10 + k)
        lengths = (1, min(E, 300) + 1)
        heads = [random_rows(rng, 3, lengths, kind=kind, invalid=0.05)
                 for kind in ("exp", "flat", "peaky", "uniform")]
        _, ref, perf, err = await tb.run(heads, [0.3, 0.1, 0.6, 0.95][k], idle, stall)
        _check_counters(perf, ref, err)


@cocotb.test()
async def worked_example_and_edges(dut):
    """PAPER.md's WTU example, then empty, flat, zero-sum, zero-count and extreme rows."""
    tb = WtuTB(dut, seed=2)
    await tb.start()
    paper = [[Row([40, 35, 30, 28, 10, 0], [500, 200, 90, 12, 197, 1], [1] * 6)]]
    edges = [[Row([], [], [])], [Row([5] * 5, [9] * 5, [1, 2, 3, 4, 5])],
             [Row([3, 1, 2], [0, 0, 0], [1, 1, 1])], [Row([9, 9, 1], [10, 10, 10], [1, 0, 1])],
             [Row([7, -8], [1, 1], [1, 1], [False, False])],
             [Row([-(1 << 21)] * 3 + [(1 << 21) - 1], [1, 2, 3, 40000], [65535] * 4)]]
    for idle, stall in CROSS:
        await tb.reset()
        got, ref, perf, err = await tb.run(paper, 0.8, idle, stall)
        assert [g["cluster"] for g in got[:-1]] == [0, 1, 2, 3]
        if tb.model.buckets == 16:
            assert perf["buckets_visited"] == 5
        for th in (0.0, 0.3, 1.0):
            await tb.reset()
            _, ref, perf, err = await tb.run(edges, th, idle, stall)
            _check_counters(perf, ref, err)


@cocotb.test()
async def long_row_refused(dut):
    """A row longer than the score memory is refused: error set, the rest unaffected."""
    tb = WtuTB(dut, seed=3)
    await tb.start()
    E = tb.model.row_entries
    rng = np.random.default_rng(4)
    heads = [random_rows(rng, 2, min(E, 64)) + random_rows(rng, 1, E + 1) +
             random_rows(rng, 1, E)]
    _, ref, perf, err = await tb.run(heads, 0.3, 0.3, 0.3)
    assert perf["rows_refused"] == 1 and err == 1
    _check_counters(perf, ref, err)


@cocotb.test()
async def real_trace_rows(dut):
    """Rows the golden ReSV run scored on the bundled real trace (both presets); the unit's
    selection is the one the golden run made for that KV head."""
    from golden.trace import load_trace, quantise
    from verif.conftest import BUNDLED
    from verif.wtu_model import trace_rows
    tb = WtuTB(dut, seed=5)
    await tb.start()
    tr = load_trace(BUNDLED)
    qt = quantise(tr)
    m = tb.model
    for k, preset in enumerate(("paper", "tuned")):
        cfg, r, picks, heads = trace_rows(tr, qt, preset, buckets=m.buckets,
                                          row_entries=m.row_entries, n_groups=4)
        assert heads, "no real-trace row group fits the score memory"
        idle, stall = CROSS[3 - k]
        await tb.reset()
        got, ref, perf, err = await tb.run(heads, cfg.th_r, idle, stall)
        _check_counters(perf, ref, err)
        for g, ids in zip(picks, ref.heads):
            mask = r.masks[cfg.th_r][g["layer"], g["step"], g["head"]]
            members = r.cluster_of[g["layer"], 0]
            chosen = {int(c) for c in np.unique(members[:len(mask)][mask])}
            assert chosen == {int(g["cluster"][i]) for i in ids}


@cocotb.test()
async def reset_mid_row(dut):
    """A reset in the middle of a row (and of a head's union) leaves the unit clean."""
    tb = WtuTB(dut, seed=6)
    await tb.start()
    rng = np.random.default_rng(7)
    heads = [random_rows(rng, 4, (20, 60)) for _ in range(3)]
    sender = cocotb.start_soon(tb.src.send(all_beats(heads, tb.model.lanes), 0.2))
    tb.dut.th_r.value = round(0.3 * (1 << tb.model.th_r_frac_bits))
    tb.dut.o__ready.value = 1
    await ClockCycles(dut.clk, 150)
    sender.cancel()
    await tb.reset(3)
    await ReadOnly()
    assert all(v == 0 for v in tb.perf().values()) and int(dut.error.value) == 0
    await RisingEdge(dut.clk)
    _, ref, perf, err = await tb.run([random_rows(rng, 3, (1, 80)) for _ in range(3)], 0.3,
                                     0.3, 0.3)
    _check_counters(perf, ref, err)


@cocotb.test()
async def row_cycles(dut):
    """With o ready and no idle cycles, rows take row_cycles(n, visited) busy cycles."""
    tb = WtuTB(dut, seed=8)
    await tb.start()
    m = tb.model
    rng = np.random.default_rng(9)
    heads = [random_rows(rng, 4, n) for n in (1, m.lanes + 1, min(m.row_entries, 200))]
    _, ref, perf, err = await tb.run(heads, 0.3)
    rows = [r for h in heads for r in h]
    want = sum(m.row_cycles(len(r.score), v) for r, v in zip(rows, ref.visited))
    emit = sum(3 * -(-max(len(r.score) for r in h) // m.lanes) + len(ids) + 2
               for h, ids in zip(heads, ref.heads))
    assert perf["busy"] == want + emit
