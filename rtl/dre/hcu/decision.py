"""The HCU's decision: join the token's winner or open a cluster; the output beat and the
entry written back."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .signatures import BestSignature, WriteSignature

__all__ = ["HcuDecision"]


class HcuDecision(wiring.Component):
    """From the token's winner (``best``) and the token: the output beat ``beat`` (its
    cluster id, whether it opened, its distance, the cluster's new count) and the write that
    commits it (``w``, valid with ``commit``: a joined cluster's count, or an opened one's
    hash, step and count 1, in the slot of the next opening).

    Latency: none (combinational from registers: ``best`` and the decision, the token, and
    what follows from the layer's clusters a cycle after the token's start; ``row0`` and the
    opened slot's lane are registered here a cycle after the start)."""

    def __init__(self, *, entry, lane, lanes: int, layers: int, window: int, n_hp: int,
                 count_bits: int, id_bits: int, token_layout, out_layout, token_bits: int,
                 addr_bits: int, layer_bits: int):
        self._lanes, self._window, self._n_hp = lanes, window, n_hp
        self._count_bits, self._layer_bits, self._layers = count_bits, layer_bits, layers
        self._wlog = (window - 1).bit_length()
        super().__init__({
            "best": In(BestSignature(lane, lanes, layers)),
            "cur": In(token_layout), "token": In(token_bits), "n_cur": In(id_bits),
            "n_hi_m1": In(max(1, id_bits - self._wlog)),
            "commit": In(1),
            "beat": Out(out_layout),
            "w": Out(WriteSignature(entry, lanes, addr_bits)),
            "row0": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        N, wlog, cur, b = self._lanes, self._wlog, self.cur, self.best
        lane_log = (N - 1).bit_length()
        rlog = (self._window // N - 1).bit_length()
        layer_log = (self._layers - 1).bit_length()
        fin, join = b.best, b.join
        cmax = (1 << self._count_bits) - 1
        best_key = fin.rank.key
        r = self.n_cur[:wlog]                     # the slot the next cluster opens in
        # a joined cluster's id: its slot in this lap of the window, or in the previous lap
        # for a slot not reopened since (slot >= r)
        cid = Signal(len(self.n_cur))
        m.d.comb += cid.eq(Mux(join, Cat(best_key[:wlog], Mux(best_key[wlog],
                                                              self.n_cur[wlog:],
                                                              self.n_hi_m1)), self.n_cur))
        new_count = Signal(self._count_bits)
        m.d.comb += new_count.eq(Mux(join, Mux(fin.count == cmax, cmax, fin.count + 1), 1))
        best_dist = Signal(len(fin.rank.dist))
        m.d.comb += best_dist.eq(fin.rank.dist)
        o = self.beat
        m.d.comb += [o.token.eq(self.token), o.cluster.eq(cid), o.opened.eq(~join),
                     o.distance.eq(Mux(fin.rank.elig, best_dist, self._n_hp + 1)),
                     o.count.eq(new_count), o.layer.eq(cur.layer), o.first.eq(cur.first),
                     o.last.eq(cur.last)]
        slot_w = Signal(wlog)
        m.d.comb += slot_w.eq(Mux(join, best_key[:wlog], r))
        if rlog:
            # (both parts registered: best's with best, the next opening's a cycle after the
            # token's start)
            r_row0 = Signal()
            m.d.sync += r_row0.eq(r[lane_log:] == 0)
            m.d.comb += self.row0.eq(Mux(join, b.row0, r_row0))
        else:
            m.d.comb += self.row0.eq(1)
        # the lane written (one-hot) from registers: best's, registered with it, or the next
        # opening's, registered a cycle after the token's start (as r_row0)
        r_lanes = Signal(N)
        m.d.sync += r_lanes.eq(Const(1, N) << (r[:lane_log] if lane_log else 0))
        w = self.w
        m.d.comb += [w.valid.eq(self.commit),
                     w.addr.eq(Cat(slot_w[lane_log:], cur.layer[:layer_log])),
                     w.entry.hash.eq(cur.hash), w.entry.step.eq(cur.step),
                     w.entry.count.eq(new_count),
                     w.en.eq(Mux(join, b.lanes, r_lanes)),
                     w.ken.eq(Mux(join, 0, r_lanes))]
        return m
