"""``make fpga``: the board's bitstream and its report.

The board top (:class:`rtl.board.top.BoardTop`: PLL, reset, core, on-chip memory, serial
bridge) on ``amaranth-boards``' platform of the board gives the design and its pin and
clock constraints (``build/fpga/<board>.il``, ``.lpf``); YoWASP Yosys maps it for the ECP5
(``synth.run``'s flows, the block RAM output and multiplier registers moved into the RAMs
and DSPs as for the blocks), nextpnr-ecp5 places and routes it on each seed at the board's
clock, ``synth.sta`` summarises every endpoint's slack, and ecppack packs the best seed's
placement into ``build/fpga/<board>.bit``. ``report.json`` and ``report.md`` there hold the
utilisation against the device (and the limits the build must keep), each seed's Fmax and
its limiting paths; the synthesis report (``build/synth/report.json``) gets them under
``boards``.

Flash a ULX3S with ``openFPGALoader -b ulx3s build/fpga/ulx3s.bit`` (docs/board.md).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from vrex.boards import BOARDS, board_config
from vrex.toolchain import default_jobs

from .run import KEEP_COPIES, _cells, _map_fpga, _run, ecp5_counts

__all__ = ["build", "fit", "prepare", "synthesise", "packed", "place", "cycle_cost", "LIMITS",
           "DEVICE_85F", "main"]

# the ECP5-85F's resources and the share of each a board build may take (the headroom
# nextpnr needs to route, and room to grow)
DEVICE_85F = {"TRELLIS_COMB": 83640, "TRELLIS_FF": 83640, "DP16KD": 208, "MULT18X18D": 156}
LIMITS = {"TRELLIS_COMB": 0.85, "DP16KD": 0.90, "MULT18X18D": 1.0}


def _tool(name: str) -> str:
    return str(Path(sys.executable).parent / f"yowasp-{name}")


def prepare(board: str, preset: str, out) -> tuple:
    """The board top's RTLIL and constraints in ``out`` (Amaranth's platform build, not
    run); returns (the Config, the Board)."""
    from amaranth_boards.ulx3s import ULX3S_85F_Platform
    from rtl.board.top import BoardTop
    platforms = {"ulx3s": ULX3S_85F_Platform}
    b = BOARDS[board]
    cfg = board_config(b, preset)
    plan = platforms[board]().build(BoardTop(cfg, b), name=board, build_dir=str(out),
                                    do_build=False)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for fn, content in plan.files.items():
        (out / fn).write_bytes(content if isinstance(content, bytes) else content.encode())
    drop_zero_meminit_rtlil(out / f"{board}.il")
    return cfg, b


_ZERO_MEMINIT = re.compile(r"  cell \$meminit_v2 [^\n]*\n(?:    [^\n]*\n)*?  end\n")


def drop_zero_meminit_rtlil(path) -> int:
    """Remove the ``$meminit_v2`` cells that set a memory to zeros (the RTLIL form of
    :func:`synth.run.drop_zero_meminit`: the ECP5's RAMs power up zeroed). Returns how many
    were dropped."""
    text = Path(path).read_text()
    keep, n = [], 0
    pos = 0
    for mo in _ZERO_MEMINIT.finditer(text):
        data = re.search(r"connect \\DATA \d+'([01]+)", mo.group(0))
        if data and set(data.group(1)) == {"0"}:
            keep.append(text[pos:mo.start()])
            pos = mo.end()
            n += 1
    keep.append(text[pos:])
    if n:
        Path(path).write_text("".join(keep))
    return n


def place(board, out, seed: int) -> dict:
    """nextpnr-ecp5 on ``seed``: its Fmax, the utilisation and the slack summary."""
    from .sta import summary
    b = BOARDS[board] if isinstance(board, str) else board
    tag = f"seed{seed}"
    t = _run([_tool("nextpnr-ecp5"), b.device, "--package", b.package, "--speed", "6",
              "--json", f"{b.name}.json", "--lpf", f"{b.name}.lpf", "--textcfg",
              f"{b.name}_{tag}.config", "--report", f"pnr_{tag}.json", "--sdf",
              f"routed_{tag}.sdf", "--seed", str(seed), "--timing-allow-fail",
              "--placer-heap-timingweight", "30"], out, f"nextpnr_{tag}.log")
    rep = json.loads((Path(out) / f"pnr_{tag}.json").read_text())
    fmax = {k: round(v["achieved"], 2) for k, v in rep.get("fmax", {}).items()}
    sta = summary(Path(out) / f"routed_{tag}.sdf", 1000 / b.clk_mhz)
    return {"seed": seed, "fmax_mhz": min(fmax.values()) if fmax else None,
            "fmax_by_clock": fmax, "seconds": round(t), "sta": sta,
            "utilisation": rep.get("utilization", {})}


def cycle_cost(board: str = "ulx3s") -> dict:
    """The cycle model's cycles (``golden.cycles``, the fitted coefficients) of the board's
    build against the reference build (B 1024) under each preset: on the board's crop of
    the bundled trace, and on the bundled trace's first four steps (whose sets of up to 300
    tokens the board's B of 64 attends in chunks; its tables could not hold that stream's
    clusters: an estimate of the shrunk buffers' cost alone)."""
    from golden.core import run_stream
    from golden.cycles import load_fit, predict_stream
    from golden.layout import board_trace
    from golden.trace import load_trace, quantise
    from vrex.config import Config
    b = BOARDS[board]
    tr = load_trace(Path(__file__).resolve().parents[1] / "data" / "carphone_cut.npz")
    crop = board_trace(tr, b)
    coef, out = load_fit(), {}
    streams = {"crop": (crop, quantise(crop), None), "bundled_4_steps": (tr, quantise(tr), 4)}
    for preset in ("paper", "tuned"):
        ref = Config.from_preset(preset, **tr.geometry(), attn_b_rows=1024, attn_acc_bits=34)
        for name, (t, q, steps) in streams.items():
            row = {}
            for label, cfg in (("reference", ref), ("board", board_config(b, preset))):
                g = run_stream(t, q, cfg, steps=steps)
                row[label] = round(sum(predict_stream(coef, g, cfg, 0, cfg.centre).values()))
            out[f"{preset}/{name}"] = row
    return out


def synthesise(board: str, preset: str, out) -> dict:
    """The board top's design mapped for the ECP5 in ``out`` (``<board>.json``, the block
    RAM output and multiplier registers moved in); the report's first entries."""
    out = Path(out)
    cfg, b = prepare(board, preset, out)
    res = {"board": board, "device": f"LFE5U-85F {b.package}", "clk_mhz": b.clk_mhz,
           "mem_bytes": b.mem_bytes, "config": cfg.to_dict(), "seconds": {}}
    read = f"read_rtlil {board}.il; {KEEP_COPIES}"
    res["seconds"]["yosys"], flow = _map_fpga("ecp5", board, read, out, f" -json {board}.json")
    if flow:
        res["yosys_flow"] = flow
    by, _ = _cells(out / "ecp5_stat.json")
    res["cells"] = ecp5_counts(by)
    from .bram_outreg import absorb
    from .dsp_regs import absorb as absorb_dsp
    res["cells"]["bram_outreg_ff"] = absorb(out / f"{board}.json", enabled=True)
    res["cells"]["dsp_regs_ff"] = absorb_dsp(out / f"{board}.json")
    return res


def packed(board: str, out) -> dict:
    """nextpnr-ecp5's packing alone (``--pack-only``, a minute): the utilisation it reports,
    ``{resource: (used, available)}``, before any placement."""
    b = BOARDS[board]
    _run([_tool("nextpnr-ecp5"), b.device, "--package", b.package, "--speed", "6", "--json",
          f"{board}.json", "--lpf", f"{board}.lpf", "--pack-only", "--log", "pack.log"],
         out, "pack_run.log")
    util = {}
    for line in (Path(out) / "pack.log").read_text().splitlines():
        if mo := re.match(r"Info:\s+(\w+):\s+(\d+)/\s*(\d+)", line):
            util[mo.group(1)] = (int(mo.group(2)), int(mo.group(3)))
    return util


def fit(board: str = "ulx3s", preset: str = "paper", out="build/fpga") -> dict:
    """:func:`synthesise` and :func:`packed`: the report of a build not yet placed (its
    utilisation after packing, against :data:`LIMITS`; the cycle model's cost), written as
    ``report.json`` and ``report.md`` in ``out``."""
    out = Path(out)
    res = synthesise(board, preset, out)
    _utilisation(res, packed(board, out), "nextpnr-ecp5 --pack-only")
    res["seeds"], res["fmax_by_seed"] = {}, {}
    res["cycle_cost"] = cycle_cost(board)
    _write(res, out)
    return res


def build(board: str = "ulx3s", preset: str = "paper", out="build/fpga", seeds=(1, 2, 3),
          jobs: int | None = None, bitstream: bool = True) -> dict:
    """:func:`fit`, then nextpnr on every seed (``jobs`` at once) and ecppack of the best."""
    out = Path(out)
    t0 = time.time()
    res = fit(board, preset, out)
    b = BOARDS[board]
    over = [k for k, v in res["limits"].items() if not v["holds"]]
    if over:
        raise SystemExit(f"the {board} build does not fit within the limits: " + ", ".join(
            f"{k} {100 * res['utilisation'][k]['share']:.0f}% > "
            f"{100 * LIMITS[k]:.0f}%" for k in over) + " (vrex.boards: shrink the build)")
    with ThreadPoolExecutor(max(1, min(jobs or default_jobs(), len(seeds)))) as pool:
        runs = list(pool.map(lambda s: place(b, out, s), seeds))
    res["seeds"] = {str(r["seed"]): r for r in runs}
    _utilisation(res, {k: (v["used"], v["available"])
                       for k, v in runs[0]["utilisation"].items()},
                 "nextpnr-ecp5's placed design (seed 1)")
    res["fmax_by_seed"] = {str(r["seed"]): r["fmax_mhz"] for r in runs}
    best = max(runs, key=lambda r: r["fmax_mhz"] or 0)
    if bitstream:
        _run([_tool("ecppack"), "--compress", "--input", f"{board}_seed{best['seed']}.config",
              "--bit", f"{board}.bit"], out, "ecppack.log")
        res["bitstream"] = str(out / f"{board}.bit")
        res["bitstream_seed"] = best["seed"]
    res["seconds"]["total"] = round(time.time() - t0)
    _write(res, out)
    return res


def _utilisation(res: dict, util: dict, source: str) -> None:
    """``res``'s utilisation from ``{resource: (used, available)}`` and whether each of
    :data:`LIMITS` holds."""
    res["utilisation"] = {k: {"used": u, "available": a, "share": round(u / a, 4)}
                          for k, (u, a) in util.items() if k in DEVICE_85F}
    res["utilisation_from"] = source
    res["limits"] = {k: {"limit": lim, "holds": res["utilisation"].get(k, {}).get(
        "share", 0) <= lim} for k, lim in LIMITS.items()}


def _write(res: dict, out: Path) -> None:
    (out / "report.json").write_text(json.dumps(res, indent=1, sort_keys=True))
    (out / "report.md").write_text(markdown(res))
    _into_synth_report(res)


def markdown(res: dict) -> str:
    lines = [f"# {res['board']}: the board design", "",
             f"{res['device']}, core clock {res['clk_mhz']} MHz from the PLL, "
             f"{res['mem_bytes'] // 1024} KB of on-chip memory.", "",
             f"Utilisation ({res.get('utilisation_from', '')}):", "",
             "| resource | used | available | share | limit |", "|---|---|---|---|---|"]
    for k, u in res["utilisation"].items():
        lim = res["limits"].get(k, {}).get("limit")
        lines.append(f"| {k} | {u['used']} | {u['available']} | {100 * u['share']:.1f}% | "
                     + (f"{100 * lim:.0f}%" if lim else "-") + " |")
    lines += ["", "| seed | Fmax (MHz) | worst slack (ns) | failing endpoints |",
              "|---|---|---|---|"]
    for s, r in res["seeds"].items():
        st = r["sta"] or {}
        lines.append(f"| {s} | {r['fmax_mhz']} | {st.get('worst_slack_ns', '-')} | "
                     f"{st.get('failing', '-')} |")
    if not res["seeds"]:
        lines.append("| (not placed: `python -m synth.fpga --fit` packs only) | | | |")
    return "\n".join(lines) + "\n"


def _into_synth_report(res: dict, path="build/synth/report.json") -> None:
    p = Path(path)
    rep = json.loads(p.read_text()) if p.exists() else {}
    rep.setdefault("boards", {})[res["board"]] = {
        k: res[k] for k in ("device", "clk_mhz", "utilisation", "limits", "fmax_by_seed")}
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(rep, indent=1, sort_keys=True))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="synth.fpga", description=__doc__)
    ap.add_argument("--board", default="ulx3s", choices=sorted(BOARDS))
    ap.add_argument("--preset", default="paper")
    ap.add_argument("--out", default="build/fpga")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--prepare-only", action="store_true",
                    help="write the design and constraints, run no tool")
    ap.add_argument("--fit", action="store_true",
                    help="synthesise and pack only: does the build fit the device?")
    a = ap.parse_args(argv)
    if a.prepare_only:
        prepare(a.board, a.preset, a.out)
        return 0
    if a.fit:
        res = fit(a.board, a.preset, a.out)
        print((Path(a.out) / "report.md").read_text())
        return 0 if all(v["holds"] for v in res["limits"].values()) else 1
    res = build(a.board, a.preset, a.out, tuple(int(s) for s in a.seeds.split(",")), a.jobs)
    print((Path(a.out) / "report.md").read_text())
    bad = [k for k, v in res["limits"].items() if not v["holds"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
