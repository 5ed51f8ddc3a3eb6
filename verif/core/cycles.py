"""The core's cycle model, fitted and validated against the RTL (``make cycles``).

Runs the core under Verilator on a set of streams (``RUNS``): the fitting runs and the held-out
ones (another real trace, other sizes of the build and of the stream, other memory latencies).
Each run writes a row per descriptor (its golden features, its cycles per phase: the core's
own counters). :mod:`golden.cycles` fits its per-operation coefficients on the fitting rows,
then predicts every held-out run; the report gives the error per run and per phase, and the
paper-setting evaluation (``golden.cycles.paper_setting``) from the fitted model.

Writes ``build/bench/cycles.json`` and ``cycles.png``; the runs' rows are kept in
``build/bench/cycles/<run>.json`` and reused (``--fresh`` runs them again).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from verif.core.e2e import GEOMETRY, SYNTH, SYNTH_BUILD
from verif.lib.runner import ROOT, failures, run_cocotb
from vrex.config import Config

__all__ = ["BUILDS", "RUNS", "measure_run", "main"]

# builds: the default geometry (the bundled trace's) at the default array and bus, B of 1024
# rows; a small geometry on a 4 x 4 array and a 16-byte bus; a third one, 8 x 8 on an 8-byte
# bus, kept out of the fit
BUILDS = {
    "A": dict(attn_b_rows=1024, attn_acc_bits=34),
    "B": dict(n_layers=2, n_q_heads=4, n_kv_heads=2, head_dim=32, attn_n=4,
              kvmu_bus_bytes=16, attn_b_rows=512, attn_acc_bits=33),
    "C": dict(n_layers=2, n_q_heads=8, n_kv_heads=2, head_dim=64, attn_n=8,
              kvmu_bus_bytes=8, attn_b_rows=512, attn_acc_bits=33),
    # the test suite's small build (verif/core/e2e.py: synth_config)
    "D": dict(**{k: SYNTH[k] for k in GEOMETRY}, **SYNTH_BUILD),
    # its geometry with the default buffers, for a longer stream in the fit
    "E": dict(n_layers=2, n_q_heads=4, n_kv_heads=2, head_dim=16),
    # cluster windows through memory: B's geometry hashed per KV head (four windows) on one
    # HCU context (fitted); A on two contexts for its three, C on one for its two (held out)
    "F": dict(n_layers=2, n_q_heads=4, n_kv_heads=2, head_dim=32, attn_n=4,
              kvmu_bus_bytes=16, attn_b_rows=512, attn_acc_bits=33, hash_scope="per_head",
              hcu_contexts=1),
    "A2": dict(attn_b_rows=1024, attn_acc_bits=34, hcu_contexts=2),
    "C2": dict(n_layers=2, n_q_heads=8, n_kv_heads=2, head_dim=64, attn_n=8,
               kvmu_bus_bytes=8, attn_b_rows=512, attn_acc_bits=33, hcu_contexts=1),
    # sets longer than B in chunks (docs/core.md): the default build (B of 256: the bundled
    # trace chunks from its fifth step), B's geometry with B of 128 (fitted); C's with B of 96
    # (held out). (B also bounds the candidates a head scores: a build's streams stay below.)
    "G": dict(),
    "H": dict(n_layers=2, n_q_heads=4, n_kv_heads=2, head_dim=32, attn_n=4,
              kvmu_bus_bytes=16, attn_b_rows=128, attn_acc_bits=33),
    "C3": dict(n_layers=2, n_q_heads=8, n_kv_heads=2, head_dim=64, attn_n=8,
               kvmu_bus_bytes=8, attn_b_rows=96, attn_acc_bits=33),
}
SYN = dict(prefix_tokens=12, header_tokens=2, question_tokens=8)
# (name, role, build, stream spec for verif.core.bench's VREX_MEASURE, memory latency)
RUNS = [
    ("A_bundled_lat0", "fit", "A", {"trace": "bundled", "steps": 4}, 0),
    ("A_bundled_lat40", "fit", "A", {"trace": "bundled", "steps": 3, "presets": ["paper"]},
     40),
    ("A_synth_lat20", "fit", "A",
     {"synthetic": dict(seed=5, n_frames=4, tokens_per_frame=40, **SYN),
      "presets": ["tuned"]}, 20),
    ("B_synth_lat0", "fit", "B",
     {"synthetic": dict(seed=6, n_frames=8, tokens_per_frame=24, **SYN)}, 0),
    ("B_synth_lat60", "fit", "B",
     {"synthetic": dict(seed=7, n_frames=6, tokens_per_frame=32, **SYN),
      "presets": ["paper"]}, 60),
    ("E_synth_lat30", "fit", "E",
     {"synthetic": dict(seed=3, n_frames=8, tokens_per_frame=16, prefix_tokens=6,
                        header_tokens=1, question_tokens=3)}, 30),
    ("F_synth_lat10", "fit", "F",
     {"synthetic": dict(seed=9, n_frames=6, tokens_per_frame=16, **SYN),
      "presets": ["tuned"]}, 10),
    ("F_synth_lat80", "fit", "F",
     {"synthetic": dict(seed=10, n_frames=4, tokens_per_frame=24, **SYN),
      "presets": ["paper"]}, 80),
    ("G_bundled_lat0", "fit", "G", {"trace": "bundled", "steps": 6, "presets": ["paper"]}, 0),
    ("H_synth_lat20", "fit", "H",
     {"synthetic": dict(seed=12, n_frames=8, tokens_per_frame=24, **SYN)}, 20),
    # the suite's small build (a near ring of 16 blocks: its stores move blocks to the far
    # tier) on another stream and latency
    ("D_synth_lat20", "fit", "D",
     {"synthetic": dict(seed=13, n_frames=5, tokens_per_frame=8, prefix_tokens=6,
                        header_tokens=1, question_tokens=3)}, 20),
    # held out: another real trace (bbb, three of its other layers), a longer bundled run at
    # another latency, another build and stream size
    ("A_bbb_lat30", "validate", "A",
     {"trace": str(ROOT.parent / "shared" / "data" / "traces" / "bbb_pool2_f32.npz"),
      "layers": [2, 4, 6], "steps": 4}, 30),
    ("A_bundled_lat100", "validate", "A",
     {"trace": "bundled", "steps": 5, "presets": ["tuned"]}, 100),
    ("C_synth_lat50", "validate", "C",
     {"synthetic": dict(seed=8, n_frames=6, tokens_per_frame=48, **SYN)}, 50),
    # the test suite's synthetic stream (verif/core/e2e.py: SYNTH, seed 1) on its build
    ("D_suite_lat0", "validate", "D",
     {"synthetic": dict(seed=1, **{k: v for k, v in SYNTH.items() if k not in GEOMETRY}),
      "presets": ["paper"]}, 0),
    ("A2_bundled_lat60", "validate", "A2",
     {"trace": "bundled", "steps": 3, "presets": ["paper"]}, 60),
    ("C2_synth_lat30", "validate", "C2",
     {"synthetic": dict(seed=11, n_frames=5, tokens_per_frame=32, **SYN)}, 30),
    # chunked sets held out: the bundled trace further on at another latency, C's geometry
    ("G_bundled_lat50", "validate", "G",
     {"trace": "bundled", "steps": 7, "presets": ["tuned"]}, 50),
    ("C3_synth_lat40", "validate", "C3",
     {"synthetic": dict(seed=13, n_frames=6, tokens_per_frame=32, **SYN),
      "presets": ["tuned"]}, 40),
]


def build_config(name: str) -> Config:
    return Config().replace(**BUILDS[name])


def measure_run(name: str, build: str, spec: dict, latency: int, out_dir: Path) -> dict:
    """One run of the core's bench test on ``spec`` at ``latency``; its report."""
    cfg = build_config(build)
    out = (out_dir / f"{name}.json").resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    bdir = ROOT / "build" / "sim" / "core_cycles" / build
    res = run_cocotb("core", cfg, test_module="verif.core.bench", build_dir=bdir,
                     test_filter="bench_trace", check_lint=False,
                     extra_env={"BENCH_OUT": str(out), "VREX_MEASURE": json.dumps(spec),
                                "VREX_BENCH_LATENCY": str(latency), "VREX_FIGURE": "0",
                                "VREX_QUEUED": "0"})
    if msg := failures(res, bdir):
        raise RuntimeError(f"run {name}: {msg}")
    return json.loads(out.read_text())


def _one_build(runs_of, out: Path):
    for name, _, build, spec, lat in runs_of:
        print(f"{name}: the core under Verilator (build {build}, latency {lat}) ...",
              flush=True)
        measure_run(name, build, spec, lat, out)
        print(f"{name}: done", flush=True)


def _with_store_counts(path: Path, build: str, spec: dict) -> dict:
    """A run's report; rows measured before the bench wrote ``opened`` (the stored tokens that
    open their cluster, ``golden.cycles.opened_tokens``) or ``moved`` (the KV blocks their
    stores move to the far tier, ``golden.cycles.moved_blocks``) get them from the golden
    model of the same stream (written back, so once)."""
    rep = json.loads(path.read_text())
    if all("opened" in r and "moved" in r for p in rep["presets"].values() for r in p["rows"]):
        return rep
    from golden.cycles import moved_blocks, opened_tokens
    from verif.core.bench import stream_plans
    cfg = build_config(build)
    plans = dict(stream_plans(cfg, spec))
    for preset, p in rep["presets"].items():
        golden = plans[preset].golden
        assert [ls.layer for ls in golden] == [r["layer"] for r in p["rows"]], path
        for r, n, mv in zip(p["rows"], opened_tokens(golden), moved_blocks(golden, cfg)):
            r["opened"], r["moved"] = n, list(mv)
    path.write_text(json.dumps(rep, indent=1))
    return rep


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="verif.core.cycles", description=__doc__)
    ap.add_argument("--out", default="build/bench")
    ap.add_argument("--fresh", action="store_true", help="run every RTL run again")
    ap.add_argument("--only", nargs="*", help="run only these runs (no fit)")
    ap.add_argument("--jobs", type=int, default=2, help="builds simulated side by side")
    ap.add_argument("--save", action="store_true",
                    help="write the fitted coefficients to data/cycle_model.json (what the "
                         "test suite checks the RTL against)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    todo = [r for r in RUNS if args.only is None or r[0] in args.only]
    by_build = {}
    for run in todo:
        if args.fresh or not (out / "cycles" / f"{run[0]}.json").exists():
            by_build.setdefault(run[2], []).append(run)
    # a build's runs in order (they share its Verilator build), builds side by side
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(max(1, args.jobs)) as pool:
        for f in [pool.submit(_one_build, r, out / "cycles") for r in by_build.values()]:
            f.result()
    runs = {name: (role, build, lat,
                   _with_store_counts(out / "cycles" / f"{name}.json", build, spec))
            for name, role, build, spec, lat in todo}
    if args.only is not None:
        return 0
    from golden.cycles import report
    rep = report(runs, {b: build_config(b) for b in BUILDS})
    (out / "cycles.json").write_text(json.dumps(rep, indent=1))
    from golden.cycles import figure, summary
    figure(rep, out / "cycles.png")
    if args.save:
        from golden.cycles import FIT
        FIT.write_text(json.dumps({k: rep[k] for k in ("coefficients", "builds", "runs",
                                                         "validation_max_error")}, indent=1))
        print(f"wrote {FIT}")
    for line in summary(rep):
        print(line)
    print(f"wrote {out / 'cycles.json'}, {out / 'cycles.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
