"""DRE WiCSum threshold unit (WTU): bucketed early-exit selection, bit-exact with the golden
model (``golden.wtu.wtu_reference``, DESIGN.md D8 and D9)."""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from .checks import check_pos_int, check_pow2

__all__ = ["WicsumThresholdUnit"]


def _tree(m: Module, items, op, name: str, levels: int | None = None):
    """A balanced tree of ``op`` over ``items`` (each level a named signal); with ``levels``,
    only that many levels, returning the list of partial results."""
    level = 0
    while len(items) > 1 and (levels is None or level < levels):
        nxt = []
        for j in range(0, len(items) - 1, 2):
            v = op(items[j], items[j + 1])
            s = Signal(v.shape(), name=f"{name}_l{level}_{j // 2}")
            m.d.comb += s.eq(v)
            nxt.append(s)
        if len(items) % 2:
            nxt.append(items[-1])
        items = nxt
        level += 1
    return items if levels is not None else items[0]


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

    Cycles, with ``nb = ceil(n / lanes)`` beats for a row of n entries: ``nb`` to receive (one
    beat a cycle), ``receive_latency`` to finish the preprocess and threshold, then
    ``nb + bucket_overhead`` per bucket visited, ``visited`` between 1 and B
    (:meth:`row_cycles`). Emission: ``3`` cycles per union word plus one per id, plus one.
    Counters (``perf``): rows, buckets visited, buckets skipped by early exit, entries read,
    rows refused, busy and stalled cycles.
    """

    receive_latency = 5
    bucket_overhead = 4

    def __init__(self, *, lanes: int = 16, buckets: int = 16, row_entries: int = 4096,
                 score_bits: int = 22, weight_bits: int = 16, count_bits: int = 16,
                 th_r_frac_bits: int = 16, counter_bits: int = 32):
        for name, v in (("row_entries", row_entries), ("score_bits", score_bits),
                        ("weight_bits", weight_bits), ("count_bits", count_bits),
                        ("th_r_frac_bits", th_r_frac_bits), ("counter_bits", counter_bits)):
            check_pos_int(name, v)
        check_pow2("lanes", lanes)
        check_pow2("buckets", buckets)
        if row_entries % lanes:
            raise ValueError(f"row_entries must be a multiple of lanes ({lanes}), "
                             f"not {row_entries!r}")
        if score_bits < 2:
            raise ValueError(f"score_bits must be at least 2, not {score_bits!r}")
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
        self.perf_layout = data.StructLayout({n: counter_bits for n in (
            "rows", "buckets_visited", "buckets_skipped", "entries_read", "rows_refused",
            "busy", "stalled")})
        super().__init__({
            "i": In(stream.Signature(self.in_layout)),
            "o": Out(stream.Signature(self.out_layout)),
            "th_r": In(th_r_frac_bits + 1),
            "error": Out(1),
            "perf": Out(self.perf_layout),
        })

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

    def row_cycles(self, n: int, visited: int) -> int:
        """Cycles from a row's first beat to the unit taking the next row's first beat."""
        nb = max(1, -(-n // self._lanes))
        return nb + self.receive_latency + visited * (nb + self.bucket_overhead)

    @classmethod
    def from_config(cls, cfg, **kw) -> "WicsumThresholdUnit":
        return cls(lanes=cfg.wtu_lanes, buckets=cfg.buckets, row_entries=cfg.wtu_row_entries,
                   score_bits=cfg.score_bits, weight_bits=cfg.weight_bits,
                   count_bits=cfg.count_bits, th_r_frac_bits=cfg.th_r_frac_bits, **kw)

    def elaborate(self, platform):
        m = Module()
        N, B = self._lanes, self._buckets
        D = self._row_entries // N
        blog = exact_log2(B)
        sb = self._score_bits
        prod_bits = self._weight_bits + self._count_bits
        smax_c, smin_c = (1 << (sb - 1)) - 1, -(1 << (sb - 1))
        perf = self.perf

        store_t = data.StructLayout({"score": signed(sb), "weight": self._weight_bits,
                                     "count": self._count_bits, "valid": 1})
        m.submodules.rowmem = rowmem = memory.Memory(
            shape=data.ArrayLayout(store_t, N), depth=D, init=[])
        m.submodules.unimem = unimem = memory.Memory(shape=N, depth=D, init=[])
        row_wr, row_rd = rowmem.write_port(), rowmem.read_port()
        uni_wr, uni_rd = unimem.write_port(), unimem.read_port()

        # --- receive: store the row, accumulate min, max, Σ w·n --------------------------
        beat = Signal(range(D + 2))          # beats received of this row (saturates at D+1)
        nbeats = Signal(range(D + 1))
        overflow = Signal()
        head_last = Signal()
        p1_valid = Signal()
        p1_prod = [Signal(prod_bits, name=f"p1_prod_{j}") for j in range(N)]
        p1_lo = [Signal(signed(sb), name=f"p1_lo_{j}") for j in range(N)]
        p1_hi = [Signal(signed(sb), name=f"p1_hi_{j}") for j in range(N)]
        p1_any = Signal()
        total = Signal(self.sum_bits)
        smin = Signal(signed(sb), init=smax_c)
        smax = Signal(signed(sb), init=smin_c)
        any_valid = Signal()
        take = Signal()
        m.d.comb += take.eq(self.i.valid & self.i.ready)
        pay = self.i.payload
        m.d.comb += [row_wr.addr.eq(beat), row_wr.en.eq(take & (beat < D))]
        for j in range(N):
            e = pay.entry[j]
            m.d.comb += [row_wr.data[j].score.eq(e.score), row_wr.data[j].weight.eq(e.weight),
                         row_wr.data[j].count.eq(e.count), row_wr.data[j].valid.eq(pay.valid[j])]
        m.d.sync += p1_valid.eq(take & (beat < D))
        with m.If(take):
            m.d.sync += p1_any.eq(pay.valid.any())
            for j in range(N):
                e, v = pay.entry[j], pay.valid[j]
                m.d.sync += [p1_prod[j].eq(Mux(v, e.weight * e.count, 0)),
                             p1_lo[j].eq(Mux(v, e.score, smax_c)),
                             p1_hi[j].eq(Mux(v, e.score, smin_c))]
        # the lane trees are split by a register (p2) halfway, for the clock
        add = lambda a, b: a + b
        lesser = lambda a, b: Mux(a < b, a, b)
        greater = lambda a, b: Mux(a > b, a, b)
        half = (exact_log2(N) + 1) // 2
        p2_valid = Signal()
        p2_any = Signal()
        m.d.sync += [p2_valid.eq(p1_valid), p2_any.eq(p1_any)]
        p2 = {}
        for key, items, op in (("sum", p1_prod, add), ("min", p1_lo, lesser),
                               ("max", p1_hi, greater)):
            part = _tree(m, list(items), op, f"p1_{key}", levels=half)
            regs = [Signal(x.shape(), name=f"p2_{key}_{j}") for j, x in enumerate(part)]
            m.d.sync += [r.eq(x) for r, x in zip(regs, part)]
            p2[key] = _tree(m, regs, op, f"p2_{key}")
        row_sum, row_min, row_max = p2["sum"], p2["min"], p2["max"]
        with m.If(p2_valid):
            m.d.sync += [total.eq(total + row_sum), any_valid.eq(any_valid | p2_any)]
            with m.If(row_min < smin):
                m.d.sync += smin.eq(row_min)
            with m.If(row_max > smax):
                m.d.sync += smax.eq(row_max)

        # --- threshold and bucket bounds ------------------------------------------------
        th_prod = Signal(self.sum_bits + self._th_r_frac_bits + 1)
        th = Signal(self.sum_bits)
        r1 = Signal(sb + 1)                   # smax - smin + 1
        acc_k = Signal(sb + 1 + blog)         # k · r1
        k = Signal(range(B))
        lo = Signal(signed(sb + 2))
        hi = Signal(signed(sb + 2))
        m.d.comb += lo.eq(smin + (acc_k >> blog))
        running = Signal(self.sum_bits)
        bsum = Signal(self.sum_bits)

        # --- the bucket walk ----------------------------------------------------------------
        wbeat = Signal(range(D + 1))
        issue = Signal()
        w1_valid, w1_addr = Signal(), Signal(range(D))
        w2_valid = Signal()
        w2_prod = [Signal(prod_bits, name=f"w2_prod_{j}") for j in range(N)]
        m.d.sync += [w1_valid.eq(issue), w1_addr.eq(wbeat), w2_valid.eq(w1_valid)]
        sel = Signal(N)
        for j in range(N):
            e = row_rd.data[j]
            inb = Signal(name=f"w1_in_{j}")
            m.d.comb += [inb.eq(e.valid & (e.score >= lo) & (e.score < hi)),
                         sel[j].eq(inb & (e.count != 0))]
            m.d.sync += w2_prod[j].eq(Mux(inb, e.weight * e.count, 0))
        w3_valid = Signal()
        m.d.sync += w3_valid.eq(w2_valid)
        part = _tree(m, list(w2_prod), add, "w2_sum", levels=half)
        w3_part = [Signal(x.shape(), name=f"w3_sum_{j}") for j, x in enumerate(part)]
        m.d.sync += [r.eq(x) for r, x in zip(w3_part, part)]
        bucket_sum = _tree(m, w3_part, add, "w3_sum")
        with m.If(w3_valid):
            m.d.sync += bsum.eq(bsum + bucket_sum)
        running_new = Signal(self.sum_bits)
        m.d.comb += running_new.eq(running + bsum)

        # --- emission ---------------------------------------------------------------------
        hwm = Signal(range(D + 1))           # union words touched by this head
        e_w = Signal(range(D + 1))
        wbits = Signal(N)
        n_sel = Signal(ceil_log2(self._row_entries + 1) + 1)
        lowest = Signal(N)
        m.d.comb += lowest.eq(wbits & (~wbits + 1))
        low_idx = Signal(max(1, exact_log2(N)))
        m.d.comb += low_idx.eq(_tree(m, [Mux(lowest[j], j, 0) for j in range(N)],
                                     lambda a, b: a | b, "e_idx") if N > 1 else 0)
        clr = Signal(range(D + 1))

        # union memory ports: the walk ORs in its marks, emission and reset clear words
        with m.FSM(init="CLEAR"):
            with m.State("CLEAR"):
                m.d.comb += [uni_wr.addr.eq(clr), uni_wr.data.eq(0), uni_wr.en.eq(1)]
                m.d.sync += clr.eq(clr + 1)
                with m.If(clr == D - 1):
                    m.next = "RECV"

            with m.State("RECV"):
                m.d.comb += self.i.ready.eq(1)
                with m.If(take):
                    m.d.sync += perf.busy.eq(perf.busy + 1)
                    with m.If(pay.first != (beat == 0)):
                        m.d.sync += self.error.eq(1)             # framing broken
                    with m.If(beat <= D):
                        m.d.sync += beat.eq(beat + 1)
                    with m.If(beat >= D):
                        m.d.sync += overflow.eq(1)
                    with m.If(pay.last):
                        m.d.sync += [head_last.eq(pay.head_last), nbeats.eq(
                            Mux(beat >= D, D, beat + 1))]
                        m.next = "DRAIN"

            with m.State("DRAIN"):                       # the preprocess pipeline empties
                m.d.sync += perf.busy.eq(perf.busy + 1)
                with m.If(~p1_valid & ~p2_valid):
                    m.d.sync += [th_prod.eq(total * self.th_r), r1.eq(smax - smin + 1)]
                    m.next = "THRESH"

            with m.State("THRESH"):
                m.d.sync += [perf.busy.eq(perf.busy + 1),
                             th.eq(th_prod >> self._th_r_frac_bits),
                             acc_k.eq((r1 << blog) - r1), k.eq(B - 1), hi.eq(smax + 1),
                             running.eq(0), bsum.eq(0), wbeat.eq(0)]
                with m.If(overflow):
                    m.d.sync += [self.error.eq(1), perf.rows_refused.eq(perf.rows_refused + 1)]
                    m.next = "ROW_DONE"
                with m.Elif(~any_valid):
                    m.next = "ROW_DONE"
                with m.Else():
                    m.next = "WALK"

            with m.State("WALK"):
                m.d.sync += perf.busy.eq(perf.busy + 1)
                m.d.comb += [row_rd.addr.eq(wbeat), uni_rd.addr.eq(wbeat),
                             uni_wr.addr.eq(w1_addr), uni_wr.data.eq(uni_rd.data | sel),
                             uni_wr.en.eq(w1_valid)]
                with m.If(wbeat < nbeats):
                    m.d.comb += issue.eq(1)
                    m.d.sync += wbeat.eq(wbeat + 1)
                with m.Elif(~w1_valid & ~w2_valid & ~w3_valid):
                    # the bucket is complete: exit after it, or step to the next one down
                    m.d.sync += [perf.buckets_visited.eq(perf.buckets_visited + 1),
                                 perf.entries_read.eq(perf.entries_read + nbeats * N)]
                    with m.If((running_new > th) | (k == 0)):
                        m.d.sync += perf.buckets_skipped.eq(perf.buckets_skipped + k)
                        m.next = "ROW_DONE"
                    with m.Else():
                        m.d.sync += [k.eq(k - 1), hi.eq(lo), acc_k.eq(acc_k - r1),
                                     running.eq(running_new), bsum.eq(0), wbeat.eq(0)]

            with m.State("ROW_DONE"):
                m.d.sync += [perf.busy.eq(perf.busy + 1), perf.rows.eq(perf.rows + 1),
                             beat.eq(0), overflow.eq(0), total.eq(0), smin.eq(smax_c),
                             smax.eq(smin_c), any_valid.eq(0)]
                with m.If(~overflow & (nbeats > hwm)):
                    m.d.sync += hwm.eq(nbeats)
                with m.If(head_last):
                    m.d.sync += [e_w.eq(0), n_sel.eq(0)]
                    m.next = "E_READ"
                with m.Else():
                    m.next = "RECV"

            with m.State("E_READ"):
                m.d.sync += perf.busy.eq(perf.busy + 1)
                m.d.comb += uni_rd.addr.eq(e_w)
                with m.If(e_w >= hwm):
                    m.next = "E_SUM"
                with m.Else():
                    m.next = "E_LOAD"

            with m.State("E_LOAD"):
                m.d.sync += [perf.busy.eq(perf.busy + 1), wbits.eq(uni_rd.data)]
                m.d.comb += [uni_wr.addr.eq(e_w), uni_wr.data.eq(0), uni_wr.en.eq(1)]
                m.next = "E_BITS"

            with m.State("E_BITS"):
                m.d.sync += perf.busy.eq(perf.busy + 1)
                with m.If(wbits == 0):
                    m.d.sync += e_w.eq(e_w + 1)
                    m.next = "E_READ"
                with m.Else():
                    m.d.comb += [self.o.valid.eq(1),
                                 self.o.payload.cluster.eq(Cat(low_idx, e_w)[:len(self.o.payload.cluster)]
                                                           if N > 1 else e_w),
                                 self.o.payload.count.eq(n_sel + 1)]
                    with m.If(self.o.ready):
                        m.d.sync += [wbits.eq(wbits & ~lowest), n_sel.eq(n_sel + 1)]
                    with m.Else():
                        m.d.sync += perf.stalled.eq(perf.stalled + 1)

            with m.State("E_SUM"):
                m.d.sync += perf.busy.eq(perf.busy + 1)
                m.d.comb += [self.o.valid.eq(1), self.o.payload.last.eq(1),
                             self.o.payload.count.eq(n_sel)]
                with m.If(self.o.ready):
                    m.d.sync += hwm.eq(0)
                    m.next = "RECV"
                with m.Else():
                    m.d.sync += perf.stalled.eq(perf.stalled + 1)
        return m
