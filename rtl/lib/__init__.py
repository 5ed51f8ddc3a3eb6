"""Pieces the blocks share: reduction trees with optional pipeline registers, performance
counters, products by constants without multipliers."""
from .arith import mul_const
from .perf import counter_layout, bump
from .tree import reduce_tree, register, tree_stage

__all__ = ["reduce_tree", "register", "tree_stage", "counter_layout", "bump", "mul_const"]
