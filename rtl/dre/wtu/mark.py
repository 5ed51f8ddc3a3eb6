"""The WTU's marker: each walked row's marks ORed into its head's union, and the union
emitted at the head's end."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from ...lib import reduce_tree, register
from .common import bank_word, wrap

__all__ = ["WtuMark"]


class WtuMark(wiring.Component):
    """CLEAR (after reset: the union memory zeroed, ``D`` cycles), then per row, in the
    banks' order: its marks (the entries whose bucket code is at most its exit, from its
    bank of the code memory, ``codes``) ORed into the union (MARK, a word a cycle); at a
    head's last row, the union emitted on ``o_sel`` as ascending candidate indices and one
    closing beat with the head's count, and cleared on the way (E_READ, E_WAIT, E_LOAD,
    E_BITS, E_SUM).

    Timing: a row of ``nb`` words marks in ``nb + 1`` cycles (2 for a row that marks
    nothing); a head's emission takes 4 cycles a union word touched, one a selected id,
    plus 2, ``o_sel`` ready. ``free`` (a cycle long) gives the row's bank back."""

    def __init__(self, *, lanes: int, D: int, P: int, banks: int, code_bits: int, mark,
                 out_layout, row_entries: int, counter_bits: int):
        self._N, self._D, self._P, self._NB, self._entries = lanes, D, P, banks, row_entries
        super().__init__({
            "codes": In(memory.ReadPort.Signature(
                addr_width=ceil_log2(banks * D), shape=data.ArrayLayout(code_bits, lanes))),
            "m_bank": Out(range(banks)), "m_bank1": Out(range(banks), init=1 % banks),
            "cur": In(mark), "cur_left": In(range(D + 1)), "cur_one": In(1),
            "full_now": In(1), "none_now": In(1), "full_next": In(1), "none_next": In(1),
            "free": Out(1),
            "o_sel": Out(stream.Signature(out_layout)),
            "busy": Out(1), "stalled": Out(counter_bits),
        })

    def elaborate(self, platform):
        m = Module()
        N, D = self._N, self._D
        m.submodules.unimem = unimem = memory.Memory(shape=N, depth=D, init=[],
                                                     attrs={"no_rw_check": 1})
        uni_wr, uni_rd = unimem.write_port(), unimem.read_port()
        r = _Marker(self, m, uni_wr, uni_rd)
        with m.FSM(name="mark", init="CLEAR"):
            with m.State("CLEAR"):
                m.d.comb += [uni_wr.addr.eq(r.clr), uni_wr.en.eq(1)]
                m.d.sync += r.clr.eq(r.clr + 1)
                with m.If(r.clr == D - 1):
                    m.next = "IDLE"
            self._mark_states(m, r)
            self._emit_states(m, r, uni_wr)
        # the marked word back, two cycles after its read (never in a cycle the states
        # above write: CLEAR ends before the first read, E_LOAD comes after the last write)
        with m.If(r.m2_valid):
            m.d.comb += [uni_wr.addr.eq(r.m2_addr), uni_wr.en.eq(1)]
        return m

    def _mark_states(self, m, r):
        with m.State("IDLE"):
            # the row's fields and its first words are taken whether or not its slot is
            # full yet (the reads change nothing), so only the state and ``m1_valid`` wait
            # for the slot's flag
            cur = self.cur
            m.d.sync += [r.m_exit.eq(cur.exit), r.m_stored.eq(cur.stored),
                         r.m_left.eq(self.cur_left), r.m_one.eq(self.cur_one),
                         r.m_over.eq(cur.overflow), r.m_head_last.eq(cur.head_last)]
            with m.If(r.cur_full):
                r.read()
                m.d.sync += r.m1_valid.eq(~r.cur_none)
                m.next = "MARK"
        with m.State("MARK"):
            m.d.comb += self.busy.eq(1)
            with m.If(~r.m_one):
                r.read()
                m.d.sync += [r.m_left.eq(r.m_left - 1), r.m_one.eq(r.m_left == 1)]
            with m.Else():
                r.row_end()

    def _emit_states(self, m, r, uni_wr):
        N, o = self._N, self.o_sel
        with m.State("E_READ"):
            m.d.comb += [self.busy.eq(1), r.rd_addr.eq(r.e_w)]
            with m.If(r.e_w >= r.hwm):
                m.next = "E_SUM"
            with m.Else():
                m.next = "E_WAIT"
        with m.State("E_WAIT"):                       # (the read's register)
            m.d.comb += self.busy.eq(1)
            m.next = "E_LOAD"
        with m.State("E_LOAD"):
            m.d.comb += self.busy.eq(1)
            m.d.sync += [r.wbits.eq(r.uni_now), r.wnone.eq(r.uni_now == 0)]
            m.d.comb += [uni_wr.addr.eq(r.e_w), uni_wr.en.eq(1)]
            m.next = "E_BITS"
        with m.State("E_BITS"):
            m.d.comb += self.busy.eq(1)
            with m.If(r.wnone):
                m.d.sync += r.e_w.eq(r.e_w + 1)
                m.next = "E_READ"
            with m.Else():
                cluster = o.payload.cluster
                m.d.comb += [o.valid.eq(1),
                             cluster.eq(Cat(r.low_idx, r.e_w)[:len(cluster)]
                                        if N > 1 else r.e_w),
                             o.payload.count.eq(r.n_sel + 1)]
                with m.If(o.ready):
                    m.d.sync += [r.wbits.eq(r.wbits & ~r.lowest),
                                 r.wnone.eq(r.wbits == r.lowest), r.n_sel.eq(r.n_sel + 1)]
                with m.Else():
                    m.d.sync += self.stalled.eq(self.stalled + 1)
        with m.State("E_SUM"):
            m.d.comb += [self.busy.eq(1), o.valid.eq(1), o.payload.last.eq(1),
                         o.payload.count.eq(r.n_sel)]
            with m.If(o.ready):
                m.d.sync += r.hwm.eq(0)
                m.next = "IDLE"
            with m.Else():
                m.d.sync += self.stalled.eq(self.stalled + 1)


class _Marker:
    """The marker's registers and datapath, made once and read by its states."""

    def __init__(self, mark: WtuMark, m, uni_wr, uni_rd):
        N, D, P, NB = mark._N, mark._D, mark._P, mark._NB
        code_rd = mark.codes
        self.m, self.mark = m, mark
        # whether m_bank's slot holds a row and whether that row marks nothing, as flags
        # formed a cycle ahead (for m_bank, or for m_bank1 when a row ends: ``ending``) from
        # the slots and the push register, so the marker's state decode starts from them
        self.cur_full, self.cur_none, self.ending = Signal(), Signal(), Signal()
        m.d.sync += [self.cur_full.eq(Mux(self.ending, mark.full_next, mark.full_now)),
                     self.cur_none.eq(Mux(self.ending, mark.none_next, mark.none_now))]
        self.mw = Signal(range(D + 1))         # the word the marker reads next
        self.m1_valid, self.m1_addr = Signal(), Signal(range(D))
        self.clr = Signal(range(D + 1))
        self.hwm = Signal(range(D + 1))        # union words touched by this head
        self.e_w = Signal(range(D + 1))
        self.wbits = Signal(N)
        self.wnone = Signal()                  # wbits == 0, a flag set with wbits
        self.n_sel = Signal(ceil_log2(mark._entries + 1) + 1)
        self.lowest = Signal(N)
        m.d.comb += self.lowest.eq(self.wbits & (~self.wbits + 1))
        self.low_idx = Signal(max(1, exact_log2(N)))
        m.d.comb += self.low_idx.eq(
            reduce_tree(m, [Mux(self.lowest[j], j, 0) for j in range(N)],
                        lambda a, b: a | b, "e_idx") if N > 1 else 0)
        # the row being marked, taken from its slot when the marker starts it (IDLE), so
        # MARK and the row's end work from flip-flops, not through the slots' multiplexer:
        # its exit, words, words still to read after this one (none: a flag beside the
        # count), whether it overflowed and whether it ends its head
        self.m_exit, self.m_stored = Signal(range(P + 1)), Signal(range(D + 1))
        self.m_left, self.m_one = Signal(range(D + 1)), Signal()
        self.m_over, self.m_head_last = Signal(), Signal()
        # both memories' reads registered (the block RAMs' own output registers on an
        # FPGA: no enable or reset), so a word read in cycle t is marked and written back in
        # t + 2 (m2); a read in the cycle the marker writes the same word (the previous
        # row's last one, or the emission's first read after a head's last row) takes the
        # written word instead (``byp``; what the block RAM returns then does not matter):
        # ``uni_now`` is the word as of the read
        code_q = Signal.like(code_rd.data, name="code_q", reset_less=True)
        uni_q = Signal.like(uni_rd.data, name="uni_q", reset_less=True)
        m.d.sync += [code_q.eq(code_rd.data), uni_q.eq(uni_rd.data)]
        self.m2_valid, self.m2_addr = register(m, [self.m1_valid, self.m1_addr], "m2")
        self.rd_addr = Signal(range(D))        # the union word read this cycle
        m.d.comb += uni_rd.addr.eq(self.rd_addr)
        rd_addr_r, wr_en_r, wr_addr_r, wr_data_r = register(
            m, [self.rd_addr, uni_wr.en, uni_wr.addr, uni_wr.data], "m_rw")
        hit = wr_en_r & (wr_addr_r == rd_addr_r)
        byp, byp_data = register(m, [hit, wr_data_r], "byp")
        self.uni_now = Signal(N)
        m.d.comb += self.uni_now.eq(Mux(byp, byp_data, uni_q))
        marks = Signal(N)
        m.d.comb += marks.eq(Cat(code_q[j] <= self.m_exit for j in range(N)))
        # the marked word written back, ``m2_valid ? uni_now | marks : 0``, as an OR of
        # terms each gated by flags formed a cycle ahead (the read's own bits kept when no
        # bypass, the bypassed word's, the marks), so the block RAM's output reaches the
        # write data through one gate, and the other writes (CLEAR, E_LOAD: 0, never with
        # m2_valid) need no multiplexer
        keep_q, byp_m = register(m, [self.m1_valid & ~hit,
                                     Mux(self.m1_valid & hit, wr_data_r, 0)], "m2_rw")
        m.d.comb += uni_wr.data.eq((uni_q & keep_q.replicate(N)) | byp_m |
                                   (marks & self.m2_valid.replicate(N)))
        m.d.sync += self.m1_valid.eq(0)
        # the marker reads word ``mw`` of its bank in every cycle (0 while IDLE: the next
        # row's first), so the reads' addresses come from registers, not from the state; a
        # read counts (``m1_valid``) only where the states say
        m.d.comb += [code_rd.addr.eq(bank_word(mark.m_bank, self.mw, D)),
                     self.rd_addr.eq(self.mw)]
        self._banks = NB

    def read(self):
        self.m.d.sync += [self.m1_valid.eq(1), self.m1_addr.eq(self.mw),
                          self.mw.eq(self.mw + 1)]

    def row_end(self):
        """The row marked: its bank given back, the next bank's row next (or the head's
        emission after its last row)."""
        m, mark = self.m, self.mark
        m.d.comb += [mark.free.eq(1), self.ending.eq(1)]
        m.d.sync += [self.mw.eq(0), mark.m_bank.eq(mark.m_bank1),
                     mark.m_bank1.eq(wrap(mark.m_bank1, self._banks))]
        with m.If(~self.m_over & (self.m_stored > self.hwm)):  # (hwm changes only here
            m.d.sync += self.hwm.eq(self.m_stored)              # and at E_SUM)
        with m.If(self.m_head_last):
            m.d.sync += [self.e_w.eq(0), self.n_sel.eq(0)]
            m.next = "E_READ"
        with m.Else():
            m.next = "IDLE"
