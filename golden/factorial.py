"""The factorial comparison: which part of ReSV's result is its predictor and which its budget.

A predictor scores units of the past (non-sink) tokens for each query row of a step; a policy
turns the scores into a selection, per (layer, step, KV head). Every predictor meets every
policy, all in float (the integer numerics are the golden job's own runs).

Predictors (``unit_scores``):

- ``resv``: ReSV's clusters of the tokens before the step as the golden job's integer run
  formed them, scored by their mean post-RoPE key (in the cluster-first order, the default,
  the mean over the step's own members too).
- ``resv_cap``: the same with the HCU's cluster-size cap (``Config.cluster_cap`` = ``CAP``):
  a run of its own, whose smaller clusters cost more candidates (more keys scored).
- ``resv_spread``: ReSV's clusters scored by an estimate of their members' mean softmax
  weight rather than the mean key's: the mean key's score plus a spread term, half the
  squared query norm (scaled as the scores) times the cluster's mean squared member distance
  from the mean key over the head dimension (``log E[exp(q.k)]`` for members spread evenly
  about the mean key): a scalar beside each representative, no more keys scored.
- ``tokens``: every past token by its exact score: the oracle's predictor, and ReSV's without
  clusters.
- ``quest``: 16-token pages in arrival order by Quest's upper bound (min and max key a page).
- ``infinigen``: every past token by InfiniGen-style speculative scores (a quarter of the
  dimensions of Q and K turned by the skewing matrix, chosen once on the prompt).
- ``rekv``: whole past steps by the step's mean query against each past step's mean key.

Policies (``select``), each a number of tokens or a rule, the units ranked by their softmax
probability averaged over the rows (whole units taken until the budget is met):

- ``fraction``: the same fraction of the past at every (layer, step, KV head): ReSV's own
  retrieval ratio of the step's stage (frame or text), so that the same number of tokens is
  spread evenly where ReSV spreads it by its threshold;
- ``count``: ReSV's own token count at that (layer, step, KV head) (its run at Th_r 0.3);
- ``wicsum``: ReSV's threshold on the predictor's own scores, per row the units whose
  weighted cumulative sum reaches Th_r (0.3) of the row's total, the rows' union: an
  adaptive budget for every predictor.

Every predictor's dense first layers, every option of the references: ``golden.baselines``;
here the first layers are sparse for all, so that the predictors alone differ.
"""
from __future__ import annotations

import math

import numpy as np

from . import baselines
from .numerics import wicsum_exact_sweep
from .trace import Trace

__all__ = ["PREDICTORS", "POLICIES", "factorial_masks", "unit_scores", "select",
           "stage_ratios"]

PREDICTORS = ("resv", "resv_cap", "resv_spread", "tokens", "quest", "infinigen", "rekv")
CAP = 8                 # resv_cap's cluster-size cap (members)
# the predictors that score ReSV's clusters (their own run's, for resv_cap)
CLUSTERED = ("resv", "resv_cap", "resv_spread")
POLICIES = ("fraction", "count", "wicsum")
TH_R = 0.3
PAGE = 16


class _Context:
    """What the predictors share over a trace: its rows, keys and the per-head setup."""

    def __init__(self, trace: Trace, n_sink: int, cluster_of: np.ndarray, hpg: int,
                 r_frac: float = 0.25, order: str = "cluster_first"):
        self.trace, self.n_sink, self.cluster_of, self.hpg = trace, n_sink, cluster_of, hpg
        self.order = order
        self.G = trace.n_q_heads // trace.n_kv_heads
        self.scale = 1.0 / math.sqrt(trace.head_dim)
        self.b = trace.step_bounds()
        self.turn, self.dims = {}, {}
        for l in range(trace.n_layers):
            for h in range(trace.n_kv_heads):
                A = baselines.skewing(trace, n_sink, l, h)
                self.turn[(l, h)] = A
                self.dims[(l, h)] = baselines.infinigen_dims(trace, n_sink, l, h, r_frac, A)

    def rows(self, l, h, lo, hi):
        G = self.G
        q = self.trace.q[l, h * G:(h + 1) * G, lo:hi].astype(np.float64)
        return q.reshape(-1, self.trace.head_dim)


def unit_scores(pred: str, ctx: _Context, l: int, s: int, h: int):
    """``(units, scores)`` of predictor ``pred`` at (layer, step, KV head): ``units`` a list
    of arrays of past token indices, ``scores`` the rows' logits ``[rows, units]``."""
    tr, ns = ctx.trace, ctx.n_sink
    lo, hi = int(ctx.b[s]), int(ctx.b[s + 1])
    rows = ctx.rows(l, h, lo, hi)
    K = tr.k[l, h].astype(np.float64)
    past = np.arange(ns, lo)
    if pred in ("tokens", "infinigen"):
        units = past[:, None]                           # a unit a token: one array, a row each
        if pred == "tokens":
            return units, rows @ K[past].T * ctx.scale
        A, dm = ctx.turn[(l, h)], ctx.dims[(l, h)]
        return units, (rows @ A)[:, dm] @ (K[past] @ A)[:, dm].T * ctx.scale
    if pred == "quest":
        units = [past[i:i + PAGE] for i in range(0, len(past), PAGE)]
        return units, baselines.quest_bounds(rows, K[past], PAGE) * ctx.scale
    if pred == "rekv":
        steps = [u for u in range(s) if ctx.b[u + 1] > ns]
        units = [np.arange(max(int(ctx.b[u]), ns), int(ctx.b[u + 1])) for u in steps]
        keys = np.array([K[u].mean(axis=0) for u in units])
        return units, rows.mean(axis=0, keepdims=True) @ keys.T
    if pred in CLUSTERED:
        own = ctx.cluster_of[l, h // ctx.hpg, ns:lo]
        keep = own >= 0
        ids, inv = np.unique(own[keep], return_inverse=True)
        order = np.argsort(inv, kind="stable")          # members by cluster, in token order
        starts = np.searchsorted(inv[order], np.arange(len(ids)))
        members = past[keep][order]
        units = np.split(members, starts[1:])
        # the representative keys over the members: the past ones, and in the cluster-first
        # order also the step's own that joined them
        tok, cid = members, inv[order]
        if ctx.order == "cluster_first" and len(ids):
            step_of = ctx.cluster_of[l, h // ctx.hpg, lo:hi]
            at = np.searchsorted(ids, step_of).clip(0, len(ids) - 1)
            joined = (step_of >= 0) & (ids[at] == step_of)
            tok = np.concatenate([tok, np.arange(lo, hi)[joined]])
            cid = np.concatenate([cid, at[joined]])
        Km = K[tok]
        sizes = np.bincount(cid, minlength=len(ids))[:, None].astype(np.float64)
        sums = np.zeros((len(ids), tr.head_dim))
        np.add.at(sums, cid, Km)
        reps = sums / np.maximum(sizes, 1)
        scores = rows @ reps.T * ctx.scale
        if pred == "resv_spread":       # + |q|^2 scale^2 var / 2, var per dimension
            sq = np.bincount(cid, weights=(Km ** 2).sum(axis=1), minlength=len(ids))
            var = (sq / np.maximum(sizes[:, 0], 1) - (reps ** 2).sum(axis=1)) / tr.head_dim
            scores = scores + 0.5 * (rows ** 2).sum(axis=1, keepdims=True) * ctx.scale ** 2 \
                * var[None, :]
        return units, scores
    raise ValueError(f"unknown predictor {pred!r}")


def _ranked(scores: np.ndarray) -> np.ndarray:
    """Units by their softmax probability averaged over the rows, highest first (ties: the
    lower unit)."""
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return np.argsort(-p.mean(axis=0), kind="stable")


def _take(units, which) -> np.ndarray:
    """The tokens of the units ``which`` (indices), in that order."""
    if isinstance(units, np.ndarray):                   # equal units, a row each
        return units[which].ravel()
    return np.concatenate([units[i] for i in which] or [np.zeros(0, np.int64)])


def _sizes(units) -> np.ndarray:
    return (np.full(len(units), units.shape[1]) if isinstance(units, np.ndarray)
            else np.array([len(u) for u in units]))


def _wicsum(units, scores, sizes) -> np.ndarray:
    """The WiCSum policy: per row the units whose weighted cumulative sum reaches Th_r of
    the row's total, the rows' union."""
    w = np.exp(scores - scores.max(axis=1, keepdims=True))
    n = np.broadcast_to(sizes, w.shape)
    sel = wicsum_exact_sweep(w, n, np.ones(w.shape, bool), [TH_R])[0].any(axis=0)
    return _take(units, np.flatnonzero(sel))


def _budget(units, order, sizes, want: int) -> np.ndarray:
    """Whole units in rank order (``order``) while fewer than ``want`` tokens are taken."""
    before = np.concatenate([[0], np.cumsum(sizes[order])[:-1]])
    return _take(units, order[before < want])


def select(policy: str, units, scores, *, available: int, count: int,
           fraction: float = 0.3) -> np.ndarray:
    """The past tokens ``policy`` takes from the scored ``units`` (a list of token arrays, or
    one array of a unit a row; ``available`` past tokens; ``count``: ReSV's count here;
    ``fraction``: the fixed fraction)."""
    if not len(units):
        return np.zeros(0, np.int64)
    sizes = _sizes(units)
    if policy == "wicsum":
        return _wicsum(units, scores, sizes)
    want = baselines.budget(fraction, available) if policy == "fraction" else count
    return _budget(units, _ranked(scores), sizes, want)


def stage_ratios(trace: Trace, n_sink: int, mask: np.ndarray) -> dict:
    """A selection's pooled retrieval ratio per stage (frame, text)."""
    b, stage = trace.step_bounds(), trace.step_stage()
    sel, avail = {"frame": 0, "text": 0}, {"frame": 0, "text": 0}
    for s in range(1, trace.n_steps):
        lo = int(b[s])
        if lo > n_sink:
            sel[stage[s]] += int(mask[:, s, :, n_sink:lo].sum())
            avail[stage[s]] += (lo - n_sink) * trace.n_layers * trace.n_kv_heads
    return {st: sel[st] / avail[st] if avail[st] else 0.0 for st in sel}


def factorial_masks(trace: Trace, n_sink: int, runs: list, hpg: int,
                    predictors=PREDICTORS, policies=POLICIES, capped=None,
                    order: str = "cluster_first") -> dict:
    """``{(seed, predictor, policy): bool [L, S, Hkv, T]}`` for each of ``runs``:
    ``(resv_mask, cluster_of)`` of ReSV's run at a hyperplane seed (its selection, whose
    counts and ratios the policies take, and its clusters ``[L, groups, T]``); ``hpg`` KV
    heads a hash group; ``capped``: each seed's clusters of the run with the cap (for
    ``resv_cap``); ``order`` the runs' (``Config.order``: in the cluster-first one the
    representative keys take the step's own members too). A predictor not on clusters does
    not depend on the seed: it scores once for every seed's policies."""
    ctx = _Context(trace, n_sink, runs[0][1], hpg, order=order)
    ratios = [stage_ratios(trace, n_sink, m) for m, _ in runs]
    stage = trace.step_stage()
    shape = (trace.n_layers, trace.n_steps, trace.n_kv_heads, trace.n_tokens)
    out = {(k, p, q): np.zeros(shape, bool)
           for k in range(len(runs)) for p in predictors for q in policies}
    for l in range(trace.n_layers):
        for s in range(1, trace.n_steps):
            lo = int(ctx.b[s])
            if lo <= n_sink:
                continue
            for h in range(trace.n_kv_heads):
                counts = [int(m[l, s, h, n_sink:lo].sum()) for m, _ in runs]
                for p in predictors:
                    ranked = None
                    for k, (_, clusters) in enumerate(runs):
                        # (a predictor not on clusters scores, ranks and takes its WiCSum
                        # units once for every seed: only the budgets differ by seed)
                        if ranked is None or p in CLUSTERED:
                            ctx.cluster_of = capped[k] if p == "resv_cap" else clusters
                            units, scores = unit_scores(p, ctx, l, s, h)
                            sizes = _sizes(units)
                            ranked = _ranked(scores) if len(units) else None
                            wic = (_wicsum(units, scores, sizes) if len(units) and
                                   "wicsum" in policies else np.zeros(0, np.int64))
                        for q in policies:
                            if ranked is None:
                                continue
                            want = (baselines.budget(ratios[k][stage[s]], lo - n_sink)
                                    if q == "fraction" else counts[k])
                            tok = wic if q == "wicsum" else _budget(units, ranked, sizes, want)
                            out[(k, p, q)][l, s, h, tok] = True
    return out
