"""The KVMU's keyed candidate list: each candidate's HC sums divided into its representative
key."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, fifo, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from .parts import events

__all__ = ["KvmuKeys", "key_meta"]


def key_meta(ci_bits: int, count_bits: int, addr_bits: int) -> data.StructLayout:
    """A candidate whose sums are on their way: its cluster id, member count, past count and
    the address of its sums."""
    return data.StructLayout({"ci": ci_bits, "cnt": count_bits, "past": count_bits,
                              "addr": addr_bits})


class KvmuKeys(wiring.Component):
    """The keyed candidate list's receiving side: the sums' R beats (while ``rx``), one a
    cycle, through a pipeline of ``bus_bytes / 4`` restoring dividers (a quotient bit a
    stage, saturated when the quotient reaches 256) into ``o`` words of ``bus_bytes`` int8
    values (``round_div(sum, count)``). The issuing side pushes each candidate (``cq_*``) as
    its first burst is asked for; its last beat pops it. A failed beat's sums count as 0 and
    raise ``k_err`` (once a list: ``h_err``, the control's flag, ``h_err_set`` sets it).
    Latency: a word is on ``o`` ten cycles after its last beat. Throughput: a beat a cycle
    while ``o`` is ready."""

    COUNTERS = ("hc_read_beats", "bus_errors")

    def __init__(self, *, bus_bytes: int, head_dim: int, count_bits: int, ci_bits: int,
                 addr_bits: int, max_reads: int, cand):
        self._bus_bytes, self._hbeats = bus_bytes, 4 * head_dim // bus_bytes
        self._cb, self._meta = count_bits, key_meta(ci_bits, count_bits, addr_bits)
        self._max_reads, self._ci_bits = max_reads, ci_bits
        super().__init__({
            "rx": In(1), "rdata": In(8 * bus_bytes), "rresp": In(2), "r_go": In(1),
            "rready": Out(1),
            "cq_valid": In(1), "cq": In(self._meta), "cq_rdy": Out(1),
            "h_err": In(1), "h_err_set": Out(1),
            "k_err": Out(1), "k_err_addr": Out(addr_bits),
            "o_valid": Out(1), "o_ready": In(1), "o": Out(cand),
            "idle": Out(1),
            "ev": events(*self.COUNTERS),
        })

    def elaborate(self, platform):
        m = Module()
        hbeats, lanes, cb = self._hbeats, self._bus_bytes // 4, self._cb
        m.submodules.cq = cq = fifo.SyncFIFO(width=self._meta.size, depth=self._max_reads + 1)
        m.d.comb += [cq.w_data.eq(self.cq), cq.w_en.eq(self.cq_valid),
                     self.cq_rdy.eq(cq.w_rdy)]
        head = data.View(self._meta, cq.r_data)
        rx_i = Signal(range(hbeats))       # beat of the candidate's sums
        out_valid, out_data = Signal(), Signal(8 * self._bus_bytes)
        out_ci, out_past, out_first = Signal(self._ci_bits), Signal(cb), Signal()
        o = self.o
        m.d.comb += [self.o_valid.eq(out_valid), o.data.eq(out_data), o.cluster.eq(out_ci),
                     o.count.eq(out_past), o.first.eq(out_first)]
        with m.If(self.o_valid & self.o_ready):
            m.d.sync += out_valid.eq(0)
        adv = Signal()                     # the pipeline moves (its output has room)
        m.d.comb += adv.eq(~out_valid | self.o_ready)
        # stage layout: candidate fields, the beat's place in its output word, and per lane
        # the sign, saturation, remainder and quotient so far
        stages = 9
        stage_t = data.StructLayout({"valid": 1, "cnt": cb, "ci": self._ci_bits, "past": cb,
                                     "pos": 2, "first": 1, "last": 1})
        meta = [Signal(stage_t, name=f"kd{s}") for s in range(stages + 1)]
        lane = lambda what, s, i: Signal(name=f"kd{s}_{what}{i}")
        neg = [[lane("neg", s, i) for i in range(lanes)] for s in range(stages + 1)]
        sat = [[lane("sat", s, i) for i in range(lanes)] for s in range(stages + 1)]
        # stage 0 holds |sum|; stage s >= 1 the remainder after s - 1 quotient bits, below
        # (2 · count) << (9 - s)
        num = [[Signal(32 if s == 0 else cb + 10 - s, name=f"kd{s}_num{i}")
                for i in range(lanes)] for s in range(stages + 1)]
        q = [[Signal(max(1, s - 1), name=f"kd{s}_q{i}") for i in range(lanes)]
             for s in range(stages + 1)]
        with m.If(adv):
            self._take(m, cq, head, rx_i, meta, neg, num)
            self._divide(m, meta, neg, sat, num, q, stages)
            self._emit(m, meta, neg, sat, q, stages, out_valid, out_data, out_ci, out_past,
                       out_first)
        m.d.comb += self.idle.eq(~cq.r_rdy & ~out_valid & ~Cat(*[s.valid for s in meta]).any())
        return m

    def _take(self, m, cq, head, rx_i, meta, neg, num):
        """Stage 0: the R beat, when the list is keyed and a candidate is waiting (the
        stage's fields load on every move, valid or not: only ``valid`` says which, so their
        enables carry none of the R channel's decisions)."""
        hbeats, lanes = self._hbeats, self._bus_bytes // 4
        with m.If(self.rx):
            m.d.comb += self.rready.eq(cq.r_rdy)
        take = self.r_go & self.rx
        m.d.sync += [meta[0].valid.eq(take), meta[0].cnt.eq(head.cnt),
                     meta[0].ci.eq(head.ci), meta[0].past.eq(head.past),
                     meta[0].pos.eq(rx_i[:2]), meta[0].first.eq(rx_i < 4),
                     meta[0].last.eq((rx_i[:2] == 3) | (rx_i == hbeats - 1))]
        bad = self.rresp != 0               # a failed beat's sums are taken as zero
        for i in range(lanes):
            s = self.rdata[32 * i:32 * i + 32].as_signed()
            m.d.sync += [neg[0][i].eq(~bad & (s < 0)),
                         num[0][i].eq(Mux(bad, 0, Mux(s < 0, -s, s)))]
        with m.If(take):
            m.d.sync += rx_i.eq(rx_i + 1)
            m.d.comb += self.ev.hc_read_beats.eq(1)
            with m.If(rx_i == hbeats - 1):
                m.d.comb += cq.r_en.eq(1)
                m.d.sync += rx_i.eq(0)
            with m.If(bad & ~self.h_err):
                m.d.comb += [self.k_err.eq(1),
                             self.k_err_addr.eq(head.addr + (rx_i << exact_log2(
                                 self._bus_bytes))),
                             self.h_err_set.eq(1), self.ev.bus_errors.eq(1)]

    def _divide(self, m, meta, neg, sat, num, q, stages):
        """Stage 1: 2·|sum| + count (round half away from zero), saturated at 256·2·count;
        stages 2..9: one quotient bit each against (2·count) << (8 - s)."""
        lanes = self._bus_bytes // 4
        for i in range(lanes):
            n2 = (num[0][i] << 1) + meta[0].cnt
            big = n2 >= (meta[0].cnt << 9)
            m.d.sync += [neg[1][i].eq(neg[0][i]), sat[1][i].eq(big),
                         num[1][i].eq(Mux(big, 0, n2))]
        for s in range(1, stages):
            den = meta[s].cnt << (stages - s)
            for i in range(lanes):
                ge = num[s][i] >= den
                bits = Cat(ge, q[s][i]) if s > 1 else ge
                m.d.sync += [neg[s + 1][i].eq(neg[s][i]), sat[s + 1][i].eq(sat[s][i]),
                             num[s + 1][i].eq(Mux(ge, num[s][i] - den, num[s][i])),
                             q[s + 1][i].eq(bits)]
        for s in range(stages):
            m.d.sync += meta[s + 1].eq(meta[s])

    def _emit(self, m, meta, neg, sat, q, stages, out_valid, out_data, out_ci, out_past,
              out_first):
        """The output word: quotients clipped to int8, word by word."""
        lanes = self._bus_bytes // 4
        last = meta[stages]
        cw = Signal(8 * self._bus_bytes)
        vals = []
        for i in range(lanes):
            qq = Mux(sat[stages][i], 255, q[stages][i])
            v = Mux(neg[stages][i], Mux(qq > 128, -128, -qq), Mux(qq > 127, 127, qq))
            vals.append(v[:8])
        word = Cat(*[Mux(last.pos == j, Cat(*vals), Mux(last.pos == 0, 0,
                                                         cw.word_select(j, 8 * lanes)))
                     for j in range(4)])
        with m.If(last.valid):
            with m.If(last.last):
                m.d.sync += [out_valid.eq(1), out_data.eq(word), out_ci.eq(last.ci),
                             out_past.eq(last.past), out_first.eq(last.first)]
            with m.Else():
                m.d.sync += cw.eq(word)
