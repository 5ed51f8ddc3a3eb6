"""The HCU's lanes: each entry of a row compared with the token's hash (p1 -> p2 -> s2)."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ...lib import reduce_tree
from .signatures import LanesSignature, RowSignature

__all__ = ["HcuLanes", "popcount"]


def popcount(m: Module, v, name: str, levels: int | None = None):
    """A balanced adder tree over the bits of ``v`` (each level one bit wider); with
    ``levels``, the partial sums after that many levels (:func:`reduce_tree`)."""
    return reduce_tree(m, [v[i] for i in range(len(v))], lambda a, b: a + b, name,
                       levels=levels)


class HcuLanes(wiring.Component):
    """Per lane of ``i_row``: the XOR-popcount of the entry's hash with the token's, the
    entry's eligibility (a slot the layer has opened, at most ``max_age`` steps old when
    ``age_limit``) and its rank, on ``o_lanes``.

    Latency: two cycles (p2: the popcount's first half and the eligibility; s2: the
    distance, the popcount's adder ending in the register, whose synchronous reset is the
    eligibility). Throughput: a row a cycle. The token's fields (``hash``, ``step``, the
    layer's clusters ``n_cur``, the next opening ``r``) hold while its rows pass."""

    def __init__(self, *, entry, lane, lanes: int, window: int, n_hp: int, step_bits: int,
                 id_bits: int, beat_bits: int):
        self._lanes, self._window, self._n_hp = lanes, window, n_hp
        self._wlog, self._rlog = (window - 1).bit_length(), (window // lanes - 1).bit_length()
        super().__init__({
            "i_row": In(RowSignature(entry, lanes, beat_bits)),
            "hash": In(n_hp), "step": In(step_bits), "n_cur": In(id_bits),
            "r": In(self._wlog), "oldest_age": In(step_bits), "age_on": In(1),
            "o_lanes": Out(LanesSignature(lane, lanes)),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        row, o = self.i_row, self.o_lanes
        wlog, rlog, lane_log = self._wlog, self._rlog, (self._lanes - 1).bit_length()
        levels = ceil_log2(self._n_hp)
        p2_valid = Signal()
        m.d.sync += [p2_valid.eq(row.valid), o.valid.eq(p2_valid)]
        m.d.comb += self.busy.eq(p2_valid | o.valid)
        # age <= max_age as one compare of the entry's step: step >= step - max_age (every
        # entry is young when step <= max_age, or without an age limit), both registered a
        # cycle after the token's start, before its first row reaches p1
        young_all, oldest = Signal(), Signal(len(self.step))
        m.d.sync += [young_all.eq(~self.age_on | (self.step <= self.oldest_age)),
                     oldest.eq(self.step - self.oldest_age)]
        for j in range(self._lanes):
            e = row.row[j]
            slot = Signal(wlog, name=f"p1_slot_{j}")
            m.d.comb += slot.eq(Cat(Const(j, lane_log), row.beat[:rlog]))
            # a slot opened after the next one (a one-row window's last lane never is: a
            # constant compare there is a lint error)
            newer = slot < self.r if rlog or j < self._window - 1 else Const(0, 1)
            parts = popcount(m, e.hash ^ self.hash, f"p1_pop_{j}", levels=(levels + 1) // 2)
            p2_parts = [Signal(v.shape(), name=f"p2_pop_{j}_{k}") for k, v in enumerate(parts)]
            elig = Signal(name=f"p2_elig_{j}")
            p2_key = Signal(wlog + 1, name=f"p2_key_{j}")
            p2_count = Signal(len(e.count), name=f"p2_count_{j}")
            with m.If(row.valid):
                m.d.sync += [*(r.eq(v) for r, v in zip(p2_parts, parts)),
                             # (slot < window <= n_cur when full)
                             elig.eq((slot < self.n_cur) & (young_all | (e.step >= oldest))),
                             p2_key.eq(Cat(slot, newer)), p2_count.eq(e.count)]
            dist = reduce_tree(m, p2_parts, lambda a, b: a + b, f"p2_pop_{j}")
            # (every cycle, without an enable: the lanes are read only with o.valid; an
            # ineligible lane's slot may never have been written: its distance is forced to 0
            # so that no compare sees its contents)
            s2 = o.lanes[j]
            m.d.sync += [s2.rank.elig.eq(elig), s2.rank.dist.eq(Mux(elig, dist, 0)),
                         s2.rank.key.eq(p2_key), s2.count.eq(p2_count)]
        return m
