"""The attention engine, fast tier: commands in the Amaranth simulator against the golden
models (GEMM rows, hash words in the HCU's input format, refused commands)."""
import numpy as np
import pytest

from golden.numerics import ExpUnit, hyperplanes
from rtl import AttentionEngine
from verif.lib.amaranth_sim import run_ports
from verif.lib.pauses import CROSSINGS
from verif.lib.scoreboard import compare
from vrex.config import Config
from vrex.rules import ParameterError

from .model import (attend_chunked_command, attend_command, bad_command, empty_ports, gemm_command, hash_command,
                    random_int8, score_command, trace_attend_commands, trace_score_commands)


def run(cfg, ports, want_gemm, want_hash, want_score=(), want_attn=(), *, cross="none",
        seed=0):
    dut = AttentionEngine.from_config(cfg)
    sinks = {"o_gemm": len(want_gemm), "o_hash": len(want_hash),
             "o_score": len(want_score), "o_attn": len(want_attn)}
    got, when, perf = run_ports(dut, ports, sinks, cross=cross, seed=seed,
                                read={"error": dut.error, "error_code": dut.error_code},
                                max_cycles=400_000)
    compare(got["o_gemm"], want_gemm, what="gemm beat")
    compare(got["o_hash"], want_hash, what="hash beat")
    compare(got["o_score"], list(want_score), what="score beat")
    compare(got["o_attn"], list(want_attn), what="attention beat")
    return got, when, perf


def small(n=4, **kw) -> Config:
    return Config(**{"attn_n": n, "attn_k_buf": 64, "attn_b_rows": 32, "n_hp": 16, **kw})


@pytest.mark.parametrize("cross", CROSSINGS)
@pytest.mark.parametrize("n", [4, 8])
def test_gemm_commands(n, cross):
    """GEMMs of sizes that are not multiples of n, back to back, one of them k < n."""
    cfg = small(n)
    rng = np.random.default_rng(n + list(CROSSINGS).index(cross))
    ports, want = empty_ports(), []
    for m, k, l in ((2 * n + 1, 13, n + 3), (3, 2, 5), (n, 64, 32)):
        want += gemm_command(ports, random_int8(rng, (m, k)), random_int8(rng, (l, k)), n)
    _, _, perf = run(cfg, ports, want, [], cross=cross, seed=3)
    assert perf["commands"] == 3 and perf["refused"] == 0 and perf["error"] == 0


@pytest.mark.parametrize("cross", ["none", "both", "periodic"])
@pytest.mark.parametrize("n, n_hp", [(4, 16), (2, 16), (8, 12), (16, 16), (1, 6)])
def test_hash_commands(n, n_hp, cross):
    """Hash words with and without a centring bias, several steps, in the HCU's format; one
    column tile to 8 a token, hyperplanes not a multiple of n."""
    cfg = small(n, n_layers=2, n_hp=n_hp)
    rng = np.random.default_rng(7 + n + n_hp)
    ports, want = empty_ports(), []
    hp = hyperplanes(1, 0, 0, n_hp, 40)
    for step, bias in ((1, None), (2, rng.integers(-3000, 3000, n_hp)), (3, np.zeros(n_hp))):
        keys = random_int8(rng, (9 + step, 40))
        want += hash_command(ports, keys, hp, bias, n, layer=step % 2, step=step)
    _, _, perf = run(cfg, ports, [], want, cross=cross, seed=5)
    assert perf["commands"] == 3 and perf["error"] == 0


@pytest.mark.parametrize("cross", CROSSINGS)
@pytest.mark.parametrize("n, lanes", [(4, 16), (8, 16), (8, 4), (4, 4)])
def test_score_commands(n, lanes, cross):
    """Cluster scoring in the WTU's input format: candidates not a multiple of n or of the
    WTU's lanes, a single candidate, rows shorter than n, and more rows than one row tile
    (the two score-buffer halves alternate), back to back with a GEMM."""
    cfg = small(n, wtu_lanes=lanes)
    rng = np.random.default_rng(10 * n + lanes + list(CROSSINGS).index(cross))
    unit = ExpUnit.for_config(3e-3, cfg)
    ports, want, want_gemm = empty_ports(), [], []
    for m, k, l in ((3, 64, 5), (3 * n + 1, 13, n + 3), (n, 64, 32), (1, 1, 1)):
        want += score_command(ports, random_int8(rng, (m, k)), random_int8(rng, (l, k)),
                              rng.integers(0, 1 << 16, l), unit, cfg)
    want_gemm += gemm_command(ports, random_int8(rng, (5, 7)), random_int8(rng, (6, 7)), n)
    _, _, perf = run(cfg, ports, want_gemm, [], want, cross=cross, seed=4)
    assert perf["commands"] == 5 and perf["error"] == 0


@pytest.mark.parametrize("kind", ["min", "max", "sparse"])
def test_score_extremes(kind):
    """All -128 (the largest scores), all 127, mostly zero (ties at the row maximum) at the
    longest reduction whose scores fit score_bits; a steep exponential that zeroes most
    weights."""
    cfg = small(4, head_dim=64)
    rng = np.random.default_rng(11)
    k = AttentionEngine.from_config(cfg).score_k_max
    ports, want = empty_ports(), []
    for alpha in (3e-3, 0.5):
        unit = ExpUnit.for_config(alpha, cfg)
        want += score_command(ports, random_int8(rng, (6, k), kind),
                              random_int8(rng, (9, k), kind), rng.integers(1, 9, 9), unit, cfg)
    if kind == "min":
        assert want[0]["entry"][0]["score"] == 128 * 128 * k
    run(cfg, ports, [], [], want, cross="both", seed=2)


@pytest.mark.parametrize("preset", ["paper", pytest.param("tuned", marks=pytest.mark.soak)])
def test_score_real_trace(preset):
    """The bundled trace's cluster scoring: every score, weight and count the golden ReSV run
    recorded for the WTU."""
    cfg = Config(attn_n=4, attn_b_rows=128)
    ports, want, _, _ = trace_score_commands(preset, cfg, n_groups=4, max_rows=24)
    assert len(ports["cmd"]) == 4
    run(cfg, ports, [], [], want, cross="both", seed=6)


@pytest.mark.parametrize("cross", CROSSINGS)
@pytest.mark.parametrize("n", [4, 8])
def test_attend_commands(n, cross):
    """Light attention: sizes not multiples of n, causal steps of several lengths and none,
    several query heads a command (the causal position wraps), back to back with scoring and
    a GEMM."""
    cfg = small(n)
    rng = np.random.default_rng(20 + n + list(CROSSINGS).index(cross))
    unit = ExpUnit.for_config(3e-3, cfg)
    ports, want_attn, want_score = empty_ports(), [], []
    for m, d, l, c, pairs in ((3, 64, 5, 3, 0), (2 * n + 1, 13, n + 3, 0, 1),
                              (3 * 5, 16, 32, 5, 0), (7, 20, 11, 7, 1)):
        want_attn += attend_command(ports, random_int8(rng, (m, d)), random_int8(rng, (l, d)),
                                    random_int8(rng, (l, d)), c, unit, cfg, pairs=pairs)
    want_score += score_command(ports, random_int8(rng, (n + 1, 20)),
                                random_int8(rng, (7, 20)), rng.integers(1, 9, 7), unit, cfg)
    want_gemm = gemm_command(ports, random_int8(rng, (5, 7)), random_int8(rng, (6, 7)), n)
    _, _, perf = run(cfg, ports, want_gemm, [], want_score, want_attn, cross=cross, seed=7)
    assert perf["commands"] == 6 and perf["error"] == 0


@pytest.mark.parametrize("case", ["one_token", "no_fetched", "min", "max", "steep", "wide"])
def test_attend_corners(case):
    """A row attending to one token (the step's first token with nothing before it), an
    empty fetched set (only the step's own tokens), all -128 inputs (the largest scores and
    P·V sums), all 127, a steep exponential (most weights 0), every row attending to as many
    tokens as B holds at the longest head dimension."""
    cfg = small(4, head_dim=64)
    rng = np.random.default_rng(30)
    ports, want = empty_ports(), []
    L, K = 32, AttentionEngine.from_config(cfg).score_k_max
    m, d, l, c, kind, alpha = {"one_token": (4, 16, 1, 1, "uniform", 3e-3),
                               "no_fetched": (2 * 6, 16, 6, 6, "uniform", 3e-3),
                               "min": (5, K, L, 5, "min", 3e-3),
                               "max": (5, K, L, 0, "max", 3e-3),
                               "steep": (9, K, L, 3, "uniform", 0.5),
                               "wide": (6, K, L, 0, "uniform", 1e-4)}[case]
    unit = ExpUnit.for_config(alpha, cfg)
    want += attend_command(ports, random_int8(rng, (m, d), kind), random_int8(rng, (l, d), kind),
                           random_int8(rng, (l, d), kind), c, unit, cfg)
    run(cfg, ports, [], [], [], want, cross="both", seed=8)
    if case == "min":
        assert all(v == -128 << cfg.out_frac_bits for b in want for v in b["o"])


@pytest.mark.parametrize("frac", [0, 5, 12])
def test_attend_output_formats(frac):
    """Other output fractions: the dividers' quotient width follows out_frac_bits (odd ones
    round up to whole divider steps)."""
    cfg = small(4, out_frac_bits=frac)
    rng = np.random.default_rng(40 + frac)
    unit = ExpUnit.for_config(5e-3, cfg)
    ports = empty_ports()
    want = attend_command(ports, random_int8(rng, (9, 20)), random_int8(rng, (13, 20)),
                          random_int8(rng, (13, 20)), 3, unit, cfg)
    run(cfg, ports, [], [], [], want, cross="both", seed=10)


# make soak (the Verilog tier attends the same commands at its points, and the core both tiers
# the bundled trace's whole heads)
@pytest.mark.soak
@pytest.mark.parametrize("preset", ["paper", "tuned"])
def test_attend_real_trace(preset):
    """The bundled trace's light attention: sinks, the golden run's selection and the step's
    own tokens, every output row equal to golden.numerics.attention_int."""
    cfg = Config(attn_n=8)
    ports, want, _ = trace_attend_commands(preset, cfg, n_groups=2, max_rows=8)
    run(cfg, ports, [], [], [], want, cross="both", seed=9)


# one of the ten points in `make test` (idle cycles and back-pressure together), all ten in
# `make soak`: at n = 4 one point takes 2-3 minutes. The suite's Verilog tier runs the same
# chunked commands under every crossing at n = 4 and 8 (verif/attn/tb.py: attend_chunked),
# and this tier n = 4's through test_attend_chunked_corners
CHUNKED_IN_SUITE = {(8, "both")}


@pytest.mark.parametrize("n, cross", [
    pytest.param(n, c, marks=() if (n, c) in CHUNKED_IN_SUITE else pytest.mark.soak)
    for n in (4, 8) for c in CROSSINGS])
def test_attend_chunked(n, cross):
    """Light attention over sets longer than B holds (b_rows 32), as chunked commands
    (golden.attn.attend_parts): several row tiles whose step positions wrap, chunks of b_rows
    and of random lengths (one token; chunks wholly masked for a step's early rows), K alone
    or K and V paired in the maximum's pass; between whole-set attentions, a score command
    and a GEMM (their state untouched). Every row equals golden.attn.attend over the whole
    set."""
    from golden.attn import chunk_lengths
    cfg = small(n)
    rng = np.random.default_rng(50 + n + list(CROSSINGS).index(cross))
    unit = ExpUnit.for_config(3e-3, cfg)
    ports, want_attn = empty_ports(), []
    want_attn += attend_command(ports, random_int8(rng, (5, 16)), random_int8(rng, (9, 16)),
                                random_int8(rng, (9, 16)), 5, unit, cfg)
    for m, d, L, c, lengths, pairs in ((3 * 5, 16, 70, 5, None, 0),
                                       (2 * n + 1, 13, 40, 0, [1, 20, 7, 12], 1),
                                       (7, 64, 33, 7, [32, 1], 0),
                                       (2 * 9, 20, 41, 9, [30, 2, 9], 1)):
        lengths = lengths or chunk_lengths(L, 32)
        want_attn += attend_chunked_command(ports, random_int8(rng, (m, d)),
                                            random_int8(rng, (L, d)), random_int8(rng, (L, d)),
                                            c, unit, cfg, lengths, pairs=bool(pairs))
    want_score = score_command(ports, random_int8(rng, (n + 1, 20)),
                               random_int8(rng, (7, 20)), rng.integers(1, 9, 7), unit, cfg)
    want_attn += attend_command(ports, random_int8(rng, (6, 16)), random_int8(rng, (11, 16)),
                                random_int8(rng, (11, 16)), 3, unit, cfg, pairs=True)
    want_gemm = gemm_command(ports, random_int8(rng, (5, 7)), random_int8(rng, (6, 7)), n)
    _, _, perf = run(cfg, ports, want_gemm, [], want_score, want_attn, cross=cross, seed=11)
    assert perf["refused"] == 0 and perf["error"] == 0


# min (all -128; max is its mirror, all 127) in make soak
@pytest.mark.parametrize("case", [pytest.param("min", marks=pytest.mark.soak), "max", "steep",
                                  "flat", "long"])
def test_attend_chunked_corners(case):
    """Chunked attention at the extremes: all -128 and all 127 at the longest head dimension
    (the largest scores and sums), a steep exponential (most weights 0), a flat one over
    chunks that are not whole column tiles, before the step's tokens (a padding column let
    into a row's limit weighs nearly 1 here: the bundled trace found that), a set eight
    times longer than B."""
    from golden.attn import chunk_lengths
    cfg = small(4, head_dim=64)
    rng = np.random.default_rng(31)
    K = AttentionEngine.from_config(cfg).score_k_max
    m, d, L, c, kind, alpha, lengths = {
        "min": (6, K, 80, 3, "min", 3e-3, None),
        "max": (5, K, 64, 0, "max", 3e-3, None),
        "steep": (9, K, 50, 9, "uniform", 0.5, None),
        "flat": (6, K, 50, 3, "uniform", 1e-6, [13, 30, 7]),
        "long": (4, 16, 256, 4, "uniform", 1e-3, None)}[case]
    unit = ExpUnit.for_config(alpha, cfg)
    ports = empty_ports()
    want = attend_chunked_command(ports, random_int8(rng, (m, d), kind),
                                  random_int8(rng, (L, d), kind), random_int8(rng, (L, d), kind),
                                  c, unit, cfg, lengths or chunk_lengths(L, 32))
    run(cfg, ports, [], [], [], want, cross="both", seed=12)
    if case == "min":
        assert all(v == -128 << cfg.out_frac_bits for b in want for v in b["o"])


@pytest.mark.soak
@pytest.mark.parametrize("preset", ["paper", "tuned"])
def test_attend_chunked_real_trace(preset):
    """The bundled trace's attended sets longer than the default B (256 tokens) as chunked
    commands of 256 tokens: every output row equal to golden.numerics.attention_int over the
    whole set (make soak; the suite's chunked runs are the synthetic sets and the corners
    above, and the core's chunked heads, verif/core)."""
    cfg = Config(attn_n=8)
    ports, want, picks = trace_attend_commands(preset, cfg, n_groups=1, max_rows=8, long=True)
    assert int(picks[0][5].sum()) > cfg.attn_b_rows
    run(cfg, ports, [], [], [], want, cross="both", seed=13)


def test_refused_commands_are_dropped_and_the_next_runs():
    cfg = small(4)
    rng = np.random.default_rng(2)
    ports, want = empty_ports(), []
    bad_command(ports, 0, 3, 0, 4, 4)            # k = 0
    bad_command(ports, 0, 2, 65, 4, 4)           # k > k_buf: its 17-beat rows are dropped
    bad_command(ports, 0, 2, 8, 33, 4)           # l > b_rows
    bad_command(ports, 5, 2, 8, 4, 4)            # unknown kind
    bad_command(ports, 1, 2, 8, 12, 4)           # a hash of 12 bits, not n_hp = 16
    bad_command(ports, 3, 2, 64 + 1, 5, 4)       # scores of k > score_k_max would not fit
    bad_command(ports, 3, 2, 16, 5, 4, causal=6)  # more step tokens than attended tokens
    bad_command(ports, 2, 2, 64 + 1, 5, 4)       # scores of k > score_k_max would not fit
    # chunks of a longer set: more rows than a row tile, a chunk past the set's end, a step
    # position past the step, a part that is not one, a part of another kind's command
    for kind, m, part, span, causal, pos0 in ((3, 5, 1, 40, 0, 0), (3, 2, 2, 4, 0, 0),
                                              (3, 2, 1, 40, 3, 3), (3, 2, 3, 40, 0, 0),
                                              (0, 2, 1, 40, 0, 0)):
        bad_command(ports, kind, m, 16, 5, 4, causal=causal,
                    extra=dict(part=part, span=span, pos0=pos0, pairs=int(m != 5)))
    want += gemm_command(ports, random_int8(rng, (5, 7)), random_int8(rng, (6, 7)), 4)
    _, _, perf = run(cfg, ports, want, [], cross="both")
    assert perf["refused"] == 13 and perf["commands"] == 14
    assert perf["error"] == 1 and perf["error_code"] == 1      # the last refusal's code


def test_command_cycles():
    """Every stream valid and every output ready: a command takes command_cycles."""
    cfg = small(4)
    dut = AttentionEngine.from_config(cfg)
    rng = np.random.default_rng(4)
    for m, k, l in ((8, 16, 8), (13, 20, 9), (4, 3, 4)):
        ports = empty_ports()
        want = gemm_command(ports, random_int8(rng, (m, k)), random_int8(rng, (l, k)), 4)
        _, when, perf = run(cfg, ports, want, [])
        assert when["o_gemm"][-1] == dut.command_cycles(m, k, l), (m, k, l)
    hp = hyperplanes(1, 0, 0, cfg.n_hp, 20)
    for m in (5, 12):                   # a hash: its biases first, its rows through h1
        ports = empty_ports()
        want = hash_command(ports, random_int8(rng, (m, 20)), hp, None, 4)
        _, when, _ = run(cfg, ports, [], want)
        assert when["o_hash"][-1] == dut.command_cycles(m, 20, cfg.n_hp, hash_=True), m


@pytest.mark.parametrize("n, d, m, l, pairs", [
    (4, 16, 4, 17, 1), (4, 32, 1, 9, 1), (4, 8, 3, 3, 0), (8, 16, 8, 5, 1),
    (8, 64, 5, 37, 0), (8, 32, 7, 20, 1), (8, 8, 1, 1, 0)])
def test_part_command_cycles(n, d, m, l, pairs):
    """A chunked attention's commands (three chunks of l tokens, one row tile of m rows),
    every stream valid: each maximum's command and each sums' command but the final one
    takes golden.cycles.part_cycles (the cycle model's engine term for sets longer than B)."""
    from golden.cycles import part_cycles
    cfg = Config(attn_n=n, attn_k_buf=max(64, d), attn_b_rows=max(32, -(-l // n) * n),
                 n_hp=16, head_dim=d)
    rng = np.random.default_rng(n * d + m + l)
    ports = empty_ports()
    want = attend_chunked_command(ports, random_int8(rng, (m, d)), random_int8(rng, (3 * l, d)),
                                  random_int8(rng, (3 * l, d)), 0,
                                  ExpUnit.for_config(3e-3, cfg), cfg, [l] * 3, pairs=bool(pairs))
    _, when, _ = run(cfg, ports, [], [], want_attn=want)
    assert len(when["cmd"]) == 6
    took = np.diff(when["cmd"]).tolist()
    assert took == [part_cycles(n, d, m, l, 1, bool(pairs))] * 3 + \
        [part_cycles(n, d, m, l, 2)] * 2, took


@pytest.mark.parametrize("kw, msg", [
    (dict(k_buf=30), "k_buf must be a multiple of n (8), not 30"),
    (dict(b_rows=12), "b_rows must be a multiple of n (8), not 12"),
    (dict(k_buf=8192), "k_buf must be at most k_max (4096), not 8192"),
    (dict(n_hp=512), "n_hp must be at most b_rows (256), not 512"),
])
def test_engine_bad_parameters(kw, msg):
    with pytest.raises(ParameterError) as e:
        AttentionEngine(**{**Config().block_params("attn"), **kw})
    assert str(e.value) == msg


def test_engine_n32_elaborates():
    """The paper's larger arrays elaborate: n = 32 with the default buffers (WTU beats half a
    word of scores wide), 32 lanes of A, B and P. Elaboration only (2 s): the netlist checks
    of its conversion (20 s) run on the same code at n = 8 and 16 in the Verilog tier."""
    from amaranth.hdl import Fragment
    dut = AttentionEngine.from_config(Config(attn_n=32))

    def walk(frag, path=()):
        for sub, name, _ in frag.subfragments:
            yield path + (name,)
            yield from walk(sub, path + (name,))
    names = set(walk(Fragment.get(dut, None)))
    assert {("a_lane_31",), ("b_lane_31",), ("p_row_31",)} <= names
    assert ("a_lane_32",) not in names and dut.wtu_lanes < dut.n


@pytest.mark.parametrize("before", ["attend", "gemm", "score"])
def test_hash_after_other_kinds(before):
    """A hash command right after another kind's tiles: the hash words start clean (light
    attention's P·V tiles once left bits in the hash accumulators; the core runs attention
    then hashing every layer)."""
    cfg = Config(n_layers=2, n_q_heads=4, n_kv_heads=2, head_dim=16, attn_b_rows=64)
    rng = np.random.default_rng(61)
    unit = ExpUnit.for_config(3e-3, cfg)
    ports, wa, ws, wg = empty_ports(), [], [], []
    if before == "attend":
        wa = attend_command(ports, random_int8(rng, (20, 16)), random_int8(rng, (26, 16)),
                            random_int8(rng, (26, 16)), 10, unit, cfg, pairs=True)
    elif before == "gemm":
        wg = gemm_command(ports, random_int8(rng, (5, 20)), random_int8(rng, (11, 20)), 8)
    else:
        ws = score_command(ports, random_int8(rng, (20, 16)), random_int8(rng, (10, 16)),
                           rng.integers(1, 9, 10), unit, cfg)
    wh = hash_command(ports, random_int8(rng, (10, 32)), random_int8(rng, (32, 32)), None, 8,
                      layer=1, step=2)
    run(cfg, ports, wg, wh, ws, wa, cross="both", seed=3)
