"""``make demo``: the main job on a trace, in one screen.

1. the golden model: every retrieval method on the trace (build/golden/<trace>/);
2. the Verilog of every block of :data:`rtl.BLOCKS`, linted (build/verilog/);
3. each block's RTL under Verilator against the golden model, beat for beat, on synthetic
   streams and the bundled real trace under both presets, with its cycle figures
   (build/bench/);
4. synthesis of every block without place and route (build/synth/), the blocks side by side
   on the machine's cores (:func:`synth.run.synth_many`): the core as its own logic with its
   blocks as black boxes (ECP5, 7-series and iCE40 only), then the core with its blocks and
   the DRE's share of it (``make synth`` adds nextpnr's Fmax).

Tool output goes to build/logs/; a failing step prints where its log is.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import logging
import sys
import time
import traceback
from pathlib import Path

from vrex.emit import load_config

LOGS = Path("build/logs")


@contextlib.contextmanager
def _step(title: str, log: str, status: dict):
    """Run a step with its prints and logging sent to build/logs/<log>; on an error, say
    FAIL and where to look, and go on with the next step."""
    print(title + " ...", end=" ", flush=True)
    LOGS.mkdir(parents=True, exist_ok=True)
    path = LOGS / log
    t0 = time.time()
    with open(path, "w") as f:
        handler = logging.StreamHandler(f)
        logging.getLogger().addHandler(handler)
        try:
            with contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
                yield
            print(f"done in {time.time() - t0:.0f} s (log: {path})", flush=True)
        except Exception:
            f.write(traceback.format_exc())
            status["failed"].append(title)
            print(f"FAIL: see {path}", flush=True)
        finally:
            logging.getLogger().removeHandler(handler)


def main(argv=None) -> int:
    from golden.job import format_table, run_job
    from golden.pool import default_jobs
    from golden.trace import load_trace
    from rtl import BLOCKS
    from synth.run import core_total, synth_many, write_reports
    from verif.bench import bench_block, benched_blocks, summary
    from vrex.emit import lint, write_verilog

    ap = argparse.ArgumentParser(prog="verif.demo", description=__doc__)
    ap.add_argument("--trace", default="data/carphone_cut.npz")
    ap.add_argument("--config", help="a Config as JSON (default: the paper preset)")
    args = ap.parse_args(argv)
    logging.getLogger().setLevel(logging.INFO)
    for h in list(logging.getLogger().handlers):
        logging.getLogger().removeHandler(h)
    cfg = load_config(args.config)
    status = {"failed": []}
    print(f"V-Rex RTL demo: trace {args.trace}; build: preset {cfg.preset}, n_hp {cfg.n_hp}, "
          f"window {cfg.window}, HCU {cfg.hcu_lanes} lanes, WTU {cfg.wtu_lanes} lanes")

    lines = []
    with _step("[1/4] golden model: every retrieval method on the trace", "golden.log", status):
        trace = load_trace(args.trace)
        out = Path("build/golden") / trace.name
        s = run_job(trace, out, progress=True, jobs=default_jobs())
        print(format_table(s))
        lines = format_table(s, matched=False).splitlines() + [
            f"wrote {out}/summary.json (with the matched-ratio tables: build/logs/golden.log), "
            f"retrieval.png, pareto.png"]
    print("\n".join(f"  {x}" for x in lines))

    lines = []
    with _step("[2/4] Verilog, linted with verilator -Wall", "verilog.log", status):
        for name, cls in BLOCKS.items():
            path = write_verilog(cls.from_config(cfg), name, "build/verilog")
            lint(path)
            sha = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
            lines.append(f"{path}: {path.stat().st_size} bytes, sha256 {sha}, lint clean")
    print("\n".join(f"  {x}" for x in lines))

    print("[3/4] RTL against the golden model under Verilator (every beat compared)")
    for name in benched_blocks():
        lines = []
        with _step(f"  {name}: its benchmark (synthetic inputs and the bundled trace)",
                   f"rtl_{name}.log", status):
            r = bench_block(name, cfg, Path("build/bench"))
            lines = [f"PASS {name}: every output beat equals the golden model's"]
            lines += summary(name, r) + [f"wrote build/bench/{name}.json"]
        print("\n".join(f"    {x}" for x in lines))

    lines = []
    with _step("[4/4] synthesis (Yosys generic, ECP5, 7-series, iCE40; no place and route)",
               "synth.log", status):
        def done(name, r):
            cells = "no generic count" if r["cells"] is None else f"{r['cells']} generic cells"
            lines.append(f"{name}: {cells} + {r['memory_bits']} memory "
                         f"bits; ECP5 {r['ecp5']['lut4']} LUT4, {r['ecp5']['ff']} FF, "
                         f"{r['ecp5']['bram']} BRAM, {r['ecp5']['dsp']} DSP; iCE40 "
                         f"{r['ice40']['lc']} LC")
            print(lines[-1], flush=True)
            print(name, end=" ", file=sys.__stdout__, flush=True)     # progress on the screen

        # the core's own logic with its blocks as black boxes (FPGA flows only); the blocks
        # side by side, one a core, the longest first
        report = synth_many(list(BLOCKS), cfg, "build/synth", pnr=False,
                            jobs=default_jobs(), done=done)
        write_reports(report, "build/synth", cfg)
        if total := core_total(report):
            e, sh = total["ecp5"], total["dre_share"]
            lines.append(f"the core with its blocks: ECP5 {e['lut4']} LUT4, {e['ff']} FF, "
                         f"{e['bram']} BRAM, {e['dsp']} DSP; the DRE (HCU + WTU + KVMU) is "
                         f"{100 * sh['lut4']:.1f}% of the LUT4, {100 * sh['ff']:.1f}% of the FF, "
                         f"{100 * sh['bram']:.1f}% of the BRAM, {100 * sh['dsp']:.1f}% of the DSP")
        lines.append("wrote build/synth/report.md (make synth adds nextpnr's Fmax)")
    print("\n".join(f"  {x}" for x in lines))

    if status["failed"]:
        print(f"FAILED: {len(status['failed'])} step(s); logs in {LOGS}/")
        return 1
    print(f"all steps passed; reports in build/golden, build/verilog, build/bench, "
          f"build/synth; logs in {LOGS}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
