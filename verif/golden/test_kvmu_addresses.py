"""The address-exact KV memory (golden/kvmu.py): placement, tiers, offload and fetch bursts."""
import numpy as np
import pytest

from golden.kvmu import BOUNDARY, KvGeometry, simulate_layout, split_burst

FAR = 1 << 32


def hand_layout():
    owner = np.array([[[0, 0, 1, 0, 1, 1]]])
    bounds = np.array([0, 3, 6, 6])
    return simulate_layout(owner, bounds, block_tokens=2, near_blocks=2, heads_per_group=1,
                           head_dim=4)


def test_hand_case_addresses():
    """Tokens of 8 bytes (K 4, V 4), blocks of 2, two near slots: the worked example."""
    mem = hand_layout().memory
    # step 1 (the fetch of step 1 sees the blocks before step 1's stores): all near
    assert [mem.address(1, 0, 0, t) for t in (0, 1, 2)] == [
        ("near", 0, 4), ("near", 8, 12), ("near", 16, 20)]
    # step 2: blocks 0 and 1 were offloaded during step 1's stores
    assert [mem.address(2, 0, 0, t) for t in range(6)] == [
        ("far", FAR, FAR + 4), ("far", FAR + 8, FAR + 12), ("far", FAR + 16, FAR + 20),
        ("near", 0, 4), ("far", FAR + 24, FAR + 28), ("near", 16, 20)]
    assert [(o.step, o.block) for o in mem.offloads] == [(1, 0), (1, 1)]
    o0, o1 = mem.offloads
    assert [(b.tier, b.addr, b.length, b.write) for b in o0.reads + o0.writes] == [
        ("near", 0, 16, False), ("far", FAR, 16, True)]
    assert [(b.tier, b.addr, b.length) for b in o1.reads + o1.writes] == [
        ("near", 16, 16), ("far", FAR + 16, 16)]
    bursts, order = mem.fetch(2, 0, 0, [5, 0, 1, 3])
    assert order == [0, 1, 3, 5]          # owner 0's blocks (0 then 2), then owner 1's (3)
    assert [(b.tier, b.addr, b.length) for b in bursts] == [
        ("far", FAR, 16), ("near", 0, 8), ("near", 16, 8)]


def test_split_burst_at_4k_and_burst_length():
    geo = KvGeometry(block_tokens=16, head_dim=64, heads_per_group=1, near_blocks=4,
                     bus_bytes=8, max_burst_beats=16)
    got = split_burst("near", BOUNDARY - 40, 300, geo)
    assert [(b.addr, b.length) for b in got] == [
        (BOUNDARY - 40, 40), (BOUNDARY, 128), (BOUNDARY + 128, 128), (BOUNDARY + 256, 4)]


@pytest.mark.parametrize("hpg, bt, near, beats", [(1, 4, 6, 256), (3, 16, 9, 8), (2, 8, 12, 4)])
def test_random_stream_is_placed_exactly(hpg, bt, near, beats):
    """Random owners over several steps and layers: every token has one address, a block's
    tokens are consecutive, near blocks never share a slot, offloads go oldest first, and
    every fetch reads exactly its tokens in bursts that respect AXI's limits."""
    rng = np.random.default_rng(hpg + bt)
    L, G, T, d = 2, 2, 240, 8
    owner = rng.integers(0, 7, (L, G, T))
    owner[:, :, :10] = -1                                   # sinks
    bounds = np.array([0, 10, 60, 130, 200, 240])
    lay = simulate_layout(owner, bounds, block_tokens=bt, near_blocks=near,
                          heads_per_group=hpg, head_dim=d, max_burst_beats=beats, bus_bytes=8)
    mem, geo = lay.memory, lay.memory.geo
    S = len(bounds) - 1
    assert mem.offloads and [o.block for o in mem.offloads] == sorted(o.block for o in mem.offloads)
    for s in range(1, S + 1):
        seen = {}
        for l in range(L):
            for h in range(G * hpg):
                for t in range(10, int(bounds[min(s, S)])):
                    tier, k, v = mem.address(s, l, h, t)
                    assert v == k + d and (k, tier) not in seen
                    seen[(k, tier)] = t
                    lo = geo.near_base if tier == "near" else geo.far_base
                    span = geo.near_blocks if tier == "near" else len(mem.offloads) * hpg
                    assert lo <= k < lo + span * geo.block_bytes
        for bid, blk in enumerate(mem.blocks):
            addrs = [mem.address(S, blk.layer, blk.group * hpg, t)[1] for t in blk.tokens]
            assert addrs == list(range(addrs[0], addrs[0] + len(addrs) * 2 * d, 2 * d))
    for s in range(1, S):
        for l in range(L):
            for h in range(G * hpg):
                past = np.arange(10, int(bounds[s]))
                sel = past[rng.random(len(past)) < 0.4]
                if not len(sel):
                    continue
                bursts, order = mem.fetch(s, l, h, sel)
                assert sorted(order) == sorted(int(t) for t in sel)
                assert sum(b.length for b in bursts) == len(sel) * 2 * d
                for b in bursts:
                    assert b.length <= beats * 8
                    assert b.addr // BOUNDARY == (b.addr + b.length - 1) // BOUNDARY
                # the bursts, in order, cover exactly the delivered tokens' slots
                cover = [a for b in bursts for a in range(b.addr, b.addr + b.length, 2 * d)]
                assert cover == [mem.address(s, l, h, t)[1] for t in order]


def test_stale_fetches_are_dropped_whole():
    """A fetch that starts after a newer command of its layer was accepted delivers nothing;
    one that starts current delivers everything; other layers are not affected."""
    from golden.kvmu import run_fetches
    mem = hand_layout().memory
    events = [("command", 0, 1), ("fetch", 2, 0, 0, [0, 3], 1),      # current
              ("command", 0, 2), ("fetch", 2, 0, 0, [1], 1),         # stale: v2 came first
              ("command", 1, 5),                                     # another layer
              ("fetch", 2, 0, 0, [4, 5], 2)]                         # current
    res, c = run_fetches(mem, events)
    assert [r.order for r in res] == [(0, 3), (), (4, 5)]
    assert res[1].stale_by == 2 and res[1].bursts == ()
    assert c == dict(fetches=3, stale_dropped=1, tokens_delivered=4, bursts=4)
    with pytest.raises(ValueError, match="layer 0: version 1 after 2 goes backwards"):
        run_fetches(mem, [("command", 0, 2), ("command", 0, 1)])
