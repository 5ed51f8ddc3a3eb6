"""DRE WiCSum threshold unit (WTU): bucketed early-exit selection, bit-exact with the golden
model (``golden.wtu.wtu_reference``, docs/design.md D8 and D9)."""

from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from vrex.rules import wtu_rules

from ..lib import counter_layout, reduce_tree, register, tree_stage

__all__ = ["WicsumThresholdUnit"]

_add = lambda a, b: a + b
_lesser = lambda a, b: Mux(a < b, a, b)
_greater = lambda a, b: Mux(a > b, a, b)


def _bank_word(bank, word, D: int):
    """The code memory's address of ``word`` in ``bank`` (banks of D words): the two side by
    side when D is a power of two (no adder)."""
    if D & (D - 1) == 0:
        return Cat(word[:exact_log2(D)], bank) if D > 1 else bank
    return bank * D + word


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
      words, one beat a cycle (each entry's score, its ``w·n`` and a flag for ``n > 0``, so
      no multiplier follows the memory's read), while a pipeline accumulates the row's
      minimum and maximum score and ``Σ weight·count``; then the threshold ``th = (Σ · th_r)
      >> th_r_frac_bits`` and the first pass's bucket bounds ``lo_k = smin + ((k · (smax -
      smin + 1)) >> log2 B)``. The next row streams in while earlier rows are walked: a beat
      waits only when the ring is full or four rows already wait for the walk.
    - *walk*: :attr:`WALK_CONTEXTS` rows at a time, their passes interleaved on the read port
      (the oldest row's pending pass first); a pass reads the
      stored row once and sums ``pass_buckets`` P buckets from the top down: each lane
      compares its score with the pass's P bounds and P adder
      trees sum, per d, the entries of the pass's top d+1 buckets. When the pass has drained,
      the running sums say where the row exits: the first bucket whose running sum exceeds
      ``th`` (or bucket 0); a row that does not exit makes another pass. Each entry's bucket
      code (relative to the pass) goes to the row's bank of the code memory
      (:attr:`CODE_BANKS` banks, taken in row order); the rows' words go back to the ring in
      that order.
    - *mark and emit*: the marker ORs each row's entries up to its exit bucket (with ``n >
      0``) into the head's union bitmask, in row order, and at ``head_last`` emits the union
      on ``o`` as ascending candidate indices (``last`` = 0, ``count`` = 1, 2, ...) and one
      closing beat (``last`` = 1, ``count`` = the head's total), clearing it on the way;
      meanwhile the walk goes on with the next rows.

    A row of more than ``row_entries`` entries is refused: it is consumed, selects nothing,
    raises the sticky ``error`` and counts in ``rows_refused`` (refusing keeps the unit's timing
    and memory fixed; tiling a long row would change its WiCSum, since the buckets span the
    whole row's score range).

    Timing (``verif.wtu.timing.schedule`` steps it cycle for cycle; docs/wtu.md): with
    ``nb = ceil(n / lanes)``, a row's walk reads ``ceil(visited / P)`` passes of ``nb``
    words, each decided :attr:`walk_overhead` cycles after its last read (the other rows' passes read meanwhile);
    receiving takes ``nb``, marking ``nb + 1`` (2 for a row that selects nothing), beside the
    walk; a row reaches the walk :attr:`receive_latency` cycles after its last beat, and the
    walk takes a row at most every other cycle; a head's emission takes 4
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
    WALK_CONTEXTS = 4           # rows walked at once, their passes interleaved
    CODE_BANKS = 7              # rows between the walk and the marker (four walked, three done)
    ROWS_AHEAD = 5              # rows received (begun) and not yet taken by the walk
    PRODUCT_PART = 17           # bits of Σ w·n a multiplier cell takes in th's product

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
    def tree_stages(self) -> int:
        """Registered stages of the receive's lane trees after the lanes' products (p2): one a
        level of the ``lanes``-wide trees, at least two."""
        return max(2, exact_log2(self._lanes))

    @property
    def receive_latency(self) -> int:
        """Cycles from a row's last beat to the walk being able to take it: p1, the lanes'
        products (p2, the minimum's and maximum's trees' first level beside them), the trees,
        the row's compares (q) and selects (r), its statistics (s1), its threshold and range
        (s2), the bounds' multiples (s3) and offsets (s4) and the walk's queue."""
        return 9 + self.tree_stages

    @property
    def walk_overhead(self) -> int:
        """Cycles from a pass's last read (issued) to its exit decision: the address
        registered (w0), the read (w1), its register (w1r), the lanes' flags and products
        (w2), the pass's sum trees one level a stage, the remainders (rem) and the
        decision's registered terms."""
        return 6 + max(1, exact_log2(self._lanes))

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
        return self.passes(visited) * (nb + self.walk_overhead)

    def emit_cycles(self, words: int, selected: int) -> int:
        """Cycles to emit a head whose rows touched ``words`` union words (the longest row's
        beats) and selected ``selected`` ids, ``o`` ready."""
        return 4 * words + selected + 2

    def elaborate(self, platform):
        m = Module()
        x = SimpleNamespace()            # the signals the sections below share
        self._memories(m, x)
        self._receive(m, x)
        self._prepare(m, x)
        self._walk(m, x)
        self._slots(m, x)
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
        # a ring entry: the score, ``w·n`` (0 for an invalid lane) and ``n > 0`` of a valid
        # lane (as wide as score, weight, count and valid were)
        store_t = data.StructLayout({"score": signed(sb), "prod": x.prod_bits, "nz": 1})
        # No read of the row or the code memory is of a word written in the same cycle (the
        # walk reads only received rows' words, the receive writes only free ones; the marker
        # reads a bank the walk has finished writing), and the marker's read of the union
        # word it writes in the same cycle is replaced by the written word (``byp`` in
        # _mark), whatever the block RAM returns: ``no_rw_check`` lets Yosys leave out the
        # read-during-write multiplexers after the block RAMs
        norw = {"no_rw_check": 1}
        m.submodules.rowmem = rowmem = memory.Memory(
            shape=data.ArrayLayout(store_t, N), depth=D, init=[], attrs=norw)
        m.submodules.unimem = unimem = memory.Memory(shape=N, depth=D, init=[], attrs=norw)
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
        # the queue in two: the rows unbuffered (the contexts load the head through the
        # memory's read, from its read pointer: a buffered queue's wide output register took
        # its enable from the walk's take) and beside them, buffered, the two flags the take
        # decides on (from flip-flops; a cycle later than the rows', which are then there
        # too); as deep as the rows the receive lets in before the walk takes them
        m.submodules.rows = x.fifo = fifo.SyncFIFO(
            width=data.Layout.cast(x.row_t).size, depth=self.ROWS_AHEAD)
        m.submodules.row_flags = x.flags = fifo.SyncFIFOBuffered(width=2, depth=self.ROWS_AHEAD)
        x.head = data.View(x.row_t, x.fifo.r_data)
        # the walk's hand-off to the marker, one slot per code bank; a bank is used from the
        # walk taking its row to the marker finishing it
        NB = self.CODE_BANKS
        x.mark_t = data.StructLayout({"stored": range(D + 1), "exit": range(P + 1),
                                      "overflow": 1, "head_last": 1})
        x.slot = Array(Signal(x.mark_t, name=f"slot_{b}") for b in range(NB))
        # ... and what the marker starts a row from, formed as the slot is written: the words
        # after the first it reads and whether there are none, whether it reads none (a
        # skipped row)
        x.slot_left = Array(Signal(range(D + 1), name=f"slot_left_{b}") for b in range(NB))
        x.slot_one = Array(Signal(name=f"slot_one_{b}") for b in range(NB))
        x.slot_none = Array(Signal(name=f"slot_none_{b}") for b in range(NB))
        x.slot_m1 = Array(Signal(range(D), name=f"slot_m1_{b}") for b in range(NB))  # stored - 1
        x.slot_full = Signal(NB)
        # banks are taken and freed in order, so the next one is free while fewer than NB
        # are held (a count and its flag, not a bit per bank behind a multiplexer)
        x.banks_held = Signal(range(NB + 1))
        x.bank_ok = Signal(init=1)
        x.bank_freed = Signal()                # the marker finishes a bank this cycle
        x.rel_pend = Signal(NB)         # a bank's row pushed, its ring words not yet released
        x.push_valid, x.push_bank = Signal(), Signal(range(NB))
        x.push = Signal(x.mark_t)
        x.push_m1 = Signal(range(D))            # the pushed row's words less one (>= 1 word)
        m.d.sync += x.push_valid.eq(0)          # (a push below sets it for a cycle)

    def _wrap(self, ptr, D):
        return Mux(ptr == D - 1, 0, ptr + 1)

    def _pushing(self, x, bank):
        """The push register holds a row for ``bank`` (in its slot the next cycle)."""
        return x.push_valid & (x.push_bank == bank)

    # ------------------------------------------------------------------ receive

    def _raise(self, m, x, code):
        """Set the sticky error; the first one keeps its code, head and row."""
        m.d.sync += self.error.eq(1)
        with m.If(~self.error):
            m.d.sync += [self.error_code.eq(code), self.error_head.eq(x.head_no),
                         self.error_row.eq(x.row_in_head)]

    def _receive(self, m, x):
        """Store the row in the ring; min, max and Σ w·n through a split lane tree (p1, p2)
        and the beat's registered results (p3), then the row's running values (q, r)."""
        N, D, sb = self._lanes, x.D, self._score_bits
        perf, pay = self.perf, self.i.payload
        x.beat = beat = Signal(range(D + 2))   # beats of this row taken (saturates at D+1)
        x.wptr = wptr = Signal(range(D))       # the ring's next free word
        x.base = Signal(range(D))              # this row's first word
        x.occupied = occupied = Signal(range(D + 1))
        x.inflight = inflight = Signal(range(self.ROWS_AHEAD + 1))  # rows begun, not yet walked
        x.release = Signal(range(D + 1))       # words back in the ring this cycle (walk)
        x.releasing = Signal()                 # ... if any
        x.release_m1 = Signal(signed(ceil_log2(D + 1) + 1))     # ... less one
        x.took = Signal()                      # the walk takes a row this cycle
        x.over = Signal()                      # this row outgrew the memory
        x.th_r = Signal.like(self.th_r)
        x.head_no = Signal(16)                 # heads received since reset (for error_head)
        x.row_in_head = Signal(16)             # rows of this head received (for error_row)
        x.take = take = Signal()
        # ``beat == 0`` and ``beat >= D`` kept as flags beside the count, so the handshake
        # (whose ``take`` fans out to the ring and the lanes) starts from flip-flops
        first = Signal(init=1)
        tail = Signal()
        full = Signal()                        # occupied == D, a flag (below)
        store = Signal()
        # ``inflight < ROWS_AHEAD`` a flag too, set a cycle ahead: the walk taking a row
        # always leaves room, a new row's first beat alone may take the last of it
        room = Signal(init=1)
        m.d.sync += room.eq(x.took | Mux(take & first, inflight < self.ROWS_AHEAD - 1,
                                         inflight < self.ROWS_AHEAD))
        m.d.comb += [
            self.i.ready.eq((~first | room) & (~full | tail)),
            take.eq(self.i.valid & self.i.ready),
            store.eq(take & ~tail)]
        # ``full`` (``occupied == D``) is kept as a flag, set a cycle ahead (the released words
        # come from registers): the handshake starts from flags, not from the occupancy's
        # adder and compare
        fills = Signal()            # a store now fills the ring
        stays = Signal()            # the ring is full and nothing comes back
        none_back = ~x.releasing               # (a released row has at least one word)
        m.d.comb += [fills.eq(none_back & (occupied == D - 1)),
                     stays.eq(none_back & (occupied == D))]
        m.d.sync += [full.eq(Mux(store, fills, stays)),
                     # (two subtractions from registers, the store selecting between them)
                     occupied.eq(Mux(store, occupied - x.release_m1, occupied - x.release)),
                     inflight.eq(inflight + (take & first) - x.took)]
        # what travels with the row's last beat: p1_meta, then through the trees' stages
        meta_t = data.StructLayout({"base": range(D), "stored": range(D + 1), "overflow": 1,
                                    "head_last": 1, "th_r": len(self.th_r)})
        p1_meta = Signal(meta_t)
        # (loaded every cycle: the stages after it read it only with a row's last beat)
        m.d.sync += [p1_meta.base.eq(Mux(first, wptr, x.base)),
                     p1_meta.stored.eq(Mux(tail, D, beat + 1)),
                     p1_meta.overflow.eq(x.over | tail),
                     p1_meta.head_last.eq(pay.head_last),
                     p1_meta.th_r.eq(Mux(first, self.th_r, x.th_r))]
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
                m.d.sync += [beat.eq(0), first.eq(1), tail.eq(0), x.over.eq(0),
                             x.row_in_head.eq(Mux(pay.head_last, 0, x.row_in_head + 1)),
                             x.head_no.eq(x.head_no + pay.head_last)]
            with m.Else():
                m.d.sync += [beat.eq(Mux(beat <= D, beat + 1, beat)), first.eq(0),
                             tail.eq(beat >= D - 1)]
                with m.If(tail):
                    m.d.sync += x.over.eq(1)
        # the lane pipeline: p1 (per lane), p2 (the lanes' products), then the beat's trees
        # one level a stage (a compare-and-select or an addition of the lanes' values,
        # registered), ``tree_stages`` stages to p3, the beat's sum, minimum and maximum
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
        # multiplier's own delay and its routes; an invalid lane's weight is 0), the minimum's
        # and maximum's trees' first level beside them. (The count goes through the valid's
        # multiplexer too: a register that only copies an input may be merged by synthesis
        # with the register that drives that input, as with the flow's pin wrapper's chain,
        # and then it is no longer the multiplier's alone.)
        p2_prod = register(m, [w * n for w, n in zip(p1_w, p1_n)], "p2_prod", reset_less=True)
        # the beat into the ring three cycles after its take (the walk reads a row's words
        # only after its statistics, many cycles later), from copies of p2's registers: the
        # products' registers load the sums' trees and these copies, not the block RAMs' far
        # inputs beside the multipliers. The ring holds ``w·n`` and an invalid lane's entry
        # is 0 with ``nz`` = 0, which neither sums nor marks (its score does not matter)
        def delayed(items, name, stages):
            for k in range(stages):
                items = register(m, items, f"{name}_d{k}")
            return items
        ring_store, ring_addr = delayed([store, wptr], "ring", 3)
        ring_score = delayed([(lo ^ bias).as_signed() for lo in p1_lo], "ring_score", 2)
        ring_nz = delayed([p1_nz], "ring_nz", 2)[0]
        ring_prod = delayed(p2_prod, "ring_prod", 1)
        m.d.comb += [x.row_wr.addr.eq(ring_addr), x.row_wr.en.eq(ring_store)]
        for j in range(N):
            m.d.comb += [x.row_wr.data[j].score.eq(ring_score[j]),
                         x.row_wr.data[j].prod.eq(ring_prod[j]),
                         x.row_wr.data[j].nz.eq(ring_nz[j])]
        vals = {"min": p1_lo, "max": p1_hi}
        ops = {"sum": _add, "min": _lesser, "max": _greater}
        flags, meta = (p1_valid, p1_first, p1_last, p1_any), p1_meta
        x.stage_valid = [p1_valid]
        for st in range(2, 3 + self.tree_stages):
            name = "p3" if st == 2 + self.tree_stages else f"p{st}"
            for key in vals:
                vals[key] = tree_stage(m, vals[key], ops[key], f"{name}_{key}")
            if st == 2:
                vals["sum"] = p2_prod
            flags = register(m, flags, f"{name}_flag")
            meta_r = Signal(meta_t, name=f"{name}_meta")
            m.d.sync += meta_r.eq(meta)
            meta = meta_r
            x.stage_valid.append(flags[0])
        p3_valid, p3_first, p3_last, p3_any = flags
        p3_meta = meta
        p3 = {key: v[0] for key, v in vals.items()}
        # the row's running statistics over two stages, q (compares) and r (selects), so that
        # no compare and select share a cycle: at q a beat's minimum is compared with the
        # running minimum and with the beat at r (the one the running minimum is about to
        # take in), registered; at r the running minimum takes the beat if it is below both
        # (a row's first beat at r: the running minimum is the previous row's, compare with
        # the beat alone; no beat at r: the running minimum is up to date, compare with it)
        total = Signal(self.sum_bits)
        smin = Signal(sb, init=top)            # (offset: above)
        smax = Signal(sb, init=0)
        any_valid = Signal()
        r_valid, r_first, r_last, r_any = register(m, [p3_valid, p3_first, p3_last, p3_any],
                                                   "r_flag")
        x.stage_valid.append(r_valid)
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
        # a finished row's statistics (s1)
        x.s1_valid = Signal()
        x.s1 = SimpleNamespace(total=Signal.like(total), smin=Signal(signed(sb)),
                               smax=Signal(signed(sb)), any=Signal(), meta=Signal(meta_t))
        m.d.sync += x.s1_valid.eq(r_valid & r_last)
        with m.If(r_valid & r_last):
            m.d.sync += [x.s1.total.eq(n_total), x.s1.smin.eq((n_min ^ bias).as_signed()),
                         x.s1.smax.eq((n_max ^ bias).as_signed()),
                         x.s1.any.eq(n_any), x.s1.meta.eq(r_meta)]

    def _prepare(self, m, x):
        """s2: the threshold's product and the score range r1; s3: the first pass's bound
        offsets ``(B - 1 - d)·r1``; then the bounds and the row into the walk's queue."""
        sb, s1, P, B = self._score_bits, x.s1, self._pass, self._buckets
        x.s2_valid = Signal()
        # the threshold's product in parts of ``total`` (each one multiplier cell), summed at
        # s3: no adder after the multipliers in the same stage
        tr = s1.meta.th_r
        parts = [s1.total[i:i + self.PRODUCT_PART] for i in range(0, len(s1.total),
                                                                  self.PRODUCT_PART)]
        th_parts = [Signal(len(a) + len(tr), name=f"s2_th_part_{i}", reset_less=True)
                    for i, a in enumerate(parts)]
        r1 = Signal(sb + 1)
        s2_smin, s2_smax = Signal(signed(sb)), Signal(signed(sb))
        s2_any, s2_meta = Signal(), Signal.like(s1.meta)
        m.d.sync += [x.s2_valid.eq(x.s1_valid),
                     r1.eq(s1.smax - s1.smin + 1), s2_smin.eq(s1.smin), s2_smax.eq(s1.smax),
                     s2_any.eq(s1.any), s2_meta.eq(s1.meta)]
        m.d.sync += [t.eq(a * tr) for t, a in zip(th_parts, parts)]
        th_prod = sum((t << (i * self.PRODUCT_PART) for i, t in enumerate(th_parts[1:], 1)),
                      th_parts[0])
        # s3: the multiples ``(d + 1)·r1`` (a carry chain at most, registered); s4: ``acc -
        # d·r1`` = ``(B - 1 - d)·r1`` = ``B·r1 - (d + 1)·r1`` (>= 0, as P <= B), a register
        # each: the first bounds' only carry chain after it is the ``+ smin``
        s3, s4 = Signal(x.row_t, name="s3_row"), Signal(x.row_t, name="s4_row")
        rec = Signal(x.row_t)
        x.s3_valid, x.s4_valid = Signal(), Signal()
        mul = [Signal(sb + 1 + x.blog, name=f"s3_mul_{d}") for d in range(P)]
        offs = [Signal(sb + 1 + x.blog, name=f"s4_off_{d}") for d in range(P)]
        m.d.sync += [x.s3_valid.eq(x.s2_valid), s3.base.eq(s2_meta.base),
                     s3.stored.eq(s2_meta.stored), s3.overflow.eq(s2_meta.overflow),
                     s3.any.eq(s2_any), s3.head_last.eq(s2_meta.head_last),
                     s3.th.eq(th_prod >> self._th_r_frac_bits), s3.smin.eq(s2_smin),
                     s3.r1.eq(r1), s3.hi.eq(s2_smax + 1)]
        m.d.sync += [u.eq(_times(r1, d + 1)) for d, u in enumerate(mul)]
        m.d.sync += [x.s4_valid.eq(x.s3_valid), s4.eq(s3)]
        m.d.sync += [o.eq((s3.r1 << x.blog) - u) for u, o in zip(mul, offs)]
        m.d.comb += [rec.eq(s4), rec.acc.eq(offs[0]), x.fifo.w_data.eq(rec.as_value()),
                     x.fifo.w_en.eq(x.s4_valid),
                     x.flags.w_data.eq(Cat(s4.overflow, s4.overflow | ~s4.any)),
                     x.flags.w_en.eq(x.s4_valid)]
        m.d.comb += [rec.lo[d].eq(s4.smin + (offs[d] >> x.blog)) for d in range(P)]

    # ------------------------------------------------------------------ walk

    def _walk(self, m, x):
        """WALK_CONTEXTS rows at a time: their passes (P buckets each, w1 to the sums' stages)
        interleave on the read port, each row decides its exit when its pass has drained."""
        N, D, B, P, sb = self._lanes, x.D, self._buckets, self._pass, self._score_bits
        NB, cb = self.CODE_BANKS, self.code_bits
        perf, head = self.perf, x.head
        S = self.sum_bits
        ctx = []
        for c in range(self.WALK_CONTEXTS):
            cx = SimpleNamespace(
                row=Signal(x.row_t, name=f"c{c}_row"), k=Signal(range(B), name=f"c{c}_k"),
                k_last=Signal(name=f"c{c}_k_last"),     # k == P - 1: this pass is the last
                # th less the running sum and the pass's sums up to bucket d: the row exits
                # at the first d where it is below zero (a sign bit, where the running sum
                # plus the pass's sum compared with th was two carry chains in the decision)
                rem=[Signal(signed(S + 1), name=f"c{c}_rem_{d}") for d in range(P)],
                rptr=Signal(range(D), name=f"c{c}_rptr"),
                wbeat=Signal(range(D + 1), name=f"c{c}_wbeat"),
                at_last=Signal(name=f"c{c}_at_last"),    # wbeat + 1 == stored (issuing)
                bank=Signal(range(NB), name=f"c{c}_bank"),
                busy=Signal(name=f"c{c}_busy"),          # holds a row
                pend=Signal(name=f"c{c}_pend"),          # a pass waits for the read port
                # a pass's last read shifts through ``drain``; it decides when it leaves (the
                # cycle after its rem is final: the decision's terms are registered)
                drain=Signal(self.walk_overhead, name=f"c{c}_drain"),
                nlo=[Signal(signed(sb + 2), name=f"c{c}_next_lo_{d}") for d in range(P)],
                # (P + d)·r1 and acc less it (acc_next = off[0]): registers
                r1x=[Signal(sb + 2 + x.blog, name=f"c{c}_r1x_{d}") for d in range(P)],
                off=[Signal(signed(sb + 3 + x.blog), name=f"c{c}_off_{d}") for d in range(P)],
                over=Signal(P, name=f"c{c}_over"), exit=Signal(range(P + 1), name=f"c{c}_exit"),
                decide=Signal(name=f"c{c}_decide"),
                # the decision's terms, registered from the final rem (valid when deciding)
                d_exits=Signal(name=f"c{c}_d_exits"),
                # decide & d_exits and decide & ~d_exits, as flags formed with them
                exits=Signal(name=f"c{c}_exits"), goes_on=Signal(name=f"c{c}_goes_on"),
                d_visited=Signal(range(B + 1), name=f"c{c}_d_visited"),
                d_skipped=Signal(range(B), name=f"c{c}_d_skipped"))
            # the next pass's bounds ``smin + ((acc - (P + d)·r1) >> log2 B)``, a carry chain a
            # stage: they follow a change of the row (its take) or of acc (a pass's decision)
            # three cycles later, and a context decides at most once in walk_overhead cycles
            m.d.sync += [a.eq(_times(cx.row.r1, P + d)) for d, a in enumerate(cx.r1x)]
            m.d.sync += [o.eq(cx.row.acc - a) for o, a in zip(cx.off, cx.r1x)]
            m.d.sync += [lo.eq(cx.row.smin + (o >> x.blog)) for lo, o in zip(cx.nlo, cx.off)]
            # the exit: the first d whose running sum exceeds th, or bucket 0
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
        C = self.WALK_CONTEXTS
        # older[i][j]: context i's row came before context j's (meaningful when both hold one)
        older = [[Signal(name=f"older_{i}_{j}") if i != j else None for j in range(C)]
                 for i in range(C)]
        cur = Signal(range(C))          # the context whose pass is being read
        issuing = Signal()

        # the pass pipeline: issue -> w0 (the read's address registered: the pick of the
        # oldest pending pass stays out of the block RAMs' address inputs) -> w1 (the word
        # read) -> w1r (registered, with the pass's bounds from its context: they do not
        # change while the pass is read) -> w2 (flags, products) -> the sums' stages; each
        # stage carries its context
        issue, word, ictx = Signal(), Signal(range(D)), Signal(range(C))
        addr, w0_addr = Signal(range(D)), Signal(range(D))
        m.d.sync += w0_addr.eq(addr)
        m.d.comb += x.row_rd.addr.eq(w0_addr)
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
        w2_prod = [Signal(x.prod_bits, name=f"w2_prod_{j}") for j in range(N)]
        # the word read registered (w1r: the block RAM's own output register on an FPGA, no
        # enable or reset, so a flow can absorb it) before the lanes compare it with the bounds
        w1r_valid, w1r_word, w1r_ctx = Signal(), Signal(range(D)), Signal(range(C))
        w1r_lo = [Signal(signed(sb + 2), name=f"w1r_lo_{d}") for d in range(P)]
        w1r_hi = Signal(signed(sb + 2))
        w1r_data = Signal.like(x.row_rd.data, name="w1r_data", reset_less=True)
        m.d.sync += [w1r_valid.eq(w1_valid), w1r_word.eq(w1_word), w1r_ctx.eq(w1_ctx),
                     w1r_data.eq(x.row_rd.data)]
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
        w3m_bank = Signal(range(NB))
        m.d.comb += w3m_bank.eq(Array(cx.bank for cx in ctx)[w3m_ctx])
        m.d.comb += [x.code_wr.addr.eq(_bank_word(w3m_bank, w3m_word, D)),
                     x.code_wr.en.eq(w3m_valid)]
        m.d.comb += [x.code_wr.data[j].eq(w3m_mark[j]) for j in range(N)]
        # the pass's P sums: the entries of its top d+1 buckets, the trees one level (an
        # addition) a stage, the last stage's root subtracted from the row's remainders
        vals = [[Mux(w2_use[j] & w2_ge[j][d], w2_prod[j], 0) for j in range(N)]
                for d in range(P)]
        sv, sctx = w2_valid, w2_ctx
        for st in range(max(1, exact_log2(N))):
            vals = [tree_stage(m, v, _add, f"w{st + 3}_sum{d}") for d, v in enumerate(vals)]
            sv, sctx = register(m, [sv, sctx], f"w{st + 3}_pass")
        for c, cx in enumerate(ctx):
            with m.If(sv & (sctx == c)):
                m.d.sync += [a.eq(a - v[0]) for a, v in zip(cx.rem, vals)]
        # a context decides this cycle (no two do: their passes' last reads are in different
        # cycles), from a flip-flop: a pass decides the cycle after its drain's last but one
        deciding_r = Signal()
        m.d.sync += deciding_r.eq(Cat(cx.drain[-2] for cx in ctx).any())
        # what the deciding context hands to the marker, taken a cycle ahead (its drain's
        # last but one: the remainders are final, the row's fields do not change) into
        # registers shared by the contexts, so the push starts from flip-flops, not from a
        # multiplexer of the contexts behind their decisions
        dx_exits = Signal()                     # a context decides this cycle and exits
        dx = Signal(x.mark_t, name="dx_push")
        dx_bank = Signal(range(NB))

        def ahead(field):
            return reduce_tree(m, [Mux(cx.drain[-2], field(cx), 0) for cx in ctx],
                               lambda a, b: a | b, "dx_or")
        m.d.sync += [dx_exits.eq(ahead(lambda cx: cx.over.any())),
                     dx.stored.eq(ahead(lambda cx: cx.row.stored)),
                     dx.exit.eq(ahead(lambda cx: cx.exit)),
                     dx.overflow.eq(ahead(lambda cx: cx.row.overflow)),
                     dx.head_last.eq(ahead(lambda cx: cx.row.head_last)),
                     dx_bank.eq(ahead(lambda cx: cx.bank))]

        # the read port: go on with the current pass, or start the oldest pending one
        # (``first_pend``, one-hot or none: registered, formed a cycle ahead from the next
        # cycle's pending flags and ages, so the pick starts from flip-flops; below)
        first_pend = [Signal(name=f"c{c}_first_pend") for c in range(C)]
        pick = Signal(range(C))
        for c in reversed(range(C)):
            with m.If(first_pend[c]):
                m.d.comb += pick.eq(c)
        with m.If(issuing):
            m.d.comb += [issue.eq(1), ictx.eq(cur)]
            for c, cx in enumerate(ctx):
                with m.If(cur == c):
                    m.d.comb += [word.eq(cx.wbeat), addr.eq(cx.rptr)]
                    m.d.sync += [cx.rptr.eq(self._wrap(cx.rptr, D)), cx.wbeat.eq(cx.wbeat + 1),
                                 cx.at_last.eq(cx.wbeat + 2 == cx.row.stored)]
                    with m.If(cx.at_last):
                        m.d.sync += [issuing.eq(0), cx.drain[0].eq(1)]
        with m.Elif(Cat(first_pend).any()):
            m.d.comb += [issue.eq(1), ictx.eq(pick), word.eq(0)]
            m.d.sync += cur.eq(pick)
            for c, cx in enumerate(ctx):
                with m.If(first_pend[c]):                # (one-hot: the oldest pending)
                    m.d.comb += addr.eq(cx.row.base)
                    m.d.sync += [cx.pend.eq(0), cx.rptr.eq(self._wrap(cx.row.base, D)),
                                 cx.wbeat.eq(1), cx.at_last.eq(cx.row.stored == 2)]
                    with m.If(cx.row.stored == 1):
                        m.d.sync += cx.drain[0].eq(1)
                    with m.Else():
                        m.d.sync += issuing.eq(1)

        # decisions: exit (the row to the marker through its bank) or the next pass
        rows_inc, refused_inc = Signal(), Signal()
        with m.If(dx_exits):
            self._push(m, x, dx_bank, dx)
            m.d.comb += rows_inc.eq(1)
        # the counters' increments registered at the decision, added a cycle later (the
        # decisions' logic stays out of the counters' carry chains)
        read_inc, vis_inc, skip_inc = (Signal(range(D + 1)), Signal(range(B + 1)),
                                       Signal(range(B)))
        m.d.sync += [read_inc.eq(0), vis_inc.eq(0), skip_inc.eq(0)]
        m.d.sync += [perf.entries_read.eq(perf.entries_read + read_inc * N),
                     perf.buckets_visited.eq(perf.buckets_visited + vis_inc),
                     perf.buckets_skipped.eq(perf.buckets_skipped + skip_inc)]
        for c, cx in enumerate(ctx):
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

        # the ring's words go back in row order, which is the banks' order: a bank's row is
        # released, one a cycle, once it is pushed and every earlier bank's row is released
        # (whether the pointer's bank releases, and how many words, are taken a cycle ahead
        # from the next cycle's pointer, pending banks and slots: the ring's occupancy and
        # ``full`` start from registers)
        rp, rel_r, rel_words = Signal(range(NB)), Signal(), Signal(range(D + 1))
        rp1 = Signal(range(NB), init=1 % NB)                    # the bank after rp
        m.d.comb += [x.releasing.eq(rel_r), x.release.eq(Mux(rel_r, rel_words, 0))]
        pend_n = Signal(NB)
        for b in range(NB):
            m.d.comb += pend_n[b].eq((x.rel_pend[b] & ~(rel_r & (rp == b))) |
                                     self._pushing(x, b))

        def at(b):
            """bank ``b``'s row: pending, its words and its words less one (pushed now:
            from the push register)"""
            now = self._pushing(x, b)
            return (x.rel_pend.bit_select(b, 1) | now, Mux(now, x.push.stored, x.slot[b].stored),
                    Mux(now, x.push_m1, x.slot_m1[b]))
        # the next pointer is rp1 if rp releases now, else rp: both banks' fields are formed
        # and ``rel_r`` selects between them last (rp1's pending flag is not cleared now)
        stay, move = at(rp), at(rp1)
        rel_m1 = Signal(range(D))                               # rel_words - 1 (>= 1 word)
        m.d.sync += [rp.eq(Mux(rel_r, rp1, rp)),
                     rp1.eq(Mux(rel_r, self._wrap(rp1, NB), rp1)),
                     x.rel_pend.eq(pend_n), rel_r.eq(Mux(rel_r, move[0], stay[0])),
                     rel_words.eq(Mux(rel_r, move[1], stay[1])),
                     rel_m1.eq(Mux(rel_r, move[2], stay[2]))]
        m.d.comb += x.release_m1.eq(Mux(rel_r, rel_m1, -1))

        # a new row from the queue: into a free context (the first) and the next code bank
        x.next_bank = next_bank = Signal(range(NB))
        # the first free context (one-hot) and whether there is one, registered from the
        # contexts' flags less this cycle's exits: a take needs them only when the cycle
        # before took nothing (``took_r``), and then nothing else set a context's flag
        left = [cx.busy & ~cx.exits for cx in ctx]
        free, into = Signal(), Signal(C)
        m.d.sync += [free.eq(~Cat(left).all())]
        m.d.sync += [into[c].eq(~left[c] & Cat(left[:c]).all()) for c in range(C)]
        refused, skip = x.flags.r_data            # the head's overflow, and whether it skips
        held_next = x.banks_held + x.took - x.bank_freed
        m.d.sync += [x.banks_held.eq(held_next), x.bank_ok.eq(held_next != NB)]
        bank_ok = x.bank_ok
        # the queue lets a taken row go a cycle later, from a register (``took_r``: the
        # take's logic stays out of the wide output register's enable), and no row is taken
        # in that cycle
        took_r = Signal()
        m.d.sync += took_r.eq(x.took)
        m.d.comb += [x.fifo.r_en.eq(took_r), x.flags.r_en.eq(took_r)]
        with m.If(x.flags.r_rdy & ~took_r & bank_ok & Mux(skip, ~deciding_r, free)):
            m.d.comb += x.took.eq(1)
            m.d.sync += [next_bank.eq(self._wrap(next_bank, NB))]
            with m.If(skip):
                with m.If(refused):
                    m.d.comb += refused_inc.eq(1)
                self._push(m, x, next_bank, head, P)
                m.d.comb += rows_inc.eq(1)
            with m.Else():
                for c, cx in enumerate(ctx):
                    with m.If(into[c]):
                        m.d.sync += [cx.busy.eq(1), cx.pend.eq(1)]
                        # every other context's row is older than this one
                        m.d.sync += [older[j][c].eq(1) for j in range(C) if j != c]
                        m.d.sync += [older[c][j].eq(0) for j in range(C) if j != c]
        # the next cycle's pending flags and ages (as the logic above sets them), and from
        # them the next cycle's oldest pending pass
        picking = ~issuing & Cat(first_pend).any()
        taking = x.took & ~skip
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
        # counted a cycle later, from registers (the take's and the decision's logic stays out
        # of the counters' carry chains)
        rows_r, refused_r = register(m, [rows_inc, refused_inc], "rows_inc")
        m.d.sync += [perf.rows.eq(perf.rows + rows_r),
                     perf.rows_refused.eq(perf.rows_refused + refused_r)]
        x.walk_busy = Cat(cx.busy for cx in ctx).any()

    def _push(self, m, x, bank, rec, exit_code=None):
        """Hand a row to the marker: into the push register now (at most one a cycle), into
        its code bank's slot the next cycle; ``exit_code`` if ``rec`` has none."""
        m.d.sync += [x.push_valid.eq(1), x.push_bank.eq(bank), x.push.stored.eq(rec.stored),
                     x.push.exit.eq(rec.exit if exit_code is None else exit_code),
                     x.push.overflow.eq(rec.overflow), x.push.head_last.eq(rec.head_last)]

    def _slots(self, m, x):
        """The push register into its bank's slot (a decoder from flip-flops: the decisions'
        and the take's logic stays out of the slots' inputs)."""
        m.d.comb += x.push_m1.eq(x.push.stored - 1)
        for b in range(self.CODE_BANKS):
            with m.If(self._pushing(x, b)):
                none = x.push.exit == self._pass
                m.d.sync += [x.slot[b].eq(x.push), x.slot_full[b].eq(1), x.slot_none[b].eq(none),
                             x.slot_left[b].eq(Mux(none, 0, x.push_m1)),
                             x.slot_one[b].eq(none | (x.push.stored == 1)),
                             x.slot_m1[b].eq(x.push_m1)]

    # ------------------------------------------------------------------ mark and emit

    def _mark(self, m, x):
        """CLEAR (after reset), then per row: OR its marks into the union (MARK); at a head's
        end E_READ, E_LOAD, E_BITS, E_SUM (emission)."""
        N, D, P = self._lanes, x.D, self._pass
        perf = self.perf
        uni_wr, uni_rd, code_rd = x.uni_wr, x.uni_rd, x.code_rd
        NB = self.CODE_BANKS
        m_bank = Signal(range(NB))
        m_bank1 = Signal(range(NB), init=1 % NB)               # the bank after m_bank
        cur = x.slot[m_bank]
        # whether m_bank's slot holds a row and whether that row marks nothing, as flags
        # formed a cycle ahead (for m_bank, or for m_bank1 when a row ends: ``ending``) from
        # the slots and the push register, so the marker's state decode starts from them
        cur_full, cur_none, ending = Signal(), Signal(), Signal()

        def slot_next(b):
            now = self._pushing(x, b)
            return (x.slot_full.bit_select(b, 1) | now,
                    Mux(now, x.push.exit == P, x.slot_none[b]))
        stay, move = slot_next(m_bank), slot_next(m_bank1)
        m.d.sync += [cur_full.eq(Mux(ending, move[0], stay[0])),
                     cur_none.eq(Mux(ending, move[1], stay[1]))]
        mw = Signal(range(D + 1))
        m1_valid, m1_addr = Signal(), Signal(range(D))
        clr = Signal(range(D + 1))
        hwm = Signal(range(D + 1))             # union words touched by this head
        e_w = Signal(range(D + 1))
        wbits = Signal(N)
        wnone = Signal()                       # wbits == 0, a flag set with wbits
        n_sel = Signal(ceil_log2(self._row_entries + 1) + 1)
        lowest = Signal(N)
        m.d.comb += lowest.eq(wbits & (~wbits + 1))
        low_idx = Signal(max(1, exact_log2(N)))
        m.d.comb += low_idx.eq(reduce_tree(m, [Mux(lowest[j], j, 0) for j in range(N)],
                                           lambda a, b: a | b, "e_idx") if N > 1 else 0)
        # the row being marked, taken from its slot when the marker starts it (IDLE), so
        # MARK and the row's end work from flip-flops, not through the slots' multiplexer
        m_exit, m_stored = Signal(range(P + 1)), Signal(range(D + 1))
        m_left = Signal(range(D + 1))          # words still to read after this one
        m_one = Signal()                       # ... none (a flag beside the count)
        m_over, m_head_last = Signal(), Signal()  # the row overflowed; it ends its head
        # both memories' reads registered (the block RAMs' own output registers on an FPGA:
        # no enable or reset), so a word read in cycle t is marked and written back in t + 2
        # (m2); a read in the cycle the marker writes the same word (the previous row's last
        # one, or the emission's first read after a head's last row) takes the written word
        # instead (``byp``; what the block RAM returns then does not matter): ``uni_now`` is
        # the word as of the read
        code_q = Signal.like(code_rd.data, name="code_q", reset_less=True)
        uni_q = Signal.like(uni_rd.data, name="uni_q", reset_less=True)
        m.d.sync += [code_q.eq(code_rd.data), uni_q.eq(uni_rd.data)]
        m2_valid, m2_addr = register(m, [m1_valid, m1_addr], "m2")
        rd_addr = Signal(range(D))             # the union word read this cycle
        m.d.comb += uni_rd.addr.eq(rd_addr)
        rd_addr_r, wr_en_r, wr_addr_r, wr_data_r = register(
            m, [rd_addr, uni_wr.en, uni_wr.addr, uni_wr.data], "m_rw")
        hit = wr_en_r & (wr_addr_r == rd_addr_r)
        byp, byp_data = register(m, [hit, wr_data_r], "byp")
        uni_now = Signal(N)
        m.d.comb += uni_now.eq(Mux(byp, byp_data, uni_q))
        marks = Signal(N)
        m.d.comb += marks.eq(Cat(code_q[j] <= m_exit for j in range(N)))
        # the marked word written back, ``m2_valid ? uni_now | marks : 0``, as an OR of
        # terms each gated by flags formed a cycle ahead (the read's own bits kept when no
        # bypass, the bypassed word's, the marks), so the block RAM's output reaches the
        # write data through one gate, and the other writes (CLEAR, E_LOAD: 0, never with
        # m2_valid) need no multiplexer
        keep_q, byp_m = register(m, [m1_valid & ~hit, Mux(m1_valid & hit, wr_data_r, 0)],
                                 "m2_rw")
        m.d.comb += uni_wr.data.eq((uni_q & keep_q.replicate(N)) | byp_m |
                                   (marks & m2_valid.replicate(N)))
        m.d.sync += m1_valid.eq(0)

        # the marker reads word ``mw`` of its bank in every cycle (0 while IDLE: the next
        # row's first), so the reads' addresses come from registers, not from the state; a
        # read counts (``m1_valid``) only where the states below say
        m.d.comb += [code_rd.addr.eq(_bank_word(m_bank, mw, D)), rd_addr.eq(mw)]

        def read():
            m.d.sync += [m1_valid.eq(1), m1_addr.eq(mw), mw.eq(mw + 1)]

        def row_end():
            m.d.comb += [x.bank_freed.eq(1), ending.eq(1)]
            m.d.sync += [x.slot_full.bit_select(m_bank, 1).eq(0), mw.eq(0), m_bank.eq(m_bank1),
                         m_bank1.eq(self._wrap(m_bank1, NB))]
            with m.If(~m_over & (m_stored > hwm)):       # (hwm changes only here and at E_SUM)
                m.d.sync += hwm.eq(m_stored)
            with m.If(m_head_last):
                m.d.sync += [e_w.eq(0), n_sel.eq(0)]
                m.next = "E_READ"
            with m.Else():
                m.next = "IDLE"

        x.mark_busy = Signal()
        with m.FSM(name="mark", init="CLEAR"):
            with m.State("CLEAR"):
                m.d.comb += [uni_wr.addr.eq(clr), uni_wr.en.eq(1)]
                m.d.sync += clr.eq(clr + 1)
                with m.If(clr == D - 1):
                    m.next = "IDLE"

            with m.State("IDLE"):
                # the row's fields and its first words are taken whether or not its slot is
                # full yet (the reads change nothing), so only the state and ``m1_valid``
                # wait for the slot's flag
                m.d.sync += [m_exit.eq(cur.exit), m_stored.eq(cur.stored),
                             m_left.eq(x.slot_left[m_bank]), m_one.eq(x.slot_one[m_bank]),
                             m_over.eq(cur.overflow),
                             m_head_last.eq(cur.head_last)]
                with m.If(cur_full):
                    read()
                    m.d.sync += m1_valid.eq(~cur_none)
                    m.next = "MARK"

            with m.State("MARK"):
                m.d.comb += x.mark_busy.eq(1)
                with m.If(~m_one):
                    read()
                    m.d.sync += [m_left.eq(m_left - 1), m_one.eq(m_left == 1)]
                with m.Else():
                    row_end()

            with m.State("E_READ"):
                m.d.comb += [x.mark_busy.eq(1), rd_addr.eq(e_w)]
                with m.If(e_w >= hwm):
                    m.next = "E_SUM"
                with m.Else():
                    m.next = "E_WAIT"

            with m.State("E_WAIT"):                       # (the read's register)
                m.d.comb += x.mark_busy.eq(1)
                m.next = "E_LOAD"

            with m.State("E_LOAD"):
                m.d.comb += x.mark_busy.eq(1)
                m.d.sync += [wbits.eq(uni_now), wnone.eq(uni_now == 0)]
                m.d.comb += [uni_wr.addr.eq(e_w), uni_wr.en.eq(1)]
                m.next = "E_BITS"

            with m.State("E_BITS"):
                m.d.comb += x.mark_busy.eq(1)
                with m.If(wnone):
                    m.d.sync += e_w.eq(e_w + 1)
                    m.next = "E_READ"
                with m.Else():
                    cluster = self.o.payload.cluster
                    m.d.comb += [self.o.valid.eq(1),
                                 cluster.eq(Cat(low_idx, e_w)[:len(cluster)]
                                            if N > 1 else e_w),
                                 self.o.payload.count.eq(n_sel + 1)]
                    with m.If(self.o.ready):
                        m.d.sync += [wbits.eq(wbits & ~lowest), wnone.eq(wbits == lowest),
                                     n_sel.eq(n_sel + 1)]
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

        # the marked word back, two cycles after its read (never in a cycle the states
        # above write: CLEAR ends before the first read, E_LOAD comes after the last write)
        with m.If(m2_valid):
            m.d.comb += [uni_wr.addr.eq(m2_addr), uni_wr.en.eq(1)]

    def _busy(self, m, x):
        """busy: a cycle in which any stage holds a row (a beat taken, the receive and
        threshold pipelines, the walk's queue, a pass, a row for the marker, marking or
        emission)."""
        busy = (x.take | Cat(x.stage_valid).any() | x.s1_valid | x.s2_valid | x.s3_valid |
                x.s4_valid |
                (x.flags.level != 0) | x.walk_busy | x.slot_full.any() | x.mark_busy)
        # counted a cycle later, from a register (the stages' flags stay out of the counter)
        busy_r = Signal()
        m.d.sync += [busy_r.eq(busy), self.perf.busy.eq(self.perf.busy + busy_r)]
