"""WTU, fast tier: the Amaranth simulator against the golden block model."""
import numpy as np
import pytest

from golden.wtu import Row
from rtl import WicsumThresholdUnit
from verif.lib.amaranth_sim import run_streams, stream_through
from verif.lib.pauses import CROSSINGS
from verif.lib.scoreboard import compare, compare_counters
from vrex.config import Config
from vrex.rules import ParameterError

from .model import all_beats, expected, random_rows, schedule_rows
from .timing import schedule

COUNTERS = ("rows", "buckets_visited", "buckets_skipped", "entries_read", "rows_refused")


def run(cfg, heads, *, cross="none", seed=0):
    """Drive the heads' rows into the WTU built and set from ``cfg``; compare every output
    beat, the counters and the error flag with the golden model."""
    dut = WicsumThresholdUnit.from_config(cfg)
    want, ref = expected(heads, cfg)
    regs = [(getattr(dut, k), v) for k, v in cfg.block_registers("wtu").items()]
    got, _, info = run_streams(dut, all_beats(heads, dut.lanes), len(want), regs=regs,
                               cross=cross, seed=seed,
                               read={"error": dut.error, "error_code": dut.error_code,
                                     "error_head": dut.error_head,
                                     "error_row": dut.error_row})
    compare(got, want)
    compare_counters(info, {f: ref.counters[f] for f in COUNTERS})
    assert info["error"] == int(any(ref.refused))
    if ref.first_error:
        assert (info["error_code"], info["error_head"], info["error_row"]) == ref.first_error
    return got, ref, info


def point(**kw) -> Config:
    return Config(**{"th_r": 0.3, **kw})


SWEEP = {"l4-b8-p2-e64": point(wtu_lanes=4, buckets=8, wtu_pass_buckets=2,
                                wtu_row_entries=64),
         "l16-b16-e256": point(wtu_lanes=16, buckets=16, wtu_row_entries=256),
         "l4-b32-p8-e128": point(wtu_lanes=4, buckets=32, wtu_pass_buckets=8,
                                 wtu_row_entries=128),
         "l8-b16-p1-e128": point(wtu_lanes=8, buckets=16, wtu_pass_buckets=1,
                                 wtu_row_entries=128),
         "l1-b4-e8": point(wtu_lanes=1, buckets=4, wtu_row_entries=8),
         "l16-b1-e64": point(wtu_lanes=16, buckets=1, wtu_row_entries=64)}


@pytest.mark.parametrize("cross", CROSSINGS)
@pytest.mark.parametrize("name", SWEEP)
def test_random_rows(name, cross):
    cfg = SWEEP[name]
    E = cfg.wtu_row_entries
    rng = np.random.default_rng(E + cfg.buckets)
    heads = [random_rows(rng, 3, (1, E + 1), kind=k, invalid=0.1)
             for k in ("exp", "flat", "peaky", "uniform")]
    run(cfg, heads, cross=cross, seed=3)


def test_paper_example():
    """PAPER.md: sum 1000, min 0, max 40, Th_r 0.8: exit at 802 in the bucket 28..30."""
    cfg = point(wtu_lanes=4, buckets=16, wtu_row_entries=16, th_r=0.8)
    row = Row([40, 35, 30, 28, 10, 0], [500, 200, 90, 12, 197, 1], [1] * 6)
    got, ref, info = run(cfg, [[row]])
    assert [g["cluster"] for g in got[:-1]] == [0, 1, 2, 3]
    assert info["buckets_visited"] == 5 and info["buckets_skipped"] == 11


@pytest.mark.parametrize("th_r", [0.0, 0.3, 1.0])
def test_edge_cases(th_r):
    cfg = point(wtu_lanes=4, buckets=8, wtu_row_entries=16, th_r=th_r)
    heads = [
        [Row([], [], [])],                                           # an empty row
        [Row([5, 5, 5, 5, 5], [9, 9, 9, 9, 9], [1, 2, 3, 4, 5])],     # all equal: max = min
        [Row([3, 1, 2], [0, 0, 0], [1, 1, 1])],                      # zero sum
        [Row([9, 9, 1], [10, 10, 10], [1, 0, 1])],                   # a count of zero
        [Row([7, -8, 3], [1, 1, 1], [1, 1, 1], [False, False, False])],   # nothing valid
        [Row([-(1 << 21)] * 3 + [(1 << 21) - 1], [1, 2, 3, 40000], [65535] * 4)],  # extremes
        [Row([1, 2], [5, 5], [1, 1]), Row([2, 1], [5, 5], [1, 1])],  # union of two rows
    ]
    run(cfg, heads)


def test_long_row_is_refused():
    cfg = point(wtu_lanes=4, buckets=8, wtu_row_entries=16)
    rng = np.random.default_rng(1)
    heads = [random_rows(rng, 2, 10) + random_rows(rng, 1, 16),
             random_rows(rng, 2, 10) + random_rows(rng, 1, 17) + random_rows(rng, 1, 18)]
    _, ref, info = run(cfg, heads, cross="backpressure")
    assert info["rows_refused"] == 2 and info["error"] == 1
    assert ref.first_error == (1, 1, 2)        # the first refusal: head 1, row 2


def test_broken_framing_is_traced():
    """A row whose first beat lacks ``first``: error code 2 with its head and row; the row is
    still walked as its beats imply, so the selections are the golden model's."""
    cfg = point(wtu_lanes=4, buckets=8, wtu_row_entries=64)
    rng = np.random.default_rng(3)
    heads = [random_rows(rng, 2, 10), random_rows(rng, 3, 9)]
    beats = all_beats(heads, 4)
    starts = [k for k, b in enumerate(beats) if b["first"]]
    beats[starts[3]]["first"] = 0                          # head 1, row 1
    dut = WicsumThresholdUnit.from_config(cfg)
    want, _ = expected(heads, cfg)
    regs = [(getattr(dut, k), v) for k, v in cfg.block_registers("wtu").items()]
    got, _, info = run_streams(dut, beats, len(want), regs=regs,
                               read={"error": dut.error, "error_code": dut.error_code,
                                     "error_head": dut.error_head,
                                     "error_row": dut.error_row})
    compare(got, want)
    assert (info["error"], info["error_code"], info["error_head"], info["error_row"]) == \
        (1, 2, 1, 1)


def test_row_cycles():
    """With o ready and the input always valid, the busy cycles and the cycles between heads'
    closing beats are :func:`verif.wtu.timing.schedule`'s, on rows of one beat to the whole
    memory, heads of one to six rows, several passes a row, refused and empty rows."""
    for cfg, lens in ((point(wtu_lanes=4, buckets=8, wtu_row_entries=64), (1, 7, 33, 64)),
                      (point(wtu_lanes=4, buckets=16, wtu_pass_buckets=2,
                             wtu_row_entries=64, th_r=0.9), (3, 20, 64, 65)),
                      (point(wtu_lanes=16, buckets=16, wtu_row_entries=256), (40, 1, 256))):
        dut = WicsumThresholdUnit.from_config(cfg)
        rng = np.random.default_rng(2)
        heads = [random_rows(rng, k, n) for k, n in zip((6, 1, 3, 2), lens)]
        heads.insert(1, [Row([], [], [])])
        want, ref = expected(heads, cfg)
        regs = [(getattr(dut, k), v) for k, v in cfg.block_registers("wtu").items()]
        _, when, info = run_streams(dut, all_beats(heads, dut.lanes), len(want), regs=regs)
        # the first beat goes in with the first cycle after reset, the union still clearing
        sched = schedule(dut, schedule_rows(heads, ref), ref.heads, clearing=dut.clear_cycles)
        closes = [w for w, b in zip(when, want) if b["last"]]
        assert info["busy"] == sched["busy"]
        assert np.diff(closes).tolist() == np.diff(sched["closes"]).tolist()


def params(**kw) -> dict:
    return {**Config().block_params("wtu"), **kw}


@pytest.mark.parametrize("kw, msg", [
    (dict(lanes=12), "lanes must be a positive power of two, not 12"),
    (dict(buckets=12), "buckets must be a positive power of two, not 12"),
    (dict(row_entries=100, lanes=16), "row_entries must be a multiple of lanes (16), not 100"),
    (dict(pass_buckets=3), "pass_buckets must be a positive power of two, not 3"),
    (dict(pass_buckets=32, buckets=16), "pass_buckets must be at most buckets (16), not 32"),
    (dict(score_bits=1), "score_bits must be at least 2, not 1"),
])
def test_bad_parameters(kw, msg):
    with pytest.raises(ParameterError) as e:
        WicsumThresholdUnit(**params(**kw))
    assert str(e.value) == msg


def test_th_r_taken_per_row():
    """Th_r is taken with a row's first beat: changed (0.3 -> 0.9) after head 0's row has
    begun, it applies to head 1's row only; each head's beats equal the golden model's at its
    own Th_r."""
    from amaranth.sim import Simulator

    from .model import row_beats
    lo = point(wtu_lanes=4, buckets=8, wtu_row_entries=64)
    hi = lo.replace(th_r=0.9)
    rng = np.random.default_rng(8)
    heads = [[Row(rng.permutation(40) * 50, rng.integers(100, 1000, 40),
                  rng.integers(1, 9, 40))] for _ in range(2)]
    want = expected(heads[:1], lo)[0] + expected(heads[1:], hi)[0]
    assert want != expected(heads, lo)[0], "the two Th_r must select differently"
    dut = WicsumThresholdUnit.from_config(lo)
    beats = [row_beats(r, dut.lanes, True) for h in heads for r in h]
    got = []

    def taken(ctx, k):                       # head 0's row has begun
        if k == 1:
            for name, v in hi.block_registers("wtu").items():
                ctx.set(getattr(dut, name), v)

    async def bench(ctx):
        for k, v in lo.block_registers("wtu").items():
            ctx.set(getattr(dut, k), v)
        got.extend(await stream_through(ctx, dut.i, dut.o, [b for row in beats for b in row],
                                        len(want), on_taken=taken))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    compare(got, want)
