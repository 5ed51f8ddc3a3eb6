"""What ``make formal`` proves, block by block, and the small build it proves it on.

Each block runs three jobs on :func:`formal_config`: ``bmc`` (every property holds on every
input sequence for ``bmc`` cycles from reset), ``cover`` (each cover event of the rules, a
transfer on every output stream, a burst of several beats on each bus channel, an answer of
each code, is reached within ``cover`` cycles: the bmc depth is enough to reach them) and,
where it closes, ``prove`` (k-induction of that length: the properties hold at every depth).
``quick`` jobs run in ``make test`` too (``verif/formal/test_formal.py``)."""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Target", "TARGETS", "PARTS", "formal_config", "CORE_CUT"]


@dataclass(frozen=True)
class Target:
    block: str
    bmc: int                    # depth of the bounded proof
    cover: int                  # depth the cover events are looked for in
    prove: int | None = None    # k-induction length, where it closes
    quick: int | None = None    # the bounded proof's depth in make test (None: not there)
    script: str = ""            # Yosys commands after prep


# the core's arithmetic blocks are cut (their outputs free, cycle by cycle): the properties of
# the core's own bus ports then hold whatever the blocks do, and the proof stays small
CORE_CUT = "cutpoint top.dut.engine top.dut.hcu top.dut.wtu"

TARGETS = (
    Target("attn_exp", bmc=16, cover=12, prove=4, quick=8),
    Target("attn_array", bmc=16, cover=16, quick=6),
    Target("hcu", bmc=24, cover=24, quick=8),
    Target("wtu", bmc=24, cover=40, quick=8),
    Target("attn", bmc=16, cover=40, quick=4),
    Target("kvmu", bmc=28, cover=28, quick=12),
    Target("core_regs", bmc=64, cover=72, quick=24),
    Target("dma_reader", bmc=12, cover=16, quick=8),
    Target("output_writer", bmc=16, cover=16, quick=8),
    Target("image_writer", bmc=12, cover=16, quick=8),
    Target("core", bmc=24, cover=24, script=CORE_CUT),
)


def _movers():
    from rtl.core.dma import DmaReader, ImageWriter, OutputWriter
    return {
        "dma_reader": lambda cfg: DmaReader(bus_bytes=cfg.kvmu_bus_bytes,
                                            addr_bits=cfg.kvmu_addr_bits, burst=16,
                                            depth=cfg.core_dma_depth),
        # eight values a beat: two bus beats a burst at 8 bytes
        "output_writer": lambda cfg: OutputWriter(
            n=8, value_bits=8 + cfg.out_frac_bits, row_values=cfg.head_dim,
            bus_bytes=cfg.kvmu_bus_bytes, addr_bits=cfg.kvmu_addr_bits),
        "image_writer": lambda cfg: ImageWriter(bus_bytes=cfg.kvmu_bus_bytes,
                                                addr_bits=cfg.kvmu_addr_bits)}


# the core's bus movers, proven alone as they are built in VrexCore (their bursts over the
# whole address space, 4 KB pages and all; inside the core their jobs come from the sequencer)
PARTS = _movers()


def formal_config(**kw):
    """The smallest build the rules accept that still has every part: one layer, one KV
    head of 8, blocks of four tokens, bursts of up to four beats, two reads and two writes in
    flight, four clusters, a near ring of four blocks, tables of 16 entries; ``kw`` changes
    fields of it."""
    from vrex.config import Config
    return Config.from_preset("paper", **{**dict(
        n_layers=1, n_q_heads=2, n_kv_heads=1, head_dim=8, n_hp=8, th_hd=7,
        window=16, buckets=1, block_tokens=4, kvmu_clusters=4, kvmu_blocks=16,
        near_blocks=4, kvmu_bus_bytes=8, kvmu_max_burst=4, kvmu_max_reads=2,
        kvmu_max_writes=2, wtu_row_entries=16, attn_n=2, attn_b_rows=8, attn_k_buf=64,
        core_queue_depth=1, core_dma_depth=16, core_max_tokens=16, hcu_lanes=1,
        wtu_lanes=1), **kw})
