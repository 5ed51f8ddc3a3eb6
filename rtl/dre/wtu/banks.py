"""The WTU's hand-off between the walk and the marker: a slot per code bank."""
from __future__ import annotations

from amaranth.hdl import Array, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .common import PushSignature

__all__ = ["WtuBanks"]


class WtuBanks(wiring.Component):
    """One slot per code bank: the row the walk pushed into the bank (``push``, into its slot
    a cycle later, through a decoder from flip-flops: the decisions' and the take's logic
    stays out of the slots' inputs), with what the marker starts a row from, formed as the
    slot is written (the words after the first it reads and whether there are none; whether
    it reads none: a skipped row); ``free`` empties the marker's bank (``m_bank``) as it
    finishes the row.

    Read ports: the walk's release reads the words of banks ``rp`` and ``rp1``; the marker
    reads bank ``m_bank`` (``cur`` and the start values) and whether banks ``m_bank`` and
    ``m_bank1`` are full and mark nothing. Where the bank is pushed in the same cycle, the
    release's words and the marker's flags come from the push register."""

    def __init__(self, *, mark, banks: int, D: int, P: int):
        self._NB, self._D, self._P, self._mark = banks, D, P, mark
        super().__init__({
            "push": In(PushSignature(mark, banks, D)),
            "free": In(1),
            "rp": In(range(banks)), "rp1": In(range(banks)),
            "rp_stored": Out(range(D + 1)), "rp_m1": Out(range(D)),
            "rp1_stored": Out(range(D + 1)), "rp1_m1": Out(range(D)),
            "m_bank": In(range(banks)), "m_bank1": In(range(banks)),
            "cur": Out(mark), "cur_left": Out(range(D + 1)), "cur_one": Out(1),
            "full_now": Out(1), "none_now": Out(1),          # m_bank's, as of the push
            "full_next": Out(1), "none_next": Out(1),        # m_bank1's
            "any_full": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        NB, D, P, p = self._NB, self._D, self._P, self.push
        slot = Array(Signal(self._mark, name=f"slot_{b}") for b in range(NB))
        slot_left = Array(Signal(range(D + 1), name=f"slot_left_{b}") for b in range(NB))
        slot_one = Array(Signal(name=f"slot_one_{b}") for b in range(NB))
        slot_none = Array(Signal(name=f"slot_none_{b}") for b in range(NB))
        slot_m1 = Array(Signal(range(D), name=f"slot_m1_{b}") for b in range(NB))  # stored-1
        slot_full = Signal(NB)
        pushing = lambda b: p.valid & (p.bank == b)
        for b in range(NB):
            with m.If(pushing(b)):
                none = p.rec.exit == P
                m.d.sync += [slot[b].eq(p.rec), slot_full[b].eq(1), slot_none[b].eq(none),
                             slot_left[b].eq(Mux(none, 0, p.m1)),
                             slot_one[b].eq(none | (p.rec.stored == 1)),
                             slot_m1[b].eq(p.m1)]
        with m.If(self.free):
            m.d.sync += slot_full.bit_select(self.m_bank, 1).eq(0)
        for b, stored, m1 in ((self.rp, self.rp_stored, self.rp_m1),
                              (self.rp1, self.rp1_stored, self.rp1_m1)):
            now = pushing(b)
            m.d.comb += [stored.eq(Mux(now, p.rec.stored, slot[b].stored)),
                         m1.eq(Mux(now, p.m1, slot_m1[b]))]
        for b, full, none in ((self.m_bank, self.full_now, self.none_now),
                              (self.m_bank1, self.full_next, self.none_next)):
            now = pushing(b)
            m.d.comb += [full.eq(slot_full.bit_select(b, 1) | now),
                         none.eq(Mux(now, p.rec.exit == P, slot_none[b]))]
        m.d.comb += [self.cur.eq(slot[self.m_bank]), self.cur_left.eq(slot_left[self.m_bank]),
                     self.cur_one.eq(slot_one[self.m_bank]), self.any_full.eq(slot_full.any())]
        return m
