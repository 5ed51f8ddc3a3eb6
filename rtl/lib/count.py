"""A position counter whose "at its last value" flags are registers, for loops whose step
conditions come late in the cycle."""
from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Mux, Signal

__all__ = ["stepped_counter", "SteppedCounter"]


@dataclass(frozen=True)
class SteppedCounter:
    """A :func:`stepped_counter`: its position, its combinational next value, the step and
    zero signals its caller drives, and its "at last" flags by key."""
    pos: Signal
    next: Signal
    inc: Signal
    zero: Signal
    at: dict


def stepped_counter(m, name: str, width: int, lasts: dict):
    """A ``width``-bit counter that the caller steps (``inc``) or sends back to 0 (``zero``,
    which wins over ``inc``; neither: it holds), both combinational signals the caller
    drives, and for each ``key: last`` of ``lasts`` (values from registers) a register
    ``at[key]`` saying whether the counter stands at ``last``.

    Each flag's next value is chosen by ``zero`` and ``inc`` among three compares run from
    registers (``last == 0``, ``pos + 1 == last``, ``pos == last``), so the caller's step
    conditions drive only multiplexer selects, not an increment and a compare in a row (for
    the clock). Like the comparison of a next value, the flags follow ``last`` a cycle
    behind when it changes, and are clear in the first cycle after reset. Returns a
    :class:`SteppedCounter`.
    """
    pos = Signal(width, name=name)
    nxt = Signal(width, name=f"{name}_next")
    inc, zero = Signal(name=f"{name}_inc"), Signal(name=f"{name}_zero")
    step = (pos + 1)[:width]
    m.d.comb += nxt.eq(Mux(zero, 0, Mux(inc, step, pos)))
    m.d.sync += pos.eq(nxt)
    at = {}
    for key, last in lasts.items():
        flag = Signal(name=f"{name}_at_{key}")
        m.d.sync += flag.eq(Mux(zero, last == 0, Mux(inc, step == last, pos == last)))
        at[key] = flag
    return SteppedCounter(pos=pos, next=nxt, inc=inc, zero=zero, at=at)
