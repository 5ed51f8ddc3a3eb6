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
- no clock enable (``CEMUX = 1``) or, when asked (``enabled``), a clock enable
  (``CEMUX = CE``) that every flip-flop of the port shares, and its set/reset input tied to
  0, reset value 0,

and the port itself has its reset tied to 0. Then the port gets ``REGMODE_x = "OUTREG"`` and
``OCEx`` the flip-flops' clock enable (1, or their ``CE`` net: the output register loads when
the flip-flops did), its data pins drive the flip-flops' outputs' nets, and the flip-flops go.
The RAM's output register, like the flip-flop, powers up as 0 and then loads the read data
when enabled: the netlist does the same thing cycle for cycle. A port of which any bit fails
a condition (or whose flip-flops load under different enables) is left as it is.
"""
from __future__ import annotations

from .netlist import loads_of, param, read_top, write_pruned

__all__ = ["absorb"]


def _plain_ff(ff, clock, enabled: bool):
    """The clock enable (``["1"]`` when it always loads) of a flip-flop the RAM's output
    register can replace, or None."""
    c = ff["connections"]
    if not (ff["type"] == "TRELLIS_FF"
            and c.get("CLK") == clock
            and param(ff, "CLKMUX", "CLK") == "CLK"
            and (c.get("LSR", ["0"]) == ["0"] and param(ff, "LSRMUX", "LSR") == "LSR"
                 or param(ff, "LSRMUX") == "0")
            and param(ff, "REGSET", "RESET") == "RESET"):
        return None
    if param(ff, "CEMUX", "1") == "1" or c.get("CE") == ["1"]:
        return ["1"]
    if enabled and param(ff, "CEMUX", "CE") == "CE" and c.get("CE"):
        return c["CE"]
    return None


def absorb(path, enabled: bool = False) -> int:
    """Rewrite the Yosys JSON netlist at ``path`` (its top module), moving every eligible
    block RAM output register into its DP16KD (``enabled``: registers with a clock enable
    too); returns how many flip-flops went."""
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
            pins, enables = [], set()
            for i in range(18):
                bits = conn.get(f"DO{side}{i}")
                if not bits or isinstance(bits[0], str) or not loads[bits[0]]:
                    continue
                ld = loads[bits[0]]
                ff = cells.get(ld[0][0]) if len(ld) == 1 and ld[0][1] == "DI" else None
                ce = None if ff is None else _plain_ff(ff, conn.get(f"CLK{side}"), enabled)
                if ce is None:
                    pins = None
                    break
                enables.add(tuple(ce))
                pins.append((f"DO{side}{i}", ld[0][0]))
            if not pins or len(enables) != 1:
                continue
            for pin, ff_name in pins:
                conn[pin] = cells.pop(ff_name)["connections"]["Q"]
                moved += 1
            ram["parameters"][f"REGMODE_{side}"] = "OUTREG"
            conn[f"OCE{side}"] = list(enables.pop())
    if moved:
        write_pruned(path, data, mod)
    return moved
