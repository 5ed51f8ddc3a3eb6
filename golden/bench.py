"""``make bench``: speed of the golden job (a benchmark, never a test).

Times the whole golden job (every method, the evaluation, the layouts; no figures) on the
bundled trace and on the shared ``bbb`` trace, twice each in the same run: at this checkout
and at a reference commit (by default :data:`REFERENCE`, the last commit before the job was
made faster), exported with ``git archive`` into build/bench/. Each run is a fresh process on
the same machine; this checkout runs in ``--jobs`` processes and in one. The summaries are
compared figure by figure (they must agree: the speed work changes no result beyond float
rounding). Writes build/bench/golden.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tarfile
import io
from pathlib import Path

from .cli import DEFAULT_TRACE
from .pool import default_jobs

ROOT = Path(__file__).resolve().parents[1]
SHARED_BBB = ROOT.parent / "shared" / "data" / "traces" / "bbb_pool2_f32.npz"
# the parent of the commit that made the golden job faster (one process, one mask at a time)
REFERENCE = "9c29d66"

# run in a fresh interpreter with PYTHONPATH at the tree under test: the job on one trace,
# its wall time and its summary (timings left out) to a JSON file
_RUNNER = r"""
import inspect, json, sys, time
t0 = time.perf_counter()
from golden.trace import load_trace
from golden.job import run_job
trace = load_trace(sys.argv[1])
kw = {"jobs": int(sys.argv[3])} if "jobs" in inspect.signature(run_job).parameters else {}
s = run_job(trace, None, progress=False, figures=False, **kw)
wall = time.perf_counter() - t0
timing = s.pop("timing_s")
tps = s.pop("tokens_per_s")
json.dump({"wall_s": wall, "timing_s": timing, "tokens_per_s": tps, "jobs": kw.get("jobs", 1),
           "summary": s}, open(sys.argv[2], "w"), default=str)
"""


def export(rev: str, dest: Path) -> Path:
    """The ``golden`` and ``vrex`` packages of commit ``rev`` under ``dest/<rev>``."""
    out = dest / f"ref-{rev}"
    if (out / "golden" / "job.py").exists():
        return out
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "golden", "vrex"],
                         capture_output=True, check=True).stdout
    out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        t.extractall(out, filter="data")
    return out


def run_one(tree: Path, trace: Path, out: Path, jobs: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    subprocess.run([sys.executable, "-c", _RUNNER, str(trace), str(out), str(jobs)],
                   env=env, check=True, cwd=tree)
    return json.loads(out.read_text())


def compare(a, b, path="", floor=1e-6) -> tuple[list, float, str]:
    """Differences between two summaries: ``(exact mismatches, worst relative float
    difference, its path)``; floats are compared relative to ``max(|a|, |b|, floor)``."""
    bad, worst = [], [0.0, ""]

    def walk(x, y, p):
        if isinstance(x, dict) and isinstance(y, dict):
            if set(x) != set(y):
                bad.append((p, "keys differ"))
            for k in set(x) & set(y):
                walk(x[k], y[k], f"{p}/{k}")
        elif isinstance(x, list) and isinstance(y, list):
            if len(x) != len(y):
                bad.append((p, "lengths differ"))
            for i, (u, v) in enumerate(zip(x, y)):
                walk(u, v, f"{p}[{i}]")
        elif isinstance(x, float) and isinstance(y, (int, float)) and x == x:
            d = abs(x - y) / max(abs(x), abs(y), floor)
            if d > worst[0]:
                worst[:] = [d, p]
        elif x != y and not (x != x and y != y):
            bad.append((p, f"{x!r} != {y!r}"))
    walk(a, b, path)
    return bad, worst[0], worst[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="vrex-bench", description=__doc__)
    ap.add_argument("--trace", action="append",
                    help="trace .npz (repeatable; default: the bundled trace and, when the "
                         "shared folder is there, bbb)")
    ap.add_argument("--against", default=REFERENCE,
                    help=f"reference commit ({REFERENCE}); 'none' times this checkout only")
    ap.add_argument("--jobs", type=int, default=default_jobs(),
                    help="processes for this checkout's job (default: the usable cores)")
    ap.add_argument("--out", default="build/bench")
    args = ap.parse_args(argv)
    traces = [Path(t) for t in args.trace] if args.trace else \
        [DEFAULT_TRACE] + ([SHARED_BBB] if SHARED_BBB.exists() else [])
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    ref_tree = None
    if args.against != "none":
        try:
            ref_tree = export(args.against, out)
        except (subprocess.CalledProcessError, FileNotFoundError) as e:
            print(f"vrex-bench: no reference ({args.against}): {e}; timing this checkout only",
                  file=sys.stderr)
    report = {"reference": args.against if ref_tree else None, "jobs": args.jobs,
              "machine": {"python": platform.python_version(), "machine": platform.machine(),
                          "cpus": os.cpu_count(), "usable_cpus": default_jobs()},
              "traces": {}}
    for tr in traces:
        name = tr.stem
        print(f"golden job on {name}:", flush=True)
        new = run_one(ROOT, tr.resolve(), out / f"golden_{name}_new.json", args.jobs)
        row = {"wall_s": round(new["wall_s"], 2), "jobs": new["jobs"],
               "stage_s": new["timing_s"],
               "tokens_per_s": {k: round(v, 1) for k, v in new["tokens_per_s"].items()}}
        print(f"  this checkout ({new['jobs']} processes): {new['wall_s']:8.1f} s", flush=True)
        if args.jobs > 1:                     # what the algorithms alone gained
            one = run_one(ROOT, tr.resolve(), out / f"golden_{name}_new1.json", 1)
            row["one_process_wall_s"] = round(one["wall_s"], 2)
            print(f"  this checkout (1 process):   {one['wall_s']:8.1f} s", flush=True)
        if ref_tree is not None:
            ref = run_one(ref_tree, tr.resolve(), out / f"golden_{name}_ref.json", 1)
            bad, worst, where = compare(ref["summary"], new["summary"])
            row["reference_wall_s"] = round(ref["wall_s"], 2)
            row["speedup"] = round(ref["wall_s"] / new["wall_s"], 2)
            if "one_process_wall_s" in row:
                row["speedup_one_process"] = round(ref["wall_s"] / row["one_process_wall_s"], 2)
            row["results"] = {"exact_mismatches": len(bad), "first": bad[:5],
                              "worst_relative_difference": worst, "at": where}
            print(f"  reference {args.against} (1 process):  {ref['wall_s']:8.1f} s   "
                  f"speed-up {row['speedup']:.2f}x" + (
                      f" ({row['speedup_one_process']:.2f}x in one process)"
                      if "speedup_one_process" in row else ""), flush=True)
            print(f"  summaries: {len(bad)} exact mismatches, worst relative difference "
                  f"{worst:.1e}" + (f" ({where})" if where else ""), flush=True)
        report["traces"][name] = row
    (out / "golden.json").write_text(json.dumps(report, indent=1))
    print(f"wrote {out / 'golden.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
