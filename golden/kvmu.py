"""The KV memory of D12, address-exact: every token's block, tier and byte address, every
fetch's bursts and delivery order, every offload's bursts; the golden job's byte and burst
counts come out of the same model.

Blocks. KV lives in blocks of ``block_tokens`` token slots per KV head; a slot holds the
token's K row then its V row (``2 · head_dim`` int8 bytes), so a block is ``block_bytes =
block_tokens · 2 · head_dim`` bytes. Every block belongs to one owner: a cluster (ReSV's
cluster-contiguous layout) or the whole layer (a sequential layout, for methods without
clusters). The KV heads of a hash group share their clusters, so a *logical* block is
``heads_per_group`` physical blocks, one per head, allocated, filled and moved together. A new
token goes into its owner's open block if that block has room and is still in the near tier,
else into a newly allocated block. Sink tokens are pinned on chip and never stored or fetched.

Tiers and addresses. The near tier (device DRAM, from ``near_base``) holds ``near_blocks``
physical blocks as a ring of ``near_blocks // heads_per_group`` logical slots: the k-th
allocated logical block takes slot ``k mod slots``, head j of it the physical block
``slot · heads_per_group + j``. Allocating with every slot taken first moves the oldest near
block to the far tier (from ``far_base``, append-only: the f-th offloaded logical block at
``f · heads_per_group + j``): its filled slots are read from near and written to far, the
block is sealed (it takes no more tokens) and it is far for fetches from the next step on
(the block table changes once the write has completed). Tokens are stored in streaming order
(steps outer, layers, groups, tokens inner) after the step's selection, so a fetch at step s
sees every block as it stood before step s's stores.

Fetches. A fetch at step s for (layer, KV head) delivers a set of past tokens: blocks in the
order of their owner (a cluster id; the layer for a sequential layout) and then allocation,
tokens in slot order within a block, each maximal run of consecutive selected slots read as
one burst from the tier holding the block at step s. A burst is split where it would cross a
4 KB boundary or exceed ``max_burst_beats`` beats of ``bus_bytes`` (AXI4 INCR rules).

Prefetch versioning (D12). Every command carries a version, and versions of a layer never go
backwards. The KVMU keeps the newest version accepted per layer; a fetch is checked when it
starts: if a newer command for its layer has been accepted by then, the fetch is stale and
dropped whole (no burst issued, no token delivered, counted); a fetch that starts current
completes. :meth:`KvMemory.run_fetches` takes the events in the order the KVMU meets them
(a command's version accepted, a fetch started), so a testbench reproduces a stale case by
accepting a newer command while an earlier fetch still occupies the KVMU.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["NEVER", "Burst", "KvGeometry", "KvMemory", "KvmuReplay", "Layout", "FetchResult",
           "cluster_tokens", "simulate_layout", "fetch_cost", "split_burst", "run_fetches"]

NEVER = np.iinfo(np.int64).max
BOUNDARY = 4096                 # an AXI4 burst never crosses a 4 KB boundary


@dataclass(frozen=True)
class KvGeometry:
    """The KV memory's sizes and windows. Addresses are byte addresses; the windows'
    bases are multiples of ``block_bytes`` in every use here."""
    block_tokens: int
    head_dim: int
    heads_per_group: int
    near_blocks: int
    near_base: int = 0
    far_base: int = 1 << 32
    bus_bytes: int = 16
    max_burst_beats: int = 256
    max_blocks: int | None = None       # logical block-table entries (None: unbounded)
    far_blocks: int | None = None       # logical blocks the far tier holds (None: unbounded)
    # the HC table's records in memory (None: not modelled, as in the golden job)
    hc_base: int | None = None
    groups: int = 1                     # hash groups a layer
    clusters: int = 1024                # records per (layer, group)
    count_bits: int = 16

    @property
    def hc_head_bytes(self) -> int:
        """One KV head's sums in a record: ``head_dim`` int32, little-endian."""
        return 4 * self.head_dim

    @property
    def hc_record_bytes(self) -> int:
        return self.heads_per_group * self.hc_head_bytes

    def hc_addr(self, layer: int, group: int, cluster: int, head_in_group: int) -> int:
        """Byte address of a cluster's sums for one head of its group."""
        rec = (layer * self.groups + group) * self.clusters + cluster
        return self.hc_base + rec * self.hc_record_bytes + head_in_group * self.hc_head_bytes

    def __post_init__(self):
        for k in ("block_tokens", "head_dim", "heads_per_group", "bus_bytes",
                  "max_burst_beats"):
            if not (isinstance(getattr(self, k), int) and getattr(self, k) > 0):
                raise ValueError(f"{k} must be a positive integer, not {getattr(self, k)!r}")
        if self.near_blocks < self.heads_per_group:
            raise ValueError(f"near_blocks ({self.near_blocks}) must hold one logical block "
                             f"of heads_per_group ({self.heads_per_group}) blocks")
        if self.max_burst_beats > 256:
            raise ValueError(f"max_burst_beats must be at most 256 (AXI4 INCR), not "
                             f"{self.max_burst_beats}")

    @property
    def token_bytes(self) -> int:
        return 2 * self.head_dim

    @property
    def block_bytes(self) -> int:
        return self.block_tokens * self.token_bytes

    @property
    def near_slots(self) -> int:
        return self.near_blocks // self.heads_per_group


@dataclass(frozen=True)
class Burst:
    tier: str           # "near" or "far"
    addr: int           # byte address
    length: int         # bytes
    write: bool = False


def split_burst(tier: str, addr: int, length: int, geo: KvGeometry, write: bool = False):
    """``length`` bytes from ``addr`` as AXI4 INCR bursts: cut at 4 KB boundaries and at
    ``max_burst_beats · bus_bytes``."""
    out = []
    cap = geo.max_burst_beats * geo.bus_bytes
    while length > 0:
        n = min(length, cap, BOUNDARY - addr % BOUNDARY)
        out.append(Burst(tier, addr, n, write))
        addr, length = addr + n, length - n
    return out


@dataclass
class Block:
    """A logical block: ``heads_per_group`` physical blocks, one per KV head of the group."""
    id: int
    layer: int
    group: int
    owner: int
    near_slot: int
    tokens: list = field(default_factory=list)
    far_slot: int | None = None
    far_from: int = NEVER

    def addr(self, geo: KvGeometry, head_in_group: int, far: bool) -> int:
        base, slot = ((geo.far_base, self.far_slot) if far else (geo.near_base, self.near_slot))
        return physical_addr(geo, base, slot, head_in_group)


def physical_addr(geo: KvGeometry, base, slot, head_in_group):
    """The address of KV head ``head_in_group``'s physical block of the logical block in
    ``slot`` of the tier at ``base`` (scalars or arrays alike)."""
    return base + (slot * geo.heads_per_group + head_in_group) * geo.block_bytes


@dataclass(frozen=True)
class Offload:
    step: int           # the step during whose stores it happened (far from step + 1)
    block: int
    reads: tuple
    writes: tuple


class KvMemory:
    """The block tables, the tiers and the traffic, built by :meth:`store` in streaming order."""

    def __init__(self, geo: KvGeometry):
        self.geo = geo
        self.blocks: list[Block] = []
        self.open: dict = {}                  # (layer, group, owner) -> open block id
        self.near: list[int] = []             # near block ids, oldest first
        self.offloads: list[Offload] = []
        self.where: dict = {}                 # (layer, group, token) -> (block id, slot)
        self.traffic: list[Burst] = []        # every store and offload transfer, in order

    def store(self, step: int, layer: int, group: int, token: int, owner: int,
              fail: str | None = None):
        """Put a token of ``owner`` into its open block or a new one (offloading the oldest
        near block first when every near slot is taken); returns (block id, slot).

        The KVMU's failures (docs/kvmu.md): ``fail="offload"``, the offload's transfers are
        made but a read or write answers an error: the block stays near, nothing is
        allocated, the token is not stored; ``fail="write"``, the token's writes are made
        but one answers an error: any allocation stands, the token is not stored. A full
        block table (``max_blocks``) or a full far tier (``far_blocks``) refuses the token. Returns ``(block id, None)`` or
        ``(None, None)`` for a token not stored; every transfer is logged in
        :attr:`traffic`."""
        geo = self.geo
        key = (layer, group, owner)
        bid = self.open.get(key)
        if bid is None or len(self.blocks[bid].tokens) == geo.block_tokens or \
                self.blocks[bid].far_slot is not None:
            if geo.max_blocks is not None and len(self.blocks) == geo.max_blocks:
                return None, None
            if len(self.near) == geo.near_slots:
                if geo.far_blocks is not None and len(self.offloads) >= geo.far_blocks:
                    return None, None
                if not self._offload(step, self.near[0], commit=fail != "offload"):
                    return None, None
                self.near.pop(0)
            elif fail == "offload":
                raise ValueError("fail='offload' on a store that moves no block")
            bid = len(self.blocks)
            self.blocks.append(Block(bid, layer, group, owner, bid % geo.near_slots))
            self.near.append(bid)
            self.open[key] = bid
        elif fail == "offload":
            raise ValueError("fail='offload' on a store that moves no block")
        blk = self.blocks[bid]
        for j in range(geo.heads_per_group):
            addr = blk.addr(geo, j, far=False) + len(blk.tokens) * geo.token_bytes
            self.traffic += split_burst("near", addr, geo.token_bytes, geo, write=True)
        if fail == "write":
            return bid, None
        blk.tokens.append(token)
        self.where[(layer, group, token)] = (bid, len(blk.tokens) - 1)
        return bid, len(blk.tokens) - 1

    def _offload(self, step: int, bid: int, commit: bool = True) -> bool:
        """Move block ``bid`` to the far tier: per head, each burst read then written (the
        transfers interleave in that order); the block turns far only if ``commit``."""
        geo, blk = self.geo, self.blocks[bid]
        far_slot = len(self.offloads)
        n = len(blk.tokens) * geo.token_bytes
        reads, writes = [], []
        for j in range(geo.heads_per_group):
            r = split_burst("near", blk.addr(geo, j, far=False), n, geo)
            blk.far_slot = far_slot
            w = split_burst("far", blk.addr(geo, j, far=True), n, geo, write=True)
            blk.far_slot = None
            reads += r
            writes += w
            for a, b in zip(r, w):
                self.traffic += [a, b]
        if commit:
            blk.far_slot = far_slot
            blk.far_from = step + 1
            self.offloads.append(Offload(step, bid, tuple(reads), tuple(writes)))
        return commit

    def address(self, step: int, layer: int, head: int, token: int):
        """``(tier, K address, V address)`` of a stored token as a fetch at ``step`` sees it
        (``step=None``: the memory as it stands now)."""
        geo = self.geo
        bid, slot = self.where[(layer, head // geo.heads_per_group, token)]
        blk = self.blocks[bid]
        far = blk.far_slot is not None if step is None else blk.far_from <= step
        base = blk.addr(geo, head % geo.heads_per_group, far) + slot * geo.token_bytes
        return ("far" if far else "near"), base, base + geo.head_dim

    def fetch(self, step: int, layer: int, head: int, tokens):
        """The bursts of a fetch at ``step`` of past ``tokens`` for (layer, KV head) and the
        order the tokens are delivered in: ``(bursts, order)``. ``step=None``: the memory as
        it stands now (the KVMU's view, where a block is far once its move completed)."""
        geo = self.geo
        g, j = head // geo.heads_per_group, head % geo.heads_per_group
        by_block: dict = {}
        for t in tokens:
            if (layer, g, int(t)) not in self.where:
                raise ValueError(f"token {int(t)} of layer {layer} is not stored (a pinned "
                                 f"sink, or not yet written)")
            bid, slot = self.where[(layer, g, int(t))]
            by_block.setdefault(bid, []).append((slot, int(t)))
        bursts, order = [], []
        for bid in sorted(by_block, key=lambda b: (self.blocks[b].owner, b)):
            blk = self.blocks[bid]
            far = blk.far_slot is not None if step is None else blk.far_from <= step
            tier = "far" if far else "near"
            slots = sorted(by_block[bid])
            run = [slots[0]]
            for s_t in slots[1:] + [None]:
                if s_t is not None and s_t[0] == run[-1][0] + 1:
                    run.append(s_t)
                    continue
                addr = blk.addr(geo, j, far) + run[0][0] * geo.token_bytes
                bursts += split_burst(tier, addr, len(run) * geo.token_bytes, geo)
                order += [t for _, t in run]
                run = [s_t]
        return bursts, order


@dataclass(frozen=True)
class FetchResult:
    version: int
    bursts: tuple       # empty when dropped
    order: tuple        # tokens delivered, in order; empty when dropped
    stale_by: int | None = None     # the newer version that made it stale


def run_fetches(mem: "KvMemory", events) -> tuple[list, dict]:
    """Prefetch versioning over ``events`` in the order the KVMU meets them:
    ``("command", layer, version)`` (a command accepted) and ``("fetch", step, layer, head,
    tokens, version)`` (a fetch started). Returns the fetches' :class:`FetchResult` in order
    and the counters (``fetches``, ``stale_dropped``, ``tokens_delivered``, ``bursts``).
    A layer's version going backwards is an error."""
    newest: dict = {}
    results = []
    c = dict(fetches=0, stale_dropped=0, tokens_delivered=0, bursts=0)
    for ev in events:
        if ev[0] == "command":
            _, layer, v = ev
            if v < newest.get(layer, v):
                raise ValueError(f"layer {layer}: version {v} after {newest[layer]} goes "
                                 f"backwards")
            newest[layer] = v
            continue
        if ev[0] != "fetch":
            raise ValueError(f"unknown event {ev[0]!r}")
        _, step, layer, head, tokens, v = ev
        c["fetches"] += 1
        cur = newest.get(layer, v)
        if v < cur:
            c["stale_dropped"] += 1
            results.append(FetchResult(v, (), (), stale_by=cur))
            continue
        bursts, order = mem.fetch(step, layer, head, tokens)
        c["tokens_delivered"] += len(order)
        c["bursts"] += len(bursts)
        results.append(FetchResult(v, tuple(bursts), tuple(order)))
    return results, c


def cluster_tokens(mem: "KvMemory", layer: int, group: int, owner: int) -> list:
    """The tokens of cluster ``owner`` stored so far, in allocation then slot order."""
    return [t for b in mem.blocks if (b.layer, b.group, b.owner) == (layer, group, owner)
            for t in b.tokens]


@dataclass
class HcRecord:
    """A cluster's HC-table entry: per head of its group the integer sum of its members'
    keys (in memory, :meth:`KvGeometry.hc_addr`), and on chip its member count, the last step
    a member joined and how many joined in it, and whether a failed write lost the sums."""
    sums: np.ndarray
    count: int = 0
    cur_step: int = -1
    cur_n: int = 0
    poisoned: bool = False

    def past(self, step: int) -> int:
        """Members from steps before ``step``."""
        return self.count - (self.cur_n if self.cur_step == step else 0)


class KvmuReplay:
    """The KVMU's commands in the order it meets them (docs/kvmu.md), on the address-exact
    :class:`KvMemory`: every read and write burst in issue order, every token delivered and
    every fetch's closing marker. A fetch is the run of per-cluster commands from ``first``
    to ``last``; its version is checked at ``first`` against the newest one announced for
    its layer (:meth:`version`).

    The HC table (``geo.hc_base`` set): a store also adds the token's K rows to its cluster's
    sums (read, add, write of the record, every head's sums in one run of bursts; the first
    member writes without reading) and counts it;
    :meth:`candidates` lists a (layer, group)'s clusters with past members in id order, with
    each one's representative key ``clip(round_div(sum, count), -128, 127)`` over all its
    members so far and its count of past members (docs/numerics.md §5, §6), and keeps the
    list so a fetch can name clusters by candidate index."""

    def __init__(self, geo: KvGeometry):
        self.geo = geo
        self.mem = KvMemory(geo)
        self.hc: dict = {}                      # (layer, group, cluster) -> HcRecord
        self.n_clusters: dict = {}              # (layer, group) -> 1 + highest id stored
        self.cand: dict = {}                    # (layer, group) -> the last candidate list
        self.newest: dict = {}                  # layer -> newest version announced
        self.ar: list[Burst] = []               # read bursts in the order the KVMU issues them
        self.aw: list[Burst] = []               # write bursts, likewise
        self.delivered: list = []               # ("token", t) or ("end", stale, error)
        self.counters = dict(stored_tokens=0, offloaded_blocks=0, fetched_clusters=0,
                             delivered_tokens=0, stale_dropped=0, refused=0)
        self._drop = False

    def _log(self, since: int):
        for b in self.mem.traffic[since:]:
            (self.aw if b.write else self.ar).append(b)

    def version(self, layer: int, v: int) -> bool:
        """A command's version announced; False (ignored, an error) if it goes backwards."""
        if v < self.newest.get(layer, v):
            return False
        self.newest[layer] = v
        return True

    def record(self, layer: int, group: int, cluster: int) -> HcRecord:
        key = (layer, group, cluster)
        if key not in self.hc:
            geo = self.geo
            self.hc[key] = HcRecord(np.zeros((geo.heads_per_group, geo.head_dim), np.int64))
        return self.hc[key]

    def store(self, layer: int, group: int, owner: int, token: int,
              fail: str | None = None, keys=None, step: int = 0) -> str | None:
        """Store a token (and, with the HC table, add ``keys`` [heads_per_group, head_dim]
        to its cluster's sums). ``fail`` as :meth:`KvMemory.store`, or ``"hc"``: a transfer
        of the sums' update answers an error, the cluster is poisoned (its sums are lost:
        never a candidate again, its KV still fetchable) and the token is stored. Returns
        None, or why the token was refused or what failed (``"count"`` a full member count,
        ``"blocks"``, ``"far"``, ``"write"``, ``"offload"``, ``"hc"``)."""
        geo = self.geo
        rec = self.record(layer, group, owner) if geo.hc_base is not None else None
        if rec is not None and rec.count == (1 << geo.count_bits) - 1:
            self.counters["refused"] += 1
            return "count"
        n0, off0, b0 = len(self.mem.traffic), len(self.mem.offloads), len(self.mem.blocks)
        kv_fail = fail if fail in ("write", "offload") else None
        bid, slot = self.mem.store(0, layer, group, token, owner, fail=kv_fail)
        self.counters["offloaded_blocks"] += len(self.mem.offloads) - off0
        if slot is None:
            self._log(n0)
            self.counters["refused"] += 1
            if kv_fail:
                return kv_fail
            return "blocks" if len(self.mem.blocks) == b0 == geo.max_blocks else "far"
        self.counters["stored_tokens"] += 1
        k = (layer, group)
        self.n_clusters[k] = max(self.n_clusters.get(k, 0), owner + 1)
        if rec is not None and not rec.poisoned:
            # the record, every head's sums, in one run of bursts (read then write each)
            addr = geo.hc_addr(layer, group, owner, 0)
            w = split_burst("hc", addr, geo.hc_record_bytes, geo, write=True)
            if rec.count:
                r = split_burst("hc", addr, geo.hc_record_bytes, geo)
                self.mem.traffic += [x for pair in zip(r, w) for x in pair]
            else:
                self.mem.traffic += w
            if fail == "hc":
                rec.poisoned = True
            else:
                rec.sums += np.asarray(keys, np.int64).reshape(rec.sums.shape)
                rec.count += 1
                rec.cur_n = rec.cur_n + 1 if rec.cur_step == step else 1
                rec.cur_step = step
        self._log(n0)
        return "hc" if fail == "hc" and rec is not None and rec.poisoned else None

    def candidates(self, layer: int, group: int, head: int, step: int,
                   counts: bool = False) -> list:
        """The candidate list of (layer, group) at ``step`` for one head of the group:
        ``(cluster, past count, representative key)`` in cluster-id order; its reads are
        logged and the list kept for fetches by index. ``counts``: the list without the
        keys (no read; the key is ``None``)."""
        from .numerics import round_div
        geo, out = self.geo, []
        for c in range(self.n_clusters.get((layer, group), 0)):
            rec = self.hc.get((layer, group, c))
            if rec is None or rec.poisoned or rec.past(step) <= 0:
                continue
            if counts:
                out.append((c, rec.past(step), None))
                continue
            self.ar += split_burst("hc", geo.hc_addr(layer, group, c, head),
                                   geo.hc_head_bytes, geo)
            rep = np.clip(round_div(rec.sums[head], rec.count), -128, 127)
            out.append((c, rec.past(step), rep.astype(np.int8)))
        self.cand[(layer, group)] = [c for c, _, _ in out]
        return out

    def fetch(self, layer: int, group: int, head: int, owner: int, version: int,
              first: bool, last: bool, step: int = 0, past: bool = False):
        """One cluster of a fetch; returns the tokens it delivers (empty when dropped).
        ``past``: only its members from steps before ``step`` (its first ``past(step)`` in
        storage order; a poisoned cluster, whose count stopped, all of them)."""
        if first:
            self._drop = version < self.newest.get(layer, version)
            self.counters["stale_dropped"] += self._drop
        order = []
        if not self._drop:
            self.counters["fetched_clusters"] += 1
            tokens = cluster_tokens(self.mem, layer, group, owner)
            rec = self.hc.get((layer, group, owner))
            if past and rec is not None and not rec.poisoned:
                tokens = tokens[:rec.past(step)]
            if tokens:
                bursts, order = self.mem.fetch(None, layer, group * self.geo.heads_per_group
                                               + head, tokens)
                self.ar += bursts
            self.delivered += [("token", t) for t in order]
            self.counters["delivered_tokens"] += len(order)
        if last:
            self.delivered.append(("end", self._drop, False))
            self._drop = False
        return order

    def clear(self):
        """Forget every table (the KVMU's CLEAR); the traffic logs go on."""
        self.mem = KvMemory(self.geo)
        self.newest = {}
        self.hc, self.n_clusters, self.cand = {}, {}, {}
        self._drop = False


@dataclass
class Layout:
    block_of: np.ndarray      # int [L, G, T], -1 for sinks
    far_from: np.ndarray      # int [n_blocks]: first step at which the block is far (NEVER)
    heads_per_group: int
    n_blocks: int
    memory: KvMemory | None = None

    def offloaded(self) -> int:
        return int((self.far_from != NEVER).sum())


def simulate_layout(owner: np.ndarray, bounds: np.ndarray, *, block_tokens: int,
                    near_blocks: int, heads_per_group: int, head_dim: int,
                    **geometry) -> Layout:
    """Store a whole stream. ``owner [L, G, T]``: the owner id of each token, -1 if pinned;
    tokens in streaming order (steps outer, then layers, groups, tokens)."""
    L, G, T = owner.shape
    geo = KvGeometry(block_tokens=block_tokens, head_dim=head_dim,
                     heads_per_group=heads_per_group, near_blocks=near_blocks, **geometry)
    mem = KvMemory(geo)
    block_of = np.full((L, G, T), -1, np.int64)
    for s in range(len(bounds) - 1):
        a, b = int(bounds[s]), int(bounds[s + 1])
        for l in range(L):
            for g in range(G):
                for t in range(a, b):
                    o = int(owner[l, g, t])
                    if o >= 0:
                        block_of[l, g, t] = mem.store(s, l, g, t, o)[0]
    far_from = np.array([blk.far_from for blk in mem.blocks], np.int64)
    return Layout(block_of, far_from, heads_per_group, len(mem.blocks), mem)


def fetch_cost(layout: Layout, masks: np.ndarray, bounds: np.ndarray, head_dim: int):
    """Bytes and bursts of every fetch, by tier, from the address-exact model: arrays
    ``[L, S, Hkv]`` in a dict. The same bursts as :meth:`KvMemory.fetch` (runs of consecutive
    slots of a block, cut at 4 KB and at the longest burst), counted with array operations."""
    L, S, Hkv, T = masks.shape
    mem = layout.memory
    geo = mem.geo
    if geo.head_dim != head_dim:
        raise ValueError(f"the layout was built for head_dim {geo.head_dim}, not "
                         f"{head_dim}")
    out = {k: np.zeros((L, S, Hkv), np.int64)
           for k in ("bytes_near", "bytes_far", "bursts_near", "bursts_far")}
    hpg = layout.heads_per_group
    slot_of = np.full(layout.block_of.shape, -1, np.int64)
    for (l, g, t), (_, slot) in mem.where.items():
        slot_of[l, g, t] = slot
    near_slot = np.array([b.near_slot for b in mem.blocks] or [0], np.int64)
    far_slot = np.array([-1 if b.far_slot is None else b.far_slot for b in mem.blocks] or [0],
                        np.int64)
    tb, cap = geo.token_bytes, geo.max_burst_beats * geo.bus_bytes
    for l in range(L):
        for s in range(S):
            a = int(bounds[s])
            for h in range(Hkv):
                sel = np.flatnonzero(masks[l, s, h, :a])
                if sel.size == 0:
                    continue
                g, j = divmod(h, hpg)
                bid = layout.block_of[l, g, sel]
                if (bid < 0).any():
                    raise AssertionError("a pinned sink token was selected for fetch")
                slot = slot_of[l, g, sel]
                o = np.lexsort((slot, bid))
                bid, slot = bid[o], slot[o]
                start = np.flatnonzero(np.r_[True, (bid[1:] != bid[:-1]) |
                                             (slot[1:] != slot[:-1] + 1)])
                length = np.diff(np.r_[start, len(bid)]) * tb
                rb = bid[start]
                far = layout.far_from[rb] <= s
                base = physical_addr(geo, np.where(far, geo.far_base, geo.near_base),
                                     np.where(far, far_slot[rb], near_slot[rb]), j)
                addr = base + slot[start] * tb
                inside = length <= BOUNDARY - addr % BOUNDARY     # no 4 KB boundary crossed
                n = -(-length // cap)
                for k in np.flatnonzero(~inside):
                    n[k] = len(split_burst("", int(addr[k]), int(length[k]), geo))
                for tier, m in (("near", ~far), ("far", far)):
                    out[f"bytes_{tier}"][l, s, h] = length[m].sum()
                    out[f"bursts_{tier}"][l, s, h] = n[m].sum()
    return out
