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
import sys
import textwrap
from pathlib import Path

from .board_regions import board_cycles, board_fpga
from .golden_regions import (methods_factorial, methods_matched, methods_options,
                             methods_order, methods_seeds, methods_wicsum)
from .reports import BLOCK_ROWS, MATCHED, ROOT, commit, entry, tools, update  # noqa: F401

SNAPSHOT = ROOT / "docs" / "figures.json"
DOCS = ("README.md", "docs/hcu.md", "docs/wtu.md", "docs/attn.md", "docs/kvmu.md",
        "docs/core.md", "docs/cycles.md", "docs/methods.md", "docs/seeds.md",
        "docs/formal.md", "docs/coverage.md", "docs/sweep.md", "docs/board.md")

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
    if isinstance(val, str):
        return f"`{val}`"
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
    """A block's "Measured" table: every figure of its entries, with where it came from (the
    core's bench has a table of its own, ``core-bench``)."""
    out = ["| figure | value | measured at | from |", "|---|---|---|---|"]
    for kind in ("synth",) if block == "core" else ("bench", "synth"):
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
    ("fpga", "`make fpga`", "the ULX3S board's bitstream: utilisation, Fmax on three seeds",
     "build/fpga/ulx3s.bit, build/fpga/report.{json,md}, docs/figures.json"),
    ("research", "`make research`", "ReSV variants against ReSV at its own ratio",
     "build/research/"),
    ("formal", "`make formal`", "SymbiYosys: every block's bus and stream rules, covers",
     "build/formal/report.{json,md}, docs/figures.json"),
    ("coverage", "`make coverage`", "Verilator line and toggle coverage, functional events",
     "build/coverage/report.{json,md}, docs/figures.json"),
    ("icarus", "`make icarus`", "the small blocks' Verilog tiers under Icarus Verilog",
     "build/icarus/"),
    ("sweep", "`make sweep [SWEEP=file]`", "a design-space sweep on Dask: fidelity, cycles, "
     "area, the Pareto front", "build/sweep/<name>/, docs/figures.json"),
)


def _duration(t: dict | None) -> str:
    if not t:
        return "not timed"
    s = t["seconds"]
    exact = s < 1200 and not t.get("basis")         # a measured run of a few minutes
    d = (f"{s:.0f} s" if s < 100 else f"{int(s // 60)} min {s % 60:.0f} s" if exact
         else f"{s / 60:.0f} min" if s < 6000 else f"{s / 3600:.1f} h")
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
            *(["\"cold\" is with an empty compiler cache (the first run on a machine), the "
               "other a later run in any clone;"]
              if any(e and e.get("cold_seconds") for e in (d, x)) else []),
            f"set-up itself takes {_duration(t.get('setup'))} with the wheels cached."]


def readme_targets(snap: dict) -> list[str]:
    t = _v(snap, "timing/make")
    out = ["| command | does | takes |", "|---|---|---|"]
    for key, cmd, does, _ in TARGETS:
        out.append(f"| {cmd} | {does} | {_duration(t.get(key))} |")
    return out


def core_bench(snap: dict) -> list[str]:
    """The core's bench per preset, in its build's order and (``bench/core_<order>``) the
    other: cycles and the phases' shares (dense layers: :func:`core_dense`)."""
    if not _v(snap, "bench/core"):
        return ["(the core's bench is not in the snapshot)"]
    out = ["| preset | order | cycles | prediction | attention | hashing | stores | measured at |",
           "|---|---|---|---|---|---|---|---|"]
    keys = ["bench/core"] + [k for k in ("bench/core_select_first", "bench/core_cluster_first")
                             if k in snap["entries"]]
    for p in ("paper", "tuned"):
        for k in keys:
            b, e = _v(snap, k), snap["entries"][k]
            sh = b.get(f"phase_share_{p}", {})
            pct = lambda x: f"{100 * sh[x]:.1f}%" if x in sh else "–"
            out.append(f"| {p} | {b.get('order') or 'select_first'} | "
                       f"{_n(b.get(f'cycles_{p}'))} | {pct('predict')} | {pct('attend')} | "
                       f"{pct('hash')} | {pct('store')} | `{e['commit']}` |")
    return out


def core_dense(snap: dict) -> list[str]:
    """The core's bench without and with dense layers (D14), stream by stream: cycles, the
    prediction's and the attention's, the change, and the cycle model's total."""
    pairs = [("bench/core", "bench/core_dense"), ("bench/core_layer0", "bench/core_layer0_dense")]
    out = ["| stream | preset | dense layers | cycles | prediction | attention | change | "
           "the cycle model | measured at |", "|---|---|---|---|---|---|---|---|---|"]
    for base, dense in pairs:
        if not (_v(snap, base) and _v(snap, dense)):
            continue
        for p in ("paper", "tuned"):
            ref = _v(snap, base).get(f"cycles_{p}")
            for k in (base, dense):
                b, e = _v(snap, k), snap["entries"][k]
                cyc, ph = b.get(f"cycles_{p}"), b.get(f"phase_cycles_{p}", {})
                dl, model = b.get("dense_layers") or 0, b.get(f"model_cycles_{p}")
                change = f"{100 * (cyc - ref) / ref:+.1f}%" if k == dense and ref else ""
                err = f"{_n(model)} ({100 * (model - cyc) / cyc:+.1f}%)" if model else "–"
                which = "none" if not dl else "model layer 0" if dl == 1 else \
                    f"model layers 0-{dl - 1}"
                out.append(f"| {b.get('stream')} | {p} | {which} | {_n(cyc)} | "
                           f"{_n(ph.get('predict'))} | {_n(ph.get('attend'))} | {change} | "
                           f"{err} | `{e['commit']}` |")
    if len(out) == 2:
        out.append("| – | not measured yet | | | | | | | |")
    return out


def formal_results(snap: dict) -> list[str]:
    f = _v(snap, "formal")
    if not f:
        return ["(make formal's results are not in the snapshot)"]
    e = snap["entries"]["formal"]
    out = ["| block | bounded proof | k-induction | covers reached (cycle) | asserted | assumed |",
           "|---|---|---|---|---:|---:|"]
    for block, jobs in f.items():
        b, c, p = jobs.get("bmc", {}), jobs.get("cover", {}), jobs.get("prove")
        covers = "; ".join(f"{k} {v if v is not None else 'never'}"
                           for k, v in c.get("reached", {}).items())
        ind = (f"{p['status'].lower()} at {p['depth']}" if p else "not tried")
        out.append(f"| {block} | {b.get('status', '–')} to {b.get('depth', '–')} cycles "
                   f"({_n(b.get('seconds'), '{:.0f}')} s) | {ind} | {covers} | "
                   f"{b.get('asserts', '–')} | {b.get('assumes', '–')} |")
    return out + ["", f"Measured at `{e['commit']}` on the build of `verif.formal.plan`."]


def coverage_results(snap: dict) -> list[str]:
    c = _v(snap, "coverage")
    if not c:
        return ["(make coverage's results are not in the snapshot)"]
    e = snap["entries"]["coverage"]
    out = ["| block | build points | lines reached | toggles | lines never reached "
           "(explained) | result |", "|---|---|---|---|---|---|"]
    for block, b in c["blocks"].items():
        tg = f"{b['toggle_pct']:.1f}%" if b["toggle_pct"] is not None else "not counted"
        out.append(f"| {block} | {len(b['builds'])} | {b['line_pct']:.1f}% "
                   f"({b['line_hit']} of {b['line_total']}) | {tg} | {b['missed']} "
                   f"({b['missed'] - b['unexplained']}) | {'PASS' if b['pass'] else 'FAIL'} |")
    ev = c["events"]
    un = ev.get("unreachable", [])
    out += ["", f"Functional events reached: {ev['reached']} of {ev['total']}"
            + (f"; unreachable by construction (build/coverage/report.md says why): "
               f"{', '.join(un)}" if un else "")
            + (f"; never: {', '.join(ev['missed'])}." if ev["missed"] else "."),
            "", f"Measured at `{e['commit']}`."]
    return out


def sweep_front(snap: dict, name: str = "bundled") -> list[str]:
    """A sweep's run and, per trace, its Pareto front and the default build's place."""
    if not (e := snap.get("entries", {}).get(f"sweep/{name}")):
        return [f"(the sweep `{name}` is not in the snapshot)"]
    v, r = e["values"], e["values"]["run"]
    labels = {"ecp5_lut4": "LUT4", "paper_frame_ms": "frame (ms)",
              "frame_rel_l2": "rel. L2 (frames)"}
    out = [f"`{v['file']}` at `{e['commit']}`: {v['ok']} points measured, {v['refused']} "
           f"refused, {v['failed']} failed; {r['measured']} measurements and "
           f"{r['synthesised']} block builds on {r['workers']} Dask worker(s) in "
           f"{_duration({'seconds': r['seconds']})}."]
    for t, tr in v["traces"].items():
        out += ["", f"`{t}`: {len(tr['front'])} of {tr['points']} points on the front. "
                + tr["default"], "",
                "| " + " | ".join([*v["varied"], *(labels[k] for k in v["objectives"]),
                                   "frame ratio", "DP16KD"]) + " |",
                "|" + "---|" * (len(v["varied"]) + len(v["objectives"]) + 2)]
        for p in tr["front"]:
            cells = [str(p[k]) + (" (default)" if p["default"] and k == v["varied"][0] else "")
                     for k in v["varied"]]
            cells += [_n(p[k], "{:,.0f}" if k == "ecp5_lut4" else "{:.1f}" if
                         k == "paper_frame_ms" else "{:.4f}") for k in v["objectives"]]
            out.append("| " + " | ".join(cells + [f"{100 * p['frame_ratio']:.1f}%",
                                                  str(p.get("ecp5_bram") or "–")]) + " |")
    return out


def paper_batch(snap: dict) -> list[str]:
    """The paper's setting per batch (``golden.batch``) and cache: a step, fps of one / all."""
    if not (e := snap.get("entries", {}).get("cycles/batch")):
        return ["(golden.batch's table is not in the snapshot)"]
    rows = e["values"]["rows"]
    caches = sorted({r["cache_tokens"] for r in rows})
    out = ["| batch | " + " | ".join(f"{c // 1024}K" for c in caches) + " |",
           "|---|" + "---|" * len(caches)]
    for b in sorted({r["batch"] for r in rows}):
        by = {r["cache_tokens"]: r for r in rows if r["batch"] == b}
        out.append(f"| {b} | " + " | ".join(
            f"{by[c]['step_ms']:.1f} ms, {by[c]['fps']:.1f} / {by[c]['fps_all_streams']:.0f} fps"
            for c in caches) + " |")
    return out + ["", f"Each cell: a batch step (a frame of every stream), frames per second "
                      f"of one stream / of all (`{e['commit']}`)."]


def readme_sweep(snap: dict, name: str = "bundled") -> list[str]:
    """The README's two lines on the shipped sweep."""
    if not (e := snap.get("entries", {}).get(f"sweep/{name}")):
        return [f"(the sweep `{name}` is not in the snapshot)"]
    v, r = e["values"], e["values"]["run"]
    t, tr = next(iter(v["traces"].items()))
    return textwrap.wrap(
        f"{v['ok']} points on `{t}`, {len(tr['front'])} on the front. {tr['default']} "
        f"{r['measured']} measurements and {r['synthesised']} block builds took "
        f"{_duration({'seconds': r['seconds']})} on {r['workers']} Dask workers "
        f"(`{e['commit']}`).", 118, break_on_hyphens=False)


def sweep_scale(snap: dict, name: str = "bundled") -> list[str]:
    """How the sweep's measurements scaled from one worker to two (``sweep.scale``)."""
    if not (e := snap.get("entries", {}).get(f"sweep/{name}/scale")):
        return [f"(the sweep `{name}`'s scaling is not in the snapshot)"]
    v = e["values"]
    ru, up = v["runs"], v["cluster_startup_s"]
    return [f"Measured (`python -m sweep.scale`, `{e['commit']}`, the sweep's "
            f"{v['tasks']} measurements, their block areas cached): in this process "
            f"{ru['in_process']['seconds']:.1f} s ({v['in_process_s_per_task']:.2f} s a task); "
            f"on a local cluster of one worker {ru['workers_1']['seconds']:.1f} s, of two "
            f"{ru['workers_2']['seconds']:.1f} s (start-up {up['workers_1']:.1f} s and "
            f"{up['workers_2']:.1f} s): a speedup of {v['speedup_1_to_2']:.2f} from one worker "
            f"to two, {v['speedup_1_to_2_running']:.2f} without the start-up; Dask's overhead "
            f"{1000 * v['overhead_s_per_task']:.0f} ms a task."]


def regions(snap: dict) -> dict:
    """Every region's name and its lines."""
    r = {"readme-blocks": readme_blocks(snap), "cycles-measured": cycles_measured(snap),
         "paper-setting": paper_setting(snap), "readme-commands": readme_commands(snap),
         "methods-matched": methods_matched(snap), "methods-options": methods_options(snap),
         "methods-order": methods_order(snap), "methods-wicsum": methods_wicsum(snap),
         "methods-factorial": methods_factorial(snap), "methods-seeds": methods_seeds(snap),
         "core-total": core_total(snap),
         "readme-targets": readme_targets(snap), "core-bench": core_bench(snap),
         "core-dense": core_dense(snap),
         "formal-results": formal_results(snap), "coverage-results": coverage_results(snap),
         "sweep-bundled": sweep_front(snap), "sweep-scale": sweep_scale(snap),
         "readme-sweep": readme_sweep(snap), "paper-batch": paper_batch(snap),
         "board-fpga": board_fpga(snap), "board-cycles": board_cycles(snap)}
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
    u.add_argument("--formal", type=Path, help="make formal's report.json")
    u.add_argument("--coverage", type=Path, help="make coverage's report.json")
    u.add_argument("--sweep", type=Path, help="a sweep's folder (build/sweep/<name>/)")
    u.add_argument("--batch", type=Path, help="golden.batch's batch.json")
    u.add_argument("--fpga", type=Path, help="make fpga's report.json")
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
                      golden=args.golden, formal=args.formal, coverage=args.coverage,
                      sweep=args.sweep, batch=args.batch, fpga=args.fpga)
        dump(snap)
        print(f"docs/figures.json: {', '.join(done) or 'nothing found to update'}")
        changed = render(snap)
        print(f"rendered: {', '.join(changed) or 'no change'}")
        return 0
    if args.cmd == "timing":
        snap = load()
        e = snap["entries"].setdefault("timing/make", entry(
            "wall time of make targets on a 2-core machine", None, {}))
        e["commit"], e["tools"] = commit(), tools()
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
