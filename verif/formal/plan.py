"""What ``make formal`` proves, block by block, and the small build it proves it on.

Each block runs three jobs on :func:`formal_config`: ``bmc`` (every property holds on every
input sequence for ``bmc`` cycles from reset), ``cover`` (each cover event of the rules, a
transfer on every output stream, a burst of several beats on each bus channel, an answer of
each code, is reached within ``cover`` cycles: the bmc depth is enough to reach them) and,
where it closes, ``prove`` (k-induction of that length: the properties hold at every depth).
``quick`` jobs run in ``make test`` too (``verif/formal/test_formal.py``)."""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Target", "TARGETS", "formal_config", "CORE_CUT"]


@dataclass(frozen=True)
class Target:
    block: str
    bmc: int                    # depth of the bounded proof
    cover: int                  # depth the cover events are looked for in
    prove: int | None = None    # k-induction length, where it closes
    quick: int | None = None    # the bounded proof's depth in make test (None: not there)
    script: str = ""            # Yosys commands after prep
    why: str = ""


# the core's arithmetic blocks are cut (their outputs free, cycle by cycle): the properties of
# the core's own bus ports then hold whatever the blocks do, and the proof stays small
CORE_CUT = "cutpoint top.dut.engine top.dut.hcu top.dut.wtu"

TARGETS = (
    Target("attn_exp", bmc=16, cover=12, prove=4, quick=8),
    Target("attn_array", bmc=16, cover=16, quick=6),
    Target("hcu", bmc=24, cover=24, quick=8),
    Target("wtu", bmc=24, cover=40, quick=8),
    Target("attn", bmc=16, cover=40, quick=4),
    Target("kvmu", bmc=48, cover=48, quick=12,
           why="a store's write burst answered by cycle 29, a fetch's read burst by 46"),
    Target("core_regs", bmc=48, cover=48, quick=24,
           why="a whole descriptor (21 words) taken by cycle 44"),
    Target("core", bmc=40, cover=56, script=CORE_CUT,
           why="a descriptor taken and its first reads and writes answered"),
)


def formal_config():
    """The smallest build the rules accept that still has every part: one layer, one KV
    head, blocks of four tokens, bursts of up to four beats, two reads and two writes in
    flight, four clusters, tables of 16 entries."""
    from vrex.config import Config
    return Config.from_preset(
        "paper", n_layers=1, n_q_heads=2, n_kv_heads=1, head_dim=8, n_hp=8, th_hd=7,
        window=16, buckets=1, block_tokens=4, kvmu_clusters=4, kvmu_blocks=16,
        near_blocks=16, kvmu_bus_bytes=8, kvmu_max_burst=4, kvmu_max_reads=2,
        kvmu_max_writes=2, wtu_row_entries=16, attn_n=2, attn_b_rows=8, attn_k_buf=64,
        core_queue_depth=1, core_dma_depth=16, core_max_tokens=16, hcu_lanes=1, wtu_lanes=1)
