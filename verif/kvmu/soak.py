"""KVMU soak under cocotb + Verilator (``make soak``, not in ``make test``): the whole
bundled trace under both presets with the near tier spilling, random pipelined latency and
pauses on every channel; a long synthetic stream with faults injected at random stores and
fetches. Everything compared with the golden replay, as in tb.py."""
from __future__ import annotations

import random

import cocotb
import numpy as np

from verif.kvmu.model import check_scored, random_rows, registers, synthetic_ops, trace_ops
from verif.kvmu.tb import KvmuTB
from verif.lib.cocotb_tb import LONG_LIMIT_MS, named, test


@test(limit_ms=LONG_LIMIT_MS)
@cocotb.parametrize(preset=named(["paper", "tuned"]))
async def whole_trace(dut, preset):
    rng = random.Random(21)
    tb = KvmuTB(dut, latency=lambda: rng.randrange(60))
    tb.cross("both", seed=22)
    tb.ram.pause_all(0.2, seed=23, ticker=tb.ticker)
    await tb.start()
    cfg = tb.cfg
    ops, _, rows, selected, scored = trace_ops(preset)
    exp, run = await tb.run(ops, rows, registers(cfg, near_slots=64, far_base=1 << 24),
                            timeout=2_000_000)
    assert exp.first_error is None, f"the build refuses part of the trace: {exp.first_error}"
    assert exp.fetched == selected and run["offloaded_blocks"] > 0
    assert check_scored(exp, scored) > 0


@test(limit_ms=LONG_LIMIT_MS)
async def long_stream_with_faults(dut):
    from verif.kvmu.faults import with_fault
    rng = random.Random(31)
    tb = KvmuTB(dut, latency=lambda: rng.randrange(30))
    tb.cross("both", seed=32)
    tb.ram.pause_all(0.3, seed=33, ticker=tb.ticker)
    await tb.start()
    cfg = tb.cfg
    regs = registers(cfg, near_slots=max(3, 12 // cfg.heads_per_group), max_burst=16,
                     far_base=1 << 24)
    for k, fail in enumerate(["write", "offload_read", "hc_read", "read", "offload_write",
                              "hc_write"]):
        await tb.reset()
        ops = synthetic_ops(cfg, np.random.default_rng(40 + k), steps=6, tokens=6,
                            max_owner=min(cfg.kvmu_clusters, 16), by_index=True)
        rows = random_rows(40 + k, 2 * cfg.head_dim)
        await tb.run(with_fault(cfg, regs, ops, rows, fail, "DECERR" if k % 2 else "SLVERR"),
                     rows, regs)
        await tb.clear_error()
