"""The KV block layout of D12 and the cost of every fetch.

KV lives in blocks of ``block_tokens`` tokens per KV head. Every block belongs to one owner:
a cluster (ReSV's cluster-contiguous layout) or the whole layer (a sequential layout, for
methods without clusters). A new token goes into its owner's open block if that block has
room and is still in the near tier, else into a newly allocated block. The near tier holds
``near_blocks`` blocks (all layers and KV heads together); allocating past that moves the
oldest allocated near blocks to the far tier, where they stay. Sink tokens are pinned on chip
and never fetched.

A fetch at step s moves the selected past tokens: ``2 · head_dim`` bytes each (int8 K and V),
one burst per block holding at least one selected token, served by the tier the block is in
at step s. Tokens are appended in streaming order (steps outer, layers inner) after the
step's selection, so a block that moves during step s is far from step s + 1 on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Layout", "simulate_layout", "fetch_cost"]

NEVER = np.iinfo(np.int64).max


@dataclass
class Layout:
    block_of: np.ndarray      # int [L, G, T], -1 for sinks
    far_from: np.ndarray      # int [n_blocks]: first step at which the block is far (NEVER)
    heads_per_group: int
    n_blocks: int

    def offloaded(self) -> int:
        return int((self.far_from != NEVER).sum())


def simulate_layout(owner: np.ndarray, bounds: np.ndarray, *, block_tokens: int,
                    near_blocks: int, heads_per_group: int) -> Layout:
    """Place tokens into blocks. ``owner [L, G, T]``: the owner id of each token, -1 if pinned."""
    L, G, T = owner.shape
    block_of = np.full((L, G, T), -1, np.int64)
    far_from = []
    fill = []
    open_block: dict = {}
    near = []            # block ids in allocation order still near
    head = 0             # index into near of the oldest near block
    S = len(bounds) - 1
    for s in range(S):
        a, b = int(bounds[s]), int(bounds[s + 1])
        for l in range(L):
            for g in range(G):
                for t in range(a, b):
                    o = int(owner[l, g, t])
                    if o < 0:
                        continue
                    key = (l, g, o)
                    blk = open_block.get(key)
                    if blk is None or fill[blk] == block_tokens or far_from[blk] != NEVER:
                        while (len(near) - head + 1) * heads_per_group > near_blocks and head < len(near):
                            far_from[near[head]] = s + 1
                            head += 1
                        blk = len(fill)
                        fill.append(0)
                        far_from.append(NEVER)
                        near.append(blk)
                        open_block[key] = blk
                    fill[blk] += 1
                    block_of[l, g, t] = blk
    return Layout(block_of, np.array(far_from, np.int64), heads_per_group, len(fill))


def fetch_cost(layout: Layout, masks: np.ndarray, bounds: np.ndarray, head_dim: int):
    """Bytes and bursts of every fetch, by tier: arrays ``[L, S, Hkv]`` in a dict."""
    L, S, Hkv, T = masks.shape
    hpg = layout.heads_per_group
    out = {k: np.zeros((L, S, Hkv), np.int64)
           for k in ("bytes_near", "bytes_far", "bursts_near", "bursts_far")}
    for l in range(L):
        for s in range(S):
            a = int(bounds[s])
            for h in range(Hkv):
                sel = np.flatnonzero(masks[l, s, h, :a])
                if sel.size == 0:
                    continue
                blk = layout.block_of[l, h // hpg, sel]
                assert (blk >= 0).all(), "a pinned sink token was selected for fetch"
                far_tok = layout.far_from[blk] <= s
                out["bytes_far"][l, s, h] = int(far_tok.sum()) * 2 * head_dim
                out["bytes_near"][l, s, h] = int((~far_tok).sum()) * 2 * head_dim
                ub = np.unique(blk)
                far_blk = layout.far_from[ub] <= s
                out["bursts_far"][l, s, h] = int(far_blk.sum())
                out["bursts_near"][l, s, h] = int((~far_blk).sum())
    return out
