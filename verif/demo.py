"""``make demo``: the main job on a trace, in one screen and a few minutes.

1. the golden model: every retrieval method on the trace (build/golden/<trace>/);
2. the Verilog of every block of :data:`rtl.BLOCKS`, linted with Verilator ``-Wall``
   (build/verilog/);
3. the whole core end to end under Verilator on the bundled trace's first steps, both
   presets, every hash, cluster, selection, fetch and output row against
   ``golden.core.run_stream`` (build/demo/core_trace.json);
4. each block's quick check under Verilator on its default build: its real-trace (or
   exhaustive) test against the golden model;

then one PASS/FAIL table with the simulated cycles. Synthesis and place-and-route are
``make synth``; the long benches ``make bench``. Tool output goes to build/logs/ and
build/demo/<block>/<point>/; a failing step prints where its log is.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import time
import traceback
import xml.etree.ElementTree as ET
from pathlib import Path

from vrex.emit import load_config

LOGS = Path("build/logs")
DEMO = Path("build/demo")

# block -> (its testbench's tests to run, by regular expression; what they check)
QUICK = {
    "hcu": ("real_trace", "the bundled trace's hashes clustered, both presets"),
    "wtu": ("real_trace_rows", "the bundled trace's score rows selected, both presets"),
    "attn": ("real_trace_(hashes|scores|attention)",
             "the trace's hashing, cluster scoring and light attention, both presets"),
    "attn_array": ("real_trace_hash_projection", "the trace's hash projection"),
    "attn_exp": ("every_index_and_shift", "every table index and shift, exhaustively"),
    "kvmu": ("real_trace", "the trace's stores, candidate lists and fetches, both presets"),
    "core_regs": ("host_session", "every register against the register map's model"),
}
CORE_STEPS = 2


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
            print(f"done in {time.time() - t0:.0f} s", flush=True)
        except Exception:
            f.write(traceback.format_exc())
            status["failed"].append(title)
            print(f"FAIL: see {path}", flush=True)
        finally:
            logging.getLogger().removeHandler(handler)


def _cycles(build: Path) -> int | None:
    """Simulated cycles of a cocotb run, from its results.xml."""
    from verif.lib.cocotb_tb import CLOCK_NS
    xml = build / "results.xml"
    if not xml.exists():
        return None
    ns = 0.0
    for case in ET.parse(xml).getroot().iter("testcase"):
        prop = {p.get("name"): p.get("value") for p in case.iter("property")}
        ns += float(prop.get("sim_time_stop", 0)) - float(prop.get("sim_time_start", 0))
    return round(ns / CLOCK_NS)


def _build(name: str, point: str = "default") -> Path:
    # as deep as the suite's build/sim/<block>/<point>/: the compiler's include paths, made
    # relative to the build folder, are then the same, so a model the suite built compiles
    # from the cache
    return (DEMO / name / point).resolve()


def _check(name: str, cfg, tests: str, extra_env: dict | None = None,
           point: str = "default") -> tuple[bool, str]:
    """Run block ``name``'s testbench tests ``tests`` under Verilator; (passed, detail)."""
    from verif.lib.runner import failures, run_cocotb, verif_module
    build = _build(name, point)
    results = run_cocotb(name, cfg, test_module=verif_module(name, "tb"),
                         build_dir=build, test_filter=tests, extra_env=extra_env,
                         check_lint=False)
    msg = failures(results, build)
    return not msg, msg or f"{len(results)} test{'s' * (len(results) != 1)}"


def _core_trace(cfg, out: Path) -> tuple[bool, list[str]]:
    """The core on the bundled trace's first steps under both presets; the table's rows."""
    import json
    from verif.core.e2e import trace_point_config
    env = {"VREX_STEPS": str(CORE_STEPS), "VREX_PRESETS": "paper,tuned",
           "VREX_TRACE_OUT": str(out.resolve())}
    ok, detail = _check("core", trace_point_config(), "bundled", env, point="trace")
    rows = []
    if out.exists():
        for preset, r in json.loads(out.read_text()).items():
            good = sum(x["ok"] for x in r["rows"])
            rows.append((f"core, `{preset}`", good == len(r["rows"]) and ok,
                         f"{good} of {r['descriptors']} descriptors bit-exact "
                         f"(steps 0-{CORE_STEPS - 1} x layers)", r["cycles"]))
    if not rows:
        rows.append(("core", False, detail, None))
    return ok, rows


def main(argv=None) -> int:
    from golden.job import format_table, run_job
    from golden.pool import default_jobs
    from golden.trace import load_trace
    from rtl import BLOCKS
    from vrex.emit import lint, write_verilog
    from vrex.toolchain import setup_environ

    ap = argparse.ArgumentParser(prog="verif.demo", description=__doc__.split("\n")[0])
    ap.add_argument("--trace", default="data/carphone_cut.npz")
    ap.add_argument("--config", help="a Config as JSON (default: the paper preset)")
    args = ap.parse_args(argv)
    setup_environ()
    logging.getLogger().setLevel(logging.INFO)
    for h in list(logging.getLogger().handlers):
        logging.getLogger().removeHandler(h)
    cfg = load_config(args.config)
    status = {"failed": []}
    table = []
    t_start = time.time()
    print(f"V-Rex RTL demo: trace {args.trace}; build: preset {cfg.preset}, n_hp {cfg.n_hp}, "
          f"window {cfg.window}, {cfg.attn_n} x {cfg.attn_n} array, Config {cfg.digest()}")

    lines = []
    with _step("[1/4] golden model: every retrieval method on the trace", "golden.log", status):
        trace = load_trace(args.trace)
        out = Path("build/golden") / trace.name
        s = run_job(trace, out, progress=True, jobs=default_jobs())
        print(format_table(s))
        full = format_table(s, matched=False).splitlines()
        lines = full[:next((i + 1 for i, x in enumerate(full) if x.lstrip().startswith("full")),
                           len(full))] + [f"wrote {out}/: summary.json, retrieval.png, "
                                          f"pareto.png (every table: build/logs/golden.log)"]
    print("\n".join(f"  {x}" for x in lines))

    with _step("[2/4] Verilog of every block, linted with verilator -Wall", "verilog.log",
               status):
        for name, block in BLOCKS.items():
            lint(write_verilog(block.from_config(cfg), name, "build/verilog"))
        table.append((f"Verilog of {len(BLOCKS)} blocks", True,
                      "build/verilog/<block>.v, Verilator -Wall lint clean", None))
    print(f"  wrote build/verilog/ ({len(BLOCKS)} blocks)")

    DEMO.mkdir(parents=True, exist_ok=True)
    with _step(f"[3/4] the core end to end on the trace's first {CORE_STEPS} steps, both "
               f"presets (Verilator)", "core.log", status):
        ok, rows = _core_trace(cfg, DEMO / "core_trace.json")
        table += rows
        if not ok:
            raise RuntimeError("the core's run differs from the golden model")

    print("[4/4] each block's quick check against the golden model (Verilator)")
    for name, (tests, what) in QUICK.items():
        with _step(f"  {name}: {what}", f"quick_{name}.log", status):
            ok, detail = _check(name, cfg, tests)
            table.append((name, ok, f"{what} ({detail})", _cycles(_build(name))))
            if not ok:
                raise RuntimeError(detail)

    print()
    print("| check | result | what | simulated cycles |")
    print("|---|---|---|---|")
    for name, ok, what, cyc in table:
        print(f"| {name} | {'PASS' if ok else 'FAIL'} | {what} | "
              f"{'' if cyc is None else f'{cyc:,}'.replace(',', ' ')} |")
    print(f"\nreports: build/golden/, build/verilog/, build/demo/; logs: {LOGS}/; "
          f"{time.time() - t_start:.0f} s")
    print("synthesis and place-and-route: make synth; the blocks' long benches: make bench")
    if status["failed"]:
        print(f"FAILED: {len(status['failed'])} step(s); logs in {LOGS}/")
        return 1
    print("PASS: every step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
