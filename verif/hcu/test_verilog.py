"""HCU, Verilog tier: emitted Verilog, Verilator lint, the cocotb testbench per build."""
import pytest

from rtl import HashClusterUnit
from verif.lib.runner import build_points, run_point
from vrex.config import Config
from vrex.emit import write_verilog

# lanes 4/16, window 16/64/1024, n_hp 16/32/64, one to three layer contexts; window == lanes
# with one layer (a one-word window memory, once emitted with [-1:0] addresses) and 3-bit
# counts (they saturate in every stream)
POINTS = {
    "default": Config(),
    "l4_w64_h16": Config(n_hp=16, hcu_lanes=4, window=64, n_layers=2),
    "l16_w64_h64": Config(n_hp=64, hcu_lanes=16, window=64, n_layers=1),
    "l4_w1024_h32": Config(n_hp=32, hcu_lanes=4, window=1024, n_layers=1),
    "l16_w16_h32_c3": Config(n_hp=32, hcu_lanes=16, window=16, n_layers=1, count_bits=3),
}


def test_emission_is_deterministic(tmp_path):
    a = write_verilog(HashClusterUnit.from_config(Config()), "hcu", tmp_path / "a").read_bytes()
    b = write_verilog(HashClusterUnit.from_config(Config()), "hcu", tmp_path / "b").read_bytes()
    assert a == b and b"Amaranth" in a


# the 1024-entry window runs its directed cases under one crossing (both idle cycles and
# back-pressure; every crossing runs at the other points): 24 s each at this window
FILTERS = {"l4_w1024_h32": r"^(?!.*directed_cases/crossing=(none|idle|backpressure|periodic))"}


# l16_w64_h64 in make soak (44 s; 16 lanes stay here at l16_w16_h32_c3, 64
# planes in the Amaranth tier)
@pytest.mark.parametrize("point", build_points(POINTS, soak={"l16_w64_h64"}))
def test_hcu_verilog(point):
    run_point("hcu", point, POINTS[point], test_filter=FILTERS.get(point))
