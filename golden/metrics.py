"""Metrics of a selection against full attention (DESIGN.md D10), every method in one pass.

For each (layer, step, KV head) the full causal attention of the step's query rows (the query
heads of the KV group times the step's tokens) is computed once in float64 over the trace's
own Q, K, V; every method's light attention is then the same softmax restricted to its
attended set: the sink tokens, its selected past tokens and the step's own tokens (causal).

- retrieval ratio: selected past tokens / past tokens that can be selected (the non-sink
  tokens of earlier steps), pooled as Σ selected / Σ available;
- attention-mass recall: the share of the full attention probability that the attended set
  covers, averaged over rows;
- output fidelity: cosine and relative L2 error of the light-attention output against the full
  output, averaged over rows.
Step 0 and steps with nothing to select are left out. Stage: ``frame`` for a step with a
visual token, else ``text``.
"""

from __future__ import annotations

import math

import numpy as np

from .numerics import ExpUnit, attention_int
from .trace import QuantTrace, Trace

__all__ = ["evaluate", "aggregate", "STAT_KEYS"]

STAT_KEYS = ("selected", "available", "rows", "recall", "cosine", "rel_l2",
             "int_cosine", "int_rows")


def evaluate(trace: Trace, masks: dict, n_sink: int, *, qt: QuantTrace | None = None,
             int_methods=(), cfg=None, progress=None) -> dict:
    """Per-(layer, step, KV head) sums for every method: ``{name: {key: [L, S, Hkv]}}``.

    Methods named in ``int_methods`` also run the integer light attention (numerics.md) on
    their attended set and record its cosine against the float light attention.
    """
    L, Hkv, T, d = trace.k.shape
    S = trace.n_steps
    G = trace.n_q_heads // Hkv
    bounds = trace.step_bounds()
    scale = 1.0 / math.sqrt(d)
    out = {name: {k: np.zeros((L, S, Hkv)) for k in STAT_KEYS} for name in masks}
    for l in range(L):
        expu = None
        if int_methods:
            alpha = float(qt.scale_q[l] * qt.scale_k[l]) / math.sqrt(d)
            expu = ExpUnit.for_config(alpha, cfg)
        for s in range(1, S):
            a, b = int(bounds[s]), int(bounds[s + 1])
            if a <= n_sink:
                continue
            causal = np.arange(b)[None, :] <= np.arange(a, b)[:, None]
            causal = np.tile(causal, (G, 1))
            for h in range(Hkv):
                rows = trace.q[l, h * G:(h + 1) * G, a:b].astype(np.float64).reshape(-1, d)
                K = trace.k[l, h, :b].astype(np.float64)
                V = trace.v[l, h, :b].astype(np.float64)
                logit = np.where(causal, rows @ K.T * scale, -np.inf)
                E = np.exp(logit - logit.max(axis=1, keepdims=True))
                Z = E.sum(axis=1)
                O_full = (E @ V) / Z[:, None]
                nf = np.linalg.norm(O_full, axis=1)
                for name, m in masks.items():
                    col = np.ones(b, bool)
                    col[n_sink:a] = m[l, s, h, n_sink:a]
                    Em = E[:, col]
                    Zm = Em.sum(axis=1)
                    O = (Em @ V[col]) / Zm[:, None]
                    diff = np.linalg.norm(O - O_full, axis=1)
                    cos = (O * O_full).sum(axis=1) / np.maximum(np.linalg.norm(O, axis=1) * nf, 1e-30)
                    rec = out[name]
                    rec["selected"][l, s, h] = m[l, s, h, n_sink:a].sum()
                    rec["available"][l, s, h] = a - n_sink
                    rec["rows"][l, s, h] = len(rows)
                    rec["recall"][l, s, h] = (Zm / Z).sum()
                    rec["cosine"][l, s, h] = cos.sum()
                    rec["rel_l2"][l, s, h] = (diff / np.maximum(nf, 1e-30)).sum()
                    if name in int_methods:
                        qi = qt.q[l, h * G:(h + 1) * G, a:b].reshape(-1, d)
                        oi = attention_int(qi, qt.k[l, h, :b][col], qt.v[l, h, :b][col],
                                           causal[:, col], expu, cfg.out_frac_bits,
                                           cfg.score_bits)
                        Oi = oi * (qt.scale_v[l] / (1 << cfg.out_frac_bits))
                        ci = (Oi * O).sum(axis=1) / np.maximum(
                            np.linalg.norm(Oi, axis=1) * np.linalg.norm(O, axis=1), 1e-30)
                        rec["int_cosine"][l, s, h] = ci.sum()
                        rec["int_rows"][l, s, h] = len(rows)
        if progress:
            progress(l + 1, L)
    return out


def aggregate(stats: dict, stage: np.ndarray, cost: dict | None = None,
              keys: np.ndarray | None = None, head_dim: int | None = None) -> dict:
    """Summaries of one method's sums; ``stage [S]`` holds 'frame' or 'text' per step.
    ``keys [L, S, Hkv]``: the keys (key-equivalents) a query row scores to predict
    (``golden.baselines.prediction_keys``), summarised as ``prediction``: per stage the mean
    keys a row scores, their share of the past tokens, and the bytes read (int8 keys)."""
    res = {"retrieval_ratio": {}, "mass_recall": {}, "output_cosine": {}, "output_rel_l2": {}}
    if keys is not None:
        res["prediction"] = {"keys_per_row": {}, "key_share": {}, "bytes_per_head_step": {}}
    for st in ("frame", "text"):
        sel = (stage == st)[None, :, None] & (stats["available"] > 0)
        rows = stats["rows"][sel].sum()
        avail = stats["available"][sel].sum()
        if keys is not None:
            units = int(sel.sum())
            kk = float(keys[sel].sum())
            pr = res["prediction"]
            pr["keys_per_row"][st] = kk / units if units else None
            pr["key_share"][st] = kk / avail if avail else None
            pr["bytes_per_head_step"][st] = kk * head_dim / units if units and head_dim \
                else None
        res["retrieval_ratio"][st] = float(stats["selected"][sel].sum() / avail) if avail else None
        res["mass_recall"][st] = float(stats["recall"][sel].sum() / rows) if rows else None
        res["output_cosine"][st] = float(stats["cosine"][sel].sum() / rows) if rows else None
        res["output_rel_l2"][st] = float(stats["rel_l2"][sel].sum() / rows) if rows else None
    ok = stats["available"] > 0
    sel_l = np.where(ok, stats["selected"], 0).sum(axis=(1, 2))
    av_l = np.where(ok, stats["available"], 0).sum(axis=(1, 2))
    res["per_layer_ratio"] = [float(x) for x in sel_l / np.maximum(av_l, 1)]
    sel_h = np.where(ok, stats["selected"], 0).sum(axis=(0, 1))
    av_h = np.where(ok, stats["available"], 0).sum(axis=(0, 1))
    res["per_head_ratio"] = [float(x) for x in sel_h / np.maximum(av_h, 1)]
    lh = np.where(ok, stats["selected"], 0).sum(axis=1) / np.maximum(
        np.where(ok, stats["available"], 0).sum(axis=1), 1)
    res["per_layer_head_ratio"] = lh.tolist()
    res["retrieval_ratio"]["all"] = float(sel_l.sum() / max(av_l.sum(), 1))
    rows = stats["rows"][ok].sum()
    res["output_cosine"]["all"] = float(stats["cosine"][ok].sum() / rows) if rows else None
    if stats["int_rows"].sum() > 0:
        res["int_attention_cosine"] = float(stats["int_cosine"].sum() / stats["int_rows"].sum())
    if cost is not None:
        res["fetch"] = {k: int(v.sum()) for k, v in cost.items()}
    return res
