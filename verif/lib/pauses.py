"""Idle and back-pressure patterns, as verilog-axi's pause generators: a pause generator is an
endless iterator of booleans, ``True`` meaning "pause this cycle" (a source drives no beat, a
sink holds ``ready`` low). Both tiers plug the same generators into every stream.

A crossing names one pattern for the sources and one for the sinks; :data:`CROSSINGS` lists
the ones every stream test runs, each as its own named test.
"""
from __future__ import annotations

import itertools
import random

__all__ = ["no_pause", "random_pause", "cycle_pause", "pause", "CROSSINGS", "crossing"]


def no_pause():
    return itertools.repeat(False)


def random_pause(probability: float, seed: int = 0):
    """Pause each cycle with ``probability``, from a seeded generator of its own."""
    rng = random.Random(seed)
    while True:
        yield rng.random() < probability


def cycle_pause(pattern=(1, 1, 1, 0)):
    """A fixed periodic pattern (1 = pause), as verilog-axi's ``cycle_pause``."""
    return itertools.cycle(bool(p) for p in pattern)


def pause(spec, seed: int = 0):
    """A generator from a spec: ``None`` (never), a probability, or a tuple pattern."""
    if spec is None or spec == 0:
        return no_pause()
    if isinstance(spec, tuple):
        return cycle_pause(spec)
    return random_pause(float(spec), seed)


# name -> (source pattern, sink pattern)
CROSSINGS = {
    "none": (None, None),                  # full rate both sides
    "idle": (0.5, None),                   # the source idles half the cycles
    "backpressure": (None, 0.5),           # the sink stalls half the cycles
    "both": (0.3, 0.3),                    # both, at random
    "periodic": ((0, 1, 1), (1, 0, 0, 1, 1, 0, 1)),   # fixed patterns, coprime periods
}


def crossing(name: str, seed: int = 0):
    """``(source_pauses, sink_pauses)`` of a named crossing, seeded."""
    src, snk = CROSSINGS[name]
    return pause(src, seed), pause(snk, seed + 1)
