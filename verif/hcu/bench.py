"""HCU benchmark under Verilator (``make bench``): counters and cycles, never wall time.

Streams with ``o`` always ready and the input always valid; writes ``BENCH_OUT`` (JSON, with
the Config it measured). :func:`summary` turns the report into the lines ``make bench`` and
``make demo`` print.
"""
from __future__ import annotations

import json
import os

import numpy as np

from verif.hcu.model import frames, structured_hashes, trace_tokens
from verif.hcu.tb import HcuTB
from verif.lib.cocotb_tb import LONG_LIMIT_MS, test
from verif.lib.throughput import per_us
from verif.lib.traces import bundled


async def _measure(tb, toks, th_hd, max_age):
    await tb.reset()
    got, want, perf = await tb.run(toks, tb.cfg.replace(th_hd=th_hd, max_age=max_age))
    n_open, fills = {}, []
    for w in want:
        fills.append(n_open.get(w["layer"], 0))
        n_open[w["layer"]] = n_open.get(w["layer"], 0) + int(w["opened"])
    gaps = np.diff(tb.sink["o"].cycles)             # cycles of token k+1 = gap k
    return got, want, perf, np.array(fills[1:]), gaps


def _summary(tb, perf, cycles):
    lanes = tb.model.lanes
    return {"cycles": int(cycles), "busy": perf["busy"], "stalled": perf["stalled"],
            "comparisons": perf["comparisons"], "opened": perf["opened"],
            "joined": perf["joined"],
            "comparisons_per_busy_cycle": perf["comparisons"] / max(perf["busy"], 1),
            "lane_utilisation": perf["comparisons"] / max(perf["busy"] * lanes, 1),
            "cycles_per_token": cycles / max(perf["opened"] + perf["joined"], 1)}


@test(limit_ms=LONG_LIMIT_MS)
async def bench(dut):
    tb = HcuTB(dut)
    await tb.start()
    m = tb.model
    W, N = m.window, m.lanes
    report = {"config": tb.cfg.to_dict(),
              "params": {"n_hp": m.n_hp, "lanes": N, "window": W, "layers": m.layers}}

    # synthetic worst case: every token opens, the window fills and then stays full
    n = 2 * W
    rng = np.random.default_rng(1)
    hashes = [int(h) for h in rng.permutation(2 ** min(m.n_hp, 24))[:n]]
    got, want, perf, fills, gaps = await _measure(tb, frames(hashes, [0] * n), 1, None)
    by_fill = {}
    for rows in sorted({-(-min(f, W) // N) for f in fills}):
        sel = np.array([-(-min(f, W) // N) == rows for f in fills])
        by_fill[int(rows * N)] = {"measured": float(gaps[sel].mean()),
                             "model": m.cycles_per_token(int(rows * N))}
    full = fills >= W
    report["synthetic_distinct"] = dict(
        _summary(tb, perf, tb.sink["o"].cycles[-1] + 1), tokens=n,
        cycles_per_token_by_fill=by_fill,
        full_window={"cycles_per_token": float(gaps[full].mean()),
                     "comparisons_per_cycle": W / float(gaps[full].mean()),
                     "share_of_lane_peak": W / float(gaps[full].mean()) / N})

    # synthetic structured stream: redundancy makes tokens join
    rng = np.random.default_rng(2)
    hs = structured_hashes(rng, 2000, m.n_hp, centres=64, flips=m.n_hp // 6)
    toks = frames(hs, np.repeat(np.arange(20), 100))
    _, _, perf, _, _ = await _measure(tb, toks, 7, None)
    report["synthetic_structured"] = dict(_summary(tb, perf, tb.sink["o"].cycles[-1] + 1),
                                          tokens=2000)

    # the bundled real trace under both presets, layers in streaming order
    tr, qt = bundled()
    for preset in ("paper", "tuned"):
        toks, cfg, _ = trace_tokens(tr, qt, preset, tb.cfg)
        _, _, perf, _, _ = await _measure(tb, toks, cfg.th_hd, cfg.max_age)
        report[f"trace_{preset}"] = dict(_summary(tb, perf, tb.sink["o"].cycles[-1] + 1),
                                         tokens=len(toks), trace=tr.name)
    cyc = {"full_window": report["synthetic_distinct"]["full_window"]["cycles_per_token"]}
    cyc.update({k: report[k]["cycles_per_token"] for k in ("trace_paper", "trace_tuned")})
    report["throughput"] = per_us("hcu", cyc, "tokens")
    out = os.environ.get("BENCH_OUT")
    if out:
        with open(out, "w") as f:
            json.dump(report, f, indent=1)


def summary(r: dict) -> list[str]:
    """The report in a few lines."""
    f = r["synthetic_distinct"]["full_window"]
    lines = [f"full window {f['cycles_per_token']:.2f} cycles/token, "
             f"{f['comparisons_per_cycle']:.2f} comparisons/cycle "
             f"({100 * f['share_of_lane_peak']:.1f}% of the lanes' peak)"]
    for k in ("trace_paper", "trace_tuned"):
        x = r[k]
        lines.append(f"{k}: {x['tokens']} tokens, {x['cycles_per_token']:.2f} cycles/token, "
                     f"{x['opened']} opened, {x['joined']} joined")
    t = r.get("throughput")
    if t and t["fmax_mhz"]:
        now = t["tokens_per_us"]
        lines.append(f"at {t['fmax_mhz']:.1f} MHz: " + ", ".join(
            f"{k} {now[k]:.2f} tokens/us" for k in now))
    return lines
