"""Pieces the blocks share: reduction trees with optional pipeline registers, performance
counters, products by constants without multipliers, queues offered from their head,
counters with registered last-value flags, the mark of a register's copies."""
from .arith import mul_const
from .count import stepped_counter
from .perf import counter_layout, bump
from .queue import head_queue
from .tree import copies, reduce_tree, register, tree_stage

__all__ = ["reduce_tree", "register", "tree_stage", "counter_layout", "bump", "mul_const",
           "head_queue", "stepped_counter", "copies", "KEEP_COPY"]

# The attributes of a register that copies another so that each copy drives a share of the
# loads (a register fanned out over a wide datapath is placed far from most of them). Yosys
# merges equal registers; ``synth.run`` gives the flip-flops of a signal so marked its
# ``keep`` attribute, which its merging honours. Simulation ignores it.
KEEP_COPY = {"vrex_keep_copy": 1}
