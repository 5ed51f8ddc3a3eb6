"""Baseline selectors, run on the same data and returning the same masks as ReSV.

Every selector returns ``bool [L, S, Hkv, T]``: at (layer, step) KV head h attends past token
t (t before the step's first token). Sink tokens are pinned and attended by every method, so
they never appear in a mask; the step's own tokens are always attended (causally).

- ``full``: every past token.
- ``topk(k)`` (InfiniGen-style, applied in prefill): per KV head, the k past tokens with the
  highest attention probability averaged over the step's query rows and the query heads that
  share the KV head. The ranking uses the exact float scores, so this is an upper bound on
  what a partial-channel approximation like InfiniGen's would pick.
- ``rekv(n)`` (ReKV-style frame top-k): the mean query of the step (over rows and the heads of
  a KV group) against the mean key of every past step, summed over KV heads; the n best past
  steps are taken whole, shared by all heads of the layer.
- ``window(n)`` (StreamingLLM): the n most recent past tokens.
ReSV without clustering is :func:`golden.resv.run_resv` with ``clustering=False``.
"""

from __future__ import annotations

import math

import numpy as np

from .trace import Trace

__all__ = ["full", "topk", "rekv", "window"]


def _shape(trace):
    return (trace.n_layers, trace.n_steps, trace.n_kv_heads, trace.n_tokens)


def full(trace: Trace, n_sink: int) -> np.ndarray:
    m = np.zeros(_shape(trace), bool)
    b = trace.step_bounds()
    for s in range(trace.n_steps):
        m[:, s, :, n_sink:b[s]] = True
    return m


def window(trace: Trace, n_sink: int, n: int) -> np.ndarray:
    m = np.zeros(_shape(trace), bool)
    b = trace.step_bounds()
    for s in range(trace.n_steps):
        m[:, s, :, max(n_sink, b[s] - n):b[s]] = True
    return m


def topk(trace: Trace, n_sink: int, ks) -> dict:
    """Masks for every budget in ``ks`` from one pass over the scores."""
    ks = list(ks)
    out = {k: np.zeros(_shape(trace), bool) for k in ks}
    b = trace.step_bounds()
    G = trace.n_q_heads // trace.n_kv_heads
    scale = 1.0 / math.sqrt(trace.head_dim)
    for l in range(trace.n_layers):
        for s in range(1, trace.n_steps):
            lo, hi = int(b[s]), int(b[s + 1])
            if lo <= n_sink:
                continue
            for h in range(trace.n_kv_heads):
                rows = trace.q[l, h * G:(h + 1) * G, lo:hi].astype(np.float64).reshape(-1, trace.head_dim)
                K = trace.k[l, h, :hi].astype(np.float64)
                logit = rows @ K.T * scale
                causal = np.tile(np.arange(hi)[None, :] <= np.arange(lo, hi)[:, None], (G, 1))
                logit = np.where(causal, logit, -np.inf)
                p = np.exp(logit - logit.max(axis=1, keepdims=True))
                p /= p.sum(axis=1, keepdims=True)
                score = p[:, n_sink:lo].mean(axis=0)
                order = np.argsort(-score, kind="stable")      # ties: lower token index
                for k in ks:
                    out[k][l, s, h, n_sink + order[:k]] = True
    return out


def rekv(trace: Trace, n_sink: int, ns) -> dict:
    ns = list(ns)
    out = {n: np.zeros(_shape(trace), bool) for n in ns}
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
            for n in ns:
                for i in order[:n]:
                    u = units[i]
                    out[n][l, s, :, max(b[u], n_sink):b[u + 1]] = True
    return out
