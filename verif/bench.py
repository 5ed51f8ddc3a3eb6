"""``make bench`` for the RTL blocks: each registered block's cocotb benchmark under Verilator.

For every block of :data:`rtl.BLOCKS` that has a bench (``verif/<group>/bench.py``, or
``bench_<block>.py`` in a group of several), builds the block
from the Config (``--config``, default: the paper preset), runs the benchmark and writes
``build/bench/<block>.json`` (the block's own counters and derived figures, with the
Config it measured); the core also in the other order of its sequencer
(``core_<order>.json``) and with dense layers (D14, :func:`dense_runs`: ``core_dense.json``,
``core_layer0*.json``; one descriptor at a time, the cycle model's prediction beside). Tool
logs go to ``build/sim/<block>_bench/``.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
from pathlib import Path

from verif.lib.runner import ROOT, failures, run_cocotb, verif_module
from vrex.emit import load_config

__all__ = ["bench_block", "benched_blocks", "main"]


def _bench_module(name: str) -> str:
    return verif_module(name, "bench")


def benched_blocks() -> list[str]:
    from rtl import BLOCKS
    return [b for b in BLOCKS if importlib.util.find_spec(_bench_module(b)) is not None]


def bench_block(name: str, cfg, out_dir: Path, stem: str | None = None,
                env: dict | None = None) -> dict:
    """Run ``verif.<name>.bench`` on the block built from ``cfg`` (``env``: more of the
    bench's environment); its JSON report (``<out_dir>/<stem or name>.json``)."""
    if name == "core" and cfg.attn_b_rows < 1024:
        # the bench's figures are for sets that fit B (the bundled trace attends up to 889
        # tokens a row); longer sets run in chunks, measured by the cycle model's runs
        cfg = cfg.replace(attn_b_rows=1024, attn_acc_bits=max(34, cfg.attn_acc_bits))
    stem = stem or name
    out = (Path(out_dir) / f"{stem}.json").resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    build = ROOT / "build" / "sim" / f"{stem}_bench"
    results = run_cocotb(name, cfg, test_module=_bench_module(name), build_dir=build,
                         extra_env={"BENCH_OUT": str(out), **(env or {})}, check_lint=False)
    if msg := failures(results, build):
        raise RuntimeError(f"the {name} benchmark failed: {msg}")
    return json.loads(out.read_text())


def dense_runs() -> list:
    """The core's dense-layer benchmarks (D14), ``(stem, dense_layers, stream spec)``: the
    bundled trace (``None``: its first four steps, both presets) with its first layer
    (model layer 4) dense; and, where the shared traces are, a cut of one holding the
    model's layer 0 (``carphone_pool2_f16``: its layers 0, 4 and 8, four steps) without and
    with layer 0 dense."""
    from verif.lib.traces import SHARED, bundled
    first = int(min(bundled()[0].layers))
    runs = [("core_dense", first + 1, None)]
    l0 = SHARED / "carphone_pool2_f16.npz"
    if l0.exists():
        from golden.trace import load_trace
        spec = {"trace": str(l0), "layers": [0, 1, 2], "steps": 4,
                "model_layers": [int(x) for x in load_trace(l0).layers[:3]]}
        runs += [("core_layer0", 0, spec), ("core_layer0_dense", 1, spec)]
    return runs


def model_cycles(report: dict) -> dict:
    """The cycle model's (``golden.cycles``, the fitted coefficients) cycles for a core
    bench report's runs, on the build the report names: per preset, the descriptors'
    total."""
    from golden.cycles import bench_features, load_fit, predict
    from vrex.config import Config
    coef, out = load_fit(), {}
    cfg = Config.from_dict(report["config"])
    for preset, _, f in bench_features(report, cfg, report.get("latency", 0)):
        out[preset] = out.get(preset, 0) + sum(predict(coef, f).values())
    return {p: round(v) for p, v in out.items()}


def summary(name: str, report: dict) -> list[str]:
    return importlib.import_module(_bench_module(name)).summary(report)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="verif.bench", description=__doc__)
    ap.add_argument("--out", default="build/bench")
    ap.add_argument("--config", help="a Config as JSON (default: the paper preset)")
    ap.add_argument("blocks", nargs="*", help="blocks to benchmark (default: every block)")
    args = ap.parse_args(argv)
    cfg, out = load_config(args.config), Path(args.out)

    def run(name, c, stem, what, env=None):
        print(f"{what}: benchmark under Verilator ...", flush=True)
        r = bench_block(name, c, out, stem, env=env)
        if name == "core":        # the cycle model's cycles beside the measured ones
            r["model"] = model_cycles(r)
            (out / f"{stem}.json").write_text(json.dumps(r, indent=1))
        for line in summary(name, r):
            print(f"  {line}")
        print(f"  wrote {out / f'{stem}.json'}")
    for name in args.blocks or benched_blocks():
        run(name, cfg, name, name)
        if name == "core":
            # the core in the other order of its sequencer (docs/core.md), beside the build's
            other = {"cluster_first": "select_first"}.get(cfg.order, "cluster_first")
            run(name, cfg.replace(order=other), f"core_{other}", f"core, order {other}")
            for stem, dense, spec in dense_runs():
                run(name, cfg.replace(dense_layers=dense), stem,
                    f"core, dense_layers {dense}, {spec or 'bundled'}",
                    env={"VREX_QUEUED": "0", "VREX_FIGURE": "0",
                         "VREX_MEASURE": json.dumps(spec) if spec else ""})
    return 0


if __name__ == "__main__":
    sys.exit(main())
