"""``make formal``: every block's bus and stream rules proven with SymbiYosys
(:mod:`verif.formal.plan`), a table on the screen and build/formal/report.{json,md}."""
from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor

from .plan import TARGETS, formal_config
from .sby import FORMAL_DIR

__all__ = ["main", "run_job"]


def run_job(job: tuple) -> dict:
    """One proof: (block, mode, depth, script) -> its result as a dict."""
    from .harness import harness
    from .sby import prove
    block, mode, depth, script = job
    h = harness(block, formal_config())
    r = prove(f"{block}_{mode}", h.top, h.ports, mode=mode, depth=depth, script=script)
    return dict(block=block, mode=mode, depth=depth, status=r.status,
                seconds=round(r.seconds, 1), detail=r.detail, reached=r.reached,
                asserts=h.asserts, assumes=h.assumes)


def jobs(blocks=None, quick: bool = False) -> list:
    out = []
    for t in TARGETS:
        if blocks and t.block not in blocks:
            continue
        if quick:
            if t.quick:
                out.append((t.block, "bmc", t.quick, t.script))
            continue
        out.append((t.block, "bmc", t.bmc, t.script))
        out.append((t.block, "cover", t.cover, t.script))
        if t.prove:
            out.append((t.block, "prove", t.prove, t.script))
    return out


def markdown(results: list) -> str:
    lines = ["| block | job | depth | status | time (s) | asserted | assumed | detail |",
             "|---|---|---:|---|---:|---:|---:|---|"]
    for r in results:
        detail = r["detail"].replace("\n", "; ")
        if r["mode"] == "cover" and r["reached"]:
            detail = "; ".join(f"{k} at {v}" for k, v in r["reached"].items())
        lines.append(f"| {r['block']} | {r['mode']} | {r['depth']} | {r['status']} | "
                     f"{r['seconds']} | {r['asserts']} | {r['assumes']} | {detail} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="verif.formal", description=__doc__.split("\n")[0])
    ap.add_argument("--blocks", nargs="*", help="only these blocks")
    ap.add_argument("--quick", action="store_true", help="make test's bounded proofs only")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    todo = jobs(args.blocks, args.quick)
    from .sby import prepare
    prepare()           # the solver's first start once, before the jobs start it together
    results = []
    with ProcessPoolExecutor(args.jobs) as pool:
        for r in pool.map(run_job, todo):
            print(f"{r['block']:<11} {r['mode']:<6} depth {r['depth']:>3}  {r['status']:<8}"
                  f" {r['seconds']:>7.1f} s  {r['detail'].splitlines()[0] if r['detail'] else ''}",
                  flush=True)
            results.append(r)
    FORMAL_DIR.mkdir(parents=True, exist_ok=True)
    report = {"config": json.loads(formal_config().to_json()), "jobs": results}
    path = FORMAL_DIR / "report.json"
    if args.blocks and not args.quick and path.exists():
        # some blocks again: their jobs replace theirs in the report of the same build
        old = json.loads(path.read_text())
        if old.get("config") == report["config"]:
            report["jobs"] = [r for r in old["jobs"] if r["block"] not in args.blocks] + results
    path.write_text(json.dumps(report, indent=1))
    (FORMAL_DIR / "report.md").write_text(markdown(report["jobs"]))
    # a bounded proof must pass; a cover not reached and k-induction that does not close say
    # how far the proof reaches (reported, not failed); a tool error fails
    bad = [r for r in results if r["status"] in ("ERROR", "TIMEOUT")
           or (r["mode"] == "bmc" and r["status"] != "PASS")]
    print(f"{len(results) - len(bad)} of {len(results)} passed (covers not reached and "
          f"k-induction that does not close are reported, not failed); build/formal/report.md")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
