"""Put a block's synchronous reset on the ECP5 global network, in an ECP5 netlist (Yosys JSON).

nextpnr-ecp5 promotes only clock nets to the global network (``ecp5/globals.cc``: nets that
drive flip-flops' clock pins). A block's reset drives the set/reset input of nearly every
flip-flop (5 555 in the KVMU, 15 076 in the attention engine), so without help it is routed
through the general fabric as one net of thousands of loads spanning the block, and that net
is what kept nextpnr's router from converging on the KVMU (seeds 1 and 3: hundreds of wires
still overused after 22-25 minutes), on the HCU with its RAMs' output registers moved
(seed 1) and on the attention engine (never routed in 35-73 minutes; with the reset on a
global it routes in 12-20 minutes, docs/attn.md). Vendor flows (Diamond) put such a
high-fanout reset on a primary or secondary clock net by themselves, as a designer would;
:func:`promote` does it for the report's flow, between Yosys and nextpnr: it inserts a
``DCCA`` clock buffer (``CE`` tied high, so always passing) between the top module's reset
port and every cell input that port drove, so nextpnr routes the reset on a global like a
clock. The netlist's function is unchanged (a DCCA with ``CE = 1`` passes its input), only its
routing.
"""
from __future__ import annotations

import json
from pathlib import Path

from .netlist import read_top

__all__ = ["promote"]


def promote(path, port: str = "rst") -> int:
    """Rewrite the Yosys JSON netlist at ``path`` (its top module): the net of input port
    ``port`` drives a new ``DCCA`` whose output drives every cell input the port drove.
    Returns how many cell inputs moved (0, and the file untouched, when the top module has
    no such one-bit port, nothing reads it, or it is on the global already)."""
    path = Path(path)
    data, mod = read_top(path)
    p = mod["ports"].get(port)
    if (p is None or p["direction"] != "input" or len(p["bits"]) != 1
            or f"{port}_global" in mod["cells"]):           # absent, or promoted already
        return 0
    src = p["bits"][0]
    bits = [b for n in mod["netnames"].values() for b in n["bits"] if isinstance(b, int)]
    bits += [b for c in mod["cells"].values() for v in c["connections"].values()
             for b in v if isinstance(b, int)]
    new = max(bits) + 1
    moved = 0
    for cell in mod["cells"].values():
        for name, conn in cell["connections"].items():
            if cell["port_directions"].get(name) == "input":
                for i, b in enumerate(conn):
                    if b == src:
                        conn[i] = new
                        moved += 1
    if not moved:
        return 0
    mod["cells"][f"{port}_global"] = {
        "hide_name": 0, "type": "DCCA", "parameters": {}, "attributes": {},
        "port_directions": {"CLKI": "input", "CE": "input", "CLKO": "output"},
        "connections": {"CLKI": [src], "CE": ["1"], "CLKO": [new]}}
    mod["netnames"][f"{port}_global"] = {"hide_name": 0, "bits": [new], "attributes": {}}
    path.write_text(json.dumps(data))
    return moved
