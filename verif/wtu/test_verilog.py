"""WTU, Verilog tier: emitted Verilog, Verilator lint, the cocotb testbench per build."""
import pytest

from verif.lib.runner import run_point
from vrex.config import Config

# lanes 4/16, buckets 8/16/32, 1 to 8 buckets a pass, score memories of 64 to 4096 entries
POINTS = {
    "default": Config(),
    "l4_b8_p2_e256": Config(wtu_lanes=4, buckets=8, wtu_pass_buckets=2, wtu_row_entries=256),
    "l16_b32_p8_e1024": Config(wtu_lanes=16, buckets=32, wtu_pass_buckets=8,
                               wtu_row_entries=1024),
    "l4_b16_p1_e64": Config(wtu_lanes=4, buckets=16, wtu_pass_buckets=1, wtu_row_entries=64),
}


@pytest.mark.parametrize("point", POINTS)
def test_wtu_verilog(point):
    run_point("wtu", point, POINTS[point])
