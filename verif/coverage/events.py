"""The functional events ``make coverage`` asks the tests to reach, each sampled from what
the design did: a named signal of a block that toggled in a coverage build (its Verilog
tier), or a sample a testbench recorded of a value read back (:mod:`verif.lib.fcov`: an
ERROR_CODE, a WTU row's visited buckets after the row matched the golden model)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from vrex import regmap
from vrex.config import Config

from . import dat

__all__ = ["EVENTS", "Event", "functional"]


@dataclass(frozen=True)
class Event:
    block: str
    signal: str = ""      # a regular expression on a toggle point's signal (its comment)
    sample: str = ""      # or a testbench's sample
    what: str = ""


def _events() -> dict:
    ev = {}
    for name, (code, *_) in regmap.ERRORS.items():
        if code:
            ev[f"error {name}"] = Event("core", sample=f"error:{name}",
                                        what="ERROR_CODE read back with this code")
    buckets = Config().buckets
    for k in range(1, buckets + 1):
        ev[f"WTU exit after bucket {k}"] = Event(
            "wtu", sample=f"wtu:visited={k}",
            what=f"a row's walk visits {k} of the default build's {buckets} buckets")
    return ev


EVENTS = _events()


def _toggled(out: Path) -> dict:
    """``{block: set of signal comments that toggled}`` over every coverage build."""
    seen: dict = {}
    for d in out.glob("*/*/coverage.dat"):
        block = d.parent.parent.name
        s = seen.setdefault(block, set())
        for p in dat.read(d):
            if p.kind == "toggle" and p.count:
                s.add(f"{p.fields.get('h', '')}.{p.comment}")
    return seen


def _samples(out: Path) -> dict:
    """``{sample: set of builds or runs that recorded it}``."""
    got: dict = {}
    for f in out.glob("**/events*.txt"):
        where = f.parent.name if f.name == "events.txt" else f.stem.removeprefix("events_")
        for line in f.read_text().splitlines():
            got.setdefault(line.strip(), set()).add(where)
    return got


def functional(out: Path) -> dict:
    """``{event: {block, what, hits}}``: where each event of :data:`EVENTS` was reached."""
    toggled, samples = _toggled(out), _samples(out)
    res = {}
    for name, e in EVENTS.items():
        if e.signal:
            rx = re.compile(e.signal)
            hits = sorted({e.block} if any(rx.search(s) for s in toggled.get(e.block, ()))
                          else set())
        else:
            hits = sorted(samples.get(e.sample, ()))
        res[name] = dict(block=e.block, what=e.what, hits=hits)
    return res
