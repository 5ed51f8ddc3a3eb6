"""The attention engine's score reader, and the score buffer's halves between the writer and
the reader."""
from __future__ import annotations

from amaranth.hdl import Array, Const, Module, Mux, Signal, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from ...lib import KEEP_COPY, stepped_counter
from .common import SPAN_BITS, TAKES, EngineShape, StateSignature, mem_addr, onehot_pick
from .outputs import OutHalfSignature

__all__ = ["ScoreReader", "ScoreHalves"]


class ScoreReader(wiring.Component):
    """A full half (``half_full``), word by word and row by row, into the exponential unit
    (``to_exp``): ``s - max`` for the real columns (``row_max``, ``row_lim``), with the
    scores, counts (``count_rd``) and row framing beside it. Two stages move together (one
    enable: f2 empty or taken): f1 holds the word's address-side fields while the memories
    read, f2 the words read (the score RAM's output register on the FPGA:
    synth/bram_outreg.py) and each column's flag, real or not; the subtraction runs from f2
    (it had run on the RAM's output, 5.6 ns after the clock, into the exp unit: for the
    clock). ``wrap``: the row tile's last word issued (the half ``ph`` is read; ``free``).

    Latency: two cycles from a word's issue to the exp unit's input; a word a cycle."""

    def __init__(self, shape: EngineShape, *, cmd_layout, exp_layout):
        self._sh = shape
        n, sb = shape.n, shape.score_bits
        pair = lambda s: In(data.ArrayLayout(data.ArrayLayout(s, n), 2))
        super().__init__({
            "st": In(StateSignature(cmd_layout)),
            "half_full": In(1),
            "row_max": pair(signed(sb)), "row_lim": pair(signed(SPAN_BITS + 2)),
            "score_rd": In(memory.ReadPort.Signature(addr_width=ceil_log2(2 * shape.b_rows),
                                                     shape=data.ArrayLayout(signed(sb), n))),
            "count_rd": In(memory.ReadPort.Signature(
                addr_width=ceil_log2(shape.bias_words),
                shape=data.ArrayLayout(signed(shape.acc_bits), n))),
            "to_exp": Out(stream.Signature(exp_layout)),
            "free": Out(2), "wrap": Out(1), "ph": Out(1),
        })

    def _position(self, m):
        """The word in the row (pj) and the row tile (ptile) count with their last-value
        flags in registers (``pj == lt`` and ``ptile == mt`` had been 16-bit compares in
        front of the issue's moves, the halves' flags and the counters' enables: for the
        clock); the row in the tile (pr) is its tile's last: row n - 1, or in the last tile
        row (m - 1) mod n, both compares' flags in registers (so that no compare sits in
        front of ``wrap`` and through it the halves' flags: for the clock)."""
        st, n = self.st, self._sh.n
        pjc = stepped_counter(m, "score_rd_word", 16, {"lt": st.m1.lt})
        ptc = stepped_counter(m, "score_rd_tile", 16, {"mt": st.m1.mt})
        pr_last = Signal(name="score_rd_row_last")
        prc = None
        if n > 1:
            prc = stepped_counter(m, "score_rd_row", exact_log2(n),
                                  {"n1": Const(n - 1, exact_log2(n)),
                                   "m": st.m1.m[:exact_log2(n)]})
            m.d.comb += pr_last.eq(prc.at["n1"] | ptc.at["mt"] & prc.at["m"])
        else:
            m.d.comb += pr_last.eq(1)
        return pjc, ptc, prc, pr_last

    def elaborate(self, platform):
        m = Module()
        sh, st, n, sb = self._sh, self.st, self._sh.n, self._sh.score_bits
        exp = self.to_exp
        ph = Signal()                            # the half being read
        pjc, ptc, prc, pr_last = self._position(m)
        pj, ptile, row_last = pjc.pos, ptc.pos, pjc.at["lt"]
        pr = prc.pos if prc is not None else Const(0, 1)
        # (ph, pr) one-hot, a bit a row of each half: the rows' maxima and limits are picked
        # by an AND-OR of these (a multiplexer by pr, a counter with many other loads, is too
        # slow for the clock)
        rsel = [[Signal(name=f"score_rd_sel_{h}_{r}", init=int(h == 0 and r == 0))
                 for r in range(n)] for h in range(2)]
        f1 = dict(valid=Signal(), col0=Signal(16), max=Signal(signed(sb)),
                  first=Signal(), last=Signal(), head_last=Signal(),
                  lim=Signal(signed(SPAN_BITS + 2)), row=Signal(range(n)), word=Signal(16),
                  tile_last=Signal(), half=Signal())
        advance, issue = Signal(), Signal()
        # ``~f2_valid`` in a register of its own for the issue, as in the feeder (the
        # enable's LUT, among its loads, had been routed 4.8 ns into the issue: for the
        # clock); ``half_full`` holds ``start`` too (ScoreHalves: ``start``, with its wide
        # fan-out, had been routed through the issue and ``wrap`` into the halves' flags)
        f2_valid = Signal()
        f2_empty = Signal(init=1, name="score_f2_empty")
        m.d.comb += [advance.eq(~f2_valid | exp.ready),
                     issue.eq((f2_empty | exp.ready) & self.half_full)]
        m.d.comb += [self.score_rd.addr.eq(mem_addr(mem_addr(ph, pr, n), pj, sh.row_words)),
                     self.score_rd.en.eq(advance),
                     self.count_rd.addr.eq(pj), self.count_rd.en.eq(advance)]
        sel = lambda v: [[v[h][r] for r in range(n)] for h in range(2)]
        with m.If(advance):
            m.d.sync += [f1["valid"].eq(issue), f1["col0"].eq(pj << exact_log2(n)),
                         f1["max"].eq(onehot_pick(rsel, sel(self.row_max))),
                         f1["lim"].eq(onehot_pick(rsel, sel(self.row_lim))),
                         f1["row"].eq(pr), f1["word"].eq(pj), f1["half"].eq(ph),
                         f1["tile_last"].eq(row_last & pr_last),
                         f1["first"].eq(pj == 0), f1["last"].eq(row_last),
                         f1["head_last"].eq(row_last &
                                            ((ptile << exact_log2(n)) + pr == st.m1.m))]
        wrap = Signal(name="score_rd_wrap")
        m.d.comb += [wrap.eq(issue & row_last & pr_last), self.wrap.eq(wrap), self.ph.eq(ph)]
        m.d.comb += [pjc.zero.eq(~st.start | issue & row_last), pjc.inc.eq(issue),
                     ptc.zero.eq(~st.start), ptc.inc.eq(wrap)]
        if prc is not None:
            m.d.comb += [prc.zero.eq(~st.start | wrap), prc.inc.eq(issue & row_last)]
        with m.If(issue & row_last):
            with m.If(pr_last):
                m.d.sync += ph.eq(~ph)
                m.d.sync += [rsel[h][r].eq((r == 0) & (ph != h))
                             for h in range(2) for r in range(n)]
            with m.Else():
                m.d.sync += [rsel[h][r].eq(rsel[h][r - 1] if r else 0)
                             for h in range(2) for r in range(n)]
        for h in range(2):
            m.d.comb += self.free[h].eq(wrap & (ph == h))
        self._f2(m, advance, f1, f2_valid, f2_empty)
        with m.If(~st.start):
            m.d.sync += [ph.eq(0), f1["valid"].eq(0), f2_valid.eq(0), f2_empty.eq(1)]
            m.d.sync += [rsel[h][r].eq((h == 0) & (r == 0)) for h in range(2) for r in range(n)]
        return m

    def _f2(self, m, advance, f1, f2_valid, f2_empty):
        """f2: the words read and each column's flag, and the exp unit's input from them."""
        n, sb = self._sh.n, self._sh.score_bits
        exp = self.to_exp
        f2 = dict(max=Signal(signed(sb)), first=Signal(), last=Signal(), head_last=Signal(),
                  row=Signal(range(n)), word=Signal(16), tile_last=Signal(), half=Signal())
        f2_real = [Signal(name=f"score_f2_real_{t}") for t in range(n)]
        f2_score = [Signal(signed(sb), name=f"score_f2_s_{t}", reset_less=True)
                    for t in range(n)]
        f2_count = [Signal.like(self.count_rd.data[t], name=f"score_f2_count_{t}",
                                reset_less=True) for t in range(n)]
        with m.If(advance):
            m.d.sync += [f2_valid.eq(f1["valid"]), f2_empty.eq(~f1["valid"]),
                         *(f2[k].eq(f1[k]) for k in f2)]
            for t in range(n):
                m.d.sync += [f2_real[t].eq(f1["col0"] + t < f1["lim"]),
                             f2_score[t].eq(self.score_rd.data[t]),
                             f2_count[t].eq(self.count_rd.data[t])]
        tag = exp.payload.tag
        for t in range(n):
            real = f2_real[t]
            m.d.comb += [exp.payload.x[t].eq(Mux(real, f2_score[t] - f2["max"], 0)),
                         tag.score[t].eq(Mux(real, f2_score[t], 0)),
                         tag.count[t].eq(Mux(real, f2_count[t], 0)),
                         tag.valid[t].eq(real)]
        m.d.comb += [exp.valid.eq(f2_valid), tag.first.eq(f2["first"]),
                     tag.last.eq(f2["last"]), tag.head_last.eq(f2["head_last"]),
                     tag.row.eq(f2["row"]), tag.word.eq(f2["word"]),
                     tag.tile_last.eq(f2["tile_last"]), tag.half.eq(f2["half"])]


class ScoreHalves(wiring.Component):
    """The score buffer's halves: full once the array's output has written a row tile's last
    column tile into one (``fill``), free again once the reader has issued its last word
    (``free``). The array's output and the reader each see their own half's flag in a
    register (``out_free`` with :data:`TAKES` copies ``out_free_copy``, ``rd_full``), set
    from the flags' next values and the half each will be at next cycle (the flags had been
    read through a multiplexer by the half in front of the array's ready, whose take loads
    the output's counters and the hash stage's 2n words, and in front of the reader's issue:
    for the clock; cycle for cycle the same). The reader's flag is also ANDed with
    ``start``'s next value, so its issue needs no ``start`` of its own.

    Latency: a flag moves the cycle after its fill or free."""

    def __init__(self, *, cmd_layout):
        super().__init__({
            "st": In(StateSignature(cmd_layout)),
            "fill": In(2), "free": In(2), "wrap": In(1), "ph": In(1),
            "out_half": In(OutHalfSignature()),
            "out_free": Out(1, init=1), "out_free_copy": Out(len(TAKES), init=(1 << len(TAKES)) - 1),
            "rd_full": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        st = self.st
        full = [Signal(name=f"score_full_{h}") for h in range(2)]
        full_next = [Signal(name=f"score_full_next_{h}") for h in range(2)]
        for h in range(2):
            m.d.comb += full_next[h].eq(full[h])
            with m.If(self.fill[h]):
                m.d.comb += full_next[h].eq(1)
            with m.Elif(self.free[h] | ~st.start):
                m.d.comb += full_next[h].eq(0)
            m.d.sync += full[h].eq(full_next[h])
        # The two flags below are worked out for each value of the reader's ``wrap`` (its
        # last word of a row tile issued: it frees its half and moves to the other), which
        # picks between them last (it had run through the free flags, the next values and
        # the multiplexer by the half: for the clock). The output's flag: each half it may
        # be at next cycle looked up, the one it will be at chosen after (the output's
        # take, through every kind's ready and the P·V job flag, had run in front of the
        # lookup: for the clock).
        hs = self.out_half
        out_free, rd_full = [], []
        for w in (0, 1):
            fn = [Signal(name=f"score_full_next_w{w}_{h}") for h in range(2)]
            for h in range(2):
                m.d.comb += fn[h].eq(Mux(self.fill[h], 1,
                                         Mux(w & (self.ph == h) | ~st.start, 0, full[h])))
            free = {k: ~Array(fn)[getattr(hs, k)] for k in ("stay", "move", "zero")}
            out_free.append(Mux(~st.start, free["zero"],
                                Mux(hs.moves, free["move"], free["stay"])))
            rd_full.append(Array(fn)[Mux(st.start, self.ph ^ w, 0)])
        half_free = Mux(self.wrap, out_free[1], out_free[0])
        # the output's flag, in copies, one for each of the score take's copies (the score
        # writer) beside the one the output's ready reads
        reg = Signal(init=1, name="score_out_half_free")
        reg_c = [Signal(init=1, name=f"score_out_half_free_{g}", attrs=KEEP_COPY)
                 for g in TAKES]
        rd = Signal(name="score_rd_half_full")
        m.d.sync += [reg.eq(half_free), *(c.eq(half_free) for c in reg_c),
                     rd.eq(Mux(self.wrap, rd_full[1], rd_full[0]) & st.start_next)]
        m.d.comb += [self.out_free.eq(reg), self.rd_full.eq(rd),
                     *(self.out_free_copy[j].eq(c) for j, c in enumerate(reg_c))]
        return m
