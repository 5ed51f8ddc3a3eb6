"""WTU benchmark under Verilator (``make bench``): cycles and counters, never wall time.

Rows stream with the input always valid and ``o`` always ready; a row's cycles are measured
between the transfers of its first beat and the next row's first beat (rows of one head, so no
emission in between). Writes ``BENCH_OUT`` (JSON, with the Config it measured).
:func:`summary` turns the report into the lines ``make bench`` and ``make demo`` print.
"""
from __future__ import annotations

import json
import os

import cocotb
import numpy as np

from golden.wtu import sort_baseline_cycles
from verif.lib.traces import bundled
from verif.wtu.model import random_rows, trace_rows
from verif.wtu.tb import WtuTB


def _first_beats(heads, lanes):
    idx, out = 0, []
    for rows in heads:
        for r in rows:
            out.append(idx)
            idx += max(1, -(-len(r.score) // lanes))
    return out


async def _rows_cycles(tb, heads, th_r):
    """Per row: measured cycles (None for a head's last row), visited, length."""
    _, ref, delta, _ = await tb.run(heads, th_r)
    firsts = _first_beats(heads, tb.model.lanes)
    starts = [tb.source["i"].cycles[i] for i in firsts]
    res, k = [], 0
    for rows in heads:
        for j, r in enumerate(rows):
            cyc = starts[k + 1] - starts[k] if j + 1 < len(rows) else None
            res.append((len(r.score), ref.visited[k], cyc))
            k += 1
    return res, delta


@cocotb.test()
async def bench(dut):
    tb = WtuTB(dut)
    await tb.start()
    m = tb.model
    B, N = m.buckets, m.lanes
    report = {"config": tb.cfg.to_dict(), "params": {"lanes": N, "buckets": B, "row_entries": m.row_entries},
              "baseline": "merge sort with `lanes` compare-and-swaps a cycle: n*ceil(log2 n)/lanes,"
                          " plus receive and cumulative-sum passes of ceil(n/lanes) each"}
    rng = np.random.default_rng(1)
    by_len = {}
    for n in (16, 64, 256, 1024, 4096):
        if n > m.row_entries:
            continue
        await tb.reset()
        res, _ = await _rows_cycles(tb, [random_rows(rng, 6, n, kind="exp")], 0.3)
        meas = [c for _, _, c in res if c is not None]
        vis = [v for _, v, c in res if c is not None]
        by_len[n] = {"cycles_per_row": float(np.mean(meas)), "buckets_visited": float(np.mean(vis)),
                     "model_cycles": float(np.mean([m.row_cycles(n, v) for v in vis])),
                     "sort_baseline_cycles": sort_baseline_cycles(n, N),
                     "speedup_vs_sort": sort_baseline_cycles(n, N) / float(np.mean(meas))}
    report["synthetic_exp_rows"] = by_len

    tr, qt = bundled()
    for preset in ("paper", "tuned"):
        cfg, _, _, heads = trace_rows(tr, qt, preset, tb.cfg, n_groups=12)
        await tb.reset()
        res, perf = await _rows_cycles(tb, heads, cfg.th_r)
        meas = [(n, v, c) for n, v, c in res if c is not None]
        lens = np.array([n for n, _, _ in meas])
        cyc = np.array([c for _, _, c in meas])
        base = np.array([sort_baseline_cycles(int(n), N) for n in lens])
        # how concentrated the rows are: the share of entries holding 80% of Σ w·n
        conc = []
        for rows in heads:
            for r in rows:
                c = np.sort(r.weight * r.count)[::-1]
                if c.sum() > 0:
                    conc.append((np.searchsorted(np.cumsum(c), 0.8 * c.sum()) + 1) / len(c))
        report[f"trace_{preset}"] = {
            "rows": perf["rows"], "mean_entries": float(lens.mean()),
            "buckets_visited_share": perf["buckets_visited"] / (perf["rows"] * B),
            "buckets_skipped": perf["buckets_skipped"], "entries_read": perf["entries_read"],
            "cycles_per_row": float(cyc.mean()), "sort_baseline_cycles": float(base.mean()),
            "speedup_vs_sort": float(base.sum() / cyc.sum()),
            "entries_holding_80pct_of_mass": float(np.mean(conc)),
            "busy": perf["busy"]}
    out = os.environ.get("BENCH_OUT")
    if out:
        with open(out, "w") as f:
            json.dump(report, f, indent=1)


def summary(r: dict) -> list[str]:
    """The report in a few lines."""
    rows = r["synthetic_exp_rows"]
    lines = ["synthetic rows of " + ", ".join(map(str, rows)) + " entries: "
             + ", ".join(f"{x['cycles_per_row']:.0f}" for x in rows.values())
             + " cycles/row, " + ", ".join(f"{x['speedup_vs_sort']:.2f}" for x in rows.values())
             + "x a full sort"]
    for k in ("trace_paper", "trace_tuned"):
        x = r[k]
        lines.append(f"{k}: {x['rows']} rows of {x['mean_entries']:.0f} entries, "
                     f"{x['cycles_per_row']:.1f} cycles/row ({x['speedup_vs_sort']:.2f}x "
                     f"sorting), {100 * x['buckets_visited_share']:.1f}% of buckets visited")
    return lines
