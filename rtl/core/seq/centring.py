"""The centring sums and the hash biases they give (docs/numerics.md §4)."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from .common import DOT, SUM, Tap

__all__ = ["Centring"]


class Centring(wiring.Component):
    """The centring sums ``S`` (per layer and hash group, ``hash_dim`` int32 values, on chip)
    and counts ``n``. The running sum takes the read DMA's ``SUM`` beats (``dma``), a word of
    the hash input row a cycle; the dot products take the hyperplane rows (``DOT`` beats,
    ``dot_ready`` while no division runs) with ``bus_bytes`` multipliers, and a restoring
    divider gives ``bias[j] = round_div(S · R_j, n)`` per hyperplane, one quotient bit a
    cycle. The hashing phase starts a sum (``sum_load``: ``sum_beats`` beats due) and closes
    it (``sum_close``: ``n += nh``, the dot products next); ``sum_zero``: the beats are in;
    ``j_done``: every hyperplane's bias is out. ``ctx``: the descriptor's window (``layer ·
    hash_groups + grp``). The memories are cleared after reset (``init_done`` then).

    Latency: a dot product's row, then 66 cycles of division per hyperplane."""

    def __init__(self, cfg, *, dma_layout):
        self._cfg = cfg
        G = cfg.hash_groups
        super().__init__({
            "layer": In(8), "grp": In(8), "dma": In(Tap(dma_layout)),
            "sum_load": In(1), "sum_beats": In(32), "sum_close": In(1), "nh": In(16),
            "sum_zero": Out(1), "j_done": Out(1), "dot_ready": Out(1), "init_done": Out(1),
            "ctx": Out(range(max(2, cfg.n_layers * G))),
            "bias": Out(data.ArrayLayout(signed(cfg.attn_acc_bits), cfg.n_hp)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        bus, G = cfg.kvmu_bus_bytes, cfg.hash_groups
        W = cfg.hash_dim // bus                     # words of a hash input row
        ctxs = cfg.n_layers * G
        ctx = self.ctx
        m.d.comb += ctx.eq(self.layer * G + self.grp)
        sm = memory.Memory(shape=data.ArrayLayout(signed(32), bus), depth=ctxs * W, init=[])
        nm = memory.Memory(shape=32, depth=max(2, ctxs), init=[])
        m.submodules.centre_sums, m.submodules.centre_counts = sm, nm
        s_wr, s_rd = sm.write_port(), sm.read_port(domain="comb")
        n_wr, n_rd = nm.write_port(), nm.read_port(domain="comb")
        m.d.comb += n_rd.addr.eq(ctx)
        w = Signal(range(W + 1))                    # word of the row
        sum_left = Signal(32)
        n = Signal(32)
        j = Signal(range(cfg.n_hp + 1))
        acc = Signal(signed(64))
        bias = [Signal(signed(cfg.attn_acc_bits), name=f"centre_bias_{k}")
                for k in range(cfg.n_hp)]
        m.d.comb += [self.bias[k].eq(bias[k]) for k in range(cfg.n_hp)]
        init = Signal(range(ctxs * W + 2), init=0)
        init_done = Signal()
        m.d.comb += [self.sum_zero.eq(sum_left == 0), self.j_done.eq(j == cfg.n_hp),
                     self.init_done.eq(init_done)]
        d = self.dma
        word = d.payload.data
        vals = [word[8 * k:8 * k + 8].as_signed() for k in range(bus)]
        m.d.comb += s_rd.addr.eq(ctx * W + w)
        # clear after reset
        with m.If(~init_done):
            m.d.comb += [s_wr.addr.eq(init), s_wr.en.eq(1), s_wr.data.eq(0),
                         n_wr.addr.eq(init), n_wr.en.eq(init < ctxs), n_wr.data.eq(0)]
            m.d.sync += init.eq(init + 1)
            with m.If(init == ctxs * W - 1):
                m.d.sync += init_done.eq(1)
        # the sums
        with m.If(d.valid & (d.payload.dest == SUM)):
            m.d.comb += [s_wr.addr.eq(ctx * W + w), s_wr.en.eq(1)]
            for k in range(bus):
                m.d.comb += s_wr.data[k].eq(s_rd.data[k] + vals[k])
            m.d.sync += [w.eq(Mux(w == W - 1, 0, w + 1)), sum_left.eq(sum_left - 1)]
        self._dots(m, d, vals, s_rd, n, j, acc, w, bias)
        # the hashing phase's requests (after the data path's: they win)
        with m.If(self.sum_load):
            m.d.sync += [sum_left.eq(self.sum_beats), w.eq(0)]
        with m.If(self.sum_close):
            m.d.comb += [n_wr.addr.eq(ctx), n_wr.en.eq(1), n_wr.data.eq(n_rd.data + self.nh)]
            m.d.sync += [n.eq(n_rd.data + self.nh), j.eq(0), w.eq(0), acc.eq(0)]
        return m

    def _dots(self, m, d, vals, s_rd, n, j, acc, w, bias):
        """The dot products and the divider: ``round_div(a, n) = sign(a) · floor((2|a| +
        n) / (2n))``."""
        cfg = self._cfg
        bus, W = cfg.kvmu_bus_bytes, cfg.hash_dim // cfg.kvmu_bus_bytes
        dividing = Signal()
        num, quo = Signal(66), Signal(66)
        den = Signal(34)
        rem = Signal(67)
        bit = Signal(range(67))
        neg = Signal()
        m.d.comb += self.dot_ready.eq(~dividing)
        with m.If(d.valid & (d.payload.dest == DOT) & ~dividing):
            prods = [s_rd.data[k] * vals[k] for k in range(bus)]
            total = prods[0]
            for p in prods[1:]:
                total = total + p
            nxt = acc + total
            m.d.sync += [acc.eq(nxt), w.eq(Mux(w == W - 1, 0, w + 1))]
            with m.If(w == W - 1):
                mag = Mux(nxt < 0, -nxt, nxt)
                m.d.sync += [dividing.eq(1), neg.eq(nxt < 0), num.eq((mag << 1) + n),
                             den.eq(n << 1), rem.eq(0), quo.eq(0), bit.eq(65)]
        with m.If(dividing):
            r2 = Cat(num.bit_select(bit, 1), rem[:66])
            ge = r2 >= den
            m.d.sync += [rem.eq(Mux(ge, r2 - den, r2)), quo.eq(Cat(ge, quo[:65])),
                         bit.eq(bit - 1)]
            with m.If(bit == 0):
                q = Signal(signed(68))
                m.d.comb += q.eq(Mux(neg, -Cat(ge, quo[:65]), Cat(ge, quo[:65])))
                for k in range(cfg.n_hp):
                    with m.If(j == k):
                        m.d.sync += bias[k].eq(q)
                m.d.sync += [dividing.eq(0), j.eq(j + 1), acc.eq(0)]
