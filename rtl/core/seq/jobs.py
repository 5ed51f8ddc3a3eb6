"""The sequencer's datapath parts: read-DMA programs into jobs, the engine's B source, and
the blocks' errors as the register map's codes."""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from .common import ERR, SRC_DMA, SRC_PAD, bsrc_layout, program_layout

__all__ = ["JobGen", "BSource", "ErrorMap"]


class JobGen(wiring.Component):
    """Programs (``prog``: two-level loops of jobs, :func:`~.common.program_layout`) into a
    queue of four, then into the read DMA's jobs (``job``: address, beats, destination), a
    job a cycle the DMA takes; K then V of a pair alternate. ``level``: programs queued;
    ``busy``: a program is being unrolled.

    Latency: a program's first job is offered two cycles after the program is taken."""

    def __init__(self, *, addr_bits: int, job_layout):
        self._prog = program_layout(addr_bits)
        super().__init__({
            "prog": In(stream.Signature(self._prog)),
            "job": Out(stream.Signature(job_layout)),
            "level": Out(range(5)), "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        prog_t = self._prog
        m.submodules.programs = pq = fifo.SyncFIFOBuffered(width=prog_t.size, depth=4)
        m.d.comb += [pq.w_data.eq(self.prog.payload), pq.w_en.eq(self.prog.valid),
                     self.prog.ready.eq(pq.w_rdy), self.level.eq(pq.level)]
        p = Signal(prog_t)
        busy = Signal()
        io, ii, side = Signal(16), Signal(8), Signal()
        row0, row1, a0, a1 = (Signal(len(p.b0), name=nm) for nm in ("row0", "row1", "a0", "a1"))
        j = self.job
        m.d.comb += [pq.r_en.eq(~busy), self.busy.eq(busy)]
        with m.If(~busy & pq.r_rdy):
            q = Signal(prog_t)
            m.d.comb += q.as_value().eq(pq.r_data)
            m.d.sync += [p.eq(q), busy.eq(q.n_out != 0), io.eq(0), ii.eq(0), side.eq(0),
                         row0.eq(q.b0), row1.eq(q.b1), a0.eq(q.b0), a1.eq(q.b1)]
        m.d.comb += [j.valid.eq(busy), j.payload.addr.eq(Mux(side, a1, a0)),
                     j.payload.beats.eq(p.beats), j.payload.dest.eq(p.dest)]
        with m.If(j.valid & j.ready):
            with m.If(p.pair & ~side):
                m.d.sync += side.eq(1)
            with m.Else():
                m.d.sync += side.eq(0)
                with m.If(ii == p.n_in - 1):
                    m.d.sync += [ii.eq(0), io.eq(io + 1), row0.eq(row0 + p.s_out),
                                 row1.eq(row1 + p.s_out), a0.eq(row0 + p.s_out),
                                 a1.eq(row1 + p.s_out)]
                    with m.If(io == p.n_out - 1):
                        m.d.sync += busy.eq(0)
                with m.Else():
                    m.d.sync += [ii.eq(ii + 1), a0.eq(a0 + p.s_in), a1.eq(a1 + p.s_in)]
        return m


class BSource(wiring.Component):
    """Where the engine's B operand comes from (``src``: the read DMA, the KVMU's candidate
    keys, its fetched tokens, or zero padding) and the fetched bus beats the engine still
    expects (``left``): a fetch that ends short (a read error drops its remaining beats, a
    stale or refused fetch delivers none) is padded with zero beats (``fetch_end`` turns the
    source to the padding while beats are due), beats past the count are dropped, so the
    engine always gets its command's tokens (``take``: a beat of the fetches or the padding
    taken). ``kerr_before``: the KVMU's sticky error as it stood before the fetch in flight
    (while B reads from the DMA). A request (``req``) wins over the counting.

    Latency: a request or a take moves the registers the next cycle."""

    def __init__(self, *, kv_lg: int):
        lay = bsrc_layout(kv_lg)
        super().__init__({
            "req": In(lay), "take": In(1), "k_error": In(1),
            "src": Out(2), "left": Out(lay.members["left"]), "kerr_before": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        src, left, kerr = Signal(2), Signal.like(self.left), Signal()
        m.d.comb += [self.src.eq(src), self.left.eq(left), self.kerr_before.eq(kerr)]
        with m.If(src == SRC_DMA):
            m.d.sync += kerr.eq(self.k_error)
        with m.If(self.take):
            m.d.sync += left.eq(left - 1)
            with m.If((src == SRC_PAD) & (left == 1)):
                m.d.sync += src.eq(SRC_DMA)
        r = self.req
        with m.If(r.set):
            m.d.sync += src.eq(r.src)
        with m.If(r.load):
            m.d.sync += left.eq(r.left)
        with m.If(r.fetch_end):
            m.d.sync += src.eq(Mux(left != 0, SRC_PAD, SRC_DMA))
        return m


class ErrorMap(wiring.Component):
    """The blocks' errors as the register map's codes, to the register file (``i_error``; it
    keeps the first): a phase's own (``seq_code``, ``seq_addr``) first, then each block's
    sticky error as it rises (the read DMA's, the output writer's, the image writer's, the
    KVMU's by its code, the engine's, the HCU's or the WTU's); a lost cluster the KVMU's
    refusal explains is reported as the refusal. ``now``: an error this cycle.
    ``clear`` (a descriptor starts) clears the DMA's and the output writer's errors.

    Latency: an error reaches ``i_error`` in the cycle it rises."""

    def __init__(self, *, addr_bits: int, error_layout, swaps: bool):
        self._swaps = swaps
        mover = data.StructLayout({"error": 1, "addr": addr_bits})
        super().__init__({
            "seq_code": In(8), "seq_addr": In(64), "version": In(16), "clear": In(1),
            "dma": In(mover), "out": In(mover), "img": In(mover),
            "k_error": In(1), "k_code": In(8), "k_addr": In(addr_bits),
            "e_error": In(1), "h_error": In(1), "w_error": In(1),
            "i_error": Out(stream.Signature(error_layout)),
            "now": Out(1), "dma_clear": Out(1), "out_clear": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        code, addr = Signal(8), Signal(64)
        names = ("k", "e", "h", "w", "dma", "out", "img")
        prev = {k: Signal(name=f"prev_{k}") for k in names}
        now = {"k": self.k_error, "e": self.e_error, "h": self.h_error, "w": self.w_error,
               "dma": self.dma.error, "out": self.out.error, "img": self.img.error}
        if self._swaps:
            m.d.sync += prev["img"].eq(now["img"])
        m.d.sync += [prev[k].eq(now[k]) for k in names if k != "img"]
        rose = lambda k: now[k] & ~prev[k]
        kv_code = Signal(8)
        with m.Switch(self.k_code):
            with m.Case(3, 9, 11):
                m.d.comb += kv_code.eq(ERR["KV_TABLE_FULL"])
            with m.Case(10):
                m.d.comb += kv_code.eq(ERR["KV_CLUSTER_LOST"])
            with m.Case(4, 6, 12):
                m.d.comb += kv_code.eq(ERR["BUS_READ"])
            with m.Case(5, 7):
                m.d.comb += kv_code.eq(ERR["BUS_WRITE"])
            with m.Default():
                m.d.comb += kv_code.eq(ERR["KV_REFUSED"])
        # a candidate list that ends in error because the KVMU refused its command (its
        # registers out of range) is reported by the cause, KV_REFUSED: the refusal rises in
        # the cycle the sequencer sees the list's end
        refused = rose("k") & (kv_code == ERR["KV_REFUSED"])
        lost = self.seq_code == ERR["KV_CLUSTER_LOST"]
        with m.If((self.seq_code != 0) & ~(lost & refused)):
            m.d.comb += [code.eq(self.seq_code), addr.eq(self.seq_addr)]
        with m.Elif(rose("dma")):
            m.d.comb += [code.eq(ERR["BUS_READ"]), addr.eq(self.dma.addr)]
        with m.Elif(rose("out")):
            m.d.comb += [code.eq(ERR["BUS_WRITE"]), addr.eq(self.out.addr)]
        if self._swaps:
            with m.Elif(rose("img")):
                m.d.comb += [code.eq(ERR["BUS_WRITE"]), addr.eq(self.img.addr)]
        with m.Elif(rose("k")):
            m.d.comb += [code.eq(kv_code), addr.eq(self.k_addr)]
        with m.Elif(rose("e")):
            m.d.comb += code.eq(ERR["ENGINE_REFUSED"])
        with m.Elif(rose("h") | rose("w")):
            m.d.comb += code.eq(ERR["DRE_REFUSED"])
        e = self.i_error
        m.d.comb += [e.valid.eq(code != 0), e.payload.code.eq(code), e.payload.addr.eq(addr),
                     e.payload.version.eq(self.version), self.now.eq(code != 0),
                     self.dma_clear.eq(self.clear), self.out_clear.eq(self.clear)]
        return m
