"""Amaranth-simulator side of the testbench library (the fast tier of every block): a driver
and a monitor on the block's ``i`` and ``o`` streams, paused by the same generators as the
cocotb tier, and the block's counters at the end."""
from __future__ import annotations

from amaranth.sim import Simulator

from .counters import read_sim
from .payload import pack, unpack
from .pauses import crossing

__all__ = ["run_streams"]


def run_streams(dut, beats, n_out: int, *, regs=(), cross: str = "none", seed: int = 0,
                max_cycles: int = 2_000_000, quiet: int = 8, read: dict | None = None,
                last: str | None = None):
    """Send ``beats`` on ``dut.i`` and take ``n_out`` beats from ``dut.o`` under the named
    crossing (:data:`verif.lib.pauses.CROSSINGS`), then watch ``o`` for ``quiet`` more cycles
    with ``ready`` high: an extra beat fails. With ``last`` (a payload field), a beat with it
    set before beat ``n_out``, or beat ``n_out`` without it, fails at once. ``regs``: (signal,
    value) pairs set first; ``read``: name -> signal read at the end into the counters.
    Returns ``(outputs, cycle of each output transfer, counters)``."""
    src_pauses, snk_pauses = crossing(cross, seed)
    got, when, perf = [], [], {}

    async def driver(ctx):
        for sig, value in regs:
            ctx.set(sig, value)
        for b in beats:
            while next(src_pauses):
                ctx.set(dut.i.valid, 0)
                await ctx.tick()
            ctx.set(dut.i.valid, 1)
            ctx.set(dut.i.payload.as_value(), pack(dut.i.payload.shape(), b))
            await ctx.tick().until(dut.i.ready)
        ctx.set(dut.i.valid, 0)

    def beat_of(ctx):
        return unpack(dut.out_layout, ctx.get(dut.o.payload.as_value()))

    async def monitor(ctx):
        cycle = 0
        while len(got) < n_out:
            ready = not next(snk_pauses)
            ctx.set(dut.o.ready, ready)
            await ctx.delay(1e-9)
            if ready and ctx.get(dut.o.valid):
                got.append(beat_of(ctx))
                when.append(cycle)
                if last is not None and bool(got[-1][last]) != (len(got) == n_out):
                    raise AssertionError(f"o: beat {len(got) - 1} has {last}="
                                         f"{got[-1][last]}, expected {last} only on beat "
                                         f"{n_out - 1}: {got[-1]}")
            await ctx.tick()
            cycle += 1
            if cycle > max_cycles:
                raise AssertionError(f"the block hung: {len(got)} of {n_out} beats after "
                                     f"{cycle} cycles")
        ctx.set(dut.o.ready, 1)
        for _ in range(quiet):
            await ctx.delay(1e-9)
            if ctx.get(dut.o.valid):
                raise AssertionError(f"o: an extra beat after {n_out}: {beat_of(ctx)}")
            await ctx.tick()
        perf.update(read_sim(ctx, dut))
        perf.update({name: int(ctx.get(sig)) for name, sig in (read or {}).items()})

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(driver)
    sim.add_testbench(monitor)
    sim.run()
    return got, when, perf
