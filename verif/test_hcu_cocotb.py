"""HCU, Verilog tier: emitted Verilog, Verilator lint, cocotb testbench per parameter point."""
import json

import pytest

from rtl.emit import lint, write_verilog
from rtl.hcu import HashClusterUnit
from rtl.tools import setup_environ

from .conftest import ROOT

# lanes 4/16, window 64/1024, n_hp 16/32/64, one and several layer contexts
POINTS = {
    "default": dict(n_hp=32, lanes=16, window=1024, layers=3),
    "l4_w64_h16": dict(n_hp=16, lanes=4, window=64, layers=2),
    "l16_w64_h64": dict(n_hp=64, lanes=16, window=64, layers=1),
    "l4_w1024_h32": dict(n_hp=32, lanes=4, window=1024, layers=1),
}
BUILD = ROOT / "build" / "sim" / "hcu"


def test_emission_is_deterministic(tmp_path):
    a = write_verilog(HashClusterUnit(), "hcu", tmp_path / "a").read_bytes()
    b = write_verilog(HashClusterUnit(), "hcu", tmp_path / "b").read_bytes()
    assert a == b and b"Amaranth" in a


@pytest.mark.parametrize("point", POINTS)
def test_hcu_verilog(point):
    from cocotb_tools.check_results import get_results
    from cocotb_tools.runner import get_runner
    setup_environ()
    params = POINTS[point]
    build = BUILD / point
    v = write_verilog(HashClusterUnit(**params), "hcu", build)
    lint(v)
    runner = get_runner("verilator")
    runner.build(sources=[v], hdl_toplevel="hcu", build_dir=build,
                 build_args=["-Wno-fatal", str(ROOT / "rtl" / "lint.vlt")],
                 timescale=("1ns", "1ps"), always=False)
    xml = runner.test(hdl_toplevel="hcu", test_module="verif.cocotb_hcu", build_dir=build,
                      test_dir=build, extra_env={"HCU_PARAMS": json.dumps(params),
                                                 "PYTHONPATH": str(ROOT)},
                      results_xml=str(build / "results.xml"))
    total, failed = get_results(xml)
    assert total == 5 and failed == 0
