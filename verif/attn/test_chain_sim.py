"""The chain the core will build, tested before the core: the engine's hash words go straight
into the HCU (``wiring.connect``, no glue), and the HCU's clusters on the bundled trace are
the golden model's; the engine's scores, weights and counts go straight into the WTU, and its
selections on the bundled trace are the golden model's."""
import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring

from rtl import AttentionEngine, HashClusterUnit, WicsumThresholdUnit
from verif.hcu.model import expected
from verif.wtu.model import expected as wtu_expected
from verif.lib.amaranth_sim import run_ports
from verif.lib.scoreboard import compare
from vrex.config import Config

from .model import trace_hash_commands, trace_score_commands


class HashChain(wiring.Component):
    """The engine's ``o_hash`` connected to the HCU's ``i``."""

    def __init__(self, cfg):
        self.engine = AttentionEngine.from_config(cfg)
        self.hcu = HashClusterUnit.from_config(cfg)
        e, h = self.engine.signature.members, self.hcu.signature.members
        super().__init__({"cmd": e["cmd"], "a": e["a"], "b": e["b"], "bias": e["bias"],
                          "o": h["o"], "th_hd": h["th_hd"], "max_age": h["max_age"],
                          "age_limit": h["age_limit"], "cluster_cap": h["cluster_cap"]})
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
                     self.hcu.cluster_cap.eq(self.cluster_cap),
                     self.engine.o_gemm.ready.eq(1)]
        return m


# make soak (the engine's Verilog tier hashes the trace under both presets, and the core's
# tiers hash and cluster it end to end)
@pytest.mark.soak
@pytest.mark.parametrize("preset", ["paper", "tuned"])
def test_engine_hashes_cluster_as_the_golden_model(preset):
    cfg = Config(n_layers=1)
    ports, _, tokens, run_cfg = trace_hash_commands(preset, cfg, steps=range(1, 3))
    run = cfg.replace(th_hd=run_cfg.th_hd, max_age=run_cfg.max_age)
    dut = HashChain(cfg)
    regs = [(getattr(dut, k), v) for k, v in run.block_registers("hcu").items()]
    got, _, _ = run_ports(dut, ports, {"o": len(tokens)}, regs=regs, cross="both",
                          max_cycles=200_000)
    compare(got["o"], expected(tokens, run), what="token")


class ScoreChain(wiring.Component):
    """The engine's ``o_score`` connected to the WTU's ``i``."""

    def __init__(self, cfg):
        self.engine = AttentionEngine.from_config(cfg)
        self.wtu = WicsumThresholdUnit.from_config(cfg)
        e, w = self.engine.signature.members, self.wtu.signature.members
        super().__init__({"cmd": e["cmd"], "a": e["a"], "b": e["b"], "bias": e["bias"],
                          "o": w["o"], "th_r": w["th_r"]})
        self.out_layout = self.wtu.out_layout

    def elaborate(self, platform):
        m = Module()
        m.submodules.engine, m.submodules.wtu = self.engine, self.wtu
        wiring.connect(m, self.engine.o_score, self.wtu.i)
        for port in ("cmd", "a", "b", "bias"):
            wiring.connect(m, wiring.flipped(getattr(self, port)), getattr(self.engine, port))
        wiring.connect(m, self.wtu.o, wiring.flipped(self.o))
        m.d.comb += [self.wtu.th_r.eq(self.th_r), self.engine.o_gemm.ready.eq(1),
                     self.engine.o_hash.ready.eq(1)]
        return m


@pytest.mark.parametrize("preset", ["paper", "tuned"])
def test_engine_scores_select_as_the_golden_model(preset):
    cfg = Config(attn_n=8)
    ports, _, heads, run_cfg = trace_score_commands(preset, cfg, n_groups=3, max_rows=30)
    run = cfg.replace(th_r=run_cfg.th_r)
    want, ref = wtu_expected(heads, run)
    assert sum(len(h) for h in ref.heads) > 0
    dut = ScoreChain(cfg)
    regs = [(getattr(dut, k), v) for k, v in run.block_registers("wtu").items()]
    got, _, _ = run_ports(dut, ports, {"o": len(want)}, regs=regs, cross="both",
                          max_cycles=200_000)
    compare(got["o"], want, what="selection beat")
