"""The attention engine's score packer: exp-unit words into the WTU's beats; and the score
side's end of a command."""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ...lib import copies
from .common import EngineShape, StateSignature

__all__ = ["ScorePacker"]


class ScorePacker(wiring.Component):
    """Exp-unit words (n entries, ``from_exp``) into WTU beats (``wtu_lanes`` entries, on
    ``scores``): several words gathered into one beat, or one word split into several, a row
    never sharing a beat. P words (light attention) are always taken here (the P writer has
    them; ``exp_sel``, a copy of ``is_score`` of its own, says so to the exp unit's
    ready). ``done``: the command's score side is through: a score command's rows all out; a
    light attention's last output row out (``attn_end``), a chunk of the maximum's pass once
    its row tile's exp pass is through (``p_ready0``), a chunk of the sums' pass that is not
    the final one once its P·V rows are in the sums (``out_done`` and ``pv_idle``).

    Latency: a gathered beat is out the cycle after its last word; a split word's beats
    leave one a cycle."""

    def __init__(self, shape: EngineShape, *, cmd_layout, exp_out_layout, score_layout):
        self._sh, self._score_layout = shape, score_layout
        super().__init__({
            "st": In(StateSignature(cmd_layout)),
            "is_score": In(1), "exp_sel": In(1),
            "from_exp": In(stream.Signature(exp_out_layout)),
            "scores": Out(stream.Signature(score_layout)),
            "attn_end": In(1), "p_ready0": In(1), "out_done": In(1), "pv_idle": In(1),
            "done": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n, L, st = self._sh.n, self._sh.wtu_lanes, self.st
        e_in, o = self.from_exp, self.scores
        ot = e_in.payload.tag
        valid_in = Signal()                      # an exp word for the packer
        ready_in = Signal()
        is_score = self.is_score
        m.d.comb += [valid_in.eq(e_in.valid & is_score),
                     e_in.ready.eq(Mux(self.exp_sel, ready_in, 1))]   # P words always taken
        entries = []
        for t in range(n):
            e = Signal(self._score_layout.members["entry"].elem_shape,
                       name=f"score_entry_{t}")
            m.d.comb += [e.score.eq(ot.score[t]),
                         e.weight.eq(Mux(ot.valid[t], e_in.payload.w[t], 0)),
                         e.count.eq(ot.count[t])]
            entries.append(e)
        if L >= n:
            self._gather(m, entries, valid_in, ready_in)
        else:
            self._split(m, entries, valid_in, ready_in)
        rows_out = Signal(16)
        with m.If(o.valid & o.ready & o.payload.last):
            m.d.sync += rows_out.eq(rows_out + 1)
        attn_done = Signal()
        with m.If(self.attn_end):
            m.d.sync += attn_done.eq(1)
        with m.If(~st.start):
            m.d.sync += [rows_out.eq(0), attn_done.eq(0)]
        attend_end = Mux(st.is_.part_max, self.p_ready0,
                         Mux(st.is_.absorb, self.out_done & self.pv_idle, attn_done))
        m.d.comb += self.done.eq(Mux(is_score, rows_out == st.cur.m,
                                     ~st.is_.attend | attend_end))
        return m

    def _gather(self, m, entries, valid_in, ready_in):
        """``wtu_lanes / n`` words a beat."""
        n, L, st = self._sh.n, self._sh.wtu_lanes, self.st
        o, ot = self.scores, self.from_exp.payload.tag
        g = L // n
        slot = Signal(range(g))
        asm = Signal(self._score_layout, name="score_asm")       # the beat being gathered
        can = Signal()
        m.d.comb += [can.eq(~o.valid | o.ready), ready_in.eq(can)]
        with m.If(o.valid & o.ready):
            m.d.sync += o.valid.eq(0)
        # the beat with the word in its slot: the slots before it from ``asm``, the ones after
        # it zero (``asm`` keeps whatever the last beat left there: clearing it with a beat's
        # last word had put the exp unit's ``last`` flag in front of all its registers' data,
        # routed 5.2 ns from the exp unit's queue: for the clock; the beats are the same)
        merged = Signal(self._score_layout, name="score_merged")
        for s_ in range(g):
            past = slot > s_ if s_ < g - 1 else None       # the slot is already filled
            for t in range(n):
                j = s_ * n + t
                keep = (lambda v, p=past: 0 if p is None else Mux(p, v, 0))
                m.d.comb += [
                    merged.entry[j].eq(Mux(slot == s_, entries[t].as_value(),
                                           keep(asm.entry[j].as_value()))),
                    merged.valid[j].eq(Mux(slot == s_, ot.valid[t], keep(asm.valid[j])))]
        m.d.comb += [merged.first.eq(Mux(slot == 0, ot.first, asm.first)),
                     merged.last.eq(ot.last), merged.head_last.eq(ot.head_last)]
        # o's payload loads with every word taken (while o is empty or being taken, so
        # nothing offered changes), o.valid only with a beat's last word: the payload's
        # enable does not wait for the slot's compare (for the clock)
        complete = Signal()
        m.d.comb += complete.eq(ot.last | (slot == g - 1))
        with m.If(valid_in & can):
            m.d.sync += asm.eq(merged)
            with m.If(complete):
                m.d.sync += [o.valid.eq(1), slot.eq(0)]
            with m.Else():
                m.d.sync += slot.eq(slot + 1)
        # o's payload loads whenever o is empty or being taken, with or without a word
        # (nothing offered changes; o.valid says whether it is a beat), under o.valid's
        # copies, one a lane and one for the framing (the exp unit's queue flag, through
        # the enable's LUT, had been routed 4.4 and 5.3 ns into 800 enables: for the
        # clock)
        ov_next = Signal(name="score_o_valid_next")
        m.d.comb += ov_next.eq(Mux(valid_in & can & complete, 1, o.valid & ~o.ready))
        ov = copies(m, ov_next, L + 1, "score_o_valid")
        for j in range(L):
            with m.If(~ov[j] | o.ready):
                m.d.sync += [o.payload.entry[j].eq(merged.entry[j]),
                             o.payload.valid[j].eq(merged.valid[j])]
        with m.If(~ov[L] | o.ready):
            m.d.sync += [o.payload.first.eq(merged.first), o.payload.last.eq(merged.last),
                         o.payload.head_last.eq(merged.head_last)]
        with m.If(~st.start):
            m.d.sync += [slot.eq(0), asm.eq(0)]

    def _split(self, m, entries, valid_in, ready_in):
        """A word into ``n / wtu_lanes`` beats, up to its last valid lane."""
        n, L, st = self._sh.n, self._sh.wtu_lanes, self.st
        o, ot = self.scores, self.from_exp.payload.tag
        g = n // L
        sub = Signal(range(g))
        final = Signal()
        nxt = Array(Cat(ot.valid[(s_ + 1) * L] if s_ + 1 < g else Const(0, 1))
                    for s_ in range(g))[sub]
        m.d.comb += final.eq(~nxt)
        for s_ in range(g):
            with m.If(sub == s_):
                for j in range(L):
                    m.d.comb += [o.payload.entry[j].eq(entries[s_ * L + j]),
                                 o.payload.valid[j].eq(ot.valid[s_ * L + j])]
        m.d.comb += [o.valid.eq(valid_in), o.payload.first.eq(ot.first & (sub == 0)),
                     o.payload.last.eq(ot.last & final),
                     o.payload.head_last.eq(ot.head_last & final),
                     ready_in.eq(o.ready & final)]
        with m.If(o.valid & o.ready):
            m.d.sync += sub.eq(Mux(final, 0, sub + 1))
        with m.If(~st.start):
            m.d.sync += sub.eq(0)
