"""``make bench``: speed of the golden model (a benchmark, never a test).

Times the whole golden job on a trace (what ``make golden`` runs, figures included) and
reports tokens per second per method (tokens × layers processed per second of that method's
selection), writing build/bench/golden.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

from .cli import DEFAULT_TRACE
from .job import run_job
from .trace import load_trace


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="vrex-bench", description=__doc__)
    ap.add_argument("--trace", default=str(DEFAULT_TRACE))
    ap.add_argument("--out", default="build/bench")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    trace = load_trace(args.trace)
    t_load = time.perf_counter() - t0
    summary = run_job(trace, Path("build/bench/golden_run") / trace.name, progress=False)
    wall = time.perf_counter() - t0
    report = {"trace": trace.name, "tokens": trace.n_tokens, "layers": trace.n_layers,
              "wall_s_total": round(wall, 3), "wall_s_load": round(t_load, 3),
              "stage_s": summary["timing_s"],
              "tokens_per_s": {k: round(v, 1) for k, v in summary["tokens_per_s"].items()},
              "machine": {"python": platform.python_version(), "machine": platform.machine(),
                          "processor": platform.processor()}}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "golden.json").write_text(json.dumps(report, indent=1))
    print(f"golden job on {trace.name} ({trace.n_tokens} tokens x {trace.n_layers} layers): "
          f"{wall:.2f} s wall")
    for k, v in report["tokens_per_s"].items():
        print(f"  {k:14s} {v:12.1f} token-layers/s  ({summary['timing_s'][k]:.3f} s)")
    print(f"  evaluate (all methods and sweep points): {summary['timing_s']['evaluate']:.3f} s")
    print(f"wrote {out / 'golden.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
