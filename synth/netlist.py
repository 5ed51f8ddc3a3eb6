"""Reading and rewriting an ECP5 netlist (Yosys JSON) between Yosys and nextpnr: the pieces
the flow's netlist passes (synth/bram_outreg.py, synth/dsp_regs.py, synth/global_reset.py)
share."""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

__all__ = ["param", "read_top", "loads_of", "write_pruned"]


def param(cell, name, default=None):
    """A cell parameter as Yosys's JSON writes it (strings that look like bits end in a
    space), stripped."""
    v = cell["parameters"].get(name, default)
    return v.strip() if isinstance(v, str) else v


def read_top(path):
    """The netlist at ``path`` and its top module."""
    data = json.loads(Path(path).read_text())
    mods = data["modules"]
    return data, mods[next(m for m in mods if mods[m].get("attributes", {}).get("top"))]


def loads_of(mod) -> defaultdict:
    """Every net bit's loads: (cell, input port), and ("", "output") for a module output."""
    loads = defaultdict(list)
    for name, cell in mod["cells"].items():
        for port, bits in cell["connections"].items():
            if cell["port_directions"].get(port) == "input":
                for b in bits:
                    loads[b].append((name, port))
    for port in mod["ports"].values():
        if port["direction"] == "output":
            for b in port["bits"]:
                loads[b].append(("", "output"))
    return loads


def write_pruned(path, data, mod) -> None:
    """Drop the net names no cell or port uses any more, and write the netlist to ``path``."""
    used = {b for c in mod["cells"].values() for bits in c["connections"].values() for b in bits}
    used |= {b for p in mod["ports"].values() for b in p["bits"]}
    names = mod["netnames"]
    for n in [n for n, v in names.items() if not any(b in used for b in v["bits"])]:
        del names[n]
    Path(path).write_text(json.dumps(data))
