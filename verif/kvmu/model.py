"""KVMU stimulus and expectations, shared by both tiers: scenarios as lists of operations,
their command and data beats, and everything the golden replay (``golden.kvmu.KvmuReplay``)
says the KVMU must do with them: the read and write bursts in issue order, every ``o_kv`` beat,
the counters, the first error and where every stored token's rows must be in memory.

An operation is one of
    ``("version", layer, v)``: a command's version announced on ``i_version``;
    ``("store", layer, group, owner, token)``, optionally with ``fail=`` ``"write"``,
    ``"offload_read"`` or ``"offload_write"`` (and ``resp=`` 2 SLVERR or 3 DECERR): the
    testbench arms a one-shot fault at the address the replay says the failing transfer uses;
    ``("fetch", layer, group, head, owners, version)``, optionally ``fail="read"`` (``beat=``
    the fetch's failing beat) or ``newer_during=v`` (version v announced once the first
    command was checked: the fetch started current and completes): a fetch of the clusters
    ``owners`` (one command each, ``first``/``last`` framing);
    ``("bad", fields)``: a command out of range (refused, error 1, or ``code=`` 2 for one
    refused for its registers);
    ``("clear",)``.
Testbench contract (both tiers): operations are applied in order; a ``version`` waits until
every earlier command was accepted and 3 more cycles passed (a fetch's check comes 2 cycles
after its first command is accepted); a failing operation waits until the KVMU is idle, arms
its fault, then sends its command.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from golden.kvmu import KvGeometry, KvmuReplay, cluster_tokens

__all__ = ["geometry", "registers", "random_rows", "trace_rows", "synthetic_ops", "trace_ops",
           "Expected", "expect", "cmd_beats", "data_beats", "refused", "STORE", "FETCH", "CLEAR"]

STORE, FETCH, CLEAR = 0, 1, 2
RESP = {"SLVERR": 2, "DECERR": 3}


def registers(cfg, *, near_slots=None, max_burst=None, near_base=0, far_base=None) -> dict:
    """The KVMU's run-time registers: the Config's, with a smaller near ring (to spill) or
    burst if given."""
    r = dict(cfg.block_registers("kvmu"))
    if near_slots is not None:
        r["near_slots"] = near_slots
    if max_burst is not None:
        r["max_burst"] = max_burst
    r["near_base"] = near_base
    if far_base is not None:
        r["far_base"] = far_base
    return r


def geometry(cfg, regs: dict) -> KvGeometry:
    hpg = cfg.heads_per_group
    return KvGeometry(block_tokens=cfg.block_tokens, head_dim=cfg.head_dim,
                      heads_per_group=hpg, near_blocks=regs["near_slots"] * hpg,
                      near_base=regs["near_base"], far_base=regs["far_base"],
                      bus_bytes=cfg.kvmu_bus_bytes, max_burst_beats=regs["max_burst"],
                      max_blocks=cfg.kvmu_blocks)


def random_rows(seed: int, token_bytes: int):
    """``rows(layer, head, token) -> bytes``: a token's K then V row, seeded per token."""
    def rows(layer, head, token):
        rng = np.random.default_rng((seed, layer, head, token))
        return rng.integers(0, 256, token_bytes, dtype=np.uint8).tobytes()
    return rows


def trace_rows(qt):
    """``rows(layer, head, token) -> bytes``: the real trace's int8 K and V rows."""
    def rows(layer, head, token):
        return (qt.k[layer, head, token].astype(np.int8).tobytes() +
                qt.v[layer, head, token].astype(np.int8).tobytes())
    return rows


def synthetic_ops(cfg, rng, *, steps: int, tokens: int, new_cluster: float = 0.3,
                  select: float = 0.5, max_owner: int | None = None):
    """A stream as the core issues it: per step and layer, the versions announced, a fetch
    per KV head of a random subset of the clusters holding stored tokens (ascending ids),
    then the step's tokens stored, each joining a random existing cluster or opening one."""
    L, G, hpg = cfg.n_layers, cfg.hash_groups, cfg.heads_per_group
    limit = max_owner if max_owner is not None else cfg.kvmu_clusters
    ops, n_open = [], np.zeros((L, G), int)
    version = 0
    for s in range(steps):
        for l in range(L):
            version += 1
            ops.append(("version", l, version))
            for g in range(G):
                have = list(range(n_open[l, g]))
                for j in range(hpg):
                    sel = sorted(o for o in have if rng.random() < select)
                    if sel:
                        ops.append(("fetch", l, g, j, sel, version))
            for t in range(s * tokens, (s + 1) * tokens):
                for g in range(G):
                    if n_open[l, g] == 0 or (rng.random() < new_cluster and
                                             n_open[l, g] < limit):
                        owner = n_open[l, g]
                        n_open[l, g] += 1
                    else:
                        owner = int(rng.integers(0, n_open[l, g]))
                    ops.append(("store", l, g, owner, t))
    return ops


def trace_ops(preset: str, steps: int | None = None):
    """The bundled real trace under a preset, as the core will drive the KVMU: per step and
    layer, the version, one fetch per KV head of the clusters the golden ReSV run selected
    (ascending), then the step's non-sink tokens stored into their golden clusters. Returns
    ``(ops, cfg, rows, selected)``: the config of the trace, its K/V rows and, for a
    cross-check, per fetch the set of past tokens the golden run's mask selected (the KVMU
    must deliver exactly these: every stored token of the selected clusters)."""
    from golden.resv import run_resv
    from verif.lib.traces import bundled
    from vrex.config import Config
    tr, qt = bundled()
    cfg = Config.from_preset(preset, **tr.geometry())
    run = run_resv(tr, qt, cfg, [cfg.th_r])
    masks = run.masks[cfg.th_r]
    bounds = tr.step_bounds()
    L, G, hpg = cfg.n_layers, cfg.hash_groups, cfg.heads_per_group
    S = tr.n_steps if steps is None else min(steps, tr.n_steps)
    ops, version, selected = [], 0, []
    for s in range(S):
        a, b = int(bounds[s]), int(bounds[s + 1])
        for l in range(L):
            version += 1
            ops.append(("version", l, version))
            for h in range(cfg.n_kv_heads):
                g, j = h // hpg, h % hpg
                sel = np.flatnonzero(masks[l, s, h, :a])
                owners = sorted({int(run.cluster_of[l, g, t]) for t in sel})
                if owners:
                    ops.append(("fetch", l, g, j, owners, version))
                    selected.append({int(t) for t in sel})
            for t in range(a, b):
                for g in range(G):
                    o = int(run.cluster_of[l, g, t])
                    if o >= 0:
                        ops.append(("store", l, g, o, t))
    return ops, cfg, trace_rows(qt), selected


@dataclass
class Expected:
    ar: list                    # (addr, bytes) of every read burst, in issue order
    aw: list                    # (addr, bytes) of every write burst, in issue order
    kv: list                    # every o_kv beat (dicts)
    counters: dict
    first_error: tuple | None   # (code, resp, addr) of the first error
    faults: dict                # op index -> (channel "read"/"write", addr, resp)
    stored: dict                # (layer, head, token) -> (addr, bytes) in memory at the end
    fetched: list = field(default_factory=list)   # per fetch op: tokens delivered (a set)


def _bursts_bytes(bursts, tier, write):
    return sum(b.length for b in bursts if b.tier == tier and b.write == write)


def expect(cfg, regs: dict, ops, rows) -> Expected:
    """Replay ``ops`` on the golden KVMU model."""
    try:
        geo = geometry(cfg, regs)
    except ValueError:          # registers out of range: every command must be refused
        assert all(op[0] not in ("store", "fetch") for op in ops), \
            "registers out of range: the operations must be refused ones (model.refused)"
        geo = geometry(cfg, {**regs, "near_slots": 1, "max_burst": 1})
    rp = KvmuReplay(geo)
    hpg, bus = cfg.heads_per_group, cfg.kvmu_bus_bytes
    bpt = 2 * cfg.head_dim // bus
    kv, faults, fetched, first_error = [], {}, [], None

    def error(code, resp=0, addr=0):
        nonlocal first_error
        if first_error is None:
            first_error = (code, resp, addr)

    for k, op in enumerate(ops):
        kind, opt = op[0], (op[-1] if isinstance(op[-1], dict) else {})
        if kind == "version":
            if not rp.version(op[1], op[2]):
                error(8)
        elif kind == "clear":
            rp.clear()
        elif kind == "bad":
            rp.counters["refused"] += 1
            error(opt.get("code", 1))
            if op[1].get("op") == FETCH and op[1].get("last"):
                kv.append(dict(data=0, token=0, first=0, end=1, stale=0, error=1))
        elif kind == "store":
            _, l, g, owner, t = op[:5]
            fail = opt.get("fail")
            resp = RESP[opt.get("resp", "SLVERR")]
            n_ar, n_aw = len(rp.ar), len(rp.aw)
            gfail = {"write": "write", "offload_read": "offload",
                     "offload_write": "offload"}.get(fail)
            before = len(rp.mem.blocks)
            ok = rp.store(l, g, owner, t, fail=gfail)
            if fail == "write":
                faults[k] = ("write", rp.aw[n_aw].addr, resp)
                error(5, resp, rp.aw[n_aw].addr)
            elif fail == "offload_read":
                faults[k] = ("read", rp.ar[n_ar].addr, resp)
                error(6, resp, rp.ar[n_ar].addr)
            elif fail == "offload_write":
                faults[k] = ("write", rp.aw[n_aw].addr, resp)
                error(7, resp, rp.aw[n_aw].addr)
            elif not ok:
                assert len(rp.mem.blocks) == before == geo.max_blocks
                error(3)
        elif kind == "fetch":
            _, l, g, j, owners, version = op[:6]
            fail = opt.get("fail")
            n_ar, n_kv = len(rp.ar), len(kv)
            toks = []
            for i, o in enumerate(owners):
                got = rp.fetch(l, g, j, o, version, i == 0, i == len(owners) - 1)
                toks += got
                h = g * hpg + j
                for t in got:
                    data = rows(l, h, t)
                    for b in range(bpt):
                        kv.append(dict(data=int.from_bytes(data[b * bus:(b + 1) * bus],
                                                           "little"),
                                       token=t, first=int(b == 0), end=0, stale=0, error=0))
            end = rp.delivered[-1]
            if fail == "read":
                resp = RESP[opt.get("resp", "SLVERR")]
                at = opt.get("beat", 1)           # the failing beat of the fetch
                addrs = [b.addr + i * bus for b in rp.ar[n_ar:]
                         for i in range(b.length // bus)]
                faults[k] = ("read", addrs[at], resp)
                error(4, resp, addrs[at])
                del kv[n_kv + at:]
                rp.counters["delivered_tokens"] -= len(toks) - (at + bpt - 1) // bpt
                kv.append(dict(data=0, token=0, first=0, end=1, stale=0, error=1))
            else:
                kv.append(dict(data=0, token=0, first=0, end=1, stale=int(end[1]), error=0))
            fetched.append(set(toks))
            if opt.get("newer_during") is not None:
                if not rp.version(l, opt["newer_during"]):
                    error(8)
        else:
            raise ValueError(f"unknown operation {kind!r}")
    c = dict(rp.counters)
    ar = [(b.addr, b.length) for b in rp.ar]
    aw = [(b.addr, b.length) for b in rp.aw]
    for tier in ("near", "far"):
        for d, lst in (("read", rp.ar), ("write", rp.aw)):
            n = _bursts_bytes(lst, tier, d == "write")
            c[f"{tier}_{d}_bytes"], c[f"{tier}_{d}_beats"] = n, n // bus
    c["read_bursts"], c["write_bursts"] = len(ar), len(aw)
    stored = {}
    for (l, g, t), _ in rp.mem.where.items():
        for j in range(hpg):
            _, ka, _ = rp.mem.address(None, l, g * hpg + j, t)
            stored[(l, g * hpg + j, t)] = (ka, rows(l, g * hpg + j, t))
    return Expected(ar, aw, kv, c, first_error, faults, stored, fetched)


def cmd_beats(op) -> list:
    """The ``i_cmd`` beats of an operation."""
    kind = op[0]
    if kind == "store":
        _, l, g, owner, t = op[:5]
        return [dict(op=STORE, layer=l, group=g, head=0, owner=owner, token=t)]
    if kind == "fetch":
        _, l, g, j, owners, version = op[:6]
        return [dict(op=FETCH, layer=l, group=g, head=j, owner=o, version=version,
                     first=int(i == 0), last=int(i == len(owners) - 1))
                for i, o in enumerate(owners)]
    if kind == "clear":
        return [dict(op=CLEAR)]
    if kind == "bad":
        return [op[1]]
    return []


def refused(ops) -> list:
    """``ops`` as the KVMU takes them when its registers are out of range: every command
    refused with error 2 (versions still announced)."""
    out = []
    for op in ops:
        if op[0] in ("store", "fetch"):
            out += [("bad", beat, dict(code=2)) for beat in cmd_beats(op)]
        else:
            out.append(op)
    return out


def data_beats(cfg, op, rows) -> list:
    """The ``i_data`` beats of a store (each head of the group: its K row then V row), and
    of a refused store (consumed and dropped)."""
    bus, hpg = cfg.kvmu_bus_bytes, cfg.heads_per_group
    if op[0] == "store":
        _, l, g, _, t = op[:5]
        out = []
        for j in range(hpg):
            data = rows(l, g * hpg + j, t)
            out += [int.from_bytes(data[i:i + bus], "little") for i in range(0, len(data), bus)]
        return out
    if op[0] == "bad" and op[1].get("op") == STORE:
        return [0] * (hpg * 2 * cfg.head_dim // bus)
    return []
