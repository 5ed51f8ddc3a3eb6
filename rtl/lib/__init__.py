"""Pieces the blocks share: reduction trees with optional pipeline registers, performance
counters, products by constants without multipliers, queues offered from their head,
counters with registered last-value flags, the mark of a register's copies."""
from .arith import mul_const
from .count import stepped_counter
from .perf import counter_layout, bump
from .queue import head_queue
from .tree import KEEP_COPY, copies, reduce_tree, register, tree_stage

__all__ = ["reduce_tree", "register", "tree_stage", "counter_layout", "bump", "mul_const",
           "head_queue", "stepped_counter", "copies", "KEEP_COPY"]
