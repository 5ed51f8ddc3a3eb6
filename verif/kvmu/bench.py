"""KVMU benchmark under Verilator (``make bench``): cycles, beats and bursts, never wall time.
Every run is also checked against the golden replay (``KvmuTB.run``).

1. Prefetch utilisation: 8 clusters of 64 tokens (4 full blocks each) stored, then fetched in
   one fetch with ``o_kv`` always ready; utilisation = R beats / cycles from the fetch's first
   AR to its last R beat, with the memory answering 0, 50 and 200 cycles after each AR
   (pipelined), at bursts of 256 (a whole 2 KB block), 64 and 16 beats (the ``max_burst``
   register), with the most reads seen outstanding; and the stores' cycles a token (from
   the first store's command to the fetch's; the stores run at the fetch's latency with
   256-beat bursts, at zero latency otherwise, to keep the bench short).
2. The bundled trace (``paper``, the first steps whose every token fits a block of its own):
   fetch cycles, bursts and beats with the cluster-contiguous layout (the golden ReSV
   clusters) and with a token-scattered one (every token its own cluster, so a fetch moves
   one burst per token), at 50 and 200 cycles of latency; bursts per fetched cluster against
   its blocks. The memory model charges nothing per burst beyond its latency (a DRAM's row
   and command overheads are not modelled), so what the layout buys here is latency hiding
   with a bounded number of reads outstanding.
3. Candidate lists: 64 clusters stored, then one keyed list (every cluster a candidate,
   its representative key through the dividers) at 0, 50 and 200 cycles of latency: cycles
   a candidate from the command to the end beat, with ``o_cand`` always ready.
Writes ``BENCH_OUT`` (JSON, with the Config it measured).
"""
from __future__ import annotations

import json
import os

import cocotb
from cocotb.triggers import ReadOnly, RisingEdge

from verif.kvmu.model import random_rows, registers, trace_ops
from verif.kvmu.tb import KvmuTB
from verif.lib.cocotb_tb import LONG_LIMIT_MS, test


class _Probe:
    """Cycle of every AR and R handshake, and the most reads outstanding."""

    def __init__(self, dut):
        self.dut, self.ar, self.r, self.peak, self.out = dut, [], [], 0, 0
        self.cycle = 0
        cocotb.start_soon(self._run())

    def reset(self):
        self.ar, self.r, self.peak, self.out = [], [], 0, 0

    async def _run(self):
        d = self.dut
        while True:
            await ReadOnly()
            if int(d.m_axi_arvalid.value) and int(d.m_axi_arready.value):
                self.ar.append(self.cycle)
                self.out += 1
            if int(d.m_axi_rvalid.value) and int(d.m_axi_rready.value):
                self.r.append(self.cycle)
                if int(d.m_axi_rlast.value):
                    self.out -= 1
            self.peak = max(self.peak, self.out)
            await RisingEdge(d.clk)
            self.cycle += 1


def _prefetch_ops(clusters=8, tokens=64):
    ops = [("store", 0, 0, c, c * tokens + t, 0) for t in range(tokens)
           for c in range(clusters)]
    return ops + [("version", 0, 1), ("fetch", 0, 0, 0, list(range(clusters)), 1)]


async def _prefetch(tb, probe, state, latency, burst):
    """The stores run at ``store_latency``, the fetch at ``latency``."""
    cfg = tb.cfg
    state["latency"] = state["store_latency"]
    await tb.reset()
    regs = registers(cfg, max_burst=burst)
    ops = _prefetch_ops()

    async def before(k, op):
        if op[0] == "fetch":
            await tb.idle()             # every store done at its own latency
            state["latency"] = latency
            probe.reset()               # the fetch's reads only
    await tb.run(ops, random_rows(1, 2 * cfg.head_dim), regs, timeout=5_000_000,
                 before=before)
    beats = len(probe.r)
    cycles = probe.r[-1] - probe.ar[0] + 1
    stamps = tb.source["i_cmd"].stamps
    n_fetch = len(ops[-1][4])
    stores = len(ops) - 2
    store_cycles = stamps[-n_fetch] - stamps[-n_fetch - stores]
    return {"store_latency": state["store_latency"], "latency": latency, "max_burst": burst,
            "beats": beats, "cycles": cycles,
            "utilisation": beats / cycles, "bursts": len(probe.ar),
            "peak_outstanding": probe.peak, "store_cycles_per_token": store_cycles / stores}


async def _trace(tb, probe, state, layout, steps, latency=50):
    cfg = tb.cfg
    state["latency"] = latency
    await tb.reset()
    ops, tcfg, rows, selected, _ = trace_ops("paper", steps=steps)
    if layout == "scattered":           # no clusters: no candidate lists, tokens by id
        sel = iter(selected)
        ops = [("fetch", *op[1:4], sorted(next(sel)), op[5]) if op[0] == "fetch" else
               (("store", op[1], op[2], op[4], op[4], op[5]) if op[0] == "store" else op)
               for op in ops if op[0] != "cand"]
    regs = registers(cfg)
    exp, run = await tb.run(ops, rows, regs, timeout=5_000_000)
    fetch_cycles = _fetch_cycles(tb, ops, exp)
    blocks = _blocks_per_cluster(ops, cfg, regs, rows)
    fetched = run["fetched_clusters"]
    return {"layout": layout, "steps": steps, "latency": latency,
            "fetch_cycles": fetch_cycles, "read_bursts": run["read_bursts"],
            "fetch_bursts": exp.counters["fetch_bursts"],
            "offloaded_blocks": run["offloaded_blocks"],
            "read_beats": run["near_read_beats"] + run["far_read_beats"],
            "fetched_clusters": fetched, "delivered_tokens": run["delivered_tokens"],
            "bursts_per_cluster": exp.counters["fetch_bursts"] / max(1, fetched),
            "blocks_per_cluster": blocks, "candidates": run["candidates"],
            "stored_tokens": run["stored_tokens"], "cycles_total": run["busy"]}


async def _candidates(tb, state, latency, clusters=64):
    """One keyed candidate list of ``clusters`` candidates (two tokens each, stored at zero
    latency) at ``latency``: cycles from its command to its end beat."""
    cfg = tb.cfg
    state["latency"] = 0
    await tb.reset()
    ops = [("store", 0, 0, c, 2 * c + t, 0) for c in range(clusters) for t in range(2)]
    ops.append(("cand", 0, 0, 0, 1))

    async def before(k, op):
        if op[0] == "cand":
            await tb.idle()
            state["latency"] = latency
    exp, _ = await tb.run(ops, random_rows(2, 2 * cfg.head_dim), registers(cfg),
                          timeout=5_000_000, before=before)
    start = tb.source["i_cmd"].stamps[-1]
    end = tb.sink["o_cand"].stamps[-1]
    return {"latency": latency, "candidates": clusters, "cycles": end - start,
            "cycles_per_candidate": (end - start) / clusters,
            "sum_beats": clusters * 4 * cfg.head_dim // cfg.kvmu_bus_bytes}


def _fetch_cycles(tb, ops, exp):
    """Cycles during which a fetch is under way: the union over fetches of the cycles from
    the transfer of its first command to its end beat (fetches of one layer overlap, so
    their windows are merged, not summed)."""
    cmd = tb.source["i_cmd"].stamps[-sum(len(_cmds(op)) for op in ops):]
    kv = tb.sink["o_kv"].stamps[-len(exp.kv):]
    ends = [kv[i] for i, b in enumerate(exp.kv) if b["end"]]
    k, e, spans = 0, 0, []
    for op in ops:
        n = len(_cmds(op))
        if op[0] == "fetch":
            spans.append((cmd[k], ends[e]))
            e += 1
        k += n
    total, reach = 0, -1
    for a, b in sorted(spans):
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total


def _cmds(op):
    from verif.kvmu.model import cmd_beats
    return cmd_beats(op)


def _blocks_per_cluster(ops, cfg, regs, rows):
    """Mean blocks a fetched cluster spans, from the golden replay."""
    from verif.kvmu.model import Replay
    r = Replay(cfg, regs, rows)
    blocks, n = 0, 0
    for k, op in enumerate(ops):
        if op[0] == "fetch":
            owners = op[4]
            if isinstance(op[-1], dict) and op[-1].get("by_index"):
                owners = [r.rp.cand[(op[1], op[2])][i] for i in owners]
            for o in owners:
                blocks += sum(1 for b in r.rp.mem.blocks
                              if (b.layer, b.group, b.owner) == (op[1], op[2], o) and b.tokens)
                n += 1
        r.apply(k, op)
    return blocks / max(1, n)


@test(limit_ms=LONG_LIMIT_MS)
async def bench(dut):
    state = {"latency": 0, "store_latency": 0}
    tb = KvmuTB(dut, latency=lambda: state["latency"])
    probe = _Probe(dut)
    await tb.start()
    m, cfg = tb.model, tb.cfg
    report = {"config": cfg.to_dict(),
              "params": {"bus_bytes": cfg.kvmu_bus_bytes, "max_reads": cfg.kvmu_max_reads,
                         "max_writes": cfg.kvmu_max_writes, "block_bytes": m.block_bytes,
                         "memory_bits": m.memory_bits},
              "prefetch": [], "trace": {}, "candidates": []}
    for latency in (0, 50, 200):
        report["candidates"].append(await _candidates(tb, state, latency))
    for latency in (0, 50, 200):
        for burst in (256, 64, 16):
            state["store_latency"] = latency if burst == 256 else 0
            report["prefetch"].append(await _prefetch(tb, probe, state, latency, burst))
    stored = cfg.kvmu_blocks // (cfg.n_layers * cfg.hash_groups)
    from verif.lib.traces import bundled
    tr, _ = bundled()
    b = tr.step_bounds()
    steps = max(s for s in range(1, tr.n_steps + 1) if b[s] - b[1] <= stored)
    for latency in (50, 200):
        t = report["trace"][f"latency_{latency}"] = {}
        for layout in ("clusters", "scattered"):
            t[layout] = await _trace(tb, probe, state, layout, steps, latency)
        t["speedup"] = t["scattered"]["fetch_cycles"] / max(1, t["clusters"]["fetch_cycles"])
    with open(os.environ["BENCH_OUT"], "w") as f:
        json.dump(report, f, indent=1)


def summary(r: dict) -> list[str]:
    """The report in a few lines."""
    lines = []
    for x in r["prefetch"]:
        if x["max_burst"] == 256:
            lines.append(f"store, {x['latency']:3d}-cycle memory: "
                         f"{x['store_cycles_per_token']:.0f} cycles a token (its K and V rows "
                         f"one burst a head, then the sums' read-add-write, the record in "
                         f"one run of bursts)")
        if x["max_burst"] == 256 or x["latency"] == 200:
            lines.append(f"prefetch, {x['latency']:3d}-cycle memory, {x['max_burst']:3d}-beat "
                         f"bursts: {100 * x['utilisation']:.1f}% of R cycles carry a beat "
                         f"({x['peak_outstanding']} reads outstanding at most, "
                         f"{r['params']['max_reads']} allowed)")
    for x in r.get("candidates", []):
        lines.append(f"candidate list, {x['latency']:3d}-cycle memory: "
                     f"{x['cycles_per_candidate']:.1f} cycles a candidate "
                     f"({x['sum_beats'] // x['candidates']} beats of sums each, "
                     f"{x['candidates']} candidates)")
    for key, t in r["trace"].items():
        c, s = t["clusters"], t["scattered"]
        lines.append(f"trace (paper, {c['steps']} steps, {c['latency']}-cycle memory): fetches "
                     f"take {c['fetch_cycles']} cycles in {c['fetch_bursts']} bursts with "
                     f"clusters ({c['bursts_per_cluster']:.2f} bursts, "
                     f"{c['blocks_per_cluster']:.2f} blocks a cluster), {s['fetch_cycles']} "
                     f"cycles in {s['fetch_bursts']} bursts token-scattered: "
                     f"{t['speedup']:.2f}x")
    return lines
