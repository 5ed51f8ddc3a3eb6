"""Attention-engine testbench for cocotb + Verilator on the emitted Verilog (run by
test_verilog.py): commands against the golden models, every stream crossed with idle cycles
and back-pressure."""
from __future__ import annotations

import os

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge, with_timeout

from golden.numerics import ExpUnit, hyperplanes
from rtl import AttentionEngine
from verif.attn.model import (attend_chunked_command, attend_command, bad_command, empty_ports, gemm_command,
                              hash_command, random_int8, score_command, trace_attend_commands,
                              trace_hash_commands, trace_score_commands)
from verif.lib.cocotb_tb import CLOCK_NS, BlockTB, named, test
from verif.lib.pauses import CROSSINGS
from verif.lib.scoreboard import compare

SOURCES = ("cmd", "a", "b", "bias")
# a shorter real trace (two of five hashed steps, three of eight scored groups) at the build
# points beside the default (verif/attn/test_verilog.py)
SHORT = bool(os.environ.get("VREX_TRACE_SHORT"))


class EngineTB(BlockTB):
    def __init__(self, dut):
        super().__init__(dut, AttentionEngine,
                         sources={"cmd": lambda e: e.cmd_layout, "a": lambda e: e.chunk_layout,
                                  "b": lambda e: e.chunk_layout, "bias": lambda e: e.bias_layout},
                         sinks={"o_gemm": lambda e: e.gemm_layout,
                                "o_hash": lambda e: e.hash_layout,
                                "o_score": lambda e: e.score_layout,
                                "o_attn": lambda e: e.attn_layout})

    async def run(self, ports, want_gemm, want_hash, want_score=(), want_attn=()):
        """Send every port's beats, take and compare every output; counters since the call."""
        base = await self.perf()
        sends = [cocotb.start_soon(self.source[p].send(ports[p])) for p in SOURCES]
        want = {"o_gemm": want_gemm, "o_hash": want_hash, "o_score": list(want_score),
                "o_attn": list(want_attn)}
        takes = {o: cocotb.start_soon(self.sink[o].take(len(w), timeout=200_000))
                 for o, w in want.items()}
        got = {o: await t for o, t in takes.items()}
        for s in sends:     # a beat the engine never takes fails here, not by hanging
            await with_timeout(s, 200_000 * CLOCK_NS, "ns")
        for o, w in want.items():
            compare(got[o], w, what=o[2:] + " beat")
        for o in want:
            await self.sink[o].expect_quiet(4)
        perf = await self.perf()
        return {k: perf[k] - base[k] for k in perf}


@test()
@cocotb.parametrize(crossing=named(CROSSINGS))
async def gemm_commands(dut, crossing):
    """GEMMs whose sizes are not multiples of n (one with k < n), back to back."""
    tb = EngineTB(dut)
    tb.cross(crossing, seed=1)
    await tb.start()
    n = tb.model.n
    rng = np.random.default_rng(list(CROSSINGS).index(crossing))
    ports, want = empty_ports(), []
    for m, k, l in ((2 * n + 1, 37, n + 3), (3, 2, 5), (n, tb.model.k_buf, 2 * n)):
        want += gemm_command(ports, random_int8(rng, (m, k)), random_int8(rng, (l, k)), n)
    perf = await tb.run(ports, want, [])
    assert perf["commands"] == 3 and perf["refused"] == 0


@test()
async def gemm_extremes(dut):
    """All -128 over the longest row the buffers hold; B as long as the buffer holds."""
    tb = EngineTB(dut)
    tb.cross("both", seed=2)
    await tb.start()
    n, K, L = tb.model.n, tb.model.k_buf, tb.model.b_rows
    ports, want = empty_ports(), []
    want += gemm_command(ports, np.full((n + 1, K), -128), np.full((3, K), -128), n)
    want += gemm_command(ports, random_int8(np.random.default_rng(2), (2, 9)),
                         random_int8(np.random.default_rng(3), (L, 9)), n)
    await tb.run(ports, want, [])
    assert want[0]["c"][0] == 128 * 128 * K


@test()
@cocotb.parametrize(preset=named(["paper", "tuned"]))
async def real_trace_hashes(dut, preset):
    """The bundled trace's hash work, step by step and layer by layer, under both presets (the
    tuned preset's centring bias included): every word is the golden ReSV run's hash."""
    tb = EngineTB(dut)
    tb.cross("both" if preset == "paper" else "periodic", seed=3)
    await tb.start()
    ports, want, _, _ = trace_hash_commands(preset, tb.cfg,
                                            steps=range(0, 14, 7 if SHORT else 3))
    await tb.run(ports, [], want)


@test()
async def random_hashes(dut):
    """Random keys, hyperplanes and biases at the build's hash width."""
    tb = EngineTB(dut)
    tb.cross("idle", seed=4)
    await tb.start()
    rng = np.random.default_rng(4)
    n, n_hp = tb.model.n, tb.model.n_hp
    ports, want = empty_ports(), []
    for step in range(3):
        k = int(rng.integers(1, tb.model.k_buf + 1))
        hp = hyperplanes(step, 0, 0, n_hp, k)
        want += hash_command(ports, random_int8(rng, (int(rng.integers(1, 3 * n)), k)), hp,
                             rng.integers(-40000, 40000, n_hp), n, layer=0, step=step)
    await tb.run(ports, [], want)


@test()
@cocotb.parametrize(crossing=named(CROSSINGS))
async def score_commands(dut, crossing):
    """Cluster scoring in the WTU's input format: candidate counts not a multiple of n or of
    the WTU's lanes, one candidate, more rows than a row tile, as many candidates as B holds;
    a steep exponential; back to back with a GEMM."""
    tb = EngineTB(dut)
    tb.cross(crossing, seed=8)
    await tb.start()
    n, L, cfg = tb.model.n, tb.model.b_rows, tb.cfg
    rng = np.random.default_rng(8 + list(CROSSINGS).index(crossing))
    ports, want = empty_ports(), []
    k = tb.model.score_k_max
    for (m, l), alpha in zip(((3, 5), (3 * n + 1, n + 3), (1, 1), (n, L)), (3e-3, 1e-2, 3e-3, 0.5)):
        unit = ExpUnit.for_config(alpha, cfg)
        want += score_command(ports, random_int8(rng, (m, k)), random_int8(rng, (l, k)),
                              rng.integers(0, 1 << cfg.count_bits, l), unit, cfg)
    want_gemm = gemm_command(ports, random_int8(rng, (5, 7)), random_int8(rng, (6, 7)), n)
    perf = await tb.run(ports, want_gemm, [], want)
    assert perf["commands"] == 5 and perf["refused"] == 0


@test()
async def score_extremes(dut):
    """All -128 (the largest scores) and all 127 at the longest reduction whose scores fit."""
    tb = EngineTB(dut)
    tb.cross("both", seed=9)
    await tb.start()
    rng = np.random.default_rng(9)
    k, cfg = tb.model.score_k_max, tb.cfg
    unit = ExpUnit.for_config(3e-3, cfg)
    ports, want = empty_ports(), []
    for kind in ("min", "max", "sparse"):
        want += score_command(ports, random_int8(rng, (5, k), kind),
                              random_int8(rng, (7, k), kind), rng.integers(1, 9, 7), unit, cfg)
    await tb.run(ports, [], [], want)
    assert want[0]["entry"][0]["score"] == 128 * 128 * k


@test()
@cocotb.parametrize(preset=named(["paper", "tuned"]))
async def real_trace_scores(dut, preset):
    """The bundled trace's cluster scoring under both presets: every score, weight and count
    the golden ReSV run recorded for the WTU."""
    tb = EngineTB(dut)
    tb.cross("both" if preset == "paper" else "periodic", seed=10)
    await tb.start()
    ports, want, _, _ = trace_score_commands(preset, tb.cfg, n_groups=3 if SHORT else 8)
    assert ports["cmd"]
    await tb.run(ports, [], [], want)


@test()
@cocotb.parametrize(crossing=named(CROSSINGS))
async def attend_commands(dut, crossing):
    """Light attention: sizes not multiples of n, causal steps of several lengths and none,
    several query heads a command, as many tokens as B holds; back to back with scoring and
    a GEMM."""
    tb = EngineTB(dut)
    tb.cross(crossing, seed=11)
    await tb.start()
    n, L, cfg = tb.model.n, tb.model.b_rows, tb.cfg
    K = tb.model.score_k_max
    rng = np.random.default_rng(11 + list(CROSSINGS).index(crossing))
    unit = ExpUnit.for_config(3e-3, cfg)
    ports, want_attn = empty_ports(), []
    for m, d, l, c, pairs in ((3, K, 5, 3, 0), (2 * n + 1, 13, n + 3, 0, 1),
                              (3 * 7, 16, L, 7, 1), (4, 9, 1, 1, 0)):
        want_attn += attend_command(ports, random_int8(rng, (m, d)), random_int8(rng, (l, d)),
                                    random_int8(rng, (l, d)), c, unit, cfg, pairs=pairs)
    want_score = score_command(ports, random_int8(rng, (n + 1, 20)),
                               random_int8(rng, (7, 20)), rng.integers(1, 9, 7), unit, cfg)
    want_gemm = gemm_command(ports, random_int8(rng, (5, 7)), random_int8(rng, (6, 7)), n)
    perf = await tb.run(ports, want_gemm, [], want_score, want_attn)
    assert perf["commands"] == 6 and perf["refused"] == 0


@test()
async def attend_extremes(dut):
    """All -128 and all 127 over as many tokens as B holds at the longest head dimension (the
    largest scores and P·V sums), a steep exponential, an empty fetched set."""
    tb = EngineTB(dut)
    tb.cross("both", seed=12)
    await tb.start()
    rng = np.random.default_rng(12)
    K, L, cfg = tb.model.score_k_max, tb.model.b_rows, tb.cfg
    ports, want = empty_ports(), []
    for m, l, c, kind, alpha in ((5, L, 5, "min", 3e-3), (4, L, 0, "max", 3e-3),
                                 (9, L, 3, "uniform", 0.5), (12, 6, 6, "uniform", 3e-3)):
        unit = ExpUnit.for_config(alpha, cfg)
        want += attend_command(ports, random_int8(rng, (m, K), kind),
                               random_int8(rng, (l, K), kind), random_int8(rng, (l, K), kind),
                               c, unit, cfg)
    await tb.run(ports, [], [], [], want)
    assert want[0]["o"][0] == -128 << cfg.out_frac_bits


@test()
@cocotb.parametrize(preset=named(["paper", "tuned"]))
async def real_trace_attention(dut, preset):
    """The bundled trace's light attention under both presets (sinks, the golden run's
    selection, the step's own tokens causally): every row equal to the golden integer
    mode's attention_int."""
    tb = EngineTB(dut)
    tb.cross("both" if preset == "tuned" else "periodic", seed=13)
    await tb.start()
    ports, want, _ = trace_attend_commands(preset, tb.cfg, n_groups=3, max_rows=48)
    assert ports["cmd"]
    await tb.run(ports, [], [], [], want)


@test()
@cocotb.parametrize(crossing=named(CROSSINGS))
async def attend_chunked(dut, crossing):
    """Light attention over sets longer than B holds, as chunked commands (a maximum's pass
    and a sums' pass per row tile, golden.attn.attend_parts): chunks of b_rows and of uneven
    lengths (one token; chunks wholly masked for a step's early rows), row tiles whose step
    positions wrap, K alone or paired in the maximum's pass, all -128, a flat exponential over
    chunks that are not whole column tiles; between whole-set attentions. Every row equals
    golden.attn.attend over the whole set."""
    from golden.attn import chunk_lengths
    tb = EngineTB(dut)
    tb.cross(crossing, seed=14)
    await tb.start()
    n, B, cfg = tb.model.n, tb.model.b_rows, tb.cfg
    rng = np.random.default_rng(14 + list(CROSSINGS).index(crossing))
    unit = ExpUnit.for_config(3e-3, cfg)
    flat = ExpUnit.for_config(1e-6, cfg)        # padding let into a row weighs nearly 1
    ports, want = empty_ports(), []
    want += attend_command(ports, random_int8(rng, (5, 16)), random_int8(rng, (9, 16)),
                           random_int8(rng, (9, 16)), 5, unit, cfg)
    for m, d, L, c, lengths, pairs, kind, u in (
            (3 * 5, 16, B + B // 2 + 3, 5, None, 0, "uniform", unit),
            (n + 1, 13, B + 2, 0, [1, B, 1], 1, "uniform", unit),
            (6, tb.model.score_k_max, B + 7, 3, None, 1, "min", unit),
            (2 * 7, 20, 3 * n + 1, 7, [n + 1, 2 * n - 1, 1], 0, "uniform", flat)):
        want += attend_chunked_command(ports, random_int8(rng, (m, d), kind),
                                       random_int8(rng, (L, d), kind),
                                       random_int8(rng, (L, d), kind), c, u, cfg,
                                       lengths or chunk_lengths(L, B), pairs=bool(pairs))
    want += attend_command(ports, random_int8(rng, (6, 16)), random_int8(rng, (11, 16)),
                           random_int8(rng, (11, 16)), 3, unit, cfg, pairs=True)
    perf = await tb.run(ports, [], [], [], want)
    assert perf["refused"] == 0


@test()
@cocotb.parametrize(preset=named(["paper", "tuned"]))
async def real_trace_long_attention(dut, preset):
    """The bundled trace's attended sets longer than B, as chunked commands of b_rows tokens:
    every row equal to golden.numerics.attention_int over the whole set."""
    tb = EngineTB(dut)
    tb.cross("both" if preset == "paper" else "periodic", seed=15)
    await tb.start()
    ports, want, _ = trace_attend_commands(preset, tb.cfg, n_groups=1 if SHORT else 2,
                                           max_rows=2 * tb.model.n, long=True)
    await tb.run(ports, [], [], [], want)


@test()
async def refused_commands(dut):
    """Zero sizes, rows longer than the buffer, too many B rows, an unknown kind, a hash of the
    wrong width, scores that would not fit, a causal step longer than the attended set, bad
    chunks of a longer set: each refused (its beats dropped, error set with its code), and
    the next command runs."""
    tb = EngineTB(dut)
    tb.cross("both", seed=5)
    await tb.start()
    n, K, L = tb.model.n, tb.model.k_buf, tb.model.b_rows
    rng = np.random.default_rng(5)
    sk = tb.model.score_k_max
    cases = ((0, 3, 0, 4, 0, 1), (0, 2, K + 1, 4, 0, 1), (0, 2, 8, L + 1, 0, 1),
             (5, 2, 8, 4, 0, 2), (1, 2, 8, tb.model.n_hp - 1, 0, 3), (2, 2, sk + 1, 4, 0, 1),
             (3, 2, sk + 1, 4, 0, 1), (3, 2, 8, 4, 5, 1),
             # chunks of a longer set: more rows than a tile, past the set's end, a step
             # position past the step, a part of another kind's command
             (3, n + 1, 8, 4, 0, 1, dict(part=1, span=9)),
             (3, 2, 8, 4, 0, 1, dict(part=2, span=3)),
             (3, 2, 8, 4, 3, 1, dict(part=1, span=9, pos0=3)),
             (0, 2, 8, 4, 0, 1, dict(part=2, span=9)))
    for kind, m, k, l, c, code, *extra in cases:
        await tb.reset()
        ports, want = empty_ports(), []
        bad_command(ports, kind, m, k, l, n, causal=c, extra=extra[0] if extra else None)
        want += gemm_command(ports, random_int8(rng, (5, 7)), random_int8(rng, (6, 7)), n)
        perf = await tb.run(ports, want, [])
        await ReadOnly()
        assert int(dut.error.value) == 1 and int(dut.error_code.value) == code
        await RisingEdge(dut.clk)
        assert perf["refused"] == 1 and perf["commands"] == 2


@test()
async def reset_mid_command(dut):
    """A reset in the middle of a command leaves the engine clean for the next one."""
    tb = EngineTB(dut)
    tb.cross("both", seed=6)
    await tb.start()
    n = tb.model.n
    rng = np.random.default_rng(6)
    ports = empty_ports()
    gemm_command(ports, random_int8(rng, (3 * n, 40)), random_int8(rng, (2 * n, 40)), n)
    sends = [cocotb.start_soon(tb.source[p].send(ports[p])) for p in SOURCES]
    tb.dut.o_gemm__ready.value = 1
    await ClockCycles(dut.clk, 300)
    for s in sends:
        s.cancel()
    await tb.reset(3)
    ports, want = empty_ports(), []
    want += gemm_command(ports, random_int8(rng, (n, 9)), random_int8(rng, (n, 9)), n)
    await tb.run(ports, want, [])


@test()
async def command_cycles(dut):
    """Every stream valid and every output ready: a GEMM takes command_cycles."""
    tb = EngineTB(dut)
    await tb.start()
    n = tb.model.n
    rng = np.random.default_rng(7)
    for m, k, l in ((4 * n, 64, 2 * n), (n + 1, 20, 3)):
        ports = empty_ports()
        want = gemm_command(ports, random_int8(rng, (m, k)), random_int8(rng, (l, k)), n)
        t0 = len(tb.source["cmd"].stamps)
        await tb.run(ports, want, [])
        cycles = tb.sink["o_gemm"].stamps[-1] - tb.source["cmd"].stamps[t0]
        assert cycles == tb.model.command_cycles(m, k, l), (m, k, l, cycles)
