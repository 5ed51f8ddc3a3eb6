"""HCU testbench for cocotb + Verilator on the emitted Verilog (run by test_hcu_cocotb.py).

The parameter point comes in ``HCU_PARAMS`` (JSON). Every test crosses idle cycles at the
input with back-pressure at the output and compares every output beat with the golden model.
"""
from __future__ import annotations

import json
import os

import cocotb
import numpy as np
from cocotb.triggers import ReadOnly, RisingEdge

from rtl.hcu import HashClusterUnit
from verif.hcu_model import Token, expected, frames, structured_hashes
from verif.streams import BlockTB

PARAMS = json.loads(os.environ.get("HCU_PARAMS", "{}"))
CROSS = [(0.0, 0.0), (0.5, 0.0), (0.0, 0.5), (0.3, 0.3)]


class HcuTB(BlockTB):
    def __init__(self, dut, seed=0):
        super().__init__(dut, HashClusterUnit(**PARAMS), seed)

    def registers(self, th_hd, max_age):
        self.dut.th_hd.value = th_hd
        self.dut.max_age.value = 0 if max_age is None else max_age
        self.dut.age_limit.value = int(max_age is not None)

    async def run(self, tokens, th_hd, max_age, idle=0.0, stall=0.0):
        """Send tokens, take outputs, compare with the golden model beat by beat."""
        self.registers(th_hd, max_age)
        want = expected(tokens, n_hp=self.model.n_hp, window=self.model.window, th_hd=th_hd,
                        max_age=max_age, count_bits=self.model.count_bits)
        send = cocotb.start_soon(self.src.send([t.__dict__ for t in tokens], idle))
        limit = 100 * len(tokens) * (self.model.window // self.model.lanes + 4)
        got = await self.sink.take(len(tokens), stall, timeout=limit)
        await send
        for k, (g, w) in enumerate(zip(got, want)):
            w = dict(w, opened=int(w["opened"]))
            assert g == w, f"token {k}: got {g}, want {w}"
        await ReadOnly()
        perf = self.perf()
        await RisingEdge(self.dut.clk)
        return got, want, perf


def _structured(tb, n, seed):
    rng = np.random.default_rng(seed)
    n_hp = tb.model.n_hp
    hashes = structured_hashes(rng, n, n_hp, flips=max(2, n_hp // 4))
    steps = np.sort(rng.integers(0, 16, n))
    layers = [(i // 37) % tb.model.layers for i in range(n)]
    return frames(hashes, steps, layers)


@cocotb.test()
async def random_streams(dut):
    """Seeded structured hashes across the layer contexts, crossed idle x back-pressure."""
    tb = HcuTB(dut, seed=1)
    await tb.start()
    n = min(4 * tb.model.window + 50, 1200)
    for k, (idle, stall) in enumerate(CROSS):
        await tb.reset()
        toks = _structured(tb, n, seed=100 + k)
        th = max(1, tb.model.n_hp // 4)
        _, want, perf = await tb.run(toks, th, [None, 4, 0, 9][k], idle, stall)
        assert perf["opened"] == sum(w["opened"] for w in want)
        assert perf["joined"] == len(want) - perf["opened"]
        if stall:
            assert perf["stalled"] > 0


@cocotb.test()
async def directed_cases(dut):
    """All-equal, all-different, distances Th_hd - 1 and Th_hd, ties, a full window wrapping,
    clusters aging out at exactly A steps, a layer switch mid-stream."""
    tb = HcuTB(dut, seed=2)
    await tb.start()
    n_hp, W, th = tb.model.n_hp, tb.model.window, 3
    mask = (1 << n_hp) - 1
    equal = [Token(0x5A & mask, first=int(i == 0)) for i in range(20)]
    boundary = [Token(0, first=1), Token(0b11), Token(0b111), Token(0b1111)]
    ties = [Token(0, step=1, first=1), Token(0xF0 & mask, step=1), Token(0x0F, step=1),
            Token(0x3C & mask, step=1)]
    ages = [Token(0x11, step=0, first=1), Token(0x11, step=5, first=1),
            Token(0x11, step=11, first=1), Token(0x11, step=16, first=1)]
    rng = np.random.default_rng(3)
    different = [Token(int(h) & mask, step=2, first=int(i == 0))
                 for i, h in enumerate(rng.permutation(2 ** min(n_hp, 20))[:W + 40])]
    switch = [Token(0x3 & mask, layer=i % tb.model.layers, step=3, first=int(i == 0))
              for i in range(12)]
    for idle, stall in CROSS:
        for toks, th_hd, age in ((equal, th, None), (boundary, th, None), (ties, 5, None),
                                 (ages, th, 5), (different, 1, None), (switch, th, None)):
            await tb.reset()
            got, _, _ = await tb.run(toks, th_hd, age, idle, stall)
        await tb.reset()


@cocotb.test()
async def real_trace(dut):
    """Hashes of the bundled real trace, made by the golden model under both presets."""
    from golden.trace import load_trace, quantise
    from verif.conftest import BUNDLED
    from verif.hcu_model import trace_tokens
    tb = HcuTB(dut, seed=4)
    await tb.start()
    tr = load_trace(BUNDLED)
    qt = quantise(tr)
    for k, preset in enumerate(("paper", "tuned")):
        toks, cfg, r = trace_tokens(tr, qt, preset, tb.model.n_hp, tb.model.layers)
        idle, stall = CROSS[3 - k]
        await tb.reset()
        got, want, perf = await tb.run(toks, cfg.th_hd, cfg.max_age, idle, stall)
        # the unit agrees with the clustering the golden ReSV run made of the same tokens
        if tb.model.window >= cfg.window and tb.model.layers >= tr.n_layers:
            assert [g["cluster"] for g in got if g["layer"] == 0] == [
                int(c) for c in r.cluster_of[0, 0] if c >= 0]


@cocotb.test()
async def reset_mid_step(dut):
    """A reset in the middle of a step leaves the unit clean: a fresh run matches a fresh model."""
    tb = HcuTB(dut, seed=5)
    await tb.start()
    toks = _structured(tb, 120, seed=9)
    tb.registers(3, None)
    sender = cocotb.start_soon(tb.src.send([t.__dict__ for t in toks], 0.2))
    await tb.sink.take(30, 0.2)
    sender.cancel()
    await tb.reset(3)
    await ReadOnly()
    assert all(v == 0 for v in tb.perf().values())
    await RisingEdge(dut.clk)
    await tb.run(_structured(tb, 200, seed=10), 3, None, 0.3, 0.3)


@cocotb.test()
async def throughput(dut):
    """A full window with ``o`` ready: one token per cycles_per_token(window) cycles, and the
    lanes busy at least 95% of the time when the window is 1024 deep (DESIGN.md §4)."""
    tb = HcuTB(dut, seed=6)
    await tb.start()
    W = tb.model.window
    n = W + 64
    rng = np.random.default_rng(11)
    hashes = [int(h) for h in rng.permutation(2 ** min(tb.model.n_hp, 20))[:n]]
    toks = frames(hashes, [0] * n)
    got, _, perf = await tb.run(toks, 1, None)          # all different: every token opens
    gaps = np.diff(tb.sink.cycles)
    assert (gaps[W:] == tb.model.cycles_per_token(W)).all()
    full_rate = W / tb.model.cycles_per_token(W)
    if W // tb.model.lanes >= 64:
        assert full_rate >= 0.95 * tb.model.lanes
    assert perf["comparisons"] == sum(min(k, W) for k in range(n))
