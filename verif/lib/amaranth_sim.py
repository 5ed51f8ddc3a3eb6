"""Amaranth-simulator side of the testbench library (the fast tier of every block): drivers
and monitors on a block's named streams, paused by the same generators as the cocotb tier,
and the block's counters at the end."""
from __future__ import annotations

from amaranth.hdl import Value
from amaranth.sim import Simulator

from .counters import read_sim
from .pauses import crossing
from .payload import pack, unpack

__all__ = ["run_ports", "run_streams", "stream_through"]


def run_ports(dut, sources: dict, sinks: dict, *, regs=(), cross: str = "none", seed: int = 0,
              max_cycles: int = 2_000_000, quiet: int = 8, read: dict | None = None,
              last: dict | None = None):
    """Drive each named source stream of ``dut`` with its beats and take the given number of
    beats from each named sink, every port paused by the named crossing
    (:data:`verif.lib.pauses.CROSSINGS`, seeded per port); then watch every sink for
    ``quiet`` more cycles with ``ready`` high: an extra beat fails. ``last``: sink -> payload
    field that must be set on that sink's final beat only (checked as beats arrive).
    ``regs``: (signal, value) pairs set first; ``read``: name -> signal read at the end.
    Returns ``(beats by sink, cycle of each transfer by port, counters)``: every port's
    transfers, sources' and sinks', counted from the same cycle 0."""
    got = {p: [] for p in sinks}
    when = {p: [] for p in (*sources, *sinks)}
    perf = {}
    last = last or {}
    done = {"sinks": 0}

    def driver(port, beats, pauses):
        stream = getattr(dut, port)

        async def run(ctx):
            for sig, value in regs:
                ctx.set(sig, value)
            cycle = 0
            for b in beats:
                while next(pauses):
                    ctx.set(stream.valid, 0)
                    await ctx.tick()
                    cycle += 1
                ctx.set(stream.valid, 1)
                ctx.set(Value.cast(stream.payload), pack(stream.payload.shape(), b))
                while True:                     # ready as the clock edge samples it
                    *_, ready = await ctx.tick().sample(stream.ready)
                    cycle += 1
                    if ready:
                        break
                when[port].append(cycle - 1)
            ctx.set(stream.valid, 0)
        return run

    def monitor(port, n_out, pauses):
        stream = getattr(dut, port)
        layout = stream.payload.shape()

        async def run(ctx):
            cycle = 0
            while len(got[port]) < n_out:
                ready = not next(pauses)
                ctx.set(stream.ready, ready)
                await ctx.delay(1e-9)
                if ready and ctx.get(stream.valid):
                    beat = unpack(layout, ctx.get(Value.cast(stream.payload)))
                    got[port].append(beat)
                    when[port].append(cycle)
                    f = last.get(port)
                    if f is not None and bool(beat[f]) != (len(got[port]) == n_out):
                        raise AssertionError(f"{port}: beat {len(got[port]) - 1} has {f}="
                                             f"{beat[f]}, expected {f} only on beat "
                                             f"{n_out - 1}: {beat}")
                await ctx.tick()
                cycle += 1
                if cycle > max_cycles:
                    raise AssertionError(f"the block hung: {port} gave {len(got[port])} of "
                                         f"{n_out} beats after {cycle} cycles")
            ctx.set(stream.ready, 1)
            done["sinks"] += 1
            while done["sinks"] < len(sinks):      # every sink stays open until all are done
                await ctx.delay(1e-9)
                if ctx.get(stream.valid):
                    raise AssertionError(f"{port}: an extra beat after {n_out}: "
                                         f"{unpack(layout, ctx.get(Value.cast(stream.payload)))}")
                await ctx.tick()
            for _ in range(quiet):
                await ctx.delay(1e-9)
                if ctx.get(stream.valid):
                    raise AssertionError(f"{port}: an extra beat after {n_out}: "
                                         f"{unpack(layout, ctx.get(Value.cast(stream.payload)))}")
                await ctx.tick()
            if done["sinks"] == len(sinks):
                done["sinks"] += 1
                perf.update(read_sim(ctx, dut))
                perf.update({name: int(ctx.get(sig)) for name, sig in (read or {}).items()})
        return run

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    k = 0
    for port, beats in sources.items():
        src, _ = crossing(cross, seed + 2 * k)
        sim.add_testbench(driver(port, beats, src))
        k += 1
    for port, n_out in sinks.items():
        _, snk = crossing(cross, seed + 2 * k)
        sim.add_testbench(monitor(port, n_out, snk))
        k += 1
    sim.run()
    return got, when, perf


def run_streams(dut, beats, n_out: int, *, last: str | None = None, **kw):
    """:func:`run_ports` for a block with one source ``i`` and one sink ``o``. Returns
    ``(outputs, cycle of each output transfer, counters)``."""
    got, when, perf = run_ports(dut, {"i": beats}, {"o": n_out},
                                last=None if last is None else {"o": last}, **kw)
    return got["o"], when["o"], perf


async def stream_through(ctx, src, snk, beats, n_out: int, *, src_paused=None,
                         snk_paused=None, on_taken=None) -> list:
    """A testbench step for tests that act between transfers: drive ``beats`` (dicts or ints,
    packed in ``src``'s layout) into stream ``src`` and take ``n_out`` beats from ``snk``, in
    one loop, each side idle in a cycle where its ``*_paused()`` says so; ``on_taken(ctx,
    k)`` runs once the k-th input beat has been taken (to change a register between two
    beats, say). Returns the output beats unpacked."""
    src_paused = src_paused or (lambda: False)
    snk_paused = snk_paused or (lambda: False)
    lay_i, lay_o = src.payload.shape(), snk.payload.shape()
    got, k = [], 0
    while len(got) < n_out or k < len(beats):
        send = k < len(beats) and not src_paused()
        ctx.set(src.valid, send)
        if send:
            ctx.set(src.payload.as_value(), pack(lay_i, beats[k]))
        ctx.set(snk.ready, not snk_paused())
        took = send and ctx.get(src.ready)
        if ctx.get(snk.valid) and ctx.get(snk.ready):
            got.append(unpack(lay_o, ctx.get(snk.payload.as_value())))
        await ctx.tick()
        if took:
            k += 1
            if on_taken is not None:
                on_taken(ctx, k)
    ctx.set(src.valid, 0)
    ctx.set(snk.ready, 0)
    return got
