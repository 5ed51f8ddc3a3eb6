"""Reading a block's performance counters (its ``perf`` struct port) in either tier."""
from __future__ import annotations

__all__ = ["unpack", "read_cocotb", "read_sim"]


def unpack(layout, word: int) -> dict:
    """A flat struct layout's fields from its packed value."""
    return {name: (word >> f.offset) & ((1 << f.width) - 1) for name, f in layout}


def read_cocotb(dut, layout, port: str = "perf") -> dict:
    """The counters from a cocotb handle (call after ``ReadOnly``)."""
    return unpack(layout, int(getattr(dut, port).value))


def read_sim(ctx, dut, port: str = "perf") -> dict:
    """The counters from the Amaranth simulator."""
    v = ctx.get(getattr(dut, port))
    return {name: int(getattr(v, name)) for name, _ in dut.perf_layout}
