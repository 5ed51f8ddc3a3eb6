"""The KVMU's delivery: fetch bursts' R beats to ``o_beats``."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from .parts import events

__all__ = ["KvmuDelivery"]


class KvmuDelivery(wiring.Component):
    """The fetch bursts asked for (``rq_valid``, ``rq_desc``: a burst's block, offset,
    beats and address, or a fetch's end), queued in order; their R beats (``r_go``, unless
    the control takes R beats: ``own_r``) go to ``o_beats`` through one output register, each
    with its slot's token index (read from ``toks`` beside it); a fetch's end beat closes it
    (``stale``, or ``error`` after a failed read, whose remaining beats are read and
    dropped). Latency: a beat is on ``o_beats`` the cycle after its R transfer. Throughput: a
    beat a cycle while ``o_beats`` is ready."""

    COUNTERS = ("delivered_tokens", "bus_errors", "near_read_beats", "near_read_bytes",
                "far_read_beats", "far_read_bytes")

    def __init__(self, *, desc, kv, bus_bytes: int, block_tokens: int, beats_per_token: int,
                 blocks: int, token_bits: int, addr_bits: int, max_reads: int):
        self._desc, self._bus_bytes, self._max_reads = desc, bus_bytes, max_reads
        self._bt_lg, self._bpt_lg = exact_log2(block_tokens), exact_log2(beats_per_token)
        super().__init__({
            "rq_valid": In(1), "rq_desc": In(desc), "rq_rdy": Out(1),
            "own_r": In(1),
            "rvalid": In(1), "rdata": In(8 * bus_bytes), "rresp": In(2), "r_go": In(1),
            "rready": Out(1),
            "o_beats": Out(stream.Signature(kv)),
            "toks": In(memory.ReadPort.Signature(addr_width=ceil_log2(blocks * block_tokens),
                                                 shape=token_bits)),
            "r_err": Out(1), "r_err_addr": Out(addr_bits),
            "idle": Out(1),
            "ev": events(*self.COUNTERS),
        })

    def elaborate(self, platform):
        m = Module()
        o, ev = self.o_beats, self.ev
        m.submodules.rq = rq = fifo.SyncFIFOBuffered(width=self._desc.size,
                                                      depth=self._max_reads + 2)
        m.d.comb += [rq.w_data.eq(self.rq_desc), rq.w_en.eq(self.rq_valid),
                     self.rq_rdy.eq(rq.w_rdy)]
        d = data.View(self._desc, rq.r_data)
        r_drop = Signal()
        r_i = Signal(9)                    # beat within the head descriptor's burst
        out_valid, out_data = Signal(), Signal(8 * self._bus_bytes)
        out_first, out_end, out_stale, out_err = Signal(), Signal(), Signal(), Signal()
        can_load = ~out_valid | o.ready
        # the data register loads the R channel's data whenever it may load (an end beat's
        # data reads as 0 at the output), so its 8·bus_bytes enables carry none of the R
        # channel's decisions (they were the clock's limit: docs/kvmu.md)
        with m.If(can_load):
            m.d.sync += out_data.eq(self.rdata)
        m.d.comb += [o.valid.eq(out_valid), o.payload.data.eq(Mux(out_end, 0, out_data)),
                     o.payload.token.eq(Mux(out_end, 0, self.toks.data)),
                     o.payload.first.eq(out_first), o.payload.end.eq(out_end),
                     o.payload.stale.eq(out_stale), o.payload.error.eq(out_err)]
        with m.If(o.valid & o.ready):
            m.d.sync += out_valid.eq(0)
            with m.If(out_first & ~out_end):
                m.d.comb += ev.delivered_tokens.eq(1)
        pos = Signal(len(d.off))
        m.d.comb += pos.eq(d.off + r_i)
        # the token index is read whenever the output register may load, not only when an R
        # beat does: a register that does not load goes idle (or holds an end beat, whose
        # token reads as 0), so the read enable needs none of the R channel's decisions
        # (they were the clock's limit: docs/kvmu.md)
        bpt, bt = self._bpt_lg, self._bt_lg
        m.d.comb += [self.toks.addr.eq(Cat(pos[bpt:bpt + bt], d.bid)),
                     self.toks.en.eq(can_load)]
        m.d.comb += self.r_err_addr.eq(d.addr + (r_i << exact_log2(self._bus_bytes)))
        with m.If(~self.own_r & rq.r_rdy):
            with m.If(d.end):
                with m.If(can_load):
                    m.d.comb += rq.r_en.eq(1)
                    m.d.sync += [out_valid.eq(1), out_end.eq(1), out_first.eq(0),
                                 out_stale.eq(d.stale), out_err.eq(d.err | r_drop),
                                 r_drop.eq(0)]
            with m.Else():
                m.d.comb += self.rready.eq(r_drop | can_load)
                with m.If(self.r_go):
                    bad = self.rresp != 0
                    with m.If(~r_drop & ~bad):
                        m.d.sync += [out_valid.eq(1), out_end.eq(0), out_stale.eq(0),
                                     out_err.eq(0), out_first.eq(pos[:bpt] == 0)]
                    with m.If(bad):
                        m.d.sync += r_drop.eq(1)
                        m.d.comb += [ev.bus_errors.eq(1), self.r_err.eq(~r_drop)]
                    with m.If(d.far):
                        m.d.comb += [ev.far_read_beats.eq(1), ev.far_read_bytes.eq(1)]
                    with m.Else():
                        m.d.comb += [ev.near_read_beats.eq(1), ev.near_read_bytes.eq(1)]
                    m.d.sync += r_i.eq(r_i + 1)
                    with m.If(r_i == d.beats - 1):
                        m.d.comb += rq.r_en.eq(1)
                        m.d.sync += r_i.eq(0)
        m.d.comb += self.idle.eq(~out_valid & ~rq.r_rdy)
        return m
