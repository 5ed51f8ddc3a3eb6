"""The systolic int8 array: output-stationary N x N multiply-accumulate cells."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from vrex.rules import array_rules

from ..lib import KEEP_COPY, counter_layout, head_queue, reduce_tree

__all__ = ["SystolicArray"]


class SystolicArray(wiring.Component):
    """``C = A·Bᵀ`` one N x N output tile at a time, int8 in, ``acc_bits`` signed out.

    Dataflow: output-stationary. Cell (r, c) keeps the running sum of tile row r, column c.
    Beat k of a tile carries ``a[r] = A[r, k]`` and ``b[c] = B[c, k]`` (the sequencer zero-pads
    rows and columns past the matrix edge), ``first`` on k = 0 and ``last`` on k = K - 1. The
    input skew registers ``a[r]`` r + 1 times and ``b[c]`` c + 1 times; ``a`` then moves right
    one cell a cycle with its ``first``/``last``/``valid`` flags and ``b`` moves down, so cell
    (r, c) sees beat k at cycle k + r + c + 1, registers the product, and adds it to its sum
    a cycle later (the product register took the array from 67.8 to 94.2 MHz on ECP5). On
    ``last`` a cell moves its sum into its result register; the drain offers the tile's rows
    in order on ``o``, row r as soon as its N results are in, while the cells already
    accumulate the next tile. Why output-stationary:
    each product is used once, the tile's K-long reduction stays in the cell (no partial sums
    cross the array), so K is free (any length at full rate) and only the N x N results leave
    it, N beats per tile, hidden behind the next tile's K beats whenever K >= N.

    Back-pressure without a hold: the cells never stall. Rows leave through a row queue of
    ``2n + 3`` rows (:attr:`queue_rows`, a LUT RAM whose head ``o`` offers). A tile's ``last``
    beat is taken only while the rows owed (those of every tile whose ``last`` is in and that
    have not left on ``o``) leave room for its n rows in the queue; a registered flag says so,
    so ``i.ready`` is ``~last`` or that flag, and a slow consumer delays the next tile's
    ``last`` instead of freezing the array (the previous design held every skew and cell
    register on one combinational signal: 2 410 clock-enable loads and the engine's critical
    path). With ``o`` always ready nothing waits (2n + 3 rows cover two tiles in flight, the
    product register's cycle, the registered flag's and the queue's write). Contract: a tile
    has at least n beats (the sequencer pads a shorter reduction with zero beats, which costs
    nothing: the drain takes n cycles a tile anyway). Then a row's results are complete one
    row a cycle at most, and tile t's row r is on its way out (the cycle after its last
    result) before tile t + 1 reaches the row's first result register.

    Timing: one beat a cycle; :attr:`latency` cycles from a tile's last beat to its last row on
    ``o`` with ``o`` ready (:meth:`tile_cycles`).

    Parameters (keyword-only, all required; ``vrex.rules.array_rules``)
        ``n`` cells per side (a power of two, at most 64); ``k_max`` the longest int8
        reduction the accumulators hold without overflow; ``acc_bits`` accumulator width (at
        least 16 + log2(k_max)); ``a_bits`` the signed width of A (8, or wider for the
        engine's weights in P·V: the engine's rule bounds those sums);
        ``counter_bits`` counter width; ``valid_copies`` (optional, default 0, at most 64)
        how many copies of ``o.valid`` to offer beside it.
    Attributes
        ``i`` (in stream: ``a[n]`` signed ``a_bits``, ``b[n]`` int8, ``first``, ``last``); ``o`` (out stream:
        ``c[n]`` signed ``acc_bits``, ``row`` in the tile, ``last`` on row n - 1); ``perf``:
        ``busy`` (cycles with work in the array), ``beats`` (input beats taken: n² MACs
        each), ``starved`` (cycles inside a tile without an input beat offered), ``held``
        (cycles a tile's ``last`` beat waits for room in the row queue), ``tiles``, ``rows``;
        ``room``: the row queue has room for a tile's rows (``i.ready`` is ``~i.last | room``,
        so a feeder can decide from it and its own registers); ``o_valid_copy``: registers
        equal to ``o.valid`` every cycle (marked ``KEEP_COPY``: a consumer with many loads
        behind its take splits them over the copies, each placed near its share).
    """

    PERF = ("busy", "beats", "starved", "held", "tiles", "rows")

    def __init__(self, *, n: int, k_max: int, acc_bits: int, a_bits: int, counter_bits: int,
                 valid_copies: int = 0):
        array_rules(n=n, k_max=k_max, acc_bits=acc_bits, a_bits=a_bits,
                    counter_bits=counter_bits, valid_copies=valid_copies)
        self._n, self._k_max, self._acc_bits, self._a_bits = n, k_max, acc_bits, a_bits
        self.in_layout = data.StructLayout({"a": data.ArrayLayout(signed(a_bits), n),
                                            "b": data.ArrayLayout(signed(8), n),
                                            "first": 1, "last": 1})
        self.out_layout = data.StructLayout({"c": data.ArrayLayout(signed(acc_bits), n),
                                             "row": range(n), "last": 1})
        self.perf_layout = counter_layout(self.PERF, counter_bits)
        self.o_valid_copy = [Signal(name=f"o_valid_copy_{j}", attrs=KEEP_COPY)
                             for j in range(valid_copies)]
        super().__init__({
            "i": In(stream.Signature(self.in_layout)),
            "o": Out(stream.Signature(self.out_layout)),
            "perf": Out(self.perf_layout),
            "room": Out(1, init=1),
        })

    @classmethod
    def from_config(cls, cfg) -> "SystolicArray":
        return cls(**cfg.block_params("attn_array"))

    n = property(lambda self: self._n)
    acc_bits = property(lambda self: self._acc_bits)

    @property
    def latency(self) -> int:
        """Cycles from the transfer of a tile's last beat to the offer of its last row, ``o``
        ready: the skew and the array (2n - 1), the product register (1), the result
        register (1), the queue's write (1)."""
        return 2 * self._n + 2

    @property
    def queue_rows(self) -> int:
        """Rows the output queue holds: two tiles in flight, one for the product register, one
        for the registered room flag and one for the queue's write (a row leaves a cycle
        after it is complete), so that with ``o`` always ready a tile's ``last`` never
        waits."""
        return 2 * self._n + 3

    @property
    def output_rows(self) -> int:
        """Rows held beside the queue while ``o`` is not taken: none (``o`` offers the
        queue's head)."""
        return 0

    def tile_beats(self, k: int) -> int:
        """Beats a tile of reduction length k takes: k, padded to n."""
        return max(k, self._n)

    def tile_cycles(self, k: int, tiles: int) -> int:
        """Cycles from the first beat of ``tiles`` back-to-back tiles of reduction length k to
        the offer of the last row, ``o`` ready and ``i`` never idle: one beat a cycle, then
        the last tile's flush."""
        return tiles * self.tile_beats(k) - 1 + self.latency

    def elaborate(self, platform):
        m = Module()
        take = Signal()
        # the queue has room for one more tile's rows: a register marked to stay apart from
        # the rows-owed count's own copy (see _drain)
        room = Signal(init=1, name="room", attrs=KEEP_COPY)
        m.d.comb += self.room.eq(room)
        m.d.comb += [self.i.ready.eq(~self.i.payload.last | room),
                     take.eq(self.i.valid & self.i.ready)]
        flags_t = data.StructLayout({"valid": 1, "first": 1, "last": 1})
        a_in, b_in = self._skew(m, take, flags_t)
        res, done, completing = self._cells(m, a_in, b_in, flags_t)
        self._drain(m, res, done, completing, room)
        self._counters(m, take)
        return m

    def _skew(self, m, take, flags_t):
        """a[r] through r + 1 registers with the beat's flags, b[c] through c + 1: each row's
        ``(a, flags)`` and each column's ``b`` as they enter the cells."""
        n = self._n
        a_in, b_in = [], []
        for r in range(n):
            v, f = self.i.payload.a[r], Signal(flags_t, name=f"skew_a_flags_in_{r}")
            m.d.comb += [f.valid.eq(take), f.first.eq(self.i.payload.first),
                         f.last.eq(self.i.payload.last)]
            for d in range(r + 1):
                rv = Signal(signed(self._a_bits), name=f"skew_a_{r}_{d}")
                rf = Signal(flags_t, name=f"skew_af_{r}_{d}")
                m.d.sync += [rv.eq(v), rf.eq(f)]
                v, f = rv, rf
            a_in.append((v, f))
        for c in range(n):
            v = self.i.payload.b[c]
            for d in range(c + 1):
                rv = Signal(signed(8), name=f"skew_b_{c}_{d}")
                m.d.sync += rv.eq(v)
                v = rv
            b_in.append(v)
        return a_in, b_in

    def _cells(self, m, a_in, b_in, flags_t):
        """The n x n cells: a right, b down, product, sum, result register; and each row's
        completion, a cycle after its last cell's result (one row a cycle at most). Returns
        the results, each row's done flag and whether a row completes now."""
        n = self._n
        res = [[None] * n for _ in range(n)]
        done = [Signal(name=f"row_{r}_done") for r in range(n)]
        last_col = []
        b_row = b_in
        for r in range(n):
            a_v, a_f = a_in[r]
            b_next = []
            for c in range(n):
                b_v = b_row[c]
                # the cell's registers pass a (with its flags) right and b down; the flags a
                # cycle on are also the cell's own, for its registered product
                na_f = Signal(flags_t, name=f"pe_{r}_{c}_af")
                m.d.sync += na_f.eq(a_f)
                res[r][c] = self._cell(m, r, c, a_v, na_f, b_v)
                if c + 1 < n:
                    na_v = Signal(signed(self._a_bits), name=f"pe_{r}_{c}_a")
                    m.d.sync += na_v.eq(a_v)
                    a_v = na_v
                else:
                    m.d.sync += done[r].eq(na_f.valid & na_f.last)
                    last_col.append(na_f.valid & na_f.last)
                a_f = na_f
                if r + 1 < n:
                    nb = Signal(signed(8), name=f"pe_{r}_{c}_b")
                    m.d.sync += nb.eq(b_v)
                    b_next.append(nb)
            b_row = b_next
        completing = Signal()
        m.d.comb += completing.eq(Cat(*last_col).any())
        return res, done, completing

    def _cell(self, m, r, c, a_v, p_f, b_v):
        """Cell (r, c): the product registered, then the sum under the beat's flags a cycle
        on (``p_f``); returns its result register (the sum at the tile's last beat)."""
        prod = Signal(signed(self._a_bits + 8), name=f"pe_{r}_{c}_prod", reset_less=True)
        m.d.sync += prod.eq(a_v * b_v)
        acc = Signal(signed(self._acc_bits), name=f"pe_{r}_{c}_acc")
        res = Signal(signed(self._acc_bits), name=f"pe_{r}_{c}_res")
        total = Signal(signed(self._acc_bits), name=f"pe_{r}_{c}_sum")
        m.d.comb += total.eq(Mux(p_f.first, 0, acc) + prod)
        with m.If(p_f.valid):
            m.d.sync += acc.eq(total)
        with m.If(p_f.valid & p_f.last):
            m.d.sync += res.eq(total)
        return res

    def _drain(self, m, res, done, completing, room):
        """Every completed row goes into the row queue (a LUT RAM read without a clock), and
        ``o`` offers the queue's head: its results straight from the RAM, ``row`` and
        ``last`` from a counter (rows leave in order), ``valid`` from a registered flag (the
        queue holds a row). The consumer's ``ready`` reaches the queue's read pointer and
        counters alone, a dozen registers (an output register and its skid buffer, whose
        2n·acc_bits data registers loaded under ``ready``, had been the engine's slowest
        handshake). The room flag counts the rows owed: n more with each ``last`` taken, one
        less with each row out."""
        n, q, acc_bits = self._n, self.queue_rows, self._acc_bits
        row_t = data.ArrayLayout(signed(acc_bits), n)
        put = Signal()                          # a row completes (registered)
        m.d.sync += put.eq(completing)
        row = Signal(row_t)
        for c in range(n):
            m.d.comb += row[c].eq(reduce_tree(
                m, [Mux(done[r], res[r][c], 0) for r in range(n)],
                lambda p_, q_: p_ | q_, f"drain_c{c}"))
        has, head, get = head_queue(m, "queue", row_t, q, put=put, data=row,
                                    ready=self.o.ready, valid_copies=self.o_valid_copy)
        out_row = Signal(range(n))
        out_last = Signal(init=int(n == 1))     # out_row == n - 1, registered
        m.d.comb += [self.o.valid.eq(has), self.o.payload.c.eq(head),
                     self.o.payload.row.eq(out_row), self.o.payload.last.eq(out_last)]
        with m.If(get):
            m.d.sync += out_row.eq(out_row + 1)
            if n > 1:
                m.d.sync += out_last.eq(out_row == n - 2)
        drained = get
        # The rows owed move by one of four steps (a tile's last beat in: +n; a row out: -1),
        # whose sums and room flags are worked out from the count alone, so the beat's take
        # and the row's leave only select among them; the take is spelled out from the
        # input's registers and a room flag of the count's own (``room``, which the
        # producer's ready and take reach, had been routed 3.1 ns to the take and the take
        # 3.2 ns on into the count's adder: for the clock; cycle for cycle the same)
        owed = Signal(range(q + n + 1))
        own_room = Signal(init=1, name="room_own", attrs=KEEP_COPY)
        tile_in = Signal()
        m.d.comb += tile_in.eq(self.i.valid & self.i.payload.last & own_room)

        def step(value):
            return Mux(tile_in, Mux(drained, value[3], value[2]),
                       Mux(drained, value[1], value[0]))
        deltas = (0, -1, n, n - 1)
        sums = [(owed + d)[:len(owed)] for d in deltas]
        # the room each step would leave, kept in registers a cycle ahead (each the step's
        # choice among comparisons of the count alone), so the room flags are a 4:1 choice
        # of registers by the take and the leave (the comparisons after the consumer's
        # ready had put 3 LUTs between it and the flag: for the clock; the same flags)
        rooms = Signal(len(deltas),
                       init=sum(1 << i for i, e in enumerate(deltas) if e <= q - n))
        m.d.sync += rooms.eq(Cat(step([owed <= q - n - d - e for d in deltas])
                                 for e in deltas))
        m.d.sync += [owed.eq(step(sums)), room.eq(step(list(rooms))),
                     own_room.eq(step(list(rooms)))]

    def _counters(self, m, take):
        """busy: from a tile's first beat until its last row has left."""
        perf = self.perf
        in_tile = Signal()
        # tiles whose last beat is in, not drained: at most the rows owed over n, plus one
        pending = Signal(range(self.queue_rows + 2))
        tile_out = Signal()
        m.d.comb += tile_out.eq(self.o.valid & self.o.ready & self.o.payload.last)
        with m.If(take):
            m.d.sync += in_tile.eq(~self.i.payload.last)
        m.d.sync += pending.eq(pending + (take & self.i.payload.last) - tile_out)
        with m.If(in_tile | (pending != 0) | take):
            m.d.sync += perf.busy.eq(perf.busy + 1)
            with m.If(in_tile & ~self.i.valid):
                m.d.sync += perf.starved.eq(perf.starved + 1)
        with m.If(take):
            m.d.sync += perf.beats.eq(perf.beats + 1)
        with m.If(self.i.valid & ~self.i.ready):
            m.d.sync += perf.held.eq(perf.held + 1)
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += perf.rows.eq(perf.rows + 1)
            with m.If(self.o.payload.last):
                m.d.sync += perf.tiles.eq(perf.tiles + 1)
