"""DRE WiCSum threshold unit (WTU): bucketed early-exit selection, bit-exact with the golden
model (``golden.wtu.wtu_reference``, DESIGN.md D8 and D9)."""

from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from vrex.rules import wtu_rules

from ..lib import counter_layout, reduce_tree, register

__all__ = ["WicsumThresholdUnit"]

_add = lambda a, b: a + b
_lesser = lambda a, b: Mux(a < b, a, b)
_greater = lambda a, b: Mux(a > b, a, b)


class WicsumThresholdUnit(wiring.Component):
    """WiCSum with bucketed early exit over query rows, united per KV head.

    Computes what ``golden.wtu.wtu_reference`` computes. Rows arrive on ``i`` as beats of
    ``lanes`` candidates (score, weight, count; ``valid`` marks real entries), framed by
    ``first``/``last``; ``head_last`` on a row's beats closes the KV head's group. Candidate j of
    a row is lane ``j mod lanes`` of beat ``j // lanes``.

    Receive pass: each beat is written into the score memory (``row_entries`` entries) while a
    pipeline accumulates the row's minimum and maximum score and ``Σ weight·count``. Threshold:
    ``th = (Σ · th_r) >> th_r_frac_bits``. Selection: buckets ``lo_k = smin + ((k · (smax - smin
    + 1)) >> log2 B)`` from ``k = B-1`` down; per bucket one pass over the stored row, where each
    lane's two comparators test ``lo_k <= s < lo_{k+1}``, its multiplier forms ``w·n``, an adder
    tree sums the bucket, and the bucket's entries with ``n > 0`` are marked into the head's
    union bitmask; the walk exits after the first bucket whose running sum exceeds ``th``. At
    ``head_last`` the union is emitted on ``o`` as ascending candidate indices (``last`` = 0,
    ``count`` = 1, 2, ...) and one closing beat (``last`` = 1, ``count`` = the head's total), and
    cleared on the way. A row of more than ``row_entries`` entries is refused: it is consumed,
    selects nothing, raises the sticky ``error`` and counts in ``rows_refused`` (refusing keeps
    the unit's timing and memory fixed; tiling a long row would change its WiCSum, since the
    buckets span the whole row's score range).

    Timing, with ``nb = ceil(n / lanes)`` beats for a row of n entries: ``nb`` cycles to
    receive (one beat a cycle), :attr:`receive_latency` to finish the preprocess and
    threshold, then ``nb +`` :attr:`bucket_overhead` per bucket visited, ``visited`` between 1
    and B (:meth:`row_cycles`). Emission of a head: 3 cycles per union word touched, one per
    selected id, plus 2 (:meth:`emit_cycles`).

    Parameters (keyword-only, all required; :meth:`from_config` takes them from the build's
    ``Config``; checked by ``vrex.rules.wtu_rules`` with exact messages)
        ``lanes`` candidates per beat and per cycle of a pass (a power of two); ``buckets`` B
        (a power of two); ``row_entries`` the score memory (a multiple of lanes);
        ``score_bits`` (at least 2), ``weight_bits``, ``count_bits`` entry widths;
        ``th_r_frac_bits`` fractional bits of Th_r; ``counter_bits`` counter width.

    Attributes
        ``i`` (in stream: ``entry[lanes]`` of ``score``, ``weight``, ``count``; ``valid``;
        ``first``, ``last``, ``head_last``); ``o`` (out stream: ``cluster``, ``count``,
        ``last``); ``th_r`` run-time register (u1.th_r_frac_bits,
        ``Config.block_registers("wtu")``), taken with each row's first beat; ``error`` sticky, with the first error's
        ``error_code`` (1 a row too long, 2 broken first/last framing), ``error_head`` (heads
        closed before it since reset) and ``error_row`` (its row in that head); ``perf``
        counters: ``rows``,
        ``buckets_visited``, ``buckets_skipped`` by early exit, ``entries_read``,
        ``rows_refused``, ``busy`` and ``stalled`` cycles.
    """

    PERF = ("rows", "buckets_visited", "buckets_skipped", "entries_read", "rows_refused",
            "busy", "stalled")

    def __init__(self, *, lanes: int, buckets: int, row_entries: int, score_bits: int,
                 weight_bits: int, count_bits: int, th_r_frac_bits: int, counter_bits: int):
        wtu_rules(lanes=lanes, buckets=buckets, row_entries=row_entries, score_bits=score_bits,
                  weight_bits=weight_bits, count_bits=count_bits,
                  th_r_frac_bits=th_r_frac_bits, counter_bits=counter_bits)
        self._lanes, self._buckets, self._row_entries = lanes, buckets, row_entries
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
    row_entries = property(lambda self: self._row_entries)
    th_r_frac_bits = property(lambda self: self._th_r_frac_bits)

    @property
    def sum_bits(self) -> int:
        """Width of Σ weight·count over a full row."""
        return self._weight_bits + self._count_bits + max(1, ceil_log2(self._row_entries))

    @property
    def memory_bits(self) -> int:
        entry = self._score_bits + self._weight_bits + self._count_bits + 1
        return self._row_entries * entry + self._row_entries

    @property
    def receive_latency(self) -> int:
        """Cycles from a row's last beat to its first bucket pass: the preprocess pipeline
        (2, its lane trees split by a register), draining, threshold and bounds."""
        return 5

    @property
    def bucket_overhead(self) -> int:
        """Cycles a bucket pass adds to its ``nb`` reads: the walk pipeline (3) and the exit
        decision."""
        return 4

    @property
    def clear_cycles(self) -> int:
        """Cycles after reset before the unit takes a row (it clears its union memory)."""
        return self._row_entries // self._lanes

    def row_cycles(self, n: int, visited: int) -> int:
        """Cycles from a row's first beat to the unit taking the next row's first beat."""
        nb = max(1, -(-n // self._lanes))
        return nb + self.receive_latency + visited * (nb + self.bucket_overhead)

    def emit_cycles(self, words: int, selected: int) -> int:
        """Cycles to emit a head whose rows touched ``words`` union words (the longest row's
        beats) and selected ``selected`` ids, ``o`` ready."""
        return 3 * words + selected + 2

    def elaborate(self, platform):
        m = Module()
        x = SimpleNamespace()            # the signals the sections below share
        self._memories(m, x)
        self._receive(m, x)
        self._walk(m, x)
        self._emission(m, x)
        self._control(m, x)
        return m

    def _memories(self, m, x):
        N = self._lanes
        x.D = self._row_entries // N
        x.blog = exact_log2(self._buckets)
        sb = self._score_bits
        x.prod_bits = self._weight_bits + self._count_bits
        x.smax_c, x.smin_c = (1 << (sb - 1)) - 1, -(1 << (sb - 1))
        store_t = data.StructLayout({"score": signed(sb), "weight": self._weight_bits,
                                     "count": self._count_bits, "valid": 1})
        m.submodules.rowmem = rowmem = memory.Memory(
            shape=data.ArrayLayout(store_t, N), depth=x.D, init=[])
        m.submodules.unimem = unimem = memory.Memory(shape=N, depth=x.D, init=[])
        row_wr, row_rd = rowmem.write_port(), rowmem.read_port()
        uni_wr, uni_rd = unimem.write_port(), unimem.read_port()
        x.row_wr, x.row_rd, x.uni_wr, x.uni_rd = row_wr, row_rd, uni_wr, uni_rd

    def _receive(self, m, x):
        """Store the row; accumulate min, max and Σ w·n through a split lane tree (p1, p2)."""
        N, D, sb = self._lanes, x.D, self._score_bits
        x.beat = beat = Signal(range(D + 2))   # beats received of this row (saturates at D+1)
        x.nbeats = Signal(range(D + 1))
        x.overflow = Signal()
        x.head_last = Signal()
        x.row_in_head = Signal(16)      # rows of the current head done (for error_row)
        x.head_no = Signal(16)          # heads closed since reset (for error_head)
        p1_valid = Signal()
        p1_prod = [Signal(x.prod_bits, name=f"p1_prod_{j}") for j in range(N)]
        p1_lo = [Signal(signed(sb), name=f"p1_lo_{j}") for j in range(N)]
        p1_hi = [Signal(signed(sb), name=f"p1_hi_{j}") for j in range(N)]
        p1_any = Signal()
        x.total = total = Signal(self.sum_bits)
        x.smin = smin = Signal(signed(sb), init=x.smax_c)
        x.smax = smax = Signal(signed(sb), init=x.smin_c)
        x.any_valid = any_valid = Signal()
        x.take = take = Signal()
        x.th_r = Signal.like(self.th_r)
        m.d.comb += take.eq(self.i.valid & self.i.ready)
        pay = self.i.payload
        m.d.comb += [x.row_wr.addr.eq(beat), x.row_wr.en.eq(take & (beat < D))]
        for j in range(N):
            e = pay.entry[j]
            m.d.comb += [x.row_wr.data[j].score.eq(e.score),
                         x.row_wr.data[j].weight.eq(e.weight),
                         x.row_wr.data[j].count.eq(e.count),
                         x.row_wr.data[j].valid.eq(pay.valid[j])]
        m.d.sync += p1_valid.eq(take & (beat < D))
        with m.If(take):
            m.d.sync += p1_any.eq(pay.valid.any())
            for j in range(N):
                e, v = pay.entry[j], pay.valid[j]
                m.d.sync += [p1_prod[j].eq(Mux(v, e.weight * e.count, 0)),
                             p1_lo[j].eq(Mux(v, e.score, x.smax_c)),
                             p1_hi[j].eq(Mux(v, e.score, x.smin_c))]
        # the lane trees are split by a register (p2) halfway, for the clock
        x.half = half = (exact_log2(N) + 1) // 2
        p2_valid = Signal()
        p2_any = Signal()
        m.d.sync += [p2_valid.eq(p1_valid), p2_any.eq(p1_any)]
        p2 = {}
        for key, items, op in (("sum", p1_prod, _add), ("min", p1_lo, _lesser),
                               ("max", p1_hi, _greater)):
            part = reduce_tree(m, items, op, f"p1_{key}", levels=half)
            p2[key] = reduce_tree(m, register(m, part, f"p2_{key}"), op, f"p2_{key}")
        row_sum, row_min, row_max = p2["sum"], p2["min"], p2["max"]
        with m.If(p2_valid):
            m.d.sync += [total.eq(total + row_sum), any_valid.eq(any_valid | p2_any)]
            with m.If(row_min < smin):
                m.d.sync += smin.eq(row_min)
            with m.If(row_max > smax):
                m.d.sync += smax.eq(row_max)
        x.p1_valid, x.p2_valid = p1_valid, p2_valid

    def _walk(self, m, x):
        """Threshold, bucket bounds, and one pass over the stored row per bucket (w1-w3)."""
        N, D, B, sb, blog = self._lanes, x.D, self._buckets, self._score_bits, x.blog
        x.th_prod = Signal(self.sum_bits + self._th_r_frac_bits + 1)
        x.th = Signal(self.sum_bits)
        x.r1 = Signal(sb + 1)                   # smax - smin + 1
        x.acc_k = Signal(sb + 1 + blog)         # k · r1
        x.k = Signal(range(B))
        x.lo = lo = Signal(signed(sb + 2))
        x.hi = hi = Signal(signed(sb + 2))
        m.d.comb += lo.eq(x.smin + (x.acc_k >> blog))
        x.running = running = Signal(self.sum_bits)
        x.bsum = bsum = Signal(self.sum_bits)

        x.wbeat = wbeat = Signal(range(D + 1))
        x.issue = Signal()
        w1_valid, w1_addr = Signal(), Signal(range(D))
        x.w1_valid, x.w1_addr = w1_valid, w1_addr
        x.w2_valid = w2_valid = Signal()
        w2_prod = [Signal(x.prod_bits, name=f"w2_prod_{j}") for j in range(N)]
        m.d.sync += [w1_valid.eq(x.issue), w1_addr.eq(wbeat), w2_valid.eq(w1_valid)]
        x.sel = sel = Signal(N)
        for j in range(N):
            e = x.row_rd.data[j]
            inb = Signal(name=f"w1_in_{j}")
            m.d.comb += [inb.eq(e.valid & (e.score >= lo) & (e.score < hi)),
                         sel[j].eq(inb & (e.count != 0))]
            m.d.sync += w2_prod[j].eq(Mux(inb, e.weight * e.count, 0))
        x.w3_valid = w3_valid = Signal()
        m.d.sync += w3_valid.eq(w2_valid)
        part = reduce_tree(m, w2_prod, _add, "w2_sum", levels=x.half)
        bucket_sum = reduce_tree(m, register(m, part, "w3_sum"), _add, "w3_sum")
        with m.If(w3_valid):
            m.d.sync += bsum.eq(bsum + bucket_sum)
        x.running_new = Signal(self.sum_bits)
        m.d.comb += x.running_new.eq(running + bsum)

    def _emission(self, m, x):
        """The union's lowest set bit of a word, as the next selected id."""
        N, D = self._lanes, x.D
        x.hwm = Signal(range(D + 1))           # union words touched by this head
        x.e_w = Signal(range(D + 1))
        x.wbits = wbits = Signal(N)
        x.n_sel = Signal(ceil_log2(self._row_entries + 1) + 1)
        x.lowest = lowest = Signal(N)
        m.d.comb += lowest.eq(wbits & (~wbits + 1))
        x.low_idx = low_idx = Signal(max(1, exact_log2(N)))
        m.d.comb += low_idx.eq(reduce_tree(m, [Mux(lowest[j], j, 0) for j in range(N)],
                                           lambda a, b: a | b, "e_idx") if N > 1 else 0)
        x.clr = Signal(range(D + 1))

    def _control(self, m, x):
        """The row sequencer: clear, receive, drain, threshold, walk, emit."""
        # union memory ports: the walk ORs in its marks, emission and reset clear words
        with m.FSM(init="CLEAR"):
            self._receive_states(m, x)
            self._walk_states(m, x)
            self._emit_states(m, x)

    def _raise(self, m, x, code):
        """Set the sticky error; the first one keeps its code, head and row."""
        m.d.sync += self.error.eq(1)
        with m.If(~self.error):
            m.d.sync += [self.error_code.eq(code), self.error_head.eq(x.head_no),
                         self.error_row.eq(x.row_in_head)]

    def _receive_states(self, m, x):
        """CLEAR (after reset), RECV (a row's beats), DRAIN (the preprocess empties)."""
        D = x.D
        perf, pay = self.perf, self.i.payload
        uni_wr, beat = x.uni_wr, x.beat
        with m.State("CLEAR"):
            m.d.comb += [uni_wr.addr.eq(x.clr), uni_wr.data.eq(0), uni_wr.en.eq(1)]
            m.d.sync += x.clr.eq(x.clr + 1)
            with m.If(x.clr == D - 1):
                m.next = "RECV"

        with m.State("RECV"):
            m.d.comb += self.i.ready.eq(1)
            with m.If(x.take):
                m.d.sync += perf.busy.eq(perf.busy + 1)
                with m.If(beat == 0):
                    m.d.sync += x.th_r.eq(self.th_r)         # Th_r taken with a row's first beat
                with m.If(pay.first != (beat == 0)):
                    self._raise(m, x, 2)                     # framing broken
                with m.If(beat <= D):
                    m.d.sync += beat.eq(beat + 1)
                with m.If(beat >= D):
                    m.d.sync += x.overflow.eq(1)
                with m.If(pay.last):
                    m.d.sync += [x.head_last.eq(pay.head_last), x.nbeats.eq(
                        Mux(beat >= D, D, beat + 1))]
                    m.next = "DRAIN"

        with m.State("DRAIN"):                       # the preprocess pipeline empties
            m.d.sync += perf.busy.eq(perf.busy + 1)
            with m.If(~x.p1_valid & ~x.p2_valid):
                m.d.sync += [x.th_prod.eq(x.total * x.th_r),
                             x.r1.eq(x.smax - x.smin + 1)]
                m.next = "THRESH"

    def _walk_states(self, m, x):
        """THRESH (threshold and the top bucket's bounds), WALK (a pass a bucket, exit)."""
        N, B = self._lanes, self._buckets
        perf = self.perf
        uni_wr, uni_rd, k = x.uni_wr, x.uni_rd, x.k
        with m.State("THRESH"):
            m.d.sync += [perf.busy.eq(perf.busy + 1),
                         x.th.eq(x.th_prod >> self._th_r_frac_bits),
                         x.acc_k.eq((x.r1 << x.blog) - x.r1), k.eq(B - 1),
                         x.hi.eq(x.smax + 1), x.running.eq(0), x.bsum.eq(0),
                         x.wbeat.eq(0)]
            with m.If(x.overflow):
                self._raise(m, x, 1)
                m.d.sync += perf.rows_refused.eq(perf.rows_refused + 1)
                m.next = "ROW_DONE"
            with m.Elif(~x.any_valid):
                m.next = "ROW_DONE"
            with m.Else():
                m.next = "WALK"

        with m.State("WALK"):
            m.d.sync += perf.busy.eq(perf.busy + 1)
            m.d.comb += [x.row_rd.addr.eq(x.wbeat), uni_rd.addr.eq(x.wbeat),
                         uni_wr.addr.eq(x.w1_addr), uni_wr.data.eq(uni_rd.data | x.sel),
                         uni_wr.en.eq(x.w1_valid)]
            with m.If(x.wbeat < x.nbeats):
                m.d.comb += x.issue.eq(1)
                m.d.sync += x.wbeat.eq(x.wbeat + 1)
            with m.Elif(~x.w1_valid & ~x.w2_valid & ~x.w3_valid):
                # the bucket is complete: exit after it, or step to the next one down
                m.d.sync += [perf.buckets_visited.eq(perf.buckets_visited + 1),
                             perf.entries_read.eq(perf.entries_read + x.nbeats * N)]
                with m.If((x.running_new > x.th) | (k == 0)):
                    m.d.sync += perf.buckets_skipped.eq(perf.buckets_skipped + k)
                    m.next = "ROW_DONE"
                with m.Else():
                    m.d.sync += [k.eq(k - 1), x.hi.eq(x.lo), x.acc_k.eq(x.acc_k - x.r1),
                                 x.running.eq(x.running_new), x.bsum.eq(0), x.wbeat.eq(0)]

    def _emit_states(self, m, x):
        """ROW_DONE, then at a head's end E_READ, E_LOAD, E_BITS, E_SUM (emission)."""
        N = self._lanes
        perf = self.perf
        uni_wr, uni_rd, beat = x.uni_wr, x.uni_rd, x.beat
        with m.State("ROW_DONE"):
            m.d.sync += [perf.busy.eq(perf.busy + 1), perf.rows.eq(perf.rows + 1),
                         beat.eq(0), x.overflow.eq(0), x.total.eq(0),
                         x.smin.eq(x.smax_c), x.smax.eq(x.smin_c), x.any_valid.eq(0)]
            with m.If(~x.overflow & (x.nbeats > x.hwm)):
                m.d.sync += x.hwm.eq(x.nbeats)
            m.d.sync += x.row_in_head.eq(Mux(x.head_last, 0, x.row_in_head + 1))
            with m.If(x.head_last):
                m.d.sync += x.head_no.eq(x.head_no + 1)
                m.d.sync += [x.e_w.eq(0), x.n_sel.eq(0)]
                m.next = "E_READ"
            with m.Else():
                m.next = "RECV"

        with m.State("E_READ"):
            m.d.sync += perf.busy.eq(perf.busy + 1)
            m.d.comb += uni_rd.addr.eq(x.e_w)
            with m.If(x.e_w >= x.hwm):
                m.next = "E_SUM"
            with m.Else():
                m.next = "E_LOAD"

        with m.State("E_LOAD"):
            m.d.sync += [perf.busy.eq(perf.busy + 1), x.wbits.eq(uni_rd.data)]
            m.d.comb += [uni_wr.addr.eq(x.e_w), uni_wr.data.eq(0), uni_wr.en.eq(1)]
            m.next = "E_BITS"

        with m.State("E_BITS"):
            m.d.sync += perf.busy.eq(perf.busy + 1)
            with m.If(x.wbits == 0):
                m.d.sync += x.e_w.eq(x.e_w + 1)
                m.next = "E_READ"
            with m.Else():
                cluster = self.o.payload.cluster
                m.d.comb += [self.o.valid.eq(1),
                             cluster.eq(Cat(x.low_idx, x.e_w)[:len(cluster)]
                                        if N > 1 else x.e_w),
                             self.o.payload.count.eq(x.n_sel + 1)]
                with m.If(self.o.ready):
                    m.d.sync += [x.wbits.eq(x.wbits & ~x.lowest), x.n_sel.eq(x.n_sel + 1)]
                with m.Else():
                    m.d.sync += perf.stalled.eq(perf.stalled + 1)

        with m.State("E_SUM"):
            m.d.sync += perf.busy.eq(perf.busy + 1)
            m.d.comb += [self.o.valid.eq(1), self.o.payload.last.eq(1),
                         self.o.payload.count.eq(x.n_sel)]
            with m.If(self.o.ready):
                m.d.sync += x.hwm.eq(0)
                m.next = "RECV"
            with m.Else():
                m.d.sync += perf.stalled.eq(perf.stalled + 1)
