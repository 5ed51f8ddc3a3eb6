"""DRE WiCSum threshold unit (WTU): bucketed early-exit selection, bit-exact with the golden
model (``golden.wtu.wtu_reference``, docs/design.md D8 and D9). The unit joins its parts: the
receive (:mod:`.receive`), the walk (:mod:`.walk`), the banks between the walk and the marker
(:mod:`.banks`) and the marker (:mod:`.mark`)."""

from __future__ import annotations

from amaranth.hdl import Module, Signal, signed
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from vrex.rules import wtu_rules

from ...lib import counter_layout
from .banks import WtuBanks
from .common import mark_layout, row_layout, store_layout
from .mark import WtuMark
from .receive import WtuReceive
from .walk import WtuWalk

__all__ = ["WicsumThresholdUnit"]


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
    words, each decided :attr:`walk_overhead` cycles after its last read (the other rows'
    passes read meanwhile); receiving takes ``nb``, marking ``nb + 1`` (2 for a row that
    selects nothing), beside the walk; a row reaches the walk :attr:`receive_latency`
    cycles after its last beat, and the walk takes a row at most every other cycle; a head's
    emission takes 4 cycles per union word touched, one per selected id, plus 2.

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
        N, P, NB = self._lanes, self._pass, self.CODE_BANKS
        D, sb = self._row_entries // N, self._score_bits
        store = store_layout(sb, self._weight_bits + self._count_bits)
        row = row_layout(D, self.sum_bits, sb, exact_log2(self._buckets), P)
        mark = mark_layout(D, P)
        # No read of the row or the code memory is of a word written in the same cycle (the
        # walk reads only received rows' words, the receive writes only free ones; the
        # marker reads a bank the walk has finished writing): ``no_rw_check`` lets Yosys
        # leave out the read-during-write multiplexers after the block RAMs
        norw = {"no_rw_check": 1}
        m.submodules.rowmem = rowmem = memory.Memory(
            shape=data.ArrayLayout(store, N), depth=D, init=[], attrs=norw)
        m.submodules.codemem = codemem = memory.Memory(
            shape=data.ArrayLayout(self.code_bits, N), depth=NB * D, init=[], attrs=norw)
        # the walk's queue in two: the rows unbuffered (the contexts load the head through
        # the memory's read, from its read pointer: a buffered queue's wide output register
        # took its enable from the walk's take) and beside them, buffered, the two flags the
        # take decides on (from flip-flops; a cycle later than the rows', which are then
        # there too); as deep as the rows the receive lets in before the walk takes them
        m.submodules.rows = rows = fifo.SyncFIFO(width=data.Layout.cast(row).size,
                                                 depth=self.ROWS_AHEAD)
        m.submodules.row_flags = flags = fifo.SyncFIFOBuffered(width=2, depth=self.ROWS_AHEAD)
        m.submodules.receive = rx = WtuReceive(
            lanes=N, D=D, score_bits=sb, weight_bits=self._weight_bits,
            count_bits=self._count_bits, buckets=self._buckets, pass_buckets=P,
            th_r_frac_bits=self._th_r_frac_bits, sum_bits=self.sum_bits,
            tree_stages=self.tree_stages, rows_ahead=self.ROWS_AHEAD,
            product_part=self.PRODUCT_PART, in_layout=self.in_layout, store=store, row=row)
        m.submodules.walk = walk = WtuWalk(
            lanes=N, D=D, buckets=self._buckets, pass_buckets=P, score_bits=sb,
            sum_bits=self.sum_bits, code_bits=self.code_bits, banks=NB,
            contexts=self.WALK_CONTEXTS, overhead=self.walk_overhead, store=store, row=row,
            mark=mark, counter_bits=self._counter_bits)
        m.submodules.banks = banks = WtuBanks(mark=mark, banks=NB, D=D, P=P)
        m.submodules.mark = mk = WtuMark(
            lanes=N, D=D, P=P, banks=NB, code_bits=self.code_bits, mark=mark,
            out_layout=self.out_layout, row_entries=self._row_entries,
            counter_bits=self._counter_bits)
        wiring.connect(m, wiring.flipped(self.i), rx.i_beats)
        wiring.connect(m, mk.o_sel, wiring.flipped(self.o))
        wiring.connect(m, rx.ring, rowmem.write_port())
        wiring.connect(m, walk.ring, rowmem.read_port())
        wiring.connect(m, walk.codes, codemem.write_port())
        wiring.connect(m, mk.codes, codemem.read_port())
        wiring.connect(m, walk.push, banks.push)
        m.d.comb += [
            rx.reg_th_r.eq(self.th_r), rx.took.eq(walk.took), rx.releasing.eq(walk.releasing),
            rx.release.eq(walk.release), rx.release_m1.eq(walk.release_m1),
            rows.w_data.eq(rx.queue.row.as_value()), rows.w_en.eq(rx.queue.valid),
            flags.w_data.eq(rx.queue.flags), flags.w_en.eq(rx.queue.valid),
            walk.head.eq(rows.r_data), walk.head_flags.eq(flags.r_data),
            walk.head_ready.eq(flags.r_rdy), rows.r_en.eq(walk.q_take),
            flags.r_en.eq(walk.q_take),
            banks.rp.eq(walk.rp), banks.rp1.eq(walk.rp1),
            walk.rp_stored.eq(banks.rp_stored), walk.rp_m1.eq(banks.rp_m1),
            walk.rp1_stored.eq(banks.rp1_stored), walk.rp1_m1.eq(banks.rp1_m1),
            banks.m_bank.eq(mk.m_bank), banks.m_bank1.eq(mk.m_bank1),
            mk.cur.eq(banks.cur), mk.cur_left.eq(banks.cur_left), mk.cur_one.eq(banks.cur_one),
            mk.full_now.eq(banks.full_now), mk.none_now.eq(banks.none_now),
            mk.full_next.eq(banks.full_next), mk.none_next.eq(banks.none_next),
            banks.free.eq(mk.free), walk.bank_freed.eq(mk.free),
            self.error.eq(rx.err), self.error_code.eq(rx.err_code),
            self.error_head.eq(rx.err_head), self.error_row.eq(rx.err_row),
        ]
        # busy: a cycle in which any stage holds a row (a beat taken, the receive and
        # threshold pipelines, the walk's queue, a pass, a row for the marker, marking or
        # emission), counted a cycle later, from a register (the stages' flags stay out of
        # the counter)
        busy, busy_r, n_busy = Signal(), Signal(), Signal.like(self.perf.busy)
        m.d.comb += busy.eq(rx.busy | (flags.level != 0) | walk.busy | banks.any_full |
                            mk.busy)
        m.d.sync += [busy_r.eq(busy), n_busy.eq(n_busy + busy_r)]
        m.d.comb += [getattr(self.perf, c).eq(getattr(walk.counts, c))
                     for c, _ in walk.perf_layout]
        m.d.comb += [self.perf.busy.eq(n_busy), self.perf.stalled.eq(mk.stalled)]
        return m
