"""What the attention engine's parts share: the command kinds, the buffers' geometry, the
command state the command part hands every other part, and small address helpers
(``rtl.attn.engine.unit`` joins the parts)."""
from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Cat, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import Out
from amaranth.utils import exact_log2

__all__ = ["NO_RW_CHECK", "TAKES", "SPAN_BITS", "Kind", "Part", "EngineShape", "FLAGS",
           "LESS", "LESS2", "StateSignature", "mem_addr", "onehot_pick", "job"]

# The engine's block RAMs are never read at an address written in the same cycle where the
# read matters: a buffer half is written only once freed by its reader and read only once
# full (A, P, the scores), B and V only before the feed, and a P·V sums word is read and
# written once a chunk. Yosys is told so (its read-during-write check off), or its FPGA
# mappings would emulate the old-data read of a write port beside the read port: a delayed
# write and an address compare with a multiplexer on every read bit (on ECP5, about one LUT
# and two flip-flops a bit, and the multiplexer on the path out of the RAM).
NO_RW_CHECK = {"no_rw_check": 1}

# The score take's copies, each driving one share of its loads (the score writer): the
# halves' flags, the score RAM's write and the maxima, the ring of columns left, the row
# limit.
TAKES = ("flags", "write", "ring", "lim")

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


@dataclass(frozen=True)
class EngineShape:
    """The engine's geometry, as its parts need it (the engine's parameters; see
    :class:`~rtl.attn.engine.unit.AttentionEngine`)."""
    n: int
    k_buf: int
    b_rows: int
    n_hp: int
    acc_bits: int
    score_bits: int
    weight_bits: int
    count_bits: int
    wtu_lanes: int
    out_frac_bits: int
    layer_bits: int
    step_bits: int

    @property
    def log_n(self) -> int:
        return exact_log2(self.n)

    @property
    def kc_max(self) -> int:
        """Words a buffered row of A or B: ``k_buf / n``."""
        return self.k_buf // self.n

    @property
    def row_words(self) -> int:
        """Words of n scores (or weights) a row of the score buffer (or P)."""
        return self.b_rows // self.n

    @property
    def score_k_max(self) -> int:
        """The longest score reduction whose scores fit ``score_bits``."""
        return min(self.k_buf, 1 << (self.score_bits - 16))

    @property
    def vc_max(self) -> int:
        """Words of n dimensions a token of V."""
        return -(-self.score_k_max // self.n)

    @property
    def num_bits(self) -> int:
        """Width of a P·V sum: weights up to 2**(weight_bits - 1) times int8 values over up
        to 2**SPAN_BITS - 1 tokens (a chunked attention's), signed; at least the array's."""
        return max(self.acc_bits, self.weight_bits + 7 + SPAN_BITS)

    @property
    def den_bits(self) -> int:
        """Width of a row's sum of weights (the softmax denominator), over up to
        2**SPAN_BITS - 1 tokens."""
        return self.weight_bits - 1 + SPAN_BITS

    @property
    def bias_words(self) -> int:
        """Words of the column vector: the hash biases or the candidates' counts."""
        return max(-(-self.n_hp // self.n), self.b_rows // self.n)


# The command's kind and part decoded once (the command part's registers, loaded with the
# command): what each flag means is in EngineCommand._decode.
FLAGS = ("gemm", "hash", "score", "attend", "scoring", "part_max", "part_sum", "pv", "kv",
         "pairs", "carry", "absorb", "restart", "causal")
# the sizes less one (signed, so a zero size's -1 is no index) and four of them less two
LESS = ("kc", "lt", "mt", "kt", "kt_pv", "m", "l", "causal")
LESS2 = ("kt", "kt_pv", "kc", "lt")


class StateSignature(wiring.Signature):
    """The command in progress as the command part holds it, for every other part: the
    command (``cur``), its beats a row (``kc``), column and row tiles (``lt``, ``mt``), its
    kind flags (``is_``), sizes less one and two (``m1``, ``m2``), light attention's row
    limit base (``lim_base``), ``start`` (the operands are loaded: the parts run; 0 resets
    them) with its next value, and the scoring flag's next value. All registers."""

    def __init__(self, cmd_layout):
        super().__init__({
            "cur": Out(cmd_layout),
            "kc": Out(16), "lt": Out(16), "mt": Out(16),
            "start": Out(1), "start_next": Out(1), "scoring_next": Out(1),
            "is_": Out(data.StructLayout({k: 1 for k in FLAGS})),
            "m1": Out(data.StructLayout({k: signed(18) for k in LESS})),
            "m2": Out(data.StructLayout({k: signed(18) for k in LESS2})),
            "lim_base": Out(signed(SPAN_BITS + 3)),
        })


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


def job(m, st, s_next, p_next, name):
    """The array's job order: row tiles' scores (S) and, for light attention, their P·V,
    as S0, S1, PV0, S2, PV1, ..., PV(last): a tile's exp pass runs while the array
    computes the next tile's scores. The next job is P·V once the S jobs are two tiles
    ahead or all done. ``st`` is the command state (:class:`StateSignature`). Returns
    (whether it is P·V, its row tile)."""
    pv = Signal(name=f"{name}_pv")
    tile = Signal(16, name=f"{name}_tile")
    m.d.comb += [pv.eq(st.is_.pv & ~((s_next < st.mt) & (s_next - p_next < 2))),
                 tile.eq(Mux(pv, p_next, s_next))]
    return pv, tile
