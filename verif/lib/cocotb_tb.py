"""cocotb side of the testbench library: payload packing from Amaranth layouts, stream sources
and sinks driven by pause generators, and the testbench base every block's testbench extends.

The base knows a block by its :class:`vrex.config.Config` (sent by the runner as JSON) and its
named stream ports; a block with a memory bus adds its cocotbext-axi models (``AxiRam`` with
their own pause generators) to ``self.axi`` in its own testbench.

Events, not cycles: the sources and sinks sleep until ``ready`` or ``valid`` rises instead of
waking every cycle, and a :class:`Ticker` runs a testbench's per-cycle chores (bus pause
generators, monitors) in one coroutine. In the core's bundled-trace run that halves cocotb's
coroutine resumes (12.4 -> 5.9 a cycle), but not the run's time (57.7-61.4 s a preset before,
56.6-61.9 after, on one build): the model's evaluation sets the pace there.
"""
from __future__ import annotations

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, First, ReadOnly, RisingEdge, Timer
from cocotb.utils import get_sim_time

from .counters import read_cocotb
from .payload import pack, unpack
from .pauses import crossing, no_pause
from .runner import tb_config

__all__ = ["test", "SIM_LIMIT_MS", "LONG_LIMIT_MS",
           "pack", "unpack", "named", "StreamSource", "StreamSink", "BlockTB", "Ticker",
           "until_cycle", "cycle_now", "CLOCK_NS"]

CLOCK_NS = 10

# every cocotb test's simulation-time limit (a test past it fails, naming itself): the tests
# of `make test` run up to about 12 ms of simulated time; whole traces, soaks and benches
# take LONG_LIMIT_MS. Each simulator run also has a wall-clock limit (runner.SIM_WALL_S).
SIM_LIMIT_MS = 200
LONG_LIMIT_MS = 20_000


def test(limit_ms: float = SIM_LIMIT_MS, **kwargs):
    """``cocotb.test`` with a simulation-time limit of ``limit_ms`` milliseconds."""
    return cocotb.test(timeout_time=limit_ms, timeout_unit="ms", **kwargs)


def named(values):
    """Values for ``cocotb.parametrize`` that name each generated test by the value itself
    (cocotb names strings longer than 10 characters by their index)."""
    return [cocotb.Param(value=v, name=str(v)) for v in values]


def cycle_now() -> int:
    """The number of the last rising edge (the clock rises at every multiple of CLOCK_NS)."""
    return int(get_sim_time(unit="ns")) // CLOCK_NS


async def until_cycle(clk, c: int):
    """Return just after rising edge number ``c`` (at once if it has passed): a timer to the
    middle of the cycle before it, then one edge, where ``ClockCycles`` resumes its caller
    at every edge."""
    now = int(get_sim_time(unit="ns"))
    if c * CLOCK_NS - now > CLOCK_NS:
        await Timer(c * CLOCK_NS - CLOCK_NS // 2 - now, unit="ns")
    while cycle_now() < c:
        await RisingEdge(clk)


class Ticker:
    """A testbench's per-cycle chores in one coroutine, where each would otherwise resume its
    own every cycle: the
    pause generators of cocotbext-axi channels (each channel's ``pause`` set just after every
    rising edge from its generator, as the channel's own ``set_pause_generator`` would) and
    monitors called in the read-only phase of every cycle (``watch``)."""

    def __init__(self, clk):
        self.clk = clk
        self._pauses, self._watches, self._task = [], [], None

    def pause(self, channel, generator):
        """Drive ``channel.pause`` from ``generator`` (replacing its own generator)."""
        channel.set_pause_generator(None)
        self._pauses.append((channel, generator))
        self._start()

    def watch(self, fn):
        """Call ``fn()`` in the read-only phase of every cycle from the next one on."""
        self._watches.append(fn)
        self._start()

    def _start(self):
        if self._task is None:
            self._task = cocotb.start_soon(self._run())

    async def _run(self):
        edge, settled = RisingEdge(self.clk), ReadOnly()
        while True:
            await edge
            for channel, gen in self._pauses:
                channel.pause = next(gen)
            if self._watches:
                await settled
                for fn in self._watches:
                    fn()


class _StreamPort:
    def __init__(self, dut, prefix, layout, clk):
        self.name = prefix
        self.valid = getattr(dut, f"{prefix}__valid")
        self.ready = getattr(dut, f"{prefix}__ready")
        self.payload = getattr(dut, f"{prefix}__payload")
        self.layout, self.clk = layout, clk
        self.pauses = no_pause()
        self.cycles = []            # per transfer: cycles since the call that made it
        self.stamps = []            # per transfer: the absolute cycle (kept across calls)

    def _stamp(self):
        self.stamps.append(cycle_now())


class StreamSource(_StreamPort):
    """Drives ``<prefix>__valid/__payload``, pausing before a beat where its pause generator
    says so; ``valid`` never waits for ``ready``."""

    def __init__(self, *args):
        super().__init__(*args)
        self.valid.value = 0

    async def send(self, beats):
        """Send every beat; ``self.cycles`` records the cycle (from the call) of each transfer.
        A beat waiting for ``ready`` sleeps until it rises, not a wake-up every cycle."""
        self.cycles = []
        start = cycle_now()
        for b in beats:
            while next(self.pauses):
                self.valid.value = 0
                await RisingEdge(self.clk)
            self.valid.value = 1
            self.payload.value = pack(self.layout, b)
            while True:
                await ReadOnly()
                if int(self.ready.value) == 1:
                    self.cycles.append(cycle_now() - start)
                    self._stamp()
                    await RisingEdge(self.clk)
                    break
                await RisingEdge(self.ready)
        self.valid.value = 0


class StreamSink(_StreamPort):
    """Takes beats from ``<prefix>__valid/__payload``, holding ``ready`` low where its pause
    generator says so."""

    def __init__(self, *args):
        super().__init__(*args)
        self.ready.value = 0

    async def take(self, n: int, timeout: int = 1_000_000, *, until_last: str | None = None):
        """Take ``n`` beats. With ``until_last``, the name of a payload field: fail at once on
        a beat with that field set before beat n, or on beat n without it (a missing or extra
        beat fails here, not at a timeout). Fails after ``timeout`` cycles without progress.
        With ``ready`` high and nothing offered, it sleeps until ``valid`` rises (``ready``
        stays high), not a wake-up every cycle."""
        got, start = [], cycle_now()
        last = start                    # the cycle of the last beat (or of the call)
        self.cycles = []
        while len(got) < n:
            r = not next(self.pauses)
            self.ready.value = int(r)
            await ReadOnly()
            now = cycle_now()
            if int(self.valid.value) == 1:
                if r:
                    beat = unpack(self.layout, int(self.payload.value))
                    got.append(beat)
                    self.cycles.append(now - start)
                    self._stamp()
                    last = now
                    if until_last is not None and bool(beat[until_last]) != (len(got) == n):
                        raise AssertionError(
                            f"{self.name}: beat {len(got) - 1} has {until_last}="
                            f"{beat[until_last]}, expected {until_last} only on beat {n - 1}: "
                            f"{beat}")
            elif r and now - last < timeout:
                rise = RisingEdge(self.valid)
                if await First(rise, Timer((timeout - (now - last)) * CLOCK_NS,
                                           unit="ns")) is rise:
                    continue            # just after the edge that raised valid
                now = cycle_now()
            if now - last >= timeout:
                raise AssertionError(f"{self.name}: no beat for {timeout} cycles, "
                                     f"{len(got)} of {n} taken")
            await RisingEdge(self.clk)
        self.ready.value = 0
        return got

    async def expect_quiet(self, cycles: int):
        """Fail if a beat is offered in the next ``cycles`` cycles (an extra beat)."""
        self.ready.value = 1
        for _ in range(cycles):
            await ReadOnly()
            if int(self.valid.value) == 1:
                raise AssertionError(f"{self.name}: an extra beat "
                                     f"{unpack(self.layout, int(self.payload.value))}")
            await RisingEdge(self.clk)
        self.ready.value = 0


class BlockTB:
    """One block under cocotb: its configuration and model (the component, for its
    parameters, layouts and timing), named stream sources and sinks, clock, reset, run-time
    registers and counters. ``sources`` and ``sinks`` map a port prefix to its layout."""

    def __init__(self, dut, block_cls, *, sources: dict, sinks: dict, cfg=None):
        self.dut = dut
        self.cfg = cfg if cfg is not None else tb_config()
        self.model = block_cls.from_config(self.cfg)
        self.source = {p: StreamSource(dut, p, lay(self.model), dut.clk)
                       for p, lay in sources.items()}
        self.sink = {p: StreamSink(dut, p, lay(self.model), dut.clk) for p, lay in sinks.items()}
        self.axi = {}

    def cross(self, name: str, seed: int = 0):
        """Plug the named crossing's pause generators into every source and sink."""
        for k, port in enumerate([*self.source.values(), *self.sink.values()]):
            src, snk = crossing(name, seed + 2 * k)
            port.pauses = src if isinstance(port, StreamSource) else snk

    def registers(self, values: dict):
        """Drive run-time register inputs (port name -> value)."""
        for name, v in values.items():
            getattr(self.dut, name).value = int(v)

    async def start(self):
        cocotb.start_soon(Clock(self.dut.clk, CLOCK_NS, unit="ns").start())
        await self.reset()

    async def reset(self, cycles=2):
        self.dut.rst.value = 1
        for s in self.source.values():
            s.valid.value = 0
        await ClockCycles(self.dut.clk, cycles)
        self.dut.rst.value = 0
        await RisingEdge(self.dut.clk)
        await self.after_reset()

    async def after_reset(self):
        """What the block needs after reset before it takes input (nothing by default)."""

    async def perf(self) -> dict:
        """The counters, read in this cycle's read-only phase; returns at the next edge."""
        await ReadOnly()
        p = read_cocotb(self.dut, self.model.perf_layout)
        await RisingEdge(self.dut.clk)
        return p
