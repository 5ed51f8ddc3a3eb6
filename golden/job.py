"""The golden job: every method on one trace, a table, summary.json and two figures."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from . import baselines
from vrex.config import Config
from .kvmu import fetch_cost, simulate_layout
from .metrics import aggregate, evaluate
from .resv import run_resv, sink_count
from .trace import Trace, quantise

__all__ = ["run_job", "SWEEPS", "DEFAULT_KNOBS"]

# Each method's budget knob: the values swept for the trade-off curve.
SWEEPS = {
    "resv": [0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9],          # Th_r
    "resv_tuned": [0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9],    # Th_r
    "resv_noclust": [0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9],  # Th_r
    "topk": [16, 32, 64, 128, 256, 512],                    # tokens per KV head
    "rekv": [1, 2, 4, 8, 16],                               # past steps (frames)
    "window": [32, 64, 128, 256, 512, 1024],                # tokens
}
DEFAULT_KNOBS = {"resv": 0.3, "resv_tuned": 0.3, "resv_noclust": 0.3, "topk": 128, "rekv": 4,
                 "window": 256}
KNOB_NAMES = {"resv": "th_r", "resv_tuned": "th_r", "resv_noclust": "th_r", "topk": "k",
              "rekv": "frames", "window": "tokens"}
METHODS = ("resv", "resv_tuned", "resv_noclust", "topk", "rekv", "window", "full")


class Progress:
    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.t0 = time.time()

    def __call__(self, what: str):
        def report(i, n):
            if self.enabled and (i == n or i % max(1, -(-n // 4)) == 0):
                print(f"[golden {time.time() - self.t0:6.1f}s] {what}: {i}/{n}", file=sys.stderr,
                      flush=True)
        return report


def _jaccard(m1: np.ndarray, m2: np.ndarray) -> float:
    inter = (m1 & m2).sum(axis=-1)
    union = (m1 | m2).sum(axis=-1)
    ok = union > 0
    return float((inter[ok] / union[ok]).mean()) if ok.any() else 1.0


def run_job(trace: Trace, out_dir=None, *, progress: bool = True, figures: bool = True,
            sweeps: dict | None = None, near_share: float = 0.5) -> dict:
    """Run every method; ``near_share``: the near tier holds that share of the blocks a
    sequential layout of the whole trace needs (the rest of the stream goes far)."""
    sweeps = SWEEPS if sweeps is None else sweeps
    prog = Progress(progress)
    t_start = time.time()
    geo = trace.geometry()
    cfgs = {"resv": Config.from_preset("paper", **geo),
            "resv_tuned": Config.from_preset("tuned", **geo)}
    qt = quantise(trace)
    n_sink = sink_count(trace, cfgs["resv"])
    bounds = trace.step_bounds()
    stage = np.array(trace.step_stage())
    timing = {}

    def knobs(m):
        return sorted(set(sweeps.get(m, [])) | {DEFAULT_KNOBS[m]})

    runs, masks = {}, {}
    for name, cfg, clustering in (("resv", cfgs["resv"], True),
                                  ("resv_tuned", cfgs["resv_tuned"], True),
                                  ("resv_noclust", cfgs["resv"], False)):
        t0 = time.time()
        r = run_resv(trace, qt, cfg, knobs(name), clustering=clustering, progress=prog(name))
        timing[name] = time.time() - t0
        runs[name] = r
        for th, m in r.masks.items():
            masks[(name, th)] = m
    float_agree = {}
    for name in ("resv", "resv_tuned"):
        cfg = cfgs[name]
        rf = run_resv(trace, None, cfg.replace(numerics="float", wicsum="exact"), [cfg.th_r],
                      progress=prog(name + " (float)"))
        float_agree[name] = _jaccard(runs[name].masks[cfg.th_r], rf.masks[cfg.th_r])
    t0 = time.time()
    for k, m in baselines.topk(trace, n_sink, knobs("topk")).items():
        masks[("topk", k)] = m
    timing["topk"] = time.time() - t0
    t0 = time.time()
    for n, m in baselines.rekv(trace, n_sink, knobs("rekv")).items():
        masks[("rekv", n)] = m
    timing["rekv"] = time.time() - t0
    t0 = time.time()
    for n in knobs("window"):
        masks[("window", n)] = baselines.window(trace, n_sink, n)
    timing["window"] = time.time() - t0
    masks[("full", None)] = baselines.full(trace, n_sink)
    timing["full"] = 0.0

    main = {m: (m, DEFAULT_KNOBS.get(m)) for m in METHODS}
    t0 = time.time()
    stats = evaluate(trace, masks, n_sink, qt=qt, int_methods=(main["resv"], main["resv_tuned"]),
                     cfg=cfgs["resv"], progress=prog("evaluate"))
    timing["evaluate"] = time.time() - t0

    # KV layouts: ReSV's clusters are contiguous; every other method uses arrival order
    seq_owner = np.where(np.arange(trace.n_tokens) < n_sink, -1, 0)[None, None, :]
    seq_owner = np.broadcast_to(seq_owner, (trace.n_layers, 1, trace.n_tokens))
    bt = cfgs["resv"].block_tokens
    need = trace.n_layers * trace.n_kv_heads * -(-(trace.n_tokens - n_sink) // bt)
    near_blocks = max(trace.n_kv_heads, int(near_share * need))
    lay_kw = dict(block_tokens=bt, near_blocks=near_blocks, head_dim=trace.head_dim)
    layouts = {"seq": simulate_layout(seq_owner, bounds, heads_per_group=trace.n_kv_heads,
                                      **lay_kw)}
    for name in ("resv", "resv_tuned"):
        hpg = trace.n_kv_heads // cfgs[name].hash_groups
        layouts[name] = simulate_layout(runs[name].cluster_of, bounds, heads_per_group=hpg,
                                        **lay_kw)

    summary = {"trace": trace.name, "tokens": trace.n_tokens, "steps": trace.n_steps,
               "layers": [int(x) for x in trace.layers], "n_sink": n_sink,
               "geometry": geo, "configs": {k: c.to_dict() for k, c in cfgs.items()},
               "default_knobs": DEFAULT_KNOBS, "near_blocks": near_blocks,
               "near_share": near_share, "methods": {}}
    for m in METHODS:
        key = main[m]
        lay = layouts.get(m, layouts["seq"])
        cost = fetch_cost(lay, masks[key], bounds, trace.head_dim)
        res = aggregate(stats[key], stage, cost)
        if m in runs and runs[m].buckets_visited.get(key[1]):
            v, rows = runs[m].buckets_visited[key[1]]
            res["wtu_buckets_visited_share"] = v / rows / cfgs["resv"].buckets
        summary["methods"][m] = res
        summary[m] = res            # the flat keys the issue names
    for name in ("resv", "resv_tuned"):
        summary["methods"][name]["clusters"] = runs[name].cluster_stats(trace)
        summary[name]["clusters"] = summary["methods"][name]["clusters"]
    summary["int_float_agreement"] = float_agree["resv"]
    summary["int_float_agreement_by_preset"] = float_agree
    pareto = {}
    for m in METHODS:
        pts = []
        for key in sorted(k for k in masks if k[0] == m):
            agg = aggregate(stats[key], stage)
            pts.append({KNOB_NAMES.get(m, "knob"): key[1],
                        "retrieval_ratio": agg["retrieval_ratio"]["all"],
                        "output_cosine": agg["output_cosine"]["all"],
                        "mass_recall": agg["mass_recall"]})
        pareto[m] = pts
    summary["pareto"] = pareto
    timing["total"] = time.time() - t_start
    summary["timing_s"] = {k: round(v, 3) for k, v in timing.items()}
    summary["tokens_per_s"] = {m: trace.n_tokens * trace.n_layers / max(timing[m], 1e-9)
                               for m in ("resv", "resv_tuned", "resv_noclust", "topk", "rekv",
                                         "window")}

    if out_dir is not None:
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True))
        if figures:
            from .figures import plot_pareto, plot_retrieval
            plot_retrieval(summary, out_dir / "retrieval.png")
            plot_pareto(summary, out_dir / "pareto.png")
    return summary


def format_table(summary: dict) -> str:
    def f(x, pct=True):
        return "   -  " if x is None else (f"{100 * x:5.1f}%" if pct else f"{x:6.3f}")
    lines = [f"trace {summary['trace']}: {summary['tokens']} tokens, {summary['steps']} steps, "
             f"layers {summary['layers']}, {summary['n_sink']} sink tokens",
             f"{'method':14s} {'knob':>7s} | {'retrieved':>15s} | {'mass recall':>15s} | "
             f"{'output cosine':>15s} | {'fetched':>9s} {'bursts':>7s} {'far':>6s}",
             f"{'':14s} {'':>7s} | {'frame':>7s} {'text':>7s} | {'frame':>7s} {'text':>7s} | "
             f"{'frame':>7s} {'text':>7s} | {'KiB':>9s} {'':>7s} {'share':>6s}"]
    for m, r in summary["methods"].items():
        fe = r["fetch"]
        tot = fe["bytes_near"] + fe["bytes_far"]
        knob = summary["default_knobs"].get(m, "")
        lines.append(
            f"{m:14s} {str(knob):>7s} | {f(r['retrieval_ratio']['frame'])} "
            f"{f(r['retrieval_ratio']['text'])} | {f(r['mass_recall']['frame'])} "
            f"{f(r['mass_recall']['text'])} | {f(r['output_cosine']['frame'], False)}  "
            f"{f(r['output_cosine']['text'], False)}  | {tot / 1024:9.1f} "
            f"{fe['bursts_near'] + fe['bursts_far']:7d} "
            f"{f(fe['bytes_far'] / tot if tot else 0.0)}")
    for name in ("resv", "resv_tuned"):
        c = summary[name]["clusters"]
        lines.append(f"{name}: {c['count']} clusters, {c['mean_tokens']:.2f} tokens each, "
                     f"HC table {100 * c['table_share']:.2f}% of the KV cache, integer "
                     f"attention cosine {summary[name].get('int_attention_cosine', float('nan')):.4f}")
    lines.append(f"int/float agreement (mean Jaccard of selected tokens): "
                 + ", ".join(f"{k} {v:.3f}" for k, v in summary["int_float_agreement_by_preset"].items()))
    return "\n".join(lines)
