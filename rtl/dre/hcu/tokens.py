"""The HCU's input: a token taken, checked, and held in a one-token buffer."""
from __future__ import annotations

from amaranth.hdl import Array, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["HcuTokens", "beyond"]


def beyond(m, layer, layers: int):
    """A signal: ``layer`` names no context (never, when every value of the field does)."""
    out = Signal()
    if (1 << len(layer)) > layers:
        m.d.comb += out.eq(layer >= layers)
    return out


class HcuTokens(wiring.Component):
    """Tokens from ``i_token`` into ``inb``, checked there (the check registered with the token),
    then into the one-token buffer ``nxt`` when that is free; ``take`` empties it (the token
    starts). A token is refused as it leaves ``inb`` (``refuse``, ``refuse_code``: 1 a layer
    beyond the contexts, 2 a step older than the layer's last: steps never decrease nor
    wrap, docs/numerics.md §5), and dropped: no output beat, no state changed. ``i_token`` waits
    while ``inb`` is full or a context command runs (``ctx_busy``).

    Latency: a token taken on ``i_token`` is in ``nxt`` two cycles later when ``nxt`` is free.
    Throughput: a token every cycle ``nxt`` is emptied. Each layer's last step is kept here
    (``ctx_apply`` sets the layer ``ctx_layer``'s from ``ctx_step``; ``ctx_last_step`` reads
    it)."""

    def __init__(self, *, token_layout, layers: int, layer_bits: int, step_bits: int):
        self._layers, self._step_bits = layers, step_bits
        super().__init__({
            "i_token": In(stream.Signature(token_layout)),
            "ctx_busy": In(1), "take": In(1),
            "nxt": Out(token_layout), "nxt_valid": Out(1), "inb_valid": Out(1),
            "nxt_layer": Out(layer_bits),
            "refuse": Out(1), "refuse_code": Out(2),
            "ctx_apply": In(1), "ctx_layer": In(layer_bits), "ctx_step": In(step_bits),
            "ctx_last_step": Out(step_bits),
        })

    def elaborate(self, platform):
        m = Module()
        inb, inb_valid = Signal.like(self.nxt), self.inb_valid
        nxt, nxt_valid = self.nxt, self.nxt_valid
        inb_bad_layer, inb_bad_step = Signal(), Signal()
        m.d.comb += self.i_token.ready.eq(~inb_valid & ~self.ctx_busy)
        p = self.i_token.payload
        last_step = Array(Signal(self._step_bits, name=f"last_step_{l}")
                          for l in range(self._layers))
        bad_layer, bad_step = beyond(m, p.layer, self._layers), Signal()
        m.d.comb += bad_step.eq(~bad_layer & (p.step < last_step[p.layer]))
        with m.If(self.i_token.valid & self.i_token.ready):
            m.d.sync += [inb.eq(p), inb_valid.eq(1), inb_bad_layer.eq(bad_layer),
                         inb_bad_step.eq(bad_step)]
        with m.If(inb_valid & (inb_bad_layer | inb_bad_step)):
            m.d.comb += [self.refuse.eq(1), self.refuse_code.eq(Mux(inb_bad_layer, 1, 2))]
            m.d.sync += inb_valid.eq(0)
        with m.Elif(inb_valid & ~nxt_valid):
            m.d.sync += [nxt.eq(inb), nxt_valid.eq(1), inb_valid.eq(0),
                         last_step[inb.layer].eq(inb.step)]
        # the buffered token's layer as of the next cycle (a read address is set a cycle
        # ahead)
        m.d.comb += self.nxt_layer.eq(Mux(inb_valid & ~nxt_valid, inb.layer, nxt.layer))
        with m.If(self.take):
            m.d.sync += nxt_valid.eq(0)
        # a FLUSH's or a LOAD's new last step (registered, a cycle after the command's
        # decision: no token can be checked before)
        with m.If(self.ctx_apply):
            for l in range(self._layers):
                with m.If(self.ctx_layer == l):
                    m.d.sync += last_step[l].eq(self.ctx_step)
        m.d.comb += self.ctx_last_step.eq(last_step[self.ctx_layer])
        return m
