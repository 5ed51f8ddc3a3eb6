"""``make bench`` for the RTL blocks: run each block's cocotb benchmark under Verilator.

Writes ``build/bench/<block>.json`` with the block's own counters and derived figures.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from golden.config import Config

from .hcu import HashClusterUnit
from .wtu import WicsumThresholdUnit
from .sim import run_cocotb

ROOT = Path(__file__).resolve().parent.parent


def _cocotb_bench(name: str, block, params: dict, out_dir: Path) -> dict:
    """Run ``verif.cocotb_<name>_bench`` on ``block`` under Verilator; its JSON report."""
    out = (out_dir / f"{name}.json").resolve()
    total, failed = run_cocotb(name, block, test_module=f"verif.cocotb_{name}_bench",
                               build_dir=ROOT / "build" / "sim" / f"{name}_bench", params=params,
                               extra_env={f"{name.upper()}_BENCH_OUT": str(out)},
                               check_lint=False)
    if failed:
        raise SystemExit(f"the {name.upper()} benchmark failed ({failed} of {total})")
    return json.loads(out.read_text())


def bench_hcu(out_dir: Path, cfg: Config) -> dict:
    params = dict(n_hp=cfg.n_hp, lanes=cfg.hcu_lanes, window=cfg.window, layers=cfg.n_layers)
    return _cocotb_bench("hcu", HashClusterUnit(**params), params, out_dir)


def bench_wtu(out_dir: Path, cfg: Config) -> dict:
    params = dict(lanes=cfg.wtu_lanes, buckets=cfg.buckets, row_entries=cfg.wtu_row_entries)
    return _cocotb_bench("wtu", WicsumThresholdUnit(**params), params, out_dir)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="rtl.bench", description=__doc__)
    ap.add_argument("--out", default="build/bench")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    r = bench_hcu(out, Config())
    s = r["synthetic_distinct"]
    print(f"HCU {r['params']}:")
    print(f"  full window: {s['full_window']['cycles_per_token']:.2f} cycles/token, "
          f"{s['full_window']['comparisons_per_cycle']:.2f} comparisons/cycle "
          f"({100 * s['full_window']['share_of_lane_peak']:.1f}% of the lanes' peak)")
    for k in ("synthetic_structured", "trace_paper", "trace_tuned"):
        x = r[k]
        print(f"  {k}: {x['tokens']} tokens, {x['cycles_per_token']:.2f} cycles/token, "
              f"{x['comparisons_per_busy_cycle']:.2f} comparisons/busy cycle, "
              f"{x['opened']} opened, {x['joined']} joined")
    print(f"wrote {out / 'hcu.json'}")
    w = bench_wtu(out, Config())
    print(f"WTU {w['params']}:")
    for n, x in w["synthetic_exp_rows"].items():
        print(f"  rows of {n:5}: {x['cycles_per_row']:8.1f} cycles/row ({x['buckets_visited']:.1f}"
              f" buckets), full-sort baseline {x['sort_baseline_cycles']}, "
              f"{x['speedup_vs_sort']:.2f}x")
    for k in ("trace_paper", "trace_tuned"):
        x = w[k]
        print(f"  {k}: {x['rows']} rows of {x['mean_entries']:.0f} entries, "
              f"{x['cycles_per_row']:.1f} cycles/row vs {x['sort_baseline_cycles']:.1f} "
              f"sorting ({x['speedup_vs_sort']:.2f}x), {100 * x['buckets_visited_share']:.1f}% "
              f"of buckets visited, 80% of the mass in "
              f"{100 * x['entries_holding_80pct_of_mass']:.1f}% of the entries")
    print(f"wrote {out / 'wtu.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
