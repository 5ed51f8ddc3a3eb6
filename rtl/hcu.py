"""DRE hash-cluster unit (HCU): Hamming clustering of new-token hashes, bit-exact with the
golden model (``golden.resv.HashClusterer``, DESIGN.md D3 and D4)."""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from .checks import check_pos_int, check_pow2

__all__ = ["HashClusterUnit", "popcount"]


def popcount(m: Module, v, name: str):
    """A balanced adder tree over the bits of ``v``."""
    terms = [v[i] for i in range(len(v))]
    level = 0
    while len(terms) > 1:
        nxt = []
        for j in range(0, len(terms) - 1, 2):
            s = Signal(range(len(v) + 1), name=f"{name}_l{level}_{j // 2}")
            m.d.comb += s.eq(terms[j] + terms[j + 1])
            nxt.append(s)
        if len(terms) % 2:
            nxt.append(terms[-1])
        terms = nxt
        level += 1
    return terms[0]


class HashClusterUnit(wiring.Component):
    """Hamming clustering of a stream of hash words, one layer context per token.

    Computes, for every hash on ``i``, what ``golden.resv.HashClusterer.assign`` computes: the
    minimum Hamming distance to the ``window`` most recently opened clusters of the token's
    layer that are at most ``max_age`` steps old (``age_limit`` = 0: no limit), ties to the
    most recently opened; the token joins that cluster if the distance is ``< th_hd``, else it
    opens a cluster whose hash is its own (the oldest cluster of a full window falls out). It
    emits one beat on ``o`` per token: the token's index in its frame (``first`` restarts it),
    the cluster id, ``opened``, the distance (``n_hp + 1`` when no cluster was eligible) and the
    cluster's new member count, which is also the HC-table update ``(cluster, count)`` the KV
    manager consumes. Counts saturate at ``2**count_bits - 1``; ages are taken modulo
    ``2**step_bits`` steps.

    Per-layer context: the windows of all ``layers`` layers live in one on-chip memory, a
    row of ``lanes`` entries (hash, opening step, count) per address, ``window / lanes`` rows
    per layer, and a cluster counter per layer. A layer switch costs nothing, and the window is
    read in full for every token anyway; swapping windows through a stream instead would add
    ``window · entry`` bits of traffic and a stall at every switch. For models with more layers
    than contexts the host runs the unit once per group of layers (reset clears every window).

    Pipeline: a token is taken into a one-token buffer while the previous one is processed.
    The scan reads one row per cycle (``lanes`` comparisons); s2 registers each lane's rank
    ``{eligible, ~distance, recency}`` (one unsigned compare orders candidates by D4); a tree
    over (rank, lane), split by a register (s2b), reduces the row to its winner (s3); the
    decision merges s3 into the running best combinationally. The decision cycle also reads
    the next token's first row, with the entry the decision writes forwarded into it, so the
    split costs no cycle: with ``o`` ready and the next token waiting, a token
    whose layer holds n clusters takes ``cycles_per_token(n) = max(1, ceil(min(n, window) /
    lanes)) + latency`` cycles (``latency`` = 3), and a full 1024-entry, 16-lane window
    compares at 64/67 = 95.5% of the lanes' peak.

    Performance counters (``perf``): cycles busy, cycles stalled on ``o``, comparisons made
    (window entries scanned), clusters opened, tokens joined.
    """

    def __init__(self, *, n_hp: int = 32, lanes: int = 16, window: int = 1024, layers: int = 1,
                 count_bits: int = 16, step_bits: int = 16, id_bits: int = 32,
                 token_bits: int = 16, counter_bits: int = 32):
        for name, v in (("n_hp", n_hp), ("layers", layers), ("count_bits", count_bits),
                        ("step_bits", step_bits), ("id_bits", id_bits),
                        ("token_bits", token_bits), ("counter_bits", counter_bits)):
            check_pos_int(name, v)
        if n_hp > 64:
            raise ValueError(f"n_hp must be at most 64, not {n_hp!r}")
        check_pow2("lanes", lanes)
        check_pow2("window", window)
        if window < lanes:
            raise ValueError(f"window must be at least lanes ({lanes}), not {window!r}")
        if id_bits <= exact_log2(window):
            raise ValueError(f"id_bits must exceed log2(window) ({exact_log2(window)}), "
                             f"not {id_bits!r}")
        self._n_hp, self._lanes, self._window, self._layers = n_hp, lanes, window, layers
        self._count_bits, self._step_bits, self._id_bits = count_bits, step_bits, id_bits
        self._token_bits, self._counter_bits = token_bits, counter_bits
        dist_bits = ceil_log2(n_hp + 2)
        layer_bits = max(1, ceil_log2(layers))
        self.entry_layout = data.StructLayout({"hash": n_hp, "step": step_bits,
                                               "count": count_bits})
        self.in_layout = data.StructLayout({"hash": n_hp, "layer": layer_bits,
                                            "step": step_bits, "first": 1, "last": 1})
        self.out_layout = data.StructLayout({"token": token_bits, "cluster": id_bits,
                                             "opened": 1, "distance": dist_bits,
                                             "count": count_bits, "layer": layer_bits,
                                             "first": 1, "last": 1})
        self.perf_layout = data.StructLayout({n: counter_bits for n in
                                              ("busy", "stalled", "comparisons", "opened",
                                               "joined")})
        super().__init__({
            "i": In(stream.Signature(self.in_layout)),
            "o": Out(stream.Signature(self.out_layout)),
            "th_hd": In(dist_bits),
            "max_age": In(step_bits),
            "age_limit": In(1),
            "perf": Out(self.perf_layout),
        })

    n_hp = property(lambda self: self._n_hp)
    lanes = property(lambda self: self._lanes)
    window = property(lambda self: self._window)
    layers = property(lambda self: self._layers)
    count_bits = property(lambda self: self._count_bits)
    step_bits = property(lambda self: self._step_bits)
    id_bits = property(lambda self: self._id_bits)

    @property
    def memory_bits(self) -> int:
        return self._layers * self._window * self.entry_layout.size

    def cycles_per_token(self, n_clusters: int) -> int:
        """Cycles from a token's start to the next token's start, ``o`` ready and the next
        token waiting, for a layer holding ``n_clusters``: ``max(1, ceil(min(n, window) /
        lanes)) + 3`` (row 0 is always read)."""
        beats = -(-min(n_clusters, self._window) // self._lanes)
        return max(1, beats) + self.latency

    @property
    def latency(self) -> int:
        """Cycles from a token's last row read to its output beat, and the pipeline depth."""
        return 3

    @classmethod
    def from_config(cls, cfg, *, layers: int | None = None, **kw) -> "HashClusterUnit":
        return cls(n_hp=cfg.n_hp, lanes=cfg.hcu_lanes, window=cfg.window,
                   layers=cfg.n_layers if layers is None else layers,
                   count_bits=cfg.count_bits, **kw)

    def elaborate(self, platform):
        m = Module()
        N, W, Lh = self._lanes, self._window, self._layers
        rows = W // N
        wlog, rlog = exact_log2(W), exact_log2(rows)
        none_dist = self._n_hp + 1
        cmax = (1 << self._count_bits) - 1

        m.submodules.mem = mem = memory.Memory(
            shape=data.ArrayLayout(self.entry_layout, N), depth=Lh * rows, init=[])
        wr = mem.write_port(granularity=1)
        rd = mem.read_port()

        n_open = Array(Signal(self._id_bits, name=f"n_open_{l}") for l in range(Lh))

        # the one-token input buffer and the token being processed
        nxt = Signal(self.in_layout)
        nxt_valid = Signal()
        cur = Signal(self.in_layout)
        token = Signal(self._token_bits, init=(1 << self._token_bits) - 1)   # +1 gives 0
        m.d.comb += self.i.ready.eq(~nxt_valid)
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [nxt.eq(self.i.payload), nxt_valid.eq(1)]

        n_cur = Signal(self._id_bits)
        m.d.comb += n_cur.eq(n_open[cur.layer])
        full = Signal()
        m.d.comb += full.eq(n_cur >= W)
        n_valid = Signal(range(W + 1))
        m.d.comb += n_valid.eq(Mux(full, W, n_cur))
        r = Signal(wlog)                          # slot the next cluster opens in
        m.d.comb += r.eq(n_cur[:wlog])
        beats = Signal(range(rows + 1))
        m.d.comb += beats.eq((n_valid + N - 1) >> exact_log2(N))

        # scan: s0 issues a row read; s1 ranks each lane of the row (registered as s2); a tree
        # reduces s2 to the row's winner (registered as s3); the decision merges s3 into best
        beat = Signal(range(rows + 1))
        issue = Signal()
        s1_valid = Signal()
        s1_beat = Signal(rlog if rlog else 1)
        # a lane's rank orders candidates in one unsigned compare: eligible first, then the
        # smaller distance (stored inverted), then the more recent slot (the tie rule of D4)
        dist_bits = ceil_log2(self._n_hp + 2)
        rank_t = data.StructLayout({"key": wlog + 1, "ndist": dist_bits, "elig": 1})
        lane_t = data.StructLayout({"rank": rank_t, "entry": self.entry_layout})
        s2_valid = Signal()
        s2 = [Signal(lane_t, name=f"s2_lane_{j}") for j in range(N)]
        best = Signal(lane_t)

        lane_log, layer_log = exact_log2(N), ceil_log2(Lh)
        spec = Signal()            # the decision cycle also reads the buffered token's row 0
        rd_row = Signal.like(beat)
        m.d.comb += [rd_row.eq(Mux(spec, 0, beat)),
                     rd.addr.eq(Mux(spec, Cat(Const(0, rlog), nxt.layer[:layer_log]),
                                    Cat(beat[:rlog], cur.layer[:layer_log])))]
        m.d.sync += [s1_valid.eq(issue), s1_beat.eq(rd_row)]

        # The decision cycle reads the next token's row 0 while it writes one entry: if that
        # entry is in the row read, s1 takes it from a bypass register instead of the memory
        # (a transparent read port would keep the memory out of block RAM on FPGAs).
        fwd_hit = Signal()
        fwd_en = Signal(N)
        fwd_entry = Signal(self.entry_layout)
        m.d.sync += [fwd_hit.eq(spec & wr.en.any() & (wr.addr == rd.addr)),
                     fwd_en.eq(wr.en), fwd_entry.eq(wr.data[0])]

        # s1: XOR-popcount and eligibility per lane, from the row read last cycle
        for j in range(N):
            e = Signal(self.entry_layout, name=f"s1_entry_{j}")
            m.d.comb += e.eq(Mux(fwd_hit & fwd_en[j], fwd_entry, rd.data[j]))
            slot = Signal(wlog, name=f"s1_slot_{j}")
            m.d.comb += slot.eq(Cat(Const(j, lane_log), s1_beat[:rlog]))
            in_window = Signal(name=f"s1_in_{j}")
            m.d.comb += in_window.eq(slot < n_cur)          # slot < window <= n_cur when full
            age = Signal(self._step_bits, name=f"s1_age_{j}")
            m.d.comb += age.eq(cur.step - e.step)
            young = Signal(name=f"s1_young_{j}")
            m.d.comb += young.eq(~self.age_limit | (age <= self.max_age))
            dist = popcount(m, e.hash ^ cur.hash, f"s1_pop_{j}")
            with m.If(s1_valid):
                m.d.sync += [s2[j].rank.elig.eq(in_window & young), s2[j].rank.ndist.eq(~dist),
                             s2[j].rank.key.eq(Cat(slot, slot < r)), s2[j].entry.eq(e)]
        m.d.sync += s2_valid.eq(s1_valid)

        # the tree carries (rank, lane) through its first half; a register (s2b) splits it,
        # holding each group's winner with its entry; the second half muxes whole lanes into s3
        lane_bits = max(1, exact_log2(N))
        first = exact_log2(N) // 2
        group = 1 << first
        nodes = [(s2[j].rank.as_value(), Const(j % group, max(1, first))) for j in range(N)]
        level = 0
        for _ in range(first):
            nxt_nodes = []
            for j in range(0, len(nodes), 2):
                (ra, la), (rb, lb) = nodes[j], nodes[j + 1]
                rw = Signal(rank_t.size, name=f"s2_rank_l{level}_{j // 2}")
                lw = Signal(max(1, first), name=f"s2_lane_l{level}_{j // 2}")
                take_b = rb > ra
                m.d.comb += [rw.eq(Mux(take_b, rb, ra)), lw.eq(Mux(take_b, lb, la))]
                nxt_nodes.append((rw, lw))
            nodes = nxt_nodes
            level += 1
        s2b_valid = Signal()
        m.d.sync += s2b_valid.eq(s2_valid)
        s2b = [Signal(lane_t, name=f"s2b_node_{g}") for g in range(len(nodes))]
        for g, (rk, ln) in enumerate(nodes):
            members = Array(s2[g * group + t].entry for t in range(group))
            with m.If(s2_valid):
                m.d.sync += [s2b[g].rank.eq(rk), s2b[g].entry.eq(members[ln[:first]] if first
                                                               else s2[g].entry)]
        whole = list(s2b)
        level = 0
        while len(whole) > 1:
            nxt_nodes = []
            for j in range(0, len(whole), 2):
                a_, b_ = whole[j], whole[j + 1]
                w_ = Signal(lane_t, name=f"s2b_red_l{level}_{j // 2}")
                m.d.comb += w_.eq(Mux(b_.rank.as_value() > a_.rank.as_value(), b_, a_))
                nxt_nodes.append(w_)
            whole = nxt_nodes
            level += 1
        # s3 registers the row's winner; the decision reads merge(s3, best) in the cycle the
        # last row sits in s3, so that stage costs no cycle per token
        s3_valid = Signal()
        s3 = Signal(lane_t)
        m.d.sync += s3_valid.eq(s2b_valid)
        with m.If(s2b_valid):
            m.d.sync += s3.eq(whole[0])
        fin = Signal(lane_t)
        m.d.comb += fin.eq(Mux(s3_valid & (s3.rank.as_value() > best.rank.as_value()), s3, best))
        with m.If(s3_valid):
            m.d.sync += best.eq(fin)

        # the decision
        best_elig, best_key = fin.rank.elig, fin.rank.key
        best_dist = Signal(dist_bits)
        m.d.comb += best_dist.eq(~fin.rank.ndist)
        join = Signal()
        m.d.comb += join.eq(best_elig & (best_dist < self.th_hd))
        base = Signal(self._id_bits)
        m.d.comb += base.eq(Cat(Const(0, wlog), n_cur[wlog:]))
        cid = Signal(self._id_bits)
        m.d.comb += cid.eq(Mux(join, Mux(best_key[wlog], base + best_key[:wlog],
                                          base - W + best_key[:wlog]), n_cur))
        new_count = Signal(self._count_bits)
        m.d.comb += new_count.eq(Mux(join, Mux(fin.entry.count == cmax, cmax,
                                               fin.entry.count + 1), 1))
        m.d.comb += [
            self.o.payload.token.eq(token), self.o.payload.cluster.eq(cid),
            self.o.payload.opened.eq(~join),
            self.o.payload.distance.eq(Mux(best_elig, best_dist, none_dist)),
            self.o.payload.count.eq(new_count), self.o.payload.layer.eq(cur.layer),
            self.o.payload.first.eq(cur.first), self.o.payload.last.eq(cur.last),
        ]
        slot_w = Signal(wlog)
        m.d.comb += slot_w.eq(Mux(join, best_key[:wlog], r))
        new_entry = Signal(self.entry_layout)
        m.d.comb += [new_entry.hash.eq(Mux(join, fin.entry.hash, cur.hash)),
                     new_entry.step.eq(Mux(join, fin.entry.step, cur.step)),
                     new_entry.count.eq(new_count)]
        m.d.comb += wr.addr.eq(Cat(slot_w[lane_log:], cur.layer[:layer_log]))
        for j in range(N):
            m.d.comb += wr.data[j].eq(new_entry)

        perf = self.perf
        commit = Signal()

        def start_next(read_row0: bool):
            """Take the buffered token as the current one (issuing its row 0 now if asked),
            or go idle."""
            with m.If(nxt_valid):
                m.d.sync += [cur.eq(nxt), nxt_valid.eq(0), best.rank.eq(0),
                             token.eq(Mux(nxt.first, 0, token + 1))]
                if read_row0:
                    m.d.comb += [spec.eq(1), issue.eq(1)]
                    m.d.sync += beat.eq(1)
                else:
                    m.d.sync += beat.eq(0)
                m.next = "SCAN"
            with m.Else():
                m.next = "IDLE"

        with m.FSM():
            with m.State("IDLE"):
                start_next(read_row0=False)
            with m.State("SCAN"):
                m.d.sync += perf.busy.eq(perf.busy + 1)
                with m.If(beat < beats):
                    m.d.comb += issue.eq(1)
                    m.d.sync += beat.eq(beat + 1)
                with m.Else():
                    m.next = "DECIDE"
            with m.State("DECIDE"):
                m.d.sync += perf.busy.eq(perf.busy + 1)
                drained = ~s1_valid & ~s2_valid & ~s2b_valid    # s3 merges combinationally
                m.d.comb += self.o.valid.eq(drained)
                with m.If(drained & ~self.o.ready):
                    m.d.sync += perf.stalled.eq(perf.stalled + 1)
                with m.If(drained & self.o.ready):
                    m.d.comb += commit.eq(1)
                    start_next(read_row0=True)
        with m.If(commit):
            m.d.comb += wr.en.eq(Const(1, N) << slot_w[:lane_log])
            m.d.sync += perf.comparisons.eq(perf.comparisons + n_valid)
            with m.If(join):
                m.d.sync += perf.joined.eq(perf.joined + 1)
            with m.Else():
                m.d.sync += [perf.opened.eq(perf.opened + 1), n_open[cur.layer].eq(n_cur + 1)]
        return m
