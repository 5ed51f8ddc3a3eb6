"""The core's FuseSoC description (vrex.emit.write_fusesoc): ``fusesoc run --target=lint``
lints the emitted core with Verilator -Wall and passes; a planted implicit net fails the same
description's lint (on a small module: the flags are the description's, not the core's); its
Icarus target builds the core."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vrex.emit import FUSESOC_NAME, for_event_simulators, write_fusesoc, write_verilog
from vrex.toolchain import tool_env


def _lint(out: Path):
    fusesoc = Path(sys.executable).parent / "fusesoc"
    return subprocess.run([str(fusesoc), "--cores-root", ".", "run", "--target=lint",
                           FUSESOC_NAME], cwd=out, env=tool_env(), capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def core_dir(tmp_path_factory):
    """The small core's Verilog, plain and for event-driven simulators, and its description."""
    from rtl import VrexCore
    from verif.core.e2e import synth_config
    out = tmp_path_factory.mktemp("fusesoc")
    v = write_verilog(VrexCore(synth_config()), "core", out)
    (out / "event_sim").mkdir()
    (out / "event_sim" / "core.v").write_text(for_event_simulators(v.read_text()))
    write_fusesoc(out)
    return out


def test_fusesoc_lints_the_core(core_dir, tmp_path):
    core = core_dir / "vrex_core.core"
    assert "vrex:vrex:core" in core.read_text()
    r = _lint(core_dir)
    assert r.returncode == 0, r.stdout + r.stderr
    probe = tmp_path / "probe"
    write_fusesoc(probe, verilog="probe.v", top="probe")
    (probe / "probe.v").write_text("module probe(input wire a, output wire y);\n"
                                   "  assign vrex_implicit_probe = a;\n"
                                   "  assign y = a;\nendmodule\n")
    r = _lint(probe)
    assert r.returncode != 0 and "IMPLICIT" in r.stdout + r.stderr


@pytest.mark.skipif(shutil.which("iverilog") is None, reason="Icarus Verilog (iverilog) is "
                    "not installed: `make setup` installs Debian's package as root")
def test_fusesoc_builds_the_core_under_icarus(core_dir):
    """The description's sim_icarus target: the core for event-driven simulators compiles
    and elaborates under Icarus Verilog's -g2012 (the run itself is the cocotb tiers')."""
    fusesoc = Path(sys.executable).parent / "fusesoc"
    r = subprocess.run([str(fusesoc), "--cores-root", ".", "run", "--target=sim_icarus",
                        FUSESOC_NAME], cwd=core_dir, env=tool_env(), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (core_dir / "build" / "vrex_vrex_core_0.1.0" / "sim_icarus-icarus").is_dir()
