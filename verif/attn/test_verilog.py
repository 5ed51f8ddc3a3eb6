"""Attention engine, Verilog tier: the systolic array and the exp unit, emitted, linted and
run under cocotb + Verilator per build point."""
import pytest

from verif.lib.runner import build_points, run_point
from vrex.config import Config

# the engine at n = 4 (small buffers, two layer contexts), 8 (the FPGA default) and 16 (WTU
# beats narrower than a word of scores)
ENGINE_POINTS = {"n4_k192_b128": Config(attn_n=4, attn_k_buf=192, attn_b_rows=128,
                                         n_layers=2),
                 "n8": Config(),
                 "n16_w8": Config(attn_n=16, attn_k_buf=192, attn_b_rows=128, wtu_lanes=8)}
# the array at n = 4, 8 (the FPGA default) and 16; the engine at n = 32 elaborates
# (test_engine_sim)
ARRAY_POINTS = {"n4": Config(attn_n=4), "n8": Config(), "n16": Config(attn_n=16)}
# the exp unit at the default formats, and at a narrower table and weight
EXP_POINTS = {"default": Config(), "f6_w12": Config(exp_frac_bits=6, weight_bits=12)}


# the real trace in full at the default build; at n = 4 and 16 two of its five hashed steps
# and three of its eight scored groups (VREX_TRACE_SHORT, verif/attn/tb.py)
SHORT = {"n4_k192_b128", "n16_w8"}


# n16_w8 in make soak (3 minutes, most of it Verilator building 256 cells;
# the Amaranth tier runs the engine with WTU beats narrower than n at n = 4 and 8)
@pytest.mark.parametrize("point", build_points(ENGINE_POINTS, soak={"n16_w8"}))
def test_engine_verilog(point):
    # the short points run the real trace under `paper` (both presets at the default build)
    run_point("attn", point, ENGINE_POINTS[point],
              test_filter=r"^(?!.*preset=tuned)" if point in SHORT else None,
              extra_env={"VREX_TRACE_SHORT": "1"} if point in SHORT else None)


@pytest.mark.parametrize("point", ARRAY_POINTS)
def test_array_verilog(point):
    run_point("attn_array", point, ARRAY_POINTS[point])


@pytest.mark.parametrize("point", EXP_POINTS)
def test_exp_verilog(point):
    run_point("attn_exp", point, EXP_POINTS[point])
