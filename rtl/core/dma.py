"""The core's data movers: a read DMA that streams memory into the blocks, the writer of the
attention output, a width converter and the AXI4 join of the core's port with the KVMU's."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..kvmu.axi import axi4_master_members, burst_beats

__all__ = ["AxiJoin", "DmaReader", "ImageWriter", "OutputWriter", "Repack"]

_AR = ("arid", "araddr", "arlen", "arsize", "arburst", "arlock", "arcache", "arprot")
_AW = ("awid", "awaddr", "awlen", "awsize", "awburst", "awlock", "awcache", "awprot")


def write_responses(m, w, outstanding: int):
    """The write responses of ``w`` (a writer with the ``m_axi_aw*``, ``_w*``, ``_b*``
    channels, ``error``, ``error_addr`` and ``clear``): every B taken, the bursts whose
    address went out and whose response has not come counted (returned, at most
    ``outstanding``), their addresses queued in order so that the first failing one lands in
    the sticky ``error_addr``; ``clear`` resets ``error``."""
    s = lambda n: getattr(w, f"m_axi_{n}")
    pend = Signal(range(outstanding + 1))
    issued, answered = s("awvalid") & s("awready"), s("bvalid")
    aq = fifo.SyncFIFOBuffered(width=len(s("awaddr")), depth=outstanding)
    m.submodules.addrs = aq
    m.d.comb += [s("bready").eq(1), aq.w_data.eq(s("awaddr")), aq.w_en.eq(issued),
                 aq.r_en.eq(answered)]
    m.d.sync += pend.eq(pend + issued - answered)
    with m.If(w.clear):
        m.d.sync += w.error.eq(0)
    with m.Elif(answered & (s("bresp") != 0) & ~w.error):
        m.d.sync += [w.error.eq(1), w.error_addr.eq(aq.r_data)]
    return pend


class DmaReader(wiring.Component):
    """Reads jobs (``addr``, ``beats`` of ``bus_bytes``, ``dest``) as INCR bursts of at most
    ``burst`` beats (and never across 4 KB) on the read half of ``m_axi`` with ID 1, and
    delivers their data in job order on ``o`` (``data``, ``dest``, ``last`` on a job's final
    beat). A burst is issued only when the data FIFO has room for all of it, so R is never
    held: a slow consumer cannot block the bus for the KVMU's reads. A read answered SLVERR
    or DECERR still delivers its beats (so every consumer finishes its command) and sets
    the sticky ``error`` with the first failing burst's ``error_addr``; ``clear`` resets it.
    ``idle``: no job, burst or beat left. ``received`` counts the beats of destination 2
    taken from the bus (the core stores a token once all its rows are in). A beat's ``bad``
    says its response was SLVERR or DECERR."""

    def __init__(self, *, bus_bytes: int, addr_bits: int, burst: int = 16, depth: int = 64,
                 tags: int = 8):
        if depth < burst:
            raise ValueError(f"depth ({depth}) must hold one burst ({burst} beats)")
        self._bus, self._addr_bits, self._burst, self._depth = bus_bytes, addr_bits, burst, depth
        self._tags = tags
        self.job_layout = data.StructLayout({"addr": addr_bits, "beats": 16, "dest": 3})
        self.out_layout = data.StructLayout({"data": 8 * bus_bytes, "dest": 3, "last": 1,
                                             "bad": 1})
        members = axi4_master_members("m_axi", addr_bits, 8 * bus_bytes)
        super().__init__({
            "job": In(stream.Signature(self.job_layout)),
            "o": Out(stream.Signature(self.out_layout)),
            "error": Out(1), "error_addr": Out(addr_bits), "clear": In(1), "idle": Out(1),
            "bursts": Out(32), "beats": Out(32), "received": Out(32),
            **{k: v for k, v in members.items() if k.startswith(("m_axi_ar", "m_axi_r"))}})

    def elaborate(self, platform):
        m = Module()
        bus, lg = self._bus, exact_log2(self._bus)
        s = lambda n: getattr(self, f"m_axi_{n}")
        dq = fifo.SyncFIFOBuffered(width=self.out_layout.size, depth=self._depth)
        tq = fifo.SyncFIFOBuffered(width=4 + self._addr_bits, depth=self._tags)
        m.submodules.data, m.submodules.tags = dq, tq
        active = Signal()
        addr, rem, dest = Signal(self._addr_bits), Signal(16), Signal(3)
        reserved = Signal(range(self._depth + 1))     # beats promised to bursts in flight
        beats = burst_beats(m, addr, rem, Const(self._burst, 9), bus, "dma")
        take_job = ~active
        m.d.comb += self.job.ready.eq(take_job)
        with m.If(self.job.valid & take_job & (self.job.payload.beats != 0)):
            m.d.sync += [active.eq(1), addr.eq(self.job.payload.addr),
                         rem.eq(self.job.payload.beats), dest.eq(self.job.payload.dest)]
        room = Signal()
        m.d.comb += room.eq(dq.level + reserved + beats <= self._depth)
        m.d.comb += [s("arid").eq(1), s("araddr").eq(addr), s("arlen").eq(beats - 1),
                     s("arsize").eq(lg), s("arburst").eq(1), s("arcache").eq(0b0011),
                     s("arvalid").eq(active & room & tq.w_rdy),
                     tq.w_data.eq(Cat(dest, rem == beats, addr)),
                     tq.w_en.eq(s("arvalid") & s("arready"))]
        got = Signal()
        m.d.comb += got.eq(s("rvalid") & s("rready"))
        with m.If(s("arvalid") & s("arready")):
            m.d.sync += [addr.eq(addr + (beats << lg)), rem.eq(rem - beats),
                         self.bursts.eq(self.bursts + 1)]
            with m.If(rem == beats):
                m.d.sync += active.eq(0)
        m.d.sync += reserved.eq(reserved + Mux(s("arvalid") & s("arready"), beats, 0)
                                - got)
        tag_dest, tag_last, tag_addr = tq.r_data[:3], tq.r_data[3], tq.r_data[4:]
        m.d.comb += [s("rready").eq(tq.r_rdy),      # a beat's tag is known before it is taken
                     dq.w_data.eq(Cat(s("rdata"), tag_dest, tag_last & s("rlast"),
                                     s("rresp") != 0)),
                     dq.w_en.eq(got), tq.r_en.eq(got & s("rlast"))]
        with m.If(got):
            m.d.sync += self.beats.eq(self.beats + 1)
            with m.If(tag_dest == 2):
                m.d.sync += self.received.eq(self.received + 1)
        with m.If(self.clear):
            m.d.sync += self.error.eq(0)
        with m.Elif(got & (s("rresp") != 0) & ~self.error):
            m.d.sync += [self.error.eq(1), self.error_addr.eq(tag_addr)]
        m.d.comb += [self.o.valid.eq(dq.r_rdy), self.o.payload.as_value().eq(dq.r_data),
                     dq.r_en.eq(self.o.ready),
                     self.idle.eq(~active & ~self.job.valid & (reserved == 0) & ~dq.r_rdy)]
        return m


class Repack(wiring.Component):
    """A stream of ``in_bytes`` words as one of ``out_bytes`` words, little end first; one
    width divides the other (a word is split, or words are gathered). A word a cycle on the
    narrow side, with no gap: the next wide word is taken in the cycle its last part leaves
    (split), a wide word leaves in the cycle its last part arrives at the earliest and the
    next word's first part may arrive as it leaves (gather)."""

    def __init__(self, in_bytes: int, out_bytes: int):
        if max(in_bytes, out_bytes) % min(in_bytes, out_bytes):
            raise ValueError(f"widths {in_bytes} and {out_bytes} bytes: one must divide the "
                             f"other")
        self._in, self._out = in_bytes, out_bytes
        super().__init__({"i": In(stream.Signature(8 * in_bytes)),
                          "o": Out(stream.Signature(8 * out_bytes))})

    def elaborate(self, platform):
        m = Module()
        i, o = self.i, self.o
        if self._in == self._out:
            m.d.comb += [o.valid.eq(i.valid), o.payload.eq(i.payload), i.ready.eq(o.ready)]
        elif self._in > self._out:
            parts = self._in // self._out
            word, k, full = Signal(8 * self._in), Signal(range(parts)), Signal()
            last = Signal()                 # the word's last part leaves this cycle
            m.d.comb += [last.eq(full & o.ready & (k == parts - 1)),
                         i.ready.eq(~full | last), o.valid.eq(full),
                         o.payload.eq(word.word_select(k, 8 * self._out))]
            with m.If(o.valid & o.ready):
                m.d.sync += k.eq(k + 1)
                with m.If(k == parts - 1):
                    m.d.sync += [k.eq(0), full.eq(0)]
            with m.If(i.valid & i.ready):
                m.d.sync += [word.eq(i.payload), full.eq(1), k.eq(0)]
        else:
            parts = self._out // self._in
            word, k, full = Signal(8 * self._out), Signal(range(parts)), Signal()
            m.d.comb += [i.ready.eq(~full | o.ready), o.valid.eq(full), o.payload.eq(word)]
            with m.If(o.valid & o.ready):
                m.d.sync += full.eq(0)
            with m.If(i.valid & i.ready):
                m.d.sync += [word.word_select(k, 8 * self._in).eq(i.payload), k.eq(k + 1)]
                with m.If(k == parts - 1):
                    m.d.sync += [k.eq(0), full.eq(1)]
        return m


class ImageWriter(wiring.Component):
    """Writes a job's ``beats`` bus words, taken from ``i`` in order, from byte address
    ``addr`` on, as INCR bursts of at most ``burst`` beats that never cross 4 KB, on the
    write half of ``m_axi`` (ID 1), every byte enabled. A response other than OKAY sets the
    sticky ``error`` and ``error_addr`` (the burst's address); ``clear`` resets it. ``idle``:
    no job, beat or response left."""

    def __init__(self, *, bus_bytes: int, addr_bits: int, burst: int = 16,
                 outstanding: int = 8):
        self._bus, self._addr_bits, self._burst = bus_bytes, addr_bits, burst
        self._outstanding = outstanding
        self.job_layout = data.StructLayout({"addr": addr_bits, "beats": 16})
        members = axi4_master_members("m_axi", addr_bits, 8 * bus_bytes)
        super().__init__({
            "job": In(stream.Signature(self.job_layout)),
            "i": In(stream.Signature(8 * bus_bytes)),
            "error": Out(1), "error_addr": Out(addr_bits), "clear": In(1), "idle": Out(1),
            **{k: v for k, v in members.items() if k.startswith(("m_axi_aw", "m_axi_w",
                                                                   "m_axi_b"))}})

    def elaborate(self, platform):
        m = Module()
        bus, lg = self._bus, exact_log2(self._bus)
        s = lambda n: getattr(self, f"m_axi_{n}")
        active = Signal()
        addr, rem = Signal(self._addr_bits), Signal(16)
        beats = burst_beats(m, addr, rem, Const(self._burst, 9), bus, "img")
        m.d.comb += self.job.ready.eq(~active)
        with m.If(self.job.valid & ~active & (self.job.payload.beats != 0)):
            m.d.sync += [active.eq(1), addr.eq(self.job.payload.addr),
                         rem.eq(self.job.payload.beats)]
        pend = write_responses(m, self, self._outstanding)
        # the lengths of the bursts whose address went out, in order for W
        lens = fifo.SyncFIFOBuffered(width=8, depth=self._outstanding)
        m.submodules.lens = lens
        issued = Signal()
        m.d.comb += [s("awid").eq(1), s("awaddr").eq(addr), s("awlen").eq(beats - 1),
                     s("awsize").eq(lg), s("awburst").eq(1), s("awcache").eq(0b0011),
                     s("awvalid").eq(active & (pend < self._outstanding) & lens.w_rdy),
                     issued.eq(s("awvalid") & s("awready")),
                     lens.w_data.eq(beats - 1), lens.w_en.eq(issued)]
        with m.If(issued):
            m.d.sync += [addr.eq(addr + (beats << lg)), rem.eq(rem - beats)]
            with m.If(rem == beats):
                m.d.sync += active.eq(0)
        k = Signal(8)
        m.d.comb += [s("wdata").eq(self.i.payload), s("wstrb").eq((1 << bus) - 1),
                     s("wlast").eq(k == lens.r_data),
                     s("wvalid").eq(lens.r_rdy & self.i.valid),
                     self.i.ready.eq(lens.r_rdy & s("wready"))]
        with m.If(s("wvalid") & s("wready")):
            m.d.sync += k.eq(k + 1)
            with m.If(s("wlast")):
                m.d.comb += lens.r_en.eq(1)
                m.d.sync += k.eq(0)
        m.d.comb += self.idle.eq(~active & ~self.job.valid & (pend == 0) & ~lens.r_rdy)
        return m


class OutputWriter(wiring.Component):
    """Writes the attention engine's output beats (``n`` values each, stored as int16) to
    ``base + (row · row_bytes + col) · 2`` on the write half of ``m_axi`` (ID 1): one INCR
    burst a beat (one a bus beat where the beat would cross a 4 KB page), strobes marking
    its bytes when it is narrower than the bus, at most
    ``outstanding`` bursts unanswered. A response other than OKAY sets the sticky ``error``
    and ``error_addr``. ``idle``: every burst answered."""

    def __init__(self, *, n: int, value_bits: int, row_values: int, bus_bytes: int,
                 addr_bits: int, outstanding: int = 8):
        self._n, self._bus, self._addr_bits = n, bus_bytes, addr_bits
        self._row_values, self._outstanding = row_values, outstanding
        self._bytes = 2 * n
        self.beat_layout = data.StructLayout({"o": data.ArrayLayout(signed(value_bits), n),
                                              "row": 16, "col": 16, "last": 1})
        members = axi4_master_members("m_axi", addr_bits, 8 * bus_bytes)
        super().__init__({
            "i": In(stream.Signature(self.beat_layout)),
            "base": In(addr_bits),
            "error": Out(1), "error_addr": Out(addr_bits), "clear": In(1), "idle": Out(1),
            "bursts": Out(32),
            **{k: v for k, v in members.items() if k.startswith(("m_axi_aw", "m_axi_w",
                                                                   "m_axi_b"))}})

    def elaborate(self, platform):
        m = Module()
        bus, nb = self._bus, self._bytes
        lg = exact_log2(bus)
        s = lambda n: getattr(self, f"m_axi_{n}")
        beats = max(1, nb // bus)
        words = Signal(8 * max(nb, bus))
        ext = [Signal(signed(16), name=f"o16_{k}") for k in range(self._n)]
        m.d.comb += [e.eq(v) for e, v in zip(ext, self.i.payload.o)]
        m.d.comb += words.eq(Cat(*ext))
        addr = Signal(self._addr_bits)
        m.d.comb += addr.eq(self.base + ((self.i.payload.row * self._row_values +
                                          self.i.payload.col) << 1))
        pend = write_responses(m, self, self._outstanding)
        have, aw_sent = Signal(), Signal()
        buf, baddr, k = Signal(8 * max(nb, bus)), Signal(self._addr_bits), Signal(range(beats + 1))
        # a beat of several bus beats that would cross a 4 KB page (an output address aligned
        # to the bus but not to the beat) goes as one burst per bus beat
        split = Signal()
        m.d.comb += self.i.ready.eq(~have)
        with m.If(self.i.valid & ~have):
            m.d.sync += [have.eq(1), aw_sent.eq(0), k.eq(0), baddr.eq(addr),
                         buf.eq(words << (8 * (addr[:lg] if nb < bus else 0)))]
            if beats > 1:
                m.d.sync += split.eq(addr[lg:12] + beats > (4096 >> lg))
        at = Cat(Const(0, lg), (baddr[lg:] + Mux(split, k, 0)) if beats > 1 else baddr[lg:])
        m.d.comb += [s("awid").eq(1), s("awaddr").eq(at),
                     s("awlen").eq(Mux(split, 0, beats - 1)), s("awsize").eq(lg),
                     s("awburst").eq(1), s("awcache").eq(0b0011),
                     s("awvalid").eq(have & ~aw_sent & (pend < self._outstanding))]
        with m.If(s("awvalid") & s("awready")):
            m.d.sync += aw_sent.eq(1)
        if nb < bus:
            strb = Const((1 << nb) - 1, bus) << baddr[:lg]
        else:
            strb = Const((1 << bus) - 1, bus)
        m.d.comb += [s("wdata").eq(buf.word_select(k, 8 * bus) if nb > bus else buf),
                     s("wstrb").eq(strb), s("wlast").eq(split | (k == beats - 1)),
                     s("wvalid").eq(have & (aw_sent | (s("awvalid") & s("awready"))))]
        with m.If(s("wvalid") & s("wready")):
            m.d.sync += k.eq(k + 1)
            with m.If(split):
                m.d.sync += aw_sent.eq(0)
            with m.If(k == beats - 1):
                m.d.sync += [have.eq(0), self.bursts.eq(self.bursts + 1)]
        m.d.comb += self.idle.eq(~have & (pend == 0) & ~self.i.valid)
        return m


class AxiJoin(wiring.Component):
    """Two AXI4 masters on one port: ``a_*`` (the KVMU's, ID 0) and ``b_*`` (the core's DMA
    and output writer, ID 1). AR and AW go round robin; an AW's owner is queued so W
    follows AW order, one burst at a time; R and B return by ID.

    An address or a W beat shown stays, payload and owner, until the bus takes it (AXI's
    valid rule, proven in ``verif/formal``). ``abort`` (a soft reset on its way): no new
    address is issued, every response is taken and dropped, and a write burst whose address
    went out is finished by the join with ``wstrb`` 0 (memory unchanged); ``quiet`` says no
    burst is outstanding and no address waits, so the masters may be reset without breaking
    the protocol."""

    def __init__(self, *, addr_bits: int, bus_bytes: int, write_order: int = 16,
                 outstanding: int = 64):
        self._addr_bits, self._bus, self._depth = addr_bits, bus_bytes, write_order
        self._outstanding = outstanding
        mem = axi4_master_members("m_axi", addr_bits, 8 * bus_bytes)
        flip = lambda p: {k.replace("m_axi", p): v.flip() for k, v in mem.items()}
        super().__init__({**mem, **flip("a"), **flip("b"), "abort": In(1), "quiet": Out(1)})

    def elaborate(self, platform):
        m = Module()
        g = lambda p, n: getattr(self, f"{p}_{n}")
        ab = self.abort
        picks, oks = {}, {}
        helds = {}
        for ch, fields in (("ar", _AR), ("aw", _AW)):
            pick = Signal(name=f"{ch}_pick")          # 1: b
            want_a, want_b = g("a", f"{ch}valid"), g("b", f"{ch}valid")
            turn = Signal(name=f"{ch}_turn")
            ok = Signal(name=f"{ch}_ok")
            # an address shown and not taken stays, from the same master, until taken: even
            # when the other master asks too, even while aborting (AXI's valid rule)
            held, held_pick = Signal(name=f"{ch}_held"), Signal(name=f"{ch}_held_pick")
            picks[ch], oks[ch], helds[ch] = pick, ok, held
            m.d.comb += pick.eq(Mux(held, held_pick, Mux(want_a & want_b, turn, want_b)))
            for f in fields:
                if f.endswith("id"):
                    m.d.comb += g("m_axi", f).eq(pick)
                else:
                    m.d.comb += g("m_axi", f).eq(Mux(pick, g("b", f), g("a", f)))
            go = ok & (~ab | held)
            valid, ready = g("m_axi", f"{ch}valid"), g("m_axi", f"{ch}ready")
            m.d.comb += [valid.eq(Mux(pick, want_b, want_a) & go),
                         g("a", f"{ch}ready").eq(~pick & ready & go),
                         g("b", f"{ch}ready").eq(pick & ready & go)]
            m.d.sync += [held.eq(valid & ~ready), held_pick.eq(pick)]
            with m.If(valid & ready):
                m.d.sync += turn.eq(~pick)
        # outstanding bursts
        rd_out = Signal(range(self._outstanding + 1))
        wr_out = Signal(range(self._outstanding + 1))
        ar_go = self.m_axi_arvalid & self.m_axi_arready
        r_end = self.m_axi_rvalid & self.m_axi_rready & self.m_axi_rlast
        aw_go = self.m_axi_awvalid & self.m_axi_awready
        b_go = self.m_axi_bvalid & self.m_axi_bready
        m.d.sync += [rd_out.eq(rd_out + ar_go - r_end), wr_out.eq(wr_out + aw_go - b_go)]
        m.d.comb += [oks["ar"].eq(rd_out < self._outstanding),
                     self.quiet.eq((rd_out == 0) & (wr_out == 0) & ~helds["ar"] & ~helds["aw"])]
        # writes: AW owners (and lengths) in order; W from the owner at the head until wlast
        order = fifo.SyncFIFOBuffered(width=9, depth=self._depth)
        m.submodules.order = order
        m.d.comb += [oks["aw"].eq(order.w_rdy & (wr_out < self._outstanding)),
                     order.w_data.eq(Cat(picks["aw"], self.m_axi_awlen)),
                     order.w_en.eq(aw_go)]
        wb, wlen = order.r_data[0], order.r_data[1:]
        wbeat = Signal(8)
        # aborting, the join writes the bursts' remaining beats itself, once a master's beat
        # shown and not taken has been taken (its data stays until then)
        sub_held, by_join = Signal(), Signal()
        m.d.comb += by_join.eq(ab & ~sub_held)
        m.d.sync += sub_held.eq(self.m_axi_wvalid & ~self.m_axi_wready & ~by_join)
        with m.If(by_join):
            m.d.comb += [self.m_axi_wdata.eq(0), self.m_axi_wstrb.eq(0),
                         self.m_axi_wlast.eq(wbeat == wlen), self.m_axi_wvalid.eq(order.r_rdy)]
        with m.Else():
            for f in ("wdata", "wstrb", "wlast"):
                m.d.comb += g("m_axi", f).eq(Mux(wb, g("b", f), g("a", f)))
            m.d.comb += [
                self.m_axi_wvalid.eq(order.r_rdy & Mux(wb, self.b_wvalid, self.a_wvalid)),
                self.a_wready.eq(order.r_rdy & ~wb & self.m_axi_wready),
                self.b_wready.eq(order.r_rdy & wb & self.m_axi_wready)]
        w_go = self.m_axi_wvalid & self.m_axi_wready
        m.d.comb += order.r_en.eq(w_go & self.m_axi_wlast)
        with m.If(w_go):
            m.d.sync += wbeat.eq(Mux(self.m_axi_wlast, 0, wbeat + 1))
        # responses by ID (taken and dropped while aborting)
        for ch, fields in (("r", ("rdata", "rresp", "rlast")), ("b", ("bresp",))):
            to_b = g("m_axi", f"{ch}id")[0]
            for p in ("a", "b"):
                for f in fields:
                    m.d.comb += g(p, f).eq(g("m_axi", f))
                m.d.comb += g(p, f"{ch}id").eq(0 if p == "a" else 1)
            m.d.comb += [g("a", f"{ch}valid").eq(g("m_axi", f"{ch}valid") & ~to_b & ~ab),
                         g("b", f"{ch}valid").eq(g("m_axi", f"{ch}valid") & to_b & ~ab),
                         g("m_axi", f"{ch}ready").eq(ab | Mux(to_b, g("b", f"{ch}ready"),
                                                              g("a", f"{ch}ready")))]
        return m
