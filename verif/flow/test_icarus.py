"""The emitted Verilog under Icarus Verilog with cocotb's default flags (``-g2012``).

Under SystemVerilog rules Yosys' start-up of ``always @*`` processes raises no event, so the
plain emission leaves combinational outputs X from time 0 (shown on a small module); the
Verilog for event-driven simulators (:func:`vrex.emit.for_event_simulators`) starts them.
The small blocks' Verilog tiers run on it at one build point each (``SIM=icarus`` runs any
point the same way): the exp unit and the register file in ``make test``, the others in
``make icarus`` (and ``make soak``). Icarus comes from Debian (``make setup`` installs it
where it can); without it these tests skip, naming it.
"""
import shutil
import subprocess

import pytest
from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import Out

from verif.attn.test_verilog import ARRAY_POINTS, EXP_POINTS
from verif.core.test_sim import POINTS as REGS_POINTS
from verif.hcu.test_verilog import POINTS as HCU_POINTS
from verif.kvmu.test_verilog import POINTS as KVMU_POINTS
from verif.lib.runner import run_point
from verif.wtu.test_verilog import POINTS as WTU_POINTS
from vrex.emit import emit_verilog, for_event_simulators

IVERILOG = shutil.which("iverilog")
needs_icarus = pytest.mark.skipif(IVERILOG is None, reason="Icarus Verilog (iverilog) is not "
                                  "installed: `make setup` installs Debian's package as root")

# block: (build point, Config, the point's test filter in its Verilator tier)
POINTS = {
    "attn_exp": ("default", EXP_POINTS["default"], None),
    "core_regs": ("q1_l2_bus8", REGS_POINTS["q1_l2_bus8"], None),
    "attn_array": ("n4", ARRAY_POINTS["n4"], None),
    "hcu": ("l4_w64_h16", HCU_POINTS["l4_w64_h16"], None),
    "wtu": ("l4_b16_p1_e64", WTU_POINTS["l4_b16_p1_e64"], None),
    "kvmu": ("bus8_bt4_g3_o2", *KVMU_POINTS["bus8_bt4_g3_o2"]),
}
SHORT = {"attn_exp", "core_regs"}


class Plus(wiring.Component):
    """``y = r`` for odd ``r``, else 0: combinational, a process of its own, reading only a
    register that starts at 3 and holds."""
    y: Out(4)

    def elaborate(self, platform):
        m = Module()
        r = Signal(4, init=3)
        m.d.sync += r.eq(r)
        with m.If(r[0]):
            m.d.comb += self.y.eq(r)
        with m.Else():
            m.d.comb += self.y.eq(0)
        return m


BENCH = """module bench;
  reg clk = 1'b0, rst = 1'b0;
  wire [3:0] y;
  plus dut(.clk(clk), .rst(rst), .y(y));
  initial begin #1 $display("y=%b", y); $finish; end
endmodule
"""


def _bench(tmp_path, text: str) -> str:
    (tmp_path / "plus.v").write_text(text)
    (tmp_path / "bench.v").write_text(BENCH)
    subprocess.run([IVERILOG, "-g2012", "-o", "bench.vvp", "plus.v", "bench.v"],
                   cwd=tmp_path, check=True, capture_output=True, timeout=120)
    r = subprocess.run(["vvp", "-n", "bench.vvp"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    return r.stdout


@needs_icarus
def test_start_up_under_systemverilog_rules(tmp_path):
    plain = emit_verilog(Plus(), "plus")
    assert "always @*" in plain
    # the plain file: the process never ran, its output is X; the file for event-driven
    # simulators: y = r from time 0
    assert "y=xxxx" in _bench(tmp_path, plain)
    assert "y=0011" in _bench(tmp_path, for_event_simulators(plain))


def test_start_up_trigger_is_found():
    v = for_event_simulators(emit_verilog(Plus(), "plus"))
    assert v.count("initial #0 ") == 1 and "dump_module$1  = 0;" not in v
    with pytest.raises(ValueError, match="no start-up trigger"):
        for_event_simulators("module m; always @* begin end endmodule\n")


@needs_icarus
@pytest.mark.parametrize("block", [b if b in SHORT else pytest.param(b, marks=pytest.mark.soak)
                                   for b in POINTS])
def test_block_under_icarus(block):
    point, cfg, only = POINTS[block]
    run_point(block, point, cfg, test_filter=only, sim="icarus")
