"""Build a block's Verilog under Verilator and run a cocotb test module on it."""
from __future__ import annotations

import json
from pathlib import Path

from .emit import lint, write_verilog
from .tools import setup_environ

__all__ = ["run_cocotb"]

ROOT = Path(__file__).resolve().parent.parent


def run_cocotb(name: str, block, *, test_module: str, build_dir, params: dict,
               extra_env: dict | None = None, check_lint: bool = True) -> tuple[int, int]:
    """Emit ``block`` as ``<name>.v`` in ``build_dir`` (lint it), build it with Verilator and
    run ``test_module``; the block's parameters reach the test as ``<NAME>_PARAMS`` (JSON).
    Returns ``(tests, failures)``."""
    from cocotb_tools.check_results import get_results
    from cocotb_tools.runner import get_runner
    setup_environ()
    build = Path(build_dir)
    v = write_verilog(block, name, build)
    if check_lint:
        lint(v)
    runner = get_runner("verilator")
    runner.build(sources=[v], hdl_toplevel=name, build_dir=build,
                 build_args=["-Wno-fatal", str(ROOT / "rtl" / "lint.vlt")],
                 timescale=("1ns", "1ps"))
    env = {f"{name.upper()}_PARAMS": json.dumps(params), "PYTHONPATH": str(ROOT),
           **(extra_env or {})}
    xml = runner.test(hdl_toplevel=name, test_module=test_module, build_dir=build,
                      test_dir=build, extra_env=env, results_xml=str(build / "results.xml"))
    return get_results(xml)
