"""HCU, Verilog tier: emitted Verilog, Verilator lint, cocotb testbench per parameter point."""
import pytest

from rtl.emit import write_verilog
from rtl.hcu import HashClusterUnit
from rtl.sim import run_cocotb

from .conftest import ROOT

# lanes 4/16, window 64/1024, n_hp 16/32/64, one and several layer contexts
POINTS = {
    "default": dict(n_hp=32, lanes=16, window=1024, layers=3),
    "l4_w64_h16": dict(n_hp=16, lanes=4, window=64, layers=2),
    "l16_w64_h64": dict(n_hp=64, lanes=16, window=64, layers=1),
    "l4_w1024_h32": dict(n_hp=32, lanes=4, window=1024, layers=1),
}


def test_emission_is_deterministic(tmp_path):
    a = write_verilog(HashClusterUnit(), "hcu", tmp_path / "a").read_bytes()
    b = write_verilog(HashClusterUnit(), "hcu", tmp_path / "b").read_bytes()
    assert a == b and b"Amaranth" in a


@pytest.mark.parametrize("point", POINTS)
def test_hcu_verilog(point):
    params = POINTS[point]
    total, failed = run_cocotb("hcu", HashClusterUnit(**params), test_module="verif.cocotb_hcu",
                               build_dir=ROOT / "build" / "sim" / "hcu" / point, params=params)
    assert total == 5 and failed == 0
