"""The golden job: every method on one trace, a table, summary.json and two figures."""

from __future__ import annotations

import json
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np

from . import baselines
from vrex.config import Config
from .factorial import CAP, POLICIES, PREDICTORS, factorial_masks
from .seeds import over_seeds
from .kvmu import fetch_cost, simulate_layout
from .metrics import aggregate, evaluate
from .pool import map_forked
from .resv import dense_rows, densify, run_resv, sink_count
from .trace import Trace, quantise

__all__ = ["run_job", "SWEEPS", "DEFAULT_KNOBS"]

# Each method's budget knob: the values swept for the trade-off curve. ReSV's is Th_r; every
# other method's is a fraction of the past tokens available at each (layer, step, KV head)
# (golden.baselines.budget), so every curve spans ReSV's ratios on every trace.
FRACTIONS = [0.02, 0.05, 0.1, 0.2, 0.3, 0.45, 0.6, 0.8]
TH_RS = [0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9]
SWEEPS = {
    "resv": TH_RS,                                          # Th_r
    "resv_tuned": TH_RS,
    "resv_sf": TH_RS,                                       # the other order: select first
    "resv_tuned_sf": TH_RS,
    "resv_noclust": [0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9],  # Th_r
    "oracle_topk": FRACTIONS,
    "quest": FRACTIONS,
    "infinigen": FRACTIONS,
    "rekv": FRACTIONS,
    "window": FRACTIONS,
}
DEFAULT_KNOBS = {"resv": 0.3, "resv_tuned": 0.3, "resv_sf": 0.3, "resv_tuned_sf": 0.3,
                 "resv_noclust": 0.3, "oracle_topk": 0.3,
                 "quest": 0.3, "infinigen": 0.3, "rekv": 0.3, "window": 0.3}
KNOB_NAMES = {"resv": "th_r", "resv_tuned": "th_r", "resv_sf": "th_r",
              "resv_tuned_sf": "th_r", "resv_noclust": "th_r"}
METHODS = ("resv", "resv_tuned", "resv_sf", "resv_tuned_sf", "resv_noclust",
           "oracle_topk", "quest", "infinigen", "rekv", "window", "full")
PRESETS = ("resv", "resv_tuned", "resv_sf", "resv_tuned_sf")
SEEDS = 3                 # hyperplane seeds per preset at the default Th_r (the first is hp_seed)
BASELINES = ("resv_noclust", "oracle_topk", "quest", "infinigen", "rekv", "window")
QUEST_PAGE = 16           # the KV layout's block (design decision D12)
INFINIGEN_DIMS = 0.25     # share of the dimensions InfiniGen-style speculation scores with
DENSE = {"quest": baselines.QUEST_DENSE, "infinigen": baselines.INFINIGEN_DENSE}
# each reference option switched (the references: dense first layers, skewed dimensions chosen
# once, a fixed budget), run at the default budget beside the method itself
OPTIONS = {"quest": {"sparse_first_layers": dict(dense_layers=0)},
           "infinigen": {"sparse_first_layers": dict(dense_layers=0),
                         "no_skew": dict(skew=False), "per_step_dims": dict(per_step=True),
                         "adaptive_alpha": dict(alpha=baselines.INFINIGEN_ALPHA)}}


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


def _stage_ratios(mask: np.ndarray, trace: Trace, n_sink: int, stage: np.ndarray) -> dict:
    """Pooled retrieval ratio of one mask ``[L, S, Hkv, T]`` per stage."""
    b = trace.step_bounds()
    out = {}
    for st in ("frame", "text"):
        sel = avail = 0
        for s in range(1, trace.n_steps):
            if stage[s] != st or b[s] <= n_sink:
                continue
            sel += int(mask[:, s, :, n_sink:b[s]].sum())
            avail += (int(b[s]) - n_sink) * trace.n_layers * trace.n_kv_heads
        out[st] = sel / avail if avail else None
    return out


def run_job(trace: Trace, out_dir=None, *, progress: bool = True, figures: bool = True,
            sweeps: dict | None = None, near_share: float = 0.5, jobs: int = 1,
            seeds: int = SEEDS, dense_layers: int | None = None) -> dict:
    """Run every method; ``near_share``: the near tier holds that share of the blocks a
    sequential layout of the whole trace needs (the rest of the stream goes far). ``jobs``:
    processes for the independent runs and the evaluation (:mod:`golden.pool`); the
    results do not depend on it. ``timing_s`` holds each run's own time. ``seeds``: the
    hyperplane seeds every matched and count-matched comparison is made over (the first is
    the preset's ``hp_seed``; ``seed_spread``). ``dense_layers``: the model's first that many
    layers dense for every method (D14: what the hardware does with the descriptors' ``dense``
    flag; default the Config's), on top of the references' own dense first layers."""
    if seeds < 1:
        raise ValueError(f"seeds must be at least 1, not {seeds}")
    sweeps = SWEEPS if sweeps is None else sweeps
    prog = Progress(progress)
    t_start = time.time()
    geo = trace.geometry()
    extra = {} if dense_layers is None else {"dense_layers": dense_layers}
    cfgs = {"resv": Config.from_preset("paper", **geo, **extra),
            "resv_tuned": Config.from_preset("tuned", **geo, **extra)}
    dense = cfgs["resv"].dense_layers
    qt = quantise(trace)
    n_sink = sink_count(trace, cfgs["resv"])
    bounds = trace.step_bounds()
    stage = np.array(trace.step_stage())
    timing = {}

    def knobs(m):
        return sorted(set(sweeps.get(m, [])) | {DEFAULT_KNOBS[m]})

    # every run that needs no other run's result, as one task each (in parallel with jobs)
    tasks = {}
    for name, cfg, clustering in (
            ("resv_noclust", cfgs["resv"], False),         # the longest first
            ("resv", cfgs["resv"], True), ("resv_tuned", cfgs["resv_tuned"], True),
            ("resv_sf", cfgs["resv"].replace(order="select_first"), True),
            ("resv_tuned_sf", cfgs["resv_tuned"].replace(order="select_first"), True)):
        tasks[name] = partial(run_resv, trace, qt, cfg, knobs(name), clustering=clustering,
                              progress=prog(name))
    for name in ("resv", "resv_tuned"):
        cfg = cfgs[name]
        # the float reference (exact WiCSum) over the same Th_r sweep: its curve, so the
        # integer mode is compared with it at the same ratio (the "_float" curves)
        tasks[name + "_float"] = partial(run_resv, trace, None, cfg.replace(
            numerics="float", wicsum="exact"), knobs(name), progress=prog(name + " (float)"))
        # other hyperplane seeds at the default Th_r: the spread of the headline figures
        for k in range(1, seeds):
            tasks[f"{name}_seed{k}"] = partial(run_resv, trace, qt,
                                               cfg.replace(hp_seed=cfg.hp_seed + k), [cfg.th_r])
        # the same Th_r with exact WiCSum (integer and float), beside the bucketed walk's
        tasks[name + "_exact"] = partial(run_resv, trace, qt, cfg.replace(wicsum="exact"),
                                         [cfg.th_r])
    # the HCU's cluster-size cap at every seed: the factorial's resv_cap predictor
    for k in range(seeds):
        c = cfgs["resv"]
        tasks[f"resv_cap{k}"] = partial(run_resv, trace, qt, c.replace(
            hp_seed=c.hp_seed + k, cluster_cap=CAP), [c.th_r])
    for name, fn in (("oracle_topk", baselines.oracle_topk),
                     ("quest", lambda t, n, f: baselines.quest(t, n, f, page=QUEST_PAGE)),
                     ("infinigen", lambda t, n, f: baselines.infinigen(t, n, f,
                                                                       INFINIGEN_DIMS)),
                     ("rekv", baselines.rekv)):
        tasks[name] = partial(fn, trace, n_sink, knobs(name))
    # each option of the two references switched, at the default budget (baseline_options)
    for m, variants in OPTIONS.items():
        fn = {"quest": partial(baselines.quest, page=QUEST_PAGE),
              "infinigen": partial(baselines.infinigen, r_frac=INFINIGEN_DIMS)}[m]
        for v, kw in variants.items():
            if "dense_layers" in kw and list(dense_rows(trace, max(DENSE[m], dense))) == \
                    list(dense_rows(trace, dense)):
                continue        # the reference's dense layers change nothing on this trace
            tasks[f"{m}:{v}"] = partial(fn, trace, n_sink, [DEFAULT_KNOBS[m]], **kw)
    tasks["window"] = lambda: {f: baselines.window(trace, n_sink, f) for f in knobs("window")}
    def timed(name):
        t0 = time.time()
        return tasks[name](), time.time() - t0
    done = map_forked(timed, list(tasks), jobs)
    runs, masks = {}, {}
    for name, (r, sec) in zip(tasks, done):
        timing[name] = sec
        if isinstance(r, dict):                 # a baseline's masks by budget
            for f, m in r.items():
                masks[(name, f)] = m
        else:
            runs[name] = r
    for name in ("resv", "resv_sf", "resv_tuned", "resv_tuned_sf", "resv_noclust",
                 "resv_float", "resv_tuned_float"):
        for th, m in runs[name].masks.items():
            masks[(name, th)] = m
    masks[("full", None)] = baselines.full(trace, n_sink)
    timing["full"] = 0.0

    # the float mode on each integer run's own clusters: the numerics' share alone
    same = dict(zip(("resv", "resv_tuned"), map_forked(
        lambda name: run_resv(trace, None, cfgs[name].replace(numerics="float", wicsum="exact"),
                              [cfgs[name].th_r], partition=runs[name].cluster_of).masks,
        ("resv", "resv_tuned"), jobs)))
    float_agree, exact_ratio, seed_masks, same_partition = {}, {}, {}, {}
    for name in ("resv", "resv_tuned"):
        cfg = cfgs[name]
        rf = runs[name + "_float"]
        float_agree[name] = _jaccard(runs[name].masks[cfg.th_r], rf.masks[cfg.th_r])
        same_partition[name] = _jaccard(runs[name].masks[cfg.th_r], same[name][cfg.th_r])
        for k in range(1, seeds):
            m = runs[f"{name}_seed{k}"].masks[cfg.th_r]
            masks[(f"{name}_seed{k}", cfg.th_r)] = m
            seed_masks.setdefault(name, []).append(m)
        exact_ratio[name] = {
            "bucket": _stage_ratios(runs[name].masks[cfg.th_r], trace, n_sink, stage),
            "exact_int": _stage_ratios(runs[name + "_exact"].masks[cfg.th_r], trace, n_sink,
                                       stage),
            "exact_float": _stage_ratios(rf.masks[cfg.th_r], trace, n_sink, stage)}
    pred_keys = {m: baselines.prediction_keys(m, trace, n_sink, page=QUEST_PAGE,
                                              r_frac=INFINIGEN_DIMS,
                                              dense_layers=max(DENSE.get(m, 0), dense),
                                              candidates=runs[m].candidates if m in runs
                                              and m != "resv_noclust" else None)
                 for m in METHODS}
    for name in ("resv", "resv_tuned"):
        pred_keys[name + "_float"] = runs[name + "_float"].candidates.astype(float)

    # the factorial comparison: every predictor under every budget policy (golden.factorial),
    # at every seed's ReSV counts and clusters
    t0 = time.time()
    base = runs["resv"]
    hpg = trace.n_kv_heads // base.cfg.hash_groups
    seed_runs = [base] + [runs[f"resv_seed{k}"] for k in range(1, seeds)]
    pairs = [(r.masks[r.cfg.th_r], r.cluster_of) for r in seed_runs]
    cap_runs = [runs[f"resv_cap{k}"] for k in range(seeds)]
    capped = [r.cluster_of for r in cap_runs]
    for part in map_forked(lambda p: factorial_masks(trace, n_sink, pairs, hpg, predictors=[p],
                                                     capped=capped, order=base.cfg.order),
                           PREDICTORS, jobs):
        for (k, p, q), m in part.items():
            masks[(f"{'fx' if k == 0 else f'fx{k}'}:{p}:{q}", None)] = m
    timing["factorial"] = time.time() - t0

    # the dense layers (D14) for every method: each mask attends every past token there
    for m in masks.values():
        densify(trace, n_sink, m, dense)
    main = {m: (m, DEFAULT_KNOBS.get(m)) for m in METHODS}
    t0 = time.time()
    stats = evaluate(trace, masks, n_sink, qt=qt, int_methods=(main["resv"], main["resv_tuned"]),
                     cfg=cfgs["resv"], progress=prog("evaluate"), jobs=jobs)
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
    for name in PRESETS:
        hpg = trace.n_kv_heads // runs[name].cfg.hash_groups
        layouts[name] = simulate_layout(runs[name].cluster_of, bounds, heads_per_group=hpg,
                                        **lay_kw)

    summary = {"trace": trace.name, "tokens": trace.n_tokens, "steps": trace.n_steps,
               "layers": [int(x) for x in trace.layers], "n_sink": n_sink,
               "dense_layers": dense,
               "geometry": geo, "configs": {k: c.to_dict() for k, c in cfgs.items()},
               "default_knobs": DEFAULT_KNOBS, "near_blocks": near_blocks,
               "near_share": near_share, "methods": {}}
    for m in METHODS:
        key = main[m]
        lay = layouts.get(m, layouts["seq"])
        cost = fetch_cost(lay, masks[key], bounds, trace.head_dim)
        res = aggregate(stats[key], stage, cost, keys=pred_keys[m], head_dim=trace.head_dim)
        if m in runs and runs[m].buckets_visited.get(key[1]):
            v, rows = runs[m].buckets_visited[key[1]]
            res["wtu_buckets_visited_share"] = v / rows / cfgs["resv"].buckets
        summary["methods"][m] = res
        summary[m] = res            # the flat keys the issue names
    for name in PRESETS:
        summary["methods"][name]["clusters"] = runs[name].cluster_stats(trace)
        summary[name]["clusters"] = summary["methods"][name]["clusters"]
    for name, r in exact_ratio.items():
        summary["methods"][name]["wicsum_ratio"] = r
    summary["int_float_agreement"] = float_agree["resv"]
    summary["int_float_agreement_by_preset"] = float_agree
    summary["int_float_same_partition"] = same_partition
    pareto = {}
    for m in METHODS + ("resv_float", "resv_tuned_float"):
        pts = []
        for key in sorted((k for k in masks if k[0] == m), key=lambda k: (k[1] is None, k[1])):
            agg = aggregate(stats[key], stage, keys=pred_keys[m], head_dim=trace.head_dim)
            pt = {KNOB_NAMES.get(m, "fraction"): key[1],
                  "retrieval_ratio": agg["retrieval_ratio"]["all"],
                  "output_cosine": agg["output_cosine"]["all"],
                  "mass_recall": agg["mass_recall"]}
            for st in ("frame", "text"):
                pt[st] = {"retrieval_ratio": agg["retrieval_ratio"][st],
                          "output_rel_l2": agg["output_rel_l2"][st],
                          "output_cosine": agg["output_cosine"][st],
                          "mass_recall": agg["mass_recall"][st],
                          "keys_per_row": agg["prediction"]["keys_per_row"][st],
                          "key_share": agg["prediction"]["key_share"][st]}
            # without layer 0 (whose attention is nearly uniform) and layer by layer
            by_layer = [aggregate({k: v[l:l + 1] for k, v in stats[key].items()}, stage)
                        for l in range(trace.n_layers)]
            rest = aggregate({k: v[1:] for k, v in stats[key].items()}, stage) \
                if trace.n_layers > 1 else None
            for st in ("frame", "text"):
                if rest is not None:
                    pt[st]["without_layer0"] = {
                        "retrieval_ratio": rest["retrieval_ratio"][st],
                        "output_rel_l2": rest["output_rel_l2"][st],
                        "mass_recall": rest["mass_recall"][st]}
                pt[st]["per_layer"] = {
                    "retrieval_ratio": [a["retrieval_ratio"][st] for a in by_layer],
                    "output_rel_l2": [a["output_rel_l2"][st] for a in by_layer]}
            pts.append(pt)
        pareto[m] = pts
    summary["pareto"] = pareto
    summary["baseline_options"] = _options(masks, stats, stage)
    summary["factorial"] = _factorial(trace, n_sink, stats, stage, seed_runs, cap_runs, dense)
    summary["matched"] = matched_ratio(pareto)
    summary["matched_without_layer0"] = matched_without_layer0(pareto)
    # the headline figures' spread over hyperplane seeds, and the seed-to-seed Jaccard of the
    # selections: the scale against which int/float agreement is read
    by_seed = {}
    for name in ("resv", "resv_tuned"):
        th = cfgs[name].th_r
        aggs = [aggregate(stats[(name, th)], stage)] + [
            aggregate(stats[(f"{name}_seed{k}", th)], stage) for k in range(1, seeds)]
        by_seed[name] = {
            "hp_seeds": [cfgs[name].hp_seed + k for k in range(seeds)],
            **{key: {st: [a[key][st] for a in aggs] for st in ("frame", "text")}
               for key in ("retrieval_ratio", "output_rel_l2", "mass_recall",
                           "output_cosine")},
            "seed_jaccard": float(np.mean([_jaccard(runs[name].masks[th], m)
                                           for m in seed_masks.get(name, [])]))
            if seed_masks.get(name) else None}
    summary["seeds"] = by_seed
    summary["seed_spread"] = _seed_spread(pareto, stats, stage, cfgs, seeds)
    timing["total"] = time.time() - t_start
    summary["timing_s"] = {k: round(v, 3) for k, v in timing.items()}
    summary["tokens_per_s"] = {m: trace.n_tokens * trace.n_layers / max(timing[m], 1e-9)
                               for m in METHODS if m != "full"}

    if out_dir is not None:
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True))
        if figures:
            from .figures import plot_pareto, plot_retrieval
            plot_retrieval(summary, out_dir / "retrieval.png")
            plot_pareto(summary, out_dir / "pareto.png")
    return summary


def _factorial(trace, n_sink: int, stats: dict, stage, seed_runs: list, cap_runs: list,
               dense: int = 0) -> dict:
    """Per predictor and policy, per stage, the mean over the hyperplane seeds (``seed_runs``:
    ReSV's run of each, its counts and clusters; ``cap_runs``: the same with the cluster-size
    cap) of the retrieval ratio, relative L2 error, mass recall, output cosine and prediction
    cost (key share), and the error's range."""
    figs = ("retrieval_ratio", "output_rel_l2", "mass_recall", "output_cosine", "key_share")
    out = {}
    for p in PREDICTORS:
        for q in POLICIES:
            per = []
            for k, run in enumerate(seed_runs):
                kw = ({"candidates": run.candidates} if p in ("resv", "resv_spread") else
                      {"candidates": cap_runs[k].candidates} if p == "resv_cap" else {})
                keys = baselines.prediction_keys("oracle_topk" if p == "tokens" else p, trace,
                                                 n_sink, page=QUEST_PAGE,
                                                 r_frac=INFINIGEN_DIMS, dense_layers=dense,
                                                 **kw)
                tag = "fx" if k == 0 else f"fx{k}"
                agg = aggregate(stats[(f"{tag}:{p}:{q}", None)], stage, keys=keys,
                                head_dim=trace.head_dim)
                agg["key_share"] = agg["prediction"]["key_share"]
                per.append(agg)
            cell = {}
            for st in ("frame", "text"):
                vals = {f: [a[f][st] for a in per] for f in figs}
                cell[st] = {f: (float(np.mean(v)) if None not in v else None)
                            for f, v in vals.items()}
                err = vals["output_rel_l2"]
                cell[st]["output_rel_l2_range"] = ([min(err), max(err)] if None not in err
                                                   else None)
            out.setdefault(p, {})[q] = cell
    return out


def _seed_spread(pareto: dict, stats: dict, stage, cfgs: dict, seeds: int) -> dict:
    """Every matched comparison (each preset against every baseline at its ratio) and every
    count-matched one (the factorial's predictors under ReSV's counts) per hyperplane seed,
    as mean, spread and verdict (:mod:`golden.seeds`)."""
    out = {"seeds": seeds, "matched": {}, "count": {}}
    for st in ("frame", "text"):
        out["matched"][st] = {}
        for name in ("resv", "resv_tuned"):
            th = cfgs[name].th_r
            per = []
            for k in range(seeds):
                key = (name, th) if k == 0 else (f"{name}_seed{k}", th)
                agg = aggregate(stats[key], stage)
                r0, row = agg["retrieval_ratio"][st], {"resv": agg["output_rel_l2"][st]}
                for b in BASELINES:
                    pt = matched_points([p[st] for p in pareto[b]], r0, ("output_rel_l2",)) \
                        if r0 is not None else None
                    row[b] = pt["output_rel_l2"] if pt else None
                per.append(row)
            out["matched"][st][name] = over_seeds(per)
        per = []
        for k in range(seeds):
            tag = "fx" if k == 0 else f"fx{k}"
            per.append({("resv" if p == "resv" else p): aggregate(
                stats[(f"{tag}:{p}:count", None)], stage)["output_rel_l2"][st]
                for p in PREDICTORS})
        out["count"][st] = over_seeds(per)
    return out


def _options(masks: dict, stats: dict, stage) -> dict:
    """Each option of Quest and InfiniGen switched from the reference's setting, at the
    default budget: per method the reference's and every variant's retrieval ratio and
    relative L2 error per stage."""
    out = {}
    for m, variants in OPTIONS.items():
        f = DEFAULT_KNOBS[m]
        keys = {"reference": (m, f), **{v: (f"{m}:{v}", f) for v in variants}}
        for v, key in keys.items():
            if key not in masks:
                continue
            agg = aggregate(stats[key], stage)
            out.setdefault(m, {})[v] = {
                st: {"retrieval_ratio": agg["retrieval_ratio"][st],
                     "output_rel_l2": agg["output_rel_l2"][st]} for st in ("frame", "text")}
    return out


MATCH_FIELDS = ("output_rel_l2", "output_cosine", "mass_recall", "key_share", "keys_per_row")


def matched_ratio(pareto: dict) -> dict:
    """Per stage, each ReSV preset at its default Th_r against each baseline's curve
    interpolated (linearly in the retrieval ratio) at ReSV's ratio: ``{stage: {preset:
    {"resv": point, baseline: point or None}}}``; None where the baseline's sweep does not
    reach ReSV's ratio. The default (cluster-first) presets are also compared with their
    select-first counterparts' curves (``select_first``), the integer presets with their float
    references'
    (``float``: float numerics, exact WiCSum)."""
    out = {}
    for st in ("frame", "text"):
        out[st] = {}
        for preset in PRESETS:
            mine = next((p[st] for p in pareto[preset]
                         if p["th_r"] == DEFAULT_KNOBS[preset]), None)
            if mine is None or mine["retrieval_ratio"] is None:
                continue
            r0 = mine["retrieval_ratio"]
            row = {"resv": {k: mine[k] for k in ("retrieval_ratio",) + MATCH_FIELDS}}
            # the default order (cluster first, docs/design.md) against select first's
            # curve, at the same ratio, and the integer mode against its float reference's
            # curve (exact WiCSum)
            other = {"resv": "resv_sf", "resv_tuned": "resv_tuned_sf"}.get(preset)
            extra = {"select_first": other} if other else {}
            if preset + "_float" in pareto:
                extra["float"] = preset + "_float"
            for b in BASELINES + tuple(extra):
                row[b] = matched_points([p[st] for p in pareto[extra.get(b, b)]], r0,
                                        MATCH_FIELDS)
            out[st][preset] = row
    return out


def matched_without_layer0(pareto: dict) -> dict:
    """:func:`matched_ratio` on the figures without layer 0 (whose attention is nearly
    uniform): each preset at its default Th_r against each baseline's curve, both over layers
    1 and up: ``{stage: {preset: {"resv": point, baseline: point or None}}}`` with the ratio,
    relative L2 error and mass recall."""
    fields = ("output_rel_l2", "mass_recall")
    out = {}
    for st in ("frame", "text"):
        out[st] = {}
        for preset in ("resv", "resv_tuned"):
            mine = next((p[st].get("without_layer0") for p in pareto.get(preset, [])
                         if p["th_r"] == DEFAULT_KNOBS[preset]), None)
            if not mine or mine["retrieval_ratio"] is None:
                continue
            r0 = mine["retrieval_ratio"]
            row = {"resv": mine}
            for b in BASELINES:
                row[b] = matched_points([p[st]["without_layer0"] for p in pareto[b]
                                         if p[st].get("without_layer0")], r0, fields)
            out[st][preset] = row
    return out


def matched_points(points: list, r0: float, fields) -> dict | None:
    """One curve's ``points`` (dicts with ``retrieval_ratio`` and ``fields``) interpolated
    linearly in the ratio at ``r0``; None where the curve does not reach it."""
    pts = sorted((p for p in points if p["retrieval_ratio"] is not None),
                 key=lambda p: p["retrieval_ratio"])
    xs = [p["retrieval_ratio"] for p in pts]
    if not xs or not xs[0] <= r0 <= xs[-1]:
        return None
    return {"retrieval_ratio": r0, **{
        k: float(np.interp(r0, xs, [p[k] for p in pts])) for k in fields
        if all(p[k] is not None for p in pts)}}


def format_table(summary: dict, matched: bool = True) -> str:
    """The summary as text; ``matched=False`` leaves out the matched-ratio tables (the
    demo's screen)."""
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
    for name in ("resv", "resv_tuned"):
        w = summary["methods"][name].get("wicsum_ratio")
        if w:
            lines.append(f"{name} retrieved, frame / text: bucketed (hardware) "
                         f"{f(w['bucket']['frame'])} / {f(w['bucket']['text'])}, exact WiCSum "
                         f"{f(w['exact_int']['frame'])} / {f(w['exact_int']['text'])} (integer), "
                         f"{f(w['exact_float']['frame'])} / {f(w['exact_float']['text'])} (float)")
    for name, sd in summary.get("seeds", {}).items():
        def span(v):
            v = [x for x in v if x is not None]
            return f"{min(v):.4f}-{max(v):.4f}" if v else "-"
        lines.append(f"{name} over hyperplane seeds {sd['hp_seeds']}: frame ratio "
                     f"{span(sd['retrieval_ratio']['frame'])}, rel. L2 "
                     f"{span(sd['output_rel_l2']['frame'])}; seed-to-seed Jaccard "
                     f"{sd['seed_jaccard']:.3f}")
    for st, by in summary.get("matched", {}).items():
        for name in ("resv", "resv_tuned"):
            row = by.get(name)
            if row and row.get("float"):
                lines.append(f"{name} {st}: integer rel. L2 {row['resv']['output_rel_l2']:.4f}, "
                             f"float reference at the same ratio "
                             f"{row['float']['output_rel_l2']:.4f}")
    lines.append(f"int/float agreement (mean Jaccard of selected tokens): "
                 + ", ".join(f"{k} {v:.3f}" for k, v in summary["int_float_agreement_by_preset"].items())
                 + "; on the same clusters: "
                 + ", ".join(f"{k} {v:.3f}" for k, v in summary.get(
                     "int_float_same_partition", {}).items()))
    for st, by_preset in (summary.get("matched", {}) if matched else {}).items():
        for preset, row in by_preset.items():
            r0 = row["resv"]["retrieval_ratio"]
            lines.append(f"matched at {preset}'s {st}-stage ratio {100 * r0:.1f}%: relative L2 "
                         f"error / keys scored per row (share of past)")
            for m, p in row.items():
                if p is None:
                    lines.append(f"  {m:14s} (its sweep does not reach this ratio)")
                else:
                    lines.append(f"  {m:14s} {p.get('output_rel_l2', float('nan')):.4f} / "
                                 f"{p.get('keys_per_row', float('nan')):8.1f} "
                                 f"({100 * p.get('key_share', float('nan')):5.1f}%)")
    return "\n".join(lines)
