"""KVMU, Verilog tier: emitted, linted and run under cocotb + Verilator per build point, the
bus answered by cocotbext-axi's AxiRam (pauses, latency, injected SLVERR/DECERR)."""
import pytest

from verif.lib.runner import ROOT, failures, run_cocotb, run_point
from vrex.config import Config

# the default build (the bundled trace's geometry: the real-trace test's `paper` cut runs
# on it, `tuned` in make soak, which runs the whole trace under both presets); a 64-bit bus
# with 4-token blocks, one hash group per KV head and two reads and writes outstanding (the
# trace tests need the one-group geometry, so they are left out there)
POINTS = {
    "default": (Config(kvmu_clusters=256, kvmu_blocks=1024), r"^(?!.*preset=tuned)"),
    "bus8_bt4_g3_o2": (Config(n_layers=2, head_dim=32, block_tokens=4, hash_scope="per_head",
                              kvmu_bus_bytes=8, kvmu_max_reads=2, kvmu_max_writes=2,
                              kvmu_clusters=16, kvmu_blocks=256),
                       r"^(?!.*real_trace)"),
}


@pytest.mark.parametrize("point", POINTS)
def test_kvmu_verilog(point):
    cfg, only = POINTS[point]
    run_point("kvmu", point, cfg, test_filter=only)


@pytest.mark.soak
def test_kvmu_soak():
    """``make soak``: the whole bundled trace under both presets, and a long synthetic
    stream with faults (verif/kvmu/soak.py), on the default build."""
    # the default point's table is cut to 1024 blocks for the suite's speed; the whole trace
    # under `tuned` (248 clusters, their partly filled blocks) needs more: the Config's 2048
    cfg = POINTS["default"][0].replace(kvmu_blocks=2048)
    build = ROOT / "build" / "sim" / "kvmu" / "soak"
    results = run_cocotb("kvmu", cfg, test_module="verif.kvmu.soak", build_dir=build)
    if msg := failures(results, build):
        pytest.fail(msg, pytrace=False)
