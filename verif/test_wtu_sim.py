"""WTU, fast tier: the Amaranth simulator against the golden bucketed WiCSum."""
import numpy as np
import pytest

from golden.wtu import Row
from rtl.wtu import WicsumThresholdUnit

from .sim_streams import run_streams
from .wtu_model import all_beats, expected, random_rows

def run(dut, heads, th_r, *, idle=0.0, stall=0.0, seed=0):
    beats = all_beats(heads, dut.lanes)
    thf = round(th_r * (1 << dut.th_r_frac_bits))
    want, ref = expected(heads, th_r_fixed=thf, th_r_frac_bits=dut.th_r_frac_bits,
                         buckets=dut.buckets, row_entries=dut.row_entries, lanes=dut.lanes)
    got, _, info = run_streams(dut, beats, len(want), regs=[(dut.th_r, thf)], idle=idle,
                               stall=stall, seed=seed, settle=10, read={"error": dut.error})
    for k, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"beat {k}: got {g}, want {w}"
    assert len(got) == len(want)
    for f in ("rows", "buckets_visited", "buckets_skipped", "entries_read", "rows_refused"):
        assert info[f] == ref.counters[f], f"counter {f}: {info[f]} != {ref.counters[f]}"
    assert info["error"] == int(any(ref.refused))
    return got, ref, info


SWEEP = [dict(lanes=4, buckets=8, row_entries=64), dict(lanes=16, buckets=16, row_entries=256),
         dict(lanes=4, buckets=32, row_entries=128), dict(lanes=1, buckets=4, row_entries=8),
         dict(lanes=16, buckets=1, row_entries=64)]


@pytest.mark.parametrize("params", SWEEP, ids=lambda p: "-".join(f"{k}{v}" for k, v in p.items()))
@pytest.mark.parametrize("idle, stall", [(0.0, 0.0), (0.4, 0.0), (0.0, 0.5), (0.3, 0.3)])
def test_random_rows(params, idle, stall):
    dut = WicsumThresholdUnit(**params)
    rng = np.random.default_rng(params["row_entries"] + params["buckets"])
    E = params["row_entries"]
    heads = [random_rows(rng, 3, (1, E + 1), kind=k, invalid=0.1)
             for k in ("exp", "flat", "peaky", "uniform")]
    run(dut, heads, 0.3, idle=idle, stall=stall, seed=3)


def test_paper_example():
    """PAPER.md: sum 1000, min 0, max 40, Th_r 0.8: exit at 802 in the bucket 28..30."""
    dut = WicsumThresholdUnit(lanes=4, buckets=16, row_entries=16)
    row = Row([40, 35, 30, 28, 10, 0], [500, 200, 90, 12, 197, 1], [1] * 6)
    got, ref, info = run(dut, [[row]], 0.8)
    assert [g["cluster"] for g in got[:-1]] == [0, 1, 2, 3]
    assert info["buckets_visited"] == 5 and info["buckets_skipped"] == 11


def test_edge_cases():
    dut = WicsumThresholdUnit(lanes=4, buckets=8, row_entries=16)
    heads = [
        [Row([], [], [])],                                           # an empty row
        [Row([5, 5, 5, 5, 5], [9, 9, 9, 9, 9], [1, 2, 3, 4, 5])],     # all equal: max = min
        [Row([3, 1, 2], [0, 0, 0], [1, 1, 1])],                      # zero sum
        [Row([9, 9, 1], [10, 10, 10], [1, 0, 1])],                   # a count of zero
        [Row([7, -8, 3], [1, 1, 1], [1, 1, 1], [False, False, False])],   # nothing valid
        [Row([-(1 << 21)] * 3 + [(1 << 21) - 1], [1, 2, 3, 40000], [65535] * 4)],  # extremes
        [Row([1, 2], [5, 5], [1, 1]), Row([2, 1], [5, 5], [1, 1])],  # union of two rows
    ]
    for th in (0.0, 0.3, 1.0):
        run(dut, heads, th)


def test_long_row_is_refused():
    dut = WicsumThresholdUnit(lanes=4, buckets=8, row_entries=16)
    rng = np.random.default_rng(1)
    heads = [random_rows(rng, 2, 10) + random_rows(rng, 1, 17) + random_rows(rng, 1, 16)]
    _, ref, info = run(dut, heads, 0.3, stall=0.3)
    assert info["rows_refused"] == 1 and info["error"] == 1


def test_row_cycles():
    """With o ready and the input always valid, a row takes row_cycles(n, visited)."""
    dut = WicsumThresholdUnit(lanes=4, buckets=8, row_entries=64)
    rng = np.random.default_rng(2)
    heads = [random_rows(rng, 6, n) for n in (1, 7, 33, 64)]
    _, ref, info = run(dut, heads, 0.3)
    rows = [r for h in heads for r in h]
    want = sum(dut.row_cycles(len(r.score), v) for r, v in zip(rows, ref.visited))
    emit = sum(3 * (-(-max(len(r.score) for r in h) // 4)) + len(ids) + 2
               for h, ids in zip(heads, ref.heads))
    assert info["busy"] == want + emit


@pytest.mark.parametrize("kw, msg", [
    (dict(lanes=12), "lanes must be a positive power of two, not 12"),
    (dict(buckets=12), "buckets must be a positive power of two, not 12"),
    (dict(row_entries=100, lanes=16), "row_entries must be a multiple of lanes (16), not 100"),
    (dict(score_bits=1), "score_bits must be at least 2, not 1"),
])
def test_bad_parameters(kw, msg):
    with pytest.raises(ValueError) as e:
        WicsumThresholdUnit(**kw)
    assert str(e.value) == msg
