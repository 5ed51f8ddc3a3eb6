"""Golden model of the core's front end: which descriptors it refuses, and with which error
code (vrex/regmap.py's ``ERRORS``; docs/design.md).

A descriptor (``vrex.regmap.decode_descriptor``) names one layer of one step and the memory
it reads and writes. The core checks it before running it, in this order, and refuses it with
the first failing check's code: a zero step length; a layer the build has no layer for; an
address not aligned to the bus width; a buffer that does not lie wholly inside the I/O window
(``IO_BASE``, ``IO_SIZE``); a version older than the last accepted one of its layer (versions
are 16-bit and compared without wrap-around: the host resets the core, ``CTRL.soft_reset``,
before they wrap); a step older than the last accepted one of its layer, or one the build's
``step_bits`` cannot hold (steps never decrease nor wrap, docs/numerics.md §5). A refused
descriptor runs nothing, so a layer's last version and step are those of its last accepted
one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from vrex.regmap import ERRORS

__all__ = ["buffer_bytes", "check_descriptor", "HeadResult", "LayerStep", "run_stream",
           "window_moves", "fetch_chunks", "head_chunks"]


def buffer_bytes(desc: dict, cfg) -> dict:
    """The bytes each buffer of a descriptor spans: ``name -> (address, bytes)``; the sink
    buffers only when ``n_sink`` is not 0."""
    t, d = desc["step_len"], cfg.head_dim
    return {"q_addr": (desc["q_addr"], cfg.n_q_heads * t * d),
            "k_addr": (desc["k_addr"], cfg.n_kv_heads * t * d),
            "k_hash_addr": (desc["k_hash_addr"], cfg.n_kv_heads * t * d),
            "v_addr": (desc["v_addr"], cfg.n_kv_heads * t * d),
            "hp_addr": (desc["hp_addr"], cfg.hash_groups * cfg.n_hp * cfg.hash_dim),
            "o_addr": (desc["o_addr"], cfg.n_q_heads * t * d * 2),
            **({"sink_k_addr": (desc["sink_k_addr"], cfg.n_kv_heads * desc["n_sink"] * d),
                "sink_v_addr": (desc["sink_v_addr"], cfg.n_kv_heads * desc["n_sink"] * d)}
               if desc.get("n_sink", 0) else {})}


def check_descriptor(desc: dict, cfg, *, io_base: int, io_size: int, bus_bytes: int,
                     last_version: dict, last_step: dict | None = None) -> tuple[str, int]:
    """``(error name, code)`` of a descriptor, ``("NONE", 0)`` if the core accepts it.
    ``last_version``, ``last_step``: layer -> the version and the step of the layer's last
    accepted descriptor (the caller updates them on acceptance)."""
    def err(name):
        return name, ERRORS[name][0]
    if desc["step_len"] == 0:
        return err("DESC_ZERO_LENGTH")
    if desc["layer"] >= cfg.n_layers:
        return err("DESC_UNKNOWN_LAYER")
    bufs = buffer_bytes(desc, cfg)
    if any(addr % bus_bytes for addr, _ in bufs.values()):
        return err("DESC_MISALIGNED")
    if any(addr < io_base or addr + n > io_base + io_size for addr, n in bufs.values()):
        return err("DESC_OUT_OF_WINDOW")
    if desc["version"] < last_version.get(desc["layer"], 0):
        return err("DESC_VERSION_BACKWARDS")
    if desc["step"] < (last_step or {}).get(desc["layer"], 0) or \
            desc["step"] >> cfg.step_bits:
        return err("DESC_BAD_STEP")
    return err("NONE")


# --- the core's whole run: what every step and layer must produce --------------------------

@dataclass
class HeadResult:
    """One KV head at one (step, layer): its candidate list as scored (cluster ids and past
    member counts), the candidate indices selected (the WTU's output), the past tokens a
    fetch delivers (sorted), the attended set's size and the output rows ``o [q heads of
    the KV head · step_len, head_dim]`` (row r: query head ``h·G_q + r // t``, token
    ``r mod t``)."""
    clusters: list
    counts: list
    selected: list
    fetched: list
    attended: int
    o: np.ndarray


@dataclass
class LayerStep:
    """One descriptor's golden results."""
    step: int
    layer: int
    token0: int
    step_len: int
    n_sink: int                      # sink tokens attended from the sink buffers
    hashed: int                      # first token (of the step) hashed and stored
    beta_m: int
    beta_shift: int
    heads: list                      # HeadResult per KV head
    hashes: np.ndarray               # uint64 [groups, tokens hashed]
    clusters: np.ndarray             # int [groups, tokens hashed]
    dense: bool = False              # a dense layer (D14): the descriptor's ``dense`` flag


def run_stream(trace, qt, cfg, steps=None, outputs: bool = True) -> list:
    """The golden model of the core over a stream: per step (outer) and layer, a
    :class:`LayerStep`. ReSV as ``golden.resv.run_resv`` runs it in the configuration's
    ``order`` (``select_first``: select with the HC table as it stood before the step, then
    hash and cluster the step's own tokens; ``cluster_first``: the step's tokens clustered
    first, the representative keys over every member, the counts and fetches the past
    members'), light
    attention (D10, docs/numerics.md §10) of every query row over the sink tokens, its KV
    head's fetched past tokens and the step's own tokens up to itself, in the integer mode.
    At a dense layer (``cfg.dense_layers``, D14) a head's list is every cluster with past
    members (id order, the past counts: the core's counts list), all of it selected, so
    every past non-sink token is fetched.
    ``outputs=False``: every size and selection, no attention (each head's ``o`` is None;
    what the cycle model reads)."""
    from .attn import attend, exp_registers
    from .numerics import ExpUnit
    from .resv import dense_rows, run_resv, sink_count
    if cfg.timing != "same_layer" or cfg.scope != "kv_head" or cfg.numerics != "int" or \
            cfg.wicsum != "bucket":
        raise ValueError("the core runs numerics 'int', wicsum 'bucket', scope 'kv_head' and "
                         "timing 'same_layer'")
    recorded = []
    run = run_resv(trace, qt, cfg, [cfg.th_r], record_rows=recorded)
    by_key = {(r["layer"], r["step"], r["head"]): r for r in recorded}
    masks = run.masks[cfg.th_r]
    bounds = trace.step_bounds()
    n_sink = run.n_sink
    G, hpg, gq, d = cfg.hash_groups, cfg.heads_per_group, cfg.group_size, cfg.head_dim
    S = trace.n_steps if steps is None else min(steps, trace.n_steps)
    dense = set(dense_rows(trace, cfg.dense_layers).tolist())
    out = []
    for s in range(S):
        a, b = int(bounds[s]), int(bounds[s + 1])
        t = b - a
        for l in range(cfg.n_layers):
            alpha = float(qt.scale_q[l] * qt.scale_k[l]) / math.sqrt(d)
            unit = ExpUnit.for_config(alpha, cfg)
            sinks = min(n_sink, a)
            heads = []
            for h in range(cfg.n_kv_heads):
                g = h // hpg
                rec = by_key.get((l, s, h))
                sel = np.flatnonzero(masks[l, s, h, :a])
                if l in dense:
                    ids, counts = np.unique(run.cluster_of[l, g, :a], return_counts=True)
                    clusters = [int(c) for c in ids[ids >= 0]]
                    counts = [int(n) for n in counts[ids >= 0]]
                    chosen = list(range(len(clusters)))
                elif rec is None:
                    clusters, counts, chosen = [], [], []
                else:
                    clusters = [int(c) for c in rec["cluster"]]
                    counts = [int(n) for n in rec["count"]]
                    owners = sorted({int(run.cluster_of[l, g, tok]) for tok in sel})
                    chosen = [int(np.searchsorted(rec["cluster"], o)) for o in owners]
                idx = np.concatenate([np.arange(sinks), sel, np.arange(a, b)]).astype(int)
                q = qt.q[l, h * gq:(h + 1) * gq, a:b].reshape(-1, d)
                o = attend(q, qt.k[l, h, idx], qt.v[l, h, idx], t, unit, cfg.out_frac_bits,
                           cfg.score_bits) if outputs else None
                heads.append(HeadResult(clusters, counts, chosen, [int(x) for x in sel],
                                        len(idx), o))
            first = max(a, n_sink)
            regs = exp_registers(unit)
            out.append(LayerStep(
                step=s, layer=l, token0=a, step_len=t, n_sink=sinks,
                hashed=max(0, first - a), beta_m=regs["beta_m"],
                beta_shift=regs["beta_shift"], heads=heads,
                hashes=run.hashes[l, :, first:b].copy(),
                clusters=run.cluster_of[l, :, first:b].copy(), dense=l in dense))
    return out


def fetch_chunks(counts: list, b_rows: int) -> list:
    """The core's chunks of a set longer than B (docs/core.md): the selected clusters' member
    counts, in selection order, packed whole into chunks of at most ``b_rows`` tokens (the
    sinks and the step's own tokens follow in a last chunk of their own); their lengths."""
    chunks, cur = [], 0
    for c in counts:
        if cur and cur + c > b_rows:
            chunks.append(cur)
            cur = 0
        cur += c
    return chunks + ([cur] if cur else [])


def head_chunks(head, b_rows: int) -> list:
    """A head's fetched chunks (:func:`fetch_chunks` over its selected clusters) when its
    set is longer than ``b_rows``; empty when B holds it whole."""
    if head.attended <= b_rows:
        return []
    return fetch_chunks([head.counts[c] for c in head.selected], b_rows)


def window_moves(golden_steps, cfg) -> list:
    """Per descriptor of a stream (``run_stream``'s list, in issue order), the cluster
    windows the core moves before hashing its groups, on a build with fewer HCU contexts
    than windows: ``("save", w)``, then ``("load", w)`` or, the first time, ``("flush",
    w)``. Window ``w = layer · hash_groups + group`` lives in context ``w mod contexts``;
    a descriptor that hashes no token moves nothing; with every window on chip nothing
    moves."""
    G, C = cfg.hash_groups, cfg.contexts
    out, resident, saved = [], {}, set()
    for ls in golden_steps:
        moves = []
        for g in range(G if ls.hashes.shape[1] and C < cfg.windows else 0):
            w = ls.layer * G + g
            if resident.get(w % C) == w:
                continue
            if w % C in resident:
                moves.append(("save", resident[w % C]))
                saved.add(resident[w % C])
            moves.append(("load" if w in saved else "flush", w))
            resident[w % C] = w
        out.append(moves)
    return out
