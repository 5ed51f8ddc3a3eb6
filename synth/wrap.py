"""A pin wrapper for synthesis: any block on five pins, every path register to register.

All of the block's inputs come from one shift register loaded through ``si``; all of its
outputs are captured each cycle (``load`` high) into a register that shifts out on ``so``.
Nothing of the block can be optimised away (every output reaches ``so``), the block's own
ports are registered on both sides (so nextpnr times the block, not the pads), and the design
fits any package.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["PinWrapper"]


class PinWrapper(wiring.Component):
    def __init__(self, block: wiring.Component):
        self._block = block
        super().__init__({"si": In(1), "load": In(1), "so": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.block = blk = self._block
        ins, outs = [], []
        for path, member, value in blk.signature.flatten(blk):
            (ins if member.flow == In else outs).append(Value.cast(value))
        in_width = sum(len(v) for v in ins)
        out_width = sum(len(v) for v in outs)
        chain = Signal(max(1, in_width))
        m.d.sync += chain.eq(Cat(self.si, chain[:-1]) if in_width > 1 else self.si)
        offset = 0
        for v in ins:
            m.d.comb += v.eq(chain[offset:offset + len(v)])
            offset += len(v)
        cap = Signal(max(1, out_width))
        with m.If(self.load):
            m.d.sync += cap.eq(Cat(*outs))
        with m.Else():
            m.d.sync += cap.eq(cap >> 1)
        m.d.comb += self.so.eq(cap[0])
        return m
