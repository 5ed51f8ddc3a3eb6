"""WTU benchmark under Verilator (``make bench``): cycles and counters, never wall time.

Rows stream with the input always valid and ``o`` always ready. A row's cycles are measured
between the transfers of its first beat and the next row's first beat (rows of one head), and
over a whole run: from the first row's first beat to the last head's closing beat, divided by
the rows (every head's emission included), from the unit's own timing model
(:func:`verif.wtu.timing.schedule`), whose first beats and busy cycles are checked equal to
the RTL's on the same run. Writes ``BENCH_OUT`` (JSON, with the Config it
measured).
:func:`summary` turns the report into the lines ``make bench`` and ``make demo`` print.
"""
from __future__ import annotations

import json
import os

import numpy as np

from golden.wtu import sort_baseline_cycles
from verif.lib.cocotb_tb import LONG_LIMIT_MS, test
from verif.lib.throughput import per_us
from verif.lib.traces import bundled
from verif.wtu.model import first_beat_index, random_rows, schedule_rows, trace_rows
from verif.wtu.timing import schedule
from verif.wtu.tb import WtuTB


async def _rows_cycles(tb, heads, th_r):
    """Per row: (length, visited, measured cycles to the next row's first beat, or None for a
    head's last row); the counters; the run's cycles (first beat to last closing beat)."""
    _, ref, delta, _ = await tb.run(heads, th_r)
    firsts = first_beat_index(heads, tb.model.lanes)
    starts = [tb.source["i"].cycles[i] for i in firsts]
    sched = schedule(tb.model, schedule_rows(heads, ref), ref.heads)
    # the model's first beats and busy cycles are the RTL's, so its last closing beat is
    assert [s - starts[0] for s in starts] == sched["first_beats"]
    assert delta["busy"] == sched["busy"], (delta["busy"], sched["busy"])
    res, k = [], 0
    for rows in heads:
        for j, r in enumerate(rows):
            cyc = starts[k + 1] - starts[k] if j + 1 < len(rows) else None
            res.append((len(r.score), ref.visited[k], cyc))
            k += 1
    return res, delta, sched["closes"][-1] + 1


@test(limit_ms=LONG_LIMIT_MS)
async def bench(dut):
    tb = WtuTB(dut)
    await tb.start()
    m = tb.model
    B, N = m.buckets, m.lanes
    report = {"config": tb.cfg.to_dict(), "params": {"lanes": N, "buckets": B, "row_entries": m.row_entries},
              "pass_buckets": m.pass_buckets,
              "baseline": "merge sort with `lanes` compare-and-swaps a cycle: n*ceil(log2 n)/lanes,"
                          " plus receive and cumulative-sum passes of ceil(n/lanes) each"}
    rng = np.random.default_rng(1)
    by_len = {}
    for n in (16, 64, 256, 1024, 4096):
        if n > m.row_entries:
            continue
        await tb.reset()
        res, _, _ = await _rows_cycles(tb, [random_rows(rng, 6, n, kind="exp")], 0.3)
        meas = [c for _, _, c in res if c is not None]
        vis = [v for _, v, c in res if c is not None]
        by_len[n] = {"cycles_per_row": float(np.mean(meas)), "buckets_visited": float(np.mean(vis)),
                     "walk_cycles": float(np.mean([m.walk_cycles(n, v) for v in vis])),
                     "sort_baseline_cycles": sort_baseline_cycles(n, N),
                     "speedup_vs_sort": sort_baseline_cycles(n, N) / float(np.mean(meas))}
    report["synthetic_exp_rows"] = by_len

    tr, qt = bundled()
    for preset in ("paper", "tuned"):
        cfg, _, _, heads = trace_rows(tr, qt, preset, tb.cfg, n_groups=12)
        await tb.reset()
        res, perf, span = await _rows_cycles(tb, heads, cfg.th_r)
        lens = np.array([n for n, _, _ in res])
        cyc = np.array([c for _, _, c in res if c is not None])
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
            "heads": len(heads), "cycles": span,
            "cycles_per_row": span / perf["rows"],
            "cycles_per_row_in_head": float(cyc.mean()),
            "sort_baseline_cycles": float(base.mean()),
            "speedup_vs_sort": float(base.mean() / (span / perf["rows"])),
            "entries_holding_80pct_of_mass": float(np.mean(conc)),
            "busy": perf["busy"]}
    cyc = {f"synthetic_{n}": x["cycles_per_row"] for n, x in by_len.items()}
    cyc.update({k: report[k]["cycles_per_row"] for k in ("trace_paper", "trace_tuned")})
    report["throughput"] = per_us("wtu", cyc, "rows")
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
                     f"{x['cycles_per_row']:.1f} cycles/row with every head's emission "
                     f"({x['cycles_per_row_in_head']:.1f} within a head; "
                     f"{x['speedup_vs_sort']:.2f}x sorting), "
                     f"{100 * x['buckets_visited_share']:.1f}% of buckets visited")
    t = r.get("throughput")
    if t and t["fmax_mhz"]:
        now, was = t["rows_per_us"], t["before"]["rows_per_us"]
        lines.append(f"at {t['fmax_mhz']:.1f} MHz: " + ", ".join(
            f"{k} {now[k]:.2f} rows/us (was {was[k]:.2f} at {t['before']['fmax_mhz']} MHz)"
            for k in ("trace_paper", "trace_tuned")))
    return lines
