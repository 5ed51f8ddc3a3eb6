"""Emit the registry's blocks: ``python -m rtl.emit [--out build/verilog] [--config cfg.json]
[--lint] [block ...]`` writes ``<block>.v`` for every block of :data:`rtl.BLOCKS` (or those
named), built from one :class:`vrex.config.Config`; ``vrex_regs.h``, the core's register map
for host software (:mod:`rtl.core.map`); and, with the core, ``vrex_core.core``, its FuseSoC
(CAPI2) description: ``fusesoc --cores-root build/verilog run --target=lint vrex:vrex:core``
lints it with Verilator, ``--target=synth`` synthesises it with Yosys for ECP5,
``--target=sim_icarus`` builds it with Icarus Verilog. ``event_sim/<block>.v`` beside each is
the same design for event-driven simulators under SystemVerilog rules
(:func:`vrex.emit.for_event_simulators`).
``python -m rtl.emit --registers > docs/registers.md`` prints the register map's page.
"""
from __future__ import annotations

import argparse
import hashlib
import os
from pathlib import Path

from vrex.emit import (FUSESOC_NAME, for_event_simulators, lint, load_config, write_fusesoc,
                       write_verilog)

from . import BLOCKS
from .core import map as core_map

__all__ = ["main"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="rtl.emit", description=__doc__)
    ap.add_argument("--out", default="build/verilog")
    ap.add_argument("--config", help="a Config as JSON (default: the paper preset)")
    ap.add_argument("--lint", action="store_true", help="run verilator --lint-only -Wall")
    ap.add_argument("--registers", action="store_true",
                    help="print the register map's page (docs/registers.md) and stop")
    ap.add_argument("blocks", nargs="*", help="blocks to emit (default: every block)")
    args = ap.parse_args(argv)
    if args.registers:
        print(core_map.markdown(), end="")
        return 0
    cfg = load_config(args.config)
    names = args.blocks or list(BLOCKS)
    for name in names:
        if name not in BLOCKS:
            ap.error(f"unknown block {name!r}; blocks: {', '.join(BLOCKS)}")
        path = write_verilog(BLOCKS[name].from_config(cfg), name, args.out)
        sha = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        print(f"wrote {path} ({os.path.getsize(path)} bytes, sha256 {sha})")
        if args.lint:
            lint(path)
            print("  verilator --lint-only -Wall: clean (waivers: vrex/lint.vlt)")
        event = Path(args.out) / "event_sim" / path.name
        event.parent.mkdir(parents=True, exist_ok=True)
        event.write_text(for_event_simulators(path.read_text()))
    header = Path(args.out) / "vrex_regs.h"
    header.write_text(core_map.c_header())
    print(f"wrote {header} (the core's register map and descriptor, for host software)")
    print(f"wrote {Path(args.out) / 'event_sim'}/<block>.v (for event-driven simulators: "
          f"Icarus, SystemVerilog simulators)")
    if "core" in names:
        print(f"wrote {write_fusesoc(args.out)} (FuseSoC: fusesoc --cores-root {args.out} "
              f"run --target=lint {FUSESOC_NAME})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
