"""The attention engine's P writer: light attention's weights into P and their sums."""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ...lib import reduce_tree, register, tree_stage
from .common import EngineShape, StateSignature, mem_addr

__all__ = ["PWriter"]


class PWriter(wiring.Component):
    """Light attention's weights from the exp unit (``w``, taken when ``valid``) into P
    (``p_wr``: a word per row, two row tiles), and each row's sum of weights (``den``, the
    softmax denominator, a register a row of each half; carried from chunk to chunk of a
    sums' pass unless the command is its first); ``p_ready`` marks a half once the tile's
    last word is in, cleared by the feeder's ``p_take``.

    Latency: the exp unit's word goes into registers first (pw), then into P and, a cycle
    later still, summed from registers into its row's denominator (for the clock: the exp
    unit's queue head, the lanes' masks, the adder tree and the running sum had been one
    path, and the queue's head had fed P's write data). Nothing reads a denominator that
    early: P·V starts once the tile's P is written, and its rows reach the dividers >= 2n +
    2 cycles later. The tree has a row of registers after its first level too (pairs summed:
    the tree from pw's registers, beside P's RAMs, routes too far into its adders
    otherwise); the sum is in its row's denominator three cycles after pw."""

    def __init__(self, shape: EngineShape, *, cmd_layout, exp_out_layout):
        self._sh = shape
        n = shape.n
        super().__init__({
            "st": In(StateSignature(cmd_layout)),
            "valid": In(1), "w": In(exp_out_layout),
            "p_wr": In(memory.WritePort.Signature(
                addr_width=ceil_log2(2 * shape.row_words),
                shape=data.ArrayLayout(shape.weight_bits, n))).array(n),
            "den": Out(data.ArrayLayout(data.ArrayLayout(shape.den_bits, n), 2)),
            "p_ready": Out(2), "p_take": In(2),
        })

    def elaborate(self, platform):
        m = Module()
        sh, st, n = self._sh, self.st, self._sh.n
        ot = self.w.tag
        den = [[Signal(sh.den_bits, name=f"den_{h}_{r}") for r in range(n)] for h in range(2)]
        m.d.comb += [self.den[h][r].eq(den[h][r]) for h in range(2) for r in range(n)]
        put = Signal()
        m.d.comb += put.eq(self.valid & st.is_.attend)
        w = [Signal(sh.weight_bits, name=f"p_in_{t}") for t in range(n)]
        m.d.comb += [w[t].eq(Mux(ot.valid[t], self.w.w[t], 0)) for t in range(n)]
        pw_put, pw_first, pw_row, pw_half, pw_word, pw_tile_last, *pw = register(
            m, [put, ot.first & ~st.is_.carry, ot.row, ot.half, ot.word, ot.tile_last, *w],
            "pw")
        for r, wr in enumerate(self.p_wr):
            m.d.comb += [wr.addr.eq(mem_addr(pw_half, pw_word, sh.row_words)),
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
                    m.d.sync += den[h][r].eq(Mux(d_first, 0, den[h][r]) + d_total)
        p_ready = [Signal(name=f"p_ready_{h}") for h in range(2)]
        m.d.comb += [self.p_ready[h].eq(p_ready[h]) for h in range(2)]
        for h in range(2):
            with m.If(pw_put & pw_tile_last & (pw_half == h)):
                m.d.sync += p_ready[h].eq(1)
            with m.Elif(self.p_take[h] | ~st.start):
                m.d.sync += p_ready[h].eq(0)
        return m
