"""The functional events ``make coverage`` asks the tests to reach, each sampled from what
the design did: a testbench's record of a value read back (:mod:`verif.lib.fcov`: an
ERROR_CODE, a WTU row's visited buckets after the row matched the golden model), in the one
samples file ``make coverage`` hands every test (``VREX_FCOV``)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vrex import regmap
from vrex.config import Config

__all__ = ["EVENTS", "Event", "functional"]


@dataclass(frozen=True)
class Event:
    block: str
    sample: str           # the line a testbench records (verif.lib.fcov.record)
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


def _samples(out: Path) -> dict:
    """``{sample: set of the runs that recorded it}`` (``events_<run>.txt`` under ``out``)."""
    got: dict = {}
    for f in out.glob("events_*.txt"):
        for line in f.read_text().splitlines():
            got.setdefault(line.strip(), set()).add(f.stem.removeprefix("events_"))
    return got


def functional(out: Path) -> dict:
    """``{event: {block, what, hits}}``: where each event of :data:`EVENTS` was reached."""
    samples = _samples(out)
    return {name: dict(block=e.block, what=e.what, hits=sorted(samples.get(e.sample, ())))
            for name, e in EVENTS.items()}
