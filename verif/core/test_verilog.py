"""The core's register file, Verilog tier: emitted, linted and run under cocotb + Verilator
(cocotbext-axi's AxiLiteMaster) per build point."""
import pytest

from verif.lib.runner import run_point

from .test_sim import POINTS


@pytest.mark.parametrize("point", ["default", "q1_l2_bus8"])
def test_core_regs_verilog(point):
    run_point("core_regs", point, POINTS[point])
