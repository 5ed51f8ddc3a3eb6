"""A block under proof: the block built from a Config, its ports left free at the top (the
solver drives them), the rules of :mod:`verif.formal.rules` on every stream and bus port, and
its other inputs (run-time settings) held after reset, as the core holds them."""
from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Module, Value
from amaranth.lib import stream
from amaranth.lib.wiring import Out

from .rules import Props, axi_master_rules, axil_slave_rules, stream_rule

__all__ = ["Harness", "harness", "PULSES"]

# inputs that are pulses, not settings: left free on every cycle
PULSES = {"kvmu": {"clear"}}


@dataclass
class Harness:
    top: Module
    ports: list
    asserts: int        # properties proven
    assumes: int        # properties assumed of the neighbours


def _bus_limits(block: str, cfg) -> dict:
    """The AXI4 master's limits: bursts in flight per ID and the longest burst."""
    if block == "kvmu":
        return dict(reads=(cfg.kvmu_max_reads,), writes=(cfg.kvmu_max_writes,),
                    max_len=cfg.kvmu_max_burst)
    # the core: the KVMU's bursts (ID 0) and the DMA reader's or the output and image
    # writers' (ID 1: eight tags, eight writes unanswered), the DMA's bursts of 16 beats
    return dict(reads=(cfg.kvmu_max_reads, 8), writes=(cfg.kvmu_max_writes, 8),
                max_len=max(cfg.kvmu_max_burst, 16))


def harness(block: str, cfg, dut=None) -> Harness:
    """Block ``block`` of ``rtl.BLOCKS`` built from ``cfg`` (or ``dut``, built already) under
    its rules."""
    if dut is None:
        from rtl import BLOCKS
        dut = BLOCKS[block].from_config(cfg)
    m = Module()
    m.submodules.dut = dut
    props = Props(m)
    members = dut.signature.members
    bus = set()
    for name, mem in members.items():
        if mem.is_signature and isinstance(mem.signature, stream.Signature):
            stream_rule(props, getattr(dut, name), mem.flow == Out, name)
        elif name.startswith(("m_axi_", "s_axil_")):
            bus.add(name.split("_")[0] + "_" + name.split("_")[1])
        elif mem.flow != Out and name not in PULSES.get(block, ()):
            v = Value.cast(getattr(dut, name))
            with m.If(props.live):
                props.check(False, v == props.past(v, name), f"{name}: held after reset")
    if "m_axi" in bus:
        get = lambda f: getattr(dut, f"m_axi_{f}")
        axi_master_rules(props, get, bus_bytes=cfg.kvmu_bus_bytes, **_bus_limits(block, cfg))
    if "s_axil" in bus:
        from rtl.core.map import register_map
        regs = register_map()
        axil_slave_rules(props, lambda f: getattr(dut, f"s_axil_{f}"),
                         readable=[r.offset for r in regs],
                         writable=[r.offset for r in regs if r.access != "RO"],
                         strobe_all=[r.offset for r in regs if r.name == "DESC_DATA"])
    ports = [Value.cast(v) for _, _, v in dut.signature.flatten(dut)]
    return Harness(m, ports, props.asserts, props.assumes)
