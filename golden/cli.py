"""``vrex-golden``: run every method on a trace and write build/golden/<trace>/."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .job import format_table, run_job
from .pool import default_jobs
from .trace import TraceError, load_trace

DEFAULT_TRACE = Path(__file__).resolve().parent.parent / "data" / "carphone_cut.npz"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="vrex-golden", description=__doc__)
    ap.add_argument("--trace", default=str(DEFAULT_TRACE), help="trace .npz (default: bundled)")
    ap.add_argument("--out", default="build/golden", help="output folder (a subfolder per trace)")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    ap.add_argument("--no-figures", action="store_true")
    ap.add_argument("--jobs", type=int, default=default_jobs(),
                    help="processes for the independent runs and the evaluation (default: "
                         "the usable cores); the results do not depend on it")
    ap.add_argument("--near-share", type=float, default=0.5,
                    help="near-tier capacity as a share of the blocks the stream needs (0.5)")
    ap.add_argument("--seeds", type=int, default=3,
                    help="hyperplane seeds every matched and count-matched comparison is made "
                         "over (3): mean, spread and a win only where the spreads part")
    ap.add_argument("--dense-layers", type=int, default=None,
                    help="the model's first N layers dense for every method (D14: no "
                         "prediction, every past token; default the Config's, 0)")
    args = ap.parse_args(argv)
    if args.dense_layers is not None and args.dense_layers < 0:
        ap.error(f"--dense-layers must be 0 or more, not {args.dense_layers}")
    if args.seeds < 1:
        ap.error(f"--seeds must be at least 1, not {args.seeds}")
    if not 0.0 < args.near_share <= 1.0:
        ap.error(f"--near-share must be in (0, 1], not {args.near_share}")
    try:
        trace = load_trace(args.trace)
    except TraceError as e:
        print(f"vrex-golden: {e}", file=sys.stderr)
        return 2
    out = Path(args.out) / trace.name
    summary = run_job(trace, out, progress=not args.quiet, figures=not args.no_figures,
                      near_share=args.near_share, jobs=args.jobs, seeds=args.seeds,
                      dense_layers=args.dense_layers)
    print(format_table(summary))
    print(f"wrote {out / 'summary.json'}" + ("" if args.no_figures else
          f", {out / 'retrieval.png'}, {out / 'pareto.png'}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
