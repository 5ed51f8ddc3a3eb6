"""The attention engine: operand buffers and the parts around the systolic array that run
its commands (the parts: this package's modules)."""
from __future__ import annotations

from amaranth.hdl import Module, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from vrex.rules import engine_rules

from ...lib import counter_layout
from ..array import SystolicArray
from ..exp import ExpUnit
from .command import EngineCommand
from .common import NO_RW_CHECK, SPAN_BITS, TAKES, EngineShape
from .divider import LongDivider, PvStages
from .feeder import Feeder
from .hashing import HashStage
from .loader import ALoader
from .outputs import Outputs
from .packer import ScorePacker
from .pwriter import PWriter
from .reader import ScoreHalves, ScoreReader
from .scores import ScoreWriter

__all__ = ["AttentionEngine"]


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

    Parts (``rtl/attn/engine/``, each a component with its latency and throughput in its
    docstring): :class:`~.command.EngineCommand` (intake, checks, B / V / bias load, the
    command state every part runs from), :class:`~.loader.ALoader`, :class:`~.feeder.Feeder`,
    the systolic array, :class:`~.outputs.Outputs`, :class:`~.hashing.HashStage`,
    :class:`~.scores.ScoreWriter`, :class:`~.reader.ScoreHalves`,
    :class:`~.reader.ScoreReader`, the exponential unit, :class:`~.packer.ScorePacker`,
    :class:`~.pwriter.PWriter`, :class:`~.divider.PvStages` and
    :class:`~.divider.LongDivider`; the buffers are this component's memories, joined to the
    parts' ports.
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
        self._shape = EngineShape(
            n=n, k_buf=k_buf, b_rows=b_rows, n_hp=n_hp, acc_bits=acc_bits,
            score_bits=score_bits, weight_bits=weight_bits, count_bits=count_bits,
            wtu_lanes=wtu_lanes, out_frac_bits=out_frac_bits,
            layer_bits=max(1, ceil_log2(layers)), step_bits=step_bits)
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
        return self._shape.score_k_max

    @property
    def num_bits(self) -> int:
        """Width of a P·V sum: weights up to 2**(weight_bits - 1) times int8 values over up
        to 2**SPAN_BITS - 1 tokens (a chunked attention's), signed; at least the array's."""
        return self._shape.num_bits

    @property
    def memory_bits(self) -> int:
        """Bits of every buffer: A (two row tiles), B, the column vector, the score buffer
        (two halves), V, P (two halves) and the P·V sums carried between chunks."""
        sh, n, b = self._shape, self._n, self._b_rows
        a_b = 8 * n * self._k_buf * 2 + 8 * b * self._k_buf
        col = self._acc_bits * n * sh.bias_words
        score = self._score_bits * 2 * b * n
        v = 8 * n * b * sh.vc_max
        p = self._weight_bits * 2 * b * n
        sums = n * sh.vc_max * n * self.num_bits
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

    def _memories(self, m):
        """The buffers: A (two row tiles) and B, one memory per row residue, n int8 a word;
        the column vector (n a word, word j for columns j·n .. j·n + n - 1: the hash biases
        or the member counts); the score buffer (two halves of n rows by b_rows // n words
        of n scores); V (b_rows tokens of vc_max words; a word is n dimensions, which is
        beat k's B operand in P·V as it stands) and P (two row tiles, a memory per row, n
        weights a word). Returns them by name."""
        sh, n = self._shape, self._n
        word = data.ArrayLayout(signed(8), n)
        mems = {}

        def mem(name, shape, depth, **kw):
            mems[name] = m.submodules[name] = memory.Memory(shape=shape, depth=depth,
                                                            init=[], **kw)
        for r in range(n):
            mem(f"a_lane_{r}", word, 2 * sh.kc_max, attrs=NO_RW_CHECK)
            mem(f"b_lane_{r}", word, sh.row_words * sh.kc_max, attrs=NO_RW_CHECK)
        mem("bias_mem", data.ArrayLayout(signed(self._acc_bits), n), sh.bias_words)
        mem("score_mem", data.ArrayLayout(signed(self._score_bits), n), 2 * self._b_rows,
            attrs=NO_RW_CHECK)
        mem("v_mem", word, self._b_rows * sh.vc_max, attrs=NO_RW_CHECK)
        for r in range(n):
            mem(f"p_row_{r}", data.ArrayLayout(self._weight_bits, n), 2 * sh.row_words,
                attrs=NO_RW_CHECK)
        return mems

    def _parts(self):
        """The engine's parts, by name."""
        sh, arr, exp = self._shape, self._array, self._exp
        cl = dict(cmd_layout=self.cmd_layout)
        drain = arr.out_layout
        return dict(
            command=EngineCommand(sh, **cl, chunk_layout=self.chunk_layout,
                                  bias_layout=self.bias_layout, k_max_score=sh.score_k_max),
            loader=ALoader(sh, **cl, chunk_layout=self.chunk_layout),
            feeder=Feeder(sh, **cl, feed_layout=arr.in_layout),
            outputs=Outputs(sh, **cl, drain_layout=drain, gemm_layout=self.gemm_layout),
            hashing=HashStage(sh, **cl, drain_layout=drain, hash_layout=self.hash_layout),
            score_writer=ScoreWriter(sh, **cl, drain_layout=drain),
            score_halves=ScoreHalves(**cl),
            score_reader=ScoreReader(sh, **cl, exp_layout=exp.in_layout),
            packer=ScorePacker(sh, **cl, exp_out_layout=exp.out_layout,
                               score_layout=self.score_layout),
            p_writer=PWriter(sh, **cl, exp_out_layout=exp.out_layout),
            pv=PvStages(sh, **cl, drain_layout=drain),
            divider=LongDivider(sh, **cl, attn_layout=self.attn_layout))

    def elaborate(self, platform):
        m = Module()
        arr, exp, n = self._array, self._exp, self._n
        m.submodules.array, m.submodules.exp = arr, exp
        mems = self._memories(m)
        p = self._parts()
        for name, part in p.items():
            m.submodules[name] = part
        cmd, ld, fd, out, hs = (p["command"], p["loader"], p["feeder"], p["outputs"],
                                p["hashing"])
        sw, halves, rd, pk, pwr, pv, dv = (p["score_writer"], p["score_halves"],
                                           p["score_reader"], p["packer"], p["p_writer"],
                                           p["pv"], p["divider"])
        wiring.connect(m, cmd.st, *(part.st for name, part in p.items() if name != "command"))
        # the buffers' ports, in the order the parts were written to take them
        for r in range(n):
            wiring.connect(m, ld.a_wr[r], mems[f"a_lane_{r}"].write_port())
            wiring.connect(m, fd.a_rd[r], mems[f"a_lane_{r}"].read_port())
            wiring.connect(m, cmd.b_wr[r], mems[f"b_lane_{r}"].write_port())
            wiring.connect(m, fd.b_rd[r], mems[f"b_lane_{r}"].read_port())
        bias = mems["bias_mem"]
        wiring.connect(m, cmd.bias_wr, bias.write_port())
        wiring.connect(m, hs.bias_rd, bias.read_port())
        wiring.connect(m, hs.bias_rd_next, bias.read_port())
        wiring.connect(m, rd.count_rd, bias.read_port())
        wiring.connect(m, sw.score_wr, mems["score_mem"].write_port())
        wiring.connect(m, rd.score_rd, mems["score_mem"].read_port())
        wiring.connect(m, cmd.v_wr, mems["v_mem"].write_port())
        wiring.connect(m, fd.v_rd, mems["v_mem"].read_port())
        for r in range(n):
            wiring.connect(m, pwr.p_wr[r], mems[f"p_row_{r}"].write_port())
            wiring.connect(m, fd.p_rd[r], mems[f"p_row_{r}"].read_port())
        # the streams in and out
        wiring.connect(m, wiring.flipped(self.cmd), cmd.i_cmd)
        wiring.connect(m, wiring.flipped(self.b), cmd.i_b)
        wiring.connect(m, wiring.flipped(self.bias), cmd.i_bias)
        m.d.comb += [ld.i_a.valid.eq(self.a.valid), ld.i_a.payload.eq(self.a.payload),
                     cmd.a_valid.eq(self.a.valid),
                     self.a.ready.eq(ld.i_a.ready | cmd.a_drop)]
        wiring.connect(m, fd.feed, arr.i)
        wiring.connect(m, out.gemm, wiring.flipped(self.o_gemm))
        wiring.connect(m, hs.hashes, wiring.flipped(self.o_hash))
        wiring.connect(m, rd.to_exp, exp.i)
        wiring.connect(m, pk.scores, wiring.flipped(self.o_score))
        wiring.connect(m, pv.to_div, dv.from_stages)
        wiring.connect(m, dv.attn, wiring.flipped(self.o_attn))
        wiring.connect(m, out.half, halves.out_half)
        self._join(m, p)
        self._counters(m, cmd, fd, out)
        return m

    def _join(self, m, p):
        """The parts' other links: the array's output to its takers, the halves' flags, the
        exp unit's output to the packer and the P writer, the end of a command."""
        arr, exp = self._array, self._exp
        cmd, ld, fd, out, hs = (p["command"], p["loader"], p["feeder"], p["outputs"],
                                p["hashing"])
        sw, halves, rd, pk, pwr, pv = (p["score_writer"], p["score_halves"],
                                       p["score_reader"], p["packer"], p["p_writer"], p["pv"])
        st = cmd.st
        a_o = self.o_attn
        m.d.comb += [
            # the array's output: counted by the output part, which takes it
            out.drain.valid.eq(arr.o.valid), out.drain.payload.eq(arr.o.payload),
            arr.o.ready.eq(out.drain.ready),
            hs.beat.eq(arr.o.payload), hs.valid.eq(arr.o.valid), hs.real.eq(out.real),
            hs.take.eq(out.take), hs.j.eq(out.j), hs.j1.eq(out.j1),
            hs.j_lt_last.eq(out.j_lt_last), hs.grow.eq(out.grow),
            out.hash_room_next.eq(hs.room_next), out.hash_ready.eq(self.o_hash.ready),
            out.hash_busy.eq(hs.busy),
            sw.beat.eq(arr.o.payload), sw.half.eq(out.half.stay), sw.pv.eq(out.pv),
            sw.j.eq(out.j), sw.j_zero.eq(out.j_zero), sw.j_lt_last.eq(out.j_lt_last),
            sw.pv_next.eq(out.pv_next), sw.real_next.eq(out.real_next),
            *(sw.valid_copy[j].eq(arr.o_valid_copy[j]) for j in range(len(TAKES))),
            pv.beat.eq(arr.o.payload), pv.valid.eq(out.div_valid), pv.j.eq(out.j),
            pv.half.eq(out.half.stay), pv.grow.eq(out.grow), pv.den.eq(pwr.den),
            pv.div_done.eq(a_o.valid), pv.attn_ready.eq(a_o.ready),
            out.div_room_next.eq(pv.room_next),
            # the feeder and the A loader
            fd.room.eq(arr.room), fd.half_full.eq(ld.half_full), ld.half_free.eq(fd.half_free),
            fd.p_ready.eq(pwr.p_ready), pwr.p_take.eq(fd.p_take),
            # the score buffer's halves between the writer and the reader
            halves.fill.eq(sw.fill), halves.free.eq(rd.free), halves.wrap.eq(rd.wrap),
            halves.ph.eq(rd.ph), out.half_free.eq(halves.out_free),
            sw.half_free_copy.eq(halves.out_free_copy), rd.half_full.eq(halves.rd_full),
            rd.row_max.eq(sw.row_max), rd.row_lim.eq(sw.row_lim),
            # the exp unit's words: score words to the packer, weights to the P writer
            exp.beta_m.eq(st.cur.beta_m), exp.beta_shift.eq(st.cur.beta_shift),
            pk.from_exp.valid.eq(exp.o.valid), pk.from_exp.payload.eq(exp.o.payload),
            exp.o.ready.eq(pk.from_exp.ready), pk.is_score.eq(cmd.score_pk),
            pk.exp_sel.eq(cmd.score_exp),
            pwr.valid.eq(exp.o.valid), pwr.w.eq(exp.o.payload),
            # the command's end
            pk.attn_end.eq(a_o.valid & a_o.ready & a_o.payload.last),
            pk.p_ready0.eq(pwr.p_ready[0]), pk.out_done.eq(out.done), pk.pv_idle.eq(pv.idle),
            cmd.feed_done.eq(fd.done), cmd.out_done.eq(out.done), cmd.score_done.eq(pk.done),
            self.error.eq(cmd.err), self.error_code.eq(cmd.err_code),
        ]

    def _counters(self, m, cmd, fd, out):
        perf, ap = self.perf, self._array.perf
        for name in ("beats", "starved", "held", "tiles", "rows"):
            m.d.comb += getattr(perf, name).eq(getattr(ap, name))
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += perf.commands.eq(perf.commands + 1)
        with m.If(cmd.refuse):
            m.d.sync += perf.refused.eq(perf.refused + 1)
        with m.If(~self.cmd.ready):
            m.d.sync += perf.busy.eq(perf.busy + 1)
        with m.If(fd.stalled):
            m.d.sync += perf.feed_stalled.eq(perf.feed_stalled + 1)
        with m.If(out.stalled):
            m.d.sync += perf.out_stalled.eq(perf.out_stalled + 1)
