"""The HCU's reduction: a row's lanes to the row's winner, and the rows' winners to the
token's (s2 -> s2a -> s2b -> s3 -> best)."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .signatures import BestSignature, LanesSignature

__all__ = ["HcuTournament", "wins"]


def wins(a, b):
    """Whether candidate ``a`` outranks ``b``, ``a`` scanned before ``b`` (a lower slot): the
    unsigned compare of the ranks ``{key, ~distance, eligible}``, where the keys ``{slot,
    newer}`` need only the newer bits, since slots grow in scan order and a slot scanned later
    is newer only if the earlier one is (slots below the next opening are the newer ones):
    ``a`` wins with a higher ``{eligible, ~distance}`` or, equal there, by being newer than
    ``b``; that is ``{eligible, ~distance, newer}`` of ``a`` above ``b``'s, one 8-bit compare
    (one carry chain, nothing after it) where the whole rank takes 18."""
    return (Cat(a.rank.key[-1], ~a.rank.dist, a.rank.elig) >
            Cat(b.rank.key[-1], ~b.rank.dist, b.rank.elig))


def compare_all(m, cands, name):
    """Every pair of ``cands`` (in scan order) compared once: ``{(i, k): i wins}``, i < k."""
    gt = {}
    for i in range(len(cands)):
        for k in range(i + 1, len(cands)):
            gt[i, k] = Signal(name=f"{name}_{i}_{k}")
            m.d.comb += gt[i, k].eq(wins(cands[i], cands[k]))
    return gt


def select(m, cands, gt, name, wins_out=None):
    """The candidate that wins against every other, by the compares ``gt``
    (:func:`compare_all`), selected one-hot (the one-hot flags appended to ``wins_out``)."""
    if len(cands) == 1:
        if wins_out is not None:
            wins_out.append(Const(1))
        return cands[0]
    n = len(cands)
    out = Signal.like(cands[0], name=name)
    terms = []
    for i in range(n):
        win = Signal(name=f"{name}_win_{i}")
        beats = [gt[i, k] if i < k else ~gt[k, i] for k in range(n) if k != i]
        m.d.comb += win.eq(Cat(*beats).all())
        if wins_out is not None:
            wins_out.append(win)
        terms.append(Mux(win, cands[i].as_value(), 0))
    acc = terms[0]
    for t in terms[1:]:
        acc = acc | t
    m.d.comb += out.eq(acc)
    return out


class HcuTournament(wiring.Component):
    """The winner of every row of ``i_lanes`` merged into ``o_best.best``, the token's winner
    so far.

    Two all-pairs tournaments (every pair of a group compared at once, the winner the one
    that beats all others: one compare deep, where a binary tree is log2(group) compares
    deep): groups of 2^ceil(log2(lanes) / 2) lanes, then the groups' winners; registers split
    each between its compares and its selection (s2a: the lanes and their groups' compares;
    s2b: the groups' winners and their compares; s3: the row's winner). Latency: a row's
    winner is in ``best`` four cycles after the row is on ``i_lanes`` (s2a, s2b, s3, best).
    Throughput: a row a cycle. ``start`` (a token starts) empties ``best`` (the token opens a
    cluster unless a row's winner joins one) and ``fresh``, a cycle later, makes the next
    row's winner take it."""

    def __init__(self, *, lane, lanes: int, layers: int, window: int, dist_bits: int,
                 layer_bits: int, count_bits: int):
        self._lanes, self._layers = lanes, layers
        self._wlog = (window - 1).bit_length()
        super().__init__({
            "i_lanes": In(LanesSignature(lane, lanes)),
            "join_below": In(dist_bits), "cap": In(count_bits),
            "start": In(1), "start_layer": In(layer_bits), "fresh": In(1),
            "layer": In(layer_bits),
            "o_best": Out(BestSignature(lane, lanes, layers)),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        N, s2, lane = self._lanes, list(self.i_lanes.lanes), self.i_lanes.lanes.shape().elem_shape
        group = 1 << (((N - 1).bit_length() + 1) // 2)
        n_groups = N // group
        s2a_valid, s2b_valid = Signal(), Signal()
        m.d.sync += [s2a_valid.eq(self.i_lanes.valid), s2b_valid.eq(s2a_valid)]
        m.d.comb += self.busy.eq(s2a_valid | s2b_valid)
        s2a = [Signal(lane, name=f"s2a_lane_{j}") for j in range(N)]
        groups = [s2a[g * group:(g + 1) * group] for g in range(n_groups)]
        cross = self._cross(m, s2, group, n_groups)
        gts = []
        for g in range(n_groups):
            gt = compare_all(m, s2[g * group:(g + 1) * group], f"s2_gt_{g}")
            gt_r = {k: Signal(name=f"s2a_gt_{g}_{k[0]}_{k[1]}") for k in gt}
            with m.If(self.i_lanes.valid):
                m.d.sync += [*(gt_r[k].eq(v) for k, v in gt.items()),
                             *(a.eq(b) for a, b in zip(groups[g], s2[g * group:]))]
                # whether the lane's cluster is close enough to join, beside the compares
                m.d.sync += [a.joins.eq(b.rank.elig & (b.rank.dist < self.join_below))
                             for a, b in zip(groups[g], s2[g * group:])]
            gts.append(gt_r)
        s2b = [Signal(lane, name=f"s2b_node_{g}") for g in range(n_groups)]
        lane_wins = [[] for _ in range(n_groups)]
        picks = [select(m, groups[g], gts[g], f"s2a_pick_{g}", lane_wins[g])
                 for g in range(n_groups)]
        gt2 = {}
        for g in range(n_groups):
            for h in range(g + 1, n_groups):
                gt2[g, h] = Cat(*[lane_wins[g][a - g * group] & lane_wins[h][b - h * group]
                                  & cross[a, b]
                                  for a in range(g * group, (g + 1) * group)
                                  for b in range(h * group, (h + 1) * group)]).any()
        gt2_r = {k: Signal(name=f"s2b_gt_{k[0]}_{k[1]}") for k in gt2}
        with m.If(s2a_valid):
            m.d.sync += [*(a.eq(b) for a, b in zip(s2b, picks)),
                         *(gt2_r[k].eq(v) for k, v in gt2.items())]
        winner_is = []
        winner = select(m, s2b, gt2_r, "s2b_pick", winner_is)
        self._merge(m, s2b, winner, winner_is, s2b_valid)
        return m

    def _cross(self, m, s2, group, n_groups):
        """The groups' winners' compares are looked up, not made: every pair of lanes in two
        different groups is compared in s2 (registered in s2a), and in s2a the pair of the
        two groups' winners picks its result (no compare after the selection)."""
        cross = {}
        for g in range(n_groups):
            for h in range(g + 1, n_groups):
                for a in range(g * group, (g + 1) * group):
                    for b in range(h * group, (h + 1) * group):
                        cross[a, b] = Signal(name=f"s2a_x_{a}_{b}")
                        with m.If(self.i_lanes.valid):
                            m.d.sync += cross[a, b].eq(wins(s2[a], s2[b]))
        return cross

    def _merge(self, m, s2b, winner, winner_is, s2b_valid):
        """s3 registers the row's winner; best, the token's winner so far, takes it a cycle
        later. That compare is looked up, not made: in s2b, each group's winner is compared
        with best and with s3 as they are then, and the row winner's two results registered
        beside s3; best is, a cycle later, the best of then (no merge), s3 of then (it
        merged) or empty (a token started: s3 wins)."""
        o, N, lane_log, wlog = self.o_best, self._lanes, (self._lanes - 1).bit_length(), self._wlog
        s3_valid, s3 = Signal(), Signal.like(o.best)
        m.d.sync += s3_valid.eq(s2b_valid)
        with m.If(s2b_valid):
            m.d.sync += s3.eq(winner)
        beats_best, beats_s3 = Signal(), Signal()     # best (s3) of then wins over s3

        def row_winner_loses_to(ref):
            return Cat(*[w & wins(ref, c) for w, c in zip(winner_is, s2b)]).any()
        m.d.sync += [beats_best.eq(row_winner_loses_to(o.best)),
                     beats_s3.eq(row_winner_loses_to(s3))]
        merged, take = Signal(), Signal()
        m.d.comb += take.eq(s3_valid & (self.fresh | ~Mux(merged, beats_s3, beats_best)))
        m.d.sync += merged.eq(take)
        # whether the token joins best's cluster, registered with it: close enough, and (with
        # a cap) the cluster not yet full, one compare of the row winner's count
        with m.If(take):
            joins = s3.joins & ((self.cap == 0) | (s3.count < self.cap))
            m.d.sync += [o.best.eq(s3), o.join.eq(joins),
                         o.row0.eq(s3.rank.key[lane_log:wlog] == 0),
                         o.lanes.eq(Const(1, N) << (s3.rank.key[:lane_log] if lane_log else 0)),
                         *(o.opens[l].eq(~joins & (self.layer == l))
                           for l in range(self._layers))]
        # a token's start: best and the decision as for a token that sees no cluster (it
        # opens one, in its layer)
        with m.If(self.start):
            m.d.sync += [*(o.opens[l].eq(self.start_layer == l) for l in range(self._layers)),
                         o.best.rank.eq(0), o.join.eq(0)]
