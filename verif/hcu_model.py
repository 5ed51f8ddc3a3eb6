"""Scoreboard expectations for the HCU, from the golden model's clusterer (D3, D4)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from golden.resv import HashClusterer


@dataclass(frozen=True)
class Token:
    hash: int
    layer: int = 0
    step: int = 0
    first: int = 0
    last: int = 0


def expected(tokens, *, n_hp, window, th_hd, max_age, count_bits=16, prior=()):
    """One dict per token, as the HCU's ``o`` beat should read. ``prior``: tokens run before
    (same unit state, not compared)."""
    cl, counts, out, tok = {}, {}, [], -1
    cmax = (1 << count_bits) - 1
    for k, t in enumerate(list(prior) + list(tokens)):
        hc = cl.setdefault(t.layer, HashClusterer(n_hp=n_hp, th_hd=th_hd, window=window,
                                                  max_age=max_age))
        cid, opened, dist = (int(x[0]) for x in hc.assign([t.hash], t.step))
        c = counts.setdefault(t.layer, {})
        c[cid] = 1 if opened else min(c[cid] + 1, cmax)
        tok = 0 if t.first else (tok + 1) % (1 << 16)
        if k >= len(prior):
            out.append(dict(token=tok, cluster=cid, opened=opened, distance=dist, count=c[cid],
                            layer=t.layer, first=t.first, last=t.last))
    return out


def frames(hashes, steps, layers=None):
    """Tokens framed by (layer, step): first/last mark each run."""
    hashes, steps = list(hashes), list(steps)
    layers = [0] * len(hashes) if layers is None else list(layers)
    toks = []
    for i, (h, s, l) in enumerate(zip(hashes, steps, layers)):
        first = i == 0 or (steps[i - 1], layers[i - 1]) != (s, l)
        last = i == len(hashes) - 1 or (steps[i + 1], layers[i + 1]) != (s, l)
        toks.append(Token(int(h), int(l), int(s), int(first), int(last)))
    return toks


def structured_hashes(rng, n, n_hp, centres=12, flips=10):
    """Hashes near a few centres, so joins and opens both occur."""
    cs = [int(x) for x in rng.integers(0, 2**n_hp, centres, dtype=np.uint64)]
    out = []
    for _ in range(n):
        h = cs[rng.integers(centres)]
        for b in rng.choice(n_hp, rng.integers(0, flips), replace=True):
            h ^= 1 << int(b)
        out.append(h & ((1 << n_hp) - 1))
    return out


def trace_tokens(trace, qt, preset: str, n_hp: int, layers: int):
    """The golden ReSV run's hashes of a trace as HCU tokens, in streaming order (steps outer,
    layers inner, sink tokens left out), and the run itself."""
    from golden.config import Config
    from golden.resv import run_resv
    cfg = Config.from_preset(preset, **trace.geometry(), n_hp=n_hp)
    r = run_resv(trace, qt, cfg, [cfg.th_r])
    b = trace.step_bounds()
    toks = []
    for s in range(trace.n_steps):
        for l in range(min(trace.n_layers, layers)):
            ts = [t for t in range(b[s], b[s + 1]) if r.cluster_of[l, 0, t] >= 0]
            toks += [Token(int(r.hashes[l, 0, t]), l, s, int(i == 0), int(i == len(ts) - 1))
                     for i, t in enumerate(ts)]
    return toks, cfg, r
