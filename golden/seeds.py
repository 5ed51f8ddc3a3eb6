"""Comparisons over hyperplane seeds: the mean and spread of each, and a win only where the
spreads do not overlap.

The seed moves ReSV's clusters and so its ratio and error; the baselines do not depend on it,
but each is compared at ReSV's ratio, so it moves their matched error too. Per seed:

- ``matched``: ReSV (a preset at its default Th_r) against every baseline's curve
  interpolated at that seed's ratio (:func:`golden.job.matched_points`);
- ``count``: every predictor of the factorial under that seed's ReSV counts
  (:mod:`golden.factorial`, the ``count`` policy), ReSV's clusters those of the seed.

Each method's figures over the seeds: mean, min and max of the relative L2 error, and the
verdict against ReSV: ``win`` (ReSV's worst is better than the method's best), ``loss``
(the other way round) or ``overlap``.
"""
from __future__ import annotations

import numpy as np

__all__ = ["spread", "verdict", "over_seeds"]


def spread(values) -> dict:
    """Mean, min, max and the values of a list of errors (None where any is missing)."""
    vals = [v for v in values if v is not None]
    if not vals or len(vals) != len(values):
        return {"mean": None, "min": None, "max": None, "values": list(values)}
    return {"mean": float(np.mean(vals)), "min": float(min(vals)), "max": float(max(vals)),
            "values": [float(v) for v in vals]}


def verdict(resv: dict, other: dict) -> str | None:
    """ReSV against another method's spread of errors (lower is better)."""
    if resv["max"] is None or other["max"] is None:
        return None
    if resv["max"] < other["min"]:
        return "win"
    if resv["min"] > other["max"]:
        return "loss"
    return "overlap"


def over_seeds(per_seed: list[dict]) -> dict:
    """``per_seed``: one ``{method: error}`` a seed, ``resv`` among them. Returns
    ``{method: spread and, but for resv, its verdict}``."""
    methods = list(per_seed[0])
    out = {m: spread([s.get(m) for s in per_seed]) for m in methods}
    for m in methods:
        if m != "resv":
            out[m]["verdict"] = verdict(out["resv"], out[m])
    return out
