"""The KVMU under the Amaranth simulator: operations driven in order (the testbench contract
of :mod:`verif.kvmu.model`), the bus answered by :class:`verif.lib.axi_sim.AxiMemSim`, and
everything compared with the golden replay."""
from __future__ import annotations

from amaranth.sim import Simulator

from rtl import KvMemoryManager
from verif.lib.axi_sim import AxiMemSim
from verif.lib.counters import read_sim
from verif.lib.pauses import crossing, pause
from verif.lib.payload import pack, unpack
from verif.lib.scoreboard import compare, compare_counters

from .model import check_memory, cmd_beats, data_beats, expect, refused

__all__ = ["run_sim", "run_refused", "COUNTERS"]

COUNTERS = ("near_read_bytes", "near_read_beats", "near_write_bytes", "near_write_beats",
            "far_read_bytes", "far_read_beats", "far_write_bytes", "far_write_beats",
            "read_bursts", "write_bursts", "stored_tokens", "offloaded_blocks",
            "fetched_clusters", "delivered_tokens", "stale_dropped", "refused",
            "hc_read_beats", "hc_write_beats", "candidates")


def run_sim(cfg, regs: dict, ops, rows, *, cross: str = "none", seed: int = 0,
            bus_pause=None, latency: int = 0, max_cycles: int = 3_000_000):
    """Run ``ops`` on the KVMU built from ``cfg`` with registers ``regs``; the streams paused
    by the named crossing, every AXI channel by ``bus_pause`` (a pause spec) after
    ``latency`` cycles. Checks the bursts, the ``o_kv`` beats, the counters, the error
    status and the memory's contents against the golden replay; returns
    ``(expected, counters, memory)``."""
    dut = KvMemoryManager.from_config(cfg)
    exp = expect(cfg, regs, ops, rows)
    mem = AxiMemSim(dut, bus_bytes=cfg.kvmu_bus_bytes, latency=latency,
                    pauses={ch: pause(bus_pause, seed + 10 + k)
                            for k, ch in enumerate(("ar", "r", "aw", "w", "b"))})
    cmd_src, _ = crossing(cross, seed)
    data_src, _ = crossing(cross, seed + 2)
    _, kv_snk = crossing(cross, seed + 4)
    _, cand_snk = crossing(cross, seed + 6)
    state = {"sent": 0, "done": False, "cand_done": False}
    got, cands, info = [], [], {}
    cmd_layout = dut.i_cmd.payload.shape()

    async def announce(ctx, layer, version):
        ctx.set(dut.i_version.payload.layer, layer)
        ctx.set(dut.i_version.payload.version, version)
        ctx.set(dut.i_version.valid, 1)
        await ctx.tick()
        ctx.set(dut.i_version.valid, 0)

    async def commands(ctx):
        for name, v in regs.items():
            ctx.set(getattr(dut, name), v)
        await ctx.tick().repeat(2)
        for k, op in enumerate(ops):
            if op[0] == "version":
                await ctx.tick().repeat(3)
                await announce(ctx, op[1], op[2])
                continue
            if k in exp.faults:
                while ctx.get(dut.busy):
                    await ctx.tick()
                ch, addr, resp = exp.faults[k]
                mem.faults[(ch, addr)] = resp
            newer = op[-1].get("newer_during") if isinstance(op[-1], dict) else None
            for i, beat in enumerate(cmd_beats(op)):
                while next(cmd_src):
                    ctx.set(dut.i_cmd.valid, 0)
                    await ctx.tick()
                ctx.set(dut.i_cmd.valid, 1)
                ctx.set(dut.i_cmd.payload.as_value(), pack(cmd_layout, beat))
                await ctx.tick().until(dut.i_cmd.ready)
                if i == 0 and newer is not None:       # a newer command, mid-fetch
                    ctx.set(dut.i_cmd.valid, 0)
                    await ctx.tick().repeat(3)
                    await announce(ctx, op[1], newer)
            ctx.set(dut.i_cmd.valid, 0)
        state["done"] = True

    async def data(ctx):
        for op in ops:
            for word in data_beats(cfg, op, rows):
                while next(data_src):
                    ctx.set(dut.i_data.valid, 0)
                    await ctx.tick()
                ctx.set(dut.i_data.valid, 1)
                ctx.set(dut.i_data.payload, word)
                await ctx.tick().until(dut.i_data.ready)
            ctx.set(dut.i_data.valid, 0)

    async def take(ctx, port, into, pauses, more):
        """Take beats from ``port`` (paused) while ``more()``; returns the cycles taken."""
        stream, cycle = getattr(dut, port), 0
        layout = stream.payload.shape()
        while more():
            r = not next(pauses)
            ctx.set(stream.ready, r)
            await ctx.delay(1e-9)
            if r and ctx.get(stream.valid):
                into.append(unpack(layout, ctx.get(stream.payload.as_value())))
            await ctx.tick()
            cycle += 1
            if cycle > max_cycles:
                raise AssertionError(f"the KVMU hung: {port} gave {len(into)} beats after "
                                     f"{cycle} cycles ({len(exp.kv)} o_kv and "
                                     f"{len(exp.cand)} o_cand beats expected)")
        ctx.set(stream.ready, 1)
        return cycle

    async def cand_sink(ctx):
        await take(ctx, "o_cand", cands, cand_snk, lambda: len(cands) < len(exp.cand))
        state["cand_done"] = True

    async def sink(ctx):
        cycle = await take(ctx, "o_kv", got, kv_snk, lambda: (
            len(got) < len(exp.kv) or not state["done"] or not state["cand_done"]
            or ctx.get(dut.busy)))
        ctx.set(dut.o_kv.ready, 1)
        for _ in range(8):
            await ctx.delay(1e-9)
            assert not ctx.get(dut.o_kv.valid), "an extra o_kv beat"
            assert not ctx.get(dut.o_cand.valid), "an extra o_cand beat"
            await ctx.tick()
        info.update(read_sim(ctx, dut))
        info.update({k: ctx.get(getattr(dut, k))
                     for k in ("error", "error_code", "error_resp", "error_addr")})
        info["cycles"] = cycle

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(commands)
    sim.add_testbench(data)
    sim.add_testbench(sink)
    sim.add_testbench(cand_sink)
    sim.add_testbench(mem.reads, background=True)
    sim.add_testbench(mem.writes, background=True)
    sim.run()
    check(exp, got, info, mem, cands)
    return exp, info, mem


def run_refused(cfg, regs, ops, rows, **kw):
    """Run ``ops`` with registers out of range: every command refused with error 2, not one
    burst on the bus."""
    exp, info, mem = run_sim(cfg, regs, refused(ops), rows, **kw)
    assert not mem.ar_log and not mem.aw_log and info["error_code"] == 2
    return exp, info, mem


def check(exp, got, info, mem, cands):
    """Every comparison with the golden replay (the Amaranth tier)."""
    compare([dict(addr=a, bytes=n) for a, n in mem.ar_log],
            [dict(addr=a, bytes=n) for a, n in exp.ar], what="read burst")
    compare([dict(addr=a, bytes=n) for a, n in mem.aw_log],
            [dict(addr=a, bytes=n) for a, n in exp.aw], what="write burst")
    compare(got, exp.kv, what="o_kv beat")
    compare(cands, exp.cand, what="o_cand beat")
    compare_counters(info, {k: exp.counters[k] for k in COUNTERS if k in exp.counters})
    if exp.first_error is None:
        assert not info["error"], f"error {info['error_code']} raised, none expected"
    else:
        assert info["error"], f"no error raised, expected {exp.first_error}"
        assert (info["error_code"], info["error_resp"], info["error_addr"]) == \
            exp.first_error, (info["error_code"], info["error_resp"], info["error_addr"])
    check_memory(exp, mem.read_bytes)
