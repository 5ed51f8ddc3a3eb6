"""The Amaranth simulator with streams: a driver with idle cycles, a monitor under
back-pressure, and the block's counters at the end (the fast tier of every block)."""
from __future__ import annotations

import numpy as np
from amaranth.sim import Simulator


def run_streams(dut, beats, n_out: int, *, regs, idle=0.0, stall=0.0, seed=0,
                max_cycles=2_000_000, settle=0, read: dict | None = None):
    """Send ``beats`` on ``dut.i`` (idling before a beat with probability ``idle``), take
    ``n_out`` beats from ``dut.o`` (``ready`` low with probability ``stall``), then wait
    ``settle`` cycles. ``regs``: (signal, value) pairs set first; ``read``: name -> signal read at
    the end into the counters' dict. Returns ``(outputs, cycles of the
    output transfers, counters)``, outputs and counters as dicts of their layouts' fields."""
    rng = np.random.default_rng(seed)
    got, when, perf = [], [], {}

    async def driver(ctx):
        for sig, value in regs:
            ctx.set(sig, value)
        for b in beats:
            while rng.random() < idle:
                ctx.set(dut.i.valid, 0)
                await ctx.tick()
            ctx.set(dut.i.valid, 1)
            ctx.set(dut.i.payload, b)
            await ctx.tick().until(dut.i.ready)
        ctx.set(dut.i.valid, 0)

    async def monitor(ctx):
        cycle = 0
        while len(got) < n_out:
            ready = rng.random() >= stall
            ctx.set(dut.o.ready, ready)
            await ctx.delay(1e-9)
            if ready and ctx.get(dut.o.valid):
                p = ctx.get(dut.o.payload)
                got.append({name: int(getattr(p, name)) for name, _ in dut.out_layout})
                when.append(cycle)
            await ctx.tick()
            cycle += 1
            if cycle > max_cycles:
                raise AssertionError(f"the block hung: {len(got)} of {n_out} beats after "
                                     f"{cycle} cycles")
        for _ in range(settle):
            await ctx.tick()
        pv = ctx.get(dut.perf)
        perf.update({name: int(getattr(pv, name)) for name, _ in dut.perf_layout})
        perf.update({name: int(ctx.get(sig)) for name, sig in (read or {}).items()})

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(driver)
    sim.add_testbench(monitor)
    sim.run()
    return got, when, perf
