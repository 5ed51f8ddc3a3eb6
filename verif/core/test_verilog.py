"""The core, Verilog tier: the register file per build point, and the whole core end to end
(emitted, linted, run under cocotb + Verilator) on synthetic streams and the bundled trace."""
import pytest

from verif.lib.runner import run_point
from vrex.config import Config

from .test_sim import POINTS


@pytest.mark.parametrize("point", ["default", "q1_l2_bus8"])
def test_core_regs_verilog(point):
    run_point("core_regs", point, POINTS[point])


def synth_config(preset="paper", **kw):
    """A small build for the synthetic streams of ``verif.core.tb.SYNTH``."""
    from verif.core.tb import SYNTH
    geo = {k: SYNTH[k] for k in ("n_layers", "n_q_heads", "n_kv_heads", "head_dim")}
    return Config.from_preset(preset, **geo, **{**dict(
        kvmu_clusters=64, kvmu_blocks=128, near_blocks=16, attn_b_rows=64,
        core_max_tokens=64, wtu_row_entries=64), **kw})


def trace_config(preset="paper", **kw):
    """The bundled trace's geometry; B holds the longest attended set (889 tokens)."""
    from verif.lib.traces import bundled
    tr, _ = bundled()
    return Config.from_preset(preset, **tr.geometry(),
                              **{**dict(attn_b_rows=1024, attn_acc_bits=34), **kw})


CORE_POINTS = {
    "synth": (synth_config, "synthetic|error|soft_reset"),
    "synth_tuned_bus8_n4": (lambda: synth_config("tuned", kvmu_bus_bytes=8, attn_n=4,
                                                 near_blocks=8),
                            "synthetic_stream_hostile|soft_reset"),
}


@pytest.mark.parametrize("point", list(CORE_POINTS))
def test_core_verilog(point):
    make, tests = CORE_POINTS[point]
    run_point("core", point, make(), test_filter=tests)


@pytest.mark.parametrize("preset", ["paper"])
def test_core_bundled_trace(preset):
    """The bundled trace end to end, its first steps (the whole trace runs in make soak)."""
    import os
    os.environ["VREX_STEPS"] = "4"
    try:
        run_point("core", f"trace_{preset}", trace_config(preset), test_filter="bundled")
    finally:
        del os.environ["VREX_STEPS"]
