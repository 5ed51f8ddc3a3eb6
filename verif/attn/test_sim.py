"""Attention engine, fast tier: the systolic array and the exp unit in the Amaranth simulator
against the golden models."""
import numpy as np
import pytest
from amaranth.sim import Simulator

from golden.numerics import ExpUnit as GoldenExp
from golden.attn import exp_registers
from rtl.attn.array import SystolicArray
from rtl.attn.exp import ExpUnit
from verif.lib.amaranth_sim import run_streams, stream_through
from verif.lib.pauses import CROSSINGS
from verif.lib.scoreboard import compare
from vrex.config import Config
from vrex.rules import ParameterError

from .model import gemm_case, tile_beats, tile_rows


def run_array(cfg, tiles, *, cross="none", seed=0):
    dut = SystolicArray.from_config(cfg)
    got, when, perf = run_streams(dut, tile_beats(tiles, dut.n), len(tiles) * dut.n, cross=cross,
                                  seed=seed, max_cycles=100_000)
    compare(got, tile_rows(tiles, dut.n), what="row")
    assert perf["tiles"] == len(tiles) and perf["rows"] == len(tiles) * dut.n
    assert perf["beats"] == sum(dut.tile_beats(t[2].shape[1]) for t in tiles)
    return got, when, perf


ARRAYS = {"n4": Config(attn_n=4), "n8": Config(attn_n=8), "n16": Config(attn_n=16),
          "n2": Config(attn_n=2), "n1": Config(attn_n=1)}


@pytest.mark.parametrize("cross", CROSSINGS)
@pytest.mark.parametrize("name", ["n4", "n8", "n1"])
def test_gemm_tiles(name, cross):
    """M, K, L not multiples of n; tiles back to back under idle and back-pressure."""
    cfg = ARRAYS[name]
    rng = np.random.default_rng(cfg.attn_n * 10 + list(CROSSINGS).index(cross))
    n = cfg.attn_n
    tiles = gemm_case(rng, 2 * n + 1, 13, n + 3, n)
    run_array(cfg, tiles, cross=cross, seed=1)


@pytest.mark.parametrize("name", ARRAYS)
@pytest.mark.parametrize("k", [1, 2, 3, 17])
def test_short_and_odd_reductions(name, k):
    """K = 1, K < n (padded to n beats), odd K."""
    cfg = ARRAYS[name]
    rng = np.random.default_rng(k)
    run_array(cfg, gemm_case(rng, cfg.attn_n + 1, k, 2 * cfg.attn_n - 1, cfg.attn_n),
              cross="both")


@pytest.mark.parametrize("kind", ["min", "max", "sparse"])
def test_extremes(kind):
    """All -128 (the largest positive products), all 127, mostly zero; K = attn_k_max would
    take too long here: the accumulator width rule is tested on its own."""
    cfg = Config(attn_n=4)
    run_array(cfg, gemm_case(np.random.default_rng(0), 5, 300, 6, 4, kind))


def test_back_to_back_tiles_take_one_beat_a_cycle():
    """No idle, no back-pressure: the array takes a beat every cycle (utilisation 100% while
    streaming) and the last row comes tile_cycles after the first beat."""
    cfg = Config(attn_n=4)
    dut = SystolicArray.from_config(cfg)
    for k in (4, 9, 2):
        tiles = gemm_case(np.random.default_rng(k), 8, k, 8, 4)
        got, when, perf = run_array(cfg, tiles)
        assert perf["held"] == 0 and perf["starved"] == 0
        assert when[-1] == dut.tile_cycles(k, len(tiles)), (k, when[-1])


@pytest.mark.parametrize("name", ["n4", "n8", "n1"])
@pytest.mark.parametrize("k", [1, 6])
def test_blocked_output_waits_at_a_tiles_last_beat(name, k):
    """A consumer that takes nothing for a long stretch: the array never freezes, it takes
    beats until a tile's ``last`` would owe more rows than the queue holds, and waits there
    (``held``); rows owed never exceed the queue; released, every row comes out right."""
    cfg = ARRAYS[name]
    dut = SystolicArray.from_config(cfg)
    n, blocked = dut.n, 40 * cfg.attn_n + 40
    tiles = gemm_case(np.random.default_rng(k + n), 6 * n, k, 2 * n, n)   # 12 tiles
    beats = tile_beats(tiles, n)
    per_tile = dut.tile_beats(k)
    state = {"cycle": 0, "lasts": 0, "lasts_blocked": 0}

    def snk_paused():
        state["cycle"] += 1
        assert state["cycle"] < 4 * (blocked + len(beats)), "rows lost: the array stalled"
        return state["cycle"] <= blocked

    def taken(ctx, j):
        if beats[j - 1]["last"]:
            state["lasts"] += 1
            if state["cycle"] <= blocked:
                state["lasts_blocked"] += 1

    got = []

    async def bench(ctx):
        got.extend(await stream_through(ctx, dut.i, dut.o, beats, len(tiles) * n,
                                        snk_paused=snk_paused, on_taken=taken))
        state["perf"] = {f: ctx.get(getattr(dut.perf, f)) for f in dut.PERF}

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    compare(got, tile_rows(tiles, n), what="row")
    assert state["lasts"] == len(tiles)
    # while nothing drains, only the tiles whose rows the queue and the output register hold
    # are let through
    held_tiles = (dut.queue_rows + dut.output_rows) // n
    assert state["lasts_blocked"] == held_tiles, state
    assert state["perf"]["held"] >= blocked - (held_tiles + 1) * per_tile
    assert state["perf"]["tiles"] == len(tiles)
    assert state["perf"]["busy"] >= blocked     # tiles pend all along: busy counts every cycle


@pytest.mark.parametrize("kw, msg", [
    (dict(n=12), "n must be a positive power of two, not 12"),
    (dict(n=128), "n must be at most 64, not 128"),
    (dict(acc_bits=20, k_max=4096), "acc_bits must be at least 28 for k_max 4096 (int8 "
                                    "products summed), not 20"),
    (dict(k_max=0), "k_max must be a positive integer, not 0"),
    (dict(valid_copies=-1), "valid_copies must be an integer from 0 to 64, not -1"),
])
def test_array_bad_parameters(kw, msg):
    with pytest.raises(ParameterError) as e:
        SystolicArray(**{**Config().block_params("attn_array"), **kw})
    assert str(e.value) == msg


def run_exp(cfg, xs, unit, *, cross="none"):
    dut = ExpUnit.from_config(cfg)
    n = dut.lanes
    xs = list(xs) + [0] * (-len(xs) % n)
    beats = [{"x": xs[i:i + n]} for i in range(0, len(xs), n)]
    regs = [(getattr(dut, k), v) for k, v in exp_registers(unit).items()]
    got, when, _ = run_streams(dut, beats, len(beats), regs=regs, cross=cross, seed=2,
                               read={})
    want = unit(np.array(xs)).reshape(-1, n)
    compare([{"w": g["w"]} for g in got], [{"w": [int(v) for v in w]} for w in want])
    return got, when


@pytest.mark.parametrize("alpha", [2.0 ** -8 / np.log2(np.e), 1e-3, 0.0123, 0.7])
def test_exp_every_table_index(alpha):
    """Every table index and every shift from 0 past weight_bits, for several β."""
    cfg = Config()
    unit = GoldenExp.for_config(alpha, cfg)
    # x values that reach every n: n = ceil(-x·β·2**frac) ... sweep x densely near 0 and
    # sparsely out to the input range
    dense = -np.arange(0, 4096)
    sparse = -np.unique(np.geomspace(1, 2 ** 22, 400).astype(np.int64))
    xs = np.concatenate([dense, sparse, [-(2 ** 22)]])
    n_vals = -((xs * unit.beta_m) >> (unit.beta_s - unit.frac_bits))
    if alpha < 0.01:
        assert set(range(1 << cfg.exp_frac_bits)) <= set(int(v) % 256 for v in n_vals)
    run_exp(cfg, xs, unit, cross="both")
