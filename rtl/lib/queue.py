"""A first-in first-out queue offered from its head, for streams whose ``ready`` must reach
few registers."""
from __future__ import annotations

from amaranth.hdl import Mux, Signal
from amaranth.lib import memory

__all__ = ["head_queue"]


def head_queue(m, name: str, shape, depth: int, *, put, data, ready, valid_copies=()):
    """A queue of ``depth`` entries in a memory read without a clock (a LUT RAM on FPGAs)
    whose head is offered as it stands: no output register loaded under ``ready``, so the
    consumer's ``ready`` reaches the read pointer and the level counter alone.

    ``put`` writes ``data`` at the tail (the caller keeps room for it: nothing here
    refuses a write); ``ready`` is the consumer's. Returns ``(valid, head, get)``:
    ``valid`` a registered flag (the queue holds an entry), ``head`` the entry at the head
    (the memory's output), ``get`` ``valid & ready`` (the head is taken this cycle).
    The memory is the submodule ``name``; a written entry is offered the cycle after.
    ``valid_copies``: registers of the caller's (marked ``KEEP_COPY``, say) loaded with
    ``valid``'s next value beside it, for a consumer that splits its loads.
    """
    words = memory.Memory(shape=shape, depth=depth, init=[])
    m.submodules[name] = words
    wr, rd = words.write_port(), words.read_port(domain="comb")
    tail = Signal(range(depth), name=f"{name}_tail")
    head = Signal(range(depth), name=f"{name}_head")
    level = Signal(range(depth + 1), name=f"{name}_level")
    level_next = Signal(range(depth + 1), name=f"{name}_level_next")
    valid = Signal(name=f"{name}_valid")
    get = Signal(name=f"{name}_get")
    step = (lambda v: Mux(v == depth - 1, 0, v + 1))
    m.d.comb += [get.eq(valid & ready),
                 rd.addr.eq(head), wr.addr.eq(tail), wr.data.eq(data), wr.en.eq(put),
                 level_next.eq(level + put - get)]
    with m.If(put):
        m.d.sync += tail.eq(step(tail))
    with m.If(get):
        m.d.sync += head.eq(step(head))
    m.d.sync += [level.eq(level_next), valid.eq(level_next != 0)]
    m.d.sync += [c.eq(level_next != 0) for c in valid_copies]
    return valid, rd.data, get
