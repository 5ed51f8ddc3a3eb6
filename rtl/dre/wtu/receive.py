"""The WTU's receive: a row's beats into the ring, its statistics, its threshold and first
pass's bounds, and the row into the walk's queue."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from ...lib import register, tree_stage
from .common import QueueSignature, add, greater, lesser, times, wrap

__all__ = ["WtuReceive"]


class WtuReceive(wiring.Component):
    """Rows from ``i_beats`` into the ring (``ring``, a word a beat, three cycles after the beat's
    take), their minimum, maximum and ``Σ w·n`` through a split lane pipeline (p1, the lanes'
    products p2, the trees one level a stage to p3, the row's running values q and r, its
    statistics s1), then the threshold's product and the score range (s2), the bounds'
    multiples (s3) and offsets (s4), and the row into the walk's queue (``queue``).

    Throughput: a beat a cycle while the ring has room and fewer than ``rows_ahead`` rows
    wait for the walk (``took``: the walk takes one; ``release``: ring words back). Latency:
    a row is in the queue ``receive_latency - 1`` cycles after its last beat. A row longer
    than the ring (error 1) or broken framing (error 2) raises the sticky error with the
    head and row it came in."""

    def __init__(self, *, lanes: int, D: int, score_bits: int, weight_bits: int,
                 count_bits: int, buckets: int, pass_buckets: int, th_r_frac_bits: int,
                 sum_bits: int, tree_stages: int, rows_ahead: int, product_part: int,
                 in_layout, store, row):
        self._N, self._D, self._sb, self._P = lanes, D, score_bits, pass_buckets
        self._blog, self._frac = exact_log2(buckets), th_r_frac_bits
        self._weight_bits, self._count_bits = weight_bits, count_bits
        self._sum_bits, self._tree_stages = sum_bits, tree_stages
        self._ahead, self._part, self._row = rows_ahead, product_part, row
        super().__init__({
            "i_beats": In(stream.Signature(in_layout)),
            "reg_th_r": In(th_r_frac_bits + 1),
            "took": In(1),
            "releasing": In(1), "release": In(range(D + 1)),
            "release_m1": In(signed(ceil_log2(D + 1) + 1)),
            "ring": In(memory.WritePort.Signature(addr_width=ceil_log2(D),
                                                  shape=data.ArrayLayout(store, lanes))),
            "queue": Out(QueueSignature(row)),
            "busy": Out(1),
            "err": Out(1), "err_code": Out(2), "err_head": Out(16), "err_row": Out(16),
        })

    def elaborate(self, platform):
        m = Module()
        D = self._D
        meta_t = data.StructLayout({"base": range(D), "stored": range(D + 1), "overflow": 1,
                                    "head_last": 1, "th_r": len(self.reg_th_r)})
        take, first, store, wptr, p1_meta = self._handshake(m, meta_t)
        stage_valid, p3, p3_flags, p3_meta = self._lanes(m, take, first, store, wptr,
                                                         p1_meta, meta_t)
        s1_valid, s1, r_valid = self._statistics(m, p3, p3_flags, p3_meta, meta_t)
        s_valid = self._prepare(m, s1_valid, s1)
        m.d.comb += self.busy.eq(take | Cat(*stage_valid, r_valid).any() | s1_valid |
                                 Cat(*s_valid).any())
        return m

    def _raise(self, m, code, head_no, row_in_head):
        """Set the sticky error; the first one keeps its code, head and row."""
        m.d.sync += self.err.eq(1)
        with m.If(~self.err):
            m.d.sync += [self.err_code.eq(code), self.err_head.eq(head_no),
                         self.err_row.eq(row_in_head)]

    def _handshake(self, m, meta_t):
        """The beat's take (from flags: the row's first beat, its tail past the ring, the
        ring full, room for another row), the ring's pointer and occupancy, the errors."""
        D, ahead, pay = self._D, self._ahead, self.i_beats.payload
        beat = Signal(range(D + 2))     # beats of this row taken (saturates at D+1)
        wptr = Signal(range(D))         # the ring's next free word
        base = Signal(range(D))         # this row's first word
        occupied = Signal(range(D + 1))
        inflight = Signal(range(ahead + 1))     # rows begun, not yet walked
        over = Signal()                 # this row outgrew the memory
        th_r = Signal.like(self.reg_th_r)
        head_no = Signal(16)            # heads received since reset (for error_head)
        row_in_head = Signal(16)        # rows of this head received (for error_row)
        take = Signal()
        # ``beat == 0`` and ``beat >= D`` kept as flags beside the count, so the handshake
        # (whose ``take`` fans out to the ring and the lanes) starts from flip-flops
        first, tail, full, store = Signal(init=1), Signal(), Signal(), Signal()
        # ``inflight < ROWS_AHEAD`` a flag too, set a cycle ahead: the walk taking a row
        # always leaves room, a new row's first beat alone may take the last of it
        room = Signal(init=1)
        m.d.sync += room.eq(self.took | Mux(take & first, inflight < ahead - 1,
                                            inflight < ahead))
        m.d.comb += [self.i_beats.ready.eq((~first | room) & (~full | tail)),
                     take.eq(self.i_beats.valid & self.i_beats.ready), store.eq(take & ~tail)]
        # ``full`` (``occupied == D``) is kept as a flag, set a cycle ahead (the released
        # words come from registers): the handshake starts from flags, not from the
        # occupancy's adder and compare
        fills, stays = Signal(), Signal()   # a store now fills the ring; full, none back
        none_back = ~self.releasing             # (a released row has at least one word)
        m.d.comb += [fills.eq(none_back & (occupied == D - 1)),
                     stays.eq(none_back & (occupied == D))]
        m.d.sync += [full.eq(Mux(store, fills, stays)),
                     # (two subtractions from registers, the store selecting between them)
                     occupied.eq(Mux(store, occupied - self.release_m1,
                                     occupied - self.release)),
                     inflight.eq(inflight + (take & first) - self.took)]
        # what travels with the row's last beat: p1_meta, then through the trees' stages
        # (loaded every cycle: the stages after it read it only with a row's last beat)
        p1_meta = Signal(meta_t)
        m.d.sync += [p1_meta.base.eq(Mux(first, wptr, base)),
                     p1_meta.stored.eq(Mux(tail, D, beat + 1)),
                     p1_meta.overflow.eq(over | tail),
                     p1_meta.head_last.eq(pay.head_last),
                     p1_meta.th_r.eq(Mux(first, self.reg_th_r, th_r))]
        with m.If(store):
            m.d.sync += wptr.eq(wrap(wptr, D))
        with m.If(take):
            with m.If(first):
                m.d.sync += [th_r.eq(self.reg_th_r), base.eq(wptr)]
            with m.If(pay.first != first):
                self._raise(m, 2, head_no, row_in_head)         # framing broken
            with m.If(beat == D):
                self._raise(m, 1, head_no, row_in_head)         # longer than the memory
            with m.If(pay.last):
                m.d.sync += [beat.eq(0), first.eq(1), tail.eq(0), over.eq(0),
                             row_in_head.eq(Mux(pay.head_last, 0, row_in_head + 1)),
                             head_no.eq(head_no + pay.head_last)]
            with m.Else():
                m.d.sync += [beat.eq(Mux(beat <= D, beat + 1, beat)), first.eq(0),
                             tail.eq(beat >= D - 1 if D > 1 else 1)]   # (a constant: lint)
                with m.If(tail):
                    m.d.sync += over.eq(1)
        return take, first, store, wptr, p1_meta

    def _lanes(self, m, take, first, store, wptr, p1_meta, meta_t):
        """p1 (per lane), p2 (the lanes' products), then the beat's trees one level a stage
        (a compare-and-select or an addition of the lanes' values, registered),
        ``tree_stages`` stages to p3, the beat's sum, minimum and maximum; the beat into the
        ring."""
        N, sb, pay = self._N, self._sb, self.i_beats.payload
        p1_valid, p1_first, p1_last, p1_any = Signal(), Signal(), Signal(), Signal()
        # (the multipliers' operands and products without a reset: datapath registers that
        # the flags qualify, which an FPGA flow can then move into its multiplier blocks)
        p1_w = [Signal(self._weight_bits, name=f"p1_w_{j}", reset_less=True) for j in range(N)]
        p1_n = [Signal(self._count_bits, name=f"p1_n_{j}", reset_less=True) for j in range(N)]
        # the scores offset by half their range (the sign bit flipped) for the minimum's and
        # maximum's trees and running values: unsigned compares, each its carry chain's carry
        # alone (a signed compare adds the sign's logic after it), flipped back at s1
        bias, top = 1 << (sb - 1), (1 << sb) - 1
        p1_lo = [Signal(sb, name=f"p1_lo_{j}") for j in range(N)]
        p1_hi = [Signal(sb, name=f"p1_hi_{j}") for j in range(N)]
        p1_nz = Signal(N)
        m.d.sync += [p1_valid.eq(take), p1_first.eq(first), p1_last.eq(pay.last)]
        # the lanes' registers load every cycle (``p1_valid`` says which beats count): no
        # enable from the handshake, whose ``take`` would otherwise fan out to every one
        m.d.sync += p1_any.eq(pay.valid.any())
        for j in range(N):
            e, v = pay.entry[j], pay.valid[j]
            m.d.sync += [p1_w[j].eq(Mux(v, e.weight, 0)), p1_n[j].eq(Mux(v, e.count, 0)),
                         p1_lo[j].eq(Mux(v, e.score.as_unsigned() ^ bias, top)),
                         p1_hi[j].eq(Mux(v, e.score.as_unsigned() ^ bias, 0)),
                         p1_nz[j].eq(v & (e.count != 0))]
        # the lanes' products ``w·n`` a stage of their own (p2: between registers, a
        # multiplier's own delay and its routes; an invalid lane's weight is 0), the
        # minimum's and maximum's trees' first level beside them. (The count goes through
        # the valid's multiplexer too: a register that only copies an input may be merged
        # by synthesis with the register that drives that input, and then it is no longer
        # the multiplier's alone.)
        p2_prod = register(m, [w * n for w, n in zip(p1_w, p1_n)], "p2_prod", reset_less=True)
        self._ring(m, store, wptr, p1_lo, p1_nz, p2_prod, bias)
        vals = {"min": p1_lo, "max": p1_hi}
        ops = {"sum": add, "min": lesser, "max": greater}
        flags, meta = (p1_valid, p1_first, p1_last, p1_any), p1_meta
        stage_valid = [p1_valid]
        for st in range(2, 3 + self._tree_stages):
            name = "p3" if st == 2 + self._tree_stages else f"p{st}"
            for key in vals:
                vals[key] = tree_stage(m, vals[key], ops[key], f"{name}_{key}")
            if st == 2:
                vals["sum"] = p2_prod
            flags = register(m, flags, f"{name}_flag")
            meta_r = Signal(meta_t, name=f"{name}_meta")
            m.d.sync += meta_r.eq(meta)
            meta = meta_r
            stage_valid.append(flags[0])
        return stage_valid, {key: v[0] for key, v in vals.items()}, flags, meta

    def _ring(self, m, store, wptr, p1_lo, p1_nz, p2_prod, bias):
        """The beat into the ring three cycles after its take (the walk reads a row's words
        only after its statistics, many cycles later), from copies of p2's registers: the
        products' registers load the sums' trees and these copies, not the block RAMs' far
        inputs beside the multipliers. The ring holds ``w·n`` and an invalid lane's entry is
        0 with ``nz`` = 0, which neither sums nor marks (its score does not matter)."""
        def delayed(items, name, stages):
            for k in range(stages):
                items = register(m, items, f"{name}_d{k}")
            return items
        ring_store, ring_addr = delayed([store, wptr], "ring", 3)
        ring_score = delayed([(lo ^ bias).as_signed() for lo in p1_lo], "ring_score", 2)
        ring_nz = delayed([p1_nz], "ring_nz", 2)[0]
        ring_prod = delayed(p2_prod, "ring_prod", 1)
        m.d.comb += [self.ring.addr.eq(ring_addr), self.ring.en.eq(ring_store)]
        for j in range(self._N):
            m.d.comb += [self.ring.data[j].score.eq(ring_score[j]),
                         self.ring.data[j].prod.eq(ring_prod[j]),
                         self.ring.data[j].nz.eq(ring_nz[j])]

    def _statistics(self, m, p3, p3_flags, p3_meta, meta_t):
        """The row's running statistics over two stages, q (compares) and r (selects), so
        that no compare and select share a cycle: at q a beat's minimum is compared with the
        running minimum and with the beat at r (the one the running minimum is about to take
        in), registered; at r the running minimum takes the beat if it is below both (a
        row's first beat at r: the running minimum is the previous row's, compare with the
        beat alone; no beat at r: the running minimum is up to date, compare with it). A
        finished row's statistics in s1."""
        sb = self._sb
        bias, top = 1 << (sb - 1), (1 << sb) - 1
        p3_valid, p3_first, p3_last, p3_any = p3_flags
        total = Signal(self._sum_bits)
        smin = Signal(sb, init=top)            # (offset: see _lanes)
        smax = Signal(sb, init=0)
        any_valid = Signal()
        r_valid, r_first, r_last, r_any = register(m, [p3_valid, p3_first, p3_last, p3_any],
                                                   "r_flag")
        r_meta = Signal(meta_t, name="r_meta")
        r_sum, r_min, r_max = (Signal.like(p3["sum"], name="r_sum"),
                               Signal.like(p3["min"], name="r_min"),
                               Signal.like(p3["max"], name="r_max"))
        lt_acc, lt_beat, gt_acc, gt_beat = Signal(), Signal(), Signal(), Signal()
        m.d.sync += [r_meta.eq(p3_meta), r_sum.eq(p3["sum"]), r_min.eq(p3["min"]),
                     r_max.eq(p3["max"]),
                     lt_acc.eq((p3["min"] < smin) | (r_valid & r_first)),
                     lt_beat.eq((p3["min"] < r_min) | ~r_valid),
                     gt_acc.eq((p3["max"] > smax) | (r_valid & r_first)),
                     gt_beat.eq((p3["max"] > r_max) | ~r_valid)]
        n_total, n_min, n_max, n_any = (Signal.like(total), Signal.like(smin),
                                        Signal.like(smax), Signal())
        m.d.comb += [
            n_total.eq(Mux(r_first, r_sum, total + r_sum)),
            n_min.eq(Mux(r_first | (lt_acc & lt_beat), r_min, smin)),
            n_max.eq(Mux(r_first | (gt_acc & gt_beat), r_max, smax)),
            n_any.eq(Mux(r_first, 0, any_valid) | r_any)]
        with m.If(r_valid):
            m.d.sync += [total.eq(n_total), smin.eq(n_min), smax.eq(n_max),
                         any_valid.eq(n_any)]
        s1_valid = Signal()
        s1 = Signal(data.StructLayout({"total": len(total), "smin": signed(sb),
                                       "smax": signed(sb), "any": 1, "meta": meta_t}))
        m.d.sync += s1_valid.eq(r_valid & r_last)
        with m.If(r_valid & r_last):
            m.d.sync += [s1.total.eq(n_total), s1.smin.eq((n_min ^ bias).as_signed()),
                         s1.smax.eq((n_max ^ bias).as_signed()),
                         s1.any.eq(n_any), s1.meta.eq(r_meta)]
        return s1_valid, s1, r_valid

    def _prepare(self, m, s1_valid, s1):
        """s2: the threshold's product and the score range r1; s3: the first pass's bound
        offsets ``(B - 1 - d)·r1``; then the bounds and the row into the walk's queue."""
        sb, P, blog, part = self._sb, self._P, self._blog, self._part
        s2_valid = Signal()
        # the threshold's product in parts of ``total`` (each one multiplier cell), summed
        # at s3: no adder after the multipliers in the same stage
        tr = s1.meta.th_r
        parts = [s1.total[i:i + part] for i in range(0, len(s1.total), part)]
        th_parts = [Signal(len(a) + len(tr), name=f"s2_th_part_{i}", reset_less=True)
                    for i, a in enumerate(parts)]
        r1 = Signal(sb + 1)
        s2_smin, s2_smax = Signal(signed(sb)), Signal(signed(sb))
        s2_any, s2_meta = Signal(), Signal.like(s1.meta)
        m.d.sync += [s2_valid.eq(s1_valid),
                     r1.eq(s1.smax - s1.smin + 1), s2_smin.eq(s1.smin), s2_smax.eq(s1.smax),
                     s2_any.eq(s1.any), s2_meta.eq(s1.meta)]
        m.d.sync += [t.eq(a * tr) for t, a in zip(th_parts, parts)]
        th_prod = sum((t << (i * part) for i, t in enumerate(th_parts[1:], 1)), th_parts[0])
        # s3: the multiples ``(d + 1)·r1`` (a carry chain at most, registered); s4: ``acc -
        # d·r1`` = ``(B - 1 - d)·r1`` = ``B·r1 - (d + 1)·r1`` (>= 0, as P <= B), a register
        # each: the first bounds' only carry chain after it is the ``+ smin``
        s3, s4 = Signal(self._row, name="s3_row"), Signal(self._row, name="s4_row")
        rec = Signal(self._row)
        s3_valid, s4_valid = Signal(), Signal()
        mul = [Signal(sb + 1 + blog, name=f"s3_mul_{d}") for d in range(P)]
        offs = [Signal(sb + 1 + blog, name=f"s4_off_{d}") for d in range(P)]
        m.d.sync += [s3_valid.eq(s2_valid), s3.base.eq(s2_meta.base),
                     s3.stored.eq(s2_meta.stored), s3.overflow.eq(s2_meta.overflow),
                     s3.any.eq(s2_any), s3.head_last.eq(s2_meta.head_last),
                     s3.th.eq(th_prod >> self._frac), s3.smin.eq(s2_smin),
                     s3.r1.eq(r1), s3.hi.eq(s2_smax + 1)]
        m.d.sync += [u.eq(times(r1, d + 1)) for d, u in enumerate(mul)]
        m.d.sync += [s4_valid.eq(s3_valid), s4.eq(s3)]
        m.d.sync += [o.eq((s3.r1 << blog) - u) for u, o in zip(mul, offs)]
        q = self.queue
        m.d.comb += [rec.eq(s4), rec.acc.eq(offs[0]), q.row.eq(rec), q.valid.eq(s4_valid),
                     q.flags.eq(Cat(s4.overflow, s4.overflow | ~s4.any))]
        m.d.comb += [rec.lo[d].eq(s4.smin + (offs[d] >> blog)) for d in range(P)]
        return s2_valid, s3_valid, s4_valid
