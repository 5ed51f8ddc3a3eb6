"""A sweep's outputs beside its table: the Pareto front of area, frame latency and error,
plotted (``pareto.png``) and named in a short report (``report.md``)."""
from __future__ import annotations

import csv
import json
from pathlib import Path

from .spec import Sweep

__all__ = ["OBJECTIVES", "objectives", "pareto_front", "load_rows", "write_report"]

# what the front minimises: the blocks' ECP5 LUT4s, the frame latency at the paper's setting
# with the point's hardware sizes and retrieval ratio, the frame stage's output error
OBJECTIVES = {"ecp5_lut4": "area (ECP5 LUT4)", "paper_frame_ms": "frame latency (ms)",
              "frame_rel_l2": "relative L2 error (frames)"}


def load_rows(path) -> list[dict]:
    with Path(path).open(newline="") as f:
        return list(csv.DictReader(f))


def _objs(r: dict, keys=tuple(OBJECTIVES)) -> tuple:
    return tuple(float(r[k]) if r.get(k) not in (None, "") else float("nan") for k in keys)


def objectives(rows: list[dict]) -> tuple:
    """The objectives the rows hold (area is absent from a sweep that synthesises nothing)."""
    return tuple(k for k in OBJECTIVES if any(r.get(k) not in (None, "") for r in rows))


def pareto_front(rows: list[dict], keys=None) -> list[dict]:
    """The rows no other row dominates (no worse in every objective, better in one)."""
    keys = objectives(rows) if keys is None else keys
    pts = [(r, _objs(r, keys)) for r in rows]
    pts = [(r, o) for r, o in pts if all(x == x for x in o)]
    front = []
    for r, o in pts:
        if not any(all(a <= b for a, b in zip(p, o)) and p != o for _, p in pts):
            front.append(r)
    return front


def _is_default(r: dict) -> bool:
    return r.get("default") == "1"


def write_report(sweep: Sweep, out_dir, stats: dict | None = None) -> dict:
    """``pareto.png``, ``report.md`` and ``summary.json`` from ``out_dir/table.csv``
    (``stats``: the run's own figures, kept in the summary). Returns the summary."""
    out_dir = Path(out_dir)
    rows = [r for r in load_rows(out_dir / "table.csv")
            if r["trace"] in {Path(t).name for t in sweep.traces}]
    traces = list(dict.fromkeys(Path(t).name for t in sweep.traces))
    ok = {t: [r for r in rows if r["trace"] == t and r["status"] == "ok"] for t in traces}
    keys = objectives([r for t in traces for r in ok[t]])
    fronts = {t: pareto_front(ok[t], keys) for t in traces}
    _plot(ok, fronts, keys, out_dir / "pareto.png")
    lines = [f"# Sweep `{sweep.name}`", "",
             f"{len(rows)} rows from `{sweep.path.as_posix()}`: "
             f"{sum(r['status'] == 'ok' for r in rows)} measured, "
             f"{sum(r['status'] == 'refused' for r in rows)} refused by the rules, "
             f"{sum(r['status'] == 'failed' for r in rows)} failed. Varied: "
             + (", ".join(f"`{v}`" for v in sweep.varied) or "nothing") + ". Area: "
             + ("the ECP5 LUT4s of " + ", ".join(sweep.area) if sweep.area else "not measured")
             + f"; latency: a frame at the paper's setting ({sweep.paper_cache}-token cache) "
             "with the point's hardware sizes and frame retrieval ratio; error: the frame "
             "stage's relative L2 error of the attention output.", ""]
    for t in traces:
        lines += [f"## {t}: the front ({len(fronts[t])} of {len(ok[t])} points)", "",
                  "| " + " | ".join([*sweep.varied, *(OBJECTIVES[k] for k in keys),
                                     "frame ratio", "DP16KD"])
                  + " |", "|" + "---|" * (len(sweep.varied) + len(keys) + 2)]
        for r in sorted(fronts[t], key=lambda r: _objs(r, keys)):
            lines.append("| " + " | ".join([*(r[v] for v in sweep.varied),
                                            *(_fmt(r[k]) for k in keys),
                                            _fmt(r["frame_ratio"]), r["ecp5_bram"] or "–"])
                         + " |")
        lines += ["", _default_place(ok[t], fronts[t], sweep.varied, keys), ""]
    bad = [r for r in rows if r["status"] != "ok"]
    if bad:
        lines += ["## Not measured", ""] + [f"- {r['status']}: `{r['config']}`: {r['message']}"
                                           for r in bad] + [""]
    (out_dir / "report.md").write_text("\n".join(lines))
    summary = {"name": sweep.name, "file": sweep.path.as_posix(), "varied": sweep.varied,
               "area_blocks": list(sweep.area), "paper_cache": sweep.paper_cache,
               "objectives": list(keys), "run": stats or {},
               **{k: sum(r["status"] == k for r in rows) for k in ("ok", "refused", "failed")},
               "traces": {t: {"points": len(ok[t]),
                              "front": [{**{v: r[v] for v in sweep.varied},
                                         **{k: float(r[k]) for k in keys},
                                         "frame_ratio": float(r["frame_ratio"]),
                                         "ecp5_bram": r["ecp5_bram"] or None,
                                         "default": r["default"] == "1"}
                                        for r in sorted(fronts[t],
                                                        key=lambda r: _objs(r, keys))],
                              "default": _default_place(ok[t], fronts[t], sweep.varied, keys)}
                          for t in traces}}
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def _fmt(v) -> str:
    x = float(v)
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.4g}"


def _default_place(ok, front, varied, keys) -> str:
    d = next((r for r in ok if _is_default(r)), None)
    if d is None:
        return "The default build is not among this trace's measured points."
    if d in front:
        return "The default build is on the front."
    o = _objs(d, keys)
    better = [r for r in ok if all(a <= b for a, b in zip(_objs(r, keys), o))
              and _objs(r, keys) != o]
    best = min(better, key=lambda r: _objs(r, keys)[-1])
    gains = ", ".join(f"{OBJECTIVES[k].split(' (')[0]} {100 * (b / a - 1):+.1f}%"
                      for k, a, b in zip(keys, o, _objs(best, keys)) if a)
    return (f"The default build is dominated by {len(better)} point(s); the one of least "
            f"error, " + ", ".join(f"`{v} = {best[v]}`" for v in varied) + f": {gains}.")


def _plot(ok, fronts, keys, path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    pairs = [(1, 2), (0, 2), (0, 1)] if len(keys) == 3 else [(0, 1)]
    fig, axes = plt.subplots(len(ok), len(pairs), figsize=(4.4 * len(pairs), 3.6 * len(ok)),
                             squeeze=False)
    for row, (t, rows) in zip(axes, ok.items()):
        for ax, (i, j) in zip(row, pairs):
            xs = [_objs(r, keys) for r in rows]
            fr = [_objs(r, keys) for r in fronts[t]]
            ax.scatter([p[i] for p in xs], [p[j] for p in xs], s=14, c="0.7", label="point")
            ax.scatter([p[i] for p in fr], [p[j] for p in fr], s=24, c="tab:red",
                       label="front")
            dd = [_objs(r, keys) for r in rows if _is_default(r)]
            if dd:
                ax.scatter([dd[0][i]], [dd[0][j]], marker="*", s=160, c="tab:blue",
                           label="default build")
            ax.set_xlabel(OBJECTIVES[keys[i]])
            ax.set_ylabel(OBJECTIVES[keys[j]])
            ax.set_title(t, fontsize=9)
            ax.grid(alpha=0.3)
        row[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
