"""The attention engine's feeder: the buffers read, one beat a cycle, into the array."""
from __future__ import annotations

from amaranth.hdl import Array, Const, Module, Mux, Signal, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ...lib import KEEP_COPY, register
from .common import EngineShape, StateSignature, job, mem_addr

__all__ = ["Feeder"]


class Feeder(wiring.Component):
    """Read the buffers, one beat a cycle, into the array (``feed``): f0 addresses, f1 the
    block RAMs' read, f2 their words registered (the RAMs' own output registers on the FPGA:
    synth/bram_outreg.py), then each lane's element picked into the array. The three stages
    move together (one enable: f2 empty or taken). Per row tile: its column tiles of A·Bᵀ
    (A's half once ``half_full``, freed with ``half_free`` after its last beat); for light
    attention then its P·V (A = the tile's weights P once ``p_ready``, taken with ``p_take``;
    B = V's word of beat k's token). Rows past m or l and steps past k feed zeros, and a
    reduction shorter than n is padded to n beats (the array's contract).

    Latency: three cycles from a beat's issue to the array's input; one beat a cycle while
    the array takes them (a tile's last beat waits for the array's ``room``)."""

    def __init__(self, shape: EngineShape, *, cmd_layout, feed_layout):
        self._sh = shape
        n = shape.n
        word = data.ArrayLayout(signed(8), n)
        rd = lambda depth, shape_: In(memory.ReadPort.Signature(addr_width=ceil_log2(depth),
                                                                shape=shape_))
        super().__init__({
            "st": In(StateSignature(cmd_layout)),
            "a_rd": rd(2 * shape.kc_max, word).array(n),
            "b_rd": rd(shape.row_words * shape.kc_max, word).array(n),
            "p_rd": rd(2 * shape.row_words, data.ArrayLayout(shape.weight_bits, n)).array(n),
            "v_rd": rd(shape.b_rows * shape.vc_max, word),
            "half_full": In(2), "p_ready": In(2),
            "feed": Out(stream.Signature(feed_layout)), "room": In(1),
            "half_free": Out(2), "p_take": Out(2), "done": Out(1), "stalled": Out(1),
        })

    def _order(self, m, tile_s, tile_p):
        """The job (S or P·V), its row tile and whether one is left, in registers set from
        the counters' next values (as in the output part: the issue sees flags, for the
        clock). Returns the registers, their values for the next row tile and at 0."""
        st, n = self.st, self._sh.n

        def derive(s_, p_, tag):
            pv_, ti = job(m, st, s_, p_, f"feed_{tag}")
            return dict(pv=pv_, ti=ti, left=ti < st.mt)

        reg = dict(pv=Signal(name="feed_pv"), ti=Signal(16, name="feed_tile"),
                   left=Signal(name="feed_left"))
        pv = reg["pv"]
        if n >= 4:
            # the next row tile's registers, computed ahead over three registered stages (for
            # the clock): the counters' next values, its job, then whether it is left. A row
            # tile's beats are >= kt >= n >= 4 cycles apart, so the values are in place
            # three cycles after the counters move.
            s_a, p_a = register(m, [tile_s + ~pv, tile_p + pv], "feed_next_sp")
            pv_a, _ = job(m, st, s_a, p_a, "feed_next")
            pv_a, s_a, p_a = register(m, [pv_a, s_a, p_a], "feed_next_a")
            ti_a = Mux(pv_a, p_a, s_a)[:16]
            tile_next = dict(zip(("pv", "ti", "left"),
                                 register(m, [pv_a, ti_a, ti_a < st.mt], "feed_next_b")))
        else:
            tile_next = derive(tile_s + ~pv, tile_p + pv, "next")
        return reg, tile_next, derive(Const(0, 16), Const(0, 16), "zero")

    def _last_flags(self, m, issue, moving, pv, kk, tile_j, next_pv, zero_pv):
        """Whether the beat is its tile's last (``kk == kt - 1``) and the column tile its row
        tile's last, in registers whose next values the issue only selects among compares
        run from registers (the compares had sat between the issue and the counters' and
        the halves' enables: for the clock). Returns the two registers."""
        st = self.st
        kk_last = Signal(name="feed_kk_last")
        j_last = Signal(name="feed_j_last")
        kt_now_m1 = Mux(pv, st.m1.kt_pv, st.m1.kt)
        last_j = Mux(pv, st.m1.kc, st.m1.lt)

        def lasts_at_zero(pv_):                 # both counters at 0, the job's pv_
            return (Mux(pv_, st.m1.kt_pv, st.m1.kt) == 0), (Mux(pv_, st.m1.kc, st.m1.lt) == 0)
        with m.If(~st.start):
            m.d.sync += [f.eq(v) for f, v in zip((kk_last, j_last), lasts_at_zero(zero_pv))]
        with m.Elif(moving):
            m.d.sync += [f.eq(v) for f, v in zip((kk_last, j_last), lasts_at_zero(next_pv))]
        with m.Elif(issue & kk_last):
            m.d.sync += [kk_last.eq(kt_now_m1 == 0),
                         j_last.eq(tile_j == Mux(pv, st.m2.kc, st.m2.lt))]
        with m.Elif(issue):
            m.d.sync += [kk_last.eq(kk == Mux(pv, st.m2.kt_pv, st.m2.kt)),
                         j_last.eq(tile_j == last_j)]
        with m.Else():
            m.d.sync += [kk_last.eq(kk == kt_now_m1), j_last.eq(tile_j == last_j)]
        return kk_last, j_last

    def elaborate(self, platform):
        m = Module()
        st = self.st
        feed = self.feed
        tile_s = Signal(16)                     # the next row tile whose scores are fed
        tile_p = Signal(16)                     # the next row tile whose P·V is fed
        tile_j = Signal(16)
        kk = Signal(16)
        reg, tile_next, zero = self._order(m, tile_s, tile_p)
        pv, tile_i = reg["pv"], reg["ti"]
        half = tile_i[0]
        advance, issue, f2_valid = Signal(), Signal(), Signal()
        # f2's beat leaves whatever the array's room (f2 is empty or its beat is not a tile's
        # last) in a register of its own for the issue, beside the array's room: the enable
        # of the RAMs and of every f1 and f2 register (``advance``, some thousand loads) and
        # the issue had shared one LUT, placed among those loads, far from the counters the
        # issue steps (for the clock)
        f2_open = Signal(init=1, name="feed_f2_open")
        m.d.comb += advance.eq(~f2_valid | feed.ready)
        ready_half = Signal()
        m.d.comb += ready_half.eq(Array(Mux(pv, self.p_ready[h], self.half_full[h])
                                        for h in range(2))[half])
        running = Signal()
        m.d.comb += [running.eq(st.start & reg["left"]),
                     issue.eq((f2_open | self.room) & running & ready_half)]
        moving = Signal()                       # the next beat starts the next row tile
        kk_last, j_last = self._last_flags(m, issue, moving, pv, kk, tile_j, tile_next["pv"],
                                           zero["pv"])
        m.d.comb += moving.eq(issue & kk_last & j_last)
        f1_valid = self._stages(m, advance, issue, f2_valid, f2_open, pv, tile_i, tile_j, kk,
                                kk_last)
        m.d.comb += self.stalled.eq(f2_valid & ~feed.ready)
        with m.If(issue):
            with m.If(kk_last):
                m.d.sync += kk.eq(0)
                with m.If(j_last):
                    m.d.sync += [tile_j.eq(0), *(reg[k].eq(v) for k, v in tile_next.items())]
                    with m.If(pv):
                        m.d.sync += tile_p.eq(tile_p + 1)
                        for h in range(2):
                            with m.If(half == h):
                                m.d.comb += self.p_take[h].eq(1)
                    with m.Else():
                        m.d.sync += tile_s.eq(tile_s + 1)
                        for h in range(2):
                            with m.If(half == h):
                                m.d.comb += self.half_free[h].eq(1)
                with m.Else():
                    m.d.sync += tile_j.eq(tile_j + 1)
            with m.Else():
                m.d.sync += kk.eq(kk + 1)
        m.d.comb += self.done.eq(~reg["left"] & ~f1_valid & ~f2_valid)
        with m.If(~st.start):
            m.d.sync += [tile_s.eq(0), tile_p.eq(0), tile_j.eq(0), kk.eq(0),
                         *(reg[k].eq(v) for k, v in zero.items())]
        return m

    def _stages(self, m, advance, issue, f2_valid, f2_open, pv, tile_i, tile_j, kk, kk_last):
        """The RAMs' addresses (f0), f1 (the beat's fields beside the read) and f2 (the
        words as read, the beat's flags and each lane's mask). Returns f1's valid flag."""
        sh, st, n = self._sh, self.st, self._sh.n
        half = tile_i[0]
        f1_valid = Signal()
        f1_sel = Signal(range(n))
        f1_first, f1_last = Signal(), Signal()
        f1_a_rows, f1_b_rows = Signal(range(n + 1)), Signal(range(n + 1))
        f1_in_k, f1_pv = Signal(), Signal()
        chunk = kk >> sh.log_n if n > 1 else kk
        for r in range(n):
            ard, brd, prd = self.a_rd[r], self.b_rd[r], self.p_rd[r]
            m.d.comb += [ard.addr.eq(mem_addr(half, chunk, sh.kc_max)),
                         brd.addr.eq(mem_addr(tile_j, chunk, sh.kc_max)),
                         prd.addr.eq(mem_addr(half, chunk, sh.row_words)),
                         ard.en.eq(advance), brd.en.eq(advance), prd.en.eq(advance)]
        m.d.comb += [self.v_rd.addr.eq(mem_addr(kk, tile_j, sh.vc_max)),
                     self.v_rd.en.eq(advance)]
        with m.If(advance):
            base_i = tile_i << sh.log_n
            base_j = tile_j << sh.log_n
            cols = Mux(pv, st.cur.k, st.cur.l)    # B's rows: V's dimensions in P·V
            m.d.sync += [f1_valid.eq(issue), f1_sel.eq(kk[:sh.log_n] if n > 1 else 0),
                         f1_first.eq(kk == 0), f1_last.eq(kk_last),
                         f1_in_k.eq(kk < Mux(pv, st.cur.l, st.cur.k)), f1_pv.eq(pv),
                         f1_a_rows.eq(Mux(st.cur.m - base_i >= n, n, st.cur.m - base_i)),
                         f1_b_rows.eq(Mux(cols - base_j >= n, n, cols - base_j))]
        # f2: the words as read (no logic between a RAM and its register, which loads with
        # the stage: the RAM's output register), whether the beat is its word's first and
        # each lane's mask. That flag and the P·V flag in registers a row (copies kept apart
        # in synthesis): one register had fed every row's picks and operand choices, its
        # loads spread over the array's rows (for the clock)
        f2 = dict(pv=[Signal(name=f"f2_pv_{r}", attrs=KEEP_COPY) for r in range(n)],
                  w0=[Signal(init=1, name=f"f2_word_first_{r}", attrs=KEEP_COPY)
                      for r in range(n)],
                  a_on=Signal(n), b_on=Signal(n))
        f2_first, f2_last = Signal(), Signal()
        with m.If(advance):
            m.d.sync += [f2_valid.eq(f1_valid), f2_open.eq(~f1_valid | ~f1_last),
                         f2_first.eq(f1_first), f2_last.eq(f1_last),
                         *(pv_.eq(f1_pv) for pv_ in f2["pv"]),
                         *(w0.eq(f1_sel == 0) for w0 in f2["w0"]),
                         *(f2["a_on"][r].eq(f1_in_k & (r < f1_a_rows)) for r in range(n)),
                         *(f2["b_on"][r].eq(f1_in_k & (r < f1_b_rows)) for r in range(n))]
        self._lanes(m, advance, f2_valid, f2)
        m.d.comb += [self.feed.valid.eq(f2_valid), self.feed.payload.first.eq(f2_first),
                     self.feed.payload.last.eq(f2_last)]
        return f1_valid

    def _lanes(self, m, advance, f2_valid, f2):
        """Each lane's element: a word's first beat takes element 0 from the registered word;
        its other beats take element 0 of a shift register a lane (A or P as the beat's job
        needs, and B), loaded with the word's other elements as its first beat leaves and
        shifted down one as each later beat leaves (a word's beats leave one after the
        other: beat k is element k mod n of word k / n). An n-way pick of the RAMs' words
        had run between their output registers, far off in the RAM columns, and the skew
        (for the clock)."""
        n, fp = self._sh.n, self.feed.payload

        def word(rd, name):
            w = Signal.like(rd.data, name=name, reset_less=True)
            with m.If(advance):
                m.d.sync += w.eq(rd.data)
            return w
        v_word = word(self.v_rd, "f2_v_word")
        taken = Signal()
        m.d.comb += taken.eq(f2_valid & self.feed.ready)
        for r in range(n):
            aw = word(self.a_rd[r], f"f2_a_word_{r}")
            bw = word(self.b_rd[r], f"f2_b_word_{r}")
            pw = word(self.p_rd[r], f"f2_p_word_{r}")
            pv_r, w0 = f2["pv"][r], f2["w0"][r]
            ap = [Mux(pv_r, pw[t], aw[t]) for t in range(n)]
            ea, eb = ap[0], bw[0]
            if n > 1:
                ap_sh = [Signal.like(fp.a[r], name=f"f2_ap_shift_{r}_{t}", reset_less=True)
                         for t in range(n - 1)]
                b_sh = [Signal(signed(8), name=f"f2_b_shift_{r}_{t}", reset_less=True)
                        for t in range(n - 1)]
                with m.If(taken):
                    with m.If(w0):
                        m.d.sync += [*(ap_sh[t].eq(ap[t + 1]) for t in range(n - 1)),
                                     *(b_sh[t].eq(bw[t + 1]) for t in range(n - 1))]
                    with m.Else():
                        m.d.sync += [*(ap_sh[t].eq(ap_sh[t + 1]) for t in range(n - 2)),
                                     *(b_sh[t].eq(b_sh[t + 1]) for t in range(n - 2))]
                ea = Mux(w0, ea, ap_sh[0])
                eb = Mux(w0, eb, b_sh[0])
            m.d.comb += [fp.a[r].eq(Mux(f2["a_on"][r], ea, 0)),
                         fp.b[r].eq(Mux(f2["b_on"][r], Mux(pv_r, v_word[r], eb), 0))]
