"""``python -m sweep.scale FILE``: how a sweep scales on this machine.

The sweep's measurements (its block areas taken from the cache, so that every run does the
same work) run three ways into fresh tables: in this process one after another, on a local
Dask cluster of one worker and of two. Reported (``build/sweep/<name>/scale.json``): each
run's wall time, the cluster's start-up, the speedup from one worker to two (with and
without the start-up), and the
per-task overhead of Dask (the one-worker run less start-up less the in-process run, per
task)."""
from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

from .run import run_sweep
from .spec import load_sweep


def _startup(workers: int) -> float:
    from distributed import Client, LocalCluster
    t0 = time.time()
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as c, Client(c) as cl:
        cl.wait_for_workers(workers)
        return time.time() - t0


def measure_scale(path, out_root=Path("build/sweep")) -> dict:
    sweep = load_sweep(path)
    root = Path(out_root) / sweep.name / "scale"
    warm = run_sweep(sweep, root / "warm", local=True)   # the areas into the cache
    runs = {}
    for name, kw in (("in_process", dict(local=True)), ("workers_1", dict(workers=1)),
                     ("workers_2", dict(workers=2))):
        out = root / name
        shutil.rmtree(out, ignore_errors=True)
        st = run_sweep(sweep, out, progress=False, **kw)
        runs[name] = {"seconds": round(st.seconds, 2), "tasks": st.measured}
    up = {f"workers_{n}": round(_startup(n), 2) for n in (1, 2)}
    n = runs["in_process"]["tasks"]
    res = {"sweep": sweep.name, "tasks": n, "synthesised_before": warm.synthesised,
           "runs": runs, "cluster_startup_s": up,
           "in_process_s_per_task": round(runs["in_process"]["seconds"] / n, 3),
           "speedup_1_to_2": round(runs["workers_1"]["seconds"] / runs["workers_2"]["seconds"],
                                   2),
           # the same without the clusters' start-up
           "speedup_1_to_2_running": round((runs["workers_1"]["seconds"] - up["workers_1"])
                                           / (runs["workers_2"]["seconds"] - up["workers_2"]),
                                           2),
           "overhead_s_per_task": round((runs["workers_1"]["seconds"] - up["workers_1"]
                                         - runs["in_process"]["seconds"]) / n, 3)}
    (Path(out_root) / sweep.name / "scale.json").write_text(json.dumps(res, indent=1))
    return res


if __name__ == "__main__":
    print(json.dumps(measure_scale(sys.argv[1] if len(sys.argv) > 1
                                   else "sweep/bundled.yaml"), indent=1))
