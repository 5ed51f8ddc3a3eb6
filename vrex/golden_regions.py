"""The golden job's regions of the docs (docs/methods.md): the matched table, the factorial, the
seeds' spread, the two orders, the baselines' options; each renders the snapshot's golden
entries (``vrex.reports.golden_values``)."""
from __future__ import annotations

from .reports import MATCHED

__all__ = ["methods_matched", "methods_factorial", "methods_seeds", "methods_order",
           "methods_wicsum", "methods_options"]


def _golden_keys(snap: dict) -> list[str]:
    """The snapshot's golden jobs, the bundled trace first."""
    return sorted((k for k in snap.get("entries", {}) if k.startswith("golden/")),
                  key=lambda k: (k != "golden/carphone_cut", k))


def methods_matched(snap: dict) -> list[str]:
    """Every traced golden job's matched table: relative L2 error (prediction cost)."""
    keys = _golden_keys(snap)
    out = ["| trace | stage | ratio | " + " | ".join(MATCHED) + " |",
           "|---|---|---|" + "---|" * len(MATCHED)]
    for k in keys:
        v = snap["entries"][k]["values"]
        for i, stage in enumerate(("frame", "text")):
            if stage not in v:
                continue
            cells = [f"{v[stage][m][0]:.3f} ({100 * v[stage][m][1]:.1f}%)" if m in v[stage]
                     else "–" for m in MATCHED]
            name = f"`{k.split('/', 1)[1]}` ({v['tokens']} tokens)" if i == 0 else ""
            out.append(f"| {name} | {stage} | {100 * v[stage]['ratio']:.1f}% | "
                       + " | ".join(cells) + " |")
    return out


def methods_factorial(snap: dict) -> list[str]:
    """Every predictor under every budget policy, per traced golden job: relative L2 error
    (retrieval ratio) per stage, means over the job's hyperplane seeds; the prediction cost
    (share of the past keys scored)."""
    pol = ("fraction", "count", "wicsum")
    out = ["| trace | predictor (keys scored) | " + " | ".join(
        f"{st}: {p}" for st in ("frame", "text") for p in pol) + " |",
        "|---|---|" + "---|" * 6]
    keys = _golden_keys(snap)
    for k in keys:
        fx = snap["entries"][k]["values"].get("factorial", {})
        for i, (p, by) in enumerate(fx.items()):
            name = f"`{k.split('/', 1)[1]}`" if i == 0 else ""
            cells = [f"{by[q][st][0]:.3f} ({100 * by[q][st][1]:.0f}%)"
                     for st in ("frame", "text") for q in pol]
            out.append(f"| {name} | {p} ({100 * by['count']['frame'][2]:.1f}%) | "
                       + " | ".join(cells) + " |")
    return out if len(out) > 2 else ["(no golden job with the factorial in the snapshot)"]


def methods_seeds(snap: dict) -> list[str]:
    """The matched (``resv`` at Th_r 0.3 against each baseline at its ratio) and count-matched
    (each predictor under ReSV's counts) comparisons over hyperplane seeds: mean error, its
    range, and ReSV's verdict where the ranges part."""
    out = []
    keys = _golden_keys(snap)
    mark = {"win": " **W**", "loss": " **L**", "overlap": "", None: ""}
    for kind, title in (("matched", "matched ratio"), ("count", "ReSV's counts")):
        rows = []
        for k in keys:
            sd = snap["entries"][k]["values"].get("seeds")
            if not sd:
                continue
            for st in ("frame", "text"):
                by = {m: sd[kind][st][m] for m in sorted(sd[kind][st], key=lambda m: m != "resv")}
                if not rows:
                    rows += [f"| {title}: trace | stage | " + " | ".join(by) + " |",
                             "|---|---|" + "---|" * len(by)]
                cells = [("–" if v[0] is None else
                          f"{v[0]:.3f} ({v[1]:.3f}-{v[2]:.3f}){mark[v[3]]}") for v in by.values()]
                rows.append(f"| `{k.split('/', 1)[1]}` ({sd['n']} seeds) | {st} | "
                            + " | ".join(cells) + " |")
        out += rows + ([""] if rows else [])
    return out[:-1] if out else ["(no golden job with seeds in the snapshot)"]


def methods_order(snap: dict) -> list[str]:
    """Per traced golden job, the default order (cluster first) against select first at the
    same ratio: the relative L2 error's ratio (the retrieval ratio)."""
    out = ["| trace | `paper` frame | `paper` text | `tuned` frame | `tuned` text |",
           "|---|---|---|---|---|"]
    for k in _golden_keys(snap):
        o = snap["entries"][k]["values"].get("order")
        if not o:
            continue
        cell = lambda st, p: (f"{o[st][p][0]:.3f} ({100 * o[st][p][1]:.1f}%)"
                              if p in o.get(st, {}) else "–")
        out.append(f"| `{k.split('/', 1)[1]}` | " + " | ".join(
            cell(st, p) for p in ("resv", "resv_tuned") for st in ("frame", "text")) + " |")
    return out if len(out) > 2 else ["(no golden job with both orders in the snapshot)"]


def methods_wicsum(snap: dict) -> list[str]:
    """Per traced golden job and preset at Th_r 0.3, the retrieval ratio of the bucketed walk
    (the WTU's), of exact WiCSum on the integer scores and of the float reference, frame /
    text."""
    out = ["| trace | preset | bucketed (hardware) | exact, integer scores | exact, float |",
           "|---|---|---|---|---|"]
    for k in _golden_keys(snap):
        w = snap["entries"][k]["values"].get("wicsum", {})
        for i, (p, name) in enumerate((("resv", "paper"), ("resv_tuned", "tuned"))):
            if p not in w:
                continue
            out.append(f"| {f'`{k.split(chr(47), 1)[1]}`' if i == 0 else ''} | `{name}` | "
                       + " | ".join(f"{100 * w[p][c][0]:.1f}% / {100 * w[p][c][1]:.1f}%"
                                    for c in ("bucket", "exact_int", "exact_float")) + " |")
    return out if len(out) > 2 else ["(no golden job with the WiCSum ratios in the snapshot)"]


OPTION_NAMES = {"reference": "as the reference", "sparse_first_layers": "first layers sparse",
                "no_skew": "no skewing", "per_step_dims": "dimensions chosen every step",
                "adaptive_alpha": "adaptive count (alpha 5, the budget its cap)"}


def methods_options(snap: dict) -> list[str]:
    """Each option of Quest and InfiniGen switched, at the default budget: per traced golden
    job the retrieval ratio and relative L2 error per stage."""
    out = ["| trace | method | option | frame: ratio, error | text: ratio, error |",
           "|---|---|---|---|---|"]
    keys = _golden_keys(snap)
    for k in keys:
        for m, by in snap["entries"][k]["values"].get("options", {}).items():
            for v, st in by.items():
                out.append(f"| `{k.split('/', 1)[1]}` | {m} | {OPTION_NAMES.get(v, v)} | "
                           + " | ".join(f"{100 * st[x][0]:.1f}%, {st[x][1]:.3f}"
                                        for x in ("frame", "text")) + " |")
    return out if len(out) > 2 else ["(no golden job with the options in the snapshot)"]
