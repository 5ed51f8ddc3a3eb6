"""Metrics of a selection against full attention (docs/design.md D10), every method in one pass.

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
             int_methods=(), cfg=None, progress=None, jobs: int = 1) -> dict:
    """Per-(layer, step, KV head) sums for every method: ``{name: {key: [L, S, Hkv]}}``.

    Methods named in ``int_methods`` also run the integer light attention (numerics.md) on
    their attended set and record its cosine against the float light attention. ``jobs``:
    layers evaluated in that many processes (:func:`golden.pool.map_forked`).
    """
    from .pool import map_forked
    names = list(masks)
    parts = [list(range(trace.n_layers))[i::jobs] for i in range(max(1, jobs))]
    parts = [p for p in parts if p]
    res = map_forked(lambda layers: _evaluate_layers(trace, masks, n_sink, layers, qt=qt,
                                                     int_methods=int_methods, cfg=cfg),
                     parts, jobs, done=progress)
    st = {k: sum(r[k] for r in res) for k in STAT_KEYS}      # each part fills its layers
    return {name: {k: st[k][i] for k in STAT_KEYS} for i, name in enumerate(names)}


def _evaluate_layers(trace, masks, n_sink, layers, *, qt, int_methods, cfg) -> dict:
    """:func:`evaluate`'s sums over ``layers``: ``{key: [methods, L, S, Hkv]}``, zero at
    the other layers."""
    L, Hkv, T, d = trace.k.shape
    S = trace.n_steps
    G = trace.n_q_heads // Hkv
    bounds = trace.step_bounds()
    scale = 1.0 / math.sqrt(d)
    names = list(masks)
    st = {k: np.zeros((len(names), L, S, Hkv)) for k in STAT_KEYS}     # every method at once
    int_idx = [i for i, name in enumerate(names) if name in int_methods]
    for l in layers:
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
            # every method's past columns at this (layer, step): [methods, Hkv, a - n_sink]
            past = np.stack([masks[name][l, s, :, n_sink:a] for name in names])
            for h in range(Hkv):
                rows = trace.q[l, h * G:(h + 1) * G, a:b].astype(np.float64).reshape(-1, d)
                K = trace.k[l, h, :b].astype(np.float64)
                V = trace.v[l, h, :b].astype(np.float64)
                logit = np.where(causal, rows @ K.T * scale, -np.inf)
                E = np.exp(logit - logit.max(axis=1, keepdims=True))
                Z = E.sum(axis=1)
                O_full = (E @ V) / Z[:, None]
                nf = np.linalg.norm(O_full, axis=1)
                # the sinks and the step's own tokens, attended by every method
                base = np.r_[0:n_sink, a:b]
                num0 = E[:, base] @ V[base]
                z0 = E[:, base].sum(axis=1)
                num, zm = _masked_sums(E[:, n_sink:a], V[n_sink:a], past[:, h])
                num += num0
                zm += z0
                O = num / zm[:, :, None]                                # [methods, rows, d]
                X = O - O_full
                diff = np.sqrt(np.einsum("mrd,mrd->mr", X, X))
                no = np.sqrt(np.einsum("mrd,mrd->mr", O, O))
                cos = np.einsum("mrd,rd->mr", O, O_full) / np.maximum(no * nf, 1e-30)
                at = (slice(None), l, s, h)
                st["selected"][at] = past[:, h].sum(axis=1)
                st["available"][at] = a - n_sink
                st["rows"][at] = len(rows)
                st["recall"][at] = (zm / Z).sum(axis=1)
                st["cosine"][at] = cos.sum(axis=1)
                st["rel_l2"][at] = (diff / np.maximum(nf, 1e-30)).sum(axis=1)
                for i in int_idx:
                    col = np.ones(b, bool)
                    col[n_sink:a] = past[i, h]
                    qi = qt.q[l, h * G:(h + 1) * G, a:b].reshape(-1, d)
                    oi = attention_int(qi, qt.k[l, h, :b][col], qt.v[l, h, :b][col],
                                       causal[:, col], expu, cfg.out_frac_bits, cfg.score_bits)
                    Oi = oi * (qt.scale_v[l] / (1 << cfg.out_frac_bits))
                    ci = (Oi * O[i]).sum(axis=1) / np.maximum(
                        np.linalg.norm(Oi, axis=1) * no[i], 1e-30)
                    st["int_cosine"][i, l, s, h] = ci.sum()
                    st["int_rows"][i, l, s, h] = len(rows)
    return st


def _masked_sums(E, V, M):
    """``Σ_j E[:, j]·V[j]`` and ``Σ_j E[:, j]`` over the columns each mask of ``M [n, P]``
    selects: ``([n, rows, d], [n, rows])``. Masks are summed smallest first, each from the
    mask already summed that differs from it in the fewest columns (or from nothing): the
    columns it lacks are added, the ones it has too many subtracted. A sweep's masks nest and
    different methods' masks overlap, so the whole set costs a few passes over the columns,
    not one per mask."""
    n, P = M.shape
    num = np.zeros((n, E.shape[0], V.shape[1]))
    z = np.zeros((n, E.shape[0]))
    if P == 0 or n == 0:
        return num, z
    Mf = M.astype(np.float32)                    # column counts < 2**24 stay exact
    size = M.sum(axis=1)
    order = np.argsort(size, kind="stable")
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n)
    # parent[i]: the mask summed before mask i nearest to it (-1: none, cost size[i])
    apart = size[:, None] + size[None, :] - 2 * (Mf @ Mf.T).astype(np.int64)
    apart = np.where(rank[None, :] < rank[:, None], apart, P + 1)
    parent = np.where(apart.min(axis=1) < size, apart.argmin(axis=1), -1)
    Et = np.ascontiguousarray(E.T)               # a mask's columns gathered as rows
    for i in order:
        p = parent[i]
        if p < 0:
            add, sub = np.flatnonzero(M[i]), ()
        else:
            num[i], z[i] = num[p], z[p]
            add = np.flatnonzero(M[i] & ~M[p])
            sub = np.flatnonzero(M[p] & ~M[i])
        for idx, sign in ((add, 1.0), (sub, -1.0)):
            if len(idx):
                Ei = Et[idx]
                num[i] += sign * (Ei.T @ V[idx])
                z[i] += sign * Ei.sum(axis=0)
    return num, z


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
