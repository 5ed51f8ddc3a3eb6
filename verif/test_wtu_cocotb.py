"""WTU, Verilog tier: emitted Verilog, Verilator lint, cocotb testbench per parameter point."""
import json

import pytest

from rtl.emit import lint, write_verilog
from rtl.tools import setup_environ
from rtl.wtu import WicsumThresholdUnit

from .conftest import ROOT

# lanes 4/16, buckets 8/16/32, score memories of 64 to 4096 entries
POINTS = {
    "default": dict(lanes=16, buckets=16, row_entries=4096),
    "l4_b8_e256": dict(lanes=4, buckets=8, row_entries=256),
    "l16_b32_e1024": dict(lanes=16, buckets=32, row_entries=1024),
    "l4_b16_e64": dict(lanes=4, buckets=16, row_entries=64),
}
BUILD = ROOT / "build" / "sim" / "wtu"


@pytest.mark.parametrize("point", POINTS)
def test_wtu_verilog(point):
    from cocotb_tools.check_results import get_results
    from cocotb_tools.runner import get_runner
    setup_environ()
    params = POINTS[point]
    build = BUILD / point
    v = write_verilog(WicsumThresholdUnit(**params), "wtu", build)
    lint(v)
    runner = get_runner("verilator")
    runner.build(sources=[v], hdl_toplevel="wtu", build_dir=build,
                 build_args=["-Wno-fatal", str(ROOT / "rtl" / "lint.vlt")],
                 timescale=("1ns", "1ps"))
    xml = runner.test(hdl_toplevel="wtu", test_module="verif.cocotb_wtu", build_dir=build,
                      test_dir=build, extra_env={"WTU_PARAMS": json.dumps(params),
                                                 "PYTHONPATH": str(ROOT)},
                      results_xml=str(build / "results.xml"))
    total, failed = get_results(xml)
    assert total == 6 and failed == 0
