"""The core's register file, fast tier: every register's reset value, access type and byte
strobes, the descriptor checks in golden.core's order, the queue and its overflow, the first
error and the interrupt, soft reset; under every crossing, for several builds."""
import pytest

from verif.lib.pauses import CROSSINGS
from vrex.config import Config

from .model import scenario
from .sim import run_regs

POINTS = {"default": Config(), "q1_l2_bus8": Config(core_queue_depth=1, n_layers=2,
                                                    kvmu_bus_bytes=8),
          "q8_tuned": Config.from_preset("tuned", core_queue_depth=8, hash_scope="per_head")}


@pytest.mark.parametrize("cross", CROSSINGS)
@pytest.mark.parametrize("point", POINTS)
def test_host_session(point, cross):
    log = run_regs(POINTS[point], scenario(POINTS[point], seed=3), cross=cross, seed=5)
    assert any(a[0] == "pop" and got for a, got in log)


def test_bad_queue_depth():
    from rtl import CoreRegisters
    params = {**Config().block_params("core_regs"), "perf": ()}
    with pytest.raises(ValueError, match="queue_depth must be an integer from 1 to 64"):
        CoreRegisters(**{**params, "queue_depth": 0})
