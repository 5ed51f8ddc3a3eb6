"""The attention engine: operand buffers and a command sequencer around the systolic array."""
from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from vrex.rules import engine_rules

from ..lib import (KEEP_COPY, copies, counter_layout, reduce_tree, register,
                   stepped_counter, tree_stage)
from .array import SystolicArray
from .exp import ExpUnit

# The engine's block RAMs are never read at an address written in the same cycle where the
# read matters: a buffer half is written only once freed by its reader and read only once
# full (A, P, the scores), B and V only before the feed, and a P·V sums word is read and
# written once a chunk. Yosys is told so (its read-during-write check off), or its FPGA
# mappings would emulate the old-data read of a write port beside the read port: a delayed
# write and an address compare with a multiplexer on every read bit (on ECP5, about one LUT
# and two flip-flops a bit, and the multiplexer on the path out of the RAM).
NO_RW_CHECK = {"no_rw_check": 1}

# The score take's copies, each driving one share of its loads (_score_writer): the halves'
# flags, the score RAM's write and the maxima, the ring of columns left, the row limit.
TAKES = ("flags", "write", "ring", "lim")

__all__ = ["AttentionEngine", "Kind", "Part", "SPAN_BITS"]


def mem_addr(hi, lo, size):
    """A buffer's address ``hi * size + lo``, for ``lo < size``: the two side by side when
    ``size`` is a power of two (no adder between the counters and the RAM's address)."""
    if size & (size - 1) == 0:
        return Cat(lo[:exact_log2(size)], hi)
    return hi * size + lo


def onehot_pick(sel, vals):
    """The value of ``vals`` whose flag in ``sel`` is set (one of them exactly), as an OR of
    ANDs: nested lists of the same shape. A multiplexer's select reaches every bit of every
    value; here each flag reaches its own value's bits only."""
    sel = [s for row in sel for s in row] if isinstance(sel[0], list) else list(sel)
    vals = [v for row in vals for v in row] if isinstance(vals[0], list) else list(vals)
    out = Mux(sel[0], vals[0], 0)
    for s, v in zip(sel[1:], vals[1:]):
        out = out | Mux(s, v, 0)
    return out


# the longest attended set a chunked light attention covers: 2**SPAN_BITS - 1 tokens (the
# width of a command's ``span``; the accumulated numerators and denominators are sized for it)
SPAN_BITS = 16


class Kind:
    """Command kinds (the ``kind`` field of a command)."""
    GEMM = 0        # C = A·Bᵀ, int out on o_gemm
    HASH = 1        # sign(A·Bᵀ - bias) packed into hash words on o_hash (the HCU's input)
    SCORE = 2       # scores, exp weights and counts of candidates on o_score (the WTU's input)
    ATTEND = 3      # light attention: softmax(Q·Kᵀ, causal)·V, exactly normalised, on o_attn


class Part:
    """Which part of a chunked light attention a command is (the ``part`` field): the whole
    set, or one chunk of the row maximum's pass or of the sums' pass."""
    WHOLE = 0       # the attended set in one command (l <= b_rows)
    MAX = 1         # a chunk's scores into the rows' running maximum; nothing out
    SUM = 2         # a chunk's weights and P·V added to the rows' sums; divided on ``final``


class AttentionEngine(wiring.Component):
    """Commands over int8 operands, computed on an n x n systolic array.

    A command (``cmd``: ``kind``, ``m``, ``k``, ``l``; the ``layer`` and ``step`` a hash
    command's tokens belong to; the exp unit's ``beta_m`` and ``beta_shift`` for scoring and
    attention; ``causal`` for attention) names ``A [m, k]`` and ``B [l, k]``. Operands arrive as row
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
    - ``SCORE`` (docs/numerics.md §6): A holds one KV head's query rows, B the representative
      keys of its ``l`` candidate clusters, and ``bias`` carries first the candidates' member
      counts (``ceil(l / n)`` beats of n). Per row, ``s = A·Bᵀ``, its maximum over the row,
      the weight ``exp((s - max)·α)`` from the exponential unit (β from the command's
      ``beta_m`` and ``beta_shift``) and the count, on ``o_score`` in the WTU's input format:
      ``ceil(l / wtu_lanes)`` beats a row (``valid`` lanes, ``first``/``last`` per row,
      ``head_last`` on the command's last row), so ``o_score`` connects to the WTU's ``i``
      without glue. A row's scores wait in a score buffer (two halves of n rows by ``b_rows``
      scores) until its last column tile has set its maximum; the exp stage then reads the
      half n scores a cycle while the array fills the other half with the next row tile.
    - ``ATTEND`` (docs/numerics.md §10): A holds query rows, ``b`` carries K's l rows then
      V's l rows; the last ``causal`` tokens are the step's own and row r is token
      ``r mod causal`` of the step, so it attends to the first ``l - causal + r mod causal +
      1`` tokens (all l when ``causal`` is 0). Per row tile: its scores (S) into a
      score-buffer half with the masked row max, the exp pass writing the weights P (two
      halves, a memory per row) and their sum, then P·V on the array (A = P, 17-bit; B = V's
      word of beat k's token), and n dividers giving ``round_div(Σ p·v · 2**out_frac_bits,
      Σ p)`` on ``o_attn`` (a beat per row and n-dimension tile, ``last`` on the final one).
      The array runs S0, S1, PV0, S2, PV1, ..., so a tile's exp pass hides under the next
      tile's scores. With ``pairs`` set, ``b`` carries each token's K row then its V row (the
      KV memory's slot layout, so fetched tokens stream in without a buffer). A command's
      set fits B (``l <= b_rows``); a longer set is a sequence of chunked commands
      (``golden.attn.attend_parts``), each one row tile (``m <= n``) over one chunk of l
      tokens: ``part`` MAX keeps the rows' running maximum over the chunks (restarted on
      ``first``; nothing out; K alone on ``b`` unless ``pairs``), then ``part`` SUM adds
      each chunk's weights (with that maximum) and P·V to the rows' sums (restarted on
      ``first``), the ``final`` chunk dividing and emitting the rows. ``span`` is the number
      of tokens from the chunk's first to the set's end (the causal mask: row i attends to
      the chunk's first ``span - causal + (pos0 + i) mod causal + 1`` tokens), ``pos0`` the
      first row's position in the step, ``row0`` the number added to the output rows.

    Buffers: B whole (``b_rows`` rows of ``k_buf`` values, one memory per row residue mod n,
    so beat k of a tile reads one word of each and picks element k mod n: no transposer); A two
    row tiles (n rows each), so the next row tile loads while the current one computes. The
    feeder reads both buffers through a pipeline (addresses, the RAMs' read, their words
    registered, the element picked) that back-pressure from the array holds; rows past m or l
    and steps past k feed zeros, and a reduction shorter than n is padded to n beats (the
    array's contract).

    A command with ``m``, ``k`` or ``l`` zero, ``k > k_buf``, ``l > b_rows``, a score or
    attention command with ``k > score_k_max = 2**(score_bits - 16)`` (its scores would not
    fit), a whole attention command with ``causal > l``, an attention command with ``pos0 >=
    causal > 0``, a chunk with ``m > n`` or ``span < l``, a ``part`` that is not one or is
    not an attention command's, an unknown kind, or a hash command with ``l != n_hp`` is
    refused: its operand beats (as its sizes imply) are
    consumed and dropped, ``error`` is set (sticky) with ``error_code``, ``refused`` counts it,
    and the engine takes the next command.

    Parameters (keyword-only, all required; ``vrex.rules.engine_rules``)
        ``n``, ``k_max``, ``acc_bits`` as the array's; ``k_buf`` the longest row the buffers
        hold (a multiple of n, at most k_max); ``b_rows`` rows of B held (a multiple of n);
        ``n_hp`` hash width; ``layers``, ``step_bits`` the HCU's tag widths; ``wtu_lanes``,
        ``score_bits``, ``weight_bits``, ``count_bits`` the WTU's input format;
        ``exp_frac_bits`` the exponential unit's table bits; ``out_frac_bits`` the attention
        output's fraction bits; ``counter_bits``.
    Attributes
        ``cmd``, ``a``, ``b``, ``bias`` in streams; ``o_gemm``, ``o_hash``, ``o_score``,
        ``o_attn`` out streams;
        ``error``, ``error_code`` (1 bad size, 2 bad kind, 3 hash width); ``perf``: the array's
        counters (``beats``, ``starved``, ``held``, ``tiles``, ``rows``) and the engine's
        (``busy``, ``commands``, ``refused``, ``feed_stalled``, ``out_stalled``).
    """

    PERF = ("busy", "commands", "refused", "feed_stalled", "out_stalled", "beats", "starved",
            "held", "tiles", "rows")

    def __init__(self, *, n: int, k_max: int, acc_bits: int, k_buf: int, b_rows: int,
                 n_hp: int, layers: int, step_bits: int, wtu_lanes: int, score_bits: int,
                 weight_bits: int, count_bits: int, exp_frac_bits: int, out_frac_bits: int,
                 counter_bits: int):
        engine_rules(n=n, k_max=k_max, acc_bits=acc_bits, k_buf=k_buf, b_rows=b_rows,
                     n_hp=n_hp, layers=layers, step_bits=step_bits, wtu_lanes=wtu_lanes,
                     score_bits=score_bits, weight_bits=weight_bits, count_bits=count_bits,
                     exp_frac_bits=exp_frac_bits, out_frac_bits=out_frac_bits,
                     counter_bits=counter_bits)
        self._n, self._k_max, self._acc_bits = n, k_max, acc_bits
        self._k_buf, self._b_rows, self._n_hp = k_buf, b_rows, n_hp
        self._layers, self._step_bits, self._counter_bits = layers, step_bits, counter_bits
        self._wtu_lanes, self._score_bits = wtu_lanes, score_bits
        self._weight_bits, self._count_bits = weight_bits, count_bits
        self._out_frac_bits = out_frac_bits
        # A is int8 (queries, keys) or a weight of P (unsigned weight_bits) in P·V
        self._array = SystolicArray(n=n, k_max=k_max, acc_bits=acc_bits,
                                    a_bits=weight_bits + 1, counter_bits=counter_bits,
                                    valid_copies=len(TAKES))
        layer_bits = max(1, ceil_log2(layers))
        vec = data.ArrayLayout(signed(8), n)
        self.cmd_layout = data.StructLayout({"kind": 3, "m": 16, "k": 16, "l": 16,
                                             "layer": layer_bits, "step": step_bits,
                                             "beta_m": 16, "beta_shift": 6, "causal": 16,
                                             "pairs": 1, "part": 2, "first": 1, "final": 1,
                                             "span": SPAN_BITS, "pos0": 16, "row0": 16})
        self.chunk_layout = data.StructLayout({"data": vec})
        self.bias_layout = data.StructLayout({"data": data.ArrayLayout(signed(acc_bits), n)})
        self.gemm_layout = data.StructLayout({"c": data.ArrayLayout(signed(acc_bits), n),
                                              "row": 16, "col": 16, "last": 1})
        # the HCU's input beat, field for field
        self.hash_layout = data.StructLayout({"hash": n_hp, "layer": layer_bits,
                                              "step": step_bits, "first": 1, "last": 1})
        # the WTU's input beat, field for field
        lane = data.StructLayout({"score": signed(score_bits), "weight": weight_bits,
                                  "count": count_bits})
        self.score_layout = data.StructLayout({"entry": data.ArrayLayout(lane, wtu_lanes),
                                               "valid": wtu_lanes, "first": 1, "last": 1,
                                               "head_last": 1})
        # light attention's output rows: n values of V's scale times 2**-out_frac_bits
        self.attn_layout = data.StructLayout({
            "o": data.ArrayLayout(signed(8 + out_frac_bits), n), "row": 16, "col": 16,
            "last": 1})
        # what travels beside the exponential unit: the word's scores, counts and framing
        self._exp_tag = data.StructLayout({
            "score": data.ArrayLayout(signed(score_bits), n),
            "count": data.ArrayLayout(count_bits, n),
            "valid": n, "first": 1, "last": 1, "head_last": 1,
            "row": range(n), "word": 16, "tile_last": 1, "half": 1})
        self._exp = ExpUnit(lanes=n, frac_bits=exp_frac_bits, weight_bits=weight_bits,
                            x_bits=score_bits + 1, tag_layout=self._exp_tag)
        self.perf_layout = counter_layout(self.PERF, counter_bits)
        super().__init__({
            "cmd": In(stream.Signature(self.cmd_layout)),
            "a": In(stream.Signature(self.chunk_layout)),
            "b": In(stream.Signature(self.chunk_layout)),
            "bias": In(stream.Signature(self.bias_layout)),
            "o_gemm": Out(stream.Signature(self.gemm_layout)),
            "o_hash": Out(stream.Signature(self.hash_layout)),
            "o_score": Out(stream.Signature(self.score_layout)),
            "o_attn": Out(stream.Signature(self.attn_layout)),
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
    wtu_lanes = property(lambda self: self._wtu_lanes)

    @property
    def score_k_max(self) -> int:
        """The longest score reduction whose scores fit ``score_bits``."""
        return min(self._k_buf, 1 << (self._score_bits - 16))

    @property
    def num_bits(self) -> int:
        """Width of a P·V sum: weights up to 2**(weight_bits - 1) times int8 values over up
        to 2**SPAN_BITS - 1 tokens (a chunked attention's), signed; at least the array's."""
        return max(self._acc_bits, self._weight_bits + 7 + SPAN_BITS)

    @property
    def memory_bits(self) -> int:
        """Bits of every buffer: A (two row tiles), B, the column vector, the score buffer
        (two halves), V, P (two halves) and the P·V sums carried between chunks."""
        n, b = self._n, self._b_rows
        a_b = 8 * n * self._k_buf * 2 + 8 * b * self._k_buf
        col = self._acc_bits * n * max(-(-self._n_hp // n), b // n)
        score = self._score_bits * 2 * b * n
        v = 8 * n * b * -(-self.score_k_max // n)
        p = self._weight_bits * 2 * b * n
        sums = n * -(-self.score_k_max // n) * n * self.num_bits
        return a_b + col + score + v + p + sums

    def command_cycles(self, m: int, k: int, l: int, hash_: bool = False) -> int:
        """Cycles from a command's transfer to its last output beat, every operand stream
        valid and every output ready: the command's check (a cycle), biases (hash), B's
        rows, A's first row tile, then one tile of ``max(k, n)`` beats per row tile and column
        tile (the next row tile loads meanwhile), the array's flush up to the last real row,
        and for a hash its rows' two register stages (model checked against the RTL in the
        tests, GEMM and hash)."""
        n = self._n
        kc = -(-k // n)
        mt, lt = -(-m // n), -(-l // n)
        first_rows = min(n, m)
        return (2 + (lt + 2 if hash_ else 0) + l * kc + first_rows * kc + 3
                + mt * lt * max(k, n) - 1 + self._array.latency - (n - 1 - (m - 1) % n))

    def elaborate(self, platform):
        m = Module()
        m.submodules.array = self._array
        m.submodules.exp = self._exp
        x = SimpleNamespace()
        self._buffers(m, x)
        self._command(m, x)
        self._a_loader(m, x)
        self._feeder(m, x)
        self._outputs(m, x)
        self._score_writer(m, x)
        self._score_reader(m, x)
        self._score_flags(m, x)
        self._score_packer(m, x)
        self._p_writer(m, x)
        self._divider(m, x)
        self._counters(m, x)
        return m

    def _buffers(self, m, x):
        """One memory per row residue for A (two row tiles) and for B, n int8 a word."""
        n = self._n
        x.kc_max = self._k_buf // n
        word = data.ArrayLayout(signed(8), n)
        x.a_mem, x.b_mem = [], []
        for r in range(n):
            am = memory.Memory(shape=word, depth=2 * x.kc_max, init=[], attrs=NO_RW_CHECK)
            bm = memory.Memory(shape=word, depth=(self._b_rows // n) * x.kc_max, init=[],
                               attrs=NO_RW_CHECK)
            m.submodules[f"a_lane_{r}"] = am
            m.submodules[f"b_lane_{r}"] = bm
            x.a_mem.append((am.write_port(), am.read_port()))
            x.b_mem.append((bm.write_port(), bm.read_port()))
        # the column vector, n a word, word j for columns j·n .. j·n + n - 1: the hash biases
        # (hyperplanes) or the member counts (candidates)
        bm = memory.Memory(shape=data.ArrayLayout(signed(self._acc_bits), n),
                           depth=max(-(-self._n_hp // n), self._b_rows // n), init=[])
        m.submodules.bias_mem = bm
        x.bias_wr, x.bias_rd = bm.write_port(), bm.read_port()
        x.bias_rd_next = bm.read_port()
        x.count_rd = bm.read_port()
        # the score buffer: two halves (row tiles) of n rows by b_rows // n words of n scores
        x.row_words = self._b_rows // n
        sm = memory.Memory(shape=data.ArrayLayout(signed(self._score_bits), n),
                           depth=2 * self._b_rows, init=[], attrs=NO_RW_CHECK)
        m.submodules.score_mem = sm
        x.score_wr, x.score_rd = sm.write_port(), sm.read_port()
        x.score_full = [Signal(name=f"score_full_{h}") for h in range(2)]
        x.score_free = [Signal(name=f"score_free_{h}") for h in range(2)]
        # the halves' full flags as the array's output and the score reader see them, the
        # half of the row tile at the array's output free and the half being read full, in
        # registers set from the flags' and the halves' next values (_score_flags)
        x.out_half_free = Signal(init=1, name="score_out_half_free")
        # and its copies, one for each of the score take's copies (_score_writer)
        x.out_half_free_c = {g: Signal(init=1, name=f"score_out_half_free_{g}", attrs=KEEP_COPY)
                             for g in TAKES}
        x.rd_half_full = Signal(name="score_rd_half_full")
        x.div_valid, x.div_ready = Signal(), Signal()      # P·V rows into the divider
        x.div_room_next = Signal()                         # the divider's ready next cycle
        x.pv_idle = Signal()                               # no P·V row on its way to it
        x.p_ready = [Signal(name=f"p_ready_{h}") for h in range(2)]   # P's half is written
        # light attention: V (b_rows tokens of vc_max words; a word is n dimensions, which is
        # beat k's B operand in P·V as it stands) and P (two row tiles, a memory per row, n
        # weights a word: beat k of P·V reads word k / n of every row and picks element k mod n;
        # the exp pass writes one half while P·V reads the other)
        x.vc_max = -(-self.score_k_max // n)
        vm = memory.Memory(shape=data.ArrayLayout(signed(8), n),
                           depth=self._b_rows * x.vc_max, init=[], attrs=NO_RW_CHECK)
        m.submodules.v_mem = vm
        x.v_wr, x.v_rd = vm.write_port(), vm.read_port()
        x.p_mem = []
        for r in range(n):
            pm = memory.Memory(shape=data.ArrayLayout(self._weight_bits, n),
                               depth=2 * (self._b_rows // n), init=[], attrs=NO_RW_CHECK)
            m.submodules[f"p_row_{r}"] = pm
            x.p_mem.append((pm.write_port(), pm.read_port()))

    def _command(self, m, x):
        """Take a command, check it, load biases and B (or drop a refused command's beats)."""
        n = self._n
        x.cur = cur = Signal(self.cmd_layout)
        x.kc = kc = Signal(16)                 # beats a row
        x.lt = lt = Signal(16)                 # column tiles
        x.mt = mt = Signal(16)                 # row tiles
        # the A loader and the feeder may begin: the state is RUN (a register set and
        # cleared with the state's moves, not a decoder of the state: it enables and resets
        # much of the engine)
        x.start = start = Signal()
        # and its next value (the score reader's flag carries it: _score_flags)
        x.start_next = start_next = Signal(name="cmd_start_next")
        x.feed_done = Signal()
        x.out_done = Signal()
        x.score_done = Signal()
        p = self.cmd.payload
        x.refuse = Signal()

        def row_chunk_step(row, chunk, left, lim):
            with m.If(chunk == x.m1.kc):
                m.d.sync += [chunk.eq(0), row.eq(row + 1), left.eq(row + 1 != lim)]
            with m.Else():
                m.d.sync += chunk.eq(chunk + 1)

        def load_step():
            with m.If(chunk_last):
                m.d.comb += [chunk_zero.eq(1), row_inc.eq(1)]
            with m.Else():
                m.d.comb += chunk_inc.eq(1)

        # a refused command's beats, counted as rows of chunks (no multiplier) up to a limit
        # loaded with ``cur``; whether rows are left is a register too, set from the counts
        # (the limit's multiplexer and the row's compare with it, a carry chain, had run in
        # front of the drop's handshake and the counters' enables: for the clock)
        drop_a_row, drop_a_chunk = Signal(17), Signal(16)
        drop_b_row, drop_b_chunk = Signal(17), Signal(16)
        drop_a_lim = Signal(17, name="drop_a_lim")
        drop_b_lim = Signal(17, name="drop_b_lim")
        drop_bias = Signal(16)
        a_left = Signal(name="drop_a_left")
        b_left = Signal(name="drop_b_left")
        # the command's kind and part decoded once, into registers loaded with ``cur`` (the
        # decoders had sat in front of the handshakes and enables: for the clock)
        attend_p = p.kind == Kind.ATTEND
        k_only_p = (p.part == Part.MAX) & ~p.pairs
        flags = dict(
            gemm=p.kind == Kind.GEMM,
            hash=p.kind == Kind.HASH, score=p.kind == Kind.SCORE, attend=attend_p,
            scoring=(p.kind == Kind.SCORE) | attend_p,
            part_max=p.part == Part.MAX, part_sum=p.part == Part.SUM,
            pv=attend_p & (p.part != Part.MAX),           # the job order has P·V tiles
            kv=attend_p & ~k_only_p,      # B is K's rows and V's (not K's alone: a
                                          # maximum's pass, unpaired)
            pairs=attend_p & p.pairs,                     # ... a token's K then its V
            carry=(p.part == Part.SUM) & ~p.first,        # adds to earlier chunks' sums
            absorb=(p.part == Part.SUM) & ~p.final,       # keeps its sums for later chunks
            restart=(p.part != Part.MAX) | p.first,       # restarts the rows' maxima
            causal=attend_p & (p.causal != 0))
        x.is_ = SimpleNamespace(**{k: Signal(name=f"cmd_{k}") for k in flags})
        # the score flag again, for the score packer alone (kept apart in synthesis: the
        # flag's wide fan-out had been routed 3.7 ns into the packer's valid: for the clock)
        x.is_score_pk = Signal(name="cmd_score_packer", attrs=KEEP_COPY)
        # the sizes less one, in registers loaded with ``cur`` (the last-index compares
        # had each sat behind a subtraction's carry chain); signed, so a zero size's -1 is
        # no index, as it was
        kcv = (p.k + n - 1) >> exact_log2(n)
        ltv = (p.l + n - 1) >> exact_log2(n)
        less = dict(kc=kcv - 1, lt=ltv - 1, mt=((p.m + n - 1) >> exact_log2(n)) - 1,
                    kt=Mux(p.k < n, n, p.k) - 1,            # beats a tile: k padded to n
                    kt_pv=Mux(p.l < n, n, p.l) - 1,         # a P·V tile's: l padded to n
                    m=p.m - 1, l=p.l - 1, causal=p.causal - 1)
        x.m1 = SimpleNamespace(**{k: Signal(signed(18), name=f"cmd_{k}_m1") for k in less})
        # and four of them less two, for the feeder's last-beat and last-tile flags (``kk ==
        # kt - 2`` for ``kk + 1 == kt - 1``: the increment's carry chain had sat in front of
        # the compare, for the clock)
        less2 = {k: less[k] - 1 for k in ("kt", "kt_pv", "kc", "lt")}
        x.m2 = SimpleNamespace(**{k: Signal(signed(18), name=f"cmd_{k}_m2") for k in less2})
        # the load's position (row, chunk): the states below say whether each steps or goes
        # back to 0 (``*_inc``, ``*_zero``: 0 wins), and whether each is at its last value
        # is kept in a register, its next value chosen by those moves among three compares
        # run from the registers beside them (the compares had sat behind the state's moves,
        # and before that between the operand streams' handshakes and the state's enable:
        # for the clock)
        rc = stepped_counter(m, "load_row", 16, {"l": x.m1.l, "lt": x.m1.lt})
        cc = stepped_counter(m, "load_chunk", 16, {"kc": x.m1.kc})
        row, row_inc, row_zero = rc.pos, rc.inc, rc.zero
        chunk, chunk_inc, chunk_zero = cc.pos, cc.inc, cc.zero
        row_last_l, row_last_lt, chunk_last = rc.at["l"], rc.at["lt"], cc.at["kc"]
        # light attention's row limit less the row's position (_score_writer)
        lim_base = Mux(p.part == Part.WHOLE, p.l, p.span) - p.causal + 1
        x.lim_base = Signal(signed(SPAN_BITS + 3), name="cmd_lim_base")
        # the checks: each compare on the stream's payload into a register every idle cycle
        # (with ``cur``), combined in CHECK with the command's kind flags (they had run on
        # ``cur`` in CHECK, compares and all, into its move and the streams' ready; then on
        # the payload into one register, the compares and their combination in a row: for
        # the clock)
        # (each check is whole in its register, its compares and the kind flags it applies
        # to, so that CHECK is an OR of registers; the size checks are in two registers, so
        # that CHECK's OR is one LUT rather than a chain of four: for the clock)
        chunked_p = p.part != Part.WHOLE
        raw = dict(
            k_zero=p.k == 0,
            # a zero size, a size over the buffers, a score reduction whose scores overflow
            sizes=(p.m == 0) | (p.k == 0) | (p.l == 0) | (p.k > self._k_buf) |
                  (p.l > self._b_rows) | flags["scoring"] & (p.k > self.score_k_max),
            # the attended set: a chunk of a chunked light attention is one row tile inside
            # the set; the causal tokens fit the set and the first row's position the step
            span=chunked_p & (~attend_p | (p.part > Part.SUM) | (p.m > n) | (p.span < p.l)) |
                 attend_p & ~chunked_p & (p.causal > p.l) |
                 attend_p & (p.causal != 0) & (p.pos0 >= p.causal),
            kind_over=p.kind > Kind.ATTEND,
            hash_width=flags["hash"] & (p.l != self._n_hp))
        ck = SimpleNamespace(**{k: Signal(name=f"check_{k}") for k in raw})
        checks = [getattr(ck, k).eq(v) for k, v in raw.items()]
        # the error flag and code load from copies of the checks of their own and a flag of
        # the CHECK state (entered from IDLE with a command, left the next cycle): the
        # refusal, whose loads spread over the chip, had been routed 4.2 and 3.9 ns into
        # the error code's enable (for the clock)
        ck_err = {k: Signal(name=f"check_{k}_err", attrs=KEEP_COPY)
                  for k in raw if k != "k_zero"}
        checking = Signal(name="cmd_checking", attrs=KEEP_COPY)
        checks += [c.eq(raw[k]) for k, c in ck_err.items()]
        # the command is refused, and its error code (1 bad size, 2 bad kind, 3 hash width),
        # from either set of check registers
        refused = lambda c: c["sizes"] | c["span"] | c["kind_over"] | c["hash_width"]
        bad_code = lambda c: Mux(c["sizes"] | c["span"], 1, Mux(c["kind_over"], 2, 3))
        bad = refused(vars(ck))
        k_zero = ck.k_zero                # no beat a row: a refused command's beats, none

        # the state is IDLE: a register of its own, set and cleared with the state's moves
        # (the state's decoder had driven the enables of the command's 400 registers beside
        # the load's handshakes and counters: for the clock)
        idle = Signal(init=1, name="cmd_idle")
        m.d.comb += self.cmd.ready.eq(idle)
        # the scoring flag's next value (the score take's copies: _score_writer)
        x.scoring_next = Signal(name="cmd_scoring_next")
        m.d.comb += x.scoring_next.eq(Mux(idle, flags["scoring"], x.is_.scoring))
        with m.If(idle):
            # the command and what it implies load every idle cycle, the last load being
            # the command taken (their enables do not wait for the stream's valid: for the
            # clock; nothing reads them before CHECK, the engine being idle)
            m.d.sync += [getattr(x.is_, k).eq(v) for k, v in flags.items()]
            m.d.sync += x.is_score_pk.eq(flags["score"])
            m.d.sync += [getattr(x.m1, k).eq(v) for k, v in less.items()]
            m.d.sync += [getattr(x.m2, k).eq(v) for k, v in less2.items()]
            m.d.sync += x.lim_base.eq(lim_base)
            m.d.sync += checks
            m.d.sync += [drop_a_lim.eq(p.m), drop_b_lim.eq(Mux(flags["kv"], p.l << 1, p.l))]
            m.d.sync += [cur.eq(p), kc.eq(kcv), lt.eq(ltv),
                         mt.eq((p.m + n - 1) >> exact_log2(n))]
        # B's, V's and the biases' writes go through a register stage (address, data and
        # enables; the state's decoder, the stream's valid and the lane's compare had run
        # into the enables of RAMs across the chip: for the clock). A write lands a cycle
        # after its beat: the last one the cycle after ``start``, long before the feeder's
        # first read (it waits for A's first row tile) or the hash and count reads.
        b_wr = [wr for wr, _ in x.b_mem]
        bw_addr = Signal(b_wr[0].addr.shape(), name="b_wr_addr", reset_less=True)
        bw_data = Signal(b_wr[0].data.shape(), name="b_wr_data", reset_less=True)
        bw_en = Signal(n, name="b_wr_en")
        vw_addr = Signal(x.v_wr.addr.shape(), name="v_wr_addr", reset_less=True)
        vw_en = Signal(name="v_wr_en")
        biw_addr = Signal(x.bias_wr.addr.shape(), name="bias_wr_addr", reset_less=True)
        biw_data = Signal(x.bias_wr.data.shape(), name="bias_wr_data", reset_less=True)
        biw_en = Signal(name="bias_wr_en")
        m.d.sync += [bw_en.eq(0), vw_en.eq(0), biw_en.eq(0), bw_data.eq(self.b.payload.data),
                     biw_data.eq(self.bias.payload.data)]
        for r, wr in enumerate(b_wr):
            m.d.comb += [wr.addr.eq(bw_addr), wr.data.eq(bw_data), wr.en.eq(bw_en[r])]
        m.d.comb += [x.v_wr.addr.eq(vw_addr), x.v_wr.data.eq(bw_data), x.v_wr.en.eq(vw_en),
                     x.bias_wr.addr.eq(biw_addr), x.bias_wr.data.eq(biw_data),
                     x.bias_wr.en.eq(biw_en)]
        m.d.comb += start_next.eq(start)
        m.d.sync += start.eq(start_next)
        m.d.sync += checking.eq(idle & self.cmd.valid)
        with m.If(checking & refused(ck_err)):
            m.d.sync += [self.error.eq(1), self.error_code.eq(bad_code(ck_err))]
        with m.FSM(name="cmd_fsm"):
            with m.State("IDLE"):
                m.d.comb += [row_zero.eq(1), chunk_zero.eq(1)]
                with m.If(self.cmd.valid):
                    m.d.sync += idle.eq(0)
                    m.next = "CHECK"
            with m.State("CHECK"):
                # the drop counters load in CHECK whether the command is refused or not (only
                # DROP reads them; ``bad`` had been in front of their enables)
                m.d.sync += [drop_a_row.eq(Mux(k_zero, drop_a_lim, 0)), drop_a_chunk.eq(0),
                             drop_b_row.eq(Mux(k_zero, drop_b_lim, 0)), drop_b_chunk.eq(0),
                             a_left.eq(~k_zero & (drop_a_lim != 0)),
                             b_left.eq(~k_zero & (drop_b_lim != 0)),
                             drop_bias.eq(Mux(x.is_.hash | x.is_.score, lt, 0))]
                with m.If(bad):
                    m.d.comb += x.refuse.eq(1)
                    m.next = "DROP"
                with m.Elif(x.is_.hash | x.is_.score):
                    m.next = "BIAS"
                with m.Else():
                    m.next = "LOAD_B"
            with m.State("DROP"):
                m.d.comb += [self.a.ready.eq(a_left), self.b.ready.eq(b_left),
                             self.bias.ready.eq(drop_bias != 0)]
                with m.If(self.a.valid & a_left):
                    row_chunk_step(drop_a_row, drop_a_chunk, a_left, drop_a_lim)
                with m.If(self.b.valid & b_left):
                    row_chunk_step(drop_b_row, drop_b_chunk, b_left, drop_b_lim)
                with m.If(self.bias.valid & (drop_bias != 0)):
                    m.d.sync += drop_bias.eq(drop_bias - 1)
                with m.If(~a_left & ~b_left & (drop_bias == 0)):
                    m.d.sync += idle.eq(1)
                    m.next = "IDLE"
            with m.State("BIAS"):
                m.d.comb += self.bias.ready.eq(1)
                m.d.sync += [biw_addr.eq(row), biw_en.eq(self.bias.valid)]
                with m.If(self.bias.valid):
                    m.d.comb += row_inc.eq(1)
                    with m.If(row_last_lt):
                        m.d.comb += row_zero.eq(1)
                        m.next = "LOAD_B"
            with m.State("LOAD_B"):
                m.d.comb += self.b.ready.eq(1)
                lane = row[:exact_log2(n)] if n > 1 else Const(0, 1)
                addr = mem_addr(row >> exact_log2(n), chunk, x.kc_max)
                m.d.sync += [bw_addr.eq(addr),
                             bw_en.eq(Cat(self.b.valid & (lane == r) for r in range(n)))]
                pairs = x.is_.pairs
                with m.If(self.b.valid):
                    with m.If(pairs & chunk_last):
                        m.d.comb += chunk_zero.eq(1)     # this token's V row follows
                        m.next = "LOAD_V"
                    with m.Else():
                        load_step()
                    with m.If(~pairs & chunk_last & row_last_l):
                        m.d.comb += row_zero.eq(1)
                        m.d.comb += start_next.eq(~x.is_.kv)
                        m.next = "RUN"
                        with m.If(x.is_.kv):
                            m.next = "LOAD_V"
            with m.State("LOAD_V"):
                m.d.comb += self.b.ready.eq(1)
                m.d.sync += [vw_addr.eq(mem_addr(row, chunk, x.vc_max)), vw_en.eq(self.b.valid)]
                with m.If(self.b.valid):
                    load_step()
                    with m.If(chunk_last & row_last_l):
                        m.d.comb += start_next.eq(1)
                        m.next = "RUN"
                    with m.Elif(cur.pairs & chunk_last):
                        m.next = "LOAD_B"
            with m.State("RUN"):
                with m.If(x.feed_done & x.out_done & x.score_done):
                    m.d.comb += start_next.eq(0)
                    m.d.sync += idle.eq(1)
                    m.next = "IDLE"

    def _a_loader(self, m, x):
        """Load A's row tiles into the two halves, a half as soon as the feeder frees it."""
        n = self._n
        x.half_full = [Signal(name=f"a_half_full_{h}") for h in range(2)]
        x.half_free = [Signal(name=f"a_half_free_{h}") for h in range(2)]
        tile = Signal(16)
        row = Signal(range(n + 1))
        # the tile's rows less one and whether the chunk is a row's last, in registers (the
        # tile's rows had been a subtraction, a compare and a second subtraction in front of
        # the row's compare and the tile counter's enable: for the clock). The rows follow
        # the tile a cycle later, in time: a tile's load starts after a cycle of WAIT.
        rows_m1 = Signal(range(n))
        left = Signal(signed(18))
        m.d.comb += left.eq(x.cur.m - (tile << exact_log2(n)))
        m.d.sync += rows_m1.eq(Mux(left >= n, n, left) - 1)
        cc = stepped_counter(m, "a_chunk", 16, {"kc": x.m1.kc})
        chunk, chunk_last = cc.pos, cc.at["kc"]
        half = tile[0]
        # the lanes' address and data whatever the state (only the enables wait for LOAD:
        # the address had gone through a LUT of the state, shared by the lanes' RAMs, routed
        # 4.7 ns from the chunk counter and 4.3 ns on: for the clock)
        for wr, _ in x.a_mem:
            m.d.comb += [wr.addr.eq(mem_addr(half, chunk, x.kc_max)),
                         wr.data.eq(self.a.payload.data)]
        with m.FSM(name="a_fsm"):
            with m.State("WAIT"):
                with m.If(x.start & (tile < x.mt) & ~Array(x.half_full)[half]):
                    m.next = "LOAD"
                with m.If(~x.start):
                    m.d.sync += [tile.eq(0), row.eq(0)]
                    m.d.comb += cc.zero.eq(1)
            with m.State("LOAD"):
                m.d.comb += self.a.ready.eq(1)
                for r, (wr, _) in enumerate(x.a_mem):
                    m.d.comb += wr.en.eq(self.a.valid & (row == r))
                with m.If(self.a.valid):
                    with m.If(chunk_last):
                        m.d.comb += cc.zero.eq(1)
                        m.d.sync += row.eq(row + 1)
                        with m.If(row == rows_m1):
                            m.d.sync += [row.eq(0), tile.eq(tile + 1)]
                            for h in range(2):
                                with m.If(half == h):
                                    m.d.sync += x.half_full[h].eq(1)
                            m.next = "WAIT"
                    with m.Else():
                        m.d.comb += cc.inc.eq(1)
        for h in range(2):
            with m.If(x.half_free[h]):
                m.d.sync += x.half_full[h].eq(0)

    @staticmethod
    def _job(m, x, s_next, p_next, name):
        """The array's job order: row tiles' scores (S) and, for light attention, their P·V,
        as S0, S1, PV0, S2, PV1, ..., PV(last): a tile's exp pass runs while the array
        computes the next tile's scores. The next job is P·V once the S jobs are two tiles
        ahead or all done. Returns (whether it is P·V, its row tile)."""
        pv = Signal(name=f"{name}_pv")
        tile = Signal(16, name=f"{name}_tile")
        m.d.comb += [pv.eq(x.is_.pv & ~((s_next < x.mt) & (s_next - p_next < 2))),
                     tile.eq(Mux(pv, p_next, s_next))]
        return pv, tile

    def _feeder(self, m, x):
        """Read the buffers, one beat a cycle, into the array: f0 addresses, f1 the block
        RAMs' read, f2 their words registered (the RAMs' own output registers on the FPGA:
        synth/bram_outreg.py), then each lane's element picked into the array. The three
        stages move together (one enable: f2 empty or taken). Per row tile: its column tiles
        of A·Bᵀ; for light attention then its P·V (A = the tile's weights P, B = V's word of
        beat k's token), once the exp stage has written P."""
        n = self._n
        arr = self._array
        tile_s = Signal(16)                     # the next row tile whose scores are fed
        tile_p = Signal(16)                     # the next row tile whose P·V is fed
        tile_j = Signal(16)
        kk = Signal(16)
        # the job (S or P·V), its row tile and whether one is left, in registers set from
        # the counters' next values (as in _outputs: the issue sees flags, for the clock)
        def derive(s_, p_, tag):
            pv_, ti = self._job(m, x, s_, p_, f"feed_{tag}")
            return dict(pv=pv_, ti=ti, left=ti < x.mt)

        reg = dict(pv=Signal(name="feed_pv"), ti=Signal(16, name="feed_tile"),
                   left=Signal(name="feed_left"))
        pv, tile_i = reg["pv"], reg["ti"]
        if n >= 4:
            # the next row tile's registers, computed ahead over three registered stages (for
            # the clock): the counters' next values, its job, then whether it is left. A row
            # tile's beats are >= kt >= n >= 4 cycles apart, so the values are in place
            # three cycles after the counters move.
            s_a, p_a = register(m, [tile_s + ~pv, tile_p + pv], "feed_next_sp")
            pv_a, _ = self._job(m, x, s_a, p_a, "feed_next")
            pv_a, s_a, p_a = register(m, [pv_a, s_a, p_a], "feed_next_a")
            ti_a = Mux(pv_a, p_a, s_a)[:16]
            tile_next = dict(zip(("pv", "ti", "left"),
                                 register(m, [pv_a, ti_a, ti_a < x.mt], "feed_next_b")))
        else:
            tile_next = derive(tile_s + ~pv, tile_p + pv, "next")
        zero = derive(Const(0, 16), Const(0, 16), "zero")
        advance = Signal()
        issue = Signal()
        f1_valid = Signal()
        f1_sel = Signal(range(n))
        f1_first = Signal()
        f1_last = Signal()
        f1_a_rows = Signal(range(n + 1))
        f1_b_rows = Signal(range(n + 1))
        f1_in_k = Signal()
        f1_pv = Signal()
        f2_valid = Signal()
        half = tile_i[0]
        # f2's beat leaves whatever the array's room (f2 is empty or its beat is not a tile's
        # last) in a register of its own for the issue, beside the array's room: the enable
        # of the RAMs and of every f1 and f2 register (``advance``, some thousand loads) and
        # the issue had shared one LUT, placed among those loads, far from the counters the
        # issue steps (for the clock)
        f2_open = Signal(init=1, name="feed_f2_open")
        m.d.comb += advance.eq(~f2_valid | arr.i.ready)
        ready_half = Signal()
        m.d.comb += ready_half.eq(Array(Mux(pv, x.p_ready[h], x.half_full[h])
                                        for h in range(2))[half])
        running = Signal()
        m.d.comb += [running.eq(x.start & reg["left"]),
                     issue.eq((f2_open | arr.room) & running & ready_half)]
        kt_now_m1 = Mux(pv, x.m1.kt_pv, x.m1.kt)
        last_j = Mux(pv, x.m1.kc, x.m1.lt)
        # whether the beat is its tile's last (kk == kt_now_m1) and the column tile its row
        # tile's last (tile_j == last_j), in registers whose next values the issue only
        # selects among compares run from registers (the compares had sat between the
        # issue and the counters' and the halves' enables: for the clock)
        kk_last = Signal(name="feed_kk_last")
        j_last = Signal(name="feed_j_last")
        moving = Signal()                       # the next beat starts the next row tile
        m.d.comb += moving.eq(issue & kk_last & j_last)

        def lasts_at_zero(pv_):                 # both counters at 0, the job's pv_
            return (Mux(pv_, x.m1.kt_pv, x.m1.kt) == 0), (Mux(pv_, x.m1.kc, x.m1.lt) == 0)
        with m.If(~x.start):
            m.d.sync += [f.eq(v) for f, v in zip((kk_last, j_last), lasts_at_zero(zero["pv"]))]
        with m.Elif(moving):
            m.d.sync += [f.eq(v) for f, v in zip((kk_last, j_last),
                                                  lasts_at_zero(tile_next["pv"]))]
        with m.Elif(issue & kk_last):
            m.d.sync += [kk_last.eq(kt_now_m1 == 0),
                         j_last.eq(tile_j == Mux(pv, x.m2.kc, x.m2.lt))]
        with m.Elif(issue):
            m.d.sync += [kk_last.eq(kk == Mux(pv, x.m2.kt_pv, x.m2.kt)),
                         j_last.eq(tile_j == last_j)]
        with m.Else():
            m.d.sync += [kk_last.eq(kk == kt_now_m1), j_last.eq(tile_j == last_j)]
        chunk = kk >> exact_log2(n) if n > 1 else kk
        for r in range(n):
            _, ard = x.a_mem[r]
            _, brd = x.b_mem[r]
            _, prd = x.p_mem[r]
            m.d.comb += [ard.addr.eq(mem_addr(half, chunk, x.kc_max)),
                         brd.addr.eq(mem_addr(tile_j, chunk, x.kc_max)),
                         prd.addr.eq(mem_addr(half, chunk, x.row_words)),
                         ard.en.eq(advance), brd.en.eq(advance), prd.en.eq(advance)]
        m.d.comb += [x.v_rd.addr.eq(mem_addr(kk, tile_j, x.vc_max)), x.v_rd.en.eq(advance)]
        with m.If(advance):
            base_i = tile_i << exact_log2(n)
            base_j = tile_j << exact_log2(n)
            cols = Mux(pv, x.cur.k, x.cur.l)    # B's rows: V's dimensions in P·V
            m.d.sync += [f1_valid.eq(issue), f1_sel.eq(kk[:exact_log2(n)] if n > 1 else 0),
                         f1_first.eq(kk == 0), f1_last.eq(kk_last),
                         f1_in_k.eq(kk < Mux(pv, x.cur.l, x.cur.k)), f1_pv.eq(pv),
                         f1_a_rows.eq(Mux(x.cur.m - base_i >= n, n, x.cur.m - base_i)),
                         f1_b_rows.eq(Mux(cols - base_j >= n, n, cols - base_j))]
        # f2: the words as read (no logic between a RAM and its register, which loads with
        # the stage: the RAM's output register), whether the beat is its word's first and
        # each lane's mask. That flag and the P·V flag in registers a row (copies kept apart
        # in synthesis): one register had fed every row's picks and operand choices, its
        # loads spread over the array's rows (for the clock)
        f2_pv = [Signal(name=f"f2_pv_{r}", attrs=KEEP_COPY) for r in range(n)]
        f2_first, f2_last = Signal(), Signal()
        f2_a_on, f2_b_on = Signal(n), Signal(n)
        with m.If(advance):
            m.d.sync += [f2_valid.eq(f1_valid), f2_open.eq(~f1_valid | ~f1_last),
                         f2_first.eq(f1_first),
                         f2_last.eq(f1_last), *(pv_.eq(f1_pv) for pv_ in f2_pv),
                         *(f2_a_on[r].eq(f1_in_k & (r < f1_a_rows)) for r in range(n)),
                         *(f2_b_on[r].eq(f1_in_k & (r < f1_b_rows)) for r in range(n))]
        def word(rd, name):
            w = Signal.like(rd.data, name=name, reset_less=True)
            with m.If(advance):
                m.d.sync += w.eq(rd.data)
            return w
        # Each lane's element: a word's first beat takes element 0 from the registered word;
        # its other beats take element 0 of a shift register a lane (A or P as the beat's
        # job needs, and B), loaded with the word's other elements as its first beat leaves
        # and shifted down one as each later beat leaves (a word's beats leave one after the
        # other: beat k is element k mod n of word k / n). An n-way pick of the RAMs' words
        # had run between their output registers, far off in the RAM columns, and the skew
        # (for the clock)
        v_word = word(x.v_rd, "f2_v_word")
        taken = Signal()
        m.d.comb += taken.eq(f2_valid & arr.i.ready)
        f2_w0 = [Signal(init=1, name=f"f2_word_first_{r}", attrs=KEEP_COPY) for r in range(n)]
        with m.If(advance):
            m.d.sync += [w0.eq(f1_sel == 0) for w0 in f2_w0]
        for r in range(n):
            aw = word(x.a_mem[r][1], f"f2_a_word_{r}")
            bw = word(x.b_mem[r][1], f"f2_b_word_{r}")
            pw = word(x.p_mem[r][1], f"f2_p_word_{r}")
            ap = [Mux(f2_pv[r], pw[t], aw[t]) for t in range(n)]
            ea, eb = ap[0], bw[0]
            if n > 1:
                ap_sh = [Signal.like(arr.i.payload.a[r], name=f"f2_ap_shift_{r}_{t}",
                                     reset_less=True) for t in range(n - 1)]
                b_sh = [Signal(signed(8), name=f"f2_b_shift_{r}_{t}", reset_less=True)
                        for t in range(n - 1)]
                with m.If(taken):
                    with m.If(f2_w0[r]):
                        m.d.sync += [*(ap_sh[t].eq(ap[t + 1]) for t in range(n - 1)),
                                     *(b_sh[t].eq(bw[t + 1]) for t in range(n - 1))]
                    with m.Else():
                        m.d.sync += [*(ap_sh[t].eq(ap_sh[t + 1]) for t in range(n - 2)),
                                     *(b_sh[t].eq(b_sh[t + 1]) for t in range(n - 2))]
                ea = Mux(f2_w0[r], ea, ap_sh[0])
                eb = Mux(f2_w0[r], eb, b_sh[0])
            m.d.comb += [arr.i.payload.a[r].eq(Mux(f2_a_on[r], ea, 0)),
                         arr.i.payload.b[r].eq(Mux(f2_b_on[r], Mux(f2_pv[r], v_word[r], eb),
                                                   0))]
        m.d.comb += [arr.i.valid.eq(f2_valid), arr.i.payload.first.eq(f2_first),
                     arr.i.payload.last.eq(f2_last)]
        x.feed_stalled = Signal()
        x.p_take = [Signal(name=f"p_take_{h}") for h in range(2)]
        m.d.comb += x.feed_stalled.eq(f2_valid & ~arr.i.ready)
        with m.If(issue):
            with m.If(kk_last):
                m.d.sync += kk.eq(0)
                with m.If(j_last):
                    m.d.sync += [tile_j.eq(0), *(reg[k].eq(v) for k, v in tile_next.items())]
                    with m.If(pv):
                        m.d.sync += tile_p.eq(tile_p + 1)
                        for h in range(2):
                            with m.If(half == h):
                                m.d.comb += x.p_take[h].eq(1)
                    with m.Else():
                        m.d.sync += tile_s.eq(tile_s + 1)
                        for h in range(2):
                            with m.If(half == h):
                                m.d.comb += x.half_free[h].eq(1)
                with m.Else():
                    m.d.sync += tile_j.eq(tile_j + 1)
            with m.Else():
                m.d.sync += kk.eq(kk + 1)
        m.d.comb += x.feed_done.eq(~reg["left"] & ~f1_valid & ~f2_valid)
        with m.If(~x.start):
            m.d.sync += [tile_s.eq(0), tile_p.eq(0), tile_j.eq(0), kk.eq(0),
                         *(reg[k].eq(v) for k, v in zero.items())]

    def _outputs(self, m, x):
        """Rows leaving the array: GEMM rows, or hash bits gathered per token."""
        n = self._n
        arr = self._array
        out_s = Signal(16)                      # the next row tile whose scores come out
        out_p = Signal(16)                      # the next row tile whose P·V comes out
        out_j = Signal(16)
        out_j1 = Signal(16, init=1)             # out_j + 1, kept beside it (for the clock)
        out_j0 = Signal(init=1, name="out_j_zero")  # out_j == 0, likewise
        o = arr.o.payload
        take = Signal()
        is_hash = x.is_.hash

        # What the counters imply (the job, its row tile, its real rows, where the column
        # tile stands) is kept in registers beside them, set from the counters' next values,
        # so the array's ready (and through it the array's hold and the feeder) sees flags,
        # not compare chains (for the clock; cycle for cycle the same).
        def col_flags(pv, j_):
            return dict(jl=j_ == x.m1.lt, jlast=j_ == Mux(pv, x.m1.kc, x.m1.lt))

        def derive(s_, p_, j_, tag):
            pv, oi = self._job(m, x, s_, p_, f"out_{tag}")
            return finish(pv, oi, j_, tag)

        def finish(pv, oi, j_, tag):
            base = oi << exact_log2(n)
            rows = Signal(range(n + 1), name=f"out_rows_{tag}")
            m.d.comb += rows.eq(Mux(x.cur.m > base, Mux(x.cur.m - base >= n, n,
                                                         x.cur.m - base), 0))
            return dict(pv=pv, oi=oi, rows=rows, li=oi == x.m1.mt, **col_flags(pv, j_))

        reg = dict(pv=Signal(name="out_pv"), oi=Signal(16, name="out_i"),
                   rows=Signal(range(n + 1), name="out_rows"),
                   li=Signal(name="out_i_last"), jl=Signal(name="out_j_lt_last"),
                   jlast=Signal(name="out_j_last"))
        if n >= 4:
            # computed ahead over three registered stages, as in _feeder: a row tile's rows
            # leave the array >= n cycles apart (its n rows, padding included)
            s_a, p_a = register(m, [out_s + ~reg["pv"], out_p + reg["pv"]], "out_next_sp")
            pv_a, oi_a = self._job(m, x, s_a, p_a, "out_next")
            pv_a, oi_a = register(m, [pv_a, oi_a], "out_next_a")
            nxt = finish(pv_a, oi_a, Const(0, 16), "next")
            tile_next = dict(zip(nxt, register(m, list(nxt.values()), "out_next_b")))
        else:
            tile_next = derive(out_s + ~reg["pv"], out_p + reg["pv"], Const(0, 16), "tile")
        step_next = col_flags(reg["pv"], out_j1)        # a column tile on, same row tile
        zero = derive(Const(0, 16), Const(0, 16), Const(0, 16), "zero")
        out_pv, out_i, last_j_now = reg["pv"], reg["oi"], reg["jlast"]

        # a register's next value: ``if_taken`` or ``held`` as the row is taken or not, each
        # worked out from registers (``zero`` while the engine is stopped), so the take, the
        # last to settle (the array's valid flag and the ready of every kind of output), only
        # selects (it had run into a multiplexer of six inputs and more, routed 2.6 ns and
        # 2.9 ns, ahead of the real flag's copies: for the clock; cycle for cycle the same)
        def taken_or_not(if_taken, held, zero_):
            return Mux(take, Mux(x.start, if_taken, zero_), Mux(x.start, held, zero_))
        grow = Signal(16)
        m.d.comb += grow.eq((out_i << exact_log2(n)) + o.row)
        # the row leaving the array is a real one (``o.row < rows``), in a register set from
        # what the take does to the row (it steps, or goes back to 0 with the tile's last
        # row) and to the rows (the next row tile's); the compare had sat in front of the
        # array's ready and every enable behind it (for the clock). The array's row counter
        # is 0 while the engine is stopped: every tile leaves all its n rows.
        real = Signal(name="out_real")
        real_n = Signal(name="out_real_next")
        m.d.comb += real_n.eq(taken_or_not(
            Mux(o.last, Mux(reg["jlast"], tile_next["rows"], reg["rows"]) != 0,
                o.row + 1 < reg["rows"]),
            real, zero["rows"] != 0))
        m.d.sync += real.eq(real_n)
        last_tile = Signal()
        m.d.comb += last_tile.eq(reg["li"] & reg["jl"])
        x.out_i, x.out_j, x.real, x.out_pv = out_i, out_j, real, out_pv
        x.real_next = real_n
        x.out_j_lt_last = reg["jl"]
        x.out_j_zero = out_j0
        # the half of the row tile at the output next cycle (out_i's low bit): the half it
        # holds, the next row tile's, or (stopped) the first's, and whether it moves on
        x.out_half = SimpleNamespace(stay=out_i[0], move=tile_next["oi"][0],
                                     zero=zero["oi"][0], moves=Signal(name="out_half_moves"))
        m.d.comb += x.out_half.moves.eq(take & o.last & last_j_now)
        nxt = {k: Signal.like(v, name=f"{v.name}_next") for k, v in reg.items()}
        m.d.comb += [nxt[k].eq(taken_or_not(
            Mux(o.last, Mux(last_j_now, tile_next[k], step_next.get(k, v)), v), v, zero[k]))
            for k, v in reg.items()]
        m.d.sync += [reg[k].eq(v) for k, v in nxt.items()]
        x.out_pv_next = nxt["pv"]
        x.grow = grow
        # gemm
        m.d.comb += [self.o_gemm.payload.row.eq(grow),
                     self.o_gemm.payload.col.eq(out_j << exact_log2(n)),
                     self.o_gemm.payload.last.eq(last_tile & (grow == x.m1.m))]
        for t in range(n):
            m.d.comb += self.o_gemm.payload.c[t].eq(o.c[t])
        # hash: bit j·n + t of the token is c[t] > bias[j·n + t]
        # the bias word of the column tile in the array's output: read a cycle ahead, the
        # current tile's and the next one's (two ports, addresses from registers), the next
        # one's taken when the row before ended a tile (the address had been chosen by the
        # output's handshake: for the clock)
        next_j = Signal(16)
        m.d.comb += next_j.eq(Mux(x.out_j_lt_last, 0, out_j1))
        m.d.comb += [x.bias_rd.addr.eq(out_j), x.bias_rd_next.addr.eq(next_j)]
        moved = Signal()
        m.d.sync += moved.eq(take & o.last)
        # A hash row goes through two register stages: h1 takes the row and its column
        # tile's bias word, h2 the bits compared from them (c[t] > bias[t]); the compare had
        # run on the array's queue head (a LUT RAM) into the output and the gathering
        # registers (for the clock; two cycles more a hash command). A row's bits of the
        # tiles before its last shift in from the top of its register, n at a time (tile j
        # ends at bit j·n after the last tile's shift), so no bit goes through a shift by the
        # tile's index; on its last tile the word is that register and h2's bits.
        def hash_stage(name):
            return SimpleNamespace(
                valid=Signal(name=f"hash_{name}_valid"),
                row=Signal(range(n), name=f"hash_{name}_row"),
                emit=Signal(name=f"hash_{name}_emit"),      # the row's last column tile
                first=Signal(name=f"hash_{name}_first"), last=Signal(name=f"hash_{name}_last"),
                go=Signal(name=f"hash_{name}_go"))
        h1, h2 = hash_stage("h1"), hash_stage("h2")
        h1_c = [Signal(signed(self._acc_bits), name=f"hash_h1_c_{t}", reset_less=True)
                for t in range(n)]
        h1_bias = [Signal(signed(self._acc_bits), name=f"hash_h1_bias_{t}", reset_less=True)
                   for t in range(n)]
        h2_bits = Signal(n, name="hash_h2_bits", reset_less=True)
        h1_in = Signal(name="hash_h1_in")              # a real hash row taken into h1
        m.d.comb += [h2.go.eq(h2.valid & (~h2.emit | self.o_hash.ready)),
                     h1.go.eq(h1.valid & (~h2.valid | h2.go))]
        # h1 has room: h1's take below (the array's ready sees it a cycle ahead, from the
        # stages' next values)
        h1_room = Signal(name="hash_h1_room")
        m.d.comb += h1_room.eq(~h1.valid | h1.go)
        h1_next = SimpleNamespace(valid=Signal(name="hash_h1_valid_next"))
        h2_next = SimpleNamespace(valid=Signal(name="hash_h2_valid_next"),
                                  emit=Signal(name="hash_h2_emit_next"))
        m.d.comb += [h1_next.valid.eq(x.start & (h1_in | h1.valid & ~h1.go)),
                     h2_next.valid.eq(x.start & (h1.go | h2.valid & ~h2.go)),
                     h2_next.emit.eq(Mux(h1.go, h1.emit, h2.emit))]
        m.d.sync += [h1.valid.eq(h1_next.valid), h2.valid.eq(h2_next.valid),
                     h2.emit.eq(h2_next.emit)]
        # h1's data loads whenever h1 has room, its valid flag with a real row's take (the
        # take, behind h1's and h2's flags and o_hash's ready, had been routed 4.3 ns into
        # the enable of h1's 2n words and 4.3 ns on: for the clock): its room is o_hash's
        # ready or ``~h1.valid | ~h2.valid | ~h2.emit``, a register set from their next
        # values, in n + 1 copies (one a lane's two words, one for the row's fields)
        h1_open = copies(m, ~h1_next.valid | ~h2_next.valid | ~h2_next.emit, n + 1,
                         "hash_h1_open", init=1)
        with m.If(h1_open[n] | self.o_hash.ready):
            m.d.sync += [h1.row.eq(o.row), h1.emit.eq(x.out_j_lt_last),
                         h1.first.eq(grow == 0), h1.last.eq(grow == x.m1.m)]
        for t in range(n):
            with m.If(h1_open[t] | self.o_hash.ready):
                m.d.sync += [h1_c[t].eq(o.c[t]),
                             h1_bias[t].eq(Mux(moved, x.bias_rd_next.data[t],
                                               x.bias_rd.data[t]))]
        # the compare is unsigned, on the values with their sign bit flipped (the same
        # order): the carry chain's carry out is the bit (the signed compare's correction,
        # a LUT behind the chain, had been on seed 1's one failing path: for the clock)
        def biased(v):
            return Cat(v[:-1], ~v[-1])
        with m.If(h1.go):
            m.d.sync += [h2.row.eq(h1.row), h2.first.eq(h1.first), h2.last.eq(h1.last),
                         h2_bits.eq(Cat(biased(h1_c[t]) > biased(h1_bias[t])
                                        for t in range(n)))]
        tiles = -(-self._n_hp // n)
        word = Signal(tiles * n)
        if tiles > 1:
            acc = Array(Signal((tiles - 1) * n, name=f"hash_acc_{r}") for r in range(n))
            m.d.comb += word.eq(Cat(acc[h2.row], h2_bits))
            with m.If(h2.go & ~h2.emit):
                m.d.sync += acc[h2.row].eq(Cat(acc[h2.row][n:], h2_bits) if tiles > 2
                                           else h2_bits)
        else:
            m.d.comb += word.eq(h2_bits)
        m.d.comb += [self.o_hash.payload.hash.eq(word[:self._n_hp]),
                     self.o_hash.payload.layer.eq(x.cur.layer),
                     self.o_hash.payload.step.eq(x.cur.step),
                     self.o_hash.payload.first.eq(h2.first),
                     self.o_hash.payload.last.eq(h2.last),
                     self.o_hash.valid.eq(h2.valid & h2.emit)]
        # The array's ready: padding rows are dropped; a real row goes to h1 when it has room,
        # to the dividers' first stage (P·V), into a free half of the score buffer, or out on
        # o_gemm. What it needs of the engine's state is kept in registers set from the next
        # values (the kind, real and P·V flags ANDed in, h1's room but for o_hash's ready, the
        # dividers' room), so the take is an OR of registers and the two outputs' readies and
        # the half-free flag: the multiplexer of every kind's room, from h1's and the
        # dividers' valid flags, had been the engine's slowest path into the output's
        # counters, the array's queue and the half-free flag (for the clock; cycle for cycle
        # the same)
        ready = SimpleNamespace(
            free=Signal(name="out_ready_free"),      # padding, or h1 has room without o_hash
            pv=Signal(name="out_ready_pv"),          # a P·V row, and the dividers have room
            score=Signal(name="out_sel_score"),      # a score row (it needs a free half)
            gemm=Signal(name="out_sel_gemm"))        # a GEMM row (it needs o_gemm's ready)
        m.d.sync += [
            ready.free.eq(~real_n | is_hash & (~h1_next.valid | ~h2_next.valid |
                                               ~h2_next.emit)),
            ready.pv.eq(real_n & nxt["pv"] & x.div_room_next),
            ready.score.eq(real_n & ~nxt["pv"] & x.is_.scoring),
            ready.gemm.eq(real_n & x.is_.gemm)]
        m.d.comb += [
            x.div_valid.eq(arr.o.valid & real & out_pv),
            self.o_gemm.valid.eq(arr.o.valid & ready.gemm),
            arr.o.ready.eq(ready.free | ready.pv | ready.score & x.out_half_free |
                           is_hash & self.o_hash.ready | ready.gemm & self.o_gemm.ready),
            take.eq(arr.o.valid & arr.o.ready)]
        # a real hash row taken, spelled out (h1 has room) rather than through the output's
        # multiplexer of every kind's ready, so the P·V stages' handshake and the GEMM
        # output's do not reach h1's 2n words' enables (for the clock)
        m.d.comb += h1_in.eq(arr.o.valid & real & is_hash & h1_room)
        with m.If(take):
            with m.If(o.last):
                with m.If(last_j_now):
                    m.d.sync += [out_j.eq(0), out_j1.eq(1), out_j0.eq(1)]
                    with m.If(out_pv):
                        m.d.sync += out_p.eq(out_p + 1)
                    with m.Else():
                        m.d.sync += out_s.eq(out_s + 1)
                with m.Else():
                    m.d.sync += [out_j.eq(out_j1), out_j1.eq(out_j1 + 1), out_j0.eq(0)]
        m.d.comb += x.out_done.eq((out_i >= x.mt) & ~h1.valid & ~h2.valid)
        with m.If(~x.start):
            m.d.sync += [out_s.eq(0), out_p.eq(0), out_j.eq(0), out_j1.eq(1), out_j0.eq(1)]
        x.out_stalled = Signal()
        m.d.comb += x.out_stalled.eq(arr.o.valid & ~arr.o.ready)

    def _score_writer(self, m, x):
        """Score rows into the free half of the score buffer; each row's running maximum over
        its attended columns; the half is full once the row tile's last column tile is in.

        A row attends to its first ``lim`` columns: all ``l`` of them, or in light attention
        with ``causal = c`` the ``l - c`` before the step's own tokens and its own step's up to
        itself, ``l - c + pos + 1`` where ``pos`` runs 0 .. c - 1 over the rows and wraps
        (rows are the group's query heads, each over the step's c tokens)."""
        n, arr = self._n, self._array
        sb = self._score_bits
        x.row_max = [[Signal(signed(sb), name=f"row_max_{h}_{r}") for r in range(n)]
                     for h in range(2)]
        x.row_lim = [[Signal(signed(SPAN_BITS + 2), name=f"row_lim_{h}_{r}") for r in range(n)]
                     for h in range(2)]
        o = arr.o.payload
        half = x.out_i[0]
        scoring = Signal()
        m.d.comb += scoring.eq(x.is_.scoring & ~x.out_pv)
        # a score row (real or padding) taken: the array's ready under ``scoring`` spelled
        # out (padding rows are dropped, real ones wait for a free half), so the write, the
        # ring, the limits and the halves' flags do not wait for the output's multiplexer of
        # every kind's ready (for the clock: the P·V stages' handshake had reached the
        # flags through it); ``write``: a real one. The take is worked out in copies, one
        # for each share of its loads (``TAKES``: the halves' flags, the score RAM's write
        # and the maxima, the ring, the row limit), each a LUT of copies of its four
        # registers (the array's valid flag, the scoring flag, the real flag and the
        # half-free flag, loaded with their next values): one take's loads spread too far
        # for the clock
        takes, writes = {}, {}
        sc = dict(zip(TAKES, copies(m, x.scoring_next & ~x.out_pv_next, len(TAKES),
                                    "score_side")))
        rl = dict(zip(TAKES, copies(m, x.real_next, len(TAKES), "score_real")))
        for g, valid_g in zip(TAKES, arr.o_valid_copy):
            takes[g] = Signal(name=f"score_take_{g}")
            writes[g] = Signal(name=f"score_write_{g}")
            m.d.comb += [takes[g].eq(valid_g & sc[g] & (~rl[g] | x.out_half_free_c[g])),
                         writes[g].eq(takes[g] & rl[g])]
        x.score_take = takes["flags"]
        write = writes["write"]
        row_in = mem_addr(half, o.row, n)        # the row's place in the buffer's two halves
        m.d.comb += [x.score_wr.addr.eq(mem_addr(row_in, x.out_j, x.row_words)),
                     x.score_wr.en.eq(write)]
        # the row's limit: set on its first column tile, from a position counter over rows
        # (from ``pos0``); in a chunk of a longer set, counted from the chunk's first token:
        # ``span - causal + pos + 1``, which is 0 or less when the row's tokens end before the
        # chunk (the whole chunk masked), and at most ``l`` (the columns past l are padding)
        pos = Signal(16)
        causal = x.is_.causal
        # ``lim_base + pos`` and whether it is below ``l``, in registers stepped with pos (the
        # row's limit had been an addition, a compare and a multiplexer behind the command's
        # registers, into 2n limit registers and s0: for the clock): set while the engine
        # is not started (the sum, then its compare a cycle later: the command's load takes
        # at least two cycles after ``cur``), one more (below l until it reaches l - 1) with
        # each row, and back to ``lim_base`` when pos wraps
        lim_raw = Signal(signed(SPAN_BITS + 2), name="score_lim_raw")
        lim_lt = Signal(name="score_lim_lt")
        base_lt = Signal(name="score_lim_base_lt")
        # the row's limit itself, ``causal & lim_lt ? lim_raw : l``, in a register too, set
        # from the next values (so that no multiplexer from the command's flag sits in front
        # of the masks' compares)
        lim_new = Signal(signed(SPAN_BITS + 2), name="score_lim_new")
        lim_raw_n = Signal(signed(SPAN_BITS + 2))
        lim_lt_n = Signal()
        # the columns of this tile the row attends to, less its first: ``lim - col0``, from
        # ``lim_new`` on the first column tile, then from a ring of n registers, one a row
        # (rows leave the array in order, n of them, padding included, each column tile):
        # each row's value less n goes in at the tail as the row is taken, and comes out at
        # the head for its next column tile (for the clock: the row's limit had been read
        # through a multiplexer by the array's row and less col0, into s0)
        ring = [Signal(signed(SPAN_BITS + 3), name=f"score_cols_left_{r}") for r in range(n)]
        left_in = Signal(signed(SPAN_BITS + 3), name="score_cols_left_in")
        m.d.comb += left_in.eq(Mux(x.out_j_zero, lim_new, ring[0]))
        with m.If(takes["ring"]):
            m.d.sync += [ring[r].eq(ring[r + 1]) for r in range(n - 1)]
            m.d.sync += ring[n - 1].eq(left_in - n)
        # a row's step, worked out from the registers: pos wraps to 0 (the limit back to
        # ``lim_base``) or steps (the limit one more, below l until it was l - 1)
        wrap_pos = pos == x.m1.causal
        step_raw = Mux(wrap_pos, x.lim_base, lim_raw + 1)
        step_lt = Mux(wrap_pos, base_lt, lim_lt & (lim_raw != x.m1.l))
        m.d.comb += [lim_raw_n.eq(lim_raw), lim_lt_n.eq(lim_lt)]
        with m.If(writes["lim"] & x.out_j_zero):
            m.d.sync += pos.eq(Mux(wrap_pos, 0, pos + 1))
            m.d.comb += [lim_raw_n.eq(step_raw), lim_lt_n.eq(step_lt)]
        with m.If(~x.start):
            m.d.sync += [pos.eq(x.cur.pos0), base_lt.eq(x.lim_base < x.cur.l)]
            m.d.comb += [lim_raw_n.eq(x.lim_base + x.cur.pos0), lim_lt_n.eq(lim_raw < x.cur.l)]
        m.d.sync += [lim_raw.eq(lim_raw_n), lim_lt.eq(lim_lt_n)]
        # ``lim_new`` is loaded with the step's value under the write's enable (it had run
        # through the step's multiplexers into the data, 4 LUTs behind the halves' flag: for
        # the clock); it holds otherwise, as its inputs do
        with m.If(~x.start):
            m.d.sync += lim_new.eq(Mux(causal & lim_lt_n, lim_raw_n, x.cur.l))
        with m.Elif(writes["lim"] & x.out_j_zero):
            m.d.sync += lim_new.eq(Mux(causal & step_lt, step_raw, x.cur.l))
        lowest = Const(-(1 << (sb - 1)), signed(sb))
        for t in range(n):
            m.d.comb += x.score_wr.data[t].eq(o.c[t])
        # The row maxima trail the writes by a pipeline (for the clock: the array's drain
        # multiplexer, the masks, a tree of n compares and the running compare in one cycle
        # limited the engine): from n = 4 on, s0 registers the beat with its limit less its
        # first column, s1 the masked beat; at n = 4, s2 the tree's lower half and the
        # running maximum takes the rest; from n = 8 on, a stage a level of the tree (s2 ..
        # s(1 + log2 n)), then one more while the beat's maximum is compared with every
        # row's (2n compares, registered: a row's maximum moves once a column tile, n rows
        # apart, so its compare may run a cycle ahead of its update). Nothing waits for it:
        # row r's last beat is taken at least n - 1 - r cycles before its tile's half is
        # full, and the exp stage reads row r's maximum r·ceil(l / n) >= r cycles after that,
        # so a maximum d cycles late is still in time when d <= n - 1 (d = 3 + log2 n from
        # n = 8 on, 3 at n = 4, 1 at n = 2, none at n = 1).
        vmax = lambda p, q: Mux(p > q, p, q)
        upd = SimpleNamespace(valid=write, half=half, row=o.row, first=x.out_j_zero)

        def stage(prev, items, name):
            nxt = SimpleNamespace(valid=Signal(name=f"{name}_valid"),
                                  half=Signal(name=f"{name}_half"),
                                  row=Signal(range(n), name=f"{name}_row"),
                                  first=Signal(name=f"{name}_first"))
            m.d.sync += [nxt.valid.eq(prev.valid & x.start), nxt.half.eq(prev.half),
                         nxt.row.eq(prev.row), nxt.first.eq(prev.first)]
            return nxt, register(m, items, f"{name}_v")

        levels = exact_log2(n)
        # column col0 + t is attended when t < lim - col0 (n compares with constants, ahead
        # of s0 from n = 4 on: behind it they had sat in front of the masks' wide fan-out)
        beat = list(o.c)
        on = [left_in > t for t in range(n)]
        # the row's limit goes into its register from s0 too, from n = 4 on (the write's
        # take, among its other loads, had been routed 6.5 ns into the 2n limits' enables:
        # for the clock); like the maxima, a cycle late is in time (n - 1 >= 1)
        lim_at = SimpleNamespace(valid=write, half=half, row=o.row, first=x.out_j_zero,
                                 lim=lim_new)
        if levels >= 2:
            upd, regs = stage(upd, beat + on + [lim_new], "score_s0")
            beat, on = regs[:n], regs[n:2 * n]
            lim_at = SimpleNamespace(valid=upd.valid, half=upd.half, row=upd.row,
                                     first=upd.first, lim=regs[2 * n])
        vals = []
        for t in range(n):
            v = Signal(signed(sb), name=f"score_in_{t}")
            m.d.comb += v.eq(Mux(on[t], beat[t], lowest))
            vals.append(v)
        if levels >= 1:
            upd, vals = stage(upd, vals, "score_s1")
        if levels >= 3:
            for lv in range(levels):
                upd, vals = stage(upd, reduce_tree(m, vals, vmax, f"score_beat_max_l{lv}",
                                                   levels=1), f"score_s{2 + lv}")
            beat_max = vals[0]
            gt = [[Signal(name=f"score_gt_{h}_{r}") for r in range(n)] for h in range(2)]
            m.d.sync += [gt[h][r].eq(beat_max > x.row_max[h][r])
                         for h in range(2) for r in range(n)]
            upd, (beat_max,) = stage(upd, [beat_max], f"score_s{2 + levels}")
            greater = (lambda h, r: gt[h][r])
        else:
            if levels >= 2:
                part = reduce_tree(m, vals, vmax, "score_beat_max_lo", levels=1)
                upd, vals = stage(upd, part, "score_s2")
            beat_max = reduce_tree(m, vals, vmax, "score_beat_max")
            greater = (lambda h, r: beat_max > x.row_max[h][r])
        # a chunked attention's maximum: carried from chunk to chunk of its pass (restarted
        # on the first), then held through the sums' pass
        restart = Signal()
        hold = Signal()
        m.d.comb += [restart.eq(x.is_.restart), hold.eq(x.is_.part_sum)]
        for h in range(2):
            for r in range(n):
                cur_max = x.row_max[h][r]
                with m.If(upd.valid & ~hold & (upd.half == h) & (upd.row == r)):
                    m.d.sync += cur_max.eq(Mux((upd.first & restart) | greater(h, r),
                                               beat_max, cur_max))
                with m.If(lim_at.valid & (lim_at.half == h) & (lim_at.row == r) &
                          lim_at.first):
                    m.d.sync += x.row_lim[h][r].eq(lim_at.lim)
        x.score_fill = [Signal(name=f"score_fill_{h}") for h in range(2)]
        for h in range(2):
            m.d.comb += x.score_fill[h].eq(x.score_take & o.last & x.out_j_lt_last &
                                           (half == h))

    def _score_reader(self, m, x):
        """A full half, word by word and row by row, into the exponential unit: ``s - max``
        for the real columns, with the scores, counts and row framing beside it. Two stages
        move together (one enable: f2 empty or taken): f1 holds the word's address-side
        fields while the memories read, f2 the words read (the score RAM's output register
        on the FPGA: synth/bram_outreg.py) and each column's flag, real or not; the
        subtraction runs from f2 (it had run on the RAM's output, 5.6 ns after the clock,
        into the exp unit: for the clock)."""
        n, exp = self._n, self._exp
        ph = Signal()                            # the half being read
        # the word in the row (pj) and the row tile (ptile) count with their last-value
        # flags in registers (``pj == lt`` and ``ptile == mt`` had been 16-bit compares in
        # front of the issue's moves, the halves' flags and the counters' enables: for the
        # clock)
        pjc = stepped_counter(m, "score_rd_word", 16, {"lt": x.m1.lt})
        ptc = stepped_counter(m, "score_rd_tile", 16, {"mt": x.m1.mt})
        pj, ptile = pjc.pos, ptc.pos
        row_last = pjc.at["lt"]
        # the row in the tile (pr) is its tile's last: row n - 1, or in the last tile row
        # (m - 1) mod n; pr counts with both compares' flags in registers (so that no compare
        # sits in front of ``wrap`` and through it the halves' flags: for the clock)
        pr_last = Signal(name="score_rd_row_last")
        if n > 1:
            prc = stepped_counter(m, "score_rd_row", exact_log2(n),
                                  {"n1": Const(n - 1, exact_log2(n)),
                                   "m": x.m1.m[:exact_log2(n)]})
            pr = prc.pos
            m.d.comb += pr_last.eq(prc.at["n1"] | ptc.at["mt"] & prc.at["m"])
        else:
            pr = Const(0, 1)
            m.d.comb += pr_last.eq(1)
        # (ph, pr) one-hot, a bit a row of each half: the rows' maxima and limits are picked
        # by an AND-OR of these (a multiplexer by pr, a counter with many other loads, is too
        # slow for the clock)
        rsel = [[Signal(name=f"score_rd_sel_{h}_{r}", init=int(h == 0 and r == 0))
                 for r in range(n)] for h in range(2)]
        f1_valid = Signal()
        f1_col0 = Signal(16)
        f1_max = Signal(signed(self._score_bits))
        f1_first, f1_last, f1_head_last = Signal(), Signal(), Signal()
        f1_lim = Signal(signed(SPAN_BITS + 2))
        f1_row = Signal(range(n))
        f1_word = Signal(16)
        f1_tile_last = Signal()
        f1_half = Signal()
        f2_valid = Signal()
        f2_max = Signal(signed(self._score_bits))
        f2_first, f2_last, f2_head_last = Signal(), Signal(), Signal()
        f2_row = Signal(range(n))
        f2_word = Signal(16)
        f2_tile_last = Signal()
        f2_half = Signal()
        f2_real = [Signal(name=f"score_f2_real_{t}") for t in range(n)]
        f2_score = [Signal(signed(self._score_bits), name=f"score_f2_s_{t}", reset_less=True)
                    for t in range(n)]
        f2_count = [Signal.like(x.count_rd.data[t], name=f"score_f2_count_{t}",
                                reset_less=True) for t in range(n)]
        advance = Signal()
        issue = Signal()
        # ``~f2_valid`` in a register of its own for the issue, as in _feeder (the enable's
        # LUT, among its loads, had been routed 4.8 ns into the issue: for the clock);
        # ``rd_half_full`` holds ``start`` too (_score_flags: ``start``, with its wide
        # fan-out, had been routed through the issue and ``wrap`` into the halves' flags)
        f2_empty = Signal(init=1, name="score_f2_empty")
        m.d.comb += [advance.eq(~f2_valid | exp.i.ready),
                     issue.eq((f2_empty | exp.i.ready) & x.rd_half_full)]
        m.d.comb += [x.score_rd.addr.eq(mem_addr(mem_addr(ph, pr, n), pj, x.row_words)),
                     x.score_rd.en.eq(advance),
                     x.count_rd.addr.eq(pj), x.count_rd.en.eq(advance)]
        with m.If(advance):
            m.d.sync += [f1_valid.eq(issue), f1_col0.eq(pj << exact_log2(n)),
                         f1_max.eq(onehot_pick(rsel, x.row_max)),
                         f1_lim.eq(onehot_pick(rsel, x.row_lim)),
                         f1_row.eq(pr), f1_word.eq(pj), f1_half.eq(ph),
                         f1_tile_last.eq(row_last & pr_last),
                         f1_first.eq(pj == 0), f1_last.eq(row_last),
                         f1_head_last.eq(row_last &
                                         ((ptile << exact_log2(n)) + pr == x.m1.m))]
        # the row tile's last word issued: the half is read (``wrap``, for _score_flags)
        x.score_wrap = wrap = Signal(name="score_rd_wrap")
        m.d.comb += wrap.eq(issue & row_last & pr_last)
        m.d.comb += [pjc.zero.eq(~x.start | issue & row_last), pjc.inc.eq(issue),
                     ptc.zero.eq(~x.start), ptc.inc.eq(wrap)]
        if n > 1:
            m.d.comb += [prc.zero.eq(~x.start | wrap), prc.inc.eq(issue & row_last)]
        with m.If(issue & row_last):
            with m.If(pr_last):
                m.d.sync += ph.eq(~ph)
                m.d.sync += [rsel[h][r].eq((r == 0) & (ph != h))
                             for h in range(2) for r in range(n)]
            with m.Else():
                m.d.sync += [rsel[h][r].eq(rsel[h][r - 1] if r else 0)
                             for h in range(2) for r in range(n)]
        for h in range(2):
            m.d.comb += x.score_free[h].eq(wrap & (ph == h))
        with m.If(advance):
            m.d.sync += [f2_valid.eq(f1_valid), f2_empty.eq(~f1_valid),
                         f2_max.eq(f1_max), f2_first.eq(f1_first),
                         f2_last.eq(f1_last), f2_head_last.eq(f1_head_last),
                         f2_row.eq(f1_row), f2_word.eq(f1_word),
                         f2_tile_last.eq(f1_tile_last), f2_half.eq(f1_half)]
            for t in range(n):
                m.d.sync += [f2_real[t].eq(f1_col0 + t < f1_lim),
                             f2_score[t].eq(x.score_rd.data[t]),
                             f2_count[t].eq(x.count_rd.data[t])]
        with m.If(~x.start):
            m.d.sync += [ph.eq(0), f1_valid.eq(0), f2_valid.eq(0), f2_empty.eq(1)]
            m.d.sync += [rsel[h][r].eq((h == 0) & (r == 0)) for h in range(2) for r in range(n)]
        x.ph = ph
        tag = exp.i.payload.tag
        for t in range(n):
            real = f2_real[t]
            m.d.comb += [exp.i.payload.x[t].eq(Mux(real, f2_score[t] - f2_max, 0)),
                         tag.score[t].eq(Mux(real, f2_score[t], 0)),
                         tag.count[t].eq(Mux(real, f2_count[t], 0)),
                         tag.valid[t].eq(real)]
        m.d.comb += [exp.i.valid.eq(f2_valid), tag.first.eq(f2_first), tag.last.eq(f2_last),
                     tag.head_last.eq(f2_head_last), tag.row.eq(f2_row), tag.word.eq(f2_word),
                     tag.tile_last.eq(f2_tile_last), tag.half.eq(f2_half),
                     exp.beta_m.eq(x.cur.beta_m), exp.beta_shift.eq(x.cur.beta_shift)]

    def _score_flags(self, m, x):
        """The score buffer's halves: full once the array's output has written a row tile's
        last column tile into one, free again once the reader has issued its last word. The
        array's output and the reader each see their own half's flag in a register, set
        from the flags' next values and the half each will be at next cycle (the flags had
        been read through a multiplexer by the half in front of the array's ready, whose
        take loads the output's counters and the hash stage's 2n words, and in front of the
        reader's issue: for the clock; cycle for cycle the same). The reader's flag is also
        ANDed with ``start``'s next value, so its issue needs no ``start`` of its own."""
        full_next = [Signal(name=f"score_full_next_{h}") for h in range(2)]
        for h in range(2):
            m.d.comb += full_next[h].eq(x.score_full[h])
            with m.If(x.score_fill[h]):
                m.d.comb += full_next[h].eq(1)
            with m.Elif(x.score_free[h] | ~x.start):
                m.d.comb += full_next[h].eq(0)
            m.d.sync += x.score_full[h].eq(full_next[h])
        # The two flags below are worked out for each value of the reader's ``wrap`` (its
        # last word of a row tile issued: it frees its half and moves to the other), which
        # picks between them last (it had run through the free flags, the next values and
        # the multiplexer by the half: for the clock). The output's flag: each half it may
        # be at next cycle looked up, the one it will be at chosen after (the output's
        # take, through every kind's ready and the P·V job flag, had run in front of the
        # lookup: for the clock).
        hs = x.out_half
        out_free, rd_full = [], []
        for w in (0, 1):
            fn = [Signal(name=f"score_full_next_w{w}_{h}") for h in range(2)]
            for h in range(2):
                m.d.comb += fn[h].eq(Mux(x.score_fill[h], 1,
                                         Mux(w & (x.ph == h) | ~x.start, 0, x.score_full[h])))
            free = {k: ~Array(fn)[getattr(hs, k)] for k in ("stay", "move", "zero")}
            out_free.append(Mux(~x.start, free["zero"],
                                Mux(hs.moves, free["move"], free["stay"])))
            rd_full.append(Array(fn)[Mux(x.start, x.ph ^ w, 0)])
        half_free = Mux(x.score_wrap, out_free[1], out_free[0])
        m.d.sync += [x.out_half_free.eq(half_free),
                     *(c.eq(half_free) for c in x.out_half_free_c.values()),
                     x.rd_half_full.eq(Mux(x.score_wrap, rd_full[1], rd_full[0]) &
                                       x.start_next)]

    def _score_packer(self, m, x):
        """Exp-unit words (n entries) into WTU beats (``wtu_lanes`` entries): several words
        gathered into one beat, or one word split into several, a row never sharing a beat."""
        n, L, exp = self._n, self._wtu_lanes, self._exp
        ot = exp.o.payload.tag
        rows_out = Signal(16)
        o = self.o_score
        valid_in = Signal()                      # an exp word for the packer
        ready_in = Signal()
        is_score = x.is_score_pk
        m.d.comb += [valid_in.eq(exp.o.valid & is_score),
                     exp.o.ready.eq(Mux(is_score, ready_in, 1))]   # P words always taken
        entries = []
        for t in range(n):
            e = Signal(self.score_layout.members["entry"].elem_shape, name=f"score_entry_{t}")
            m.d.comb += [e.score.eq(ot.score[t]), e.weight.eq(Mux(ot.valid[t], exp.o.payload.w[t], 0)),
                         e.count.eq(ot.count[t])]
            entries.append(e)
        if L >= n:
            g = L // n
            slot = Signal(range(g))
            asm = Signal(self.score_layout, name="score_asm")       # the beat being gathered
            can = Signal()
            m.d.comb += [can.eq(~o.valid | o.ready), ready_in.eq(can)]
            with m.If(o.valid & o.ready):
                m.d.sync += o.valid.eq(0)
            merged = Signal(self.score_layout, name="score_merged")
            m.d.comb += merged.eq(asm)
            for s_ in range(g):
                with m.If(slot == s_):
                    for t in range(n):
                        m.d.comb += [merged.entry[s_ * n + t].eq(entries[t]),
                                     merged.valid[s_ * n + t].eq(ot.valid[t])]
            with m.If(slot == 0):
                m.d.comb += merged.first.eq(ot.first)
            m.d.comb += [merged.last.eq(ot.last), merged.head_last.eq(ot.head_last)]
            # o's payload loads with every word taken (while o is empty or being taken, so
            # nothing offered changes), o.valid only with a beat's last word: the payload's
            # enable does not wait for the slot's compare (for the clock)
            complete = Signal()
            m.d.comb += complete.eq(ot.last | (slot == g - 1))
            with m.If(valid_in & can):
                m.d.sync += asm.eq(Mux(complete, 0, merged))
                with m.If(complete):
                    m.d.sync += [o.valid.eq(1), slot.eq(0)]
                with m.Else():
                    m.d.sync += slot.eq(slot + 1)
            # o's payload loads whenever o is empty or being taken, with or without a word
            # (nothing offered changes; o.valid says whether it is a beat), under o.valid's
            # copies, one a lane and one for the framing (the exp unit's queue flag, through
            # the enable's LUT, had been routed 4.4 and 5.3 ns into 800 enables: for the
            # clock)
            ov_next = Signal(name="score_o_valid_next")
            m.d.comb += ov_next.eq(Mux(valid_in & can & complete, 1, o.valid & ~o.ready))
            ov = copies(m, ov_next, L + 1, "score_o_valid")
            for j in range(L):
                with m.If(~ov[j] | o.ready):
                    m.d.sync += [o.payload.entry[j].eq(merged.entry[j]),
                                 o.payload.valid[j].eq(merged.valid[j])]
            with m.If(~ov[L] | o.ready):
                m.d.sync += [o.payload.first.eq(merged.first), o.payload.last.eq(merged.last),
                             o.payload.head_last.eq(merged.head_last)]
            with m.If(~x.start):
                m.d.sync += [slot.eq(0), asm.eq(0)]
        else:
            g = n // L
            sub = Signal(range(g))
            final = Signal()
            nxt = Array(Cat(ot.valid[(s_ + 1) * L] if s_ + 1 < g else Const(0, 1))
                        for s_ in range(g))[sub]
            m.d.comb += final.eq(~nxt)
            for s_ in range(g):
                with m.If(sub == s_):
                    for j in range(L):
                        m.d.comb += [o.payload.entry[j].eq(entries[s_ * L + j]),
                                     o.payload.valid[j].eq(ot.valid[s_ * L + j])]
            m.d.comb += [o.valid.eq(valid_in), o.payload.first.eq(ot.first & (sub == 0)),
                         o.payload.last.eq(ot.last & final),
                         o.payload.head_last.eq(ot.head_last & final),
                         ready_in.eq(o.ready & final)]
            with m.If(o.valid & o.ready):
                m.d.sync += sub.eq(Mux(final, 0, sub + 1))
            with m.If(~x.start):
                m.d.sync += sub.eq(0)
        with m.If(o.valid & o.ready & o.payload.last):
            m.d.sync += rows_out.eq(rows_out + 1)
        with m.If(~x.start):
            m.d.sync += rows_out.eq(0)
        attn_done = Signal()
        with m.If(self.o_attn.valid & self.o_attn.ready & self.o_attn.payload.last):
            m.d.sync += attn_done.eq(1)
        with m.If(~x.start):
            m.d.sync += attn_done.eq(0)
        # light attention ends with its last output row; a chunk of the maximum's pass once
        # its row tile's exp pass is through (its one score half freed); a chunk of the sums'
        # pass that is not the final one once its P·V rows are in the sums
        attend_end = Mux(x.is_.part_max, x.p_ready[0],
                         Mux(x.is_.absorb, x.out_done & x.pv_idle, attn_done))
        m.d.comb += x.score_done.eq(Mux(is_score, rows_out == x.cur.m,
                                        ~x.is_.attend | attend_end))

    def _p_writer(self, m, x):
        """Light attention's weights from the exp unit into P, a word per row, and each row's
        sum of weights (the softmax denominator); P is ready once the tile's last word is in."""
        n, exp = self._n, self._exp
        ot = exp.o.payload.tag
        # a row's weights: at most 2**(weight_bits - 1) each, over up to 2**SPAN_BITS - 1
        # tokens (a chunked attention carries the sum from chunk to chunk of its sums' pass)
        den_bits = self._weight_bits - 1 + SPAN_BITS
        x.den = [[Signal(den_bits, name=f"den_{h}_{r}") for r in range(n)] for h in range(2)]
        carry = Signal()
        m.d.comb += carry.eq(x.is_.carry)
        put = Signal()
        m.d.comb += put.eq(exp.o.valid & x.is_.attend)
        w = [Signal(self._weight_bits, name=f"p_in_{t}") for t in range(n)]
        m.d.comb += [w[t].eq(Mux(ot.valid[t], exp.o.payload.w[t], 0)) for t in range(n)]
        # the exp unit's word in registers first (pw), then into P and, a cycle later still,
        # summed from registers into its row's denominator (for the clock: the exp unit's
        # queue head, the lanes' masks, the adder tree and the running sum had been one path,
        # and the queue's head had fed P's write data). Nothing reads a denominator that
        # early: P·V starts once the tile's P is written, and its rows reach the dividers
        # >= 2n + 2 cycles later. The tree has a row of registers after its first level too
        # (pairs summed: the tree from pw's registers, beside P's RAMs, routes too far into
        # its adders otherwise); the sum is in its row's
        # denominator three cycles after pw.
        pw_put, pw_first, pw_row, pw_half, pw_word, pw_tile_last, *pw = register(
            m, [put, ot.first & ~carry, ot.row, ot.half, ot.word, ot.tile_last, *w], "pw")
        for r, (wr, _) in enumerate(x.p_mem):
            m.d.comb += [wr.addr.eq(mem_addr(pw_half, pw_word, x.row_words)),
                         wr.en.eq(pw_put & (pw_row == r))]
            m.d.comb += [wr.data[t].eq(pw[t]) for t in range(n)]
        add = (lambda p, q: p + q)
        pairs = tree_stage(m, pw, add, "p_sum")
        c_put, c_first, c_row, c_half = register(m, [pw_put, pw_first, pw_row, pw_half],
                                                 "den_pairs")
        total = reduce_tree(m, pairs, add, "p_sum_rest")
        d_put, d_first, d_row, d_half, d_total = register(
            m, [c_put, c_first, c_row, c_half, total], "den_in")
        for r in range(n):
            for h in range(2):
                with m.If(d_put & (d_row == r) & (d_half == h)):
                    m.d.sync += x.den[h][r].eq(Mux(d_first, 0, x.den[h][r]) + d_total)
        for h in range(2):
            with m.If(pw_put & pw_tile_last & (pw_half == h)):
                m.d.sync += x.p_ready[h].eq(1)
            with m.Elif(x.p_take[h] | ~x.start):
                m.d.sync += x.p_ready[h].eq(0)

    DIV_BITS = 2        # quotient bits a divider step makes a cycle (a radix-4 step)

    def _divider(self, m, x):
        """P·V rows into ``o = round_div(num · 2**out_frac_bits, den)`` (one den a row).

        A row from the array goes through three registers: s1 takes it (and reads the row's
        sums carried from earlier chunks, a memory of n rows by the dimension words), s1b
        takes the memory's word (its output register on the FPGA: synth/bram_outreg.py), s2
        adds them and keeps the sums' magnitudes and signs. From s2 the sums go back to the
        memory (a chunk of the sums' pass that is not the final one) or into n long
        dividers side by side, ``DIV_BITS`` quotient bits a cycle. ``round_div(a, d) =
        sign(a) · floor((2|a| + d) / (2d))``: the dividend ``2|a| + d``'s bits brought down
        two at a time into a partial remainder below ``2d``. The quotient fits
        ``8 + out_frac_bits`` bits (a convex combination of int8 values, rounded up to a
        multiple of DIV_BITS), so a beat takes ``div_cycles``. (The registers also keep the
        array's drain off the dividers' first step.)"""
        n, F = self._n, self._out_frac_bits
        qb = -(-(8 + F) // self.DIV_BITS) * self.DIV_BITS
        o = self._array.o.payload
        den_bits = len(x.den[0][0])
        nb = self.num_bits
        r_bits = nb + F + 2
        sums = memory.Memory(shape=data.ArrayLayout(signed(nb), n), depth=n * x.vc_max,
                             init=[], attrs=NO_RW_CHECK)
        m.submodules.pv_sums = sums
        sum_wr, sum_rd = sums.write_port(), sums.read_port()
        carry = Signal()                 # this chunk adds to the sums of earlier ones
        absorb = Signal()                # its sums stay for later chunks
        m.d.comb += [carry.eq(x.is_.carry), absorb.eq(x.is_.absorb)]

        def stage(name, width):
            return SimpleNamespace(
                valid=Signal(name=f"{name}_valid"),
                c=[Signal(signed(width), name=f"{name}_c_{t}") for t in range(n)],
                den=Signal(den_bits, name=f"{name}_den"), row=Signal(16, name=f"{name}_row"),
                col=Signal(16, name=f"{name}_col"), last=Signal(name=f"{name}_last"),
                addr=Signal(range(n * x.vc_max), name=f"{name}_addr"))

        s1, s1b, s2 = (stage("pv_s1", self._acc_bits), stage("pv_s1b", self._acc_bits),
                       stage("pv_s2", nb))
        # the sums read for s1's row, registered (reset_less: the RAM's output register), and
        # s1's row less one (for the magnitude: -(c + s) = ~(c - 1 + s))
        s1b_sum = [Signal(signed(nb), name=f"pv_s1b_sum_{t}", reset_less=True)
                   for t in range(n)]
        s1b_cm1 = [Signal(signed(self._acc_bits + 1), name=f"pv_s1b_cm1_{t}") for t in range(n)]
        # s2's magnitudes and signs (the dividers' first remainder had been a negation and
        # an addition behind the sums' addition: for the clock)
        s2_mag = [Signal(nb, name=f"pv_s2_mag_{t}") for t in range(n)]
        s2_neg = [Signal(name=f"pv_s2_neg_{t}") for t in range(n)]
        busy = Signal()
        # busy's copies, one a lane (its steps' enables)
        busy_c = [Signal(name=f"div_busy_{t}", attrs=KEEP_COPY) for t in range(n)]
        done = Signal()
        # ~busy & ~done, as a register of its own (``busy`` enables some thousand divider
        # registers; the handshakes back to the array see this one)
        div_free = Signal(init=1)
        # each stage moves on (``go``) when it is valid and the next has room or moves on:
        # s2 into the dividers (or, absorbed, out), s1b into s2, s1 into s1b. The three are
        # registers set from the stages' next values, n + 1 copies of each (one for the
        # handshakes, one for each lane's registers: some eight hundred enables had hung
        # on a chain of three LUTs from the stages' flags, for the clock)
        go_n = SimpleNamespace(s2=Signal(name="pv_s2_go_next"),
                               s1b=Signal(name="pv_s1b_go_next"),
                               s1=Signal(name="pv_s1_go_next"))
        go = {k: copies(m, getattr(go_n, k), n + 1, f"pv_{k}_go") for k in ("s2", "s1b", "s1")}
        s2_go, s1b_go, s1_go = go["s2"][n], go["s1b"][n], go["s1"][n]
        m.d.comb += x.div_ready.eq(~s1.valid | s1_go)
        take = Signal()
        m.d.comb += take.eq(x.div_valid & x.div_ready)
        addr = Cat(o.row, x.out_j) if n > 1 else x.out_j
        m.d.comb += [sum_rd.addr.eq(addr), sum_rd.en.eq(take)]
        # s1's data loads whenever s1 is free or leaving, its valid flag with the row's
        # transfer (the data's enables do not wait for the array's handshake: for the clock)
        with m.If(x.div_ready):
            m.d.sync += [s1.addr.eq(addr),
                         s1.den.eq(Array(Array(x.den[h]) for h in range(2))[x.out_i[0]][o.row]),
                         s1.row.eq(x.cur.row0 + x.grow), s1.col.eq(x.out_j << exact_log2(n)),
                         s1.last.eq((x.grow == x.m1.m) & (x.out_j == x.m1.kc)),
                         *(s1.c[t].eq(o.c[t]) for t in range(n))]
        # the stages' valid flags and the dividers' free flag (free once the row's beat is
        # taken, busy from a division's start) from their next values (the array's ready sees
        # the room they leave a cycle ahead: _outputs)
        v_next = SimpleNamespace(s1=Signal(name="pv_s1_valid_next"),
                                 s1b=Signal(name="pv_s1b_valid_next"),
                                 s2=Signal(name="pv_s2_valid_next"),
                                 free=Signal(name="div_free_next"))
        m.d.comb += [
            v_next.s1.eq(x.start & (take | s1.valid & ~s1_go)),
            v_next.s1b.eq(x.start & (s1_go | s1b.valid & ~s1b_go)),
            v_next.s2.eq(x.start & (s1b_go | s2.valid & ~s2_go)),
            v_next.free.eq(~x.start | Mux(s2_go & ~absorb, 0,
                                          div_free | done & self.o_attn.ready)),
            x.div_room_next.eq(~v_next.s1 | ~v_next.s1b | ~v_next.s2 | absorb | v_next.free),
            go_n.s2.eq(v_next.s2 & (absorb | v_next.free)),
            go_n.s1b.eq(v_next.s1b & (~v_next.s2 | go_n.s2)),
            go_n.s1.eq(v_next.s1 & (~v_next.s1b | go_n.s1b))]
        m.d.sync += [s1.valid.eq(v_next.s1), s1b.valid.eq(v_next.s1b), s2.valid.eq(v_next.s2),
                     div_free.eq(v_next.free)]
        with m.If(s1_go):
            m.d.sync += [s1b.addr.eq(s1.addr), s1b.den.eq(s1.den),
                         s1b.row.eq(s1.row), s1b.col.eq(s1.col), s1b.last.eq(s1.last)]
        for t in range(n):
            with m.If(go["s1"][t]):
                m.d.sync += [s1b.c[t].eq(s1.c[t]), s1b_cm1[t].eq(s1.c[t] - 1),
                             s1b_sum[t].eq(sum_rd.data[t])]
        # the sum and its negation side by side (two additions, not an addition and a
        # negation in a row: for the clock), the magnitude chosen by the sum's sign (assigned
        # outside the stage's If, so its handshake does not gate them)
        sums2 = []
        for t in range(n):
            total = Signal(signed(nb), name=f"pv_s1b_total_{t}")
            less1 = Signal(signed(nb), name=f"pv_s1b_less1_{t}")
            add = Mux(carry, s1b_sum[t], 0)
            m.d.comb += [total.eq(s1b.c[t] + add), less1.eq(s1b_cm1[t] + add)]
            sums2.append((total, less1))
        with m.If(s1b_go):
            m.d.sync += [s2.addr.eq(s1b.addr), s2.den.eq(s1b.den),
                         s2.row.eq(s1b.row), s2.col.eq(s1b.col), s2.last.eq(s1b.last)]
        for t, (total, less1) in enumerate(sums2):
            with m.If(go["s1b"][t]):
                m.d.sync += [s2.c[t].eq(total), s2_neg[t].eq(total < 0),
                             s2_mag[t].eq(Mux(total < 0, ~less1, total))]
        m.d.comb += [sum_wr.addr.eq(s2.addr), sum_wr.en.eq(s2.valid & absorb),
                     *(sum_wr.data[t].eq(s2.c[t]) for t in range(n))]
        m.d.comb += x.pv_idle.eq(~s1.valid & ~s1b.valid & ~s2.valid)

        count = Signal(range(qb + 1))
        dv = Signal(den_bits + 1)        # the divisor 2d
        dv3 = Signal(den_bits + 3)       # 3 · 2d
        # long division, two quotient bits a step: the partial remainder (below 2d between
        # steps) and, beside it, the dividend's bits still to bring down in the top of a
        # register whose bottom takes the quotient's bits (after qb / 2 steps it is the
        # quotient). The dividend is below 2d · 2**qb (the quotient fits qb bits), so its
        # bits above the low qb are the first partial remainder. The remainder's compares
        # are den_bits + 4 bits wide (the divisor shifted right over the whole dividend had
        # made them qb bits wider: for the clock).
        part = [Signal(den_bits + 1, name=f"div_part_{t}") for t in range(n)]
        quo = [Signal(qb, name=f"div_q_{t}") for t in range(n)]
        neg = [Signal(name=f"div_neg_{t}") for t in range(n)]
        row, col, last = Signal(16), Signal(16), Signal()
        nums = [Signal(r_bits, name=f"div_num_{t}") for t in range(n)]
        m.d.comb += [nums[t].eq((s2_mag[t] << (F + 1)) + s2.den) for t in range(n)]
        with m.If(s2_go & ~absorb):
            m.d.sync += [busy.eq(1), *(b.eq(1) for b in busy_c), count.eq(qb - 1),
                         dv.eq(s2.den << 1),
                         dv3.eq((s2.den << 2) + (s2.den << 1)),
                         row.eq(s2.row), col.eq(s2.col), last.eq(s2.last)]
        for t, num in enumerate(nums):
            with m.If(go["s2"][t] & ~absorb):
                m.d.sync += [neg[t].eq(s2_neg[t]), quo[t].eq(num[:qb]),
                             part[t].eq(num[qb:])]
        # the remainder with the next two bits brought down (below 4 · 2d) less 2d, 4d and
        # 6d side by side, the largest that is not negative kept, its multiple the two
        # quotient bits (the compares outside the step's If: a combinational signal assigned
        # under it is gated by ``busy``, which Yosys had put in front of the carry chains)
        steps = []
        for t in range(n):
            r_ = Signal(den_bits + 3, name=f"div_r_{t}")
            m.d.comb += r_.eq(Cat(quo[t][-2:], part[t]))
            diffs = []
            for j, d_ in ((1, dv), (2, dv << 1), (3, dv3)):
                diff = Signal(signed(den_bits + 4), name=f"div_diff_{t}_{j}")
                m.d.comb += diff.eq(r_ - d_)
                diffs.append(diff)
            steps.append((r_, diffs))
        for t, (r_, diffs) in enumerate(steps):
            with m.If(busy_c[t]):
                ge = [~d[-1] for d in diffs]
                m.d.sync += [
                    part[t].eq(Mux(ge[2], diffs[2], Mux(ge[1], diffs[1],
                                                        Mux(ge[0], diffs[0], r_)))),
                    quo[t].eq(Cat(Mux(ge[2], 3, Mux(ge[1], 2, Mux(ge[0], 1, 0)))[:2],
                                  quo[t][:-2]))]
        with m.If(busy):
            m.d.sync += count.eq(count - 2)
            with m.If(count < self.DIV_BITS):
                m.d.sync += [busy.eq(0), done.eq(1), *(b.eq(0) for b in busy_c)]
        p = self.o_attn.payload
        for t in range(n):
            m.d.comb += p.o[t].eq(Mux(neg[t], -quo[t], quo[t]))
        m.d.comb += [self.o_attn.valid.eq(done), p.row.eq(row), p.col.eq(col), p.last.eq(last)]
        with m.If(self.o_attn.valid & self.o_attn.ready):
            m.d.sync += done.eq(0)
        with m.If(~x.start):
            m.d.sync += [busy.eq(0), done.eq(0), *(b.eq(0) for b in busy_c)]

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
