"""Functional coverage samples a testbench takes of what the design did (an error code read
back from ERROR_CODE, say), for ``make coverage`` (:mod:`verif.coverage.events`).

A sample is a line appended to the file ``VREX_FCOV`` names (``make coverage`` sets it; a
simulator process inherits it); without it, :func:`record` does nothing. Testbenches record
what they observe at the design's ports and registers, never what they asked for.
"""
from __future__ import annotations

import os

__all__ = ["record", "record_error", "record_page_cuts", "PAGE_CUT"]

PAGE_CUT = "axi:4 KB cut"


_SEEN: set = set()        # the samples this process wrote (each once)


def record(event: str) -> None:
    path = os.environ.get("VREX_FCOV")
    if path and (path, event) not in _SEEN:
        _SEEN.add((path, event))
        with open(path, "a") as f:
            f.write(event + "\n")


def record_error(value: int) -> None:
    """An ERROR_CODE value read back: its code (the low byte) by name, if not NONE."""
    code = value & 0xFF
    if code:
        from vrex import regmap
        names = {c: n for n, (c, *_) in regmap.ERRORS.items()}
        record(f"error:{names.get(code, code)}")


def record_page_cuts(reads, writes, page: int = 4096) -> None:
    """A transfer cut at a 4 KB page edge, seen on the bus: a burst that starts inside a page
    and ends on its edge, where another burst of the same direction starts. ``reads``,
    ``writes``: the ``(address, bytes)`` of each burst as the memory model took it."""
    for log in (reads, writes):
        starts = {a for a, _ in log}
        if any(a % page and (a + n) % page == 0 and a + n in starts for a, n in log):
            record(PAGE_CUT)
