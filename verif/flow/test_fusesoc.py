"""The core's FuseSoC description (vrex.emit.write_fusesoc): ``fusesoc run --target=lint``
lints the emitted core with Verilator -Wall and passes; a planted implicit net fails the same
description's lint (on a small module: the flags are the description's, not the core's)."""
import subprocess
import sys
from pathlib import Path

from vrex.emit import FUSESOC_NAME, write_fusesoc, write_verilog
from vrex.toolchain import tool_env


def _lint(out: Path):
    fusesoc = Path(sys.executable).parent / "fusesoc"
    return subprocess.run([str(fusesoc), "--cores-root", ".", "run", "--target=lint",
                           FUSESOC_NAME], cwd=out, env=tool_env(), capture_output=True,
                          text=True, timeout=600)


def test_fusesoc_lints_the_core(tmp_path):
    from rtl import VrexCore
    from verif.core.e2e import synth_config
    write_verilog(VrexCore(synth_config()), "core", tmp_path)
    core = write_fusesoc(tmp_path)
    assert "vrex:vrex:core" in core.read_text()
    r = _lint(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    probe = tmp_path / "probe"
    write_fusesoc(probe, verilog="probe.v", top="probe")
    (probe / "probe.v").write_text("module probe(input wire a, output wire y);\n"
                                   "  assign vrex_implicit_probe = a;\n"
                                   "  assign y = a;\nendmodule\n")
    r = _lint(probe)
    assert r.returncode != 0 and "IMPLICIT" in r.stdout + r.stderr
