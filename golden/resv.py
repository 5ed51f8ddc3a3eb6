"""ReSV over a streaming trace: hash, cluster, score, select (docs/design.md, D1-D11).

:class:`HashClusterer` is the golden model of the HCU (D3, D4). :func:`run_resv` drives one
:class:`ResvLayer` per layer through the steps in streaming order (steps outer, layers inner)
and returns, for each requested Th_r, the past tokens every KV head attends to.

Order inside one (layer, step): candidates are the clusters holding at least one past token
(D6), scored with the representative and count of their *past* members (the HC table as it
stood at the start of the step); then the step's own tokens are hashed and clustered, and the
table is updated (``order = "select_first"``). With ``order = "cluster_first"`` the step's own
tokens are clustered first and the representative keys are the means over all members, the
step's own included (docs/design.md read literally); the candidates and the scores' weights
are still the clusters' past members (D6: the tokens a fetch would move). The core runs
either order (a build option, docs/core.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from vrex.config import Config, ConfigError, unsigned_fixed
from .numerics import (ExpUnit, centring_bias, hamming, hash_bits, hyperplanes, int_matmul,
                       project, round_div, wicsum_bucket_sweep, wicsum_exact_sweep)
from .trace import QuantTrace, Trace

__all__ = ["HashClusterer", "ResvLayer", "ResvResult", "run_resv", "sink_count", "dense_rows",
           "densify"]


def sink_count(trace: Trace, cfg: Config) -> int:
    """Pinned prompt tokens: ``n_sink``, or all of step 0 when it is ``None``."""
    if cfg.n_sink is None:
        return int(trace.step_bounds()[1]) if trace.n_tokens else 0
    return min(cfg.n_sink, trace.n_tokens)


def dense_rows(trace: Trace, dense_layers: int) -> np.ndarray:
    """The trace's layer indices whose model layer is among the model's first
    ``dense_layers`` (D14; the traces hold a subset of the model's layers:
    ``trace.layers``)."""
    return np.flatnonzero(np.asarray(trace.layers) < dense_layers)


def densify(trace: Trace, n_sink: int, masks, dense_layers: int):
    """``masks`` (a mask ``[L, S, Hkv, T]`` or a dict of them) with every past non-sink token
    attended at the dense layers (:func:`dense_rows`), in place; returned."""
    rows = dense_rows(trace, dense_layers)
    if len(rows):
        b = trace.step_bounds()
        for m in masks.values() if isinstance(masks, dict) else [masks]:
            for s in range(trace.n_steps):
                m[rows, s, :, n_sink:b[s]] = True
    return masks


class HashClusterer:
    """Golden model of the hash-cluster unit (D3, D4), for one layer (or one layer and head).

    Each new hash is compared with the ``window`` most recently opened clusters that are at
    most ``max_age`` steps old (``None``: no limit), clusters opened earlier in the same step
    included. The minimum Hamming distance wins, ties to the most recently opened cluster; the
    token joins when that distance is ``< th_hd``, else it opens a cluster with its own hash.
    With no eligible cluster the distance reads ``n_hp + 1``. Cluster ids count up from 0 in
    the order clusters open. ``clustering=False`` opens a cluster per token (ReSV without
    clustering); ``cap`` (``Config.cluster_cap``, the HCU's ``cluster_cap`` register) splits
    clusters: a token whose nearest cluster already has ``cap`` members opens one.
    """

    def __init__(self, *, n_hp: int, th_hd: int, window: int, max_age: int | None,
                 capacity: int = 1024, clustering: bool = True, cap: int | None = None):
        self.n_hp, self.th_hd, self.window, self.max_age = n_hp, th_hd, window, max_age
        self.clustering, self.cap = clustering, cap
        self.hashes = np.zeros(capacity, np.uint64)
        self.open_step = np.zeros(capacity, np.int64)
        self.members = np.zeros(capacity, np.int64)
        self.n = 0
        self.comparisons = 0

    def _grow(self):
        self.hashes = np.concatenate([self.hashes, np.zeros_like(self.hashes)])
        self.open_step = np.concatenate([self.open_step, np.zeros_like(self.open_step)])
        self.members = np.concatenate([self.members, np.zeros_like(self.members)])

    def _open(self, h, step) -> int:
        if self.n == len(self.hashes):
            self._grow()
        cid = self.n
        self.hashes[cid], self.open_step[cid] = h, step
        self.n += 1
        return cid

    def assign(self, hashes, step: int):
        """Cluster a run of tokens of one step, in order. Returns ``(cid, opened, dist)``.
        Steps never decrease (docs/numerics.md §5): an older step is refused."""
        if step < getattr(self, "last_step", step):
            raise ValueError(f"step {step} after step {self.last_step}: steps never go "
                             f"backwards")
        self.last_step = step
        hashes = np.asarray(hashes, np.uint64)
        cid = np.empty(len(hashes), np.int64)
        opened = np.empty(len(hashes), bool)
        dist = np.empty(len(hashes), np.int64)
        none = self.n_hp + 1
        for i, h in enumerate(hashes):
            best, arg = none, -1
            if self.clustering:
                lo = max(0, self.n - self.window)
                if self.n > lo:
                    d = hamming(h, self.hashes[lo:self.n])
                    self.comparisons += self.n - lo
                    if self.max_age is not None:
                        d = np.where(step - self.open_step[lo:self.n] <= self.max_age, d, none)
                    j = len(d) - 1 - int(np.argmin(d[::-1]))     # ties: most recent
                    if d[j] < none:
                        best, arg = int(d[j]), lo + j
            dist[i] = best
            if arg >= 0 and best < self.th_hd and (self.cap is None or
                                                   self.members[arg] < self.cap):
                cid[i], opened[i] = arg, False
            else:               # (a full cluster, with ``cap``, is split: the token opens one)
                cid[i], opened[i] = self._open(h, step), True
            self.members[cid[i]] += 1
        return cid, opened, dist


@dataclass
class ResvResult:
    """What :func:`run_resv` returns. Masks are ``[L, S, Hkv, T]``: token t < start of step s
    is attended by KV head h at (layer, step)."""
    cfg: Config
    th_rs: list
    masks: dict                      # th_r -> bool [L, S, Hkv, T]
    cluster_of: np.ndarray           # int [L, G, T], -1 for sinks
    hashes: np.ndarray               # uint64 [L, G, T]
    dist: np.ndarray                 # int [L, G, T]
    opened: np.ndarray               # bool [L, G, T]
    n_clusters: np.ndarray           # int [L, G]
    n_sink: int
    buckets_visited: dict = field(default_factory=dict)   # th_r -> (sum, rows)
    comparisons: int = 0
    biases: list = field(default_factory=list)  # per layer: {(group, step): centring bias}
    candidates: np.ndarray | None = None        # int [L, S, Hkv]: clusters scored (per row)

    def cluster_stats(self, trace: Trace) -> dict:
        cfg = self.cfg
        count = int(self.n_clusters.sum())
        tokens = int((self.cluster_of >= 0).sum())
        hpg = trace.n_kv_heads // cfg.hash_groups
        per_cluster = cfg.n_hp / 8 + hpg * trace.head_dim + 2     # hash, rep. key, count
        kv_bytes = trace.n_layers * trace.n_tokens * 2 * trace.n_kv_heads * trace.head_dim
        return dict(count=count, mean_tokens=tokens / max(count, 1),
                    table_share=count * per_cluster / kv_bytes)


class ResvLayer:
    """The HC tables and the selection of one layer."""

    def __init__(self, cfg: Config, trace: Trace, qt: QuantTrace | None, layer: int,
                 n_sink: int, clustering: bool = True, cap: int | None = None):
        self.cfg, self.trace, self.layer, self.n_sink = cfg, trace, layer, n_sink
        self.int_mode = cfg.numerics == "int"
        L, Hkv, T, d = trace.k.shape
        G = cfg.hash_groups
        self.hpg = Hkv // G
        src = "k_pre" if cfg.hash_input == "pre_rope" else "k"
        if self.int_mode:
            self.k_hash = getattr(qt, src)[layer]                # int8 [Hkv, T, d]
            self.k_post = qt.k[layer]
            self.q = qt.q[layer]
            alpha = float(qt.scale_q[layer] * qt.scale_k[layer]) / math.sqrt(d)
            self.exp = ExpUnit.for_config(alpha, cfg)
            acc = np.int64
        else:
            self.k_hash = getattr(trace, src)[layer].astype(np.float64)
            self.k_post = trace.k[layer].astype(np.float64)
            self.q = trace.q[layer].astype(np.float64)
            self.alpha = 1.0 / math.sqrt(d)
            acc = np.float64
        self.hp = [hyperplanes(cfg.hp_seed, layer, g, cfg.n_hp, cfg.hash_dim) for g in range(G)]
        self.clusterers = [HashClusterer(n_hp=cfg.n_hp, th_hd=cfg.th_hd, window=cfg.window,
                                         max_age=cfg.max_age, capacity=max(T, 1),
                                         clustering=clustering, cap=cap) for _ in range(G)]
        self.sums = np.zeros((G, max(T, 1), self.hpg, d), acc)
        self.count = np.zeros((G, max(T, 1)), np.int64)
        self.cluster_of = np.full((G, T), -1, np.int64)
        self.partition = None           # [G, T] cluster ids to use instead of clustering
        self.hashes = np.zeros((G, T), np.uint64)
        self.dist = np.zeros((G, T), np.int64)
        self.opened = np.zeros((G, T), bool)
        self.mean_sum = np.zeros((G, cfg.hash_dim), acc)
        self.mean_n = 0
        self.biases = {}                 # (group, step) -> the centring bias hashed with
        self.record = None
        self.candidates = np.zeros((trace.n_steps, Hkv), np.int64)

    def _group_keys(self, keys, g, a, b):
        """Hash-input vectors of tokens a..b for group g: ``[b-a, hash_dim]``."""
        heads = keys[g * self.hpg:(g + 1) * self.hpg, a:b]           # [hpg, n, d]
        return np.transpose(heads, (1, 0, 2)).reshape(b - a, -1)

    def select(self, s: int, a: int, b: int, th_rs, visited_acc: dict):
        """Past tokens each KV head attends to at step s, one ``[Hkv, a]`` mask per Th_r."""
        cfg = self.cfg
        Hkv = self.trace.n_kv_heads
        G_q = cfg.group_size
        masks = {th: np.zeros((Hkv, a), bool) for th in th_rs}
        for g, cl in enumerate(self.clusterers):
            total = self.count[g, :cl.n]
            past = total
            if cfg.order == "cluster_first":
                # the step's own tokens already joined: the representative keys include them,
                # the scores are weighted by the past members (the tokens a fetch moves)
                own = self.cluster_of[g, a:b]
                past = total - np.bincount(own[own >= 0], minlength=cl.n)[:cl.n]
            cand = np.flatnonzero(past > 0)
            if cand.size == 0:
                continue
            cnt = past[cand]
            tot = total[cand]
            if self.int_mode:
                rep = np.clip(round_div(self.sums[g, cand], tot[:, None, None]), -128, 127)
            else:
                rep = self.sums[g, cand] / tot[:, None, None]
            members = self.cluster_of[g, :a]
            for j in range(self.hpg):
                h = g * self.hpg + j
                self.candidates[s, h] = cand.size
                rows = self.q[h * G_q:(h + 1) * G_q, a:b].reshape(-1, self.q.shape[-1])
                if self.int_mode:
                    sc = int_matmul(rows, rep[:, j].T)
                else:
                    sc = rows @ rep[:, j].T
                w = self._weights(sc)
                if self.record is not None:      # the WTU's input rows, for its testbenches
                    self.record.append(dict(layer=self.layer, step=s, head=h, cluster=cand,
                                            score=sc, weight=w, count=cnt, query=rows,
                                            rep=rep[:, j], exp=getattr(self, "exp", None)))
                valid = np.ones(sc.shape, bool)
                n = np.broadcast_to(cnt, sc.shape)
                fb = cfg.th_r_frac_bits
                if cfg.wicsum == "bucket":      # one bucketing for every Th_r of the sweep
                    res = wicsum_bucket_sweep(sc, w, n, valid,
                                              [unsigned_fixed(th, fb) for th in th_rs], fb,
                                              cfg.buckets)
                    for th, (_, vis) in zip(th_rs, res):
                        acc = visited_acc.setdefault(th, [0, 0])
                        acc[0] += int(vis.sum())
                        acc[1] += len(vis)
                    sels = [sel for sel, _ in res]
                elif self.int_mode:
                    sels = wicsum_exact_sweep(w, n, valid,
                                              [(unsigned_fixed(th, fb), fb) for th in th_rs])
                else:
                    sels = wicsum_exact_sweep(w, n, valid, th_rs)
                tok = members >= 0
                for th, sel in zip(th_rs, sels):
                    chosen = np.zeros(cl.n, bool)
                    chosen[cand[sel.any(axis=0)]] = True
                    masks[th][h, tok] = chosen[members[tok]]
        if cfg.scope == "layer":
            for th in th_rs:
                masks[th][:] = masks[th].any(axis=0, keepdims=True)
        return masks

    def _weights(self, sc):
        cfg = self.cfg
        if cfg.weight_mode == "relu":
            if self.int_mode:
                return np.clip(sc, 0, (1 << cfg.weight_bits) - 1)
            return np.maximum(sc, 0.0)
        mx = sc.max(axis=1, keepdims=True)
        if self.int_mode:
            return self.exp(sc - mx)
        return np.exp((sc - mx) * self.alpha)

    def cluster(self, s: int, a: int, b: int):
        """Hash and cluster the step's own tokens, then commit them to the HC tables."""
        cfg = self.cfg
        a0 = max(a, self.n_sink)
        if a0 >= b:
            return
        for g, cl in enumerate(self.clusterers):
            xk = self._group_keys(self.k_hash, g, a0, b)
            bias = None
            if cfg.centre:          # the running mean of the non-sink keys, this step's in
                self.mean_sum[g] += xk.sum(axis=0)
                n = self.mean_n + (b - a0)
                if self.int_mode:
                    bias = centring_bias(self.mean_sum[g], n, self.hp[g])
                    self.biases[(g, s)] = bias
                else:
                    xk = xk - self.mean_sum[g] / n
            if self.int_mode:
                hsh = hash_bits(project(xk, self.hp[g]), bias)
            else:
                hsh = hash_bits(xk @ self.hp[g].astype(np.float64).T)
            if self.partition is not None:
                # another run's clusters (the same partition under other numerics)
                cid = self.partition[g, a0:b].astype(np.int64)
                opened = np.array([c >= cl.n and c not in cid[:i] for i, c in enumerate(cid)])
                dist = np.zeros(len(cid), np.int64)
                cl.n = max(cl.n, int(cid.max()) + 1)
            else:
                cid, opened, dist = cl.assign(hsh, s)
            self.cluster_of[g, a0:b] = cid
            self.hashes[g, a0:b], self.dist[g, a0:b], self.opened[g, a0:b] = hsh, dist, opened
            post = self.k_post[g * self.hpg:(g + 1) * self.hpg, a0:b]     # [hpg, n, d]
            np.add.at(self.sums[g], cid, np.transpose(post, (1, 0, 2)).astype(self.sums.dtype))
            np.add.at(self.count[g], cid, 1)
        if cfg.centre:
            self.mean_n += b - a0
        assert self.count.max(initial=0) < (1 << cfg.count_bits), "member count overflows"


def run_resv(trace: Trace, qt: QuantTrace | None, cfg: Config, th_rs=None,
             clustering: bool = True, progress=None, record_rows: list | None = None,
             partition: np.ndarray | None = None, cluster_cap: int | None = None
             ) -> ResvResult:
    """Run ReSV over the whole trace; ``th_rs`` lists the Th_r values to select with.

    ``partition``: the ``cluster_of`` ``[L, G, T]`` of another run, whose clusters this run
    uses instead of its own (the same partition, scored and selected under this run's
    numerics: what the integer and float modes differ in beside the hashes).
    ``cluster_cap``: clusters split at that many members (:class:`HashClusterer`'s ``cap``;
    default the configuration's ``cluster_cap``).

    ``record_rows``: a list that receives, per (layer, step, KV head) with candidates, the
    WTU's input: candidate cluster ids, scores ``[rows, C]``, weights and counts.

    The model's first ``cfg.dense_layers`` layers (D14) are dense: their tokens are hashed,
    clustered and stored as every layer's, but nothing is scored or selected (no record,
    no candidates counted): every past non-sink token is attended."""
    if cfg.wicsum == "bucket" and cfg.numerics != "int":
        raise ConfigError("wicsum 'bucket' needs numerics 'int' (buckets split integer scores)")
    if cfg.numerics == "int" and qt is None:
        raise ValueError("numerics 'int' needs the quantised trace")
    geo = trace.geometry()
    for k, v in geo.items():
        if getattr(cfg, k) != v:
            raise ConfigError(f"{k} of the configuration ({getattr(cfg, k)}) does not match "
                              f"the trace ({v})")
    th_rs = list(th_rs) if th_rs is not None else [cfg.th_r]
    L, Hkv, T, _ = trace.k.shape
    S = trace.n_steps
    bounds = trace.step_bounds()
    n_sink = sink_count(trace, cfg)
    cap = cfg.cluster_cap if cluster_cap is None else cluster_cap
    layers = [ResvLayer(cfg, trace, qt, l, n_sink, clustering, cap) for l in range(L)]
    for l, lay in enumerate(layers):
        lay.record = record_rows
        if partition is not None:
            lay.partition = partition[l]
    masks = {th: np.zeros((L, S, Hkv, T), bool) for th in th_rs}
    visited: dict = {}
    dense = set(dense_rows(trace, cfg.dense_layers).tolist())
    for s in range(S):
        a, b = int(bounds[s]), int(bounds[s + 1])
        for l, lay in enumerate(layers):
            if cfg.order == "cluster_first":
                lay.cluster(s, a, b)
            # a dense layer predicts nothing (densify below) unless the next layer's
            # selection is its prediction
            if l not in dense or cfg.timing == "prev_layer":
                own = lay.select(s, a, b, th_rs, visited)
                for th in th_rs:
                    masks[th][l, s, :, :a] = own[th]
            if cfg.order == "select_first":
                lay.cluster(s, a, b)
        if progress:
            progress(s + 1, S)
    if cfg.timing == "prev_layer":
        for th in th_rs:
            masks[th][1:] = masks[th][:-1].copy()
    densify(trace, n_sink, masks, cfg.dense_layers)
    return ResvResult(
        cfg=cfg, th_rs=th_rs, masks=masks,
        cluster_of=np.stack([lay.cluster_of for lay in layers]),
        hashes=np.stack([lay.hashes for lay in layers]),
        dist=np.stack([lay.dist for lay in layers]),
        opened=np.stack([lay.opened for lay in layers]),
        n_clusters=np.array([[c.n for c in lay.clusterers] for lay in layers]),
        n_sink=n_sink, buckets_visited=visited,
        comparisons=sum(c.comparisons for lay in layers for c in lay.clusterers),
        biases=[lay.biases for lay in layers],
        candidates=np.stack([lay.candidates for lay in layers]))
