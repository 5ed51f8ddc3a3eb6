"""The WTU's walk: rows from the queue into the walk contexts, their passes interleaved on
the ring's read port, each pass's sums, the exit decisions, and the rows handed to the
marker; the ring's words given back in row order."""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Module, Mux, Signal, signed
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from ...lib import counter_layout, reduce_tree, register, tree_stage
from .common import PushSignature, add, bank_word, times, wrap

__all__ = ["WtuWalk", "COUNTERS"]

COUNTERS = ("rows", "buckets_visited", "buckets_skipped", "entries_read", "rows_refused")


class _Context:
    """One walk context: the row it holds and its pass's state."""

    def __init__(self, c: int, row, *, D, B, P, sb, S, NB, blog, overhead):
        self.row = Signal(row, name=f"c{c}_row")
        self.k = Signal(range(B), name=f"c{c}_k")
        self.k_last = Signal(name=f"c{c}_k_last")     # k == P - 1: this pass is the last
        # th less the running sum and the pass's sums up to bucket d: the row exits at the
        # first d where it is below zero (a sign bit, where the running sum plus the pass's
        # sum compared with th was two carry chains in the decision)
        self.rem = [Signal(signed(S + 1), name=f"c{c}_rem_{d}") for d in range(P)]
        self.rptr = Signal(range(D), name=f"c{c}_rptr")
        self.wbeat = Signal(range(D + 1), name=f"c{c}_wbeat")
        self.at_last = Signal(name=f"c{c}_at_last")   # wbeat + 1 == stored (issuing)
        self.bank = Signal(range(NB), name=f"c{c}_bank")
        self.busy = Signal(name=f"c{c}_busy")         # holds a row
        self.pend = Signal(name=f"c{c}_pend")         # a pass waits for the read port
        # a pass's last read shifts through ``drain``; it decides when it leaves (the cycle
        # after its rem is final: the decision's terms are registered)
        self.drain = Signal(overhead, name=f"c{c}_drain")
        self.nlo = [Signal(signed(sb + 2), name=f"c{c}_next_lo_{d}") for d in range(P)]
        # (P + d)·r1 and acc less it (acc_next = off[0]): registers
        self.r1x = [Signal(sb + 2 + blog, name=f"c{c}_r1x_{d}") for d in range(P)]
        self.off = [Signal(signed(sb + 3 + blog), name=f"c{c}_off_{d}") for d in range(P)]
        self.over = Signal(P, name=f"c{c}_over")
        self.exit = Signal(range(P + 1), name=f"c{c}_exit")
        self.decide = Signal(name=f"c{c}_decide")
        # the decision's terms, registered from the final rem (valid when deciding), and
        # decide & d_exits, decide & ~d_exits as flags formed with them
        self.d_exits = Signal(name=f"c{c}_d_exits")
        self.exits, self.goes_on = Signal(name=f"c{c}_exits"), Signal(name=f"c{c}_goes_on")
        self.d_visited = Signal(range(B + 1), name=f"c{c}_d_visited")
        self.d_skipped = Signal(range(B), name=f"c{c}_d_skipped")


class WtuWalk(wiring.Component):
    """``contexts`` rows at a time from the queue (``head``, taken with ``q_take`` a cycle
    after ``took``): each reads its row from the ring (``ring``) a pass at a time, ``P``
    buckets a pass, its entries' bucket codes into its bank of the code memory (``codes``);
    a pass decides where the row exits when it has drained (``overhead`` cycles after its
    last read), and an exiting row (or one the queue marks to skip) goes to the marker
    through its bank (``push``). The passes of the contexts interleave on the read port, the
    oldest row's pending pass first. The ring's words go back in row order (``release``)
    once the row is pushed and every earlier row's words are back.

    Throughput: a word a cycle on the read port; a row taken at most every other cycle.
    Latency: a pass decides ``overhead`` cycles after its last read."""

    def __init__(self, *, lanes: int, D: int, buckets: int, pass_buckets: int,
                 score_bits: int, sum_bits: int, code_bits: int, banks: int, contexts: int,
                 overhead: int, store, row, mark, counter_bits: int):
        self._N, self._D, self._B, self._P = lanes, D, buckets, pass_buckets
        self._sb, self._S, self._NB, self._C = score_bits, sum_bits, banks, contexts
        self._blog, self._overhead, self._row = exact_log2(buckets), overhead, row
        self.perf_layout = counter_layout(COUNTERS, counter_bits)
        super().__init__({
            "head": In(row), "head_flags": In(2), "head_ready": In(1), "q_take": Out(1),
            "took": Out(1),
            "ring": In(memory.ReadPort.Signature(addr_width=ceil_log2(D),
                                                 shape=data.ArrayLayout(store, lanes))),
            "codes": In(memory.WritePort.Signature(
                addr_width=ceil_log2(banks * D), shape=data.ArrayLayout(code_bits, lanes))),
            "push": Out(PushSignature(mark, banks, D)),
            "bank_freed": In(1),
            "releasing": Out(1), "release": Out(range(D + 1)),
            "release_m1": Out(signed(ceil_log2(D + 1) + 1)),
            "rp": Out(range(banks)), "rp1": Out(range(banks), init=1 % banks),
            "rp_stored": In(range(D + 1)), "rp_m1": In(range(D)),
            "rp1_stored": In(range(D + 1)), "rp1_m1": In(range(D)),
            "busy": Out(1),
            "counts": Out(self.perf_layout),
        })

    def elaborate(self, platform):
        m = Module()
        C, D = self._C, self._D
        ctx = self._contexts(m)
        # older[i][j]: context i's row came before context j's (meaningful when both hold one)
        older = [[Signal(name=f"older_{i}_{j}") if i != j else None for j in range(C)]
                 for i in range(C)]
        cur = Signal(range(C))          # the context whose pass is being read
        issuing = Signal()
        # the pass pipeline's head: a read issued (its word of the row, its context, the
        # ring's address)
        issue, word, ictx, addr = Signal(), Signal(range(D)), Signal(range(C)), Signal(range(D))
        self._pipeline(m, ctx, issue, word, ictx, addr)
        deciding_r, dx_exits, dx, dx_bank = self._handoff(m, ctx)
        first_pend = [Signal(name=f"c{c}_first_pend") for c in range(C)]
        self._read_port(m, ctx, first_pend, cur, issuing, issue, word, ictx, addr)
        rows_inc, refused_inc = Signal(), Signal()
        m.d.sync += self.push.valid.eq(0)        # (a push below sets it for a cycle)
        m.d.comb += self.push.m1.eq(self.push.rec.stored - 1)
        self._decisions(m, ctx, dx_exits, dx, dx_bank, rows_inc)
        self._release(m)
        self._take(m, ctx, older, first_pend, issuing, deciding_r, rows_inc, refused_inc)
        # counted a cycle later, from registers (the take's and the decision's logic stays
        # out of the counters' carry chains)
        perf = self.counts
        rows_r, refused_r = register(m, [rows_inc, refused_inc], "rows_inc")
        m.d.sync += [perf.rows.eq(perf.rows + rows_r),
                     perf.rows_refused.eq(perf.rows_refused + refused_r)]
        m.d.comb += self.busy.eq(Cat(cx.busy for cx in ctx).any())
        return m

    def _contexts(self, m):
        """The contexts, and what each forms from its own registers: the next pass's bounds
        ``smin + ((acc - (P + d)·r1) >> log2 B)``, a carry chain a stage (they follow a
        change of the row, its take, or of acc, a pass's decision, three cycles later, and a
        context decides at most once in ``overhead`` cycles); the exit, the first d whose
        running sum exceeds th, or bucket 0; the decision's terms."""
        B, P = self._B, self._P
        ctx = []
        for c in range(self._C):
            cx = _Context(c, self._row, D=self._D, B=B, P=P, sb=self._sb, S=self._S,
                          NB=self._NB, blog=self._blog, overhead=self._overhead)
            m.d.sync += [a.eq(times(cx.row.r1, P + d)) for d, a in enumerate(cx.r1x)]
            m.d.sync += [o.eq(cx.row.acc - a) for o, a in zip(cx.off, cx.r1x)]
            m.d.sync += [lo.eq(cx.row.smin + (o >> self._blog))
                         for lo, o in zip(cx.nlo, cx.off)]
            for d in range(P):
                m.d.comb += cx.over[d].eq((cx.rem[d] < 0) |
                                          (cx.k_last if d == P - 1 else 0))
            m.d.comb += cx.exit.eq(P - sum(cx.over[d].as_unsigned() for d in range(P)))
            m.d.sync += [cx.drain.eq(cx.drain[:-1] << 1), cx.d_exits.eq(cx.over.any()),
                         cx.exits.eq(cx.drain[-2] & cx.over.any()),
                         cx.goes_on.eq(cx.drain[-2] & ~cx.over.any()),
                         cx.d_visited.eq(B - cx.k + cx.exit),
                         cx.d_skipped.eq(cx.k - cx.exit)]
            m.d.comb += cx.decide.eq(cx.drain[-1])
            ctx.append(cx)
        return ctx

    def _pipeline(self, m, ctx, issue, word, ictx, addr):
        """issue -> w0 (the read's address registered: the pick of the oldest pending pass
        stays out of the block RAMs' address inputs) -> w1 (the word read) -> w1r
        (registered, with the pass's bounds from its context: they do not change while the
        pass is read) -> w2 (flags, products) -> the sums' stages; each stage carries its
        context. The entries' codes go to the row's bank a stage after w2."""
        N, D, P, sb, C = self._N, self._D, self._P, self._sb, self._C
        prod_bits = len(self.ring.data[0].prod)
        w0_addr = Signal(range(D))
        m.d.sync += w0_addr.eq(addr)
        m.d.comb += self.ring.addr.eq(w0_addr)
        w0_valid, w0_word, w0_ctx = register(m, [issue, word, ictx], "w0")
        w1_valid, w1_word, w1_ctx = Signal(), Signal(range(D)), Signal(range(C))
        m.d.sync += [w1_valid.eq(w0_valid), w1_word.eq(w0_word), w1_ctx.eq(w0_ctx)]
        w2_valid, w2_word, w2_ctx = Signal(), Signal(range(D)), Signal(range(C))
        # per lane: the score at or above each of the pass's bounds (``ge[d]``: the bounds
        # fall with d, so the entry's code, the buckets of the pass above it, is P less
        # their count, and it is in the top d+1 buckets exactly when ``ge[d]``), in the pass
        # (not above it: an invalid lane's ``w·n`` is 0), to mark (valid, n > 0), above it,
        # its ``w·n`` (from the ring: no multiplier after the read)
        w2_ge = [Signal(P, name=f"w2_ge_{j}") for j in range(N)]
        w2_use = [Signal(name=f"w2_use_{j}") for j in range(N)]
        w2_nz = [Signal(name=f"w2_nz_{j}") for j in range(N)]
        w2_above = [Signal(name=f"w2_above_{j}") for j in range(N)]
        w2_prod = [Signal(prod_bits, name=f"w2_prod_{j}") for j in range(N)]
        # the word read registered (w1r: the block RAM's own output register on an FPGA, no
        # enable or reset, so a flow can absorb it) before the lanes compare it with the
        # bounds
        w1r_valid, w1r_word, w1r_ctx = Signal(), Signal(range(D)), Signal(range(C))
        w1r_lo = [Signal(signed(sb + 2), name=f"w1r_lo_{d}") for d in range(P)]
        w1r_hi = Signal(signed(sb + 2))
        w1r_data = Signal.like(self.ring.data, name="w1r_data", reset_less=True)
        m.d.sync += [w1r_valid.eq(w1_valid), w1r_word.eq(w1_word), w1r_ctx.eq(w1_ctx),
                     w1r_data.eq(self.ring.data)]
        for c, cx in enumerate(ctx):
            with m.If(w1_ctx == c):
                m.d.sync += [w1r_hi.eq(cx.row.hi)] + [w1r_lo[d].eq(cx.row.lo[d])
                                                      for d in range(P)]
        m.d.sync += [w2_valid.eq(w1r_valid), w2_word.eq(w1r_word), w2_ctx.eq(w1r_ctx)]
        for j in range(N):
            e = w1r_data[j]
            above = e.score >= w1r_hi
            m.d.sync += [
                w2_ge[j].eq(Cat(e.score >= w1r_lo[d] for d in range(P))),
                w2_use[j].eq(~above), w2_nz[j].eq(e.nz),
                w2_above[j].eq(above), w2_prod[j].eq(e.prod)]
        # the entries' codes (0 above the pass, P below it or not to mark) into the row's
        # bank of the code memory, a stage after w2
        w3m_valid, w3m_word, w3m_ctx = register(m, [w2_valid, w2_word, w2_ctx], "w3m")
        w3m_mark = register(m, [Mux(w2_nz[j], Mux(w2_above[j], 0, P - sum(w2_ge[j])), P)
                                for j in range(N)], "w3m_mark")
        w3m_bank = Signal(range(self._NB))
        m.d.comb += w3m_bank.eq(Array(cx.bank for cx in ctx)[w3m_ctx])
        m.d.comb += [self.codes.addr.eq(bank_word(w3m_bank, w3m_word, D)),
                     self.codes.en.eq(w3m_valid)]
        m.d.comb += [self.codes.data[j].eq(w3m_mark[j]) for j in range(N)]
        # the pass's P sums: the entries of its top d+1 buckets, the trees one level (an
        # addition) a stage, the last stage's root subtracted from the row's remainders
        vals = [[Mux(w2_use[j] & w2_ge[j][d], w2_prod[j], 0) for j in range(N)]
                for d in range(P)]
        sv, sctx = w2_valid, w2_ctx
        for st in range(max(1, exact_log2(N))):
            vals = [tree_stage(m, v, add, f"w{st + 3}_sum{d}") for d, v in enumerate(vals)]
            sv, sctx = register(m, [sv, sctx], f"w{st + 3}_pass")
        for c, cx in enumerate(ctx):
            with m.If(sv & (sctx == c)):
                m.d.sync += [a.eq(a - v[0]) for a, v in zip(cx.rem, vals)]

    def _handoff(self, m, ctx):
        """A context decides this cycle (no two do: their passes' last reads are in
        different cycles), from a flip-flop: a pass decides the cycle after its drain's last
        but one. What the deciding context hands to the marker is taken a cycle ahead (its
        drain's last but one: the remainders are final, the row's fields do not change) into
        registers shared by the contexts, so the push starts from flip-flops, not from a
        multiplexer of the contexts behind their decisions."""
        deciding_r = Signal()
        m.d.sync += deciding_r.eq(Cat(cx.drain[-2] for cx in ctx).any())
        dx_exits = Signal()                     # a context decides this cycle and exits
        dx = Signal.like(self.push.rec, name="dx_push")
        dx_bank = Signal(range(self._NB))

        def ahead(field):
            return reduce_tree(m, [Mux(cx.drain[-2], field(cx), 0) for cx in ctx],
                               lambda a, b: a | b, "dx_or")
        m.d.sync += [dx_exits.eq(ahead(lambda cx: cx.over.any())),
                     dx.stored.eq(ahead(lambda cx: cx.row.stored)),
                     dx.exit.eq(ahead(lambda cx: cx.exit)),
                     dx.overflow.eq(ahead(lambda cx: cx.row.overflow)),
                     dx.head_last.eq(ahead(lambda cx: cx.row.head_last)),
                     dx_bank.eq(ahead(lambda cx: cx.bank))]
        return deciding_r, dx_exits, dx, dx_bank

    def _read_port(self, m, ctx, first_pend, cur, issuing, issue, word, ictx, addr):
        """Go on with the current pass, or start the oldest pending one (``first_pend``,
        one-hot or none: registered, formed a cycle ahead from the next cycle's pending
        flags and ages, so the pick starts from flip-flops; :meth:`_take`)."""
        D = self._D
        pick = Signal(range(self._C))
        for c in reversed(range(self._C)):
            with m.If(first_pend[c]):
                m.d.comb += pick.eq(c)
        with m.If(issuing):
            m.d.comb += [issue.eq(1), ictx.eq(cur)]
            for c, cx in enumerate(ctx):
                with m.If(cur == c):
                    m.d.comb += [word.eq(cx.wbeat), addr.eq(cx.rptr)]
                    m.d.sync += [cx.rptr.eq(wrap(cx.rptr, D)), cx.wbeat.eq(cx.wbeat + 1),
                                 cx.at_last.eq(cx.wbeat + 2 == cx.row.stored)]
                    with m.If(cx.at_last):
                        m.d.sync += [issuing.eq(0), cx.drain[0].eq(1)]
        with m.Elif(Cat(first_pend).any()):
            m.d.comb += [issue.eq(1), ictx.eq(pick), word.eq(0)]
            m.d.sync += cur.eq(pick)
            for c, cx in enumerate(ctx):
                with m.If(first_pend[c]):                # (one-hot: the oldest pending)
                    m.d.comb += addr.eq(cx.row.base)
                    m.d.sync += [cx.pend.eq(0), cx.rptr.eq(wrap(cx.row.base, D)),
                                 cx.wbeat.eq(1), cx.at_last.eq(cx.row.stored == 2)]
                    with m.If(cx.row.stored == 1):
                        m.d.sync += cx.drain[0].eq(1)
                    with m.Else():
                        m.d.sync += issuing.eq(1)

    def _push(self, m, bank, rec, exit_code=None):
        """Hand a row to the marker: into the push register now (at most one a cycle), into
        its code bank's slot the next cycle; ``exit_code`` if ``rec`` has none."""
        p = self.push
        m.d.sync += [p.valid.eq(1), p.bank.eq(bank), p.rec.stored.eq(rec.stored),
                     p.rec.exit.eq(rec.exit if exit_code is None else exit_code),
                     p.rec.overflow.eq(rec.overflow), p.rec.head_last.eq(rec.head_last)]

    def _decisions(self, m, ctx, dx_exits, dx, dx_bank, rows_inc):
        """Exit (the row to the marker through its bank) or the next pass; the counters'
        increments registered at the decision, added a cycle later (the decisions' logic
        stays out of the counters' carry chains)."""
        N, D, B, P, perf = self._N, self._D, self._B, self._P, self.counts
        with m.If(dx_exits):
            self._push(m, dx_bank, dx)
            m.d.comb += rows_inc.eq(1)
        read_inc, vis_inc, skip_inc = (Signal(range(D + 1)), Signal(range(B + 1)),
                                       Signal(range(B)))
        m.d.sync += [read_inc.eq(0), vis_inc.eq(0), skip_inc.eq(0)]
        m.d.sync += [perf.entries_read.eq(perf.entries_read + read_inc * N),
                     perf.buckets_visited.eq(perf.buckets_visited + vis_inc),
                     perf.buckets_skipped.eq(perf.buckets_skipped + skip_inc)]
        for cx in ctx:
            with m.If(cx.decide):
                m.d.sync += read_inc.eq(cx.row.stored)
                with m.If(cx.d_exits):
                    m.d.sync += [vis_inc.eq(cx.d_visited), skip_inc.eq(cx.d_skipped),
                                 cx.busy.eq(0)]
                with m.Else():
                    m.d.sync += [cx.k.eq(cx.k - P), cx.k_last.eq(cx.k == 2 * P - 1),
                                 cx.row.acc.eq(cx.off[0]),
                                 cx.row.hi.eq(cx.row.lo[P - 1]), cx.pend.eq(1)]
                    m.d.sync += [cx.row.lo[d].eq(cx.nlo[d]) for d in range(P)]
                    # the pass's whole sum joins the running sum
                    m.d.sync += [a.eq(cx.rem[P - 1]) for a in cx.rem]

    def _release(self, m):
        """The ring's words go back in row order, which is the banks' order: a bank's row is
        released, one a cycle, once it is pushed and every earlier bank's row is released
        (whether the pointer's bank releases, and how many words, are taken a cycle ahead
        from the next cycle's pointer, pending banks and slots: the ring's occupancy and
        ``full`` start from registers)."""
        NB, D, p = self._NB, self._D, self.push
        rp, rp1 = self.rp, self.rp1
        rel_pend = Signal(NB)   # a bank's row pushed, its ring words not yet released
        rel_r, rel_words = Signal(), Signal(range(D + 1))
        m.d.comb += [self.releasing.eq(rel_r), self.release.eq(Mux(rel_r, rel_words, 0))]
        pushing = lambda b: p.valid & (p.bank == b)
        pend_n = Signal(NB)
        for b in range(NB):
            m.d.comb += pend_n[b].eq((rel_pend[b] & ~(rel_r & (rp == b))) | pushing(b))
        # the next pointer is rp1 if rp releases now, else rp: both banks' fields are formed
        # (their words from the slots, or from the push register when pushed now) and
        # ``rel_r`` selects between them last (rp1's pending flag is not cleared now)
        stay = (rel_pend.bit_select(rp, 1) | pushing(rp), self.rp_stored, self.rp_m1)
        move = (rel_pend.bit_select(rp1, 1) | pushing(rp1), self.rp1_stored, self.rp1_m1)
        rel_m1 = Signal(range(D))                               # rel_words - 1 (>= 1 word)
        m.d.sync += [rp.eq(Mux(rel_r, rp1, rp)), rp1.eq(Mux(rel_r, wrap(rp1, NB), rp1)),
                     rel_pend.eq(pend_n), rel_r.eq(Mux(rel_r, move[0], stay[0])),
                     rel_words.eq(Mux(rel_r, move[1], stay[1])),
                     rel_m1.eq(Mux(rel_r, move[2], stay[2]))]
        m.d.comb += self.release_m1.eq(Mux(rel_r, rel_m1, -1))

    def _take(self, m, ctx, older, first_pend, issuing, deciding_r, rows_inc, refused_inc):
        """A new row from the queue: into a free context (the first) and the next code bank,
        or, a row to skip, straight to the marker; the next cycle's pending flags and ages,
        and from them the next cycle's oldest pending pass."""
        C, NB, B, P = self._C, self._NB, self._B, self._P
        head = self.head
        next_bank = Signal(range(NB))
        # the first free context (one-hot) and whether there is one, registered from the
        # contexts' flags less this cycle's exits: a take needs them only when the cycle
        # before took nothing (``took_r``), and then nothing else set a context's flag
        left = [cx.busy & ~cx.exits for cx in ctx]
        free, into = Signal(), Signal(C)
        m.d.sync += [free.eq(~Cat(left).all())]
        m.d.sync += [into[c].eq(~left[c] & Cat(left[:c]).all()) for c in range(C)]
        refused, skip = self.head_flags             # the row's overflow; whether it skips
        # banks are taken and freed in order, so the next one is free while fewer than NB
        # are held (a count and its flag, not a bit per bank behind a multiplexer)
        banks_held, bank_ok = Signal(range(NB + 1)), Signal(init=1)
        held_next = banks_held + self.took - self.bank_freed
        m.d.sync += [banks_held.eq(held_next), bank_ok.eq(held_next != NB)]
        # the queue lets a taken row go a cycle later, from a register (``took_r``: the
        # take's logic stays out of the wide output register's enable), and no row is taken
        # in that cycle
        took_r = Signal()
        m.d.sync += took_r.eq(self.took)
        m.d.comb += self.q_take.eq(took_r)
        with m.If(self.head_ready & ~took_r & bank_ok & Mux(skip, ~deciding_r, free)):
            m.d.comb += self.took.eq(1)
            m.d.sync += [next_bank.eq(wrap(next_bank, NB))]
            with m.If(skip):
                with m.If(refused):
                    m.d.comb += refused_inc.eq(1)
                self._push(m, next_bank, head, P)
                m.d.comb += rows_inc.eq(1)
            with m.Else():
                for c, cx in enumerate(ctx):
                    with m.If(into[c]):
                        m.d.sync += [cx.busy.eq(1), cx.pend.eq(1)]
                        # every other context's row is older than this one
                        m.d.sync += [older[j][c].eq(1) for j in range(C) if j != c]
                        m.d.sync += [older[c][j].eq(0) for j in range(C) if j != c]
        picking = ~issuing & Cat(first_pend).any()
        taking = self.took & ~skip
        ctx_pend_n = [(cx.pend & ~(picking & first_pend[c])) | cx.goes_on |
                      (taking & into[c]) for c, cx in enumerate(ctx)]

        def older_n(i, j):
            return Mux(taking & into[j], 1, Mux(taking & into[i], 0, older[i][j]))
        m.d.sync += [first_pend[c].eq(ctx_pend_n[c] & Cat(~(ctx_pend_n[j] & older_n(j, c))
                                                      for j in range(C) if j != c).all())
                     for c in range(C)]
        # a free context holds the queue's head (its row, bank, first bucket and th), so
        # taking the row sets only its flags: the take's conditions stay out of these wide
        # registers' inputs
        for cx in ctx:
            with m.If(~cx.busy):
                m.d.sync += [cx.row.eq(head), cx.k.eq(B - 1), cx.k_last.eq(B == P),
                             cx.bank.eq(next_bank)]
                m.d.sync += [a.eq(head.th) for a in cx.rem]
