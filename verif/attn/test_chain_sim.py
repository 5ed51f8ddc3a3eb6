"""The chain the core will build, tested before the core: the engine's hash words go straight
into the HCU (``wiring.connect``, no glue), and the HCU's clusters on the bundled trace are
the golden model's. (The WTU half of the chain waits for the engine's scoring command.)"""
import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring

from rtl import AttentionEngine, HashClusterUnit
from verif.hcu.model import expected
from verif.lib.amaranth_sim import run_ports
from verif.lib.scoreboard import compare
from vrex.config import Config

from .model import trace_hash_commands


class HashChain(wiring.Component):
    """The engine's ``o_hash`` connected to the HCU's ``i``."""

    def __init__(self, cfg):
        self.engine = AttentionEngine.from_config(cfg)
        self.hcu = HashClusterUnit.from_config(cfg)
        e, h = self.engine.signature.members, self.hcu.signature.members
        super().__init__({"cmd": e["cmd"], "a": e["a"], "b": e["b"], "bias": e["bias"],
                          "o": h["o"], "th_hd": h["th_hd"], "max_age": h["max_age"],
                          "age_limit": h["age_limit"]})
        self.out_layout = self.hcu.out_layout

    def elaborate(self, platform):
        m = Module()
        m.submodules.engine, m.submodules.hcu = self.engine, self.hcu
        wiring.connect(m, self.engine.o_hash, self.hcu.i)
        for port in ("cmd", "a", "b", "bias"):
            wiring.connect(m, wiring.flipped(getattr(self, port)), getattr(self.engine, port))
        wiring.connect(m, self.hcu.o, wiring.flipped(self.o))
        m.d.comb += [self.hcu.th_hd.eq(self.th_hd), self.hcu.max_age.eq(self.max_age),
                     self.hcu.age_limit.eq(self.age_limit),
                     self.engine.o_gemm.ready.eq(1)]
        return m


@pytest.mark.parametrize("preset", ["paper", "tuned"])
def test_engine_hashes_cluster_as_the_golden_model(preset):
    cfg = Config(n_layers=1)
    ports, _, tokens, run_cfg = trace_hash_commands(preset, cfg, steps=range(1, 4))
    run = cfg.replace(th_hd=run_cfg.th_hd, max_age=run_cfg.max_age)
    dut = HashChain(cfg)
    regs = [(getattr(dut, k), v) for k, v in run.block_registers("hcu").items()]
    got, _, _ = run_ports(dut, ports, {"o": len(tokens)}, regs=regs, cross="both",
                          max_cycles=200_000)
    compare(got["o"], expected(tokens, run), what="token")
