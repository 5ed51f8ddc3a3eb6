"""The KVMU sequencer's store states: find or allocate the token's block, offload the
ring's oldest block when the ring is full, write the token, update its cluster's sums,
commit (a mixin of :class:`.control.KvmuControl`)."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Mux, Signal
from amaranth.utils import exact_log2

from ..lib import mul_const

__all__ = ["StoreStates"]


class StoreStates:
    """Find the token's block: the cluster's last one if it has room and is near, else a new
    one (moving the ring's oldest block out first when the ring is full); write its rows;
    add its K rows to the cluster's sums; commit."""

    def _refuse_store(self, m, c, code):
        self._fail(m, code)
        m.d.comb += self.ev.refused.eq(1)
        m.d.sync += c.drain.eq(self._hpg * self.beats_per_token)
        m.next = "DRAIN"

    def _store_states(self, m, c):
        with m.State("S_WAIT"):
            with m.If((self.reads_out == 0) & self.delivery_idle):
                m.d.sync += c.ct.eq(c.ct_rd.data)
                m.next = "S_FIND"
        with m.State("S_FIND"):
            ct = c.ct
            with m.If(ct.count == (1 << self._count_bits) - 1):
                self._refuse_store(m, c, 11)
            with m.Elif(ct.valid):
                m.d.sync += c.bid.eq(ct.tail)
                m.next = "S_TAIL"
            with m.Else():
                m.next = "S_ALLOC"
        self._table_read(m, "S_TAIL", "S_TAIL3")
        with m.State("S_TAIL3"):
            be = c.bt_q
            with m.If((be.fill < self._bt) & ~be.far):
                m.d.sync += [c.target.eq(c.bid), c.tslot.eq(be.slot), c.tfill.eq(be.fill),
                             c.j.eq(0)]
                m.next = "S_W_SETUP"
            with m.Else():
                m.next = "S_ALLOC"
        with m.State("S_ALLOC"):
            with m.If(c.next_bid == self._blocks):
                self._refuse_store(m, c, 3)
            with m.Else():
                m.next = "S_ALLOC2"
        with m.State("S_ALLOC2"):
            m.next = "S_ALLOC3"
        with m.State("S_ALLOC3"):
            nw = c.nw_q
            with m.If(nw.valid & (c.far_count >= self.reg_far_slots)):
                self._refuse_store(m, c, 9)
            with m.Elif(nw.valid):
                m.d.sync += [c.victim.eq(nw.bid), c.bid.eq(nw.bid)]
                m.next = "S_VIC"
            with m.Else():
                m.next = "S_NEW"
        self._table_read(m, "S_VIC", "S_VIC3")
        with m.State("S_VIC3"):
            m.d.sync += [c.be.eq(c.bt_q), c.vfill.eq(c.bt_q.fill), c.j.eq(0),
                         c.rerr.eq(0), c.hc.eq(0)]
            m.d.comb += self.b_clear.eq(1)
            m.next = "M_SETUP"
        self._new_block(m, c)

    def _new_block(self, m, c):
        """A new block in the ring's next slot, at the end of the cluster's list (S_NEW, and
        the old last block linked to it: S_LINK)."""
        with m.State("S_NEW"):
            nb = c.next_bid[:c.bid_bits]
            m.d.comb += [c.bt_wr.addr.eq(nb), c.bt_wr.en.eq(1),
                         c.bt_wr.data.slot.eq(c.alloc_slot),
                         c.nw_wr.addr.eq(c.alloc_slot), c.nw_wr.en.eq(1),
                         c.nw_wr.data.valid.eq(1), c.nw_wr.data.bid.eq(nb),
                         c.ct_wr.addr.eq(self._ctab_index(c)), c.ct_wr.en.eq(1),
                         c.ct_wr.data.eq(c.ct), c.ct_wr.data.valid.eq(1),
                         c.ct_wr.data.tail.eq(nb),
                         c.ct_wr.data.head.eq(Mux(c.ct.valid, c.ct.head, nb))]
            m.d.sync += [c.ct.valid.eq(1), c.ct.tail.eq(nb),
                         c.ct.head.eq(Mux(c.ct.valid, c.ct.head, nb))]
            last_slot = c.alloc_slot == self.reg_near_slots - 1
            m.d.sync += [c.target.eq(nb), c.tslot.eq(c.alloc_slot), c.tfill.eq(0), c.j.eq(0),
                         c.next_bid.eq(c.next_bid + 1),
                         c.alloc_slot.eq(Mux(last_slot, 0, c.alloc_slot + 1))]
            with m.If(c.ct.valid):
                m.d.sync += c.bid.eq(c.ct.tail)
                m.next = "S_LINK"
            with m.Else():
                m.next = "S_W_SETUP"
        self._table_read(m, "S_LINK", "S_LINK3")
        with m.State("S_LINK3"):
            be = c.bt_q
            m.d.comb += [c.bt_wr.addr.eq(c.bid), c.bt_wr.en.eq(1), c.bt_wr.data.eq(be),
                         c.bt_wr.data.has_next.eq(1), c.bt_wr.data.next.eq(c.target)]
            m.next = "S_W_SETUP"

    def _write_states(self, m, c):
        """Write the token's rows, one slot per head of the group, from ``i_data``; commit
        the slot (its token index, the block's fill) once every write answered OKAY."""
        i = self.data_in
        with m.State("S_W_SETUP"):
            m.d.sync += [c.addr.eq(c.block_off(c.tslot, c.j) +
                                   (c.tfill << exact_log2(self.token_bytes))),
                         c.abase.eq(0), c.ret.eq(1),
                         c.rem.eq(self.beats_per_token), c.hb.eq(0)]
            with m.If(c.j == 0):
                m.d.comb += self.b_clear.eq(1)
            m.next = "ADD_BASE"
        with m.State("S_AW"):
            beats = c.beats
            m.d.comb += [self.awaddr.eq(c.addr), self.awlen.eq(beats - 1),
                         self.awvalid.eq(self.writes_out < self._max_writes)]
            with m.If(self.aw_go):
                m.d.sync += [c.wbeats.eq(beats), c.wi.eq(0)]
                m.next = "S_W"
        with m.State("S_W"):
            m.d.comb += [self.wvalid.eq(i.valid), self.wdata.eq(i.payload),
                         self.wlast.eq(c.wi == c.wbeats - 1), i.ready.eq(self.wready),
                         c.kb_wr.addr.eq(mul_const(c.j, c.kbeats) + c.hb),
                         c.kb_wr.data.eq(i.payload),
                         c.kb_wr.en.eq(self.w_go & (c.hb < c.kbeats))]
            with m.If(self.w_go):
                self._count_beat(m, 0, write=True)
                m.d.sync += [c.wi.eq(c.wi + 1), c.hb.eq(c.hb + 1)]
                with m.If(c.wi == c.wbeats - 1):
                    m.d.sync += [c.addr.eq(c.addr + (c.wbeats << c.bus_lg)),
                                 c.rem.eq(c.rem - c.wbeats)]
                    with m.If(c.rem != c.wbeats):
                        m.next = "LEN"
                    with m.Elif(c.j == self._hpg - 1):
                        m.next = "S_B"
                    with m.Else():
                        m.d.sync += c.j.eq(c.j + 1)
                        m.next = "S_W_SETUP"
        with m.State("S_B"):
            with m.If(self.writes_out == 0):
                with m.If(self.b_err):
                    self._fail(m, 5, self.b_err_resp, self.b_err_addr)
                    m.d.comb += [self.ev.refused.eq(1), self.b_clear.eq(1)]
                    m.next = "IDLE"
                with m.Elif(c.ct.poisoned):
                    m.next = "S_COMMIT"
                with m.Else():
                    m.d.sync += [c.j.eq(0), c.h_err.eq(0), c.rerr.eq(0), c.hc.eq(1)]
                    m.next = "M_SETUP"
        self._commit_states(m, c)

    def _commit_states(self, m, c):
        """The token's slot and the cluster's count (or its poisoning), then the fill."""
        cmd = c.cmd
        with m.State("S_COMMIT"):
            ctx = c.ctx
            m.d.comb += [self.toks.addr.eq(Cat(c.tfill[:c.bt_lg], c.target)),
                         self.toks.data.eq(cmd.token), self.toks.en.eq(1),
                         c.ct_wr.addr.eq(self._ctab_index(c)), c.ct_wr.en.eq(1),
                         c.ct_wr.data.eq(c.ct)]
            with m.If(c.h_err):
                m.d.comb += c.ct_wr.data.poisoned.eq(1)
            with m.Elif(~c.ct.poisoned):
                same = c.ct.cur_step == cmd.step
                m.d.comb += [c.ct_wr.data.count.eq(c.ct.count + 1),
                             c.ct_wr.data.cur_step.eq(cmd.step),
                             c.ct_wr.data.cur_n.eq(Mux(same & (c.ct.count != 0),
                                                       c.ct.cur_n + 1, 1))]
            low = cmd.owner[:c.cl_lg] if c.cl_lg else Const(0)   # the owner is in range
            with m.If(low >= c.n_clusters[ctx]):
                m.d.sync += c.n_clusters[ctx].eq(low + 1)
            m.d.sync += c.bid.eq(c.target)
            m.d.comb += self.ev.stored_tokens.eq(1)
            m.next = "S_C"
        self._table_read(m, "S_C", "S_C3")
        with m.State("S_C3"):
            be = c.bt_q
            m.d.comb += [c.bt_wr.addr.eq(c.bid), c.bt_wr.en.eq(1), c.bt_wr.data.eq(be),
                         c.bt_wr.data.fill.eq(be.fill + 1)]
            m.next = "IDLE"

    def _hc_off(self, c, head):
        """The offset from ``hc_base`` of the sums of ``head`` in the command's cluster
        record (or, listing candidates, in cluster ``c.ci``'s)."""
        rec = self._hpg * 4 * self._head_dim
        idx = Mux(c.cand_mode, self._index(c.ctx, c.ci), self._ctab_index(c))
        return mul_const(idx, rec) + mul_const(head, 4 * self._head_dim)

    def _k_lanes(self, m, c):
        """The K values (sign-extended) of the sums beat ``c.hi`` of head ``c.j`` (the record
        holds the heads' sums one after another; ``c.j`` moves on as ``c.hi`` wraps): read a
        beat ahead (for the beat it will be after this cycle) and registered, so the K
        buffer's read is not on the path from an R beat to its W beat."""
        lanes = self._bus_bytes // 4
        hi_next = Signal.like(c.hi, name="hi_next")
        j_next = Signal.like(c.j, name="j_next")
        kq = Signal(8 * lanes, name="kq")
        m.d.comb += [hi_next.eq(Mux(self.w_go, Mux(c.hi_wrap, 0, c.hi + 1), c.hi)),
                     j_next.eq(Mux(self.w_go & c.hi_wrap, c.j + 1, c.j)),
                     c.kb_rd.addr.eq(mul_const(j_next, c.kbeats) + (hi_next >> 2))]
        m.d.sync += kq.eq(c.kb_rd.data.word_select(hi_next[:2], 8 * lanes))
        return [kq[8 * k:8 * k + 8].as_signed() for k in range(lanes)]

    def _move_states(self, m, c):
        """One sequence for both read-modify-write jobs, burst by burst (AR, AW, then each R
        beat becomes a W beat as it arrives): an offload (``c.hc`` = 0) copies the victim's
        filled slots from near to far, per head of the group, and, only if every transfer
        answered OKAY, turns its entry far; the update of the sums (``c.hc`` = 1) adds the
        token's K rows to its cluster's record, every head's sums in one run of bursts (a
        round trip for the record, not one a head; a first member's is written without
        reading), and poisons the cluster if a transfer failed."""
        hbeats = 4 * self._head_dim // self._bus_bytes
        c.hi_wrap = c.hi == hbeats - 1
        k = self._k_lanes(m, c)
        with m.State("M_SETUP"):
            with m.If(c.hc):
                off = self._hc_off(c, 0)
                m.d.sync += [c.addr.eq(off), c.dst.eq(off), c.abase.eq(2), c.dbase.eq(2),
                             c.rem.eq(self._hpg * hbeats), c.hi.eq(0),
                             c.rd.eq(c.ct.count != 0)]
            with m.Else():
                m.d.sync += [c.addr.eq(c.block_off(c.alloc_slot, c.j)), c.abase.eq(0),
                             c.dst.eq(c.block_off(c.far_count, c.j)), c.dbase.eq(1),
                             c.rem.eq(c.vfill << c.bpt_lg), c.rd.eq(1)]
            m.d.sync += c.ret.eq(2)
            m.next = "ADD_BASE"
        with m.State("M_PICK"):
            m.d.sync += c.beats.eq(Mux(c.next_beats < c.next_dst_beats, c.next_beats,
                                       c.next_dst_beats))
            with m.If(c.rem == 0):
                m.next = "M_NEXT"
            with m.Elif(c.rd):
                m.next = "M_AR"
            with m.Else():
                m.next = "M_AW"
        beats = c.beats
        with m.State("M_AR"):
            m.d.comb += [self.araddr.eq(c.addr), self.arlen.eq(beats - 1),
                         self.arvalid.eq(1)]
            with m.If(self.ar_go):
                m.next = "M_AW"
        with m.State("M_AW"):
            m.d.comb += [self.awaddr.eq(c.dst), self.awlen.eq(beats - 1),
                         self.awvalid.eq(self.writes_out < self._max_writes)]
            with m.If(self.aw_go):
                m.d.sync += [c.wbeats.eq(beats), c.wi.eq(0)]
                m.next = "M_DATA"
        self._move_data(m, c, k)
        self._move_end(m, c)

    def _move_data(self, m, c, k):
        """Each R beat (or, for a first member's sums, nothing) becomes a W beat: the sums
        plus the token's K values, or the block's words as they are."""
        ev, lanes = self.ev, self._bus_bytes // 4
        with m.State("M_DATA"):
            old = [self.rdata[32 * i:32 * i + 32].as_signed() for i in range(lanes)]
            summed = Cat(*[Mux(c.rd, old[i] + k[i], k[i])[:32] for i in range(lanes)])
            m.d.comb += [self.wdata.eq(Mux(c.hc, summed, self.rdata)),
                         self.wlast.eq(c.wi == c.wbeats - 1),
                         self.wvalid.eq(~c.rd | self.rvalid), self.own_r.eq(c.rd),
                         self.rready.eq(c.rd & self.wready)]
            with m.If(self.w_go):
                m.d.sync += [c.wi.eq(c.wi + 1), c.hi.eq(Mux(c.hi_wrap, 0, c.hi + 1))]
                with m.If(c.hc):
                    m.d.comb += ev.hc_write_beats.eq(1)
                    with m.If(c.hi_wrap):
                        m.d.sync += c.j.eq(c.j + 1)         # the next head's sums
                    with m.If(c.rd):
                        m.d.comb += ev.hc_read_beats.eq(1)
                with m.Else():
                    self._count_beat(m, 0, write=False)
                    self._count_beat(m, 1, write=True)
                with m.If(c.rd & (self.rresp != 0)):
                    m.d.comb += ev.bus_errors.eq(1)
                    with m.If(~c.rerr):
                        m.d.sync += [c.rerr.eq(1), c.rerr_resp.eq(self.rresp),
                                     c.rerr_addr.eq(c.addr + (c.wi << c.bus_lg))]
                with m.If(c.wi == c.wbeats - 1):
                    m.d.sync += [c.addr.eq(c.addr + (c.wbeats << c.bus_lg)),
                                 c.dst.eq(c.dst + (c.wbeats << c.bus_lg)),
                                 c.rem.eq(c.rem - c.wbeats)]
                    m.next = "M_PICK"

    def _move_end(self, m, c):
        """The next head's move or the responses: the sums update commits (poisoning the
        cluster if a transfer failed); an offload turns the block far, or fails the store."""
        with m.State("M_NEXT"):
            with m.If(c.hc | (c.j == self._hpg - 1)):
                m.next = "M_B"
            with m.Else():
                m.d.sync += c.j.eq(c.j + 1)
                m.next = "M_SETUP"
        with m.State("M_B"):
            bad = c.rerr | self.b_err
            resp = Mux(c.rerr, c.rerr_resp, self.b_err_resp)
            where = Mux(c.rerr, c.rerr_addr, self.b_err_addr)
            with m.If(self.writes_out == 0):
                m.d.comb += self.b_clear.eq(1)
                with m.If(c.hc):
                    with m.If(bad):
                        self._fail(m, 10, resp, where)
                    m.d.sync += c.h_err.eq(bad)
                    m.next = "S_COMMIT"
                with m.Elif(bad):
                    self._fail(m, Mux(c.rerr, 6, 7), resp, where)
                    m.d.comb += self.ev.refused.eq(1)
                    m.d.sync += c.drain.eq(self._hpg * self.beats_per_token)
                    m.next = "DRAIN"
                with m.Else():
                    m.d.comb += [c.bt_wr.addr.eq(c.victim), c.bt_wr.en.eq(1),
                                 c.bt_wr.data.eq(c.be), c.bt_wr.data.far.eq(1),
                                 c.bt_wr.data.slot.eq(c.far_count)]
                    m.d.sync += c.far_count.eq(c.far_count + 1)
                    m.d.comb += self.ev.offloaded_blocks.eq(1)
                    m.next = "S_NEW"
