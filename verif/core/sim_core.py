"""The core end to end under the Amaranth simulator: a host on ``s_axil_*`` (registers, then
every descriptor of a :class:`verif.core.e2e.StreamPlan` as the queue takes them), an AXI4
memory on ``m_axi_*`` (latency, pauses, faults), monitors on the streams between the blocks."""
from __future__ import annotations

from amaranth.sim import Simulator

from rtl import VrexCore
from verif.lib.axi_sim import AxiMemSim
from verif.lib.axil_sim import AxiLiteHost
from verif.lib.fcov import record, record_error, record_page_cuts
from verif.lib.pauses import crossing, random_pause
from rtl.core import map as core_map
from vrex import regmap

from .e2e import Observed

__all__ = ["run_core", "OFF"]

OFF = {r.name: r.offset for r in regmap.REGISTERS}


def _samples(plan, mem):
    """The functional samples of a run, off the bursts the memory took: a transfer cut at a
    4 KB edge; a cluster window saved to its image area and one loaded from it."""
    record_page_cuts(mem.ar_log, mem.aw_log)
    cfg = plan.cfg
    base, end = cfg.ctx_base, cfg.ctx_base + cfg.windows * cfg.ctx_image_bytes
    for log, what in ((mem.aw_log, "save"), (mem.ar_log, "load")):
        if any(base <= a < end for a, _ in log):
            record(f"core:context {what}")


def run_core(plan, *, latency: int = 0, bus_pauses: float = 0.0, host_cross: str = "none",
             seed: int = 0, max_cycles: int = 2_000_000, faults: dict | None = None,
             dut=None, vcd: str | None = None, refused: dict | None = None,
             tamper: dict | None = None):
    """Run the plan's stream; returns ``(Observed, info)`` with ``info``: cycles, the error
    register (the first error seen while it ran) and the error address, the counters (name
    -> value) and the memory model. ``faults``: as ``AxiMemSim.faults``. ``refused``:
    k -> a descriptor the host writes just before the plan's k-th, one the core refuses
    (it never completes: the run ends when the plan's have). ``tamper``: as
    ``AxiMemSim.tamper``."""
    cfg = plan.cfg
    dut = dut or VrexCore(cfg)
    pauses = {}
    if bus_pauses:
        pauses = {ch: random_pause(bus_pauses, seed + i)
                  for i, ch in enumerate(("ar", "r", "aw", "w", "b"))}
    mem = AxiMemSim(dut, bus_bytes=cfg.kvmu_bus_bytes, latency=latency, pauses=pauses,
                    full_strobes=False)
    for addr, raw in plan.image.items():
        mem.write_bytes(addr, raw)
    mem.faults.update(faults or {})
    mem.tamper.update(tamper or {})
    src, snk = crossing(host_cross, seed + 9)
    host = AxiLiteHost(dut, src=src, snk=snk)
    obs = Observed()
    info = {"cycles": 0, "error": None, "perf": {}, "mem": mem}
    state = {"stop": False}

    async def host_proc(ctx):
        for off, value in plan.registers:
            assert await host.write(ctx, off, value) == 0, f"register write at {off:#x}"
        depth = cfg.core_queue_depth
        for k, desc in enumerate(plan.descriptors):
            for d in ([refused[k]] if k in (refused or {}) else []) + [desc]:
                while True:
                    st, _ = await host.read(ctx, OFF["STATUS"])
                    if ((st >> 8) & 0xFF) < depth:
                        break
                for w in regmap.encode_descriptor(**d):
                    assert await host.write(ctx, OFF["DESC_DATA"], w) == 0
        while True:
            done, _ = await host.read(ctx, OFF["DESC_DONE"])
            obs.done = done
            if done >= len(plan.descriptors):
                break
            err, _ = await host.read(ctx, OFF["ERROR_CODE"])
            record_error(err)
            if err & 0xFF and info["error"] is None:
                info["error"] = err
        err, _ = await host.read(ctx, OFF["ERROR_CODE"])
        record_error(err)
        info["error"] = info["error"] or err
        lo, _ = await host.read(ctx, OFF["ERROR_ADDR_LO"])
        hi, _ = await host.read(ctx, OFF["ERROR_ADDR_HI"])
        info["error_addr"] = lo | hi << 32
        info["irq"], _ = ctx.get(dut.irq), await host.read(ctx, OFF["IRQ_STATUS"])
        info["perf"] = {}
        for r in core_map.perf_registers():
            v, _ = await host.read(ctx, r.offset)
            info["perf"][r.name[5:].lower()] = v
        obs.done = done
        state["stop"] = True
        mem.stop = True
        _samples(plan, mem)

    def monitor(stream, fields, into, fmt):
        async def run(ctx):
            sigs = [stream.valid, stream.ready] + [getattr(stream.payload, f) for f in fields]
            async for _, _, valid, ready, *vals in ctx.tick().sample(*sigs):
                if state["stop"]:
                    return
                if valid and ready:
                    into.append(fmt(*vals))
        return run

    async def watchdog(ctx):
        n = 0
        while not state["stop"]:
            await ctx.tick()
            n += 1
            if n >= max_cycles:
                raise AssertionError(f"the core did not finish in {max_cycles} cycles "
                                     f"({obs.done} descriptors done)")
        info["cycles"] = n

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(host_proc)
    sim.add_testbench(mem.reads, background=True)
    sim.add_testbench(mem.writes, background=True)
    sim.add_process(monitor(dut.engine.o_hash, ("hash",), obs.hashes, int))
    sim.add_process(monitor(dut.hcu.o, ("cluster",), obs.clusters, int))
    sim.add_process(monitor(dut.wtu.o, ("cluster", "last"), obs.selections,
                            lambda c, last: (int(c), int(last))))
    sim.add_process(monitor(dut.kvmu.o_kv, ("token", "end"), obs.fetched,
                            lambda t, e: (int(t), int(e))))
    sim.add_testbench(watchdog, background=True)
    if vcd:
        with sim.write_vcd(vcd):
            sim.run()
    else:
        sim.run()
    for k in range(len(plan.descriptors)):
        obs.o_rows.append(plan.o_rows(mem.read_bytes, k))
    return obs, info
