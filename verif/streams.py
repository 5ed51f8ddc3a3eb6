"""cocotb helpers shared by the block testbenches: payload packing from Amaranth layouts,
and stream source and sink with idle cycles and back-pressure."""
from __future__ import annotations

import random

from amaranth.hdl import Shape
from amaranth.lib import data

from cocotb.triggers import ReadOnly, RisingEdge


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
