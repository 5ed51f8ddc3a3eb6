"""cocotb helpers shared by the block testbenches: payload packing from Amaranth layouts,
stream source and sink with idle cycles and back-pressure, and a testbench base class."""
from __future__ import annotations

import random

from amaranth.hdl import Shape
from amaranth.lib import data

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge


def pack(layout, value) -> int:
    """Pack a dict (struct), a list (array) or an int into the layout's bits, recursively."""
    if isinstance(layout, data.Layout):
        word = 0
        for key, field in layout:
            sub = value.get(key, 0) if isinstance(value, dict) else value[key]
            word |= pack(field.shape, sub) << field.offset
        return word
    return int(value) & ((1 << Shape.cast(layout).width) - 1)


def unpack(layout, word: int) -> dict:
    return {name: (word >> f.offset) & ((1 << f.width) - 1) for name, f in layout}


class _StreamPort:
    def __init__(self, dut, prefix, layout, clk, rng: random.Random):
        self.valid = getattr(dut, f"{prefix}__valid")
        self.ready = getattr(dut, f"{prefix}__ready")
        self.payload = getattr(dut, f"{prefix}__payload")
        self.layout, self.clk, self.rng = layout, clk, rng


class StreamSource(_StreamPort):
    """Drives ``<prefix>__valid/__payload``; idles before a beat with probability ``idle``."""

    def __init__(self, *args):
        super().__init__(*args)
        self.valid.value = 0

    async def send(self, beats, idle: float = 0.0):
        """Send every beat; ``self.cycles`` records the cycle (from the call) of each transfer."""
        self.cycles = []
        cycle = 0
        for b in beats:
            while self.rng.random() < idle:
                self.valid.value = 0
                await RisingEdge(self.clk)
                cycle += 1
            self.valid.value = 1
            self.payload.value = pack(self.layout, b)
            while True:
                await ReadOnly()
                fire = int(self.ready.value) == 1
                await RisingEdge(self.clk)
                if fire:
                    self.cycles.append(cycle)
                cycle += 1
                if fire:
                    break
        self.valid.value = 0


class StreamSink(_StreamPort):
    """Takes beats from ``<prefix>__valid/__payload``; holds ``ready`` low with probability
    ``stall`` each cycle. Fails after ``timeout`` cycles without the expected count."""

    def __init__(self, *args):
        super().__init__(*args)
        self.ready.value = 0
        self.cycles = []

    async def take(self, n: int, stall: float = 0.0, timeout: int = 1_000_000):
        got, cycle = [], 0
        self.cycles = []
        while len(got) < n:
            r = self.rng.random() >= stall
            self.ready.value = int(r)
            await ReadOnly()
            if r and int(self.valid.value) == 1:
                got.append(unpack(self.layout, int(self.payload.value)))
                self.cycles.append(cycle)
            await RisingEdge(self.clk)
            cycle += 1
            if cycle > timeout:
                raise AssertionError(f"no progress: {len(got)} of {n} beats after {cycle} cycles")
        self.ready.value = 0
        return got


class BlockTB:
    """One DUT under cocotb: its Python model (parameters and layouts), a source on ``i`` and a
    sink on ``o``, clock, reset and the performance counters."""

    def __init__(self, dut, model, seed=0):
        self.dut, self.model = dut, model
        self.rng = random.Random(seed)
        self.src = StreamSource(dut, "i", model.in_layout, dut.clk, self.rng)
        self.sink = StreamSink(dut, "o", model.out_layout, dut.clk, self.rng)

    async def start(self):
        cocotb.start_soon(Clock(self.dut.clk, 10, unit="ns").start())
        await self.reset()

    async def reset(self, cycles=2):
        self.dut.rst.value = 1
        self.dut.i__valid.value = 0
        await ClockCycles(self.dut.clk, cycles)
        self.dut.rst.value = 0
        await RisingEdge(self.dut.clk)
        await self.after_reset()

    async def after_reset(self):
        """What the block needs after reset before it takes input (nothing by default)."""

    def perf(self):
        return unpack(self.model.perf_layout, int(self.dut.perf.value))
