"""Verilator's ``OBJCACHE``: compile Verilator's run-time library once per checkout.

Every Verilator build compiles the same run-time library (``verilated.cpp``,
``verilated_vpi.cpp``, ``verilated_threads.cpp``, ``verilated_dpi.cpp``: about 16 s at ``-Os``
on a slow core) with the same command; the suite makes some two dozen builds. Verilator's
makefile puts ``$(OBJCACHE)`` before every compile, so :func:`verif.lib.runner.run_cocotb`
sets it to this module: a compile of a file of Verilator's own ``include`` folder is looked up
in ``build/sim/.objcache/`` by the hash of its command (output name aside), the source's bytes
and Verilator's version header, and compiled and stored there on a miss; every other compile
(the model's files, which depend on the build) runs as it is. The run-time files include no
file of the build (their ``.d`` dependency lists name only Verilator's headers), so an object
is the same in every build with the same command.

Usage (by make): ``python verif/lib/objcache.py c++ <args>``.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

CACHE = Path(__file__).resolve().parents[2] / "build" / "sim" / ".objcache"


def _key(args: list[str], source: Path) -> str | None:
    """The cache key of a compile, or None if it is not one of the run-time library's."""
    include = source.parent
    if source.suffix != ".cpp" or not (include / "verilated_config.h").exists():
        return None
    h = hashlib.sha256()
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        h.update(a.encode() + b"\0")
    h.update(source.read_bytes())
    h.update((include / "verilated_config.h").read_bytes())
    return h.hexdigest()[:32]


def main(argv: list[str]) -> int:
    if "-c" not in argv or "-o" not in argv:
        return subprocess.call(argv)
    out = Path(argv[argv.index("-o") + 1])
    source = Path(argv[-1])
    key = _key(argv, source) if source.exists() else None
    if key is None:
        return subprocess.call(argv)
    dep = out.with_suffix(".d")
    hit_o, hit_d = CACHE / f"{key}.o", CACHE / f"{key}.d"
    if hit_o.exists() and hit_d.exists():
        shutil.copyfile(hit_d, dep)
        shutil.copyfile(hit_o, out)
        return 0
    rc = subprocess.call(argv)
    if rc == 0 and out.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        for src, dst in ((dep, hit_d), (out, hit_o)):     # the object last: it marks a hit
            if src.exists():
                tmp = dst.with_name(f"{dst.name}.{os.getpid()}.tmp")
                shutil.copyfile(src, tmp)
                os.replace(tmp, dst)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
