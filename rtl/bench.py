"""``make bench`` for the RTL blocks: run each block's cocotb benchmark under Verilator.

Writes ``build/bench/<block>.json`` with the block's own counters and derived figures.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from golden.config import Config

from .emit import write_verilog
from .hcu import HashClusterUnit
from .tools import setup_environ

ROOT = Path(__file__).resolve().parent.parent


def bench_hcu(out_dir: Path, cfg: Config) -> dict:
    from cocotb_tools.check_results import get_results
    from cocotb_tools.runner import get_runner
    setup_environ()
    params = dict(n_hp=cfg.n_hp, lanes=cfg.hcu_lanes, window=cfg.window, layers=cfg.n_layers)
    build = ROOT / "build" / "sim" / "hcu_bench"
    v = write_verilog(HashClusterUnit(**params), "hcu", build)
    runner = get_runner("verilator")
    runner.build(sources=[v], hdl_toplevel="hcu", build_dir=build,
                 build_args=["-Wno-fatal", str(ROOT / "rtl" / "lint.vlt")],
                 timescale=("1ns", "1ps"))
    out = out_dir / "hcu.json"
    xml = runner.test(hdl_toplevel="hcu", test_module="verif.cocotb_hcu_bench", build_dir=build,
                      test_dir=build, results_xml=str(build / "results.xml"),
                      extra_env={"HCU_PARAMS": json.dumps(params), "PYTHONPATH": str(ROOT),
                                 "HCU_BENCH_OUT": str(out.resolve())})
    total, failed = get_results(xml)
    if failed:
        raise SystemExit(f"the HCU benchmark failed ({failed} of {total})")
    return json.loads(out.read_text())


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
    return 0


if __name__ == "__main__":
    sys.exit(main())
