"""The hardware, and nothing else: Amaranth components grouped by block.

``rtl/lib/`` holds the pieces blocks share; ``rtl/dre/`` the retrieval engine's HCU and WTU;
``rtl/attn/`` the attention engine's parts; ``rtl/kvmu/`` the KV memory manager;
``rtl/core/`` the core that joins them. :data:`BLOCKS` is the one registry of synthesisable
blocks: emission (``rtl.emit``), lint, synthesis, benches, the demo and the registry test
iterate it.
"""
from __future__ import annotations

from dataclasses import dataclass

from .attn.array import SystolicArray
from .attn.engine import AttentionEngine
from .attn.exp import ExpUnit
from .dre.hcu import HashClusterUnit
from .dre.wtu import WicsumThresholdUnit
from .kvmu.kvmu import KvMemoryManager
from .core.regs import CoreRegisters
from .core.core import VrexCore

__all__ = ["BLOCKS", "Block", "Synthesis", "HashClusterUnit", "WicsumThresholdUnit",
           "AttentionEngine", "SystolicArray", "ExpUnit", "KvMemoryManager", "CoreRegisters", "VrexCore"]


@dataclass(frozen=True)
class Synthesis:
    """How ``make synth`` (``synth.run``) builds a block: read by the flow, set in one place,
    the block's registry entry (each setting's why beside it there)."""
    target_mhz: int = 100           # nextpnr's clock target (timing-driven placement aims at it)
    seeds: tuple[int, ...] = (1,)   # placement seeds: the report gives each seed's Fmax and
                                    # the lowest as the block's
    pnr_args: tuple[str, ...] = ()  # nextpnr's options beyond the flow's own
    pnr_timeout_s: int = 1800       # a seed slower than this: Fmax "not reached"
    bram_outreg: bool = False       # block RAM output registers into the DP16KDs
                                    # (synth/bram_outreg.py), ...
    bram_outreg_enabled: bool = False   # ... registers with a clock enable too
    dsp_regs: bool = False          # multipliers' operand/product registers into the
                                    # MULT18X18Ds (synth/dsp_regs.py)
    global_reset: bool = False      # the reset on the global network (synth/global_reset.py)
    black_boxes: tuple[tuple[str, str], ...] = ()   # (submodule, its block): left out
    no_generic: str | None = None   # why Yosys's generic-gates count is not run (None: run)
    minutes: float = 1.0            # synthesis time without place and route (two blocks at a
                                    # time, 2 cores): make synth starts the longest first


@dataclass(frozen=True)
class Block:
    """A registered block: its component class, its group and how it is synthesised. The
    group names the block's Config section, its golden model (``golden/<group>.py``), its
    verification folder (``verif/<group>/``) and its docs page (``docs/<group>.md``); a group
    of several blocks names their testbenches ``tb_<part>.py`` and benches
    ``bench_<part>.py``, where the block is named ``<group>_<part>``."""
    cls: type
    group: str
    synth: Synthesis = Synthesis()

    def from_config(self, cfg):
        return self.cls.from_config(cfg)


# The retrieval engine's blocks are held to 125 MHz over three seeds. A reset of thousands of
# loads in the fabric (the KVMU's 5 555, the WTU's 10 484, the engine's 15 076) congests
# routing until the router does not converge; on the global network each routes in minutes.
# Yosys's ECP5 mapping leaves block RAM output registers and multiplier registers in the
# fabric, where vendor flows absorb them: the HCU's RAMs' 1 024 output bits, the WTU's
# registered read of its row memory (880 bits), the engine's feeder (registers under the
# feeder's enable, held by the array's back-pressure); the WTU's 16 lane products and its
# threshold's three partial products (1 118 flip-flops), the array's cell products (a cell's
# operands go on to the next cell), the exp unit's two partial products a lane. The engine's
# analytical placer weighs timing at 30 (default 10), which pulls in its long routes (4-6 ns
# from a register to its loads); its placement and routing takes 20-50 minutes a seed. The
# WTU's too: its limits are routes of 2-3 ns from the walk's decision flags into the
# remainders' carry chains and from the code memory to the union memory, and with the
# default weight its seeds moved from 130-134 MHz to 121-124 MHz with nothing but the names
# of its parts' signals changed. The KVMU's too (80.62 MHz with the default weight, 85.30
# at 30, one seed). Yosys's
# generic abc pass did not finish in 50 minutes on the core's own logic (its many clock-enable
# domains are extracted one at a time); the FPGA flows map it in minutes.
_DRE = dict(target_mhz=125, seeds=(1, 2, 3), bram_outreg=True, global_reset=True)

# block name -> Block; the name is the block's Verilog module (<name>.v; not a C++ header's
# name such as `array`: Verilator's model build would include its executable)
BLOCKS = {
    "hcu": Block(HashClusterUnit, "hcu", Synthesis(**_DRE, minutes=2)),
    "wtu": Block(WicsumThresholdUnit, "wtu", Synthesis(
        **_DRE, pnr_args=("--placer-heap-timingweight", "30"), dsp_regs=True, minutes=6)),
    "attn": Block(AttentionEngine, "attn", Synthesis(
        seeds=(1, 2, 3), pnr_args=("--placer-heap-timingweight", "30"), pnr_timeout_s=5400,
        bram_outreg=True, bram_outreg_enabled=True, dsp_regs=True, global_reset=True,
        minutes=11)),
    "attn_array": Block(SystolicArray, "attn", Synthesis(dsp_regs=True, global_reset=True,
                                                         minutes=4)),
    "attn_exp": Block(ExpUnit, "attn", Synthesis(dsp_regs=True, minutes=7)),
    "kvmu": Block(KvMemoryManager, "kvmu", Synthesis(
        global_reset=True, pnr_args=("--placer-heap-timingweight", "30"), minutes=3)),
    "core_regs": Block(CoreRegisters, "core", Synthesis(minutes=3)),
    "core": Block(VrexCore, "core", Synthesis(
        black_boxes=(("engine", "attn"), ("hcu", "hcu"), ("wtu", "wtu"), ("kvmu", "kvmu")),
        no_generic="not run: Yosys's generic abc pass did not finish in 50 min on it",
        minutes=13)),
}
