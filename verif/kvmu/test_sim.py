"""KVMU, fast tier: the Amaranth simulator against the golden replay (golden.kvmu.KvmuReplay):
exact bursts, exact o_kv beats, counters, errors and the memory's contents, under idle
cycles, back-pressure, bus pauses and latency, injected SLVERR/DECERR, in several builds."""
import numpy as np
import pytest

from rtl import KvMemoryManager
from verif.lib.pauses import CROSSINGS
from vrex.config import Config, ConfigError
from vrex.rules import ParameterError

from .faults import FAILS, with_fault
from .model import (check_scored, expect, random_rows, registers, synthetic_ops,
                    trace_ops)
from .sim import run_refused, run_sim


def small(**kw) -> Config:
    return Config(**{"n_layers": 2, "head_dim": 16, "kvmu_clusters": 16, "kvmu_blocks": 64,
                     **kw})


# builds: bus 16 or 8 bytes; one hash group of 3 heads or 3 groups of 1; a token of 1, 2 or
# 16 beats; blocks of 2 to 32 tokens; bursts cut short (in 8 KB blocks, 24-beat bursts cross
# 4 KB boundaries and are cut there: its stream fills clusters past 16 tokens)
SWEEP = {
    "d16_bt16_g1": (small(), dict(near_slots=4, max_burst=16)),
    "d64_bt4_bus8_g3": (small(head_dim=64, block_tokens=4, hash_scope="per_head",
                              kvmu_bus_bytes=8), dict(near_slots=6, max_burst=12)),
    "d8_bt2": (small(head_dim=8, block_tokens=2), dict(near_slots=5, max_burst=256)),
    "d128_bt32_4k": (small(head_dim=128, block_tokens=32, n_layers=1),
                     dict(near_slots=2, max_burst=24)),
}


STREAM = {"d128_bt32_4k": dict(tokens=14, new_cluster=0.1, steps=3),
          "d64_bt4_bus8_g3": dict(tokens=4)}


def setup(name, seed=1, steps=3, tokens=6):
    cfg, r = SWEEP[name]
    regs = registers(cfg, far_base=1 << 24, **r)
    kw = {"tokens": tokens, "steps": steps, **STREAM.get(name, {})}
    ops = synthetic_ops(cfg, np.random.default_rng(seed), **kw)
    return cfg, regs, ops, random_rows(seed, 2 * cfg.head_dim)


@pytest.mark.parametrize("cross", CROSSINGS)
@pytest.mark.parametrize("name", SWEEP)
def test_stream(name, cross):
    """A synthetic stream (fetches of random cluster subsets, then stores) with a near ring
    small enough to spill: bursts, deliveries, placement and counters exact."""
    cfg, regs, ops, rows = setup(name)
    exp, info, _ = run_sim(cfg, regs, ops, rows, cross=cross, seed=5)
    assert exp.counters["offloaded_blocks"] > 0 and exp.counters["far_read_beats"] > 0


@pytest.mark.parametrize("latency, bus_pause", [(0, 0.3), (7, None), (20, 0.5),
                                                (3, (1, 0, 0))])
def test_bus_latency_and_pauses(latency, bus_pause):
    """Every AXI channel paused at random or periodically, and memory latency."""
    cfg, regs, ops, rows = setup("d16_bt16_g1", seed=2, steps=3, tokens=5)
    run_sim(cfg, regs, ops, rows, cross="both", seed=7, latency=latency, bus_pause=bus_pause)


@pytest.mark.parametrize("resp", ["SLVERR", "DECERR"])
@pytest.mark.parametrize("fail", FAILS)
def test_bus_errors(fail, resp):
    """An error answer on one transfer: the sticky error names the operation, response and
    address; the command ends cleanly (a failed store stores nothing, a failed offload
    leaves the block near, a failed fetch closes with an error marker, a failed update of
    the sums poisons the cluster: never a candidate again, its KV still stored); the stream
    goes on and the memory stays consistent with the tables (every later fetch and
    candidate list exact)."""
    cfg, regs, ops, rows = setup("d16_bt16_g1", seed=3, steps=4)
    ops = with_fault(cfg, regs, ops, rows, fail, resp)
    exp, info, _ = run_sim(cfg, regs, ops, rows, cross="both", seed=11, bus_pause=0.2)
    assert info["bus_errors"] >= 1 and info["error"]


def test_stale_fetches():
    """A fetch whose version is older than one announced for its layer is dropped whole (no
    read, an end beat marked stale); one that started current completes although a newer
    command comes mid-fetch; other layers' versions do not matter."""
    cfg, regs, ops, rows = setup("d16_bt16_g1", seed=4, steps=2)
    ops += [("version", 0, 100), ("fetch", 0, 0, 1, [0, 1, 2], 100, dict(newer_during=101)),
            ("fetch", 0, 0, 2, [0, 2], 100),            # stale: 101 came mid-fetch
            ("fetch", 1, 0, 0, [1], 3),                 # stale: layer 1 is at 4
            ("version", 1, 200), ("fetch", 0, 0, 0, [1, 2], 101),   # layer 0 current
            ("fetch", 1, 0, 0, [0, 1], 199), ("fetch", 1, 0, 0, [0], 200)]
    exp, info, _ = run_sim(cfg, regs, ops, rows, cross="both", seed=1)
    assert exp.counters["stale_dropped"] == 3
    assert [b["stale"] for b in exp.kv if b["end"]][-6:] == [0, 1, 1, 0, 1, 0]


def test_version_backwards_and_bad_commands():
    """Refused: a version going backwards (error 8, ignored); commands out of range (error
    1; a store's data consumed, a fetch closed with an error marker); the stream goes on."""
    cfg, regs, ops, rows = setup("d16_bt16_g1", seed=5, steps=2)
    ops = ops[:20] + [("version", 1, 1)] + [
        ("bad", dict(op=0, layer=2, owner=1, token=999)),
        ("bad", dict(op=0, layer=0, group=1, token=999)),
        ("bad", dict(op=0, layer=0, owner=16, token=999)),
        ("bad", dict(op=1, layer=0, head=3, first=1, last=1)),
        ("bad", dict(op=1, layer=0, owner=15, by_index=1, first=1, last=1)),
        ("bad", dict(op=3, layer=3)),
        ("bad", dict(op=5, layer=0))] + ops[20:]
    exp, info, _ = run_sim(cfg, regs, ops, rows, cross="both", seed=2)
    assert info["refused"] == 7 and info["error_code"] == 8


def test_block_table_full():
    """Past ``blocks`` block-table entries a store is refused (error 3, its data consumed);
    stored tokens stay fetchable."""
    cfg = small(kvmu_blocks=6)
    regs = registers(cfg, near_slots=4, max_burst=16, far_base=1 << 24)
    rows = random_rows(6, 32)
    ops = synthetic_ops(cfg, np.random.default_rng(6), steps=3, tokens=6)
    exp, info, _ = run_sim(cfg, regs, ops, rows, cross="both", seed=3)
    assert exp.first_error[0] == 3 and info["refused"] > 0


def test_far_tier_full():
    """Past ``far_slots`` moved blocks the far tier is full: a store that would move one more
    is refused (error 9, its data consumed); everything stored stays fetchable."""
    cfg = small()
    regs = registers(cfg, near_slots=3, max_burst=16, far_base=1 << 24, far_slots=4)
    ops = synthetic_ops(cfg, np.random.default_rng(16), steps=3, tokens=6)
    exp, info, _ = run_sim(cfg, regs, ops, random_rows(16, 32), cross="both", seed=5)
    assert exp.first_error[0] == 9 and exp.counters["offloaded_blocks"] == 4


@pytest.mark.parametrize("field, value", [("near_base", 0x100), ("far_base", 0x1000800),
                                          ("near_slots", 0), ("max_burst", 0),
                                          ("max_burst", 257)])
def test_bad_registers(field, value):
    """A register out of range refuses every command (error 2), touching no memory."""
    cfg, regs, ops, rows = setup("d16_bt16_g1", seed=7, steps=1)
    regs[field] = value
    run_refused(cfg, regs, ops, rows, cross="both", seed=9)


@pytest.mark.parametrize("name", ["d16_bt16_g1", "d64_bt4_bus8_g3", "d8_bt2"])
def test_candidates_and_fetch_by_index(name):
    """Candidate lists (clusters with past members, in id order, their representative keys
    by the exact divider and their past counts) before and after the step's tokens joined,
    and fetches naming clusters by candidate index; sums in memory exact."""
    cfg, r = SWEEP[name]
    regs = registers(cfg, far_base=1 << 24, **r)
    rng = np.random.default_rng(17)
    ops = synthetic_ops(cfg, rng, steps=3, tokens=6, by_index=True)
    ops += [("cand", 0, 0, 0, 2), ("cand", 1, 0, 0, 3)]     # after step 2's tokens joined
    exp, info, _ = run_sim(cfg, regs, ops, random_rows(17, 2 * cfg.head_dim), cross="both",
                           seed=8)
    assert exp.counters["candidates"] > 0
    # the list of layer 0 at step 2, after step 2's tokens joined, counts past members only
    total, past = {}, {}
    for op in ops:
        if op[0] == "store" and op[1:3] == (0, 0):
            total[op[3]] = total.get(op[3], 0) + 1
            past[op[3]] = past.get(op[3], 0) + (op[5] < 2)
    got = {c: p for c, p, _ in exp.lists[-2]}
    assert got == {c: n for c, n in past.items() if n > 0}
    assert any(got[c] < total[c] for c in got)


@pytest.mark.parametrize("name", ["d16_bt16_g1", "d64_bt4_bus8_g3", "d8_bt2"])
def test_cluster_first_past_fetches(name):
    """The cluster-first order: a step's tokens stored first, then the candidate lists (the
    keys over every member, the counts of past ones) and fetches by index of the members
    from earlier steps only (``past``), with a ring small enough to spill."""
    cfg, r = SWEEP[name]
    regs = registers(cfg, far_base=1 << 24, **r)
    ops = synthetic_ops(cfg, np.random.default_rng(23), steps=3, tokens=6, by_index=True,
                        stores_first=True)
    rows = random_rows(23, 2 * cfg.head_dim)
    exp, info, _ = run_sim(cfg, regs, ops, rows, cross="both", seed=12)
    # the limit is met: without it the same fetches would deliver this step's members too
    whole = expect(cfg, regs, [_whole(op) for op in ops], rows)
    assert sum(map(len, exp.fetched)) < sum(map(len, whole.fetched))
    assert exp.counters["offloaded_blocks"] > 0


def _whole(op):
    """A ``past`` fetch as a fetch of every member."""
    if op[0] != "fetch":
        return op
    return (*op[:6], {k: v for k, v in op[6].items() if k != "past"})


def test_fetch_index_out_of_range():
    """A fetch naming a candidate index past the last list: that command is refused (error
    1), the fetch's other clusters are delivered and its end beat says error."""
    cfg, regs, ops, rows = setup("d16_bt16_g1", seed=19, steps=2)
    ops += [("version", 0, 50), ("cand", 0, 0, 0, 2),
            ("fetch", 0, 0, 0, [0, 15, 1], 50, dict(by_index=True)),
            ("fetch", 0, 0, 1, [15], 50, dict(by_index=True)),
            ("fetch", 1, 0, 1, [0], 50, dict(by_index=True))]   # layer 1's last list
    exp, info, _ = run_sim(cfg, regs, ops, rows, cross="both", seed=10)
    assert info["refused"] == 2
    assert [b["error"] for b in exp.kv if b["end"]][-3:] == [1, 1, 0]


def test_count_full():
    """A cluster whose member count would overflow ``count_bits`` refuses the token (error
    11, its data consumed)."""
    cfg = small(count_bits=3)
    regs = registers(cfg, near_slots=8, max_burst=16, far_base=1 << 24)
    ops = [("store", 0, 0, 0, t, t // 4) for t in range(9)] + [("cand", 0, 0, 1, 3)]
    exp, info, _ = run_sim(cfg, regs, ops, random_rows(18, 32), cross="both", seed=9)
    assert exp.first_error[0] == 11 and info["stored_tokens"] == 7


def test_clear():
    """CLEAR forgets every table: later stores start from block 0 and slot 0 of the ring."""
    cfg, regs, ops, rows = setup("d16_bt16_g1", seed=8, steps=2)
    ops2 = synthetic_ops(cfg, np.random.default_rng(9), steps=2, tokens=6)
    run_sim(cfg, regs, ops + [("clear",)] + ops2, rows, cross="both", seed=4)


# both in make soak: the Verilog tier's default point runs the
# trace's first four steps under both presets, spilling, under pauses (verif/kvmu/tb.py:
# real_trace)
@pytest.mark.soak
@pytest.mark.parametrize("preset", ["paper", "tuned"])
def test_trace(preset):
    """The bundled real trace's first steps (its K/V rows, its golden ReSV clusters and
    selections) with a near tier of 8 logical blocks, so it spills: every candidate list is
    the golden run's own (ids, counts, representative keys as it scored them), every fetch
    (by candidate index) delivers exactly the golden run's selected past tokens."""
    ops, cfg, rows, selected, scored = trace_ops(preset, steps=3)
    cfg = cfg.replace(kvmu_clusters=512, kvmu_blocks=512)
    regs = registers(cfg, near_slots=8, far_base=1 << 26)
    exp, info, _ = run_sim(cfg, regs, ops, rows, cross="both", seed=6)
    assert exp.fetched == selected
    assert check_scored(exp, scored) > 0
    assert exp.counters["offloaded_blocks"] > 0


@pytest.mark.parametrize("kw, msg", [
    (dict(head_dim=48), "head_dim must be a positive power of two"),
    (dict(block_tokens=12), "block_tokens must be a positive power of two"),
    (dict(clusters=100), "clusters must be a positive power of two"),
    (dict(bus_bytes=32), "bus_bytes must be 8 or 16"),
    (dict(max_burst=0), "max_burst must be an integer from 1 to 256"),
    (dict(max_reads=65), "max_reads must be an integer from 1 to 64"),
    (dict(head_dim=2), "head_dim must be at least 8"),
    (dict(addr_bits=16), "addr_bits (16) cannot address"),
    (dict(id_bits=3), "id_bits must be at least log2(clusters) (10)"),
    (dict(count_bits=0), "count_bits must be a positive integer"),
])
def test_bad_parameters(kw, msg):
    params = {**Config().block_params("kvmu"), **kw}
    with pytest.raises((ParameterError, ValueError), match=msg.replace("(", r"\(")
                       .replace(")", r"\)")):
        KvMemoryManager(**params)


def test_config_refuses_what_the_block_refuses():
    with pytest.raises(ConfigError, match="kvmu_bus_bytes must be 8 or 16"):
        Config(kvmu_bus_bytes=4)
    with pytest.raises(ConfigError, match="kvmu_clusters must be a positive power of two"):
        Config(kvmu_clusters=1000)
