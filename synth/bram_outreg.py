"""Move a block RAM's output register into the RAM, in an ECP5 netlist (Yosys JSON).

A synchronous read in Amaranth followed by a pipeline register (``p0 <- rd.data``) is a
DP16KD read (data out 5.8 ns after the clock, ``REGMODE = NOREG``) feeding a flip-flop that
nextpnr places wherever the register's own loads pull it, often a long route from the RAM.
The DP16KD has that flip-flop inside (``REGMODE = "OUTREG"``: data out about 1.5 ns after the
clock), but Yosys's ECP5 memory mapping always sets ``NOREG``; vendor flows (Diamond,
Vivado) absorb such a register themselves. :func:`absorb` does it for the report's ECP5 flow,
between Yosys and nextpnr: a RAM port's output register moves into the RAM when every data
bit the port drives has exactly one load, the data input of a flip-flop with

- the port's clock (``CLKA``/``CLKB``),
- no clock enable (``CEMUX = 1``) and its set/reset input tied to 0, reset value 0,

and the port itself has its reset tied to 0. Then the port gets ``REGMODE_x = "OUTREG"`` and
``OCEx = 1`` (the output register always loads, as the flip-flop did), its data pins drive the
flip-flops' outputs' nets, and the flip-flops go. The RAM's output register, like the
flip-flop, powers up as 0 and then loads the read data every cycle: the netlist does the same
thing cycle for cycle. A port of which any bit fails a condition is left as it is.
"""
from __future__ import annotations

from .netlist import loads_of, param, read_top, write_pruned

__all__ = ["absorb"]


def _plain_ff(ff, clock) -> bool:
    c = ff["connections"]
    return (ff["type"] == "TRELLIS_FF"
            and c.get("CLK") == clock
            and param(ff, "CLKMUX", "CLK") == "CLK"
            and (param(ff, "CEMUX", "1") == "1" or c.get("CE") == ["1"])
            and (c.get("LSR", ["0"]) == ["0"] and param(ff, "LSRMUX", "LSR") == "LSR"
                 or param(ff, "LSRMUX") == "0")
            and param(ff, "REGSET", "RESET") == "RESET")


def absorb(path) -> int:
    """Rewrite the Yosys JSON netlist at ``path`` (its top module), moving every eligible
    block RAM output register into its DP16KD; returns how many flip-flops went."""
    data, mod = read_top(path)
    cells = mod["cells"]
    loads = loads_of(mod)
    moved = 0
    for ram in [c for c in cells.values() if c["type"] == "DP16KD"]:
        conn = ram["connections"]
        for side in "AB":
            if param(ram, f"REGMODE_{side}", "NOREG") != "NOREG" or \
                    conn.get(f"RST{side}", ["0"]) != ["0"]:
                continue
            pins = []
            for i in range(18):
                bits = conn.get(f"DO{side}{i}")
                if not bits or isinstance(bits[0], str) or not loads[bits[0]]:
                    continue
                ld = loads[bits[0]]
                ff = cells.get(ld[0][0]) if len(ld) == 1 and ld[0][1] == "DI" else None
                if ff is None or not _plain_ff(ff, conn.get(f"CLK{side}")):
                    pins = None
                    break
                pins.append((f"DO{side}{i}", ld[0][0]))
            if not pins:
                continue
            for pin, ff_name in pins:
                conn[pin] = cells.pop(ff_name)["connections"]["Q"]
                moved += 1
            ram["parameters"][f"REGMODE_{side}"] = "OUTREG"
            conn[f"OCE{side}"] = ["1"]
    if moved:
        write_pruned(path, data, mod)
    return moved
