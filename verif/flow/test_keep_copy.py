"""Registers marked as copies (``rtl.lib.KEEP_COPY``) stay apart through the FPGA flows: each
copy drives its own share of the loads (Yosys would merge equal registers)."""
from amaranth.hdl import Array, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rtl.lib import KEEP_COPY
from synth.run import KEEP_COPIES, _cells, _map_fpga, _yosys
from vrex.emit import write_verilog

from verif.lib.traces import ROOT


class Picks(wiring.Component):
    """Four lanes, each picking one of eight bytes by a 3-bit index loaded from ``sel``
    (its own register, or one register for all, as ``copies`` says)."""
    sel: In(3)
    en: In(1)
    w: In(4 * 8 * 8)
    o: Out(4 * 8)

    def __init__(self, copies: bool):
        self._copies = copies
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        regs = [Signal(3, name=f"sel_{r}", attrs=KEEP_COPY if self._copies else {})
                for r in range(4)]
        with m.If(self.en):
            m.d.sync += [r_.eq(self.sel) for r_ in regs]
        for r in range(4):
            words = Array(self.w[(r * 8 + t) * 8:][:8] for t in range(8))
            m.d.comb += self.o[r * 8:][:8].eq(words[regs[r]])
        return m


def _flip_flops(name, copies, family):
    out = ROOT / "build" / "synth_test" / f"keep_copy_{name}"
    out.mkdir(parents=True, exist_ok=True)
    write_verilog(Picks(copies), name, out)
    read = f"read_verilog {name}.v; {KEEP_COPIES}"
    if family == "ice40":
        _yosys(f"{read}synth_ice40 -top {name}; tee -q -o ice40_stat.json stat -json", out,
               "ice40.log")
    else:
        _map_fpga(family, name, read, out)
    by, _ = _cells(out / f"{family}_stat.json")
    return sum(v for k, v in by.items() if k in ("TRELLIS_FF", "FDRE", "FDSE") or
               k.startswith("SB_DFF"))


def test_marked_copies_stay_apart_unmarked_ones_merge():
    for family in ("ecp5", "xc7", "ice40"):
        assert _flip_flops("picks_copies", True, family) == 4 * 3, family
        assert _flip_flops("picks_merged", False, family) == 3, family
