"""synth/bram_outreg.py: a block RAM's output register moves into an ECP5 DP16KD only where it
is a plain register (the port's clock, no enable, no reset, the read data's only load)."""
import json

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from synth.bram_outreg import absorb
from synth.run import _map_fpga, _cells
from verif.lib.traces import ROOT
from vrex.emit import write_verilog


class FourReads(wiring.Component):
    """Four 512 x 16 memories (one DP16KD each), each read registered differently:
    ``plain`` (reset-less, always loads: moves), ``enabled`` (a clock enable), ``reset`` (a
    synchronous reset), ``shared`` (the read data also leaves the block): these stay."""
    addr: In(9)
    wdata: In(16)
    we: In(1)
    en: In(1)
    plain: Out(16)
    enabled: Out(16)
    reset: Out(16)
    shared: Out(16)
    shared_raw: Out(16)

    def elaborate(self, platform):
        m = Module()
        regs = {}
        for name in ("plain", "enabled", "reset", "shared"):
            m.submodules[name] = mem = Memory(shape=16, depth=512, init=[])
            w, r = mem.write_port(), mem.read_port()
            m.d.comb += [w.addr.eq(self.addr), w.data.eq(self.wdata), w.en.eq(self.we),
                         r.addr.eq(~self.addr)]
            regs[name] = q = Signal(16, name=f"{name}_q", reset_less=name != "reset")
            if name == "enabled":
                with m.If(self.en):
                    m.d.sync += q.eq(r.data)
            else:
                m.d.sync += q.eq(r.data)
            m.d.comb += getattr(self, name).eq(q)
            if name == "shared":
                m.d.comb += self.shared_raw.eq(r.data)
        return m


def test_only_plain_output_registers_move():
    out = ROOT / "build" / "synth_test" / "bram_outreg"
    write_verilog(FourReads(), "four", out)
    _map_fpga("ecp5", "four", "read_verilog four.v; ", out, " -json four_ecp5.json")
    by, _ = _cells(out / "ecp5_stat.json")
    assert by.get("DP16KD") == 4, by
    netlist = out / "four_ecp5.json"
    before = json.loads(netlist.read_text())
    assert absorb(netlist) == 16
    after = json.loads(netlist.read_text())
    top = lambda d: next(v for v in d["modules"].values() if v.get("attributes", {}).get("top"))
    cells_b, cells_a = top(before)["cells"], top(after)["cells"]
    ffs = lambda cells: sum(c["type"] == "TRELLIS_FF" for c in cells.values())
    assert ffs(cells_b) - ffs(cells_a) == 16
    rams = [c for c in cells_a.values() if c["type"] == "DP16KD"]
    modes = sorted(c["parameters"].get(f"REGMODE_{s}", "NOREG").strip()
                   for c in rams for s in "AB")
    assert modes.count("OUTREG") == 1, modes
    # the moved RAM drives the plain register's net (the block's output) from its own pins
    ram = next(c for c in rams if "OUTREG" in (c["parameters"].get("REGMODE_A", ""),
                                              c["parameters"].get("REGMODE_B", "")))
    side = "A" if ram["parameters"].get("REGMODE_A", "").strip() == "OUTREG" else "B"
    plain = top(after)["ports"]["plain"]["bits"]
    assert ram["connections"][f"OCE{side}"] == ["1"]
    driven = [ram["connections"][f"DO{side}{i}"][0] for i in range(18)
              if f"DO{side}{i}" in ram["connections"]]
    assert set(plain) <= set(driven)
    assert absorb(netlist) == 0                                 # nothing left to move
