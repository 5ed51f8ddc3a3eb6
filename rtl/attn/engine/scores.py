"""The attention engine's score writer: score rows into the score buffer, each row's limit
and running maximum."""
from __future__ import annotations

from amaranth.hdl import Const, Module, Mux, Signal, signed
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from ...lib import copies, reduce_tree, register
from .common import SPAN_BITS, TAKES, EngineShape, StateSignature, mem_addr

__all__ = ["ScoreWriter"]


def _pair_layout(shape_, n):
    return data.ArrayLayout(data.ArrayLayout(shape_, n), 2)


class ScoreWriter(wiring.Component):
    """Score rows from the array (``beat``) into the free half of the score buffer
    (``score_wr``); each row's running maximum over its attended columns (``row_max``) and
    its limit (``row_lim``), a register a row of each half; ``fill`` marks a half full once
    the row tile's last column tile is in.

    A row attends to its first ``lim`` columns: all ``l`` of them, or in light attention
    with ``causal = c`` the ``l - c`` before the step's own tokens and its own step's up to
    itself, ``l - c + pos + 1`` where ``pos`` runs 0 .. c - 1 over the rows and wraps (rows
    are the group's query heads, each over the step's c tokens); in a chunk of a longer set,
    counted from the chunk's first token.

    Latency: a row's scores are written as it is taken; its maximum trails by a pipeline of
    up to ``3 + log2 n`` cycles, in time for the exp stage's read (see :meth:`_maxima`)."""

    def __init__(self, shape: EngineShape, *, cmd_layout, drain_layout):
        self._sh = shape
        n, sb = shape.n, shape.score_bits
        super().__init__({
            "st": In(StateSignature(cmd_layout)),
            "beat": In(drain_layout), "valid_copy": In(len(TAKES)),
            "half": In(1), "pv": In(1), "j": In(16), "j_zero": In(1), "j_lt_last": In(1),
            "pv_next": In(1), "real_next": In(1), "half_free_copy": In(len(TAKES)),
            "score_wr": In(memory.WritePort.Signature(
                addr_width=ceil_log2(2 * shape.b_rows),
                shape=data.ArrayLayout(signed(sb), n))),
            "row_max": Out(_pair_layout(signed(sb), n)),
            "row_lim": Out(_pair_layout(signed(SPAN_BITS + 2), n)),
            "fill": Out(2),
        })

    def _takes(self, m):
        """A score row (real or padding) taken: the array's ready under ``scoring`` spelled
        out (padding rows are dropped, real ones wait for a free half), so the write, the
        ring, the limits and the halves' flags do not wait for the output's multiplexer of
        every kind's ready (for the clock: the P·V stages' handshake had reached the flags
        through it); ``write``: a real one. The take is worked out in copies, one for each
        share of its loads (``TAKES``), each a LUT of copies of its four registers (the
        array's valid flag, the scoring flag, the real flag and the half-free flag, loaded
        with their next values): one take's loads spread too far for the clock."""
        st = self.st
        takes, writes = {}, {}
        sc = dict(zip(TAKES, copies(m, st.scoring_next & ~self.pv_next, len(TAKES),
                                    "score_side")))
        rl = dict(zip(TAKES, copies(m, self.real_next, len(TAKES), "score_real")))
        for j, g in enumerate(TAKES):
            takes[g] = Signal(name=f"score_take_{g}")
            writes[g] = Signal(name=f"score_write_{g}")
            m.d.comb += [takes[g].eq(self.valid_copy[j] & sc[g] &
                                     (~rl[g] | self.half_free_copy[j])),
                         writes[g].eq(takes[g] & rl[g])]
        return takes, writes

    def _limits(self, m, takes, writes):
        """The row's limit: set on its first column tile, from a position counter over rows
        (from ``pos0``): ``span - causal + pos + 1``, which is 0 or less when the row's
        tokens end before the chunk (the whole chunk masked), and at most ``l`` (the columns
        past l are padding). Returns the columns of this tile the row attends to, less its
        first (``left_in``), and the row's limit (``lim_new``)."""
        st, n = self.st, self._sh.n
        pos = Signal(16)
        causal = st.is_.causal
        # ``lim_base + pos`` and whether it is below ``l``, in registers stepped with pos (the
        # row's limit had been an addition, a compare and a multiplexer behind the command's
        # registers, into 2n limit registers and s0: for the clock): set while the engine
        # is not started (the sum, then its compare a cycle later: the command's load takes
        # at least two cycles after ``cur``), one more (below l until it reaches l - 1) with
        # each row, and back to ``lim_base`` when pos wraps
        lim_raw = Signal(signed(SPAN_BITS + 2), name="score_lim_raw")
        lim_lt = Signal(name="score_lim_lt")
        base_lt = Signal(name="score_lim_base_lt")
        # the row's limit itself, ``causal & lim_lt ? lim_raw : l``, in a register too, set
        # from the next values (so that no multiplexer from the command's flag sits in front
        # of the masks' compares)
        lim_new = Signal(signed(SPAN_BITS + 2), name="score_lim_new")
        lim_raw_n = Signal(signed(SPAN_BITS + 2))
        lim_lt_n = Signal()
        # the columns of this tile the row attends to, less its first: ``lim - col0``, from
        # ``lim_new`` on the first column tile, then from a ring of n registers, one a row
        # (rows leave the array in order, n of them, padding included, each column tile):
        # each row's value less n goes in at the tail as the row is taken, and comes out at
        # the head for its next column tile (for the clock: the row's limit had been read
        # through a multiplexer by the array's row and less col0, into s0)
        ring = [Signal(signed(SPAN_BITS + 3), name=f"score_cols_left_{r}") for r in range(n)]
        left_in = Signal(signed(SPAN_BITS + 3), name="score_cols_left_in")
        m.d.comb += left_in.eq(Mux(self.j_zero, lim_new, ring[0]))
        with m.If(takes["ring"]):
            m.d.sync += [ring[r].eq(ring[r + 1]) for r in range(n - 1)]
            m.d.sync += ring[n - 1].eq(left_in - n)
        # a row's step, worked out from the registers: pos wraps to 0 (the limit back to
        # ``lim_base``) or steps (the limit one more, below l until it was l - 1)
        wrap_pos = pos == st.m1.causal
        step_raw = Mux(wrap_pos, st.lim_base, lim_raw + 1)
        step_lt = Mux(wrap_pos, base_lt, lim_lt & (lim_raw != st.m1.l))
        m.d.comb += [lim_raw_n.eq(lim_raw), lim_lt_n.eq(lim_lt)]
        with m.If(writes["lim"] & self.j_zero):
            m.d.sync += pos.eq(Mux(wrap_pos, 0, pos + 1))
            m.d.comb += [lim_raw_n.eq(step_raw), lim_lt_n.eq(step_lt)]
        with m.If(~st.start):
            m.d.sync += [pos.eq(st.cur.pos0), base_lt.eq(st.lim_base < st.cur.l)]
            m.d.comb += [lim_raw_n.eq(st.lim_base + st.cur.pos0),
                         lim_lt_n.eq(lim_raw < st.cur.l)]
        m.d.sync += [lim_raw.eq(lim_raw_n), lim_lt.eq(lim_lt_n)]
        # ``lim_new`` is loaded with the step's value under the write's enable (it had run
        # through the step's multiplexers into the data, 4 LUTs behind the halves' flag: for
        # the clock); it holds otherwise, as its inputs do
        with m.If(~st.start):
            m.d.sync += lim_new.eq(Mux(causal & lim_lt_n, lim_raw_n, st.cur.l))
        with m.Elif(writes["lim"] & self.j_zero):
            m.d.sync += lim_new.eq(Mux(causal & step_lt, step_raw, st.cur.l))
        return left_in, lim_new

    def elaborate(self, platform):
        m = Module()
        sh, n = self._sh, self._sh.n
        o = self.beat
        takes, writes = self._takes(m)
        write = writes["write"]
        row_in = mem_addr(self.half, o.row, n)   # the row's place in the buffer's two halves
        m.d.comb += [self.score_wr.addr.eq(mem_addr(row_in, self.j, sh.row_words)),
                     self.score_wr.en.eq(write),
                     *(self.score_wr.data[t].eq(o.c[t]) for t in range(n))]
        left_in, lim_new = self._limits(m, takes, writes)
        self._maxima(m, write, left_in, lim_new)
        for h in range(2):
            m.d.comb += self.fill[h].eq(takes["flags"] & o.last & self.j_lt_last &
                                        (self.half == h))
        return m

    def _maxima(self, m, write, left_in, lim_new):
        """The row maxima trail the writes by a pipeline (for the clock: the array's drain
        multiplexer, the masks, a tree of n compares and the running compare in one cycle
        limited the engine): from n = 4 on, s0 registers the beat with its limit less its
        first column, s1 the masked beat; at n = 4, s2 the tree's lower half and the running
        maximum takes the rest; from n = 8 on, a stage a level of the tree (s2 ..
        s(1 + log2 n)), then one more while the beat's maximum is compared with every row's
        (2n compares, registered: a row's maximum moves once a column tile, n rows apart, so
        its compare may run a cycle ahead of its update). Nothing waits for it: row r's last
        beat is taken at least n - 1 - r cycles before its tile's half is full, and the exp
        stage reads row r's maximum r·ceil(l / n) >= r cycles after that, so a maximum d
        cycles late is still in time when d <= n - 1 (d = 3 + log2 n from n = 8 on, 3 at
        n = 4, 1 at n = 2, none at n = 1)."""
        st, n, sb = self.st, self._sh.n, self._sh.score_bits
        o = self.beat
        row_max = [[Signal(signed(sb), name=f"row_max_{h}_{r}") for r in range(n)]
                   for h in range(2)]
        row_lim = [[Signal(signed(SPAN_BITS + 2), name=f"row_lim_{h}_{r}") for r in range(n)]
                   for h in range(2)]
        m.d.comb += [*(self.row_max[h][r].eq(row_max[h][r])
                       for h in range(2) for r in range(n)),
                     *(self.row_lim[h][r].eq(row_lim[h][r])
                       for h in range(2) for r in range(n))]
        vmax = lambda p, q: Mux(p > q, p, q)
        upd = dict(valid=write, half=self.half, row=o.row, first=self.j_zero)

        def stage(prev, items, name):
            nxt = dict(valid=Signal(name=f"{name}_valid"), half=Signal(name=f"{name}_half"),
                       row=Signal(range(n), name=f"{name}_row"),
                       first=Signal(name=f"{name}_first"))
            m.d.sync += [nxt["valid"].eq(prev["valid"] & st.start),
                         *(nxt[k].eq(prev[k]) for k in ("half", "row", "first"))]
            return nxt, register(m, items, f"{name}_v")

        levels = exact_log2(n)
        # column col0 + t is attended when t < lim - col0 (n compares with constants, ahead
        # of s0 from n = 4 on: behind it they had sat in front of the masks' wide fan-out)
        beat = list(o.c)
        on = [left_in > t for t in range(n)]
        # the row's limit goes into its register from s0 too, from n = 4 on (the write's
        # take, among its other loads, had been routed 6.5 ns into the 2n limits' enables:
        # for the clock); like the maxima, a cycle late is in time (n - 1 >= 1)
        lim_at = dict(upd, lim=lim_new)
        if levels >= 2:
            upd, regs = stage(upd, beat + on + [lim_new], "score_s0")
            beat, on = regs[:n], regs[n:2 * n]
            lim_at = dict(upd, lim=regs[2 * n])
        vals = []
        for t in range(n):
            v = Signal(signed(sb), name=f"score_in_{t}")
            m.d.comb += v.eq(Mux(on[t], beat[t], Const(-(1 << (sb - 1)), signed(sb))))
            vals.append(v)
        if levels >= 1:
            upd, vals = stage(upd, vals, "score_s1")
        if levels >= 3:
            for lv in range(levels):
                upd, vals = stage(upd, reduce_tree(m, vals, vmax, f"score_beat_max_l{lv}",
                                                   levels=1), f"score_s{2 + lv}")
            beat_max = vals[0]
            gt = [[Signal(name=f"score_gt_{h}_{r}") for r in range(n)] for h in range(2)]
            m.d.sync += [gt[h][r].eq(beat_max > row_max[h][r])
                         for h in range(2) for r in range(n)]
            upd, (beat_max,) = stage(upd, [beat_max], f"score_s{2 + levels}")
            greater = (lambda h, r: gt[h][r])
        else:
            if levels >= 2:
                part = reduce_tree(m, vals, vmax, "score_beat_max_lo", levels=1)
                upd, vals = stage(upd, part, "score_s2")
            beat_max = reduce_tree(m, vals, vmax, "score_beat_max")
            greater = (lambda h, r: beat_max > row_max[h][r])
        # a chunked attention's maximum: carried from chunk to chunk of its pass (restarted
        # on the first), then held through the sums' pass
        restart, hold = st.is_.restart, st.is_.part_sum
        for h in range(2):
            for r in range(n):
                with m.If(upd["valid"] & ~hold & (upd["half"] == h) & (upd["row"] == r)):
                    m.d.sync += row_max[h][r].eq(Mux((upd["first"] & restart) |
                                                     greater(h, r), beat_max, row_max[h][r]))
                with m.If(lim_at["valid"] & (lim_at["half"] == h) & (lim_at["row"] == r) &
                          lim_at["first"]):
                    m.d.sync += row_lim[h][r].eq(lim_at["lim"])
