"""Where a line of emitted Verilog sits, in words a reader can find in the block's Amaranth
code: the signal its process computes and the chain of ``if``/``case`` arms above it.

Amaranth emits one ``always @*`` process per signal, each a copy of the control flow that
assigns it (``casez (fsm_state)`` arms, ``if`` conditions); the names of the block's own
signals survive (``write_verilog -norename``), Yosys' wires are ``\\$N``.
"""
from __future__ import annotations

import re

__all__ = ["context"]

_ALWAYS = re.compile(r"^\s*always\b")
_ASSIGN = re.compile(r"^\s*(\\?[\w$.\[\]:]+)\s*<?=")
_CASE = re.compile(r"^(\s*)casez? \((.*)\)\s*$")
_ARM = re.compile(r"^(\s*)([^/\s][^:]*?):\s*$")
_IF = re.compile(r"^(\s*)(?:end else )?if \((.*)\) begin\s*$")


def _indent(s: str) -> int:
    return len(s) - len(s.lstrip(" "))


def context(lines: list[str], line: int) -> str:
    """``target: case subject = arm / if (cond) / ...`` for 1-based ``line`` of ``lines``."""
    i = line - 1
    depth = _indent(lines[i]) if 0 <= i < len(lines) else 0
    chain, target = [], ""
    j = i - 1
    while j >= 0:
        s = lines[j]
        if _ALWAYS.match(s):
            for t in lines[j + 1:i + 1]:
                mo = _ASSIGN.match(t)
                if mo and not t.lstrip().startswith(("if", "casez", "case")):
                    target = mo.group(1)
                    break
            break
        ind = _indent(s)
        if ind < depth and s.strip():
            if mo := _ARM.match(s):
                chain.append(f"= {mo.group(2).strip()}")
                depth = ind
            elif mo := _CASE.match(s):
                chain.append(f"case {mo.group(2)}")
                depth = ind
            elif mo := _IF.match(s):
                chain.append(f"if ({mo.group(2)})")
                depth = ind
        j -= 1
    words = []
    for c in reversed(chain):
        if c.startswith("= ") and words and words[-1].startswith("case "):
            words[-1] = f"{words[-1][5:]} {c}"
        else:
            words.append(c)
    return (f"{target}: " if target else "") + " / ".join(words)
