"""The attention engine: operand buffers and a command sequencer around the systolic array."""
from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Array, Const, Module, Mux, Signal, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from vrex.rules import engine_rules

from ..lib import counter_layout
from .array import SystolicArray

__all__ = ["AttentionEngine", "Kind"]


class Kind:
    """Command kinds (the ``kind`` field of a command)."""
    GEMM = 0        # C = A·Bᵀ, int out on o_gemm
    HASH = 1        # sign(A·Bᵀ - bias) packed into hash words on o_hash (the HCU's input)


class AttentionEngine(wiring.Component):
    """Commands over int8 operands, computed on an n x n systolic array.

    A command (``cmd``: ``kind``, ``m``, ``k``, ``l``, and the ``layer`` and ``step`` a hash
    command's tokens belong to) names ``A [m, k]`` and ``B [l, k]``. Operands arrive as row
    chunks of n int8 values, a row as ``ceil(k / n)`` beats (the last zero-padded): for a hash
    command first ``ceil(l / n)`` beats of n biases on ``bias``, then B's l rows on ``b``, then
    A's m rows on ``a``.

    - ``GEMM``: ``C = A·Bᵀ`` on ``o_gemm``: one beat per row and column tile (``c[n]``, the
      row, the tile's first column; ``last`` on the command's final beat), row tiles outer.
    - ``HASH``: ``l`` must be the hash width ``n_hp``; hyperplane j of token t is set when
      ``(A·Bᵀ)[t, j] > bias[j]`` (docs/numerics.md §4: sign of the projection less the
      centring bias); one beat per token on ``o_hash`` in the HCU's input format (``hash``,
      ``layer``, ``step``; ``first`` on the command's first token, ``last`` on its final one),
      so ``o_hash`` connects to the HCU's ``i`` without glue.

    Buffers: B whole (``b_rows`` rows of ``k_buf`` values, one memory per row residue mod n,
    so beat k of a tile reads one word of each and picks element k mod n: no transposer); A two
    row tiles (n rows each), so the next row tile loads while the current one computes. The
    feeder reads both buffers through a one-stage pipeline that back-pressure from the array
    holds; rows past m or l and steps past k feed zeros, and a reduction shorter than n is
    padded to n beats (the array's contract).

    A command with ``m``, ``k`` or ``l`` zero, ``k > k_buf``, ``l > b_rows``, an unknown kind,
    or a hash command with ``l != n_hp`` is refused: its operand beats (as its sizes imply) are
    consumed and dropped, ``error`` is set (sticky) with ``error_code``, ``refused`` counts it,
    and the engine takes the next command.

    Parameters (keyword-only, all required; ``vrex.rules.engine_rules``)
        ``n``, ``k_max``, ``acc_bits`` as the array's; ``k_buf`` the longest row the buffers
        hold (a multiple of n, at most k_max); ``b_rows`` rows of B held (a multiple of n);
        ``n_hp`` hash width; ``layers``, ``step_bits`` the HCU's tag widths;
        ``counter_bits``.
    Attributes
        ``cmd``, ``a``, ``b``, ``bias`` in streams; ``o_gemm``, ``o_hash`` out streams;
        ``error``, ``error_code`` (1 bad size, 2 bad kind, 3 hash width); ``perf``: the array's
        counters (``beats``, ``starved``, ``held``, ``tiles``, ``rows``) and the engine's
        (``busy``, ``commands``, ``refused``, ``feed_stalled``, ``out_stalled``).
    """

    PERF = ("busy", "commands", "refused", "feed_stalled", "out_stalled", "beats", "starved",
            "held", "tiles", "rows")

    def __init__(self, *, n: int, k_max: int, acc_bits: int, k_buf: int, b_rows: int,
                 n_hp: int, layers: int, step_bits: int, counter_bits: int):
        engine_rules(n=n, k_max=k_max, acc_bits=acc_bits, k_buf=k_buf, b_rows=b_rows,
                     n_hp=n_hp, layers=layers, step_bits=step_bits, counter_bits=counter_bits)
        self._n, self._k_max, self._acc_bits = n, k_max, acc_bits
        self._k_buf, self._b_rows, self._n_hp = k_buf, b_rows, n_hp
        self._layers, self._step_bits, self._counter_bits = layers, step_bits, counter_bits
        self._array = SystolicArray(n=n, k_max=k_max, acc_bits=acc_bits,
                                    counter_bits=counter_bits)
        layer_bits = max(1, ceil_log2(layers))
        vec = data.ArrayLayout(signed(8), n)
        self.cmd_layout = data.StructLayout({"kind": 2, "m": 16, "k": 16, "l": 16,
                                             "layer": layer_bits, "step": step_bits})
        self.chunk_layout = data.StructLayout({"data": vec})
        self.bias_layout = data.StructLayout({"data": data.ArrayLayout(signed(acc_bits), n)})
        self.gemm_layout = data.StructLayout({"c": data.ArrayLayout(signed(acc_bits), n),
                                              "row": 16, "col": 16, "last": 1})
        # the HCU's input beat, field for field
        self.hash_layout = data.StructLayout({"hash": n_hp, "layer": layer_bits,
                                              "step": step_bits, "first": 1, "last": 1})
        self.perf_layout = counter_layout(self.PERF, counter_bits)
        super().__init__({
            "cmd": In(stream.Signature(self.cmd_layout)),
            "a": In(stream.Signature(self.chunk_layout)),
            "b": In(stream.Signature(self.chunk_layout)),
            "bias": In(stream.Signature(self.bias_layout)),
            "o_gemm": Out(stream.Signature(self.gemm_layout)),
            "o_hash": Out(stream.Signature(self.hash_layout)),
            "error": Out(1),
            "error_code": Out(2),
            "perf": Out(self.perf_layout),
        })

    @classmethod
    def from_config(cls, cfg) -> "AttentionEngine":
        return cls(**cfg.block_params("attn"))

    n = property(lambda self: self._n)
    k_buf = property(lambda self: self._k_buf)
    b_rows = property(lambda self: self._b_rows)
    n_hp = property(lambda self: self._n_hp)

    @property
    def memory_bits(self) -> int:
        kc = self._k_buf // self._n
        return 8 * self._n * self._n * kc * (2 + self._b_rows // self._n)

    def command_cycles(self, m: int, k: int, l: int, hash_: bool = False) -> int:
        """Cycles from a command's transfer to its last output beat, every operand stream
        valid and every output ready: biases (hash), B's rows, A's first row tile, then one
        tile of ``max(k, n)`` beats per row tile and column tile (the next row tile loads
        meanwhile), and the array's flush up to the last real row (model checked against the
        RTL in the tests)."""
        n = self._n
        kc = -(-k // n)
        mt, lt = -(-m // n), -(-l // n)
        first_rows = min(n, m)
        return (1 + (lt if hash_ else 0) + l * kc + first_rows * kc + 2
                + mt * lt * max(k, n) - 1 + self._array.latency - (n - 1 - (m - 1) % n))

    def elaborate(self, platform):
        m = Module()
        m.submodules.array = self._array
        x = SimpleNamespace()
        self._buffers(m, x)
        self._command(m, x)
        self._a_loader(m, x)
        self._feeder(m, x)
        self._outputs(m, x)
        self._counters(m, x)
        return m

    def _buffers(self, m, x):
        """One memory per row residue for A (two row tiles) and for B, n int8 a word."""
        n = self._n
        x.kc_max = self._k_buf // n
        word = data.ArrayLayout(signed(8), n)
        x.a_mem, x.b_mem = [], []
        for r in range(n):
            am = memory.Memory(shape=word, depth=2 * x.kc_max, init=[])
            bm = memory.Memory(shape=word, depth=(self._b_rows // n) * x.kc_max, init=[])
            m.submodules[f"a_lane_{r}"] = am
            m.submodules[f"b_lane_{r}"] = bm
            x.a_mem.append((am.write_port(), am.read_port()))
            x.b_mem.append((bm.write_port(), bm.read_port()))
        # the hash biases, n a word, word j for hyperplanes j·n .. j·n + n - 1
        bm = memory.Memory(shape=data.ArrayLayout(signed(self._acc_bits), n),
                           depth=-(-self._n_hp // n), init=[])
        m.submodules.bias_mem = bm
        x.bias_wr, x.bias_rd = bm.write_port(), bm.read_port()

    def _command(self, m, x):
        """Take a command, check it, load biases and B (or drop a refused command's beats)."""
        n = self._n
        x.cur = cur = Signal(self.cmd_layout)
        x.kc = kc = Signal(16)                 # beats a row
        x.lt = lt = Signal(16)                 # column tiles
        x.mt = mt = Signal(16)                 # row tiles
        x.kt = kt = Signal(16)                 # beats a tile: k padded to n
        x.start = start = Signal()             # the A loader and the feeder may begin
        x.feed_done = Signal()
        x.out_done = Signal()
        p = self.cmd.payload
        bad_size = Signal()
        bad_kind = Signal()
        bad_hash = Signal()
        m.d.comb += [
            bad_size.eq((p.m == 0) | (p.k == 0) | (p.l == 0) | (p.k > self._k_buf) |
                        (p.l > self._b_rows)),
            bad_kind.eq(p.kind > Kind.HASH),
            bad_hash.eq((p.kind == Kind.HASH) & (p.l != self._n_hp)),
        ]
        row = Signal(16)
        chunk = Signal(16)
        x.refuse = Signal()

        def row_chunk_step(row, chunk):
            with m.If(chunk == kc - 1):
                m.d.sync += [chunk.eq(0), row.eq(row + 1)]
            with m.Else():
                m.d.sync += chunk.eq(chunk + 1)

        # a refused command's beats, counted as rows of chunks (no multiplier)
        drop_a_row, drop_a_chunk = Signal(16), Signal(16)
        drop_b_row, drop_b_chunk = Signal(16), Signal(16)
        drop_bias = Signal(16)
        a_left = Signal()
        b_left = Signal()
        m.d.comb += [a_left.eq(drop_a_row < cur.m), b_left.eq(drop_b_row < cur.l)]

        with m.FSM(name="cmd_fsm"):
            with m.State("IDLE"):
                m.d.comb += self.cmd.ready.eq(1)
                with m.If(self.cmd.valid):
                    kcv = (p.k + n - 1) >> exact_log2(n)
                    m.d.sync += [cur.eq(p), kc.eq(kcv), lt.eq((p.l + n - 1) >> exact_log2(n)),
                                 mt.eq((p.m + n - 1) >> exact_log2(n)),
                                 kt.eq(Mux(p.k < n, n, p.k)), row.eq(0), chunk.eq(0)]
                    with m.If(bad_size | bad_kind | bad_hash):
                        m.d.comb += x.refuse.eq(1)
                        m.d.sync += [self.error.eq(1),
                                     self.error_code.eq(Mux(bad_size, 1, Mux(bad_kind, 2, 3))),
                                     drop_a_row.eq(Mux(kcv == 0, p.m, 0)), drop_a_chunk.eq(0),
                                     drop_b_row.eq(Mux(kcv == 0, p.l, 0)), drop_b_chunk.eq(0),
                                     drop_bias.eq(Mux(p.kind == Kind.HASH,
                                                      (p.l + n - 1) >> exact_log2(n), 0))]
                        m.next = "DROP"
                    with m.Elif(p.kind == Kind.HASH):
                        m.next = "BIAS"
                    with m.Else():
                        m.next = "LOAD_B"
            with m.State("DROP"):
                m.d.comb += [self.a.ready.eq(a_left), self.b.ready.eq(b_left),
                             self.bias.ready.eq(drop_bias != 0)]
                with m.If(self.a.valid & a_left):
                    row_chunk_step(drop_a_row, drop_a_chunk)
                with m.If(self.b.valid & b_left):
                    row_chunk_step(drop_b_row, drop_b_chunk)
                with m.If(self.bias.valid & (drop_bias != 0)):
                    m.d.sync += drop_bias.eq(drop_bias - 1)
                with m.If(~a_left & ~b_left & (drop_bias == 0)):
                    m.next = "IDLE"
            with m.State("BIAS"):
                m.d.comb += self.bias.ready.eq(1)
                m.d.comb += [x.bias_wr.addr.eq(row), x.bias_wr.data.eq(self.bias.payload.data),
                             x.bias_wr.en.eq(self.bias.valid)]
                with m.If(self.bias.valid):
                    m.d.sync += row.eq(row + 1)
                    with m.If(row == lt - 1):
                        m.d.sync += row.eq(0)
                        m.next = "LOAD_B"
            with m.State("LOAD_B"):
                m.d.comb += self.b.ready.eq(1)
                lane = row[:exact_log2(n)] if n > 1 else Const(0, 1)
                addr = (row >> exact_log2(n)) * x.kc_max + chunk
                for r, (wr, _) in enumerate(x.b_mem):
                    m.d.comb += [wr.addr.eq(addr), wr.data.eq(self.b.payload.data),
                                 wr.en.eq(self.b.valid & (lane == r))]
                with m.If(self.b.valid):
                    row_chunk_step(row, chunk)
                    with m.If((chunk == kc - 1) & (row == cur.l - 1)):
                        m.next = "RUN"
            with m.State("RUN"):
                m.d.comb += start.eq(1)
                with m.If(x.feed_done & x.out_done):
                    m.next = "IDLE"

    def _a_loader(self, m, x):
        """Load A's row tiles into the two halves, a half as soon as the feeder frees it."""
        n = self._n
        x.half_full = [Signal(name=f"a_half_full_{h}") for h in range(2)]
        x.half_free = [Signal(name=f"a_half_free_{h}") for h in range(2)]
        tile = Signal(16)
        row = Signal(range(n + 1))
        chunk = Signal(16)
        rows_here = Signal(range(n + 1))
        m.d.comb += rows_here.eq(Mux(x.cur.m - (tile << exact_log2(n)) >= n, n,
                                     x.cur.m - (tile << exact_log2(n))))
        half = tile[0]
        with m.FSM(name="a_fsm"):
            with m.State("WAIT"):
                with m.If(x.start & (tile < x.mt) & ~Array(x.half_full)[half]):
                    m.next = "LOAD"
                with m.If(~x.start):
                    m.d.sync += [tile.eq(0), row.eq(0), chunk.eq(0)]
            with m.State("LOAD"):
                m.d.comb += self.a.ready.eq(1)
                addr = half * x.kc_max + chunk
                for r, (wr, _) in enumerate(x.a_mem):
                    m.d.comb += [wr.addr.eq(addr), wr.data.eq(self.a.payload.data),
                                 wr.en.eq(self.a.valid & (row == r))]
                with m.If(self.a.valid):
                    with m.If(chunk == x.kc - 1):
                        m.d.sync += [chunk.eq(0), row.eq(row + 1)]
                        with m.If(row == rows_here - 1):
                            m.d.sync += [row.eq(0), tile.eq(tile + 1)]
                            for h in range(2):
                                with m.If(half == h):
                                    m.d.sync += x.half_full[h].eq(1)
                            m.next = "WAIT"
                    with m.Else():
                        m.d.sync += chunk.eq(chunk + 1)
        for h in range(2):
            with m.If(x.half_free[h]):
                m.d.sync += x.half_full[h].eq(0)

    def _feeder(self, m, x):
        """Read both buffers, one beat a cycle, into the array: f0 addresses, f1 data."""
        n = self._n
        arr = self._array
        tile_i = Signal(16)
        tile_j = Signal(16)
        kk = Signal(16)
        advance = Signal()
        issue = Signal()
        f1_valid = Signal()
        f1_sel = Signal(range(n))
        f1_first = Signal()
        f1_last = Signal()
        f1_a_rows = Signal(range(n + 1))
        f1_b_rows = Signal(range(n + 1))
        f1_in_k = Signal()
        half = tile_i[0]
        m.d.comb += advance.eq(~f1_valid | arr.i.ready)
        ready_half = Signal()
        m.d.comb += ready_half.eq(Array(x.half_full)[half])
        running = Signal()
        m.d.comb += [running.eq(x.start & (tile_i < x.mt)),
                     issue.eq(advance & running & ready_half)]
        chunk = kk >> exact_log2(n) if n > 1 else kk
        for r in range(n):
            _, ard = x.a_mem[r]
            _, brd = x.b_mem[r]
            m.d.comb += [ard.addr.eq(half * x.kc_max + chunk),
                         brd.addr.eq(tile_j * x.kc_max + chunk),
                         ard.en.eq(advance), brd.en.eq(advance)]
        with m.If(advance):
            base_i = tile_i << exact_log2(n)
            base_j = tile_j << exact_log2(n)
            m.d.sync += [f1_valid.eq(issue), f1_sel.eq(kk[:exact_log2(n)] if n > 1 else 0),
                         f1_first.eq(kk == 0), f1_last.eq(kk == x.kt - 1),
                         f1_in_k.eq(kk < x.cur.k),
                         f1_a_rows.eq(Mux(x.cur.m - base_i >= n, n, x.cur.m - base_i)),
                         f1_b_rows.eq(Mux(x.cur.l - base_j >= n, n, x.cur.l - base_j))]
        for r in range(n):
            _, ard = x.a_mem[r]
            _, brd = x.b_mem[r]
            ea = Array(ard.data[t] for t in range(n))[f1_sel]
            eb = Array(brd.data[t] for t in range(n))[f1_sel]
            m.d.comb += [arr.i.payload.a[r].eq(Mux(f1_in_k & (r < f1_a_rows), ea, 0)),
                         arr.i.payload.b[r].eq(Mux(f1_in_k & (r < f1_b_rows), eb, 0))]
        m.d.comb += [arr.i.valid.eq(f1_valid), arr.i.payload.first.eq(f1_first),
                     arr.i.payload.last.eq(f1_last)]
        x.feed_stalled = Signal()
        m.d.comb += x.feed_stalled.eq(f1_valid & ~arr.i.ready)
        with m.If(issue):
            with m.If(kk == x.kt - 1):
                m.d.sync += kk.eq(0)
                with m.If(tile_j == x.lt - 1):
                    m.d.sync += [tile_j.eq(0), tile_i.eq(tile_i + 1)]
                    for h in range(2):
                        with m.If(half == h):
                            m.d.comb += x.half_free[h].eq(1)
                with m.Else():
                    m.d.sync += tile_j.eq(tile_j + 1)
            with m.Else():
                m.d.sync += kk.eq(kk + 1)
        m.d.comb += x.feed_done.eq((tile_i >= x.mt) & ~f1_valid)
        with m.If(~x.start):
            m.d.sync += [tile_i.eq(0), tile_j.eq(0), kk.eq(0)]

    def _outputs(self, m, x):
        """Rows leaving the array: GEMM rows, or hash bits gathered per token."""
        n = self._n
        arr = self._array
        out_i = Signal(16)
        out_j = Signal(16)
        o = arr.o.payload
        grow = Signal(16)
        m.d.comb += grow.eq((out_i << exact_log2(n)) + o.row)
        real = Signal()
        m.d.comb += real.eq(grow < x.cur.m)
        last_tile = Signal()
        m.d.comb += last_tile.eq((out_i == x.mt - 1) & (out_j == x.lt - 1))
        take = Signal()
        is_hash = x.cur.kind == Kind.HASH
        # gemm
        m.d.comb += [self.o_gemm.payload.row.eq(grow),
                     self.o_gemm.payload.col.eq(out_j << exact_log2(n)),
                     self.o_gemm.payload.last.eq(last_tile & (grow == x.cur.m - 1))]
        for t in range(n):
            m.d.comb += self.o_gemm.payload.c[t].eq(o.c[t])
        # hash: bit j·n + t of the token is c[t] > bias[j·n + t]
        col0 = Signal(range(max(self._n_hp, n) + n))      # the tile's first hyperplane
        m.d.comb += col0.eq(out_j << exact_log2(n))
        # the bias word of the column tile in the array's output: read a cycle ahead, at the
        # next tile's address when this row ends a tile
        next_j = Signal(16)
        m.d.comb += next_j.eq(Mux(out_j == x.lt - 1, 0, out_j + 1))
        m.d.comb += x.bias_rd.addr.eq(Mux(take & o.last, next_j, out_j))
        bits = Signal(n)
        for t in range(n):
            m.d.comb += bits[t].eq(o.c[t] > x.bias_rd.data[t])
        acc = Array(Signal(self._n_hp, name=f"hash_acc_{r}") for r in range(n))
        word = Signal(self._n_hp + n)
        m.d.comb += word.eq(acc[o.row] | (bits << col0))
        m.d.comb += [self.o_hash.payload.hash.eq(word[:self._n_hp]),
                     self.o_hash.payload.layer.eq(x.cur.layer),
                     self.o_hash.payload.step.eq(x.cur.step),
                     self.o_hash.payload.first.eq(grow == 0),
                     self.o_hash.payload.last.eq(grow == x.cur.m - 1)]
        emit_hash = Signal()
        m.d.comb += emit_hash.eq(out_j == x.lt - 1)
        with m.If(~real):
            m.d.comb += arr.o.ready.eq(1)                       # padding rows are dropped
        with m.Elif(is_hash & ~emit_hash):
            m.d.comb += arr.o.ready.eq(1)                       # gathered, not yet a token
        with m.Elif(is_hash):
            m.d.comb += [self.o_hash.valid.eq(arr.o.valid), arr.o.ready.eq(self.o_hash.ready)]
        with m.Else():
            m.d.comb += [self.o_gemm.valid.eq(arr.o.valid), arr.o.ready.eq(self.o_gemm.ready)]
        m.d.comb += take.eq(arr.o.valid & arr.o.ready)
        with m.If(take):
            m.d.sync += acc[o.row].eq(Mux(emit_hash, 0, word[:self._n_hp]))
            with m.If(o.last):
                with m.If(out_j == x.lt - 1):
                    m.d.sync += [out_j.eq(0), out_i.eq(out_i + 1)]
                with m.Else():
                    m.d.sync += out_j.eq(out_j + 1)
        m.d.comb += x.out_done.eq(out_i >= x.mt)
        with m.If(~x.start):
            m.d.sync += [out_i.eq(0), out_j.eq(0)]
        x.out_stalled = Signal()
        m.d.comb += x.out_stalled.eq(arr.o.valid & ~arr.o.ready)

    def _counters(self, m, x):
        perf, ap = self.perf, self._array.perf
        for name in ("beats", "starved", "held", "tiles", "rows"):
            m.d.comb += getattr(perf, name).eq(getattr(ap, name))
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += perf.commands.eq(perf.commands + 1)
        with m.If(x.refuse):
            m.d.sync += perf.refused.eq(perf.refused + 1)
        with m.If(~self.cmd.ready):
            m.d.sync += perf.busy.eq(perf.busy + 1)
        with m.If(x.feed_stalled):
            m.d.sync += perf.feed_stalled.eq(perf.feed_stalled + 1)
        with m.If(x.out_stalled):
            m.d.sync += perf.out_stalled.eq(perf.out_stalled + 1)
