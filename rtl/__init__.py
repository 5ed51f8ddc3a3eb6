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

__all__ = ["BLOCKS", "Block", "HashClusterUnit", "WicsumThresholdUnit", "AttentionEngine",
           "SystolicArray", "ExpUnit", "KvMemoryManager", "CoreRegisters", "VrexCore"]


@dataclass(frozen=True)
class Block:
    """A registered block: its component class and its group. The group names the block's
    Config section, its golden model (``golden/<group>.py``), its verification folder
    (``verif/<group>/``) and its docs page (``docs/<group>.md``); a group of several blocks
    names their testbenches ``tb_<part>.py`` and benches ``bench_<part>.py``, where the block
    is named ``<group>_<part>``."""
    cls: type
    group: str

    def from_config(self, cfg):
        return self.cls.from_config(cfg)

    def verif_module(self, name: str, role: str) -> str:
        """``verif.<group>.<role>`` (or ``<role>_<part>`` in a group of several blocks)."""
        if name == self.group:
            return f"verif.{self.group}.{role}"
        return f"verif.{self.group}.{role}_{name.removeprefix(self.group + '_')}"


# block name -> Block; the name is the block's Verilog module (<name>.v; not a C++ header's
# name such as `array`: Verilator's model build would include its executable)
BLOCKS = {
    "hcu": Block(HashClusterUnit, "hcu"),
    "wtu": Block(WicsumThresholdUnit, "wtu"),
    "attn": Block(AttentionEngine, "attn"),
    "attn_array": Block(SystolicArray, "attn"),
    "attn_exp": Block(ExpUnit, "attn"),
    "kvmu": Block(KvMemoryManager, "kvmu"),
    "core_regs": Block(CoreRegisters, "core"),
    "core": Block(VrexCore, "core"),
}
