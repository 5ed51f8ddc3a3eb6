"""Functional coverage samples a testbench takes of what the design did (an error code read
back from ERROR_CODE, say), for ``make coverage`` (:mod:`verif.coverage.events`).

A sample is a line appended to the file ``VREX_FCOV`` names (``make coverage`` sets it; a
simulator process inherits it); without it, :func:`record` does nothing. Testbenches record
what they observe at the design's ports and registers, never what they asked for.
"""
from __future__ import annotations

import os

__all__ = ["record", "record_error"]


def record(event: str) -> None:
    path = os.environ.get("VREX_FCOV")
    if path:
        with open(path, "a") as f:
            f.write(event + "\n")


def record_error(value: int) -> None:
    """An ERROR_CODE value read back: its code (the low byte) by name, if not NONE."""
    code = value & 0xFF
    if code:
        from vrex import regmap
        names = {c: n for n, (c, *_) in regmap.ERRORS.items()}
        record(f"error:{names.get(code, code)}")
