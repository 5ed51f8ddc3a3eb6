"""Baseline selectors, run on the same data and returning the same masks as ReSV.

Every selector returns ``bool [L, S, Hkv, T]``: at (layer, step) KV head h attends past token
t (t before the step's first token). Sink tokens are pinned and attended by every method, so
they never appear in a mask; the step's own tokens are always attended (causally). Budgets are
fractions of the past (non-sink) tokens available at each (layer, step, KV head), so every
method's curve spans the same ratios as ReSV's on every trace (:func:`budget`).

- ``full``: every past token.
- ``oracle_topk(frac)``: per KV head, the past tokens with the highest attention probability
  averaged over the step's query rows and the query heads that share the KV head, by the
  exact float scores: an upper bound that pays a full Q·Kᵀ pass to predict.
- ``quest(frac)`` (Quest, Tang et al., ICML 2024, "Query-Aware Sparsity for Efficient
  Long-Context LLM Inference"): the model's first ``dense_layers`` layers (2, as the reference
  code: mit-han-lab/Quest, evaluation/quest_attention.py, ``layer_id < 2`` takes the dense
  path) attend every past token; elsewhere the past tokens in pages of ``page`` tokens in arrival order
  (the KV layout's block size); per page the element-wise min and max of its keys; a row's
  upper bound on a page's score is ``Σ_d max(q_d·min_d, q_d·max_d)``; pages ranked by the
  upper bounds' softmax averaged over the rows, whole pages taken until the budget is met.
- ``infinigen(frac)`` (InfiniGen, Lee et al., OSDI 2024, "Efficient Generative Inference of
  Large Language Models with Dynamic KV Cache Management"): the model's first
  ``dense_layers`` layers (1, as the reference code: snu-comparch/InfiniGen,
  accuracy/src/modeling_llama_ours.py speculates from the previous layer's input, so the
  first layer has none and attends in full) attend every past token; elsewhere speculative
  scores from a subset
  of the dimensions (``r_frac`` of them, chosen per layer and KV head on the prompt's tokens
  by mean |q_d|·mean |k_d|, where InfiniGen skews Q and K by an offline SVD first), their
  softmax averaged over the rows, the top tokens.
- ``rekv(frac)`` (ReKV-style frame top-k): the mean query of the step (over rows and the heads
  of a KV group) against the mean key of every past step, summed over KV heads; whole past
  steps taken in score order until the budget is met, shared by all heads of the layer.
- ``window(frac)`` (StreamingLLM): the most recent past tokens.
ReSV without clustering is :func:`golden.resv.run_resv` with ``clustering=False``.

:func:`prediction_keys` gives each method's prediction cost: the keys (or key-equivalents)
every query row scores to choose, per (layer, step, KV head).
"""

from __future__ import annotations

import math

import numpy as np

from .resv import dense_rows, densify
from .trace import Trace

__all__ = ["budget", "full", "oracle_topk", "quest", "infinigen", "rekv", "window",
           "prediction_keys", "dense_rows", "skewing", "QUEST_DENSE", "INFINIGEN_DENSE",
           "INFINIGEN_ALPHA"]

QUEST_DENSE = 2           # the model's first layers each reference keeps dense
INFINIGEN_DENSE = 1


def _shape(trace):
    return (trace.n_layers, trace.n_steps, trace.n_kv_heads, trace.n_tokens)


def full(trace: Trace, n_sink: int) -> np.ndarray:
    m = np.zeros(_shape(trace), bool)
    b = trace.step_bounds()
    for s in range(trace.n_steps):
        m[:, s, :, n_sink:b[s]] = True
    return m


def budget(frac: float, available: int) -> int:
    """Tokens a budget of ``frac`` allows out of ``available``: rounded half up, at least one
    when anything is available and ``frac > 0``."""
    if available <= 0 or frac <= 0:
        return 0
    return min(available, max(1, int(math.floor(frac * available + 0.5))))


def window(trace: Trace, n_sink: int, frac: float) -> np.ndarray:
    m = np.zeros(_shape(trace), bool)
    b = trace.step_bounds()
    for s in range(trace.n_steps):
        n = budget(frac, int(b[s]) - n_sink)
        if n:
            m[:, s, :, b[s] - n:b[s]] = True
    return m


def _rows(trace, l, h, lo, hi):
    G = trace.n_q_heads // trace.n_kv_heads
    return trace.q[l, h * G:(h + 1) * G, lo:hi].astype(np.float64).reshape(-1, trace.head_dim)


def _mean_probability(rows, K, lo, hi, G, scale):
    """Causal softmax of the step's rows over tokens [0, hi), averaged over the rows: [hi]."""
    logit = rows @ K.T * scale
    causal = np.tile(np.arange(hi)[None, :] <= np.arange(lo, hi)[:, None], (G, 1))
    logit = np.where(causal, logit, -np.inf)
    p = np.exp(logit - logit.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return p.mean(axis=0)


def _token_topk(trace, n_sink, fracs, score_fn, within=None, count_fn=None) -> dict:
    """Per (layer, step, KV head) the ``budget(f, n)`` past tokens ``score_fn`` ranks highest,
    for each ``f`` in ``fracs``: among all n past non-sink tokens, or, with ``within`` (a mask
    ``[L, S, Hkv, T]``), among the n tokens it selects. ``count_fn(l, h, lo, hi, idx)``, if
    given, an adaptive count the budget caps."""
    fracs = list(fracs)
    out = {f: np.zeros(_shape(trace), bool) for f in fracs}
    b = trace.step_bounds()
    for l in range(trace.n_layers):
        for s in range(1, trace.n_steps):
            lo, hi = int(b[s]), int(b[s + 1])
            if lo <= n_sink:
                continue
            for h in range(trace.n_kv_heads):
                idx = (np.arange(n_sink, lo) if within is None else
                       n_sink + np.flatnonzero(within[l, s, h, n_sink:lo]))
                if not len(idx):
                    continue
                score = score_fn(l, h, lo, hi)[idx]
                order = np.argsort(-score, kind="stable")      # ties: lower token index
                want = count_fn(l, h, lo, hi, idx) if count_fn else len(idx)
                for f in fracs:
                    out[f][l, s, h, idx[order[:min(want, budget(f, len(idx)))]]] = True
    return out


def oracle_score(trace: Trace):
    """The oracle's ranking at (layer, KV head, step tokens lo..hi): each past token's exact
    softmax probability, averaged over the step's query rows of the head's group: [hi]."""
    G = trace.n_q_heads // trace.n_kv_heads
    scale = 1.0 / math.sqrt(trace.head_dim)

    def score(l, h, lo, hi):
        return _mean_probability(_rows(trace, l, h, lo, hi),
                                 trace.k[l, h, :hi].astype(np.float64), lo, hi, G, scale)
    return score


def oracle_topk(trace: Trace, n_sink: int, fracs) -> dict:
    """Masks for every budget in ``fracs`` from one pass over the exact scores."""
    return _token_topk(trace, n_sink, fracs, oracle_score(trace))


def skewing(trace: Trace, n_sink: int, l: int, h: int) -> np.ndarray:
    """InfiniGen's skewing matrix at (layer, KV head): the right singular vectors of the
    calibration queries (the prompt's rows of the head's query heads), strongest first
    (snu-comparch/InfiniGen, accuracy/setup/gen_llama_skewing_matrix.py, from an offline
    pass; a calibration prefix here). Orthogonal: Q·A and K·A give the same scores."""
    G = trace.n_q_heads // trace.n_kv_heads
    n = n_sink if n_sink > 0 else int(trace.step_bounds()[1])
    rows = trace.q[l, h * G:(h + 1) * G, :n].astype(np.float64).reshape(-1, trace.head_dim)
    return np.linalg.svd(rows, full_matrices=True)[2].T


def _top_dims(qa: np.ndarray, ka: np.ndarray, r_frac: float) -> np.ndarray:
    r = max(1, math.ceil(r_frac * len(qa)))
    return np.sort(np.argsort(-(qa * ka), kind="stable")[:r])


def infinigen_dims(trace: Trace, n_sink: int, l: int, h: int, r_frac: float,
                   A: np.ndarray | None = None) -> np.ndarray:
    """The dimensions InfiniGen-style speculation scores with at (layer, KV head): the
    ``ceil(r_frac · d)`` largest mean |q_d| · mean |k_d| over the prompt (the sink tokens, or
    the first step's tokens without sinks), ties to the lower dimension; of Q·A and K·A with
    a skewing matrix ``A``."""
    G = trace.n_q_heads // trace.n_kv_heads
    b = trace.step_bounds()
    n = n_sink if n_sink > 0 else int(b[1])
    q = trace.q[l, h * G:(h + 1) * G, :n].astype(np.float64).reshape(-1, trace.head_dim)
    k = trace.k[l, h, :n].astype(np.float64)
    if A is not None:
        q, k = q @ A, k @ A
    return _top_dims(np.abs(q).mean(axis=0), np.abs(k).mean(axis=0), r_frac)


INFINIGEN_ALPHA = 5.0     # the reference code's alpha: logits within it of a row's maximum


def infinigen(trace: Trace, n_sink: int, fracs, r_frac: float = 0.25,
              dense_layers: int = INFINIGEN_DENSE, skew: bool = True,
              per_step: bool = False, alpha: float | None = None) -> dict:
    """InfiniGen-style selection, each option of the reference switchable: ``skew`` (Q and K
    turned by :func:`skewing` first), ``per_step`` (the dimensions chosen at each step from
    its own rows and the past keys, instead of once from the prompt), ``alpha`` (the count
    adaptive: per row the past tokens whose speculative logit is within ``alpha`` of the
    row's maximum, averaged over the rows, the budget its cap, as the reference's
    ``kv_cache_mask``), ``dense_layers``."""
    G = trace.n_q_heads // trace.n_kv_heads
    scale = 1.0 / math.sqrt(trace.head_dim)
    heads = [(l, h) for l in range(trace.n_layers) for h in range(trace.n_kv_heads)]
    turn = {lh: skewing(trace, n_sink, *lh) if skew else None for lh in heads}
    once = {lh: infinigen_dims(trace, n_sink, *lh, r_frac, turn[lh]) for lh in heads}

    def spec(l, h, lo, hi):
        """The speculative logits of the step's rows over tokens [0, hi) (causal)."""
        q, k = _rows(trace, l, h, lo, hi), trace.k[l, h, :hi].astype(np.float64)
        if turn[(l, h)] is not None:
            q, k = q @ turn[(l, h)], k @ turn[(l, h)]
        dm = once[(l, h)]
        if per_step:
            dm = _top_dims(np.abs(q).mean(axis=0), np.abs(k[n_sink:lo]).mean(axis=0), r_frac)
        logit = q[:, dm] @ k[:, dm].T * scale
        causal = np.tile(np.arange(hi)[None, :] <= np.arange(lo, hi)[:, None], (G, 1))
        return np.where(causal, logit, -np.inf)

    def score(l, h, lo, hi):
        logit = spec(l, h, lo, hi)
        p = np.exp(logit - logit.max(axis=1, keepdims=True))
        return (p / p.sum(axis=1, keepdims=True)).mean(axis=0)

    def count(l, h, lo, hi, idx):
        logit = spec(l, h, lo, hi)
        near = logit[:, idx] >= logit.max(axis=1, keepdims=True) - alpha
        return int(round(near.sum(axis=1).mean()))
    masks = _token_topk(trace, n_sink, fracs, score, count_fn=count if alpha else None)
    return densify(trace, n_sink, masks, dense_layers)


def quest_bounds(rows: np.ndarray, K: np.ndarray, page: int) -> np.ndarray:
    """Quest's upper bound of each row's score on each page of ``page`` consecutive keys:
    ``Σ_d max(q_d·min_d, q_d·max_d)`` with the page's element-wise min and max: [rows, pages]."""
    starts = np.arange(0, len(K), page)
    kmin = np.minimum.reduceat(K, starts, axis=0)
    kmax = np.maximum.reduceat(K, starts, axis=0)
    return np.maximum(rows, 0) @ kmax.T + np.minimum(rows, 0) @ kmin.T


def quest(trace: Trace, n_sink: int, fracs, page: int = 16,
          dense_layers: int = QUEST_DENSE) -> dict:
    fracs = list(fracs)
    out = {f: np.zeros(_shape(trace), bool) for f in fracs}
    b = trace.step_bounds()
    scale = 1.0 / math.sqrt(trace.head_dim)
    for l in range(trace.n_layers):
        for s in range(1, trace.n_steps):
            lo, hi = int(b[s]), int(b[s + 1])
            if lo <= n_sink:
                continue
            n = lo - n_sink
            for h in range(trace.n_kv_heads):
                ub = quest_bounds(_rows(trace, l, h, lo, hi),
                                  trace.k[l, h, n_sink:lo].astype(np.float64), page) * scale
                p = np.exp(ub - ub.max(axis=1, keepdims=True))
                p /= p.sum(axis=1, keepdims=True)
                order = np.argsort(-p.mean(axis=0), kind="stable")
                for f in fracs:
                    want, got = budget(f, n), 0
                    for pg in order:
                        if got >= want:
                            break
                        a0, a1 = n_sink + pg * page, min(lo, n_sink + (pg + 1) * page)
                        out[f][l, s, h, a0:a1] = True
                        got += a1 - a0
    return densify(trace, n_sink, out, dense_layers)


def rekv(trace: Trace, n_sink: int, fracs) -> dict:
    fracs = list(fracs)
    out = {f: np.zeros(_shape(trace), bool) for f in fracs}
    b = trace.step_bounds()
    G = trace.n_q_heads // trace.n_kv_heads
    for l in range(trace.n_layers):
        for s in range(1, trace.n_steps):
            lo, hi = int(b[s]), int(b[s + 1])
            units = [u for u in range(s) if b[u + 1] > n_sink]
            if not units:
                continue
            score = np.zeros(len(units))
            for h in range(trace.n_kv_heads):
                qm = trace.q[l, h * G:(h + 1) * G, lo:hi].astype(np.float64).mean(axis=(0, 1))
                for i, u in enumerate(units):
                    km = trace.k[l, h, max(b[u], n_sink):b[u + 1]].astype(np.float64).mean(axis=0)
                    score[i] += qm @ km
            order = np.argsort(-score, kind="stable")
            for f in fracs:
                want, got = budget(f, lo - n_sink), 0
                for i in order:
                    if got >= want:
                        break
                    u = units[i]
                    a0 = max(int(b[u]), n_sink)
                    out[f][l, s, :, a0:b[u + 1]] = True
                    got += int(b[u + 1]) - a0
    return out


def prediction_keys(method: str, trace: Trace, n_sink: int, *, page: int = 16,
                    r_frac: float = 0.25, candidates: np.ndarray | None = None,
                    dense_layers: int = 0) -> np.ndarray:
    """Each method's prediction cost at (layer, step, KV head): the keys, or key-equivalents
    (one key's dimensions), each query row scores to choose: ``float [L, S, Hkv]``. ReSV: its
    candidate clusters' representative keys (``candidates``, from :func:`run_resv`); the
    oracle and ReSV without clusters: every past key; Quest: two vectors (min, max) a page;
    InfiniGen: ``r_frac`` of every past key; ReKV: one mean key a past step; window and full:
    nothing; a dense layer (the first ``dense_layers`` of the model) nothing. Bytes read to
    predict are these times ``head_dim`` (int8 keys)."""
    L, S, H = trace.n_layers, trace.n_steps, trace.n_kv_heads
    b = trace.step_bounds()
    avail = np.array([max(0, int(b[s]) - n_sink) for s in range(S)], float)
    keys = np.zeros((L, S, H))
    if candidates is not None:                          # ReSV: its own count
        keys = candidates.astype(float)
    elif method in ("oracle_topk", "resv_noclust"):
        keys[:] = avail[None, :, None]
    elif method == "quest":
        keys[:] = (2 * np.ceil(avail / page))[None, :, None]
    elif method == "infinigen":
        keys[:] = (avail * max(1, math.ceil(r_frac * trace.head_dim)) / trace.head_dim
                   )[None, :, None]
    elif method == "rekv":
        keys[:] = np.array([len([u for u in range(s) if b[u + 1] > n_sink]) if avail[s] else 0
                            for s in range(S)], float)[None, :, None]
    elif method in ("window", "full"):
        pass
    else:
        raise ValueError(f"no prediction cost for method {method!r}")
    keys[dense_rows(trace, dense_layers)] = 0
    return keys
