"""WTU, Verilog tier: emitted Verilog, Verilator lint, cocotb testbench per parameter point."""
import pytest

from rtl.sim import run_cocotb
from rtl.wtu import WicsumThresholdUnit

from .conftest import ROOT

# lanes 4/16, buckets 8/16/32, score memories of 64 to 4096 entries
POINTS = {
    "default": dict(lanes=16, buckets=16, row_entries=4096),
    "l4_b8_e256": dict(lanes=4, buckets=8, row_entries=256),
    "l16_b32_e1024": dict(lanes=16, buckets=32, row_entries=1024),
    "l4_b16_e64": dict(lanes=4, buckets=16, row_entries=64),
}


@pytest.mark.parametrize("point", POINTS)
def test_wtu_verilog(point):
    params = POINTS[point]
    total, failed = run_cocotb("wtu", WicsumThresholdUnit(**params),
                               test_module="verif.cocotb_wtu",
                               build_dir=ROOT / "build" / "sim" / "wtu" / point, params=params)
    assert total == 6 and failed == 0
