"""The synthesis flow on a small HCU: Yosys generic, ECP5 and iCE40 (no place and route)."""
import json

from rtl.hcu import HashClusterUnit
from synth.run import BANNER, synth_block, write_reports

from verif.lib.traces import ROOT


def test_synth_flow_small_hcu():
    out = ROOT / "build" / "synth_test" / "hcu_small"
    block = HashClusterUnit(n_hp=8, lanes=4, window=16, layers=2)
    r = synth_block("hcu", block, out, pnr=False)
    assert r["memory_bits"] == 2 * 16 * (8 + 16 + 16)
    assert r["cells"] > 200 and r["cells_by_type"].get("$mem_v2") == 1
    assert r["ecp5"]["lut4"] > 100 and r["ecp5"]["ff"] > r["ecp5"]["wrapper_ff"]
    assert r["ice40"]["lc"] > 100 and r["ice40"]["ff"] > r["ice40"]["wrapper_ff"]
    write_reports({"hcu": r}, out)
    rep = json.loads((out / "report.json").read_text())
    assert set(rep["hcu"]) >= {"cells", "ecp5", "ice40"}
    assert set(rep["hcu"]["ecp5"]) >= {"lut4", "ff", "dsp", "bram", "fmax_mhz"}
    assert set(rep["hcu"]["ice40"]) >= {"lc", "ff", "dsp", "bram"}
    assert BANNER in (out / "report.md").read_text()
