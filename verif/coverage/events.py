"""The functional events ``make coverage`` asks the tests to reach, each sampled from what
the design did: a testbench's record of a value read back or a beat taken
(:mod:`verif.lib.fcov`: an ERROR_CODE, a WTU row's visited buckets after the row matched the
golden model, the HCU's decisions, the bursts the memory took), in the one samples file
``make coverage`` hands every test (``VREX_FCOV``). An event the design cannot reach by its
construction says why (``unreachable``) instead of a run that reaches it."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from verif.lib.fcov import PAGE_CUT
from vrex import regmap
from vrex.config import Config

__all__ = ["EVENTS", "Event", "functional"]


@dataclass(frozen=True)
class Event:
    block: str
    sample: str           # the line a testbench records (verif.lib.fcov.record)
    what: str = ""
    unreachable: str = ""  # why no input reaches it, if none can


# error codes the core maps but no input can raise, and why
UNREACHABLE = {
    "ENGINE_REFUSED": "the sequencer gives the engine only commands its own checks passed: a "
                      "set or step over a buffer is refused first (CORE_LIMIT, "
                      "DESC_* codes), so the engine's size, kind and hash-width checks "
                      "never fail inside the core (the engine's own tests raise each)",
    "KV_STALE": "the core runs one descriptor at a time and announces its version before its "
                "fetches; the register file refuses a version older than its layer's last "
                "(DESC_VERSION_BACKWARDS) and a soft reset clears the KVMU's versions with "
                "the register file's, so no fetch of the core is ever older than its "
                "layer's newest (the KVMU's stale drop is covered in its own tier: "
                "'KVMU stale fetch')",
}


# the events sampled under a name of their own: (event, block, sample, what it is)
NAMED = (
    ("4 KB cut", "kvmu, core", PAGE_CUT,
     "a burst cut at a 4 KB page edge, the transfer going on in the next page"),
    ("KVMU stale fetch", "kvmu", "kvmu:stale fetch", "a fetch's end beat marked stale"),
    ("HCU tie", "hcu", "hcu:tie", "a join among clusters at the same distance (the newest taken)"),
    ("HCU window wrap", "hcu", "hcu:window wrap", "more clusters opened than a window holds"),
    ("context save", "core", "core:context save",
     "a cluster window written to its image at CTX_BASE"),
    ("context load", "core", "core:context load", "a cluster window read back from its image"),
    ("chunked attention", "core", "core:chunked attention",
     "a matched run with an attended set larger than B"),
)


def _events() -> dict:
    ev = {}
    for name, (code, *_) in regmap.ERRORS.items():
        if code:
            ev[f"error {name}"] = Event("core", sample=f"error:{name}",
                                        what="ERROR_CODE read back with this code",
                                        unreachable=UNREACHABLE.get(name, ""))
    buckets = Config().buckets
    for k in range(1, buckets + 1):
        ev[f"WTU exit after bucket {k}"] = Event(
            "wtu", sample=f"wtu:visited={k}",
            what=f"a row's walk visits {k} of the default build's {buckets} buckets")
    for name, block, sample, what in NAMED:
        ev[name] = Event(block, sample=sample, what=what)
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
    return {name: dict(block=e.block, what=e.what, hits=sorted(samples.get(e.sample, ())),
                       unreachable=e.unreachable)
            for name, e in EVENTS.items()}
