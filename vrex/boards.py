"""The FPGA boards the core is built for: the device, the clocks, the on-chip memory and the
serial link, and the build (a :class:`vrex.config.Config` of the reference geometry, its
hardware sized to fit beside that memory). ``make fpga`` builds :data:`BOARDS`'s ``ulx3s``;
the board top's simulation runs the same design with a fast serial line.

The ULX3S build keeps the model's geometry and every ReSV setting of either preset; it
shrinks what the on-chip memory cannot back anyway: a stream of a few hundred tokens (a
crop of the bundled trace, ``golden.layout.board_trace``) opens tens of clusters a layer, so the
cluster window (64), the KVMU's tables (32 clusters a layer, 64 logical blocks), the WTU's
row (256 candidates), the attention's B (64 rows: longer sets in chunks) and the longest
step (64 tokens) are sized for that, and a KV block holds 4 tokens (less memory lost to the
last block of each small cluster).
"""
from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Board", "BOARDS", "board_config"]


@dataclass(frozen=True)
class Board:
    name: str
    device: str                     # nextpnr-ecp5's device option
    package: str
    clk_in_mhz: float               # the board's oscillator
    clk_mhz: float                  # the core's clock, from the PLL
    mem_bytes: int                  # on-chip memory on the core's AXI4 master
    baud: int                       # the serial link to the host
    timeout_ms: float               # a frame's byte that does not come within it: TIMEOUT
    build: dict = field(default_factory=dict)       # Config fields beside the preset's
    far_slots: int = 16             # logical blocks of the far tier (compact_layout)
    crop: dict = field(default_factory=dict)        # the trace it runs (golden.layout)

    @property
    def divisor(self) -> int:
        """Clock cycles a bit of the serial line."""
        return round(self.clk_mhz * 1e6 / self.baud)

    @property
    def timeout_cycles(self) -> int:
        return round(self.timeout_ms * 1e3 * self.clk_mhz)


BOARDS = {
    "ulx3s": Board(
        name="ulx3s", device="--85k", package="CABGA381", clk_in_mhz=25, clk_mhz=100,
        mem_bytes=224 * 1024, baud=3_000_000, timeout_ms=20,
        build=dict(block_tokens=4, near_blocks=96, kvmu_clusters=32, kvmu_blocks=64,
                   window=64, attn_b_rows=64, wtu_row_entries=256, core_max_tokens=64,
                   attn_n=4, hcu_lanes=8, wtu_lanes=8),
        far_slots=24,
        crop=dict(steps=5, tokens_per_step=8)),
}


def board_config(board: str | Board = "ulx3s", preset: str = "paper", **kw):
    """The board's build under ``preset`` (the presets differ in run-time registers and the
    hash input only: one bitstream runs both)."""
    from vrex.config import Config
    b = BOARDS[board] if isinstance(board, str) else board
    return Config.from_preset(preset, **{**b.build, **kw})

