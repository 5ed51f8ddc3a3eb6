"""golden.metrics against a plain per-mask computation, and the parallel job against the serial
one."""
import json
import math

import numpy as np
import pytest

from golden.job import run_job
from golden.metrics import _masked_sums, evaluate
from golden.numerics import attention_float
from golden.pool import map_forked
from golden.resv import sink_count
from golden.trace import synthetic_trace
from vrex.config import Config

from .test_job import SMALL_SWEEPS


def _masks(tr, n_sink, rng):
    """Nested chains (a sweep), unrelated random masks, an empty and a full one."""
    L, S, H, T = tr.n_layers, tr.n_steps, tr.n_kv_heads, tr.n_tokens
    b = tr.step_bounds()
    past = np.zeros((L, S, H, T), bool)
    for s in range(S):
        past[:, s, :, n_sink:b[s]] = True
    score = rng.random((L, S, H, T))
    out = {("chain", f): past & (score < f) for f in (0.1, 0.3, 0.6)}
    out.update({("random", k): past & (rng.random((L, S, H, T)) < 0.5) for k in range(3)})
    out[("empty", None)] = np.zeros_like(past)
    out[("full", None)] = past
    return out


def _plain(tr, masks, n_sink):
    """Each mask on its own: the light attention over sinks, its past tokens and the step's
    own (causal) against full causal attention, with numerics.attention_float."""
    L, H, T, d = tr.k.shape
    G = tr.n_q_heads // H
    b = tr.step_bounds()
    out = {name: {k: np.zeros((L, tr.n_steps, H)) for k in ("selected", "recall", "cosine",
                                                             "rel_l2", "rows")}
           for name in masks}
    for l in range(L):
        for s in range(1, tr.n_steps):
            lo, hi = int(b[s]), int(b[s + 1])
            if lo <= n_sink:
                continue
            causal = np.tile(np.arange(hi)[None, :] <= np.arange(lo, hi)[:, None], (G, 1))
            for h in range(H):
                q = tr.q[l, h * G:(h + 1) * G, lo:hi].reshape(-1, d).astype(np.float64)
                k, v = tr.k[l, h, :hi], tr.v[l, h, :hi]
                full = attention_float(q, k, v, causal, 1 / math.sqrt(d))
                logit = np.where(causal, q @ k.astype(np.float64).T / math.sqrt(d), -np.inf)
                p = np.exp(logit - logit.max(axis=1, keepdims=True))
                p /= p.sum(axis=1, keepdims=True)
                for name, m in masks.items():
                    col = np.ones(hi, bool)
                    col[n_sink:lo] = m[l, s, h, n_sink:lo]
                    light = attention_float(q, k, v, causal & col[None, :], 1 / math.sqrt(d))
                    r = out[name]
                    r["selected"][l, s, h] = col[n_sink:lo].sum()
                    r["rows"][l, s, h] = len(q)
                    r["recall"][l, s, h] = (p * col[None, :]).sum()
                    r["cosine"][l, s, h] = ((light * full).sum(axis=1) / (
                        np.linalg.norm(light, axis=1) * np.linalg.norm(full, axis=1))).sum()
                    r["rel_l2"][l, s, h] = (np.linalg.norm(light - full, axis=1)
                                            / np.linalg.norm(full, axis=1)).sum()
    return out


@pytest.mark.parametrize("jobs", [1, 2])
def test_evaluate_equals_each_mask_on_its_own(jobs):
    tr = synthetic_trace(seed=7, n_frames=5, n_layers=3)
    n_sink = sink_count(tr, Config.from_preset("paper", **tr.geometry()))
    masks = _masks(tr, n_sink, np.random.default_rng(jobs))
    got = evaluate(tr, masks, n_sink, jobs=jobs)
    want = _plain(tr, masks, n_sink)
    for name in masks:
        for k, v in want[name].items():
            np.testing.assert_allclose(got[name][k], v, rtol=1e-9, atol=1e-12,
                                       err_msg=f"{name} {k}")
    assert got[("full", None)]["rel_l2"].max() < 1e-12         # the full set is exact
    assert (got[("empty", None)]["selected"] == 0).all()


def test_masked_sums_any_set_of_masks():
    """Nested, overlapping, repeated, empty and disjoint masks, each equal to its own sum."""
    rng = np.random.default_rng(3)
    R, P, d = 7, 60, 5
    E, V = rng.random((R, P)), rng.standard_normal((P, d))
    base = rng.random(P) < 0.5
    M = np.stack([base, base & (rng.random(P) < 0.5), base | (rng.random(P) < 0.2), base,
                  np.zeros(P, bool), ~base, rng.random(P) < 0.9, np.ones(P, bool)])
    num, z = _masked_sums(E, V, M)
    for i, m in enumerate(M):
        np.testing.assert_allclose(num[i], E[:, m] @ V[m], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(z[i], E[:, m].sum(axis=1), rtol=1e-12, atol=1e-12)


def test_map_forked_keeps_the_order_and_reads_closures():
    data = np.arange(10)
    got = map_forked(lambda i: int(data[i] ** 2), range(10), jobs=2)
    assert got == [i * i for i in range(10)]
    assert map_forked(lambda i: i + 1, [1, 2], jobs=1) == [2, 3]


def test_job_in_two_processes_gives_the_same_summary():
    tr = synthetic_trace(seed=5, n_frames=4)
    a, b = (run_job(tr, None, progress=False, figures=False, sweeps=SMALL_SWEEPS, jobs=j)
            for j in (1, 2))
    for sm in (a, b):
        sm.pop("timing_s")
        sm.pop("tokens_per_s")
    assert json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True,
                                                                    default=str)
