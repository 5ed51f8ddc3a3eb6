"""KVMU stimulus and expectations, shared by both tiers: scenarios as lists of operations,
their command and data beats, and everything the golden replay (``golden.kvmu.KvmuReplay``)
says the KVMU must do with them: the read and write bursts in issue order, every ``o_kv`` beat,
the counters, the first error and where every stored token's rows must be in memory.

An operation is one of
    ``("version", layer, v)``: a command's version announced on ``i_version``;
    ``("store", layer, group, owner, token, step)``, optionally with ``fail=`` ``"write"``,
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

STORE, FETCH, CLEAR, CAND = 0, 1, 2, 3
RESP = {"SLVERR": 2, "DECERR": 3}


def registers(cfg, *, near_slots=None, max_burst=None, near_base=0, far_base=None,
              far_slots=None, hc_base=None) -> dict:
    """The KVMU's run-time registers: the Config's, with a smaller near ring (to spill), far
    tier or burst if given; a far tier moved elsewhere takes the HC table with it (at twice
    its base)."""
    r = dict(cfg.block_registers("kvmu"))
    if far_base is not None:
        r["hc_base"] = 2 * far_base
    if hc_base is not None:
        r["hc_base"] = hc_base
    if far_slots is not None:
        r["far_slots"] = far_slots
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
                      max_blocks=cfg.kvmu_blocks, far_blocks=regs["far_slots"],
                      hc_base=regs["hc_base"], groups=cfg.hash_groups,
                      clusters=cfg.kvmu_clusters, count_bits=cfg.count_bits)


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
                  select: float = 0.5, max_owner: int | None = None, cand: bool = True,
                  by_index: bool = False, stores_first: bool = False):
    """A stream as the core issues it: per step and layer, the versions announced, per KV
    head the candidate list (``cand``) and a fetch of a random subset of the clusters
    holding stored tokens (ascending; named by candidate index with ``by_index``), then the
    step's tokens stored, each joining a random existing cluster or opening one.
    ``stores_first``: the cluster-first order, the step's tokens stored first, then the lists
    and fetches of the members from earlier steps (``past``)."""
    L, G, hpg = cfg.n_layers, cfg.hash_groups, cfg.heads_per_group
    limit = max_owner if max_owner is not None else cfg.kvmu_clusters
    ops, n_open = [], np.zeros((L, G), int)
    version = 0

    def stores(s, l):
        for t in range(s * tokens, (s + 1) * tokens):
            for g in range(G):
                if n_open[l, g] == 0 or (rng.random() < new_cluster and
                                         n_open[l, g] < limit):
                    owner = n_open[l, g]
                    n_open[l, g] += 1
                else:
                    owner = int(rng.integers(0, n_open[l, g]))
                ops.append(("store", l, g, owner, t, s))

    fetch_opt = dict(by_index=by_index, **(dict(past=True) if stores_first else {}))
    for s in range(steps):
        for l in range(L):
            version += 1
            ops.append(("version", l, version))
            if stores_first:
                stores(s, l)
            for g in range(G):
                have = list(range(n_open[l, g]))
                for j in range(hpg):
                    if cand or by_index:
                        if rng.random() < 0.3:          # the core's first pass: counts only
                            ops.append(("cand", l, g, j, s, dict(counts=True)))
                        ops.append(("cand", l, g, j, s))
                    sel = sorted(o for o in have if rng.random() < select)
                    if sel:
                        ops.append(("fetch", l, g, j, sel, version, dict(fetch_opt, step=s)))
            if not stores_first:
                stores(s, l)
    return ops


def trace_ops(preset: str, steps: int | None = None):
    """The bundled real trace under a preset, as the core will drive the KVMU: per step and
    layer, the version; per KV head the candidate list and one fetch of the members from
    earlier steps (``past``) of the clusters the golden ReSV run selected, named by candidate
    index (the WTU's output); the step's non-sink tokens stored into their golden clusters
    after the heads, or before them in the cluster-first order (the Config's, as the golden
    run scores). Returns ``(ops, cfg, rows, selected, scored)``: the config of the trace,
    its K/V rows and, for cross-checks, per fetch the set of past tokens the golden run's
    mask selected (the KVMU must deliver exactly these: every stored token of the selected
    clusters) and per candidate list the golden run's own candidates (cluster ids, counts,
    representative keys) as it scored them."""
    from golden.resv import run_resv
    from verif.lib.traces import bundled
    from vrex.config import Config
    tr, qt = bundled()
    cfg = Config.from_preset(preset, **tr.geometry())
    recorded = []
    run = run_resv(tr, qt, cfg, [cfg.th_r], record_rows=recorded)
    by_key = {(r["layer"], r["step"], r["head"]): r for r in recorded}
    masks = run.masks[cfg.th_r]
    bounds = tr.step_bounds()
    L, G, hpg = cfg.n_layers, cfg.hash_groups, cfg.heads_per_group
    S = tr.n_steps if steps is None else min(steps, tr.n_steps)
    ops, version, selected, scored = [], 0, [], []
    first = cfg.order == "cluster_first"

    def stores(s, l, a, b):
        for t in range(a, b):
            for g in range(G):
                o = int(run.cluster_of[l, g, t])
                if o >= 0:
                    ops.append(("store", l, g, o, t, s))

    for s in range(S):
        a, b = int(bounds[s]), int(bounds[s + 1])
        for l in range(L):
            version += 1
            ops.append(("version", l, version))
            if first:
                stores(s, l, a, b)
            for h in range(cfg.n_kv_heads):
                g, j = h // hpg, h % hpg
                rec = by_key.get((l, s, h))
                ops.append(("cand", l, g, j, s))
                scored.append(None if rec is None else (
                    [int(c) for c in rec["cluster"]], [int(n) for n in rec["count"]],
                    np.asarray(rec["rep"], np.int8)))
                sel = np.flatnonzero(masks[l, s, h, :a])
                owners = sorted({int(run.cluster_of[l, g, t]) for t in sel})
                if owners:
                    index = [int(np.searchsorted(rec["cluster"], o)) for o in owners]
                    ops.append(("fetch", l, g, j, index, version,
                                dict(by_index=True, past=True, step=s)))
                    selected.append({int(t) for t in sel})
            if not first:
                stores(s, l, a, b)
    return ops, cfg, trace_rows(qt), selected, scored


@dataclass
class Expected:
    ar: list                    # (addr, bytes) of every read burst, in issue order
    aw: list                    # (addr, bytes) of every write burst, in issue order
    kv: list                    # every o_kv beat (dicts)
    counters: dict
    first_error: tuple | None   # (code, resp, addr) of the first error
    faults: dict                # op index -> (channel "read"/"write", addr, resp)
    stored: dict                # (layer, head, token) -> (addr, bytes) in memory at the end;
                                # ("hc", layer, group, cluster, head) -> a record's sums
    fetched: list = field(default_factory=list)   # per fetch op: tokens delivered (a set)
    cand: list = field(default_factory=list)      # every o_cand beat (dicts)
    lists: list = field(default_factory=list)     # per cand op: [(cluster, past, rep)]


def _bursts_bytes(bursts, tier, write):
    return sum(b.length for b in bursts if b.tier == tier and b.write == write)


def _keys(cfg, rows, l, g, t):
    """The K rows of a token's group, int8 [heads_per_group, head_dim]."""
    hpg, d = cfg.heads_per_group, cfg.head_dim
    return np.stack([np.frombuffer(rows(l, g * hpg + j, t)[:d], np.int8)
                     for j in range(hpg)])


class Replay:
    """The golden replay of a scenario, op by op (:func:`expect` runs it whole; a test can
    step it to find the op it wants to make fail)."""

    def __init__(self, cfg, regs: dict, rows):
        try:
            geo = geometry(cfg, regs)
        except ValueError:          # registers out of range: every command must be refused
            geo = geometry(cfg, {**regs, "near_slots": 1, "max_burst": 1})
            self.refusing = True
        else:
            self.refusing = False
        self.cfg, self.geo, self.rows = cfg, geo, rows
        self.rp = KvmuReplay(geo)
        self.kv, self.cand, self.faults, self.fetched = [], [], {}, []
        self.lists = []                         # per cand op: [(cluster, past, rep)]
        self.first_error, self.fetch_bursts = None, 0

    def error(self, code, resp=0, addr=0):
        if self.first_error is None:
            self.first_error = (code, resp, addr)

    def apply(self, k, op):
        rp, cfg, rows = self.rp, self.cfg, self.rows
        hpg, bus = cfg.heads_per_group, cfg.kvmu_bus_bytes
        bpt = 2 * cfg.head_dim // bus
        kind, opt = op[0], (op[-1] if isinstance(op[-1], dict) else {})
        assert not (self.refusing and kind in ("store", "fetch", "cand")), \
            "registers out of range: the operations must be refused ones (model.refused)"
        if kind == "version":
            if not rp.version(op[1], op[2]):
                self.error(8)
        elif kind == "clear":
            rp.clear()
        elif kind == "bad":
            rp.counters["refused"] += 1
            self.error(opt.get("code", 1))
            if op[1].get("op") == FETCH and op[1].get("last"):
                self.kv.append(dict(data=0, token=0, first=0, end=1, stale=0, error=1))
            if op[1].get("op") == CAND:
                self.cand.append(dict(data=0, cluster=0, count=0, first=0, end=1, error=1))
        elif kind == "store":
            self._store(k, op, opt)
        elif kind == "fetch":
            self._fetch(k, op, opt, bus, bpt, hpg)
        elif kind == "cand":
            _, l, g, j, step = op[:5]
            n_ar = len(rp.ar)
            got = rp.candidates(l, g, j, step, counts=bool(opt.get("counts")))
            self.lists.append(got)
            d = cfg.head_dim
            failed = opt.get("fail") == "cand_read"
            if failed:
                # one beat of the sums answers an error: its values are taken as zero, the
                # list goes on and its end beat says error (code 12)
                resp = RESP[opt.get("resp", "SLVERR")]
                at = opt.get("beat", 1)
                addrs = [b.addr + i * bus for b in rp.ar[n_ar:] for i in range(b.length // bus)]
                self.faults[k] = ("read", addrs[at], resp)
                self.error(12, resp, addrs[at])
                hbeats, lanes = 4 * d // bus, bus // 4
                c, past, rep = got[at // hbeats]
                rep = rep.copy()
                rep[(at % hbeats) * lanes:(at % hbeats + 1) * lanes] = 0
                got = [*got[:at // hbeats], (c, past, rep), *got[at // hbeats + 1:]]
            for c, past, rep in got:
                if opt.get("counts"):           # counts only: one beat a candidate
                    self.cand.append(dict(data=0, cluster=c, count=past, first=1, end=0,
                                          error=0))
                    continue
                raw = rep.tobytes()
                for w in range(0, d, bus):
                    self.cand.append(dict(data=int.from_bytes(raw[w:w + bus], "little"),
                                          cluster=c, count=past, first=int(w == 0), end=0,
                                          error=0))
            self.cand.append(dict(data=0, cluster=0, count=len(got), first=0, end=1,
                                  error=int(failed)))
            rp.counters["candidates"] = rp.counters.get("candidates", 0) + len(got)
        else:
            raise ValueError(f"unknown operation {kind!r}")

    def _store(self, k, op, opt):
        rp = self.rp
        _, l, g, owner, t, step = op[:6]
        fail = opt.get("fail")
        resp = RESP[opt.get("resp", "SLVERR")]
        n_ar, n_aw = len(rp.ar), len(rp.aw)
        gfail = {"write": "write", "offload_read": "offload", "offload_write": "offload",
                 "hc_read": "hc", "hc_write": "hc"}.get(fail)
        if fail == "hc_read":
            rec = rp.hc.get((l, g, owner))
            assert rec is not None and rec.count > 0, "hc_read needs a cluster with members"
        why = rp.store(l, g, owner, t, fail=gfail, keys=_keys(self.cfg, self.rows, l, g, t),
                       step=step)
        hc_ar = [b for b in rp.ar[n_ar:] if b.tier == "hc"]
        hc_aw = [b for b in rp.aw[n_aw:] if b.tier == "hc"]
        where = {"write": ("write", rp.aw[n_aw] if len(rp.aw) > n_aw else None, 5),
                 "offload_read": ("read", rp.ar[n_ar] if len(rp.ar) > n_ar else None, 6),
                 "offload_write": ("write", rp.aw[n_aw] if len(rp.aw) > n_aw else None, 7),
                 "hc_read": ("read", hc_ar[0] if hc_ar else None, 10),
                 "hc_write": ("write", hc_aw[0] if hc_aw else None, 10)}
        if fail is not None:
            ch, burst, code = where[fail]
            assert burst is not None, f"store {k} makes no transfer to fail ({fail})"
            self.faults[k] = (ch, burst.addr, resp)
            self.error(code, resp, burst.addr)
        elif why is not None:
            self.error({"blocks": 3, "far": 9, "count": 11}[why])

    def _fetch(self, k, op, opt, bus, bpt, hpg):
        rp, rows = self.rp, self.rows
        _, l, g, j, owners, version = op[:6]
        fail = opt.get("fail")
        n_ar, n_kv = len(rp.ar), len(self.kv)
        toks, refused, end = [], False, None
        cand = rp.cand.get((l, g), [])
        for i, o in enumerate(owners):
            first, last = i == 0, i == len(owners) - 1
            if opt.get("by_index") and o >= len(cand):
                # an index past the last candidate list: this command is refused (error
                # 1) and the fetch closes with an error; the others go on as usual
                rp.counters["refused"] += 1
                self.error(1)
                refused = True
                if first:
                    rp._drop = False
                if last:
                    end = ("end", rp._drop, True)
                    rp._drop = False
                continue
            got = rp.fetch(l, g, j, cand[o] if opt.get("by_index") else o, version, first,
                           last, step=opt.get("step", 0), past=bool(opt.get("past")))
            toks += got
            h = g * hpg + j
            for t in got:
                data = rows(l, h, t)
                for b in range(bpt):
                    self.kv.append(dict(data=int.from_bytes(data[b * bus:(b + 1) * bus],
                                                            "little"),
                                        token=t, first=int(b == 0), end=0, stale=0, error=0))
        if end is None:
            end = rp.delivered[-1]
        if fail == "read":
            resp = RESP[opt.get("resp", "SLVERR")]
            at = opt.get("beat", 1)           # the failing beat of the fetch
            addrs = [b.addr + i * bus for b in rp.ar[n_ar:] for i in range(b.length // bus)]
            self.faults[k] = ("read", addrs[at], resp)
            self.error(4, resp, addrs[at])
            del self.kv[n_kv + at:]
            rp.counters["delivered_tokens"] -= len(toks) - (at + bpt - 1) // bpt
            self.kv.append(dict(data=0, token=0, first=0, end=1, stale=0, error=1))
        else:
            self.kv.append(dict(data=0, token=0, first=0, end=1, stale=int(end[1]),
                                error=int(refused)))
        self.fetched.append(set(toks))
        self.fetch_bursts += len(rp.ar) - n_ar
        if opt.get("newer_during") is not None:
            if not rp.version(l, opt["newer_during"]):
                self.error(8)

    def result(self) -> "Expected":
        rp, cfg, rows, geo = self.rp, self.cfg, self.rows, self.geo
        hpg, bus = cfg.heads_per_group, cfg.kvmu_bus_bytes
        c = dict(rp.counters)
        c.setdefault("candidates", 0)
        ar = [(b.addr, b.length) for b in rp.ar]
        aw = [(b.addr, b.length) for b in rp.aw]
        for tier in ("near", "far"):
            for d, lst in (("read", rp.ar), ("write", rp.aw)):
                n = _bursts_bytes(lst, tier, d == "write")
                c[f"{tier}_{d}_bytes"], c[f"{tier}_{d}_beats"] = n, n // bus
        c["hc_read_beats"] = _bursts_bytes(rp.ar, "hc", False) // bus
        c["hc_write_beats"] = _bursts_bytes(rp.aw, "hc", True) // bus
        c["read_bursts"], c["write_bursts"] = len(ar), len(aw)
        c["fetch_bursts"] = self.fetch_bursts   # the read bursts of fetches
        stored = {}
        for (l, g, t), _ in rp.mem.where.items():
            for j in range(hpg):
                _, ka, _ = rp.mem.address(None, l, g * hpg + j, t)
                stored[(l, g * hpg + j, t)] = (ka, rows(l, g * hpg + j, t))
        for (l, g, cl), rec in rp.hc.items():
            if rec.count and not rec.poisoned:
                for j in range(hpg):
                    stored[("hc", l, g, cl, j)] = (geo.hc_addr(l, g, cl, j),
                                                   rec.sums[j].astype("<i4").tobytes())
        return Expected(ar, aw, self.kv, c, self.first_error, self.faults, stored,
                        self.fetched, self.cand, self.lists)


def expect(cfg, regs: dict, ops, rows) -> Expected:
    """Replay ``ops`` on the golden KVMU model."""
    r = Replay(cfg, regs, rows)
    for k, op in enumerate(ops):
        r.apply(k, op)
    return r.result()


def cmd_beats(op) -> list:
    """The ``i_cmd`` beats of an operation."""
    kind = op[0]
    opt = op[-1] if isinstance(op[-1], dict) else {}
    if kind == "store":
        _, l, g, owner, t, step = op[:6]
        return [dict(op=STORE, layer=l, group=g, head=0, owner=owner, token=t, step=step)]
    if kind == "fetch":
        _, l, g, j, owners, version = op[:6]
        return [dict(op=FETCH, layer=l, group=g, head=j, owner=o, version=version,
                     first=int(i == 0), last=int(i == len(owners) - 1),
                     by_index=int(bool(opt.get("by_index"))), step=opt.get("step", 0),
                     past=int(bool(opt.get("past"))))
                for i, o in enumerate(owners)]
    if kind == "cand":
        _, l, g, j, step = op[:5]
        return [dict(op=CAND, layer=l, group=g, head=j, step=step,
                     counts=int(bool(opt.get("counts"))))]
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
        if op[0] in ("store", "fetch", "cand"):
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


def check_scored(exp: Expected, scored) -> int:
    """Cross-check of a trace scenario's candidate lists (the replay's) against the golden
    ReSV run's own, as it scored them: the same cluster ids, past counts and representative
    keys. Returns the number of candidates compared."""
    assert len(exp.lists) == len(scored)
    n = 0
    for k, (got, want) in enumerate(zip(exp.lists, scored)):
        if want is None:
            assert got == [], f"list {k}: {len(got)} candidates, the golden run had none"
            continue
        ids, counts, reps = want
        assert [c for c, _, _ in got] == ids, f"list {k}: cluster ids differ"
        assert [p for _, p, _ in got] == counts, f"list {k}: counts differ"
        assert np.array_equal(np.stack([r for _, _, r in got]), reps), f"list {k}: keys differ"
        n += len(ids)
    return n


def first_op(cfg, regs, ops, rows, want) -> int:
    """The index of the first operation (past the first third of ``ops``) for which
    ``want(replay, op)`` holds just before it is applied."""
    r = Replay(cfg, regs, rows)
    for k, op in enumerate(ops):
        if k > len(ops) // 3 and want(r.rp, op):
            return k
        r.apply(k, op)
    raise AssertionError("no such operation")


def check_memory(exp: Expected, read) -> None:
    """Every stored token's rows and every live cluster's sums at their golden addresses;
    ``read(addr, n)`` returns the memory's bytes (either tier's memory model)."""
    bad = [key for key, (addr, want) in exp.stored.items()
           if bytes(read(addr, len(want))) != want]
    assert not bad, f"{len(bad)} stored rows or sums differ in memory, first {bad[0]}"
