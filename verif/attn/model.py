"""Attention-engine stimulus and expectations: GEMM tiles as the array's input beats and
output rows, and exp-unit inputs, from the golden models (``golden.attn``)."""
from __future__ import annotations

import numpy as np

from golden.attn import gemm_tiles

__all__ = ["tile_beats", "tile_rows", "random_int8"]


def tile_beats(tiles, n: int):
    """The array's input beats for a list of tiles (``golden.attn.gemm_tiles``), a reduction
    shorter than n padded with zero beats (the array's contract)."""
    beats = []
    for _, _, at, bt, _ in tiles:
        K = max(at.shape[1], n)
        for k in range(K):
            a = at[:, k] if k < at.shape[1] else np.zeros(n, np.int64)
            b = bt[:, k] if k < bt.shape[1] else np.zeros(n, np.int64)
            beats.append({"a": [int(x) for x in a], "b": [int(x) for x in b],
                          "first": int(k == 0), "last": int(k == K - 1)})
    return beats


def tile_rows(tiles, n: int):
    """The array's output beats for the tiles: n rows each, ``last`` on row n - 1."""
    return [{"c": [int(x) for x in ct[r]], "row": r, "last": int(r == n - 1)}
            for _, _, _, _, ct in tiles for r in range(n)]


def random_int8(rng, shape, kind="uniform"):
    """int8 matrices: uniform, all -128, all 127, or sparse (mostly zero)."""
    if kind == "min":
        return np.full(shape, -128, np.int64)
    if kind == "max":
        return np.full(shape, 127, np.int64)
    x = rng.integers(-128, 128, shape)
    if kind == "sparse":
        x[rng.random(shape) < 0.8] = 0
    return x


def gemm_case(rng, m, k, l, n, kind="uniform"):
    a, b = random_int8(rng, (m, k), kind), random_int8(rng, (l, k), kind)
    return gemm_tiles(a, b, n)


def trace_hash_case(n_tokens: int, n: int):
    """The bundled trace's layer-0 hash projection as a GEMM (``paper`` preset: post-RoPE keys
    of all KV heads concatenated, against the layer's hyperplanes), its tiles, the golden
    ReSV run's hashes of those tokens and their sink mask. Returns ``(tiles, keys, hp,
    hashes, clustered)``."""
    from golden.numerics import hyperplanes
    from golden.resv import run_resv
    from verif.lib.traces import bundled
    from vrex.config import Config
    tr, qt = bundled()
    cfg = Config.from_preset("paper", **tr.geometry())
    run = run_resv(tr, qt, cfg, [cfg.th_r])
    keys = np.transpose(qt.k[0], (1, 0, 2)).reshape(tr.n_tokens, -1)[:n_tokens]
    hp = hyperplanes(cfg.hp_seed, 0, 0, cfg.n_hp, cfg.hash_dim)
    clustered = run.cluster_of[0, 0, :n_tokens] >= 0
    return gemm_tiles(keys, hp, n), keys, hp, run.hashes[0, 0, :n_tokens], clustered
