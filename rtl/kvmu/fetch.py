"""The KVMU sequencer's fetch and candidate-list states (a mixin of
:class:`.control.KvmuControl`)."""
from __future__ import annotations

from amaranth.hdl import Mux

__all__ = ["FetchStates"]


def _past(entry, step):
    """A cluster-table entry's members from steps before ``step`` (those of its last step
    ``cur_step`` are its last ``cur_n``)."""
    return entry.count - Mux(entry.cur_step == step, entry.cur_n, 0)


class FetchStates:
    """A fetch walks its cluster's blocks and asks for their bursts (the delivery returns
    the beats); a candidate list visits every cluster of its (layer, group)."""

    def _refuse_fetch(self, m, c):
        m.d.sync += c.fetch_err.eq(1)
        with m.If(c.cmd.first):
            m.d.sync += c.fetch_drop.eq(0)
        m.next = "F_DONE"

    def _fetch_states(self, m, c):
        cmd, ev = c.cmd, self.ev
        with m.State("F_MAP"):
            with m.If(c.idx_bad):
                self._fail(m, 1)
                m.d.comb += ev.refused.eq(1)
                self._refuse_fetch(m, c)
            with m.Else():
                m.next = "F_MAP2"
        with m.State("F_MAP2"):
            m.d.sync += cmd.owner.eq(c.cm_rd.data)
            m.next = "F_MAP3"
        with m.State("F_MAP3"):
            m.next = "F_START"
        with m.State("F_START"):       # the cluster entry and the layer's newest version
            m.d.sync += [c.ct.eq(c.ct_rd.data), c.seen.eq(self.seen), c.newest.eq(self.newest)]
            m.next = "F_CHECK"
        with m.State("F_CHECK"):
            stale = c.seen & (cmd.version < c.newest)
            drop = Mux(cmd.first, stale, c.fetch_drop)
            with m.If(cmd.first):
                m.d.sync += [c.fetch_drop.eq(stale), c.fetch_err.eq(0)]
                with m.If(stale):
                    m.d.comb += ev.stale_dropped.eq(1)
            with m.If(drop):
                m.next = "F_DONE"
            with m.Else():
                m.d.comb += ev.fetched_clusters.eq(1)
                # ``past``: the members from steps before ``step`` only, the chain's first
                # ones (a poisoned cluster's count stopped: all of them)
                m.d.sync += [c.flim.eq(_past(c.ct, cmd.step)),
                             c.flim_on.eq(cmd.past & ~c.ct.poisoned)]
                with m.If(c.ct.valid):
                    m.d.sync += c.bid.eq(c.ct.head)
                    m.next = "F_BT"
                with m.Else():
                    m.next = "F_DONE"
        self._table_read(m, "F_BT", "F_BT3")
        with m.State("F_BT3"):
            be = c.bt_q
            cut = c.flim_on & (c.flim < be.fill)
            take = Mux(cut, c.flim, be.fill)
            m.d.sync += [c.be.eq(be), c.off.eq(0), c.rem.eq(take << c.bpt_lg),
                         c.flim.eq(c.flim - take)]
            with m.If(take != 0):
                m.next = "F_OFF"
            with m.Elif(be.has_next & ~cut):
                m.d.sync += c.bid.eq(be.next)
                m.next = "F_BT"
            with m.Else():
                m.next = "F_DONE"
        with m.State("F_OFF"):
            m.d.sync += [c.addr.eq(c.block_off(c.be.slot, cmd.head)), c.abase.eq(c.be.far),
                         c.ret.eq(0)]
            m.next = "ADD_BASE"
        self._fetch_bursts(m, c)

    def _fetch_bursts(self, m, c):
        """A block's bursts (F_AR), then the next block, or the fetch's end beat (F_DONE)."""
        cmd, q = c.cmd, self.rq_desc
        with m.State("F_AR"):
            beats = c.beats
            room = (self.reads_out < self._max_reads) & self.rq_rdy
            m.d.comb += [self.araddr.eq(c.addr), self.arlen.eq(beats - 1),
                         self.arvalid.eq(room),
                         q.far.eq(c.be.far), q.bid.eq(c.bid), q.off.eq(c.off),
                         q.beats.eq(beats), q.addr.eq(c.addr), self.rq_valid.eq(self.ar_go)]
            with m.If(self.ar_go):
                m.d.sync += [c.addr.eq(c.addr + (beats << c.bus_lg)), c.rem.eq(c.rem - beats),
                             c.off.eq(c.off + beats)]
                with m.If(c.rem == beats):
                    with m.If(c.be.has_next & ~(c.flim_on & (c.flim == 0))):
                        m.d.sync += c.bid.eq(c.be.next)
                        m.next = "F_BT"
                    with m.Else():
                        m.next = "F_DONE"
                with m.Else():
                    m.next = "LEN"
        with m.State("F_DONE"):
            with m.If(cmd.last):
                m.d.comb += [q.end.eq(1), q.stale.eq(c.fetch_drop), q.err.eq(c.fetch_err),
                             self.rq_valid.eq(1)]
                with m.If(self.rq_rdy):
                    m.d.sync += [c.fetch_drop.eq(0), c.fetch_err.eq(0)]
                    m.next = "IDLE"
            with m.Else():
                m.next = "IDLE"

    def _cand_states(self, m, c):
        """The candidate list of (layer, group) at ``step`` for one head: every cluster with
        past members, in id order (``counts``: one beat each with its past count, no key),
        with its representative key (``round_div(sum, count)``, :class:`.keys.KvmuKeys`)
        and its past count, on ``o_cand``; closed by an ``end`` beat holding the number of
        candidates. The sums' reads are issued while earlier ones are divided, up to
        ``max_reads`` bursts outstanding."""
        cmd, ev = c.cmd, self.ev
        hbeats = 4 * self._head_dim // self._bus_bytes
        cb = self._count_bits
        cnt, past = c.cand_cnt, c.cand_past
        with m.State("C_WAIT"):
            with m.If((self.reads_out == 0) & self.delivery_idle):
                m.d.sync += [c.cand_mode.eq(1), c.ci.eq(0), c.ncand.eq(0), c.h_err.eq(0),
                             c.rx.eq(~cmd.counts)]
                m.next = "C_RD"
        with m.State("C_RD"):
            with m.If(c.ci == c.n_clusters[c.ctx]):
                m.next = "C_DRAIN"
            with m.Else():
                m.next = "C_CHK"
        with m.State("C_CHK"):
            m.d.sync += c.ct.eq(c.ct_rd.data)
            m.next = "C_CHK2"
        with m.State("C_CHK2"):
            # the entry's past members (and whether it is a candidate) registered, then used
            e = c.ct
            pst = _past(e, cmd.step)
            m.d.sync += [cnt.eq(e.count), past.eq(pst),
                         c.cand_ok.eq(e.valid & ~e.poisoned & (pst[:cb] != 0))]
            m.next = "C_CHK3"
        with m.State("C_CHK3"):
            with m.If(c.cand_ok):
                m.d.comb += [c.cm_wr.addr.eq(self._index(c.ctx, c.ncand)),
                             c.cm_wr.data.eq(c.ci), c.cm_wr.en.eq(1)]
                m.d.sync += c.ncand.eq(c.ncand + 1)
                m.d.comb += ev.candidates.eq(1)
                with m.If(cmd.counts):
                    m.next = "C_COUNT"
                with m.Else():
                    m.d.sync += [c.rem.eq(hbeats), c.addr.eq(self._hc_off(c, cmd.head)),
                                 c.abase.eq(2), c.ret.eq(3)]
                    m.next = "ADD_BASE"
            with m.Else():
                m.d.sync += c.ci.eq(c.ci + 1)
                m.next = "C_RD"
        self._cand_bursts(m, c)

    def _cand_bursts(self, m, c):
        """A candidate's sums asked for (C_AR; the candidate pushed to the dividers with its
        first burst), a counts-only beat (C_COUNT), the list's end (C_END; C_BAD for a
        refused command, a cycle after C_REFUSED so that the sticky error is up when the
        list's end is seen and a reader can tell the refusal from a lost cluster)."""
        hbeats = 4 * self._head_dim // self._bus_bytes
        beats, o = c.beats, self.cand
        with m.State("C_AR"):
            # the ready-valid rule: once raised, arvalid stays until taken (only this state's
            # own AR fills reads_out and the candidate FIFO)
            room = (self.reads_out < self._max_reads) & self.cq_rdy
            m.d.comb += [self.araddr.eq(c.addr), self.arlen.eq(beats - 1),
                         self.arvalid.eq(room)]
            with m.If(self.ar_go):
                with m.If(c.rem == hbeats):
                    m.d.comb += [self.cq_valid.eq(1), self.cq.ci.eq(c.ci),
                                 self.cq.cnt.eq(c.cand_cnt), self.cq.past.eq(c.cand_past),
                                 self.cq.addr.eq(c.addr)]
                with m.If(c.rem == beats):
                    m.d.sync += c.ci.eq(c.ci + 1)
                    m.next = "C_RD"
                with m.Else():
                    m.d.sync += [c.addr.eq(c.addr + (beats << c.bus_lg)),
                                 c.rem.eq(c.rem - beats)]
                    m.next = "LEN"
        with m.State("C_COUNT"):
            # a counts-only list: one beat a candidate, no key read
            m.d.comb += [self.cand_valid.eq(1), o.data.eq(0), o.cluster.eq(c.ci),
                         o.count.eq(c.cand_past), o.first.eq(1)]
            with m.If(self.cand_ready):
                m.d.sync += c.ci.eq(c.ci + 1)
                m.next = "C_RD"
        with m.State("C_DRAIN"):
            with m.If(self.keys_idle & (self.reads_out == 0)):
                m.d.sync += c.rx.eq(0)
                m.next = "C_END"
        with m.State("C_END"):
            m.d.comb += [self.cand_valid.eq(1), o.end.eq(1), o.first.eq(0), o.data.eq(0),
                         o.cluster.eq(0), o.count.eq(c.ncand), o.error.eq(c.h_err)]
            with m.If(self.cand_ready):
                m.d.sync += [c.n_cand[c.ctx].eq(c.ncand), c.cand_mode.eq(0)]
                m.next = "IDLE"
        with m.State("C_REFUSED"):
            m.next = "C_BAD"
        with m.State("C_BAD"):
            m.d.comb += [self.cand_valid.eq(1), o.end.eq(1), o.first.eq(0), o.data.eq(0),
                         o.cluster.eq(0), o.count.eq(0), o.error.eq(1)]
            with m.If(self.cand_ready):
                m.next = "IDLE"
