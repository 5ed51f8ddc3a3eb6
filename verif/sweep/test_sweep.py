"""Design-space sweeps (sweep): the sweep file's errors name their line; a sweep on a
local Dask cluster gives the table the points give one by one in this process; a worker lost
mid-sweep leaves every point in the table exactly once; a rerun recomputes nothing; block
areas are synthesised once per build."""
import csv
import os
import shutil
import signal
import textwrap

import pytest

from sweep import SweepError, load_sweep, pareto_front, run_sweep, write_report
from sweep.point import area_key
from sweep.spec import point_config

from verif.lib.traces import BUNDLED, ROOT

OUT = ROOT / "build" / "sweep_test"
# measured columns (every column but the sweep's own bookkeeping)
SKIP = {"message"}


def _file(tmp_path, text, name="s.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text).lstrip())
    return p


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return _tiny(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def reference(tiny):
    """The tiny sweep's rows measured one by one in this process (a folder of this process:
    pytest-xdist may set this fixture up in two at once)."""
    out = _fresh(f"one_by_one_{os.getpid()}")
    run_sweep(tiny, out, local=True)
    return _rows(out / "table.csv")


def _tiny(tmp_path, extra=""):
    return load_sweep(_file(tmp_path, f"""
        name: tiny
        traces: [{BUNDLED}]
        grid:
          preset: [paper, tuned]
          n_hp: [8, 32]
          th_hd: [7, 10]
        area: []
        {extra}"""))


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _fresh(name):
    out = OUT / name
    shutil.rmtree(out, ignore_errors=True)
    return out


# --- the sweep file ----------------------------------------------------------------------

@pytest.mark.parametrize("body, line, words", [
    ("grid:\n  th_r: [0.1]\n  thr_r: [0.2]\n", 5, "unknown configuration field 'thr_r'"),
    ("grid:\n  th_r: [0.1]\n  buckets: [8, 12]\n", 5, "buckets must be a positive power of two"),
    ("grid:\n  th_r: [0.1, 1.5]\n", 4, "th_r = 1.5: th_r must be a number from 0 to 1"),
    ("base:\n  n_layers: 4\ngrid:\n  th_r: [0.1]\n", 4, "n_layers comes from the trace"),
    ("base:\n  hcu_lanes: 32\n  window: 16\ngrid:\n  th_r: [0.1]\n", 3,   # fine alone, not
     "base: window must be at least hcu_lanes (32), not 16"),                # together
    ("grid:\n  th_r: [0.1]\nsample:\n  kind: sobol\n  points: 2\n  fields: {th_hd: [7]}\n",
     6, "sample kind must be 'lhs' or 'random'"),
    ("grid:\n  th_r: [0.1]\narea: [hcu, nope]\n", 5, "no block 'nope'"),
    ("grdi:\n  th_r: [0.1]\n", 3, "unknown key 'grdi'"),
    ("grid: {th_r: [0.1\n", 4, "not valid YAML"),        # where the parser saw it
])
def test_a_bad_sweep_file_names_its_line(tmp_path, body, line, words):
    p = _file(tmp_path, f"name: bad\ntraces: [{BUNDLED}]\n" + body)
    with pytest.raises(SweepError) as e:
        load_sweep(p)
    assert str(e.value).startswith(f"{p}:{line}:"), str(e.value)
    assert words in str(e.value)


def test_a_missing_trace_names_its_line(tmp_path):
    p = _file(tmp_path, f"traces:\n  - {BUNDLED}\n  - data/no_such_trace.npz\n"
                        "grid: {th_r: [0.1]}\n")
    with pytest.raises(SweepError, match=rf"^{p}:3: trace 'data/no_such_trace.npz' not found"):
        load_sweep(p)


def test_grid_and_latin_hypercube_sample(tmp_path):
    sw = load_sweep(_file(tmp_path, f"""
        traces: [{BUNDLED}]
        grid: {{preset: [paper, tuned], buckets: [8, 16]}}
        sample:
          kind: lhs
          points: 8
          seed: 3
          fields: {{th_r: {{range: [0.1, 0.9]}}, th_hd: {{range: [4, 11]}}}}
        """))
    assert len(sw.points) == 4 * 8 and sw.varied == ["preset", "buckets", "th_r", "th_hd"]
    first = sw.points[:8]                               # one grid point, the whole sample
    # a Latin hypercube: each of the 8 strata of each range holds exactly one point
    assert sorted(int((p["th_r"] - 0.1) / 0.8 * 8) for p in first) == list(range(8))
    assert sorted(p["th_hd"] for p in first) == list(range(4, 12))
    assert all(isinstance(p["th_hd"], int) for p in first)


def test_a_combination_the_rules_refuse_is_reported_not_dropped(tiny, reference):
    sw, out, rows = tiny, OUT / f"one_by_one_{os.getpid()}", reference
    st = run_sweep(sw, out, local=True)          # the reference's table: nothing to measure
    assert (st.measured, st.reused) == (0, 8)
    refused = [r for r in rows if r["status"] == "refused"]
    # n_hp = 8 with th_hd = 10: Th_hd is at most n_hp + 1
    assert len(refused) == 2 and len(rows) == 8 == st.points
    assert all(r["n_hp"] == "8" and r["th_hd"] == "10" for r in refused)
    assert all("th_hd must be an integer from 0 to n_hp + 1 (9), not 10" in r["message"]
               for r in refused)
    # the default build is one of the points (paper, 32 hash bits, Th_hd 7): marked
    default = [(r["preset"], r["n_hp"], r["th_hd"], r["status"]) for r in rows
               if r["default"] == "1"]
    assert default == [("paper", "32", "7", "ok")]
    write_report(sw, out)
    md = (out / "report.md").read_text()
    assert "2 refused by the rules" in md and (out / "pareto.png").stat().st_size > 10_000


# --- Dask ---------------------------------------------------------------------------------

def _measured(rows):
    return {r["key"]: {k: v for k, v in r.items() if k not in SKIP} for r in rows}


def test_dask_sweep_equals_the_points_one_by_one(tiny, reference):
    dask = _fresh("dask")
    st = run_sweep(tiny, dask, workers=2, progress=False)
    assert st.measured == 6 and st.workers == 2
    b = _rows(dask / "table.csv")
    assert _measured(reference) == _measured(b) and len(b) == 8


def test_an_interrupted_sweep_resumes(tiny, reference):
    out = _fresh("interrupted")
    seen = []

    def stop(row):
        seen.append(row["key"])
        if sum(r["status"] == "ok" for r in _rows(out / "table.csv")) == 2:
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        run_sweep(tiny, out, local=True, on_row=stop)
    kept = _rows(out / "table.csv")
    assert len(kept) == len(seen) == 4                  # the two refused, two measured
    st = run_sweep(tiny, out, workers=2, progress=False)
    assert (st.measured, st.reused) == (4, 4)
    assert _measured(_rows(out / "table.csv")) == _measured(reference)


def test_a_worker_killed_mid_sweep_leaves_every_point_once(tiny, reference):
    from distributed import Client, LocalCluster
    sw = tiny
    out = _fresh("kill")
    killed = []
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster, Client(cluster) as watcher:
        pids = watcher.run(os.getpid)

        def kill_one(row):
            if row["status"] == "ok" and not killed:
                pid = next(iter(pids.values()))
                os.kill(pid, signal.SIGKILL)        # its tasks in flight are lost with it
                killed.append(pid)

        st = run_sweep(sw, out, scheduler=cluster.scheduler_address, progress=False,
                       on_row=kill_one)
    assert killed and st.measured == 6
    rows = _rows(out / "table.csv")
    keys = [r["key"] for r in rows]
    assert len(keys) == len(set(keys)) == 8
    assert _measured(rows) == _measured(reference)


def test_a_rerun_recomputes_nothing_and_areas_are_synthesised_once(tmp_path):
    base = "base: {n_hp: 8, hcu_lanes: 1, window: 4}"         # a small HCU: quick to map
    sw = load_sweep(_file(tmp_path, f"""
        traces: [{BUNDLED}]
        {base}
        grid: {{buckets: [8, 16]}}
        area: [hcu]
        default: false
        """))
    cache = _fresh("area_cache")
    out = _fresh("rerun")
    st = run_sweep(sw, out, cache=cache, workers=2, progress=False)
    # two points, one HCU build (the buckets leave it as it is)
    geo = {"n_layers": 3, "n_q_heads": 9, "n_kv_heads": 3, "head_dim": 64}
    keys = {area_key("hcu", point_config(p, geo).block_params("hcu")) for p in sw.points}
    assert len(keys) == 1 and st.synthesised == 1 and st.measured == 2
    assert [p.name for p in cache.iterdir()] == [f"hcu-{keys.pop()}.json"]
    rows = _rows(out / "table.csv")
    hcu = {r["ecp5_lut4_hcu"] for r in rows}
    assert len(rows) == 2 and len(hcu) == 1 and int(hcu.pop()) > 100
    before = (out / "table.csv").read_bytes()
    again = run_sweep(sw, out, cache=cache, workers=2, progress=False)
    assert (again.measured, again.synthesised, again.reused) == (0, 0, 2)
    assert (out / "table.csv").read_bytes() == before
    # another table: its points are measured again, its blocks come from the cache
    other = run_sweep(sw, _fresh("rerun_other"), cache=cache, local=True)
    assert (other.measured, other.synthesised) == (2, 0)


def test_pareto_front_by_hand():
    def r(a, t, e):
        return {"ecp5_lut4": str(a), "paper_frame_ms": str(t), "frame_rel_l2": str(e)}
    rows = [r(1, 5, 5), r(5, 1, 5), r(5, 5, 1), r(5, 5, 5), r(2, 5, 5), r(1, 5, 5)]
    front = pareto_front(rows)
    # (5, 5, 5) and (2, 5, 5) are dominated; the two equal points both stay
    assert front == [rows[0], rows[1], rows[2], rows[5]]
    # with no area measured, the front is over latency and error
    rows = [{**x, "ecp5_lut4": ""} for x in rows]
    assert pareto_front(rows) == [rows[1], rows[2]]


def test_the_default_build_is_added_where_no_point_is_it(tmp_path):
    from sweep.run import plan
    body = f"traces: [{BUNDLED}]\nbase: {{th_r: 0.5}}\ngrid: {{preset: [paper, tuned]}}\n"
    tasks = plan(load_sweep(_file(tmp_path, body)))
    assert [(t.fields, t.default) for t in tasks] == [
        ({"th_r": 0.5, "preset": "paper"}, False), ({"th_r": 0.5, "preset": "tuned"}, False),
        ({"preset": "paper"}, True)]
    tasks = plan(load_sweep(_file(tmp_path, body + "default: false\n")))
    assert not any(t.default for t in tasks) and len(tasks) == 2
    # the default fields given explicitly are the default build
    tasks = plan(load_sweep(_file(tmp_path, f"traces: [{BUNDLED}]\n"
                                            "grid: {th_r: [0.3, 0.5], buckets: [16]}\n")))
    assert [t.default for t in tasks] == [True, False]
