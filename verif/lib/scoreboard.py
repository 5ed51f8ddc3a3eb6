"""One scoreboard compare for every block: says what differed where, and missing or extra
beats, instead of a bare ``assert a == b``."""
from __future__ import annotations

__all__ = ["compare", "compare_counters"]


def _diff(g: dict, w: dict) -> str:
    keys = [k for k in w if g.get(k) != w[k]] + [k for k in g if k not in w]
    return ", ".join(f"{k}: got {g.get(k)!r}, want {w.get(k)!r}" for k in keys)


def compare(got, want, *, what: str = "beat", label=None, limit: int = 5) -> None:
    """Compare two lists of dicts beat by beat. ``label(k)`` names beat k (default: its
    index). Raises AssertionError listing the first ``limit`` differences and the count."""
    got, want = list(got), list(want)
    label = label or (lambda k: f"{what} {k}")
    bad = [k for k, (g, w) in enumerate(zip(got, want)) if g != w]
    lines = [f"{label(k)}: {_diff(got[k], want[k])}" for k in bad[:limit]]
    if len(bad) > limit:
        lines.append(f"... and {len(bad) - limit} more differing {what}s")
    if len(got) != len(want):
        lines.append(f"{len(got)} {what}s, want {len(want)}"
                     + (f" (first extra: {got[len(want)]})" if len(got) > len(want) else ""))
    if lines:
        raise AssertionError(f"{len(bad)} of {len(want)} {what}s differ from the golden model:"
                             "\n  " + "\n  ".join(lines))


def compare_counters(got: dict, want: dict, *, base: dict | None = None) -> None:
    """Each counter of ``want`` against ``got`` (less ``base``, a reading taken before)."""
    base = base or {}
    bad = {k: (got[k] - base.get(k, 0), v) for k, v in want.items()
           if got[k] - base.get(k, 0) != v}
    if bad:
        raise AssertionError("counters differ from the golden model: " + ", ".join(
            f"{k}: got {g}, want {w}" for k, (g, w) in bad.items()))
