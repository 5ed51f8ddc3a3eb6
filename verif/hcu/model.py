"""HCU stimulus and expectations: token streams (structured, directed, from the real trace)
and the golden block model's beats for them (``golden.hcu.hcu_reference``)."""
from __future__ import annotations

import numpy as np

from golden.hcu import Token, hcu_reference

__all__ = ["Token", "expected", "frames", "layered_stream", "structured_hashes", "swap_plan",
           "trace_tokens"]


def expected(tokens, cfg, prior=()):
    """The ``o`` beats the HCU built and set from ``cfg`` must produce for ``tokens``."""
    return [dict(w, opened=int(w["opened"])) for w in hcu_reference(tokens, cfg, prior=prior)]


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


def trace_tokens(trace, qt, preset: str, cfg):
    """The golden ReSV run's hashes of a trace as HCU tokens, in streaming order (steps outer,
    layers inner, sink tokens left out), for the first ``cfg.contexts`` layers, and the run.
    Returns ``(tokens, run_cfg, run)``: ``run_cfg`` is the preset on the trace's geometry
    with ``cfg``'s hash width."""
    from golden.resv import run_resv
    from vrex.config import Config
    run_cfg = Config.from_preset(preset, **trace.geometry(), n_hp=cfg.n_hp)
    r = run_resv(trace, qt, run_cfg, [run_cfg.th_r])
    b = trace.step_bounds()
    toks = []
    for s in range(trace.n_steps):
        for l in range(min(trace.n_layers, cfg.contexts)):
            ts = [t for t in range(b[s], b[s + 1]) if r.cluster_of[l, 0, t] >= 0]
            toks += [Token(int(r.hashes[l, 0, t]), l, s, int(i == 0), int(i == len(ts) - 1))
                     for i, t in enumerate(ts)]
    return toks, run_cfg, r


def layered_stream(cfg, n, seed, switch=7):
    """``n`` tokens over ``cfg.n_layers`` layers: steps outer, layers inner, runs of up to
    ``switch`` tokens a (step, layer), as the core streams them; enough distinct hashes that
    the windows wrap."""
    rng = np.random.default_rng(seed)
    hashes = structured_hashes(rng, n, cfg.n_hp, centres=4 * cfg.window, flips=cfg.n_hp // 4)
    layers, steps, i, s = [], [], 0, 0
    while i < n:
        for layer in range(cfg.n_layers):
            k = min(n - i, int(rng.integers(1, switch + 1)))
            layers += [layer] * k
            steps += [s] * k
            i += k
        s += int(rng.integers(1, 3))
    return frames(hashes, steps[:n], layers[:n])


def swap_plan(tokens, contexts):
    """What a host does to run ``tokens`` of more layers than the HCU's ``contexts``: per run
    of one (step, layer), if the layer is not in its slot (``layer mod contexts``):
    ``("save", slot, resident layer)`` (the image kept by layer), then ``("load", slot,
    layer)`` of its image or ``("flush", slot, layer)`` the first time; then ``("tokens",
    slot, run)`` with the tokens' layer field set to the slot."""
    runs = []
    for t in tokens:
        if t.first or not runs:
            runs.append([])
        runs[-1].append(t)
    resident, saved = {}, set()
    for run in runs:
        layer = run[0].layer
        slot = layer % contexts
        if resident.get(slot) != layer:
            if slot in resident:
                yield "save", slot, resident[slot]
                saved.add(resident[slot])
            yield ("load" if layer in saved else "flush"), slot, layer
            resident[slot] = layer
        yield "tokens", slot, [Token(t.hash, slot, t.step, t.first, t.last) for t in run]
