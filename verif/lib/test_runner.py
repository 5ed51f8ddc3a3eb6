"""The simulator runs' wall-clock limit: a run past it is killed and raises, naming itself."""
import subprocess
import time

import pytest

from verif.lib.runner import wall_limit


def test_a_run_past_the_limit_is_killed_and_named():
    t = time.monotonic()
    with pytest.raises(TimeoutError, match="the hung run: still running after 1 s"):
        with wall_limit(1, "the hung run"):
            subprocess.run(["sleep", "30"])
    assert time.monotonic() - t < 10


def test_a_run_within_the_limit_is_untouched():
    with wall_limit(5, "a short run"):
        subprocess.run(["true"], check=True)
    time.sleep(0.01)            # the alarm is off: nothing fires later


def test_every_cocotb_test_has_a_simulation_time_limit():
    """Testbenches declare their tests with verif.lib.cocotb_tb.test (cocotb.test with a
    limit), never cocotb.test bare."""
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    bare = [str(p.relative_to(root)) for p in root.rglob("*.py*")
            if p.suffix in (".py", ".in") and p.name != "test_runner.py"
            and "@cocotb.test(" in p.read_text()]
    assert not bare, f"cocotb.test without a time limit in {bare}"
