"""Balanced reduction trees, the one generator behind every popcount, adder, min/max and
arg-max tree of the blocks, and a row of pipeline registers to split a tree for the clock."""
from __future__ import annotations

from amaranth.hdl import Signal

# The attributes of a register that copies another so that each copy drives a share of the
# loads (a register fanned out over a wide datapath is placed far from most of them). Yosys
# merges equal registers; ``synth.run`` gives the flip-flops of a signal so marked its
# ``keep`` attribute, which its merging honours. Simulation ignores it.
KEEP_COPY = {"vrex_keep_copy": 1}

__all__ = ["reduce_tree", "register", "tree_stage", "copies", "KEEP_COPY"]


def _node(m, value, name, shape, level: int, index: int):
    if isinstance(value, tuple):
        shapes = shape if isinstance(shape, tuple) else (shape,) * len(value)
        sigs = tuple(Signal(s if s is not None else v.shape(), name=f"{n}_l{level}_{index}")
                     for v, n, s in zip(value, name, shapes))
        m.d.comb += [s.eq(v) for s, v in zip(sigs, value)]
        return sigs
    sig = Signal(shape if shape is not None else value.shape(),
                 name=f"{name}_l{level}_{index}")
    m.d.comb += sig.eq(value)
    return sig


def reduce_tree(m, items, combine, name, *, levels: int | None = None, shape=None):
    """A balanced tree of ``combine(a, b)`` over ``items``.

    Every node of level l is a combinational signal named ``{name}_l{l}_{j}`` of ``shape``
    (default: the shape ``combine`` returns); an odd item passes up a level unchanged. A node
    may be a tuple of values (an arg-max carries (rank, index)): then ``combine`` returns a
    tuple, and ``name`` (and ``shape``, if given) are tuples alike. With ``levels``, only that
    many levels are built and the list of partial results is returned, for :func:`register`
    to split the tree; otherwise the root.
    """
    items = list(items)
    level = 0
    while len(items) > 1 and (levels is None or level < levels):
        nxt = [_node(m, combine(items[j], items[j + 1]), name, shape, level, j // 2)
               for j in range(0, len(items) - 1, 2)]
        if len(items) % 2:
            nxt.append(items[-1])
        items = nxt
        level += 1
    return items if levels is not None else items[0]


def register(m, items, name, domain: str = "sync", *, reset_less: bool = False):
    """One register per item, named ``{name}_{j}``, loaded every cycle: a pipeline stage
    between the two halves of a tree (``reset_less``: a datapath register the domain's
    reset leaves alone). Returns the registers."""
    regs = [Signal(x.shape(), name=f"{name}_{j}", reset_less=reset_less)
            for j, x in enumerate(items)]
    m.d[domain] += [r.eq(x) for r, x in zip(regs, items)]
    return regs


def copies(m, value, count: int, name: str, *, init=0, domain: str = "sync"):
    """``count`` registers loaded with ``value`` every cycle (named ``{name}_{j}``), marked
    :data:`KEEP_COPY` so that synthesis keeps them apart: each drives a share of the loads
    one register would fan out to. Returns the registers."""
    regs = [Signal(value.shape(), name=f"{name}_{j}", init=init, attrs=KEEP_COPY)
            for j in range(count)]
    m.d[domain] += [r.eq(value) for r in regs]
    return regs


def tree_stage(m, items, combine, name, domain: str = "sync"):
    """One level of a :func:`reduce_tree` over ``items`` and its row of registers (both named
    ``{name}``): called once a pipeline stage, a tree of one level a stage. Returns the
    registers."""
    return register(m, reduce_tree(m, items, combine, name, levels=1), name, domain)
