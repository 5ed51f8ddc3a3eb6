"""The core's register file under the Amaranth simulator: the actions of
:mod:`verif.core.model` driven as AXI4-Lite transfers (each channel paused by the named
crossing), everything compared with the reference model as it goes."""
from __future__ import annotations

from amaranth.sim import Simulator

from rtl import CoreRegisters
from verif.lib.axil_sim import AxiLiteHost
from verif.lib.pauses import crossing
from vrex import regmap

from .model import RegsModel

__all__ = ["run_regs"]


def run_regs(cfg, actions, *, cross: str = "none", seed: int = 0):
    dut = CoreRegisters.from_config(cfg)
    perf = [1000 + 7 * k for k in range(len(dut._perf))]
    model = RegsModel(cfg, perf)
    src, snk = crossing(cross, seed)
    s = lambda n: getattr(dut, f"s_axil_{n}")
    log = []

    bus = AxiLiteHost(dut, src=src, snk=snk)
    write = lambda ctx, off, data, strb: bus.write(ctx, off, data, strb)
    read = bus.read

    async def host(ctx):
        for k, v in enumerate(perf):
            ctx.set(dut.perf_in[k], v)
        await ctx.tick()
        for k, act in enumerate(actions):
            want = model.apply(act)
            kind = act[0]
            if kind == "write":
                got = await write(ctx, act[1], act[2], act[3])
            elif kind == "read":
                got = await read(ctx, act[1])
            elif kind == "desc":
                got = [await write(ctx, regmap.offsets({})["DESC_DATA"], w, 0xF)
                       for w in regmap.encode_descriptor(**act[1])]
                await ctx.tick().repeat(4)          # the checks
            elif kind == "pop":
                got = []
                ctx.set(dut.o_desc.ready, 1)
                for _ in range(8 * len(want)):      # the model says how many are queued
                    if len(got) == len(want):
                        break
                    if ctx.get(dut.o_desc.valid):
                        words = ctx.get(dut.o_desc.payload)
                        got.append([int(words[i]) for i in range(regmap.DESC_WORDS)])
                    await ctx.tick()
                ctx.set(dut.o_desc.ready, 0)
            elif kind == "done":
                ctx.set(dut.done, 1)
                ctx.set(dut.done_version, act[1])
                await ctx.tick()
                ctx.set(dut.done, 0)
                got = None
            elif kind == "error":
                ctx.set(dut.i_error.payload.code, act[1])
                ctx.set(dut.i_error.payload.addr, act[2])
                ctx.set(dut.i_error.payload.version, act[3])
                ctx.set(dut.i_error.valid, 1)
                await ctx.tick()
                ctx.set(dut.i_error.valid, 0)
                got = None
            await ctx.tick().repeat(2)
            assert got == want, f"action {k} {act[:2]}: got {got}, want {want}"
            assert ctx.get(dut.irq) == model.irq, f"action {k} {act[:2]}: irq {ctx.get(dut.irq)}"
            log.append((act, got))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(host)
    sim.run()
    return log
