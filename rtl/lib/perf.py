"""Performance counters: an enumerated, named set per block, read as one struct port."""
from __future__ import annotations

from amaranth.lib import data

__all__ = ["counter_layout", "bump"]


def counter_layout(names, bits: int) -> data.StructLayout:
    """The ``perf`` port of a block: one ``bits``-wide counter per name, in this order."""
    return data.StructLayout({n: bits for n in names})


def bump(counter, by=1):
    """The statement that advances ``counter`` by ``by`` (it wraps at its width)."""
    return counter.eq(counter + by)
