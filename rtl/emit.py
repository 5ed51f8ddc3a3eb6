"""Verilog emission: one file per top-level block, byte-identical from run to run.

``python -m rtl.emit [--out build/verilog] [--config cfg.json]`` writes ``<block>.v`` for every
block in :data:`BLOCKS`, built from one :class:`golden.config.Config`.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from golden.config import Config

from .hcu import HashClusterUnit
from .wtu import WicsumThresholdUnit
from .tools import setup_environ

__all__ = ["BLOCKS", "emit_verilog", "write_verilog", "lint", "main"]

# block name -> constructor from the build configuration
BLOCKS = {
    "hcu": lambda cfg: HashClusterUnit.from_config(cfg),
    "wtu": lambda cfg: WicsumThresholdUnit.from_config(cfg),
}


def emit_verilog(component, name: str) -> str:
    setup_environ()
    from amaranth.back import verilog
    return verilog.convert(component, name=name, emit_src=False)


def write_verilog(component, name: str, out_dir) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.v"
    path.write_text(emit_verilog(component, name))
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="rtl.emit", description=__doc__)
    ap.add_argument("--out", default="build/verilog")
    ap.add_argument("--config", help="a Config as JSON (default: the paper preset)")
    ap.add_argument("--lint", action="store_true", help="run verilator --lint-only -Wall")
    ap.add_argument("blocks", nargs="*", default=list(BLOCKS))
    args = ap.parse_args(argv)
    cfg = Config.from_json(Path(args.config).read_text()) if args.config else Config()
    for name in args.blocks:
        if name not in BLOCKS:
            ap.error(f"unknown block {name!r}; blocks: {', '.join(BLOCKS)}")
        path = write_verilog(BLOCKS[name](cfg), name, args.out)
        print(f"wrote {path} ({os.path.getsize(path)} bytes)")
        if args.lint:
            lint(path)
            print(f"  verilator --lint-only -Wall: clean (waivers: rtl/lint.vlt)")
    return 0


def lint(path) -> None:
    """``verilator --lint-only -Wall`` with the waivers of rtl/lint.vlt; raises on a finding."""
    import subprocess
    from .tools import tool_env
    waivers = Path(__file__).resolve().parent / "lint.vlt"
    r = subprocess.run(["verilator", "--lint-only", "-Wall", str(waivers), str(path),
                        "--top-module", Path(path).stem], env=tool_env(), capture_output=True,
                       text=True)
    if r.returncode:
        raise RuntimeError(f"verilator lint of {path} failed:\n{r.stderr}")


if __name__ == "__main__":
    raise SystemExit(main())
