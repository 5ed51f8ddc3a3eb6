"""Running a sweep: its tasks on Dask (or in this process), its table on disk as they finish.

A point's row needs two kinds of task: :func:`~.point.measure` (fidelity and performance,
seconds) per (point, trace), and :func:`~.point.block_area` (minutes) per distinct block
build, which many points share. Both are pure; a task's Dask key is the content hash of its
inputs (:func:`~.point.point_key`, :func:`~.point.area_key`), so a point submitted twice runs
once. The client writes a row to ``table.csv`` once its measurement and its blocks' areas are
in, and flushes it: an interrupted sweep keeps every row written, and a rerun skips every key
the table holds (and every block build the area cache holds). Rows are written by the client
alone, each key once, so a worker lost mid-sweep (its tasks rerun elsewhere) leaves the table
complete with every point exactly once.
"""
from __future__ import annotations

import csv
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from vrex.config import ConfigError

from .point import AREA, FIDELITY, PERFORMANCE, area_key, block_area, measure, point_key
from .spec import Sweep, point_config

__all__ = ["run_sweep", "plan", "Table", "SweepStats", "columns", "area_cache"]


def area_cache() -> Path:
    """Where block areas are kept: beside the compiler cache, shared by every clone."""
    from vrex.toolchain import cache_dir
    return cache_dir() / "sweep-area"


def columns(sweep: Sweep) -> list[str]:
    blocks = [f"ecp5_lut4_{b}" for b in sweep.area]
    return (["key", "trace", "status", "message", "default", *sweep.varied, *FIDELITY, *PERFORMANCE,
             *AREA, *blocks, "config"])


@dataclass
class Task:
    key: str
    trace: str
    fields: dict
    geo: dict
    areas: dict = field(default_factory=dict)      # block -> area key
    refused: str | None = None
    default: bool = False                          # the default build (the paper preset)


def plan(sweep: Sweep) -> list[Task]:
    """Every (point, trace) of the sweep with its key and its blocks' area keys; a point the
    rules refuse gets its message instead. The default build (the ``paper`` preset as it
    stands) is added where no point is that build, so that the report can place it."""
    from golden.trace import load_trace
    from vrex.config import Config
    opts = {"latency": sweep.latency, "paper_cache": sweep.paper_cache,
            "area": list(sweep.area)}
    out = []
    for tr in sweep.traces:
        geo = load_trace(tr).geometry()
        default = Config.from_preset("paper", **geo)
        tasks = []
        for f in sweep.points:
            t = Task(point_key(f, tr, opts), str(tr), f, geo)
            try:
                cfg = point_config(f, geo)
            except (ConfigError, TypeError) as e:
                t.refused = str(e)
            else:
                t.areas = {b: area_key(b, cfg.block_params(b)) for b in sweep.area}
                t.default = cfg == default
            tasks.append(t)
        if sweep.default and not any(t.default for t in tasks):
            f = {k: getattr(default, k) for k in sweep.varied}
            t = Task(point_key(f, tr, opts), str(tr), f, geo, default=True)
            t.areas = {b: area_key(b, default.block_params(b)) for b in sweep.area}
            tasks.append(t)
        out += tasks
    return out


class Table:
    """``table.csv``: a row per key, appended and flushed as each finishes."""

    def __init__(self, path, cols: list[str], keys=None):
        """Open ``path``, keeping the rows of ``keys`` (default: every row): a row of a point
        no longer in the sweep, or measured by other code, is dropped."""
        self.path, self.cols = Path(path), cols
        self.rows: dict[str, dict] = {}
        old = []
        if self.path.exists():
            with self.path.open(newline="") as f:
                rd = csv.DictReader(f)
                old = rd.fieldnames or []
                for r in rd:
                    self.rows[r["key"]] = r
        n = len(self.rows)
        if keys is not None:
            self.rows = {k: r for k, r in self.rows.items() if k in keys}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if old != cols or len(self.rows) != n:     # new, other columns or rows dropped
            with self.path.open("w", newline="") as f:
                w = csv.DictWriter(f, cols, extrasaction="ignore")
                w.writeheader()
                for r in self.rows.values():
                    w.writerow(r)
        self._lock = threading.Lock()

    def add(self, row: dict) -> None:
        with self._lock, self.path.open("a", newline="") as f:
            csv.DictWriter(f, self.cols, extrasaction="ignore").writerow(row)
            f.flush()
            os.fsync(f.fileno())
            self.rows[row["key"]] = {k: "" if row.get(k) is None else str(row.get(k))
                                     for k in self.cols}


@dataclass
class SweepStats:
    points: int = 0                 # rows the sweep has (points x traces)
    reused: int = 0                 # rows the table held already
    refused: int = 0
    measured: int = 0               # measure tasks run
    synthesised: int = 0            # block builds mapped (not in the area cache)
    workers: int = 1                # Dask workers when the run began (1: in this process)
    seconds: float = 0.0


def _row(t: Task, sweep: Sweep, got: dict | None, areas: dict, error: str | None) -> dict:
    import json
    row = {"key": t.key, "trace": Path(t.trace).name, "default": int(t.default),
           **{k: t.fields.get(k)
                                                         for k in sweep.varied},
           "config": json.dumps(t.fields, sort_keys=True)}
    if t.refused or error:
        return {**row, "status": "refused" if t.refused else "failed",
                "message": t.refused or error}
    row.update(status="ok", message="", **got)
    for k in AREA:
        row[k] = sum(areas[b]["cells"][k] for b in sweep.area) if sweep.area else None
    for b in sweep.area:
        row[f"ecp5_lut4_{b}"] = areas[b]["cells"]["ecp5_lut4"]
    return row


def run_sweep(sweep: Sweep, out_dir, *, scheduler: str | None = None,
              workers: int | None = None, local: bool = False, progress: bool = True,
              cache=None, on_row=None) -> SweepStats:
    """Run ``sweep`` into ``out_dir/table.csv``. ``local``: every task in this process, one
    after another; else on Dask: the cluster at ``scheduler``, or an embedded local one of
    ``workers`` processes (default: this machine's cores). ``cache``: the area cache
    (default :func:`area_cache`). ``on_row(row)`` is called as each row is written."""
    t0 = time.time()
    out_dir = Path(out_dir)
    cache = Path(cache or area_cache())
    work = out_dir / "area"
    tasks = list({t.key: t for t in plan(sweep)}.values())     # a point given twice runs once
    table = Table(out_dir / "table.csv", columns(sweep), {t.key for t in tasks})
    st = SweepStats(points=len(tasks))
    todo = [t for t in tasks if t.key not in table.rows]
    st.reused = len(tasks) - len(todo)

    def write(t, got, areas, error=None):
        row = _row(t, sweep, got, areas, error)
        table.add(row)
        st.refused += row["status"] == "refused"
        if on_row:
            on_row(row)

    for t in [t for t in todo if t.refused]:
        write(t, None, {})
    todo = [t for t in todo if not t.refused]
    builds = {}                             # area key -> (block, fields, geo)
    for t in todo:
        for b, k in t.areas.items():
            builds.setdefault(k, (b, t.fields, t.geo))
    fresh = {k for k, (b, _, _) in builds.items() if not (cache / f"{b}-{k}.json").exists()}
    st.synthesised, st.measured = len(fresh), len(todo)
    mopts = dict(latency=sweep.latency, paper_cache=sweep.paper_cache)
    if local:
        _run_local(todo, builds, cache, work, mopts, write)
    elif todo:
        st.workers = _run_dask(todo, builds, cache, work, mopts, write, scheduler, workers,
                               progress)
    st.seconds = time.time() - t0
    return st


def _run_local(todo, builds, cache, work, mopts, write) -> None:
    areas = {k: block_area(b, f, g, str(cache), str(work)) for k, (b, f, g) in builds.items()}
    for t in todo:
        got, err = _measure_safe(t.fields, t.trace, mopts)
        write(t, got, {b: areas[k] for b, k in t.areas.items()}, err)


def _client(scheduler, workers):
    from distributed import Client, LocalCluster
    if scheduler:
        return Client(scheduler), None
    cluster = LocalCluster(n_workers=workers or _cores(), threads_per_worker=1,
                           processes=True, dashboard_address=":0")
    return Client(cluster), cluster


def _cores() -> int:
    from vrex.toolchain import default_jobs
    return default_jobs()


def _run_dask(todo, builds, cache, work, mopts, write, scheduler, workers, progress) -> int:
    """Every task on Dask; the rows written as they complete. Returns the workers there
    were when the tasks were submitted."""
    from distributed import as_completed
    client, cluster = _client(scheduler, workers)
    try:
        client.wait_for_workers(1)
        n = len(client.scheduler_info()["workers"])
        futs = {}
        # the long block builds first: the points' measurements fill the workers around them
        for k, (b, f, g) in builds.items():
            futs[client.submit(block_area, b, f, g, str(cache), str(work), key=f"area-{k}",
                               pure=False, retries=2)] = ("area", k)
        for t in todo:
            futs[client.submit(_measure_safe, t.fields, t.trace, mopts, key=f"point-{t.key}",
                               pure=False, retries=2)] = ("point", t)
        if progress:
            _progress(list(futs))
        areas, measured, written = {}, {}, set()
        for fut in as_completed(list(futs)):
            kind, what = futs[fut]
            if kind == "area":
                areas[what] = fut.result()
            else:
                measured[what.key] = (what, fut.result())
            for key, (t, (got, err)) in list(measured.items()):
                if key not in written and all(k in areas for k in t.areas.values()):
                    write(t, got, {b: areas[k] for b, k in t.areas.items()}, err)
                    written.add(key)
                    del measured[key]
        return n
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _measure_safe(fields, trace, mopts):
    try:
        return measure(fields, trace, **mopts), None
    except Exception as e:              # a point that fails is reported, not dropped
        return None, f"{type(e).__name__}: {e}"


def _progress(futs) -> None:
    """Dask's text progress bar, in a thread beside the client's loop over the results."""
    from distributed import progress
    if not sys.stderr.isatty() and not os.environ.get("VREX_SWEEP_PROGRESS"):
        return
    threading.Thread(target=progress, args=(futs,), daemon=True).start()
