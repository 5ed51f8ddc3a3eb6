"""Move a multiplier's operand and product registers into the ECP5 MULT18X18D, in an ECP5
netlist (Yosys JSON).

A product computed between registers (``p <- a·b`` with ``a`` and ``b`` registers) is, after
Yosys's ECP5 mapping, flip-flops in the fabric around a MULT18X18D whose own registers are
all off (``REG_*_CLK = NONE``): nextpnr times the multiplier as logic (3.9 ns at the slowest
speed grade) between the operands' flip-flops and the product's, with a route of about 2 ns
into the block and 1.5 out, a path that meets 8 ns (125 MHz) or not by where the placer puts
the flip-flops. The MULT18X18D has those flip-flops inside (input registers on A and B, an
output register on P); Yosys's ECP5 flow never uses them, vendor flows (Diamond) absorb such
registers themselves. :func:`absorb` does it for the report's ECP5 flow, between Yosys and
nextpnr, for every MULT18X18D whose registers are plain:

- the inputs, when every A and every B pin is a constant or the output of a flip-flop whose
  only loads are this multiplier's pins (nextpnr times a multiplier with one input
  registered as if neither were, so both or none);
- the output, when every P pin that has a load drives exactly one, the data input of a
  flip-flop;

and the flip-flops of each group share a clock (the inputs' and the output's the same one)
and a reset, always load (no clock enable) and reset to 0, synchronously, from a signal of the
block's logic or not at all. (Yosys turns ``Mux(valid, x, 0)`` into a register's synchronous
reset; the block's own reset, a port of the netlist that the flow may route on the global
network, is not moved: a register it resets stays.) The multiplier then gets
``REG_INPUTA_CLK`` / ``REG_INPUTB_CLK`` (and/or ``REG_OUTPUT_CLK``) ``= "CLK0"``, the inputs'
registers reset by ``RST0``, the output's by ``RST1`` (``RESETMODE = "SYNC"``), ``CE0`` tied
to 1; its A/B pins read the
flip-flops' data inputs' nets, its P pins drive the flip-flops' outputs' nets, and the
flip-flops go. Like the flip-flops, the multiplier's registers power up as 0 and then load
(or reset) every cycle: the netlist does the same thing cycle for cycle. The RTL declares
such registers without the block's reset (``reset_less``).
"""
from __future__ import annotations

from .netlist import loads_of, param, read_top, write_pruned

__all__ = ["absorb"]


def _reg(ff, fixed):
    """(clock, reset) of a flip-flop the multiplier's registers can replace (always loading,
    reset value 0, the reset synchronous or none: ``["0"]``), or None."""
    c = ff["connections"]
    if (ff["type"] != "TRELLIS_FF" or param(ff, "CLKMUX", "CLK") != "CLK"
            or not (param(ff, "CEMUX", "1") == "1" or c.get("CE") == ["1"])
            or param(ff, "REGSET", "RESET") != "RESET"):
        return None
    rst = ["0"] if param(ff, "LSRMUX") == "0" else c.get("LSR", ["0"])
    if rst != ["0"] and (param(ff, "SRMODE", "LSR_OVER_CE") != "LSR_OVER_CE"
                         or rst[0] in fixed):
        return None
    return tuple(c.get("CLK", [])), tuple(rst)


def absorb(path) -> int:
    """Rewrite the Yosys JSON netlist at ``path`` (its top module), moving every eligible
    multiplier operand and product register into its MULT18X18D; returns how many
    flip-flops went."""
    data, mod = read_top(path)
    cells = mod["cells"]
    loads, driver = loads_of(mod), {}
    for name, cell in cells.items():
        for port, bits in cell["connections"].items():
            if cell["port_directions"].get(port) == "output":
                for b in bits:
                    driver[b] = name
    # the block's reset: a port, or behind a global buffer (synth/global_reset.py)
    fixed = {b for p in mod["ports"].values() for b in p["bits"]}
    fixed |= {b for c in cells.values() if c["type"] in ("DCCA", "DCSC")
              for b in c["connections"].get("CLKO", []) + c["connections"].get("DCSOUT", [])}
    moved = 0
    for mname, mul in [(n, c) for n, c in cells.items() if c["type"] == "MULT18X18D"]:
        conn = mul["connections"]
        if any(param(mul, f"REG_{r}_CLK", "NONE") != "NONE"
               for r in ("INPUTA", "INPUTB", "INPUTC", "PIPELINE", "OUTPUT")):
            continue                                    # registered already: leave it

        def group(pins):
            """The (clock, reset) shared by every (pin, flip-flop) of ``pins``, or None."""
            regs = {_reg(cells[ff], fixed) for _, ff in pins}
            return regs.pop() if len(regs) == 1 and None not in regs else None

        ins = []                                        # (pin, flip-flop driving it)
        for side in "AB":
            for i in range(18):
                bits = conn.get(f"{side}{i}")
                if not bits or isinstance(bits[0], str):
                    continue                                        # a constant
                ff = driver.get(bits[0])
                if ff is None or cells[ff]["type"] != "TRELLIS_FF" or \
                        any(ld[0] != mname for ld in loads[bits[0]]):
                    ins = None                          # not a register of this one alone
                    break
                ins.append((f"{side}{i}", ff))
            if ins is None:
                break
        outs = []                                       # (pin, flip-flop it drives)
        for i in range(36):
            bits = conn.get(f"P{i}")
            if not bits or isinstance(bits[0], str) or not loads[bits[0]]:
                continue
            ld = loads[bits[0]]
            if len(ld) != 1 or ld[0][1] != "DI":
                outs = None
                break
            outs.append((f"P{i}", ld[0][0]))
        gin = group(ins) if ins else None
        gout = group(outs) if outs else None
        if gin and gout and gin[0] != gout[0]:
            gout = None                                 # one clock, CLK0
        if not gin and not gout:
            continue
        clock = (gin or gout)[0]
        for pin, ff in ins if gin else []:              # (a flip-flop may drive two pins)
            conn[pin] = cells[ff]["connections"]["DI"]
        for pin, ff in outs if gout else []:
            conn[pin] = cells[ff]["connections"]["Q"]
        gone = {ff for _, ff in (ins if gin else []) + (outs if gout else [])}
        for ff in gone:
            del cells[ff]
        moved += len(gone)
        # the inputs' registers reset by RST0, the output's by RST1 (each as its flip-flops
        # were: a synchronous reset, or none)
        regs = [("INPUTA", 0), ("INPUTB", 0)] if gin else []
        regs += [("OUTPUT", 1)] if gout else []
        for r, k in regs:
            mul["parameters"][f"REG_{r}_CLK"] = "CLK0"
            mul["parameters"][f"REG_{r}_CE"] = "CE0"
            mul["parameters"][f"REG_{r}_RST"] = f"RST{k}"
        mul["parameters"]["GSR"] = "DISABLED"
        mul["parameters"]["RESETMODE"] = "SYNC"
        conn.update(CLK0=list(clock), CE0=["1"], RST0=list(gin[1] if gin else ["0"]),
                    RST1=list(gout[1] if gout else ["0"]))
        for p in ("CLK0", "CE0", "RST0", "RST1"):
            mul["port_directions"][p] = "input"
    if moved:
        write_pruned(path, data, mod)
    return moved
