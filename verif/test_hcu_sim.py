"""HCU, fast tier: the Amaranth simulator against the golden clusterer."""
import numpy as np
import pytest

from rtl.hcu import HashClusterUnit

from .hcu_model import Token, expected, frames, structured_hashes
from .sim_streams import run_streams

def run(dut, tokens, *, th_hd, max_age, idle=0.0, stall=0.0, seed=0):
    """Drive ``tokens`` with idle cycles, take outputs under back-pressure; return beats,
    the cycle of each output transfer, and the final counters."""
    regs = [(dut.th_hd, th_hd), (dut.max_age, 0 if max_age is None else max_age),
            (dut.age_limit, max_age is not None)]
    beats = [{"hash": t.hash, "layer": t.layer, "step": t.step, "first": t.first,
              "last": t.last} for t in tokens]
    got, when, perf = run_streams(dut, beats, len(tokens), regs=regs, idle=idle, stall=stall,
                                  seed=seed, max_cycles=200 * (len(tokens) + 10) *
                                  max(1, dut.window // dut.lanes))
    for g in got:
        g["opened"] = bool(g["opened"])
    return got, when, perf


def check(dut, tokens, *, th_hd, max_age, **kw):
    got, when, perf = run(dut, tokens, th_hd=th_hd, max_age=max_age, **kw)
    want = expected(tokens, n_hp=dut.n_hp, window=dut.window, th_hd=th_hd, max_age=max_age,
                    count_bits=dut.count_bits)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"token {k}: got {g}, want {w}"
    assert len(got) == len(want)
    assert perf["opened"] == sum(w["opened"] for w in want)
    assert perf["joined"] == len(want) - perf["opened"]
    return got, when, perf


SWEEP = [dict(n_hp=16, lanes=4, window=16), dict(n_hp=32, lanes=4, window=64),
         dict(n_hp=32, lanes=16, window=64), dict(n_hp=64, lanes=8, window=32),
         dict(n_hp=8, lanes=1, window=4), dict(n_hp=32, lanes=16, window=16)]


@pytest.mark.parametrize("params", SWEEP, ids=lambda p: "-".join(f"{k}{v}" for k, v in p.items()))
@pytest.mark.parametrize("idle, stall", [(0.0, 0.0), (0.5, 0.0), (0.0, 0.6), (0.4, 0.4)])
def test_random_streams(params, idle, stall):
    dut = HashClusterUnit(**params)
    rng = np.random.default_rng(params["window"] + params["n_hp"] + int(idle * 10 + stall * 100))
    n = 3 * params["window"] + 20                    # enough to wrap the window
    hashes = structured_hashes(rng, n, params["n_hp"], flips=params["n_hp"] // 4)
    steps = np.sort(rng.integers(0, 12, n))
    th = params["n_hp"] // 4
    check(dut, frames(hashes, steps), th_hd=th, max_age=3, idle=idle, stall=stall, seed=7)


@pytest.mark.parametrize("max_age", [None, 0, 2])
def test_directed_cases(max_age):
    dut = HashClusterUnit(n_hp=8, lanes=4, window=8)
    toks = [Token(0x00, step=0, first=1), Token(0x00, step=0), Token(0x00, step=0),    # equal
            Token(0x03, step=1, first=1),            # distance Th_hd - 1 (th 3): joins
            Token(0x07, step=1),                      # distance Th_hd: opens
            Token(0xFF, step=2, first=1), Token(0xF0, step=2), Token(0x0F, step=2),
            Token(0x3C, step=3, first=1),             # ties between clusters
            Token(0x00, step=5, first=1),             # clusters aged out at A = 2
            ] + [Token(1 << (i % 8) | 0x80 * (i % 2), step=6, first=int(i == 0))
                 for i in range(12)]                  # all different: the window wraps
    check(dut, toks, th_hd=3, max_age=max_age)


def test_ages_exactly_at_limit():
    dut = HashClusterUnit(n_hp=8, lanes=2, window=4)
    toks = [Token(0x00, step=0, first=1), Token(0x01, step=4, first=1),
            Token(0x01, step=10, first=1), Token(0x01, step=15, first=1)]
    got, _, _ = check(dut, toks, th_hd=3, max_age=5)
    assert [g["opened"] for g in got] == [True, False, True, False]


def test_count_saturates():
    dut = HashClusterUnit(n_hp=8, lanes=2, window=4, count_bits=2)
    got, _, _ = check(dut, [Token(0x11, first=int(i == 0)) for i in range(6)], th_hd=2,
                      max_age=None)
    assert [g["count"] for g in got] == [1, 2, 3, 3, 3, 3]


def test_layer_contexts_are_separate():
    dut = HashClusterUnit(n_hp=16, lanes=4, window=16, layers=3)
    rng = np.random.default_rng(3)
    hashes = structured_hashes(rng, 150, 16, flips=5)
    layers = [(i // 10) % 3 for i in range(150)]      # switches every 10 tokens, mid-step
    steps = [i // 30 for i in range(150)]
    check(dut, frames(hashes, steps, layers), th_hd=4, max_age=None, idle=0.3, stall=0.3)


def test_throughput_full_window():
    """With the window full and o always ready, a token takes cycles_per_token(W) cycles."""
    dut = HashClusterUnit(n_hp=32, lanes=4, window=32)
    rng = np.random.default_rng(5)
    hashes = [int(x) for x in rng.integers(0, 2**32, 80, dtype=np.uint64)]
    toks = frames(hashes, [0] * 80)
    got, when, perf = check(dut, toks, th_hd=2, max_age=None)
    gaps = np.diff(when)
    assert (gaps[40:] == dut.cycles_per_token(32)).all()
    assert (gaps[:3] == [dut.cycles_per_token(1), dut.cycles_per_token(2),
                         dut.cycles_per_token(3)]).all()
    assert perf["stalled"] == 0
    assert perf["comparisons"] == sum(min(k, 32) for k in range(80))


@pytest.mark.parametrize("kw, err, msg", [
    (dict(lanes=12), ValueError, "lanes must be a positive power of two, not 12"),
    (dict(window=100), ValueError, "window must be a positive power of two, not 100"),
    (dict(window=8, lanes=16), ValueError, "window must be at least lanes (16), not 8"),
    (dict(n_hp=65), ValueError, "n_hp must be at most 64, not 65"),
    (dict(n_hp=0), TypeError, "n_hp must be a positive integer, not 0"),
    (dict(layers=2.0), TypeError, "layers must be a positive integer, not 2.0"),
    (dict(id_bits=10), ValueError, "id_bits must exceed log2(window) (10), not 10"),
])
def test_bad_parameters(kw, err, msg):
    with pytest.raises(err) as e:
        HashClusterUnit(**kw)
    assert str(e.value) == msg


def test_properties():
    dut = HashClusterUnit(n_hp=16, lanes=8, window=64, layers=2)
    assert (dut.n_hp, dut.lanes, dut.window, dut.layers) == (16, 8, 64, 2)
    assert dut.memory_bits == 2 * 64 * (16 + 16 + 16)
    assert dut.cycles_per_token(0) == 4 and dut.cycles_per_token(64) == 8 + 3
    with pytest.raises(AttributeError):
        dut.lanes = 4
