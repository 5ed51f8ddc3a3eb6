"""Systolic-array benchmark under Verilator (``make bench``): cycles from the array's own
transfers and counters, never wall time. Every output row is still compared with the golden
GEMM. Writes ``BENCH_OUT`` (JSON, with the Config it measured); :func:`summary` makes the
lines ``make bench`` prints.
"""
from __future__ import annotations

import json
import os

import numpy as np

from verif.attn.model import gemm_case, trace_hash_case
from verif.attn.tb_array import ArrayTB
from verif.lib.cocotb_tb import LONG_LIMIT_MS, test


async def _measure(tb, tiles, useful_macs: int) -> dict:
    await tb.reset()
    first = len(tb.source["i"].stamps)
    _, perf = await tb.run(tiles)
    n = tb.model.n
    cycles = tb.sink["o"].stamps[-1] - tb.source["i"].stamps[first] + 1
    return {"cycles": int(cycles), "tiles": len(tiles), "beats": perf["beats"],
            "useful_macs": int(useful_macs),
            "mac_utilisation": useful_macs / (n * n * cycles),
            "busy": perf["busy"], "held": perf["held"], "starved": perf["starved"]}


@test(limit_ms=LONG_LIMIT_MS)
async def bench(dut):
    tb = ArrayTB(dut)
    await tb.start()
    n = tb.model.n
    rng = np.random.default_rng(1)
    report = {"config": tb.cfg.to_dict(), "n": n, "gemm": {}}
    for m, k, l in ((256, 256, 256), (256, 64, 256), (64, 64, 64), (n, n, n)):
        r = await _measure(tb, gemm_case(rng, m, k, l, n), m * k * l)
        report["gemm"][f"{m}x{k}x{l}"] = r
    # the bundled trace's hash projection (layer 0, paper preset: 3 KV heads x 64 = 192
    # values a key, 32 hyperplanes)
    tiles, keys, hp, _, _ = trace_hash_case(64, n)
    r = await _measure(tb, tiles, keys.shape[0] * keys.shape[1] * hp.shape[0])
    r["cycles_per_token"] = r["cycles"] / len(keys)
    report["hash_projection"] = dict(r, tokens=len(keys), hash_dim=int(keys.shape[1]),
                                     n_hp=int(hp.shape[0]))
    # cluster scoring's GEMM: a frame's 77 query rows x 64 against 256 representative keys
    r = await _measure(tb, gemm_case(rng, 77, 64, 256, n), 77 * 64 * 256)
    r["cycles_per_candidate"] = r["cycles"] / 256
    report["score_gemm"] = dict(r, rows=77, head_dim=64, candidates=256)
    out = os.environ.get("BENCH_OUT")
    if out:
        with open(out, "w") as f:
            json.dump(report, f, indent=1)


def summary(r: dict) -> list[str]:
    lines = [f"{r['n']}x{r['n']} array, GEMM "
             + ", ".join(f"{k}: {100 * x['mac_utilisation']:.1f}% MAC utilisation"
                         for k, x in r["gemm"].items())]
    h, s = r["hash_projection"], r["score_gemm"]
    lines.append(f"hash projection (trace, {h['hash_dim']}-value keys, {h['n_hp']} "
                 f"hyperplanes): {h['cycles_per_token']:.1f} cycles/token; scoring GEMM "
                 f"({s['rows']} rows x {s['head_dim']}): {s['cycles_per_candidate']:.1f} "
                 f"cycles/candidate")
    return lines
