"""The core, Verilog tier: the register file per build point, and the whole core end to end
(emitted, linted, run under cocotb + Verilator) on synthetic streams and the bundled trace."""
import pytest

from verif.core.e2e import synth_config, trace_config, trace_point_config
from verif.lib.runner import build_points, run_point

from .test_sim import POINTS


@pytest.mark.parametrize("point", ["default", "q1_l2_bus8"])
def test_core_regs_verilog(point):
    run_point("core_regs", point, POINTS[point])


CORE_POINTS = {
    # the small build at its hostile point: a bus of 8 bytes, n = 4, per-head hash groups
    # (four cluster windows on three HCU contexts), a B of 32 tokens (the question's sets, up
    # to 37 tokens, attended in chunks: test_core_point_attends_in_chunks), tables for the
    # soak's six frames of per-head clusters (half of them fill the KV table: KV_TABLE_FULL),
    # in the select-first order (the heads score before the step's tokens are hashed and
    # stored; the other points run the default, cluster first), its first layer dense (D14:
    # no prediction, every past token, the lists ahead of its descriptors' heads taken while
    # the second layer's attend). The default geometry and bus
    # run the bundled trace (test_core_bundled_trace); the paper preset's own small build
    # runs in make soak
    "synth_tuned_bus8_n4_w3_b32": (lambda: synth_config("tuned", kvmu_bus_bytes=8, attn_n=4,
                                                        near_blocks=8, hash_scope="per_head",
                                                        hcu_contexts=3, attn_b_rows=32,
                                                        kvmu_clusters=128, kvmu_blocks=256,
                                                        order="select_first",
                                                        dense_layers=1),
                                   "synthetic|error|soft_reset|soak|window"),
    "synth": (synth_config, "synthetic|error|soft_reset|soak"),
}


def test_core_point_attends_in_chunks():
    """The synth_tuned_bus8_n4_w3_b32 point's streams (seeds 2 and 8 of verif.core.tb)
    attend sets longer than its B: its run covers the chunked attention."""
    from verif.core.e2e import plan_stream, synthetic_stream
    from verif.core.e2e import SYNTH
    cfg = CORE_POINTS["synth_tuned_bus8_n4_w3_b32"][0]()
    for seed in (2, 8):
        plan = plan_stream(*synthetic_stream(seed, **SYNTH), cfg)
        assert any(h.attended > cfg.attn_b_rows for g in plan.golden for h in g.heads), seed


@pytest.mark.parametrize("point", build_points(CORE_POINTS, soak=("synth",)))
def test_core_verilog(point):
    make, tests = CORE_POINTS[point]
    # the soak's stream at four frames (make soak runs sixty)
    run_point("core", point, make(), test_filter=tests, extra_env={"VREX_SOAK_FRAMES": "4"})


def test_core_bundled_trace():
    """The bundled trace end to end under the tuned preset (its hash input the pre-RoPE
    keys, centred), its first two steps (prompt and a frame), on two HCU contexts for its
    three layers' cluster windows (the third layer's window evicts the first's, every
    step). The whole trace under both presets runs in make soak and make demo (on the same
    build: the presets differ only in run-time registers)."""
    run_point("core", "trace", trace_point_config(),
              test_filter="bundled", extra_env={"VREX_STEPS": "2", "VREX_PRESETS": "tuned"})


@pytest.mark.soak
def test_core_whole_trace():
    """make soak: the whole bundled trace under both presets (B holds the longest attended
    set, 889 tokens); its table in build/soak/core_trace.json."""
    import os
    from verif.lib.traces import ROOT
    out = ROOT / "build" / "soak" / "core_trace.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    os.environ["VREX_TRACE_OUT"] = str(out)
    try:
        run_point("core", "trace_whole", trace_config(), test_filter="bundled")
    finally:
        del os.environ["VREX_TRACE_OUT"]


@pytest.mark.soak
def test_core_soak():
    """make soak: a stream of 60 frames (over a million cycles) under latency, pauses and
    injected write errors, zero mismatches; its figures in build/soak/core.json."""
    import os
    from verif.lib.traces import ROOT
    out = ROOT / "build" / "soak" / "core.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    os.environ.update(VREX_SOAK_FRAMES="60", VREX_SOAK_OUT=str(out))
    try:
        # sized for the stream: 262 clusters a layer, 258 candidates, 554 tokens attended
        run_point("core", "soak", synth_config(kvmu_clusters=512, kvmu_blocks=2048,
                                                near_blocks=64, attn_b_rows=1024,
                                                attn_acc_bits=34, wtu_row_entries=512,
                                                core_max_tokens=64),
                  test_filter="soak")
    finally:
        for k in ("VREX_SOAK_FRAMES", "VREX_SOAK_OUT"):
            os.environ.pop(k, None)
