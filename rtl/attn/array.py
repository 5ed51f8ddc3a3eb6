"""The systolic int8 array: output-stationary N x N multiply-accumulate cells."""
from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from vrex.rules import array_rules

from ..lib import counter_layout, reduce_tree

__all__ = ["SystolicArray"]


class SystolicArray(wiring.Component):
    """``C = A·Bᵀ`` one N x N output tile at a time, int8 in, ``acc_bits`` signed out.

    Dataflow: output-stationary. Cell (r, c) keeps the running sum of tile row r, column c.
    Beat k of a tile carries ``a[r] = A[r, k]`` and ``b[c] = B[c, k]`` (the sequencer zero-pads
    rows and columns past the matrix edge), ``first`` on k = 0 and ``last`` on k = K - 1. The
    input skew registers ``a[r]`` r + 1 times and ``b[c]`` c + 1 times; ``a`` then moves right
    one cell a cycle with its ``first``/``last``/``valid`` flags and ``b`` moves down, so cell
    (r, c) sees beat k at cycle k + r + c + 1. On ``last`` a cell moves its sum into its result
    register; the drain offers the tile's rows in order on ``o``, row r as soon as its N
    results are in, while the cells already accumulate the next tile. Why output-stationary:
    each product is used once, the tile's K-long reduction stays in the cell (no partial sums
    cross the array), so K is free (any length at full rate) and only the N x N results leave
    it, N beats per tile, hidden behind the next tile's K beats whenever K >= N.

    Back-pressure: a cell whose result register still holds an undrained result cannot take
    the next tile's ``last``; the whole array (skew, cells) then holds for that cycle, so
    nothing is lost and ``i`` is not ready. A cycle without an input beat sends a bubble.
    Contract: a tile has at least n beats (the sequencer pads a shorter reduction with zero
    beats, which costs nothing: the drain takes n cycles a tile anyway). Then the previous
    tile's ``last`` has left every row before the next one can meet an undrained result, so a
    hold never waits on a result behind it and the drain always makes progress.

    Timing: one beat a cycle; :attr:`latency` cycles from a tile's last beat to its last row on
    ``o`` with ``o`` ready (:meth:`tile_cycles`).

    Parameters (keyword-only, all required; ``vrex.rules.array_rules``)
        ``n`` cells per side (a power of two, at most 64); ``k_max`` the longest int8
        reduction the accumulators hold without overflow; ``acc_bits`` accumulator width (at
        least 16 + log2(k_max)); ``a_bits`` the signed width of A (8, or wider for the
        engine's weights in P·V: the engine's rule bounds those sums);
        ``counter_bits`` counter width.
    Attributes
        ``i`` (in stream: ``a[n]`` signed ``a_bits``, ``b[n]`` int8, ``first``, ``last``); ``o`` (out stream:
        ``c[n]`` signed ``acc_bits``, ``row`` in the tile, ``last`` on row n - 1); ``perf``:
        ``busy`` (cycles with work in the array), ``beats`` (input beats taken: n² MACs
        each), ``starved`` (cycles inside a tile without an input beat), ``held`` (cycles held
        by back-pressure), ``tiles``, ``rows``.
    """

    PERF = ("busy", "beats", "starved", "held", "tiles", "rows")

    def __init__(self, *, n: int, k_max: int, acc_bits: int, a_bits: int, counter_bits: int):
        array_rules(n=n, k_max=k_max, acc_bits=acc_bits, a_bits=a_bits,
                    counter_bits=counter_bits)
        self._n, self._k_max, self._acc_bits, self._a_bits = n, k_max, acc_bits, a_bits
        self.in_layout = data.StructLayout({"a": data.ArrayLayout(signed(a_bits), n),
                                            "b": data.ArrayLayout(signed(8), n),
                                            "first": 1, "last": 1})
        self.out_layout = data.StructLayout({"c": data.ArrayLayout(signed(acc_bits), n),
                                             "row": range(n), "last": 1})
        self.perf_layout = counter_layout(self.PERF, counter_bits)
        super().__init__({
            "i": In(stream.Signature(self.in_layout)),
            "o": Out(stream.Signature(self.out_layout)),
            "perf": Out(self.perf_layout),
        })

    @classmethod
    def from_config(cls, cfg) -> "SystolicArray":
        return cls(**cfg.block_params("attn_array"))

    n = property(lambda self: self._n)
    acc_bits = property(lambda self: self._acc_bits)

    @property
    def latency(self) -> int:
        """Cycles from the transfer of a tile's last beat to the offer of its last row, ``o``
        ready: the skew and the array (2n - 1), the result register (1)."""
        return 2 * self._n

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
        x = SimpleNamespace()            # the signals the sections below share
        x.run = Signal()                 # the whole array advances (no result is held up)
        x.take = Signal()
        m.d.comb += [self.i.ready.eq(x.run), x.take.eq(self.i.valid & x.run)]
        x.flags_t = data.StructLayout({"valid": 1, "first": 1, "last": 1})
        self._skew(m, x)
        self._drain_state(m, x)
        self._cells(m, x)
        self._drain(m, x)
        self._counters(m, x)
        return m

    def _skew(self, m, x):
        """a[r] through r + 1 registers with the beat's flags, b[c] through c + 1."""
        n, run = self._n, x.run
        x.a_in, x.b_in = [], []
        for r in range(n):
            v, f = self.i.payload.a[r], Signal(x.flags_t, name=f"skew_a_flags_in_{r}")
            m.d.comb += [f.valid.eq(x.take), f.first.eq(self.i.payload.first),
                         f.last.eq(self.i.payload.last)]
            for d in range(r + 1):
                rv = Signal(signed(self._a_bits), name=f"skew_a_{r}_{d}")
                rf = Signal(x.flags_t, name=f"skew_af_{r}_{d}")
                with m.If(run):
                    m.d.sync += [rv.eq(v), rf.eq(f)]
                v, f = rv, rf
            x.a_in.append((v, f))
        for c in range(n):
            v = self.i.payload.b[c]
            for d in range(c + 1):
                rv = Signal(signed(8), name=f"skew_b_{c}_{d}")
                with m.If(run):
                    m.d.sync += rv.eq(v)
                v = rv
            x.b_in.append(v)

    def _drain_state(self, m, x):
        n = self._n
        x.row = Signal(range(n))                # the drain's next row
        x.drained = Signal()
        x.freeing = [Signal(name=f"drain_free_{r}") for r in range(n)]
        m.d.comb += [x.freeing[r].eq(x.drained & (x.row == r)) for r in range(n)]
        x.res = [[Signal(signed(self._acc_bits), name=f"pe_{r}_{c}_res") for c in range(n)]
                 for r in range(n)]
        x.full = [[Signal(name=f"pe_{r}_{c}_full") for c in range(n)] for r in range(n)]
        x.capture = [[Signal(name=f"pe_{r}_{c}_capture") for c in range(n)] for r in range(n)]

    def _cells(self, m, x):
        """The n x n cells: a right, b down, product, sum, result register; the hold."""
        n, run = self._n, x.run
        conflicts = []
        b_row = x.b_in
        for r in range(n):
            a_v, a_f = x.a_in[r]
            b_next = []
            for c in range(n):
                b_v = b_row[c]
                conflicts.append(self._cell(m, x, r, c, a_v, a_f, b_v))
                # the cell's registers pass a (with its flags) right and b down
                if c + 1 < n:
                    na_v = Signal(signed(self._a_bits), name=f"pe_{r}_{c}_a")
                    na_f = Signal(x.flags_t, name=f"pe_{r}_{c}_af")
                    with m.If(run):
                        m.d.sync += [na_v.eq(a_v), na_f.eq(a_f)]
                    a_v, a_f = na_v, na_f
                if r + 1 < n:
                    nb = Signal(signed(8), name=f"pe_{r}_{c}_b")
                    with m.If(run):
                        m.d.sync += nb.eq(b_v)
                    b_next.append(nb)
            b_row = b_next
        # A conflict is a captured result meeting an undrained one; only the row being
        # drained can be freed this cycle, so the rows' conflicts are ORed from registers
        # alone, and the drain's handshake (the consumer's ready: late in the cycle) enters
        # the hold through one gate: run = ~(other rows' | drain row's unless it drains now).
        per_row = [reduce_tree(m, conflicts[r * n:(r + 1) * n], lambda p, q: p | q,
                               f"conflict_row_{r}") for r in range(n)]
        others = reduce_tree(m, [per_row[r] & (x.row != r) for r in range(n)],
                             lambda p, q: p | q, "conflict_others")
        here = Signal()
        m.d.comb += [here.eq(Array(per_row)[x.row]),
                     run.eq(~(others | (here & ~x.drained)))]

    def _cell(self, m, x, r, c, a_v, a_f, b_v):
        """Cell (r, c); returns its conflict: a result to keep while the last is undrained."""
        run = x.run
        acc = Signal(signed(self._acc_bits), name=f"pe_{r}_{c}_acc")
        # (a registered product, for the clock, made nextpnr's router fail to converge on the
        # 8 x 8 array in 30 minutes, against 2 minutes without it: not kept)
        total = Signal(signed(self._acc_bits), name=f"pe_{r}_{c}_sum")
        m.d.comb += total.eq(Mux(a_f.first, 0, acc) + a_v * b_v)
        capture = x.capture[r][c]
        m.d.comb += capture.eq(a_f.valid & a_f.last)
        with m.If(run & a_f.valid):
            m.d.sync += acc.eq(total)
        with m.If(run & capture):
            m.d.sync += x.res[r][c].eq(total)
        # (a result register drained this very cycle takes the next result: _cells)
        return capture & x.full[r][c]

    def _drain(self, m, x):
        """Row ``row`` goes out once its n results are in."""
        n, row = self._n, x.row
        row_full = Signal()
        m.d.comb += row_full.eq(Array(Cat(*x.full[r]).all() for r in range(n))[row])
        for c in range(n):
            m.d.comb += self.o.payload.c[c].eq(Array(x.res[r][c] for r in range(n))[row])
        m.d.comb += [self.o.valid.eq(row_full), self.o.payload.row.eq(row),
                     self.o.payload.last.eq(row == n - 1)]
        m.d.comb += x.drained.eq(self.o.valid & self.o.ready)
        with m.If(x.drained):
            m.d.sync += row.eq(Mux(row == n - 1, 0, row + 1))
        for r in range(n):
            for c in range(n):
                with m.If(x.run & x.capture[r][c]):
                    m.d.sync += x.full[r][c].eq(1)
                with m.Elif(x.freeing[r]):
                    m.d.sync += x.full[r][c].eq(0)

    def _counters(self, m, x):
        """busy: from a tile's first beat until its last row has left."""
        n, perf, take = self._n, self.perf, x.take
        in_tile = Signal()
        pending = Signal(range(2 * n + 2))      # tiles whose last beat is in, not drained
        tile_out = Signal()
        m.d.comb += tile_out.eq(x.drained & (x.row == n - 1))
        with m.If(take):
            m.d.sync += in_tile.eq(~self.i.payload.last)
        m.d.sync += pending.eq(pending + (take & self.i.payload.last) - tile_out)
        with m.If(in_tile | (pending != 0) | take):
            m.d.sync += perf.busy.eq(perf.busy + 1)
            with m.If(in_tile & ~self.i.valid & x.run):
                m.d.sync += perf.starved.eq(perf.starved + 1)
        with m.If(take):
            m.d.sync += perf.beats.eq(perf.beats + 1)
        with m.If(~x.run):
            m.d.sync += perf.held.eq(perf.held + 1)
        with m.If(x.drained):
            m.d.sync += perf.rows.eq(perf.rows + 1)
            with m.If(x.row == n - 1):
                m.d.sync += perf.tiles.eq(perf.tiles + 1)
