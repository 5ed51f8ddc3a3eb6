"""The names the core's testbench and an engineer reading the Verilog go by: inside the core's
Verilog, each block the core holds declares a signal under each of its ports' names, and no
other signal of that module takes such a name (a part of a block with a port of the block's
port's name made the Verilog call the block's ``o.valid`` ``o__valid$73`` and the part's
``o__valid``, and the core's monitors read the part's signal in its place)."""
import re

from rtl import VrexCore
from verif.core.e2e import synth_config
from vrex.emit import emit_verilog


def _module(verilog: str, name: str) -> str:
    a = verilog.find(f"module \\{name} ")
    assert a >= 0, f"no module {name} in the Verilog"
    return verilog[a:verilog.find("endmodule", a)]


# the engine's counters share their name with its systolic array's (a block of its own, with
# its own ``perf``); the core reads them by signal, never by name
KNOWN = {("engine", "perf")}


def test_blocks_keep_their_port_names_inside_the_core():
    core = VrexCore(synth_config())
    v = emit_verilog(core, "core")
    blocks = {"hcu": core.hcu, "wtu": core.wtu, "kvmu": core.kvmu, "engine": core.engine}
    bad = []
    for name, blk in blocks.items():
        mod = _module(v, f"core.{name}")
        declared = set(re.findall(r"^\s*(?:wire|reg|input|output)\s*(?:\[[^\]]*\]\s*)?"
                                  r"(\\?[\w$.]+)", mod, re.M))
        for path, _, _ in blk.signature.flatten(blk):
            port = "__".join(map(str, path))
            clash = sorted(d for d in declared if d.lstrip("\\").startswith(port + "$"))
            if clash and (name, port) not in KNOWN:
                bad.append(f"core.{name}: {port} is also {clash[:3]}")
    assert not bad, "\n".join(bad)
