"""The real traces: the bundled cut in data/, the full ones in the project's shared folder.
Loaded and quantised once per process."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

__all__ = ["ROOT", "BUNDLED", "SHARED", "bundled", "shared_traces"]

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "data" / "carphone_cut.npz"
SHARED = ROOT.parent / "shared" / "data" / "traces"


@lru_cache(maxsize=None)
def bundled():
    """``(trace, quantised)`` of the bundled real trace."""
    from golden.trace import load_trace, quantise
    tr = load_trace(BUNDLED)
    return tr, quantise(tr)


def shared_traces():
    return sorted(SHARED.glob("*.npz")) if SHARED.exists() else []
