"""Pieces the blocks share: reduction trees with optional pipeline registers, performance
counters."""
from .perf import counter_layout, bump
from .tree import reduce_tree, register

__all__ = ["reduce_tree", "register", "counter_layout", "bump"]
