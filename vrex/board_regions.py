"""The board's regions of the docs (docs/board.md, the README): the ULX3S design's
utilisation against the device and the build's limits, each seed's Fmax, and the cycle
model's cost of the board's build; from the snapshot's ``fpga/<board>`` entry (``make
fpga``: ``vrex.reports.fpga_values``)."""
from __future__ import annotations

__all__ = ["board_fpga", "board_cycles"]

_NAMES = {"TRELLIS_COMB": "logic cells (LUT4, carry, LUT RAM)", "TRELLIS_FF": "flip-flops",
          "DP16KD": "block RAMs (DP16KD)", "MULT18X18D": "multipliers (MULT18X18D)"}


def _n(x) -> str:
    return f"{x:,}".replace(",", " ")


def _entry(snap: dict, board: str):
    return snap.get("entries", {}).get(f"fpga/{board}", {}).get("values")


def board_fpga(snap: dict, board: str = "ulx3s") -> list[str]:
    v = _entry(snap, board)
    if not v:
        return ["(`make fpga` has not been measured into docs/figures.json yet.)"]
    placed = bool(v["seeds"])
    how = ("as nextpnr-ecp5 placed it" if placed else
           "as nextpnr-ecp5 packed it (`--pack-only`: before placement)")
    out = [f"The whole design ({v['device']}, the core at {v['clk_mhz']:g} MHz from the PLL, "
           f"{v['mem_bytes'] // 1024} KB of on-chip memory), {how}:", "",
           "| resource | used | of | share | the build's limit |", "|---|---|---|---|---|"]
    for k, u in v["utilisation"].items():
        lim = v["limits"].get(k)
        held = "" if lim is None else (" (holds)" if lim["holds"] else " (**exceeded**)")
        out.append(f"| {_NAMES.get(k, k)} | {_n(u['used'])} | {_n(u['available'])} | "
                   f"{100 * u['share']:.1f}% | "
                   + (f"{100 * lim['limit']:.0f}%{held}" if lim else "–") + " |")
    if not placed:
        return out + ["", "Placement, routing and Fmax on three seeds (`make fpga`) are not in "
                          "this snapshot."]
    out += ["", "| nextpnr seed | Fmax (MHz) | worst slack at the clock (ns) | failing endpoints |",
            "|---|---|---|---|"]
    for s, r in v["seeds"].items():
        cells = [r.get(k) for k in ("fmax_mhz", "worst_slack_ns", "failing")]
        out.append(f"| {s} | " + " | ".join("–" if c is None else str(c) for c in cells) + " |")
    if v.get("limiting"):
        out += ["", "Limiting paths (seed " + str(v["limiting"]["seed"]) + "):"]
        out += [f"- {p}" for p in v["limiting"]["paths"]]
    return out


def board_cycles(snap: dict, board: str = "ulx3s") -> list[str]:
    v = _entry(snap, board)
    if not v or not v.get("cycle_cost"):
        return ["(`make fpga` has not been measured into docs/figures.json yet.)"]
    out = ["| preset | stream | reference build (cycles) | board build | ratio |",
           "|---|---|---|---|---|"]
    for key, r in v["cycle_cost"].items():
        preset, stream = key.split("/", 1)
        out.append(f"| {preset} | {stream.replace('_', ' ')} | {_n(r['reference'])} | "
                   f"{_n(r['board'])} | x{r['board'] / r['reference']:.2f} |")
    return out
