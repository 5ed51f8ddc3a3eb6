"""Throughput as a user reads it: items per microsecond = the block's ECP5 Fmax (from the
synthesis report, ``make synth``) / cycles per item (from the bench). The benches of the HCU
(tokens) and the WTU (rows) add it to their JSON beside the figures of the commit before the
WTU's pipelined walk (``BEFORE``), so the change reads in the units a user cares about."""
from __future__ import annotations

import json

from verif.lib.runner import ROOT

__all__ = ["BEFORE", "fmax", "per_us"]

REPORT = ROOT / "build" / "synth" / "report.json"

# measured at commit 2d312eb (make synth, make bench; README and docs of that commit): the
# last commit with the one-bucket, one-row-at-a-time WTU and the 3-cycle-latency HCU
BEFORE = {
    "commit": "2d312eb",
    "wtu": {"fmax_mhz": 48.7, "cycles_per_row": {
        "trace_paper": 20.9, "trace_tuned": 26.1, "synthetic_16": 13.0, "synthetic_64": 20.2,
        "synthetic_256": 53.0, "synthetic_1024": 137.0, "synthetic_4096": 573.0}},
    "hcu": {"fmax_mhz": 52.0, "cycles_per_token": {
        "full_window": 67.0, "trace_paper": 5.12, "trace_tuned": 6.83}},
}


def fmax(block: str) -> tuple[float | None, str]:
    """``(MHz, where it came from)``: the block's ECP5 Fmax in ``build/synth/report.json``,
    or ``None`` with the reason."""
    if not REPORT.exists():
        return None, "no build/synth/report.json: run make synth"
    rep = json.loads(REPORT.read_text())
    e = rep.get("blocks", {}).get(block, {}).get("ecp5", {})
    if e.get("fmax_mhz"):
        seeds = ", ".join(e.get("fmax_by_seed", {"1": e["fmax_mhz"]}))
        return float(e["fmax_mhz"]), (f"build/synth/report.json (nextpnr-ecp5, the lowest "
                                      f"of seeds {seeds})")
    return None, f"{block} not placed in build/synth/report.json"


def per_us(block: str, cycles_per_item: dict, unit: str) -> dict:
    """``{fmax_mhz, fmax_from, <unit>_per_us: {case: ...}, before: {...}}`` for the bench
    JSON; ``cycles_per_item`` maps a case to its measured cycles per item."""
    f, src = fmax(block)
    b = BEFORE[block]
    key = "cycles_per_row" if unit == "rows" else "cycles_per_token"
    out = {"fmax_mhz": f, "fmax_from": src,
           f"{unit}_per_us": {k: (f / c if f else None) for k, c in cycles_per_item.items()},
           "before": {"commit": BEFORE["commit"], "fmax_mhz": b["fmax_mhz"],
                      f"{unit}_per_us": {k: b["fmax_mhz"] / c for k, c in b[key].items()}}}
    return out
