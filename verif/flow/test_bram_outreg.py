"""synth/bram_outreg.py: a block RAM's output register moves into an ECP5 DP16KD only where it
is a plain register (the port's clock, no reset, the read data's only load; its clock enable,
if any, becomes the RAM's output clock enable)."""
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
    ``plain`` (reset-less, always loads) moves, ``enabled`` (reset-less, a clock enable) when
    asked; ``reset`` (a synchronous reset) and ``shared`` (the read data also leaves the
    block) stay."""
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
    assert absorb(netlist) == 16                                # plain alone
    netlist.write_text(json.dumps(before))
    assert absorb(netlist, enabled=True) == 32
    after = json.loads(netlist.read_text())
    top = lambda d: next(v for v in d["modules"].values() if v.get("attributes", {}).get("top"))
    cells_b, cells_a = top(before)["cells"], top(after)["cells"]
    ffs = lambda cells: sum(c["type"] == "TRELLIS_FF" for c in cells.values())
    assert ffs(cells_b) - ffs(cells_a) == 32
    rams = [c for c in cells_a.values() if c["type"] == "DP16KD"]
    modes = sorted(c["parameters"].get(f"REGMODE_{s}", "NOREG").strip()
                   for c in rams for s in "AB")
    assert modes.count("OUTREG") == 2, modes
    # each moved RAM drives its register's net (the block's output) from its own pins, its
    # output register enabled as the flip-flops were: always (plain), by ``en`` (enabled)
    en = top(after)["ports"]["en"]["bits"]
    for name, oce in (("plain", ["1"]), ("enabled", en)):
        bits = top(after)["ports"][name]["bits"]
        ram, side = next((c, s) for c in rams for s in "AB"
                         if c["parameters"].get(f"REGMODE_{s}", "").strip() == "OUTREG"
                         and set(bits) <= {c["connections"].get(f"DO{s}{i}", [None])[0]
                                           for i in range(18)})
        assert ram["connections"][f"OCE{side}"] == oce, name
    assert absorb(netlist, enabled=True) == 0                   # nothing left to move
