"""The hardware, and nothing else: Amaranth components grouped by block.

``rtl/lib/`` holds the pieces blocks share; ``rtl/dre/`` the retrieval engine's HCU and WTU.
:data:`BLOCKS` is the one registry of top-level blocks: emission, lint, synthesis, benches
and the registry test iterate it. Every block class has ``from_config(cfg)``.
"""
from .dre.hcu import HashClusterUnit
from .dre.wtu import WicsumThresholdUnit

__all__ = ["BLOCKS", "HashClusterUnit", "WicsumThresholdUnit"]

# block name -> component class; the name keys the block's Config section, its folders
# (golden/<name>.py, verif/<name>/) and its Verilog (<name>.v)
BLOCKS = {
    "hcu": HashClusterUnit,
    "wtu": WicsumThresholdUnit,
}
