"""Build a block's Verilog under Verilator and run a cocotb test module on it.

The build's :class:`vrex.config.Config` reaches the simulator process as JSON in
``VREX_CONFIG``; the testbench rebuilds the block from it (:func:`tb_config`). Tool output goes
to log files in the build folder; the results come back per test, by name.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

from vrex.config import Config

from .ccache import CCACHE_ENV, ccache_environ

__all__ = ["run_cocotb", "run_point", "build_points", "tb_config", "failures", "verif_module",
           "ROOT"]

ROOT = Path(__file__).resolve().parents[2]


def verif_module(block: str, role: str) -> str:
    """The module of ``role`` (``tb``, ``bench``) for a registered block: ``verif.<group>.<role>``,
    or ``verif.<group>.<role>_<part>`` for the block ``<group>_<part>`` of a group of several
    (docs/adding-a-block.md)."""
    from rtl import BLOCKS
    group = BLOCKS[block].group
    if block == group:
        return f"verif.{group}.{role}"
    return f"verif.{group}.{role}_{block.removeprefix(group + '_')}"


def tb_config() -> Config:
    """Inside the simulator: the Config the runner sent."""
    return Config.from_json(os.environ["VREX_CONFIG"])


# Verilator's options beside its defaults, per block: the core's model without Verilator's
# motion of statements between conditionals (V3MergeCond), a pass quadratic in the size of the
# flattened model: it took 77 of Verilator's 86 seconds on the core (10 s without it); the
# synth point's whole test 242 -> 172 s, one run each (its C++ compile 71 -> 90 s, its run
# 37 -> 48 s).
# On each block alone the pass takes under a second.
VERILATOR_OPT = {"core": ["-fno-merge-cond-motion"]}

# the C++ optimisation of a model's fast code and of the run-time library: -O1 compiles the
# generated C++ in half the time of Verilator's own -Os (the core's synth point: 143 -> 85 s
# of CPU without the compiler cache) and runs the cocotb tests as fast (their time is spent in
# Python, not in the model)
CXX_OPT = "-O1"

# a simulator run's wall-clock limit in seconds (``VREX_SIM_WALL_S`` overrides; `make soak`
# gives its whole-trace runs more): a run past it is killed and its test fails, naming it,
# so a hang (a testbench waiting on a trigger that never fires, simulation time frozen)
# fails instead of stopping the suite. The longest run of `make test` takes about 7 minutes.
SIM_WALL_S = 1800

# a coverage build (``make coverage``): every statement's branch counted; at the points of
# TOGGLE_POINTS (each block's smallest) every bit of every signal up to 16 bits wide too
# (toggle counting slows a model four to seven times at that width, and fifty times at
# Verilator's default of 256 bits, memories included)
COVERAGE_ARGS = ("--coverage-line",)
TOGGLE_ARGS = ("--coverage-toggle", "--coverage-max-width", "16")
TOGGLE_POINTS = {("hcu", "l4_w64_h16"), ("wtu", "l4_b8_p2_e256"), ("attn", "n4_k192_b128"),
                 ("attn_array", "n4"), ("attn_exp", "default"), ("kvmu", "bus8_bt4_g3_o2"),
                 ("core_regs", "q1_l2_bus8")}


@contextlib.contextmanager
def wall_limit(seconds: int, what: str):
    """Raise ``TimeoutError`` naming ``what`` if the block takes longer than ``seconds``
    (a ``subprocess.run`` inside kills its child on the way out). Only in the main thread
    (signals); elsewhere no limit."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise TimeoutError(f"{what}: still running after {seconds} s of wall-clock time "
                           f"(a hang?); the limit is VREX_SIM_WALL_S")
    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


SIMULATORS = ("verilator", "icarus")


def run_cocotb(name: str, cfg: Config, *, test_module: str, build_dir, testcase=None,
               test_filter: str | None = None, extra_env: dict | None = None,
               check_lint: bool = True, cxx_opt: str = CXX_OPT,
               public_all: bool = False, coverage: bool = False,
               toggles: bool = False, sim: str = "verilator", make=None,
               make_key: str = "") -> dict:
    """Emit block ``name`` of ``rtl.BLOCKS`` built from ``cfg`` (or the component
    ``make()`` returns, a design that is not a registered block, such as the board's:
    ``make_key`` names its parameters beside the Config) as ``<name>.v`` in
    ``build_dir`` (lint it), build it with the simulator ``sim`` (Verilator, or Icarus
    Verilog under its default ``-g2012`` on the Verilog for event-driven simulators,
    :func:`vrex.emit.for_event_simulators`) and run ``test_module`` (or only ``testcase``).
    Returns ``{test name: failure message or None}``; the build and run logs are
    ``build.log`` and ``sim.log`` in ``build_dir``. ``cxx_opt`` is the C++ compiler's
    optimisation for the model's fast path and the run-time library (none for its once-run
    code: a ``-CFLAGS`` would apply to all and doubled the core's build); ``-O0`` builds a
    large model several times faster than :data:`CXX_OPT` and runs it a few times slower:
    for points whose build costs more than their run.
    ``VREX_CXX_OPT`` in the environment overrides.

    Signals: only the top module's signals are visible to cocotb (public), and those a test
    module that reads inside the block lists in a Verilator control file beside it
    (``verif/core/tb.vlt`` for ``verif.core.tb``); cocotb's own build makes every signal of
    every block public, which made the core's model three times longer to compile;
    ``public_all`` keeps cocotb's way (the engine at n = 16 compiles faster with it: its
    signals split the model into smaller functions).

    ``coverage``: the model counts line coverage (and with ``toggles`` toggle coverage) and
    writes ``coverage.dat`` in ``build_dir`` when the run ends (``make coverage``,
    :mod:`verif.coverage`)."""
    from cocotb_tools.runner import get_runner
    from rtl import BLOCKS
    from vrex.emit import lint, write_verilog
    from vrex.toolchain import setup_environ
    if sim not in SIMULATORS:
        raise ValueError(f"simulator {sim!r}: one of {', '.join(SIMULATORS)}")
    setup_environ()
    build = Path(build_dir).resolve()
    build.mkdir(parents=True, exist_ok=True)
    (build / "config.json").write_text(cfg.to_json())
    # (made only if its Verilog is not cached under the Config)
    block, key = make or (lambda: BLOCKS[name].from_config(cfg)), cfg.to_json() + make_key
    v = write_verilog(block, name, build, key=key)
    if check_lint:
        lint(v)
    runner = get_runner(sim)
    if sim == "icarus":
        if coverage:
            raise ValueError("coverage is counted by Verilator's models only")
        v = write_verilog(block, name, build, event_sim=True, key=key)
        runner.build(sources=[v], hdl_toplevel=name, build_dir=build,
                     timescale=("1ns", "1ps"), log_file=build / "build.log")
    else:
        _build_verilator(runner, name, v, build, test_module,
                         cxx_opt=cxx_opt, public_all=public_all,
                         cover=(*COVERAGE_ARGS, *(TOGGLE_ARGS if toggles else ()))
                         if coverage else ())
    # unbuffered: a long run's sim.log shows its progress lines as they come
    env = {"VREX_CONFIG": cfg.to_json(), "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1",
           **(extra_env or {})}
    if os.environ.get("WAVES"):
        env["WAVES"] = "1"
    if coverage:            # this run's counts only
        (build / "coverage.dat").unlink(missing_ok=True)
    xml = build / "results.xml"
    xml.unlink(missing_ok=True)
    limit = int(os.environ.get("VREX_SIM_WALL_S", SIM_WALL_S))
    try:
        with wall_limit(limit, f"{test_module} on {name} ({build})"):
            runner.test(hdl_toplevel=name, hdl_toplevel_lang="verilog",
                        test_module=test_module, build_dir=build, test_dir=build,
                        extra_env=env, testcase=testcase, test_filter=test_filter,
                        results_xml=str(xml), log_file=build / "sim.log",
                        waves=bool(os.environ.get("WAVES")))
    except SystemExit:              # the runner exits on a failed test: the XML says which
        pass
    if not xml.exists():
        return {}
    results = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        results[case.get("name")] = None if bad is None else (bad.get("message") or "failed")
    return results


def _build_verilator(runner, name, v, build, test_module, *, cxx_opt, public_all, cover):
    """The Verilator build of ``v`` (see :func:`run_cocotb`)."""
    from vrex.emit import LINT_WAIVERS
    opt = os.environ.get("VREX_CXX_OPT", cxx_opt)
    taps = ROOT.joinpath(*test_module.split(".")).with_suffix(".vlt")
    public = [] if public_all else ["--no-public-flat-rw", "--public-depth", "1"]
    if taps.exists() and not public_all:
        public.append(str(taps))
    # Verilator's makefile reads the optimisation as make variables (MAKEFLAGS: the model's
    # fast code and the run-time library, not its once-run code, which a -CFLAGS would also
    # reach) and puts $(OBJCACHE) before every compile: ccache (verif.lib.ccache), so a model
    # whose Verilog and options did not change is not compiled again, in any clone
    saved = {k: os.environ.get(k) for k in ("MAKEFLAGS", "OBJCACHE", *CCACHE_ENV)}
    flags = saved["MAKEFLAGS"] or ""
    if opt:
        os.environ["MAKEFLAGS"] = (flags + ("" if " -- " in flags else " --")
                                   + f" OPT_FAST={opt} OPT_GLOBAL={opt}")
    os.environ.update(ccache_environ())
    try:
        # the Verilog named relative to the build folder, where Verilator runs: the generated
        # C++ quotes the source's path, and an absolute one would differ between clones and
        # miss the compiler cache (the runner makes its `sources` absolute; build_args stay)
        runner.build(sources=[], hdl_toplevel=name, build_dir=build,
                     build_args=["-Wno-fatal", str(LINT_WAIVERS), *public,
                                 *VERILATOR_OPT.get(name, []), *cover,
                                 v.name],
                     timescale=("1ns", "1ps"),
                     log_file=build / "build.log")
    finally:
        for k, val in saved.items():
            if val is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = val


def failures(results: dict, build_dir) -> str:
    """A message naming every failed test, for an assert (empty when all passed)."""
    if not results:
        return f"no test ran (see {Path(build_dir) / 'sim.log'})"
    bad = {k: v for k, v in results.items() if v is not None}
    if not bad:
        return ""
    return (f"{len(bad)} of {len(results)} tests failed (log: {Path(build_dir) / 'sim.log'}):\n"
            + "\n".join(f"  {k}: {v}" for k, v in bad.items()))


# build points built otherwise than the default (-Os, only the top's and the testbench's
# signals public), measured on a slow 2-core machine in whole suite runs: the engine at
# n16_w8 and the array at n16 compile at -O0 (their -Os builds cost more than their runs:
# 367 -> 236 s and 227 -> under 83 s); the engine at n16_w8 keeps every signal public (239 s
# to compile at -O0 without, about 130 s with)
BUILD_POINTS = {("attn", "n16_w8"): dict(cxx_opt="-O0", public_all=True),
                ("attn_array", "n16"): dict(cxx_opt="-O0")}


def run_point(block: str, point: str, cfg: Config, test_filter: str | None = None,
              extra_env: dict | None = None, sim: str | None = None) -> None:
    """The Verilog tier of one build point: run the block's testbench (``verif.<group>.tb``,
    or ``tb_<block>`` in a group of several; only the tests whose full names match the
    regular expression ``test_filter``, if given; ``extra_env`` for the testbench, if given)
    on the block built from ``cfg`` in
    ``build/sim/<block>/<point>/``; fail the calling pytest test naming every failed cocotb
    test. The points of ``BUILD_POINTS`` build with their options. With ``VREX_COVERAGE=1``
    in the environment (``make coverage``) the point builds with coverage counters in
    ``build/coverage/<block>/<point>/`` instead. The simulator is ``sim``, or ``SIM`` in the
    environment (cocotb's name), or Verilator; Icarus builds in ``build/icarus/``."""
    import pytest
    sim = sim or os.environ.get("SIM") or "verilator"
    coverage = os.environ.get("VREX_COVERAGE") == "1"
    kind = "coverage" if coverage else "sim" if sim == "verilator" else sim
    build = ROOT / "build" / kind / block / point
    opts = BUILD_POINTS.get((block, point), {}) if sim == "verilator" else {}
    results = run_cocotb(block, cfg, test_module=verif_module(block, "tb"),
                         build_dir=build, test_filter=test_filter, extra_env=extra_env,
                         coverage=coverage, toggles=(block, point) in TOGGLE_POINTS,
                         sim=sim, **opts)
    if msg := failures(results, build):
        pytest.fail(msg, pytrace=False)


def build_points(points, soak=()) -> list:
    """Pytest parameters over the names of ``points`` (a Verilog tier's build points), those
    named in ``soak`` marked for ``make soak`` (kept out of ``make test`` for their time)."""
    import pytest
    unknown = set(soak) - set(points)
    assert not unknown, f"no such build points: {sorted(unknown)}"
    return [pytest.param(p, marks=pytest.mark.soak) if p in soak else p for p in points]
