"""What one sweep point measures, as pure functions of their inputs.

- :func:`measure`: the golden model's fidelity on a trace (per stage: retrieval ratio,
  relative L2 error of the output, mass recall, cosine, the prediction's key share) and the
  cycle model's performance: at the point's own build on the trace (``golden.core
  .run_stream`` and ``golden.cycles.predict_descriptors``, the stream queued, the memory's
  round trip ``latency``) and at the paper's setting (``golden.cycles.paper_setting`` with the
  point's hardware sizes and its own frame-stage retrieval ratio).
- :func:`block_area`: one block's ECP5 and 7-series cells from Yosys (``synth_ecp5``,
  ``synth_xilinx``; no place and route), kept on disk by a hash of the block's parameters and
  the RTL's code (:func:`area_key`).

Every result is keyed by a content hash of what it depends on (:func:`code_version`), so a
sweep reruns only what changed.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path

import numpy as np

__all__ = ["measure", "block_area", "area_key", "point_key", "code_version", "file_digest",
           "FIDELITY", "PERFORMANCE", "AREA"]

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("frame", "text")
# the columns each part of a point adds to the table
FIDELITY = tuple(f"{st}_{k}" for st in STAGES
                 for k in ("ratio", "rel_l2", "recall", "cosine", "key_share"))
PERFORMANCE = ("build_frame_cycles", "build_frame_us", "build_prediction_share",
               "paper_frame_ms", "paper_fps", "paper_prediction_share", "perf_note")
AREA = ("ecp5_lut4", "ecp5_ff", "ecp5_bram", "ecp5_dsp", "xc7_lut", "xc7_ff", "xc7_bram36",
        "xc7_dsp")


def _hash(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(json.dumps(p, sort_keys=True, default=str).encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


# what reads or reports results without changing them: not in the code version
_NOT_MEASURING = {"sweep/report.py", "sweep/__main__.py", "sweep/scale.py", "vrex/figures.py",
                  "vrex/reports.py"}


@functools.lru_cache(maxsize=None)
def code_version(*packages: str) -> str:
    """A hash of the source of ``packages`` (folders of the repository) and the fitted cycle
    model: what a result computed by that code depends on."""
    h = hashlib.sha256()
    files = sorted(p for pkg in packages for p in (ROOT / pkg).rglob("*.py")
                   if str(p.relative_to(ROOT)) not in _NOT_MEASURING)
    if "golden" in packages:
        files.append(ROOT / "data" / "cycle_model.json")
    for p in files:
        h.update(str(p.relative_to(ROOT)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=None)
def file_digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def point_key(fields: dict, trace: str, opts: dict) -> str:
    """A point's key: its fields, the trace's content, the options that change its
    measurement and the code of everything it runs."""
    return _hash(fields, file_digest(str(trace)), opts,
                 code_version("golden", "vrex", "rtl", "synth", "sweep"))


def area_key(block: str, params: dict) -> str:
    """A block build's key: its parameters and the code that builds and maps it."""
    return _hash(block, params, code_version("rtl", "synth", "vrex"))


@functools.lru_cache(maxsize=4)
def _trace(path: str):
    from golden.trace import load_trace, quantise
    t = load_trace(path)
    return t, quantise(t)


def measure(fields: dict, trace: str, latency: int = 40, paper_cache: int = 10240) -> dict:
    """Fidelity and performance of the point ``fields`` on ``trace`` (columns
    :data:`FIDELITY` and :data:`PERFORMANCE`), with BLAS on one thread: the same sums in the
    same order in any process, so a point measured anywhere gives the same bits."""
    from threadpoolctl import threadpool_limits
    with threadpool_limits(1):
        return _measure(fields, trace, latency, paper_cache)


def _measure(fields, trace, latency, paper_cache) -> dict:
    from golden import baselines
    from golden.metrics import aggregate, evaluate
    from golden.resv import run_resv
    from .spec import point_config
    t, qt = _trace(str(trace))
    cfg = point_config(fields, t.geometry())
    run = run_resv(t, qt if cfg.numerics == "int" else None, cfg, [cfg.th_r])
    stage = np.array(t.step_stage())
    key = ("resv", cfg.th_r)
    stats = evaluate(t, {key: run.masks[cfg.th_r]}, run.n_sink, qt=qt, cfg=cfg)
    keys = baselines.prediction_keys("resv", t, run.n_sink, candidates=run.candidates)
    agg = aggregate(stats[key], stage, keys=keys, head_dim=t.head_dim)
    row = {}
    for st in STAGES:
        row[f"{st}_ratio"] = agg["retrieval_ratio"][st]
        row[f"{st}_rel_l2"] = agg["output_rel_l2"][st]
        row[f"{st}_recall"] = agg["mass_recall"][st]
        row[f"{st}_cosine"] = agg["output_cosine"][st]
        row[f"{st}_key_share"] = agg["prediction"]["key_share"][st]
    row.update(_performance(cfg, t, qt, stage, row["frame_ratio"], latency, paper_cache))
    return row


def _performance(cfg, t, qt, stage, frame_ratio, latency, paper_cache) -> dict:
    from golden import cycles
    from golden.core import run_stream
    out = dict.fromkeys(PERFORMANCE)
    coef = cycles.load_fit()
    try:
        steps = run_stream(t, qt, cfg, outputs=False)
    except ValueError as e:          # a ReSV setting the core does not run
        out["perf_note"] = f"no build cycles: {e}"
    else:
        per = cycles.predict_descriptors(coef, steps, cfg, latency, cfg.centre, queued=True)
        frames = [i for i, ls in enumerate(steps) if stage[ls.step] == "frame"]
        n_frames = len({steps[i].step for i in frames})
        if n_frames:
            total = sum(sum(per[i].values()) for i in frames)
            pred = sum(per[i]["predict"] for i in frames)
            att = sum(per[i]["attend"] for i in frames)
            out["build_frame_cycles"] = round(total / n_frames, 1)
            out["build_frame_us"] = round(total / n_frames / cycles.PAPER["clock_mhz"], 3)
            out["build_prediction_share"] = pred / att if att else None
    over = dict(n=cfg.attn_n, bus=cfg.kvmu_bus_bytes, n_hp=cfg.n_hp, lanes=cfg.wtu_lanes,
                max_reads=cfg.kvmu_max_reads, window=cfg.window, hcu_lanes=cfg.hcu_lanes,
                b_rows=cfg.attn_b_rows)
    if cfg.hcu_contexts is not None:
        over["contexts"] = cfg.hcu_contexts
    if frame_ratio is not None:
        over["retrieved"] = frame_ratio
    fr = cycles.paper_setting(coef, caches=(paper_cache,), **over)["frames"][0]
    out["paper_frame_ms"] = round(fr["frame_ms"], 4)
    out["paper_fps"] = round(fr["fps"], 4)
    out["paper_prediction_share"] = fr["prediction_share_of_attention"]
    return out


def block_area(block: str, fields: dict, geo: dict, cache: str, work: str) -> dict:
    """One block's cells for the point ``fields`` (at geometry ``geo``): read from ``cache``
    (a folder) when that build was mapped before, else mapped by Yosys in a folder under
    ``work`` (relative paths: YoWASP's tools do not see absolute paths under /tmp)."""
    from .spec import point_config
    cfg = point_config(fields, geo)
    params = cfg.block_params(block)
    key = area_key(block, params)
    hit = Path(cache) / f"{block}-{key}.json"
    if hit.exists():
        return json.loads(hit.read_text())
    from rtl import BLOCKS
    from synth.run import (KEEP_COPIES, _cells, _map_fpga, drop_zero_meminit, ecp5_counts,
                           xc7_counts)
    from synth.wrap import PinWrapper
    from vrex.emit import write_verilog
    out = Path(work) / f"{block}-{key}"
    out.mkdir(parents=True, exist_ok=True)
    drop_zero_meminit(write_verilog(PinWrapper(BLOCKS[block].from_config(cfg)),
                                    f"{block}_wrap", out))
    read = f"read_verilog {block}_wrap.v; {KEEP_COPIES}"
    res = {"block": block, "key": key, "seconds": 0.0}
    for fam in ("ecp5", "xc7"):
        sec, _ = _map_fpga(fam, f"{block}_wrap", read, out)
        res["seconds"] += sec
        by, _ = _cells(out / f"{fam}_stat.json")
        res[fam] = by
    # the synthesis report's figures, under the table's column names (AREA)
    e, x = ecp5_counts(res["ecp5"]), xc7_counts(res["xc7"])
    res["cells"] = {**{f"ecp5_{k}": e[k] for k in ("lut4", "ff", "bram", "dsp")},
                    "xc7_lut": x["lut"], "xc7_ff": x["ff"], "xc7_bram36": x["bram36"],
                    "xc7_dsp": x["dsp"]}
    Path(cache).mkdir(parents=True, exist_ok=True)
    tmp = hit.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(res, sort_keys=True))
    tmp.replace(hit)                     # whole or not at all, if two workers race
    return res
