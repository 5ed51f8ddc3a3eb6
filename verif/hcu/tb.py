"""HCU testbench for cocotb + Verilator on the emitted Verilog (run by test_verilog.py).

The build's Config comes from the runner. Every stream test is parametrised by a named
idle/back-pressure crossing and compares every output beat and the counters with the golden
block model.
"""
from __future__ import annotations

import cocotb
import numpy as np

from rtl import HashClusterUnit
from verif.hcu.model import (Token, expected, frames, layered_stream, structured_hashes,
                             swap_plan)
from verif.lib.cocotb_tb import BlockTB, named, test
from verif.lib.fcov import record
from verif.lib.pauses import CROSSINGS
from verif.lib.scoreboard import compare


class HcuTB(BlockTB):
    def __init__(self, dut):
        super().__init__(dut, HashClusterUnit,
                         sources={"i": lambda b: b.in_layout, "i_ctx": lambda b: b.ctx_layout,
                                  "i_ctxd": lambda b: b.ctx_bits},
                         sinks={"o": lambda b: b.out_layout, "o_ctx": lambda b: b.ctx_bits})

    async def run(self, tokens, cfg=None):
        """Send tokens, take outputs, compare with the golden model beat by beat, with the
        run-time registers of ``cfg`` (default: the build's). Returns beats, expected, perf."""
        cfg = cfg or self.cfg
        self.registers(cfg.block_registers("hcu"))
        want = expected(tokens, cfg)
        send = cocotb.start_soon(self.source["i"].send([t.beat() for t in tokens]))
        limit = 100 * (self.model.window // self.model.lanes + 4)
        got = await self.sink["o"].take(len(want), timeout=limit, until_last=None)
        await send
        compare(got, want, what="token")
        samples(tokens, got, cfg)
        await self.sink["o"].expect_quiet(2 * self.model.latency + 4)
        perf = await self.perf()
        assert perf["opened"] == sum(w["opened"] for w in want)
        assert perf["joined"] == len(want) - perf["opened"]
        return got, want, perf


def samples(tokens, got, cfg):
    """The functional samples of a run that matched the golden model, read off the beats the
    HCU gave (:mod:`verif.lib.fcov`): a layer's window wrapped (more clusters opened than it
    holds), and a join among several clusters of the window at the same distance (a tie, the
    most recent taken)."""
    if len(tokens) != len(got):         # refused tokens give no beat
        return
    opened = {}
    for t, g in zip(tokens, got):
        cs = opened.setdefault(t.layer, [])
        if int(g["opened"]):
            cs.append((t.hash, t.step))
            if len(cs) > cfg.window:
                record("hcu:window wrap")
            continue
        live = [h for h, s in cs[-cfg.window:]
                if cfg.max_age is None or t.step - s <= cfg.max_age]
        if sum(bin(h ^ t.hash).count("1") == int(g["distance"]) for h in live) > 1:
            record("hcu:tie")


def _structured(tb, n, seed):
    rng = np.random.default_rng(seed)
    n_hp = tb.model.n_hp
    hashes = structured_hashes(rng, n, n_hp, flips=max(2, n_hp // 4))
    steps = np.sort(rng.integers(0, 16, n))
    layers = [(i // 37) % tb.model.layers for i in range(n)]
    return frames(hashes, steps, layers)


AGES = {"none": None, "idle": 4, "backpressure": 0, "both": 9, "periodic": 2}


@test()
async def bad_tokens_refused(dut):
    """A step older than its layer's last (code 2) and, where the layer field has values
    beyond the contexts, such a layer (code 1): dropped, counted, the first error's code
    kept; the tokens around them cluster as the golden model says."""
    from golden.hcu import hcu_reference
    tb = HcuTB(dut)
    tb.cross("both", seed=14)
    await tb.start()
    L = tb.model.layers
    spare = (1 << max(1, (L - 1).bit_length())) > L
    toks = _structured(tb, 60, 14)
    toks[20] = Token(toks[20].hash, toks[20].layer, max(toks[19].step - 1, 0), 0, 0) \
        if toks[19].step > 0 else toks[20]
    toks[7] = Token(toks[7].hash, L, toks[7].step, 0, 0) if spare else toks[7]
    toks[40] = Token(toks[40].hash, toks[40].layer, 0, 0, 0)
    errors = []
    hcu_reference(toks, tb.cfg, errors=errors)
    assert errors and (not spare or errors[0][0] == 1)
    base = await tb.perf()
    await tb.run(toks)
    perf = await tb.perf()
    assert perf["refused"] - base["refused"] == len(errors)
    assert int(dut.error.value) == 1 and int(dut.error_code.value) == errors[0][0]


@test()
@cocotb.parametrize(crossing=named(CROSSINGS))
async def random_streams(dut, crossing):
    """Seeded structured hashes across the layer contexts."""
    tb = HcuTB(dut)
    tb.cross(crossing, seed=1)
    await tb.start()
    n = min(4 * tb.model.window + 50, 1200)
    k = list(CROSSINGS).index(crossing)
    cfg = tb.cfg.replace(th_hd=max(1, tb.model.n_hp // 4), max_age=AGES[crossing])
    _, _, perf = await tb.run(_structured(tb, n, seed=100 + k), cfg)
    if CROSSINGS[crossing][1] is not None:
        assert perf["stalled"] > 0


@test()
@cocotb.parametrize(crossing=named(["none", "both"]), cap=named([1, 3]))
async def cluster_cap(dut, crossing, cap):
    """The cluster-size cap: seeded structured hashes (clusters that would grow past the cap)
    with ``cluster_cap`` set, beat for beat with the golden model; the cap makes a difference
    there (the stream clustered without it differs)."""
    tb = HcuTB(dut)
    tb.cross(crossing, seed=5)
    await tb.start()
    toks = _structured(tb, min(3 * tb.model.window + 40, 600), seed=200 + cap)
    cfg = tb.cfg.replace(th_hd=max(1, tb.model.n_hp // 4), max_age=None, cluster_cap=cap)
    assert expected(toks, cfg) != expected(toks, cfg.replace(cluster_cap=None))
    got, _, _ = await tb.run(toks, cfg)
    assert max(int(g["count"]) for g in got) == cap


@test()
@cocotb.parametrize(crossing=named(CROSSINGS))
async def directed_cases(dut, crossing):
    """All-equal, all-different, distances Th_hd - 1 and Th_hd, ties, a full window wrapping,
    clusters aging out at exactly A steps, a layer switch mid-stream, joins of the oldest and
    newest clusters of a wrapped window (and of one that fell out of it)."""
    tb = HcuTB(dut)
    tb.cross(crossing, seed=2)
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
    # a wrapped window: W + 3 clusters opened (ids 3 .. W + 2 remain), then tokens equal to
    # the oldest remaining (joins id 3, the slot the next cluster opens in), the newest, and
    # one that fell out (opens)
    hs = [int(h) for h in rng.permutation(2 ** min(n_hp, 20))[:W + 3]]
    oldest = [Token(h, step=4, first=int(i == 0)) for i, h in enumerate(hs)] + [
        Token(hs[3], step=4), Token(hs[-1], step=4), Token(hs[2], step=4), Token(hs[4], step=4)]
    for toks, th_hd, age in ((equal, th, None), (boundary, th, None), (ties, 5, None),
                             (ages, th, 5), (different, 1, None), (switch, th, None),
                             (oldest, 1, None)):
        await tb.reset()
        await tb.run(toks, tb.cfg.replace(th_hd=th_hd, max_age=age))


@test()
@cocotb.parametrize(preset=named(["paper", "tuned"]))
async def real_trace(dut, preset):
    """Hashes of the bundled real trace, made by the golden model under both presets; the
    unit's clusters are the golden ReSV run's."""
    from verif.hcu.model import trace_tokens
    from verif.lib.traces import bundled
    tb = HcuTB(dut)
    tb.cross("both" if preset == "paper" else "periodic", seed=4)
    await tb.start()
    tr, qt = bundled()
    toks, run_cfg, r = trace_tokens(tr, qt, preset, tb.cfg)
    got, _, _ = await tb.run(toks, tb.cfg.replace(th_hd=run_cfg.th_hd,
                                                  max_age=run_cfg.max_age))
    if tb.model.window >= run_cfg.window and tb.model.layers >= tr.n_layers:
        assert [g["cluster"] for g in got if g["layer"] == 0] == [
            int(c) for c in r.cluster_of[0, 0] if c >= 0]


@test()
async def reset_mid_step(dut):
    """A reset in the middle of a step leaves the unit clean: a fresh run matches a fresh
    model."""
    tb = HcuTB(dut)
    tb.cross("both", seed=5)
    await tb.start()
    cfg = tb.cfg.replace(th_hd=3, max_age=None)
    tb.registers(cfg.block_registers("hcu"))
    sender = cocotb.start_soon(tb.source["i"].send([t.beat() for t in _structured(tb, 120, 9)]))
    await tb.sink["o"].take(30)
    sender.cancel()
    await tb.reset(3)
    assert all(v == 0 for v in (await tb.perf()).values())
    await tb.run(_structured(tb, 200, seed=10), cfg)


@test()
async def throughput(dut):
    """A full window with ``o`` ready: one token per cycles_per_token(window) cycles, and the
    lanes busy at least 88% of the time when the window is 1024 deep (64 rows + the 8-cycle
    latency of the registered pipeline: 88.9%; 95.5% with the 3 cycles of the 52 MHz one)."""
    tb = HcuTB(dut)
    await tb.start()
    W = tb.model.window
    n = W + 64
    rng = np.random.default_rng(11)
    hashes = [int(h) for h in rng.permutation(2 ** min(tb.model.n_hp, 20))[:n]]
    got, _, perf = await tb.run(frames(hashes, [0] * n),          # all different: all open
                                tb.cfg.replace(th_hd=1, max_age=None))
    gaps = np.diff(tb.sink["o"].cycles)
    assert (gaps[W:] == tb.model.cycles_per_token(W)).all()
    full_rate = W / tb.model.cycles_per_token(W)
    if W // tb.model.lanes >= 64:
        assert full_rate >= 0.88 * tb.model.lanes
    assert perf["comparisons"] == sum(min(k, W) for k in range(n))


@test()
@cocotb.parametrize(crossing=named(["none", "both"]))
async def layers_beyond_contexts(dut, crossing):
    """Two more layers than the build's contexts, run as a core would (``swap_plan``: at every
    layer switch the slot's window saved on ``o_ctx`` and the next layer's loaded from
    ``i_ctxd``, or the slot flushed): every beat equals the golden model's with every layer on
    chip; every saved header holds its layer's clusters opened and last step."""
    from verif.lib.payload import unpack
    tb = HcuTB(dut)
    tb.cross(crossing, seed=6)
    await tb.start()
    m = tb.model
    cfg = tb.cfg.replace(n_layers=m.layers + 2, hcu_contexts=None, th_hd=max(1, m.n_hp // 4),
                         max_age=4)
    tb.registers(cfg.block_registers("hcu"))
    toks = layered_stream(cfg, min(5 * m.window + 40, 1500), seed=21)
    want = expected(toks, cfg)
    op = {"save": m.SAVE, "load": m.LOAD, "flush": m.FLUSH}
    got, images, opened, last, layer_of, full = [], {}, {}, {}, {}, False
    for kind, slot, arg in swap_plan(toks, m.layers):
        if kind == "tokens":
            send = cocotb.start_soon(tb.source["i"].send([t.beat() for t in arg]))
            beats = await tb.sink["o"].take(len(arg), timeout=10_000)
            await send
            layer = layer_of[slot]
            got += [dict(b, layer=layer) for b in beats]
            opened[layer] = opened.get(layer, 0) + sum(b["opened"] for b in beats)
            last[layer] = arg[-1].step
            continue
        await tb.source["i_ctx"].send([{"op": op[kind], "layer": slot}])
        if kind == "save":
            head = (await tb.sink["o_ctx"].take(1, timeout=10_000))[0]
            h = unpack(m.header_layout, head)
            assert (h["n_open"], h["last_step"]) == (opened.get(arg, 0), last.get(arg, 0)), \
                f"layer {arg}'s saved header {h}"
            n = min(m.window, h["n_open"])
            full |= n == m.window
            images[arg] = [head] + (await tb.sink["o_ctx"].take(n, timeout=10_000) if n else [])
        else:
            if kind == "load":
                await tb.source["i_ctxd"].send(images[arg])
            layer_of[slot] = arg
    compare(got, want, what="token")
    await tb.sink["o_ctx"].expect_quiet(8)
    if 5 * m.window + 40 <= 1500:
        assert full, "no saved window was full"
    assert int(dut.error.value) == 0
