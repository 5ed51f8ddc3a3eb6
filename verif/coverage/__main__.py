"""``make coverage``: every block's Verilog tier (the build points of ``make test``) run on
models that count line and toggle coverage, then per block the share of Verilog lines and
signal bits the tests reached, every line never reached (with where it sits), and the
functional events (:mod:`verif.coverage.events`) -> build/coverage/report.{json,md}.

A block passes with 95 % of its lines covered or each line it never reached explained in
:mod:`verif.coverage.waivers`; the points of its build points merge (a line of the same
text, in the same process and arm, reached in any of them)."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from . import dat
from .context import context

__all__ = ["main", "block_report", "LINE_GOAL"]

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "build" / "coverage"
LINE_GOAL = 95.0
GROUPS = ("hcu", "wtu", "attn", "kvmu", "core")


def run_tests(groups, jobs: int) -> int:
    """The Verilog tiers of ``groups`` under pytest with ``VREX_COVERAGE=1``, and the core's
    Amaranth tier for its functional samples (the error codes its bad-input tests raise)."""
    files = [f"verif/{g}/test_verilog.py" for g in groups
             if (ROOT / "verif" / g / "test_verilog.py").exists()]
    if "core" in groups:
        files.append("verif/core/test_sim.py")
    samples = OUT / "events_tests.txt"
    OUT.mkdir(parents=True, exist_ok=True)
    for old in OUT.glob("events_*.txt"):        # this run's samples only
        old.unlink()
    env = {**os.environ, "VREX_COVERAGE": "1", "VREX_FCOV": str(samples)}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files]
    if jobs > 1:
        cmd += ["-n", str(jobs), "--dist", "worksteal"]
    return subprocess.call(cmd, cwd=ROOT, env=env)


def _points(build: Path) -> list:
    """``[(key, Point, text, where)]`` of one build point's coverage.dat."""
    vfiles = {p.name: p.read_text().splitlines() for p in build.glob("*.v")}
    out = []
    for p in dat.read(build / "coverage.dat"):
        lines = vfiles.get(Path(p.fields.get("f", "")).name, [])
        text = lines[p.line - 1].strip() if 0 < p.line <= len(lines) else ""
        where = context(lines, p.line) if p.kind == "line" and lines else ""
        out.append((dat.key(p, f"{where} | {text}"), p, text, where))
    return out


def block_report(block: str, builds: list[Path]) -> dict:
    """One block's figures over its build points' coverage.dat files."""
    from .waivers import waived
    per_build, merged = {}, {}
    for b in builds:
        pts = _points(b)
        per_build[b.name] = {k: dict(total=sum(1 for _, p, *_ in pts if p.kind == k),
                                     hit=sum(1 for _, p, *_ in pts if p.kind == k and p.count))
                             for k in ("line", "toggle")}
        for k, p, text, where in pts:
            hit, seen = merged.get(k, (False, None))
            merged[k] = (hit or p.count > 0, seen or (b.name, p.line, text, where, p))
    row = {"block": block, "builds": per_build}
    for kind in ("line", "toggle"):
        keys = [k for k in merged if k[0] == kind]
        hit = sum(1 for k in keys if merged[k][0])
        row[kind] = dict(total=len(keys), hit=hit,
                         percent=round(100.0 * hit / len(keys), 2) if keys else 100.0)
    missed = []
    for k, (hit, (build, line, text, where, p)) in merged.items():
        if k[0] != "line" or hit:
            continue
        reason = waived(block, f"{where} | {text}")
        missed.append(dict(build=build, line=line, text=text, where=where,
                           comment=p.comment, waived=reason))
    missed.sort(key=lambda m: (m["build"], m["line"]))
    row["missed"] = missed
    row["unexplained"] = sum(1 for m in missed if not m["waived"])
    row["pass"] = row["line"]["percent"] >= LINE_GOAL or row["unexplained"] == 0
    return row


def collect(blocks=None) -> list[dict]:
    rows = []
    for bdir in sorted(p for p in OUT.iterdir() if p.is_dir()) if OUT.exists() else []:
        if blocks and bdir.name not in blocks:
            continue
        builds = sorted(b for b in bdir.iterdir() if (b / "coverage.dat").exists())
        if builds:
            rows.append(block_report(bdir.name, builds))
    return rows


def markdown(rows: list, events: dict) -> str:
    out = ["| block | build points | lines | toggles | never reached | explained | result |",
           "|---|---|---:|---:|---:|---:|---|"]
    for r in rows:
        ln, tg = r["line"], r["toggle"]
        n = len(r["missed"])
        tgl = f"{tg['percent']:.1f} %" if tg["total"] else "not counted"
        out.append(f"| {r['block']} | {', '.join(r['builds'])} | {ln['percent']:.1f} % "
                   f"({ln['hit']}/{ln['total']}) | {tgl} | {n} | "
                   f"{n - r['unexplained']} | {'PASS' if r['pass'] else 'FAIL'} |")
    cell = (lambda s: s.replace("|", "\\|"))
    for r in rows:
        if r["missed"]:
            out += ["", f"## {r['block']}: lines never reached", "",
                    "| build | line | where | text | why |", "|---|---:|---|---|---|"]
            for m in r["missed"]:
                out.append(f"| {m['build']} | {m['line']} | {cell(m['where'])} | "
                           f"`{cell(m['text'])}` | {m['waived'] or '**unexplained**'} |")
    if events:
        out += ["", "## Functional events", "", "| event | block | reached in |", "|---|---|---|"]
        for name, ev in events.items():
            where = (", ".join(ev["hits"]) or
                     (f"unreachable: {ev['unreachable']}" if ev.get("unreachable")
                      else "**never**"))
            out.append(f"| {name} | {ev['block']} | {where} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="verif.coverage", description=__doc__.split("\n")[0])
    ap.add_argument("--groups", nargs="*", default=list(GROUPS),
                    help="the Verilog tiers to run (verif/<group>/)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--report-only", action="store_true",
                    help="report the coverage.dat files already under build/coverage/")
    args = ap.parse_args(argv)
    rc = 0 if args.report_only else run_tests(args.groups, args.jobs)
    from .events import functional
    rows = collect()
    events = functional(OUT)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "report.json").write_text(json.dumps(dict(blocks=rows, events=events), indent=1,
                                                default=str) + "\n")
    md = markdown(rows, events)
    (OUT / "report.md").write_text(md)
    print(md.split("\n\n")[0])
    missing = [n for n, e in events.items() if not e["hits"] and not e.get("unreachable")]
    unreachable = [n for n, e in events.items() if not e["hits"] and e.get("unreachable")]
    bad = [r["block"] for r in rows if not r["pass"]]
    print(f"\nbuild/coverage/report.md: {len(rows)} blocks, {len(bad)} under {LINE_GOAL:g} % "
          f"with lines unexplained {bad or ''}; "
          f"{len(events) - len(missing) - len(unreachable)} of {len(events)} functional events "
          f"reached, {len(unreachable)} explained unreachable; never: {missing or 'none'}")
    return 1 if rc or bad or missing else 0


if __name__ == "__main__":
    sys.exit(main())
