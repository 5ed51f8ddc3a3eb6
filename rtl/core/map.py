"""The core's register map: :mod:`vrex.regmap`'s registers, descriptor and error codes, and
the performance counters of the blocks the core holds (each block's ``PERF``, in this order).

:func:`markdown` is the map's page (``python -m rtl.emit --registers > docs/registers.md``);
:func:`c_header` the C header host software includes (``build/verilog/vrex_regs.h``, ``make
verilog``)."""
from __future__ import annotations

from vrex import regmap

from ..attn.engine import AttentionEngine
from ..dre.hcu import HashClusterUnit
from ..dre.wtu import WicsumThresholdUnit
from ..kvmu.kvmu import KvMemoryManager

__all__ = ["CORE_PERF", "counters", "perf_names", "perf_registers", "register_map",
           "offsets", "c_header", "markdown"]

# the sequencer's own counters (rtl.core.core.VrexCore.PERF)
CORE_PERF = ("descriptors", "busy", "predict", "attend", "hash", "store", "dma_bursts",
             "dma_beats", "out_bursts", "errors", "swap", "ahead")


def counters() -> dict[str, tuple[str, ...]]:
    """Block name -> its counters' names, in the order of the map."""
    return {"hcu": HashClusterUnit.PERF, "wtu": WicsumThresholdUnit.PERF,
            "attn": AttentionEngine.PERF, "kvmu": KvMemoryManager.PERF, "core": CORE_PERF}


def perf_registers() -> list[regmap.Register]:
    return regmap.perf_registers(counters())


def perf_names() -> tuple[str, ...]:
    """The counters as the register file holds them: ``<block>_<counter>``."""
    return tuple(r.name[5:].lower() for r in perf_registers())


def register_map() -> list[regmap.Register]:
    return regmap.register_map(counters())


def offsets() -> dict[str, int]:
    return regmap.offsets(counters())


def c_header() -> str:
    return regmap.c_header(counters())


def markdown() -> str:
    return regmap.markdown(counters())
