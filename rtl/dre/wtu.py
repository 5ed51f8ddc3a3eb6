"""DRE WiCSum threshold unit (WTU): bucketed early-exit selection, bit-exact with the golden
model (``golden.wtu.wtu_reference``, DESIGN.md D8 and D9)."""

from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from vrex.rules import wtu_rules

from ..lib import counter_layout, reduce_tree, register

__all__ = ["WicsumThresholdUnit"]

_add = lambda a, b: a + b
_lesser = lambda a, b: Mux(a < b, a, b)
_greater = lambda a, b: Mux(a > b, a, b)


def _times(v, c: int):
    """``v · c`` for a constant ``c >= 0`` as shifts and adds (no multiplier cell)."""
    terms = [v << i for i in range(c.bit_length()) if c >> i & 1]
    return sum(terms[1:], terms[0]) if terms else Const(0)


class WicsumThresholdUnit(wiring.Component):
    """WiCSum with bucketed early exit over query rows, united per KV head.

    Computes what ``golden.wtu.wtu_reference`` computes. Rows arrive on ``i`` as beats of
    ``lanes`` candidates (score, weight, count; ``valid`` marks real entries), framed by
    ``first``/``last``; ``head_last`` on a row's beats closes the KV head's group. Candidate j of
    a row is lane ``j mod lanes`` of beat ``j // lanes``.

    Three stages work on different rows at once (docs/wtu.md):

    - *receive*: a row's beats go into the score memory, a ring of ``row_entries / lanes``
      words, one beat a cycle, while a pipeline accumulates the row's minimum and maximum
      score and ``Σ weight·count``; then the threshold ``th = (Σ · th_r) >> th_r_frac_bits``
      and the first pass's bucket bounds ``lo_k = smin + ((k · (smax - smin + 1)) >> log2
      B)``. The next row streams in while earlier rows are walked: a beat waits only when the
      ring is full or three rows already wait for the walk.
    - *walk*: two rows at a time, their passes interleaved on the read port; a pass reads the
      stored row once and sums ``pass_buckets`` P buckets from the top down: each lane
      compares its score with the pass's P bounds, its multiplier forms ``w·n``, and P adder
      trees sum, per d, the entries of the pass's top d+1 buckets. When the pass has drained,
      the running sums say where the row exits: the first bucket whose running sum exceeds
      ``th`` (or bucket 0); a row that does not exit makes another pass. Each entry's bucket
      code (relative to the pass) goes to the row's bank of a four-bank code memory.
    - *mark and emit*: the marker ORs each row's entries up to its exit bucket (with ``n >
      0``) into the head's union bitmask, in row order, and at ``head_last`` emits the union
      on ``o`` as ascending candidate indices (``last`` = 0, ``count`` = 1, 2, ...) and one
      closing beat (``last`` = 1, ``count`` = the head's total), clearing it on the way;
      meanwhile the walk goes on with the next rows.

    A row of more than ``row_entries`` entries is refused: it is consumed, selects nothing,
    raises the sticky ``error`` and counts in ``rows_refused`` (refusing keeps the unit's timing
    and memory fixed; tiling a long row would change its WiCSum, since the buckets span the
    whole row's score range).

    Timing (:meth:`schedule` gives it cycle for cycle; docs/wtu.md): with ``nb = ceil(n /
    lanes)``, a row's walk reads ``ceil(visited / P)`` passes of ``nb`` words, each decided
    :attr:`WALK_OVERHEAD` cycles after its last read (the other row's pass reads meanwhile);
    receiving takes ``nb``, marking ``nb + 1``, beside the walk; a head's emission takes 3
    cycles per union word touched, one per selected id, plus 2.

    Parameters (keyword-only, all required; :meth:`from_config` takes them from the build's
    ``Config``; checked by ``vrex.rules.wtu_rules`` with exact messages)
        ``lanes`` candidates per beat and per cycle of a pass (a power of two); ``buckets`` B
        (a power of two); ``pass_buckets`` P, buckets a pass (a power of two, at most B);
        ``row_entries`` the score memory (a multiple of lanes); ``score_bits`` (at least 2),
        ``weight_bits``, ``count_bits`` entry widths; ``th_r_frac_bits`` fractional bits of
        Th_r; ``counter_bits`` counter width.

    Attributes
        ``i`` (in stream: ``entry[lanes]`` of ``score``, ``weight``, ``count``; ``valid``;
        ``first``, ``last``, ``head_last``); ``o`` (out stream: ``cluster``, ``count``,
        ``last``); ``th_r`` run-time register (u1.th_r_frac_bits,
        ``Config.block_registers("wtu")``), taken with each row's first beat; ``error``
        sticky, with the first error's ``error_code`` (1 a row too long, 2 broken first/last
        framing), ``error_head`` (heads received before it since reset) and ``error_row`` (its
        row in that head); ``perf`` counters: ``rows``, ``buckets_visited``,
        ``buckets_skipped`` by early exit, ``entries_read`` (by the walk's passes),
        ``rows_refused``, ``busy`` and ``stalled`` cycles.
    """

    PERF = ("rows", "buckets_visited", "buckets_skipped", "entries_read", "rows_refused",
            "busy", "stalled")
    WALK_OVERHEAD = 5           # cycles from a pass's last read to its exit decision, plus one
    RECEIVE_LATENCY = 6         # from a row's last beat to the walk being able to take it
    CODE_BANKS = 4              # rows between the walk and the marker (two walked, two done)

    def __init__(self, *, lanes: int, buckets: int, pass_buckets: int, row_entries: int,
                 score_bits: int, weight_bits: int, count_bits: int, th_r_frac_bits: int,
                 counter_bits: int):
        wtu_rules(lanes=lanes, buckets=buckets, pass_buckets=pass_buckets,
                  row_entries=row_entries, score_bits=score_bits, weight_bits=weight_bits,
                  count_bits=count_bits, th_r_frac_bits=th_r_frac_bits,
                  counter_bits=counter_bits)
        self._lanes, self._buckets, self._row_entries = lanes, buckets, row_entries
        self._pass = pass_buckets
        self._score_bits, self._weight_bits, self._count_bits = score_bits, weight_bits, count_bits
        self._th_r_frac_bits, self._counter_bits = th_r_frac_bits, counter_bits
        id_bits = max(1, ceil_log2(row_entries))
        self.lane_layout = data.StructLayout({"score": signed(score_bits), "weight": weight_bits,
                                              "count": count_bits})
        self.in_layout = data.StructLayout({"entry": data.ArrayLayout(self.lane_layout, lanes),
                                            "valid": lanes, "first": 1, "last": 1,
                                            "head_last": 1})
        self.out_layout = data.StructLayout({"cluster": id_bits, "count": id_bits + 1,
                                             "last": 1})
        self.perf_layout = counter_layout(self.PERF, counter_bits)
        super().__init__({
            "i": In(stream.Signature(self.in_layout)),
            "o": Out(stream.Signature(self.out_layout)),
            "th_r": In(th_r_frac_bits + 1),
            "error": Out(1),
            "error_code": Out(2),
            "error_head": Out(16),
            "error_row": Out(16),
            "perf": Out(self.perf_layout),
        })

    @classmethod
    def from_config(cls, cfg) -> "WicsumThresholdUnit":
        return cls(**cfg.block_params("wtu"))

    lanes = property(lambda self: self._lanes)
    buckets = property(lambda self: self._buckets)
    pass_buckets = property(lambda self: self._pass)
    row_entries = property(lambda self: self._row_entries)
    th_r_frac_bits = property(lambda self: self._th_r_frac_bits)

    @property
    def sum_bits(self) -> int:
        """Width of Σ weight·count over a full row."""
        return self._weight_bits + self._count_bits + max(1, ceil_log2(self._row_entries))

    @property
    def code_bits(self) -> int:
        """Width of an entry's bucket code in a pass (0..P, P = not selected)."""
        return max(1, ceil_log2(self._pass + 1))

    @property
    def memory_bits(self) -> int:
        entry = self._score_bits + self._weight_bits + self._count_bits + 1
        return self._row_entries * (entry + 1 + self.CODE_BANKS * self.code_bits)

    @property
    def clear_cycles(self) -> int:
        """Cycles after reset before the marker takes a row (it clears its union memory)."""
        return self._row_entries // self._lanes

    def passes(self, visited: int) -> int:
        """Passes the walk makes over a row to visit ``visited`` buckets."""
        return max(1, -(-visited // self._pass))

    def walk_cycles(self, n: int, visited: int) -> int:
        """Cycles from a row's first read to the cycle after its exit decision, alone in the
        walk, for a row of ``n`` entries that visits ``visited`` buckets."""
        nb = max(1, -(-n // self._lanes))
        return self.passes(visited) * (nb + self.WALK_OVERHEAD)

    def emit_cycles(self, words: int, selected: int) -> int:
        """Cycles to emit a head whose rows touched ``words`` union words (the longest row's
        beats) and selected ``selected`` ids, ``o`` ready."""
        return 3 * words + selected + 2

    def schedule(self, rows, head_selected, *, clearing: int = 0) -> dict:
        """The unit's timing, cycle for cycle, with the input always valid and ``o`` always
        ready, from the golden model's per-row results.

        ``rows``: ``(n, visited, refused, any_valid, head_last)`` per row in order;
        ``head_selected``: the selected ids per head. Returns ``first_beats`` (the cycle each
        row's first beat is taken, from the first row's at 0; ``clearing``: the cycles the
        marker still spends clearing the union after that), ``closes`` (the cycle of each
        head's closing beat), ``busy`` (what the ``busy`` counter counts) and ``done`` (the
        cycle after the last closing beat)."""
        return _schedule(self, rows, head_selected, clearing)

    def elaborate(self, platform):
        m = Module()
        x = SimpleNamespace()            # the signals the sections below share
        self._memories(m, x)
        self._receive(m, x)
        self._prepare(m, x)
        self._walk(m, x)
        self._mark(m, x)
        self._busy(m, x)
        return m

    # ------------------------------------------------------------------ memories

    def _memories(self, m, x):
        N, P = self._lanes, self._pass
        x.D = D = self._row_entries // N
        x.blog = exact_log2(self._buckets)
        sb = self._score_bits
        x.prod_bits = self._weight_bits + self._count_bits
        x.smax_c, x.smin_c = (1 << (sb - 1)) - 1, -(1 << (sb - 1))
        store_t = data.StructLayout({"score": signed(sb), "weight": self._weight_bits,
                                     "count": self._count_bits, "valid": 1})
        # No read of the row or the code memory is of a word written in the same cycle (the
        # walk reads only received rows' words, the receive writes only free ones; the marker
        # reads a bank the walk has finished writing): ``no_rw_check`` lets Yosys leave out
        # the read-during-write multiplexers after their block RAMs
        norw = {"no_rw_check": 1}
        m.submodules.rowmem = rowmem = memory.Memory(
            shape=data.ArrayLayout(store_t, N), depth=D, init=[], attrs=norw)
        m.submodules.unimem = unimem = memory.Memory(shape=N, depth=D, init=[])
        m.submodules.codemem = codemem = memory.Memory(
            shape=data.ArrayLayout(self.code_bits, N), depth=self.CODE_BANKS * D, init=[],
            attrs=norw)
        x.row_wr, x.row_rd = rowmem.write_port(), rowmem.read_port()
        x.uni_wr, x.uni_rd = unimem.write_port(), unimem.read_port()
        x.code_wr, x.code_rd = codemem.write_port(), codemem.read_port()
        # a received row on its way to the walk
        bound = signed(sb + 2)
        x.row_t = data.StructLayout({
            "base": range(D), "stored": range(D + 1), "overflow": 1, "any": 1,
            "head_last": 1, "th": self.sum_bits, "smin": signed(sb), "r1": sb + 1,
            "acc": sb + 1 + x.blog, "lo": data.ArrayLayout(bound, P), "hi": bound})
        m.submodules.rows = x.fifo = fifo.SyncFIFO(width=data.Layout.cast(x.row_t).size,
                                                   depth=3)
        x.head = data.View(x.row_t, x.fifo.r_data)
        # the walk's hand-off to the marker, one slot per code bank; a bank is used from the
        # walk taking its row to the marker finishing it
        NB = self.CODE_BANKS
        x.mark_t = data.StructLayout({"stored": range(D + 1), "exit": range(P + 1),
                                      "overflow": 1, "head_last": 1})
        x.slot = Array(Signal(x.mark_t, name=f"slot_{b}") for b in range(NB))
        x.slot_full = Signal(NB)
        x.bank_used = Signal(NB)

    def _wrap(self, ptr, D):
        return Mux(ptr == D - 1, 0, ptr + 1)

    # ------------------------------------------------------------------ receive

    def _raise(self, m, x, code):
        """Set the sticky error; the first one keeps its code, head and row."""
        m.d.sync += self.error.eq(1)
        with m.If(~self.error):
            m.d.sync += [self.error_code.eq(code), self.error_head.eq(x.head_no),
                         self.error_row.eq(x.row_in_head)]

    def _receive(self, m, x):
        """Store the row in the ring; min, max and Σ w·n through a split lane tree (p1, p2)
        and the beat's registered results (p3)."""
        N, D, sb = self._lanes, x.D, self._score_bits
        perf, pay = self.perf, self.i.payload
        x.beat = beat = Signal(range(D + 2))   # beats of this row taken (saturates at D+1)
        x.wptr = wptr = Signal(range(D))       # the ring's next free word
        x.base = Signal(range(D))              # this row's first word
        x.occupied = occupied = Signal(range(D + 1))
        x.inflight = inflight = Signal(range(4))   # rows begun and not yet taken by the walk
        x.release = Signal(range(D + 1))       # words the walk frees this cycle
        x.took = Signal()                      # the walk takes a row this cycle
        x.over = Signal()                      # this row outgrew the memory
        x.th_r = Signal.like(self.th_r)
        x.head_no = Signal(16)                 # heads received since reset (for error_head)
        x.row_in_head = Signal(16)             # rows of this head received (for error_row)
        x.take = take = Signal()
        first = beat == 0
        store = Signal()
        m.d.comb += [
            self.i.ready.eq((~first | (inflight < 3)) & ((occupied < D) | (beat >= D))),
            take.eq(self.i.valid & self.i.ready),
            store.eq(take & (beat < D)),
            x.row_wr.addr.eq(wptr), x.row_wr.en.eq(store)]
        for j in range(N):
            e = pay.entry[j]
            m.d.comb += [x.row_wr.data[j].score.eq(e.score),
                         x.row_wr.data[j].weight.eq(e.weight),
                         x.row_wr.data[j].count.eq(e.count),
                         x.row_wr.data[j].valid.eq(pay.valid[j])]
        m.d.sync += [occupied.eq(occupied + store - x.release),
                     inflight.eq(inflight + (take & first) - x.took)]
        # what travels with the row's last beat: p1_meta, then p2_meta
        meta_t = data.StructLayout({"base": range(D), "stored": range(D + 1), "overflow": 1,
                                    "head_last": 1, "th_r": len(self.th_r)})
        p1_meta, p2_meta = Signal(meta_t), Signal(meta_t)
        with m.If(store):
            m.d.sync += wptr.eq(self._wrap(wptr, D))
        with m.If(take):
            with m.If(first):
                m.d.sync += [x.th_r.eq(self.th_r), x.base.eq(wptr)]
            with m.If(pay.first != first):
                self._raise(m, x, 2)                     # framing broken
            with m.If(beat == D):
                self._raise(m, x, 1)                     # the row is longer than the memory
            with m.If(pay.last):
                m.d.sync += [beat.eq(0), x.over.eq(0),
                             p1_meta.base.eq(Mux(first, wptr, x.base)),
                             p1_meta.stored.eq(Mux(beat >= D, D, beat + 1)),
                             p1_meta.overflow.eq(x.over | (beat >= D)),
                             p1_meta.head_last.eq(pay.head_last),
                             p1_meta.th_r.eq(Mux(first, self.th_r, x.th_r)),
                             x.row_in_head.eq(Mux(pay.head_last, 0, x.row_in_head + 1)),
                             x.head_no.eq(x.head_no + pay.head_last)]
            with m.Else():
                m.d.sync += beat.eq(Mux(beat <= D, beat + 1, beat))
                with m.If(beat >= D):
                    m.d.sync += x.over.eq(1)
        m.d.sync += p2_meta.eq(p1_meta)
        # the lane pipeline: p1 (per lane), half the trees, p2 (the rest, the accumulators)
        p1_valid, p1_first, p1_last, p1_any = Signal(), Signal(), Signal(), Signal()
        p1_prod = [Signal(x.prod_bits, name=f"p1_prod_{j}") for j in range(N)]
        p1_lo = [Signal(signed(sb), name=f"p1_lo_{j}") for j in range(N)]
        p1_hi = [Signal(signed(sb), name=f"p1_hi_{j}") for j in range(N)]
        m.d.sync += [p1_valid.eq(take), p1_first.eq(first), p1_last.eq(pay.last)]
        # the lanes' registers load every cycle (``p1_valid`` says which beats count): no
        # enable from the handshake, whose ``take`` would otherwise fan out to every one
        m.d.sync += p1_any.eq(pay.valid.any())
        for j in range(N):
            e, v = pay.entry[j], pay.valid[j]
            m.d.sync += [p1_prod[j].eq(Mux(v, e.weight * e.count, 0)),
                         p1_lo[j].eq(Mux(v, e.score, x.smax_c)),
                         p1_hi[j].eq(Mux(v, e.score, x.smin_c))]
        x.half = half = (exact_log2(N) + 1) // 2
        p2_valid, p2_first, p2_last, p2_any = Signal(), Signal(), Signal(), Signal()
        m.d.sync += [p2_valid.eq(p1_valid), p2_first.eq(p1_first), p2_last.eq(p1_last),
                     p2_any.eq(p1_any)]
        p2 = {}
        for key, items, op in (("sum", p1_prod, _add), ("min", p1_lo, _lesser),
                               ("max", p1_hi, _greater)):
            part = reduce_tree(m, items, op, f"p1_{key}", levels=half)
            p2[key] = reduce_tree(m, register(m, part, f"p2_{key}"), op, f"p2_{key}")
        # p3: the beat's sum, minimum and maximum registered before the row's running ones
        # (the rest of the beat's trees, then the running compare, were the unit's critical
        # path): a cycle more from a row's last beat to its statistics
        p3_valid, p3_first, p3_last, p3_any = Signal(), Signal(), Signal(), Signal()
        m.d.sync += [p3_valid.eq(p2_valid), p3_first.eq(p2_first), p3_last.eq(p2_last),
                     p3_any.eq(p2_any)]
        p3_meta = Signal.like(p2_meta)
        m.d.sync += p3_meta.eq(p2_meta)
        p3 = {key: register(m, [v], f"p3_{key}")[0] for key, v in p2.items()}
        total = Signal(self.sum_bits)
        smin = Signal(signed(sb), init=x.smax_c)
        smax = Signal(signed(sb), init=x.smin_c)
        any_valid = Signal()
        n_total, n_min, n_max, n_any = (Signal.like(total), Signal.like(smin),
                                        Signal.like(smax), Signal())
        m.d.comb += [
            n_total.eq(Mux(p3_first, 0, total) + p3["sum"]),
            n_min.eq(_lesser(Mux(p3_first, x.smax_c, smin), p3["min"])),
            n_max.eq(_greater(Mux(p3_first, x.smin_c, smax), p3["max"])),
            n_any.eq(Mux(p3_first, 0, any_valid) | p3_any)]
        with m.If(p3_valid):
            m.d.sync += [total.eq(n_total), smin.eq(n_min), smax.eq(n_max),
                         any_valid.eq(n_any)]
        # a finished row's statistics (s1)
        x.s1_valid = Signal()
        x.s1 = SimpleNamespace(total=Signal.like(total), smin=Signal.like(smin),
                               smax=Signal.like(smax), any=Signal(), meta=Signal(meta_t))
        m.d.sync += x.s1_valid.eq(p3_valid & p3_last)
        with m.If(p3_valid & p3_last):
            m.d.sync += [x.s1.total.eq(n_total), x.s1.smin.eq(n_min), x.s1.smax.eq(n_max),
                         x.s1.any.eq(n_any), x.s1.meta.eq(p3_meta)]
        x.p1_valid, x.p2_valid, x.p3_valid = p1_valid, p2_valid, p3_valid

    def _bounds(self, m, x, acc, r1, smin, name):
        """The P bounds ``smin + ((acc - d·r1) >> log2 B)``, d = 0..P-1 (comb)."""
        sb = self._score_bits
        out = []
        for d in range(self._pass):
            lo = Signal(signed(sb + 2), name=f"{name}_{d}")
            m.d.comb += lo.eq(smin + ((acc - _times(r1, d)).as_signed() >> x.blog))
            out.append(lo)
        return out

    def _prepare(self, m, x):
        """s2: the threshold's product and the score range; then the first pass's bounds and
        the row into the walk's queue."""
        sb, s1 = self._score_bits, x.s1
        x.s2_valid = Signal()
        th_prod = Signal(self.sum_bits + self._th_r_frac_bits + 1)
        r1 = Signal(sb + 1)
        s2_smin, s2_smax = Signal(signed(sb)), Signal(signed(sb))
        s2_any, s2_meta = Signal(), Signal.like(s1.meta)
        m.d.sync += [x.s2_valid.eq(x.s1_valid), th_prod.eq(s1.total * s1.meta.th_r),
                     r1.eq(s1.smax - s1.smin + 1), s2_smin.eq(s1.smin), s2_smax.eq(s1.smax),
                     s2_any.eq(s1.any), s2_meta.eq(s1.meta)]
        rec = Signal(x.row_t)
        acc = Signal(sb + 1 + x.blog)
        m.d.comb += acc.eq((r1 << x.blog) - r1)
        lo = self._bounds(m, x, acc, r1, s2_smin, "first_lo")
        m.d.comb += [rec.base.eq(s2_meta.base), rec.stored.eq(s2_meta.stored),
                     rec.overflow.eq(s2_meta.overflow), rec.any.eq(s2_any),
                     rec.head_last.eq(s2_meta.head_last),
                     rec.th.eq(th_prod >> self._th_r_frac_bits), rec.smin.eq(s2_smin),
                     rec.r1.eq(r1), rec.acc.eq(acc), rec.hi.eq(s2_smax + 1),
                     x.fifo.w_data.eq(rec.as_value()), x.fifo.w_en.eq(x.s2_valid)]
        m.d.comb += [rec.lo[d].eq(lo[d]) for d in range(self._pass)]

    # ------------------------------------------------------------------ walk

    def _walk(self, m, x):
        """Two rows at a time: their passes (P buckets each, w1-w3) interleave on the read
        port, each row decides its exit when its pass has drained."""
        N, D, B, P, sb = self._lanes, x.D, self._buckets, self._pass, self._score_bits
        NB, cb = self.CODE_BANKS, self.code_bits
        perf, head = self.perf, x.head
        S = self.sum_bits
        ctx = []
        for c in range(2):
            cx = SimpleNamespace(
                row=Signal(x.row_t, name=f"c{c}_row"), k=Signal(range(B), name=f"c{c}_k"),
                # th less the running sum and the pass's sums up to bucket d: the row exits
                # at the first d where it is below zero (a sign bit, where the running sum
                # plus the pass's sum compared with th was two carry chains in the decision)
                rem=[Signal(signed(S + 1), name=f"c{c}_rem_{d}") for d in range(P)],
                rptr=Signal(range(D), name=f"c{c}_rptr"),
                wbeat=Signal(range(D + 1), name=f"c{c}_wbeat"),
                bank=Signal(range(NB), name=f"c{c}_bank"),
                busy=Signal(name=f"c{c}_busy"),          # holds a row
                pend=Signal(name=f"c{c}_pend"),          # a pass waits for the read port
                drain=Signal(name=f"c{c}_drain"),        # its pass is read, not yet decided
                nlo=[Signal(signed(sb + 2), name=f"c{c}_next_lo_{d}") for d in range(P)],
                acc_next=Signal(signed(sb + 2 + x.blog), name=f"c{c}_acc_next"),
                over=Signal(P, name=f"c{c}_over"), exit=Signal(range(P + 1), name=f"c{c}_exit"),
                ready=Signal(name=f"c{c}_ready"), decide=Signal(name=f"c{c}_decide"))
            m.d.comb += cx.acc_next.eq(cx.row.acc - _times(cx.row.r1, P))
            m.d.sync += [a.eq(b) for a, b in zip(
                cx.nlo, self._bounds(m, x, cx.acc_next, cx.row.r1, cx.row.smin, f"c{c}_lo"))]
            # the exit: the first d whose running sum exceeds th, or bucket 0
            for d in range(P):
                m.d.comb += cx.over[d].eq((cx.rem[d] < 0) |
                                          ((cx.k == P - 1) if d == P - 1 else 0))
            m.d.comb += cx.exit.eq(P - sum(cx.over[d].as_unsigned() for d in range(P)))
            ctx.append(cx)
        old = Signal()        # the context holding the older row (when both hold one)
        cur = Signal()        # the context whose pass is being read
        issuing = Signal()

        # the pass pipeline: issue -> w1 (the word read) -> w1r (registered) -> w2 (codes,
        # products) -> w3 (sums); each stage carries its context, w1 and w1r the pass's bounds
        issue, word, ictx = Signal(), Signal(range(D)), Signal()
        w1_valid, w1_word, w1_ctx = Signal(), Signal(range(D)), Signal()
        w1_lo = [Signal(signed(sb + 2), name=f"w1_lo_{d}") for d in range(P)]
        w1_hi = Signal(signed(sb + 2))
        m.d.sync += [w1_valid.eq(issue), w1_word.eq(word), w1_ctx.eq(ictx)]
        for c, cx in enumerate(ctx):
            with m.If(ictx == c):
                m.d.sync += [w1_hi.eq(cx.row.hi)] + [w1_lo[d].eq(cx.row.lo[d])
                                                     for d in range(P)]
        w2_valid, w2_word, w2_ctx = Signal(), Signal(range(D)), Signal()
        w2_code = [Signal(cb, name=f"w2_code_{j}") for j in range(N)]
        w2_mark = [Signal(cb, name=f"w2_mark_{j}") for j in range(N)]
        w2_prod = [Signal(x.prod_bits, name=f"w2_prod_{j}") for j in range(N)]
        # the word read registered (w1r: the block RAM's own output register on an FPGA, no
        # enable or reset, so a flow can absorb it) before the lanes compare it with the bounds
        w1r_valid, w1r_word, w1r_ctx = Signal(), Signal(range(D)), Signal()
        w1r_lo = [Signal(signed(sb + 2), name=f"w1r_lo_{d}") for d in range(P)]
        w1r_hi = Signal(signed(sb + 2))
        w1r_data = Signal.like(x.row_rd.data, name="w1r_data", reset_less=True)
        m.d.sync += [w1r_valid.eq(w1_valid), w1r_word.eq(w1_word), w1r_ctx.eq(w1_ctx),
                     w1r_hi.eq(w1_hi), w1r_data.eq(x.row_rd.data)]
        m.d.sync += [a.eq(b) for a, b in zip(w1r_lo, w1_lo)]
        m.d.sync += [w2_valid.eq(w1r_valid), w2_word.eq(w1r_word), w2_ctx.eq(w1r_ctx)]
        for j in range(N):
            e = w1r_data[j]
            above = e.score >= w1r_hi
            code = sum((e.score < w1r_lo[d]).as_unsigned() for d in range(P))
            m.d.sync += [
                w2_code[j].eq(Mux(e.valid & ~above, code, P)),
                w2_mark[j].eq(Mux(e.valid & (e.count != 0), Mux(above, 0, code), P)),
                w2_prod[j].eq(Mux(e.valid, e.weight * e.count, 0))]
        w2_bank = Signal(range(NB))
        m.d.comb += w2_bank.eq(Mux(w2_ctx, ctx[1].bank, ctx[0].bank))
        m.d.comb += [x.code_wr.addr.eq(w2_bank * D + w2_word), x.code_wr.en.eq(w2_valid)]
        m.d.comb += [x.code_wr.data[j].eq(w2_mark[j]) for j in range(N)]
        w3_valid, w3_ctx = Signal(), Signal()
        m.d.sync += [w3_valid.eq(w2_valid), w3_ctx.eq(w2_ctx)]
        sums = []
        for d in range(P):
            items = [Mux(w2_code[j] <= d, w2_prod[j], 0) for j in range(N)]
            part = reduce_tree(m, items, _add, f"w2_sum{d}", levels=x.half)
            sums.append(reduce_tree(m, register(m, part, f"w3_sum{d}"), _add, f"w3_sum{d}"))
        for c, cx in enumerate(ctx):
            with m.If(w3_valid & (w3_ctx == c)):
                m.d.sync += [a.eq(a - s) for a, s in zip(cx.rem, sums)]
            # a drained pass decides; context 0 first if both could (they cannot: their
            # passes' last reads are in different cycles)
            m.d.comb += cx.ready.eq(cx.drain & ~(w1_valid & (w1_ctx == c)) &
                                    ~(w1r_valid & (w1r_ctx == c)) &
                                    ~(w2_valid & (w2_ctx == c)) & ~(w3_valid & (w3_ctx == c)))
        m.d.comb += [ctx[0].decide.eq(ctx[0].ready),
                     ctx[1].decide.eq(ctx[1].ready & ~ctx[0].ready)]
        deciding = ctx[0].decide | ctx[1].decide
        exiting = [cx.decide & cx.over.any() for cx in ctx]

        # the read port: go on with the current pass, or start the older pending one
        start = Signal()
        pick = Signal()
        m.d.comb += pick.eq(Mux(Mux(old, ctx[1].pend, ctx[0].pend), old, ~old))
        with m.If(issuing):
            m.d.comb += [issue.eq(1), ictx.eq(cur)]
            for c, cx in enumerate(ctx):
                with m.If(cur == c):
                    m.d.comb += [word.eq(cx.wbeat), x.row_rd.addr.eq(cx.rptr)]
                    m.d.sync += [cx.rptr.eq(self._wrap(cx.rptr, D)), cx.wbeat.eq(cx.wbeat + 1)]
                    with m.If(cx.wbeat + 1 == cx.row.stored):
                        m.d.sync += [issuing.eq(0), cx.drain.eq(1)]
        with m.Elif(ctx[0].pend | ctx[1].pend):
            m.d.comb += [issue.eq(1), ictx.eq(pick), start.eq(1), word.eq(0)]
            m.d.sync += cur.eq(pick)
            for c, cx in enumerate(ctx):
                with m.If(pick == c):
                    m.d.comb += x.row_rd.addr.eq(cx.row.base)
                    m.d.sync += [cx.pend.eq(0), cx.rptr.eq(self._wrap(cx.row.base, D)),
                                 cx.wbeat.eq(1)]
                    with m.If(cx.row.stored == 1):
                        m.d.sync += cx.drain.eq(1)
                    with m.Else():
                        m.d.sync += issuing.eq(1)

        # decisions: exit (the row to the marker) or the next pass. A row's words go back to
        # the ring in row order: a row that exits before an older one adds them to held
        held = Signal(range(D + 1))
        rows_inc, refused_inc = Signal(), Signal()
        for c, cx in enumerate(ctx):
            with m.If(cx.decide):
                m.d.sync += [cx.drain.eq(0), perf.entries_read.eq(
                    perf.entries_read + cx.row.stored * N)]
                with m.If(cx.over.any()):
                    m.d.sync += [
                        perf.buckets_visited.eq(perf.buckets_visited + (B - 1 - cx.k)
                                                + cx.exit + 1),
                        perf.buckets_skipped.eq(perf.buckets_skipped + cx.k - cx.exit),
                        cx.busy.eq(0), old.eq(1 - c)]
                    self._push(m, x, cx.bank, cx.exit, cx.row)
                    with m.If((old == c) | ~ctx[1 - c].busy):
                        m.d.comb += x.release.eq(cx.row.stored + held)
                        m.d.sync += held.eq(0)
                    with m.Else():
                        m.d.sync += held.eq(held + cx.row.stored)
                    m.d.comb += rows_inc.eq(1)
                with m.Else():
                    m.d.sync += [cx.k.eq(cx.k - P), cx.row.acc.eq(cx.acc_next),
                                 cx.row.hi.eq(cx.row.lo[P - 1]), cx.pend.eq(1)]
                    m.d.sync += [cx.row.lo[d].eq(cx.nlo[d]) for d in range(P)]
                    # the pass's whole sum joins the running sum
                    m.d.sync += [a.eq(cx.rem[P - 1]) for a in cx.rem]

        # a new row from the queue: into a free context and the next code bank
        x.next_bank = next_bank = Signal(range(NB))
        free = Signal()
        into = Signal()                 # the free context it goes into
        m.d.comb += [free.eq(~ctx[0].busy | ~ctx[1].busy), into.eq(ctx[0].busy)]
        skip = head.overflow | ~head.any
        bank_ok = ~x.bank_used.bit_select(next_bank, 1)
        with m.If(x.fifo.r_rdy & bank_ok & Mux(skip, ~deciding, free)):
            m.d.comb += [x.fifo.r_en.eq(1), x.took.eq(1)]
            m.d.sync += [x.bank_used.bit_select(next_bank, 1).eq(1),
                         next_bank.eq(Mux(next_bank == NB - 1, 0, next_bank + 1))]
            with m.If(skip):
                with m.If(head.overflow):
                    m.d.comb += refused_inc.eq(1)
                self._push(m, x, next_bank, P, head)
                m.d.comb += rows_inc.eq(1)
                with m.If(ctx[0].busy | ctx[1].busy):
                    m.d.sync += held.eq(held + head.stored)
                with m.Else():
                    m.d.comb += x.release.eq(head.stored)
            with m.Else():
                for c, cx in enumerate(ctx):
                    other = ctx[1 - c]
                    with m.If(into == c):
                        m.d.sync += [cx.busy.eq(1), cx.pend.eq(1),
                                     old.eq(Mux(other.busy & ~exiting[1 - c], 1 - c, c))]
        # a free context holds the queue's head (its row, bank, first bucket and th), so
        # taking the row sets only its flags: the take's conditions stay out of these wide
        # registers' inputs
        for cx in ctx:
            with m.If(~cx.busy):
                m.d.sync += [cx.row.eq(head), cx.k.eq(B - 1), cx.bank.eq(next_bank)]
                m.d.sync += [a.eq(head.th) for a in cx.rem]
        m.d.sync += [perf.rows.eq(perf.rows + rows_inc),
                     perf.rows_refused.eq(perf.rows_refused + refused_inc)]
        x.walk_busy = ctx[0].busy | ctx[1].busy

    def _push(self, m, x, bank, exit_code, rec):
        """Hand a row to the marker through its code bank's slot."""
        for b in range(self.CODE_BANKS):
            with m.If(bank == b):
                m.d.sync += [x.slot[b].stored.eq(rec.stored), x.slot[b].exit.eq(exit_code),
                             x.slot[b].overflow.eq(rec.overflow),
                             x.slot[b].head_last.eq(rec.head_last),
                             x.slot_full[b].eq(1)]

    # ------------------------------------------------------------------ mark and emit

    def _mark(self, m, x):
        """CLEAR (after reset), then per row: OR its marks into the union (MARK); at a head's
        end E_READ, E_LOAD, E_BITS, E_SUM (emission)."""
        N, D, P = self._lanes, x.D, self._pass
        perf = self.perf
        uni_wr, uni_rd, code_rd = x.uni_wr, x.uni_rd, x.code_rd
        NB = self.CODE_BANKS
        m_bank = Signal(range(NB))
        cur = x.slot[m_bank]
        mw = Signal(range(D + 1))
        m1_valid, m1_addr = Signal(), Signal(range(D))
        clr = Signal(range(D + 1))
        hwm = Signal(range(D + 1))             # union words touched by this head
        e_w = Signal(range(D + 1))
        wbits = Signal(N)
        n_sel = Signal(ceil_log2(self._row_entries + 1) + 1)
        lowest = Signal(N)
        m.d.comb += lowest.eq(wbits & (~wbits + 1))
        low_idx = Signal(max(1, exact_log2(N)))
        m.d.comb += low_idx.eq(reduce_tree(m, [Mux(lowest[j], j, 0) for j in range(N)],
                                           lambda a, b: a | b, "e_idx") if N > 1 else 0)
        marks = Signal(N)
        m.d.comb += marks.eq(Cat(code_rd.data[j] <= cur.exit for j in range(N)))
        m.d.sync += m1_valid.eq(0)

        def read(w):
            m.d.comb += [code_rd.addr.eq(m_bank * D + w), uni_rd.addr.eq(w)]
            m.d.sync += [m1_valid.eq(1), m1_addr.eq(w), mw.eq(w + 1)]

        def row_end():
            m.d.sync += [x.slot_full.bit_select(m_bank, 1).eq(0),
                         x.bank_used.bit_select(m_bank, 1).eq(0),
                         m_bank.eq(Mux(m_bank == NB - 1, 0, m_bank + 1))]
            with m.If(~cur.overflow & (cur.stored > hwm)):
                m.d.sync += hwm.eq(cur.stored)
            with m.If(cur.head_last):
                m.d.sync += [e_w.eq(0), n_sel.eq(0)]
                m.next = "E_READ"
            with m.Else():
                m.next = "IDLE"

        x.mark_busy = Signal()
        with m.FSM(name="mark", init="CLEAR"):
            with m.State("CLEAR"):
                m.d.comb += [uni_wr.addr.eq(clr), uni_wr.data.eq(0), uni_wr.en.eq(1)]
                m.d.sync += clr.eq(clr + 1)
                with m.If(clr == D - 1):
                    m.next = "IDLE"

            with m.State("IDLE"):
                with m.If(x.slot_full.bit_select(m_bank, 1)):
                    with m.If(cur.exit == P):
                        row_end()                        # nothing to mark
                    with m.Else():
                        read(0)
                        m.next = "MARK"

            with m.State("MARK"):
                m.d.comb += x.mark_busy.eq(1)
                m.d.comb += [uni_wr.addr.eq(m1_addr), uni_wr.data.eq(uni_rd.data | marks),
                             uni_wr.en.eq(m1_valid)]
                with m.If(mw < cur.stored):
                    read(mw)
                with m.Else():
                    row_end()

            with m.State("E_READ"):
                m.d.comb += [x.mark_busy.eq(1), uni_rd.addr.eq(e_w)]
                with m.If(e_w >= hwm):
                    m.next = "E_SUM"
                with m.Else():
                    m.next = "E_LOAD"

            with m.State("E_LOAD"):
                m.d.comb += x.mark_busy.eq(1)
                m.d.sync += wbits.eq(uni_rd.data)
                m.d.comb += [uni_wr.addr.eq(e_w), uni_wr.data.eq(0), uni_wr.en.eq(1)]
                m.next = "E_BITS"

            with m.State("E_BITS"):
                m.d.comb += x.mark_busy.eq(1)
                with m.If(wbits == 0):
                    m.d.sync += e_w.eq(e_w + 1)
                    m.next = "E_READ"
                with m.Else():
                    cluster = self.o.payload.cluster
                    m.d.comb += [self.o.valid.eq(1),
                                 cluster.eq(Cat(low_idx, e_w)[:len(cluster)]
                                            if N > 1 else e_w),
                                 self.o.payload.count.eq(n_sel + 1)]
                    with m.If(self.o.ready):
                        m.d.sync += [wbits.eq(wbits & ~lowest), n_sel.eq(n_sel + 1)]
                    with m.Else():
                        m.d.sync += perf.stalled.eq(perf.stalled + 1)

            with m.State("E_SUM"):
                m.d.comb += [x.mark_busy.eq(1), self.o.valid.eq(1),
                             self.o.payload.last.eq(1), self.o.payload.count.eq(n_sel)]
                with m.If(self.o.ready):
                    m.d.sync += hwm.eq(0)
                    m.next = "IDLE"
                with m.Else():
                    m.d.sync += perf.stalled.eq(perf.stalled + 1)

    def _busy(self, m, x):
        """busy: a cycle in which any stage holds a row (a beat taken, the receive and
        threshold pipelines, the walk's queue, a pass, a row for the marker, marking or
        emission)."""
        busy = (x.take | x.p1_valid | x.p2_valid | x.p3_valid | x.s1_valid | x.s2_valid |
                x.fifo.r_rdy | x.walk_busy | x.slot_full.any() | x.mark_busy)
        with m.If(busy):
            m.d.sync += self.perf.busy.eq(self.perf.busy + 1)


def _schedule(u, rows, head_selected, clearing) -> dict:
    """:meth:`WicsumThresholdUnit.schedule`: the RTL's stage rules stepped a cycle at a time
    (the state at the start of a cycle decides what each stage does in it)."""
    N, D, P, NB = u.lanes, u.row_entries // u.lanes, u.pass_buckets, u.CODE_BANKS
    rows = [dict(nb=max(1, -(-n // N)), skip=bool(refused) or not any_valid,
                 passes=u.passes(v), head_last=hl)
            for n, v, refused, any_valid, hl in rows]
    emits, words, sel = [], 0, iter(head_selected)
    for r in rows:
        r["stored"] = min(r["nb"], D)
        if r["nb"] <= D:
            words = max(words, r["stored"])
        if r["head_last"]:
            emits.append(u.emit_cycles(words, len(next(sel))))
            words = 0
    emits = iter(emits)
    first_beats, closes, takes, busy, trace = [], [], {}, 0, []
    r_row = r_beat = inflight = occupied = 0       # receive
    fifo = []                                      # (ready cycle, row) for the walk
    ctx = [None, None]       # walk contexts: {row, state PEND/ISSUE/DRAIN, read, done, last}
    old = cur = held = 0
    issuing = False
    next_bank, used, slot = 0, [False] * NB, [None] * NB
    m_state, m_end, m_bank = "IDLE", 0, 0          # marker: IDLE, MARK or EMIT until m_end
    t = 0
    while True:
        now = [None if c is None else dict(c) for c in ctx]
        slot_now, used_now = list(slot), list(used)
        d_inflight = d_occupied = 0
        # receive: a beat a cycle while the ring has room and at most two rows wait
        if r_row < len(rows) and (r_beat > 0 or inflight < 3) and (occupied < D or r_beat >= D):
            r = rows[r_row]
            if r_beat == 0:
                first_beats.append(t)
                d_inflight += 1
            d_occupied += r_beat < D
            takes[t] = r_beat == r["nb"] - 1
            if takes[t]:
                fifo.append((t + u.RECEIVE_LATENCY, r_row))
                r_row, r_beat = r_row + 1, 0
            else:
                r_beat += 1
        # a beat in the receive pipeline (take to p3), a row's last one in s1 and s2
        b = (any(t - k in takes for k in range(4))
             or any(takes.get(t - k, False) for k in range(4, u.RECEIVE_LATENCY))
             or any(f[0] <= t for f in fifo) or any(c is not None for c in now)
             or any(s is not None for s in slot_now))
        # walk: a drained pass decides (context 0 first)
        deciding, exiting = None, [False, False]
        for c in (0, 1):
            x = now[c]
            if x is not None and x["state"] == "DRAIN" and t >= x["last"] + u.WALK_OVERHEAD:
                deciding = c
                break
        if deciding is not None:
            x = ctx[deciding]
            x["done"] += 1
            if x["done"] == rows[x["row"]]["passes"]:
                slot[x["bank"]] = x["row"]
                if old == deciding or now[1 - deciding] is None:
                    d_occupied -= rows[x["row"]]["stored"] + held
                    held = 0
                else:
                    held += rows[x["row"]]["stored"]
                ctx[deciding] = None
                exiting[deciding] = True
                old = 1 - deciding
            else:
                x["state"] = "PEND"
        # walk: the read port
        if issuing:
            x, r = ctx[cur], rows[ctx[cur]["row"]]
            x["read"] += 1
            if x["read"] == r["stored"]:
                x["state"], x["last"], issuing = "DRAIN", t, False
        else:
            pend = [now[c] is not None and now[c]["state"] == "PEND" for c in (0, 1)]
            if any(pend):
                p = old if pend[old] else 1 - old
                x, r = ctx[p], rows[ctx[p]["row"]]
                x["read"] = 1
                if r["stored"] == 1:
                    x["state"], x["last"] = "DRAIN", t
                else:
                    x["state"], issuing, cur = "ISSUE", True, p
        # walk: a new row from the queue into a free context and the next bank
        if fifo and fifo[0][0] <= t and not used_now[next_bank]:
            k = fifo[0][1]
            r = rows[k]
            free = [c for c in (0, 1) if now[c] is None]
            if r["skip"] and deciding is None:
                fifo.pop(0)
                slot[next_bank] = k
                if any(c is not None for c in now):
                    held += r["stored"]
                else:
                    d_occupied -= r["stored"]
            elif not r["skip"] and free:
                fifo.pop(0)
                c = free[0]
                ctx[c] = dict(row=k, state="PEND", read=0, done=0, last=0, bank=next_bank)
                other = now[1 - c]
                old = 1 - c if other is not None and not exiting[1 - c] else c
            else:
                k = None
            if k is not None:
                d_inflight -= 1
                used[next_bank] = True
                next_bank = (next_bank + 1) % NB
        # mark and emit
        end = None
        if m_state == "IDLE" and slot_now[m_bank] is not None and t >= clearing:
            k = slot_now[m_bank]
            if rows[k]["skip"]:
                end = t
            else:
                m_state, m_end = "MARK", t + rows[k]["stored"]
        elif m_state == "MARK":
            b = True
            if t == m_end:
                end = t
        elif m_state == "EMIT":
            b = True
            if t == m_end:
                m_state = "IDLE"
                closes.append(t)
        if end is not None:
            k = slot_now[m_bank]
            slot[m_bank], used[m_bank] = None, False
            m_bank = (m_bank + 1) % NB
            if rows[k]["head_last"]:
                m_state, m_end = "EMIT", t + next(emits)
            else:
                m_state = "IDLE"
        inflight += d_inflight
        occupied += d_occupied
        busy += b
        trace.append(int(b))
        t += 1
        if (r_row == len(rows) and not fifo and ctx == [None, None] and m_state == "IDLE"
                and all(s is None for s in slot)):
            return {"first_beats": first_beats, "closes": closes, "busy": busy, "done": t,
                    "trace": trace}
