"""Reading a block's performance counters (its ``perf`` struct port) in either tier."""
from __future__ import annotations

from .payload import unpack

__all__ = ["read_cocotb", "read_sim"]


def read_cocotb(dut, layout, port: str = "perf") -> dict:
    """The counters from a cocotb handle (call after ``ReadOnly``)."""
    return unpack(layout, int(getattr(dut, port).value))


def read_sim(ctx, dut, port: str = "perf") -> dict:
    """The counters from the Amaranth simulator (none for a block without them)."""
    if not hasattr(dut, port):
        return {}
    v = ctx.get(getattr(dut, port))
    return {name: int(getattr(v, name)) for name, _ in dut.perf_layout}
