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
PULSES = {"kvmu": {"clear"}, "dma_reader": {"clear"}, "output_writer": {"clear"},
          "image_writer": {"clear"}}
# the movers' jobs as the sequencer makes them: addresses of checked descriptors, aligned to
# the bus, and at least one beat
JOBS = ("dma_reader", "image_writer")


@dataclass
class Harness:
    top: Module
    ports: list
    asserts: int        # properties proven
    assumes: int        # properties assumed of the neighbours


def _bus_limits(block: str, cfg) -> dict:
    """The AXI4 master's limits: bursts in flight per ID (none: the half is absent) and the
    longest burst."""
    if block == "kvmu":
        return dict(reads=(cfg.kvmu_max_reads,), writes=(cfg.kvmu_max_writes,),
                    max_len=cfg.kvmu_max_burst)
    # the core's movers issue ID 1: eight tags of the DMA reader, eight writes unanswered
    # of the output and image writers, bursts of up to 16 beats
    movers = {"dma_reader": dict(reads=(0, 8), writes=()),
              "output_writer": dict(reads=(), writes=(0, 8)),
              "image_writer": dict(reads=(), writes=(0, 8))}
    if block in movers:
        return dict(movers[block], max_len=16)
    # the core: the KVMU's bursts (ID 0) and the movers' (ID 1)
    return dict(reads=(cfg.kvmu_max_reads, 8), writes=(cfg.kvmu_max_writes, 8),
                max_len=max(cfg.kvmu_max_burst, 16))


def harness(block: str, cfg, dut=None) -> Harness:
    """Block ``block`` of ``rtl.BLOCKS`` (or a part of ``verif.formal.plan.PARTS``) built from
    ``cfg`` (or ``dut``, built already) under its rules."""
    if dut is None:
        from rtl import BLOCKS
        from .plan import PARTS
        dut = PARTS[block](cfg) if block in PARTS else BLOCKS[block].from_config(cfg)
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
    if block in JOBS:
        lg = cfg.kvmu_bus_bytes.bit_length() - 1
        job = dut.job
        with m.If(props.live & job.valid):
            props.check(False, job.payload.addr[:lg] == 0, "job: address aligned to the bus")
            props.check(False, job.payload.beats != 0, "job: at least one beat")
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
    # the inputs are the top's (free); an output the block leaves undriven stays its constant
    # reset value, as in the core, rather than turning into a free input of the top
    ports = [Value.cast(v) for _, mem, v in dut.signature.flatten(dut) if mem.flow != Out]
    return Harness(m, ports, props.asserts, props.assumes)
