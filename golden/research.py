"""What closes ReSV's gap to the oracle at its prediction cost?

``python -m golden.research [--trace T ...]`` (``make research``) runs, per trace and preset,
ReSV and three variants over the Th_r sweep, and compares them in the frame stage at ReSV's
own ratio (each curve interpolated linearly in the retrieval ratio, as the golden job's
``matched`` table does) and at the keys a query row scores to predict:

- ``cap<k>``: clusters split at ``k`` members (``run_resv(cluster_cap=k)``): smaller clusters,
  so a representative key stands for fewer tokens, at more candidates;
- ``th_hd-2``: a stricter join (Th_hd lowered by 2): more, smaller clusters without a cap,
  the cost-matched reference for the caps;
- ``per_head``: one hash and one HC table per KV head (D1's option, ``hash_scope``) instead of
  one over the concatenated heads;
- ``two_stage<f>``: ReSV's selection at a higher Th_r, then the members of the selected
  clusters scored one by one (exact scores, the mean softmax probability over the step's
  rows, as the oracle ranks) and the best fraction ``f`` of them kept; its prediction cost is
  the candidates plus every member of the selected clusters.

Every variant is a golden-model experiment (float scoring in the second stage); none is in
the RTL. Writes ``build/research/<trace>.json`` and prints one table per trace.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from vrex.config import Config

from . import baselines
from .job import TH_RS, matched_points
from .metrics import aggregate, evaluate
from .resv import run_resv, sink_count
from .trace import Trace, load_trace, quantise

__all__ = ["two_stage", "run_research", "main"]

CAPS = (8, 16)
KEEP = (0.5, 0.75)
STAGE1 = (0.3, 0.5, 0.7, 0.9)   # Th_r of the two-stage variants' cluster selection


def two_stage(trace: Trace, n_sink: int, mask: np.ndarray, keep: float) -> np.ndarray:
    """Within ``mask [L, S, Hkv, T]`` (a cluster selection), per (layer, step, KV head) the
    ``keep`` share of its tokens (``baselines.budget``) with the highest mean softmax
    probability over the step's rows (the oracle's ranking); ties to the lower token index."""
    return baselines._token_topk(trace, n_sink, [keep], baselines.oracle_score(trace),
                                 within=mask)[keep]


def _curve(stats, keys, stage, head_dim):
    pts = []
    for knob, st in stats.items():
        a = aggregate(st, stage, keys=keys[knob], head_dim=head_dim)
        pts.append({"knob": knob, "frame": {
            "retrieval_ratio": a["retrieval_ratio"]["frame"],
            "output_rel_l2": a["output_rel_l2"]["frame"],
            "mass_recall": a["mass_recall"]["frame"],
            "keys_per_row": a["prediction"]["keys_per_row"]["frame"],
            "key_share": a["prediction"]["key_share"]["frame"]}})
    return pts


def run_research(trace: Trace, progress: bool = True) -> dict:
    """Every variant's frame-stage curve and its point at ReSV's default ratio, per preset."""
    t0 = time.time()
    qt = quantise(trace)
    geo = trace.geometry()
    stage = np.array(trace.step_stage())
    out = {"trace": trace.name, "presets": {}}

    def say(what):
        if progress:
            print(f"[research {time.time() - t0:6.1f}s] {trace.name}: {what}", file=sys.stderr,
                  flush=True)
    for preset in ("paper", "tuned"):
        cfg = Config.from_preset(preset, **geo)
        n_sink = sink_count(trace, cfg)
        masks, keys = {}, {}

        def add(name, r, th_rs=TH_RS):
            for th in th_rs:
                masks[(name, th)] = r.masks[th]
                keys[(name, th)] = r.candidates.astype(float)
        say(f"{preset}: ReSV")
        base = run_resv(trace, qt, cfg, TH_RS)
        add("resv", base)
        for cap in CAPS:
            say(f"{preset}: clusters capped at {cap}")
            add(f"cap{cap}", run_resv(trace, qt, cfg, TH_RS, cluster_cap=cap))
        # the same cost lever without splitting: a stricter join (more, smaller clusters)
        say(f"{preset}: th_hd - 2")
        add("th_hd-2", run_resv(trace, qt, cfg.replace(th_hd=cfg.th_hd - 2), TH_RS))
        say(f"{preset}: per-head hashing")
        add("per_head", run_resv(trace, qt, cfg.replace(hash_scope="per_head"), TH_RS))
        say(f"{preset}: two stages")
        for keep in KEEP:
            for th in STAGE1:
                m = base.masks[th]
                masks[(f"two_stage{keep}", th)] = two_stage(trace, n_sink, m, keep)
                keys[(f"two_stage{keep}", th)] = (base.candidates +
                                                  m.sum(axis=-1)).astype(float)
        say(f"{preset}: evaluating {len(masks)} masks")
        stats = evaluate(trace, masks, n_sink)
        curves = {}
        for (name, th) in masks:
            curves.setdefault(name, {})[th] = stats[(name, th)]
        pareto = {name: _curve(st, {th: keys[(name, th)] for th in st}, stage, trace.head_dim)
                  for name, st in curves.items()}
        mine = next(p["frame"] for p in pareto["resv"] if p["knob"] == cfg.th_r)
        out["presets"][preset] = {
            "resv": mine, "pareto": pareto,
            "matched": {name: matched_points([p["frame"] for p in pts], mine["retrieval_ratio"],
                                             ("output_rel_l2", "mass_recall", "keys_per_row",
                                              "key_share"))
                        for name, pts in pareto.items() if name != "resv"}}
    out["seconds"] = time.time() - t0
    return out


def format_research(r: dict) -> str:
    lines = [f"{r['trace']}: frame stage at ReSV's own ratio (rel. L2 error; keys a row scores "
             f"to predict, share of the past)"]
    for preset, p in r["presets"].items():
        m0 = p["resv"]
        lines.append(f"  {preset} at {100 * m0['retrieval_ratio']:.1f}%: resv "
                     f"{m0['output_rel_l2']:.4f} ({m0['keys_per_row']:.0f} keys, "
                     f"{100 * m0['key_share']:.1f}%)")
        for name, m in p["matched"].items():
            lines.append(f"    {name:16s} " + ("out of its sweep's range" if m is None else
                                                f"{m['output_rel_l2']:.4f} "
                                                f"({m['keys_per_row']:.0f} keys, "
                                                f"{100 * m['key_share']:.1f}%)"))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="golden.research", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", action="append", help="trace .npz (default: bundled; repeat)")
    ap.add_argument("--out", default="build/research")
    args = ap.parse_args(argv)
    from .cli import DEFAULT_TRACE
    for path in args.trace or [DEFAULT_TRACE]:
        r = run_research(load_trace(path))
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{r['trace']}.json").write_text(json.dumps(r, indent=1))
        print(format_research(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
