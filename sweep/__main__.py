"""``python -m sweep FILE``: run a sweep file into build/sweep/<name>/ (table.csv,
pareto.png, report.md)."""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from .report import write_report
from .run import run_sweep
from .spec import SweepError, load_sweep


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="vrex-sweep", description=__doc__)
    ap.add_argument("sweep", help="the sweep file (YAML, docs/sweep.md)")
    ap.add_argument("--out", help="output folder (default build/sweep/<name>)")
    ap.add_argument("--scheduler", help="address of an existing Dask scheduler "
                    "(default: an embedded local cluster)")
    ap.add_argument("--workers", type=int, help="workers of the local cluster "
                    "(default: the machine's cores)")
    ap.add_argument("--local", action="store_true",
                    help="no Dask: every task in this process, one after another")
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args(argv)
    try:
        sweep = load_sweep(a.sweep)
    except SweepError as e:
        print(f"vrex-sweep: {e}", file=sys.stderr)
        return 2
    out = Path(a.out or Path("build") / "sweep" / sweep.name)
    st = run_sweep(sweep, out, scheduler=a.scheduler, workers=a.workers, local=a.local,
                   progress=not a.no_progress)
    summ = write_report(sweep, out, dataclasses.asdict(st))
    print(f"{sweep.name}: {st.points} rows ({st.reused} from the table, {st.refused} refused), "
          f"{st.measured} measured, {st.synthesised} block builds synthesised on "
          f"{st.workers} worker(s), {st.seconds:.1f} s")
    for t, s in summ["traces"].items():
        print(f"  {t}: {len(s['front'])} of {s['points']} points on the front. {s['default']}")
    print(f"  -> {out}/: table.csv, pareto.png, report.md, summary.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
