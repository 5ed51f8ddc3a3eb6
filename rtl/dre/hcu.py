"""DRE hash-cluster unit (HCU): Hamming clustering of new-token hashes, bit-exact with the
golden block model (``golden.hcu.hcu_reference``, DESIGN.md D3 and D4)."""

from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from vrex.rules import hcu_rules

from ..lib import counter_layout, reduce_tree

__all__ = ["HashClusterUnit", "popcount"]


def popcount(m: Module, v, name: str):
    """A balanced adder tree over the bits of ``v``."""
    return reduce_tree(m, [v[i] for i in range(len(v))], lambda a, b: a + b, name,
                       shape=range(len(v) + 1))


class HashClusterUnit(wiring.Component):
    """Hamming clustering of a stream of hash words, one layer context per token.

    Computes, for every hash on ``i``, what ``golden.hcu.hcu_reference`` computes (``golden.resv.HashClusterer`` per token): the
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
    than contexts a context is moved through memory at a layer switch (``i_ctx``: ``SAVE``
    streams its image out on ``o_ctx``, a header word (clusters opened, last step) and the
    ``min(opened, window)`` entries in slot order; ``LOAD`` takes one in on ``i_ctxd``;
    ``FLUSH`` empties it), between tokens; clustering continues exactly as if the layer had
    stayed on chip.

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

    Parameters (keyword-only, all required; :meth:`from_config` takes them from the build's
    ``Config``; checked by ``vrex.rules.hcu_rules`` with exact messages)
        ``n_hp`` hash bits (1-64); ``lanes`` comparisons per cycle (a power of two);
        ``window`` clusters compared per layer (a power of two, at least ``lanes``);
        ``layers`` layer contexts on chip; ``count_bits``, ``step_bits``, ``id_bits`` (more
        than log2(window)), ``token_bits`` field widths; ``counter_bits`` counter width.

    Attributes
        ``i`` (in stream: ``hash``, ``layer``, ``step``, ``first``, ``last``); ``o`` (out
        stream: ``token``, ``cluster``, ``opened``, ``distance``, ``count``, ``layer``,
        ``first``, ``last``); ``th_hd``, ``max_age``, ``age_limit`` run-time registers
        (``Config.block_registers("hcu")``), taken with each run's ``first`` token; ``perf`` counters: cycles ``busy``, cycles
        ``stalled`` on ``o``, ``comparisons`` made (window entries scanned), clusters
        ``opened``, tokens ``joined``.

    Timing: :attr:`latency`, :meth:`cycles_per_token`.
    """

    PERF = ("busy", "stalled", "comparisons", "opened", "joined", "refused")

    # context commands on ``i_ctx`` (``op``)
    SAVE, LOAD, FLUSH = 0, 1, 2

    # the window memory's contents at power-up: none (zero in simulation). Tests set random
    # words here (an instance attribute, before elaboration) to show that nothing the unit
    # computes depends on a slot it has not written: an ineligible lane's distance is forced
    # to 0, so stale or undefined contents never reach a compare (in a 4-state simulator an
    # unwritten slot is X).
    window_init = ()

    def __init__(self, *, n_hp: int, lanes: int, window: int, layers: int, count_bits: int,
                 step_bits: int, id_bits: int, token_bits: int, counter_bits: int):
        hcu_rules(n_hp=n_hp, lanes=lanes, window=window, layers=layers, count_bits=count_bits,
                  step_bits=step_bits, id_bits=id_bits, token_bits=token_bits,
                  counter_bits=counter_bits)
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
        self.perf_layout = counter_layout(self.PERF, counter_bits)
        # a layer's context image: a header word (clusters opened, last step) then the
        # window's min(opened, window) entries in slot order, one a word
        self.ctx_layout = data.StructLayout({"op": 2, "layer": layer_bits})
        self.header_layout = data.StructLayout({"n_open": id_bits, "last_step": step_bits})
        self.ctx_bits = max(self.entry_layout.size, self.header_layout.size)
        super().__init__({
            "i": In(stream.Signature(self.in_layout)),
            "o": Out(stream.Signature(self.out_layout)),
            "i_ctx": In(stream.Signature(self.ctx_layout)),
            "o_ctx": Out(stream.Signature(self.ctx_bits)),
            "i_ctxd": In(stream.Signature(self.ctx_bits)),
            "th_hd": In(dist_bits),
            "max_age": In(step_bits),
            "age_limit": In(1),
            "error": Out(1),
            "error_code": Out(2),
            "perf": Out(self.perf_layout),
        })

    @classmethod
    def from_config(cls, cfg) -> "HashClusterUnit":
        return cls(**cfg.block_params("hcu"))

    n_hp = property(lambda self: self._n_hp)
    lanes = property(lambda self: self._lanes)
    window = property(lambda self: self._window)
    layers = property(lambda self: self._layers)
    count_bits = property(lambda self: self._count_bits)
    step_bits = property(lambda self: self._step_bits)
    id_bits = property(lambda self: self._id_bits)
    token_bits = property(lambda self: self._token_bits)

    @property
    def memory_bits(self) -> int:
        return self._layers * self._window * self.entry_layout.size

    @property
    def latency(self) -> int:
        """Cycles from a token's last row read to its output beat, and the pipeline depth."""
        return 3

    def cycles_per_token(self, n_clusters: int) -> int:
        """Cycles from a token's start to the next token's start, ``o`` ready and the next
        token waiting, for a layer holding ``n_clusters``: ``max(1, ceil(min(n, window) /
        lanes)) + latency`` (row 0 is always read)."""
        beats = -(-min(n_clusters, self._window) // self._lanes)
        return max(1, beats) + self.latency

    def elaborate(self, platform):
        m = Module()
        x = SimpleNamespace()            # the signals the sections below share
        self._input(m, x)
        self._scan(m, x)
        self._rank(m, x)
        self._reduce(m, x)
        self._decide(m, x)
        self._control(m, x)
        return m

    def _input(self, m, x):
        """The window memory, per-layer cluster counters, the one-token input buffer."""
        N, W, Lh = self._lanes, self._window, self._layers
        x.rows = W // N
        x.wlog, x.rlog = exact_log2(W), exact_log2(x.rows)
        # (at least two words: a one-word memory has a zero-width address, which the Verilog
        # backend emits as ``[-1:0]``; the second word of a one-layer, one-row window is unused)
        m.submodules.mem = mem = memory.Memory(
            shape=data.ArrayLayout(self.entry_layout, N), depth=max(2, Lh * x.rows),
            init=self.window_init)
        x.wr = mem.write_port(granularity=1)
        x.rd = mem.read_port()

        x.n_open = Array(Signal(self._id_bits, name=f"n_open_{l}") for l in range(Lh))

        # the one-token input buffer and the token being processed
        x.nxt = nxt = Signal(self.in_layout)
        x.nxt_valid = nxt_valid = Signal()
        x.cur = cur = Signal(self.in_layout)
        # the run-time registers, taken with a run's first token (and the first token after
        # reset), so a change while tokens are in flight applies from the next run on
        x.th_hd, x.max_age = Signal.like(self.th_hd), Signal.like(self.max_age)
        x.age_limit, x.regs_taken = Signal(), Signal()
        x.token = Signal(self._token_bits, init=(1 << self._token_bits) - 1)   # +1 gives 0
        x.ctx_busy = Signal()               # a context command runs: tokens wait
        m.d.comb += self.i.ready.eq(~nxt_valid & ~x.ctx_busy)
        # bad input is refused as it arrives: a layer beyond the contexts, or a step older
        # than the layer's last (steps never decrease nor wrap: docs/numerics.md §5); the
        # token is dropped (no output beat, no state change), the first error's code kept
        p = self.i.payload
        x.last_step = last_step = Array(Signal(self._step_bits, name=f"last_step_{l}")
                                        for l in range(Lh))
        bad_layer, bad_step = self._beyond(m, p.layer), Signal()
        m.d.comb += bad_step.eq(~bad_layer & (p.step < last_step[p.layer]))
        # a refusal (a token here, a context command in X_DECODE): counted, the first's code
        # kept
        x.refuse, x.refuse_code = Signal(), Signal(2)
        with m.If(x.refuse):
            m.d.sync += [self.error.eq(1), self.perf.refused.eq(self.perf.refused + 1)]
            with m.If(~self.error):
                m.d.sync += self.error_code.eq(x.refuse_code)
        with m.If(self.i.valid & self.i.ready):
            with m.If(bad_layer | bad_step):
                m.d.comb += [x.refuse.eq(1), x.refuse_code.eq(Mux(bad_layer, 1, 2))]
            with m.Else():
                m.d.sync += [nxt.eq(p), nxt_valid.eq(1), last_step[p.layer].eq(p.step)]

        x.n_cur = n_cur = Signal(self._id_bits)
        m.d.comb += n_cur.eq(x.n_open[cur.layer])
        full = Signal()
        m.d.comb += full.eq(n_cur >= W)
        x.n_valid = n_valid = Signal(range(W + 1))
        m.d.comb += n_valid.eq(Mux(full, W, n_cur))
        x.r = Signal(x.wlog)                      # slot the next cluster opens in
        m.d.comb += x.r.eq(n_cur[:x.wlog])
        x.beats = Signal(range(x.rows + 1))
        m.d.comb += x.beats.eq((n_valid + N - 1) >> exact_log2(N))

    def _scan(self, m, x):
        """s0: row reads, and the bypass of the entry the decision writes."""
        N, Lh = self._lanes, self._layers
        rlog = x.rlog
        # scan: s0 issues a row read; s1 ranks each lane of the row (registered as s2); a tree
        # reduces s2 to the row's winner (registered as s3); the decision merges s3 into best
        x.beat = beat = Signal(range(x.rows + 1))
        x.issue = Signal()
        x.s1_valid = Signal()
        x.s1_beat = Signal(rlog if rlog else 1)
        # a lane's rank orders candidates in one unsigned compare: eligible first, then the
        # smaller distance (stored inverted), then the more recent slot (the tie rule of D4)
        x.dist_bits = ceil_log2(self._n_hp + 2)
        x.rank_t = data.StructLayout({"key": x.wlog + 1, "ndist": x.dist_bits, "elig": 1})
        x.lane_t = data.StructLayout({"rank": x.rank_t, "entry": self.entry_layout})
        x.s2_valid = Signal()
        x.s2 = [Signal(x.lane_t, name=f"s2_lane_{j}") for j in range(N)]
        x.best = Signal(x.lane_t)

        x.lane_log, x.layer_log = exact_log2(N), ceil_log2(Lh)
        x.spec = spec = Signal()    # the decision cycle also reads the buffered token's row 0
        rd, wr = x.rd, x.wr
        rd_row = Signal.like(beat)
        m.d.comb += rd_row.eq(Mux(spec, 0, beat))
        if rlog + x.layer_log:           # (one layer of one row: the address is always 0)
            m.d.comb += rd.addr.eq(Mux(spec, Cat(Const(0, rlog), x.nxt.layer[:x.layer_log]),
                                       Cat(beat[:rlog], x.cur.layer[:x.layer_log])))
        m.d.sync += [x.s1_valid.eq(x.issue), x.s1_beat.eq(rd_row)]

        # The decision cycle reads the next token's row 0 while it writes one entry: if that
        # entry is in the row read, s1 takes it from a bypass register instead of the memory
        # (a transparent read port would keep the memory out of block RAM on FPGAs).
        x.fwd_hit = Signal()
        x.fwd_en = Signal(N)
        x.fwd_entry = Signal(self.entry_layout)
        m.d.sync += [x.fwd_hit.eq(spec & wr.en.any() & (wr.addr == rd.addr)),
                     x.fwd_en.eq(wr.en), x.fwd_entry.eq(wr.data[0])]

    def _rank(self, m, x):
        """s1: XOR-popcount and eligibility per lane, from the row read last cycle (into s2)."""
        for j in range(self._lanes):
            e = Signal(self.entry_layout, name=f"s1_entry_{j}")
            m.d.comb += e.eq(Mux(x.fwd_hit & x.fwd_en[j], x.fwd_entry, x.rd.data[j]))
            slot = Signal(x.wlog, name=f"s1_slot_{j}")
            m.d.comb += slot.eq(Cat(Const(j, x.lane_log), x.s1_beat[:x.rlog]))
            # a slot opened after the next one (a one-row window's last lane never is: a
            # constant compare there is a lint error)
            newer = slot < x.r if x.rlog or j < self._window - 1 else Const(0, 1)
            in_window = Signal(name=f"s1_in_{j}")
            m.d.comb += in_window.eq(slot < x.n_cur)      # slot < window <= n_cur when full
            age = Signal(self._step_bits, name=f"s1_age_{j}")
            m.d.comb += age.eq(x.cur.step - e.step)
            young = Signal(name=f"s1_young_{j}")
            m.d.comb += young.eq(~x.age_limit | (age <= x.max_age))
            dist = popcount(m, e.hash ^ x.cur.hash, f"s1_pop_{j}")
            with m.If(x.s1_valid):
                m.d.sync += [x.s2[j].rank.elig.eq(in_window & young),
                             # (an ineligible lane's slot may never have been written: its
                             # distance is forced to 0 so that no compare sees its contents)
                             x.s2[j].rank.ndist.eq(Mux(in_window & young, ~dist, 0)),
                             x.s2[j].rank.key.eq(Cat(slot, newer)), x.s2[j].entry.eq(e)]
        m.d.sync += x.s2_valid.eq(x.s1_valid)

    def _reduce(self, m, x):
        """s2 -> s2b -> s3: the row's winner, and ``fin`` = merge(s3, best)."""
        N, s2 = self._lanes, x.s2
        # the tree carries (rank, lane) through its first half; a register (s2b) splits it,
        # holding each group's winner with its entry; the second half muxes whole lanes into s3
        first = exact_log2(N) // 2
        group = 1 << first
        lw_bits = max(1, first)

        def arg_max(a, b):
            (ra, la), (rb, lb) = a, b
            take_b = rb > ra
            return Mux(take_b, rb, ra), Mux(take_b, lb, la)

        nodes = reduce_tree(m, [(s2[j].rank.as_value(), Const(j % group, lw_bits))
                                for j in range(N)], arg_max, ("s2_rank", "s2_lane"),
                            levels=first, shape=(x.rank_t.size, lw_bits))
        s2b_valid = Signal()
        m.d.sync += s2b_valid.eq(x.s2_valid)
        s2b = [Signal(x.lane_t, name=f"s2b_node_{g}") for g in range(len(nodes))]
        for g, (rk, ln) in enumerate(nodes):
            members = Array(s2[g * group + t].entry for t in range(group))
            with m.If(x.s2_valid):
                m.d.sync += [s2b[g].rank.eq(rk), s2b[g].entry.eq(members[ln[:first]] if first
                                                                 else s2[g].entry)]
        winner = reduce_tree(
            m, s2b, lambda a, b: Mux(b.rank.as_value() > a.rank.as_value(), b, a), "s2b_red",
            shape=x.lane_t)
        # s3 registers the row's winner; the decision reads merge(s3, best) in the cycle the
        # last row sits in s3, so that stage costs no cycle per token
        x.s2b_valid = s2b_valid
        x.s3_valid = s3_valid = Signal()
        s3 = Signal(x.lane_t)
        m.d.sync += s3_valid.eq(s2b_valid)
        with m.If(s2b_valid):
            m.d.sync += s3.eq(winner)
        x.fin = fin = Signal(x.lane_t)
        m.d.comb += fin.eq(Mux(s3_valid & (s3.rank.as_value() > x.best.rank.as_value()), s3,
                               x.best))
        with m.If(s3_valid):
            m.d.sync += x.best.eq(fin)

    def _decide(self, m, x):
        """Join or open; the output beat; the entry written back."""
        W, N = self._window, self._lanes
        wlog, fin, cur = x.wlog, x.fin, x.cur
        cmax = (1 << self._count_bits) - 1
        best_elig, best_key = fin.rank.elig, fin.rank.key
        best_dist = Signal(x.dist_bits)
        m.d.comb += best_dist.eq(~fin.rank.ndist)
        x.join = join = Signal()
        m.d.comb += join.eq(best_elig & (best_dist < x.th_hd))
        base = Signal(self._id_bits)
        m.d.comb += base.eq(Cat(Const(0, wlog), x.n_cur[wlog:]))
        cid = Signal(self._id_bits)
        m.d.comb += cid.eq(Mux(join, Mux(best_key[wlog], base + best_key[:wlog],
                                          base - W + best_key[:wlog]), x.n_cur))
        new_count = Signal(self._count_bits)
        m.d.comb += new_count.eq(Mux(join, Mux(fin.entry.count == cmax, cmax,
                                               fin.entry.count + 1), 1))
        m.d.comb += [
            self.o.payload.token.eq(x.token),
            self.o.payload.cluster.eq(cid),
            self.o.payload.opened.eq(~join),
            self.o.payload.distance.eq(Mux(best_elig, best_dist, self._n_hp + 1)),
            self.o.payload.count.eq(new_count),
            self.o.payload.layer.eq(cur.layer),
            self.o.payload.first.eq(cur.first),
            self.o.payload.last.eq(cur.last),
        ]
        x.slot_w = slot_w = Signal(wlog)
        m.d.comb += slot_w.eq(Mux(join, best_key[:wlog], x.r))
        new_entry = Signal(self.entry_layout)
        m.d.comb += [new_entry.hash.eq(Mux(join, fin.entry.hash, cur.hash)),
                     new_entry.step.eq(Mux(join, fin.entry.step, cur.step)),
                     new_entry.count.eq(new_count)]
        m.d.comb += x.wr.addr.eq(Cat(slot_w[x.lane_log:], cur.layer[:x.layer_log]))
        for j in range(N):
            m.d.comb += x.wr.data[j].eq(new_entry)

    def _beyond(self, m, layer):
        """A signal: ``layer`` names no context (never, when every value of the field does)."""
        out = Signal()
        if (1 << len(layer)) > self._layers:
            m.d.comb += out.eq(layer >= self._layers)
        return out

    def _context_states(self, m, x):
        """``SAVE`` streams a layer's context image out on ``o_ctx``, ``LOAD`` writes one
        taken from ``i_ctxd``, ``FLUSH`` empties the layer (no clusters, step 0). A layer
        beyond the contexts is refused (error 3): a ``SAVE`` then sends an empty image (a
        zero header), a ``LOAD`` consumes its image and changes nothing."""
        N, W, Lh = self._lanes, self._window, self._layers
        cmd = x.c_cmd
        bad = self._beyond(m, cmd.layer)
        lay = cmd.layer[:x.layer_log] if x.layer_log else Const(0, 1)
        hdr_o = data.View(self.header_layout, self.o_ctx.payload[:self.header_layout.size])
        hdr_i = data.View(self.header_layout, self.i_ctxd.payload[:self.header_layout.size])
        n = Signal(self._id_bits)
        m.d.comb += n.eq(x.n_open[cmd.layer])
        cnt = Signal(range(W + 1))          # the image's entries
        ci = Signal(range(W + 1))           # the entry being moved
        row = Signal(max(1, x.rlog))
        m.d.comb += row.eq(ci[x.lane_log:] if x.rlog else 0)
        addr = Cat(row[:x.rlog], lay) if x.rlog else lay
        with m.State("X_DECODE"):
            m.d.comb += [x.refuse.eq(bad), x.refuse_code.eq(3)]
            m.d.sync += [cnt.eq(Mux(bad, 0, Mux(n >= W, W, n))), ci.eq(0)]
            with m.Switch(cmd.op):
                with m.Case(self.SAVE):
                    m.next = "X_HEADER"
                with m.Case(self.LOAD):
                    m.next = "X_LOAD_HEADER"
                with m.Default():           # FLUSH (and the unused op 3)
                    with m.If(~bad):
                        m.d.sync += [x.n_open[cmd.layer].eq(0), x.last_step[cmd.layer].eq(0)]
                    m.next = "IDLE"
        with m.State("X_HEADER"):
            m.d.comb += [self.o_ctx.valid.eq(1),
                         hdr_o.n_open.eq(Mux(bad, 0, n)),
                         hdr_o.last_step.eq(Mux(bad, 0, x.last_step[cmd.layer]))]
            with m.If(self.o_ctx.ready):
                m.next = "X_READ"
                with m.If(cnt == 0):
                    m.next = "IDLE"
        with m.State("X_READ"):
            # the row of entry ci; its data is on the port from the next cycle on
            if x.rlog + x.layer_log:
                m.d.comb += x.rd.addr.eq(addr)
            m.next = "X_SAVE"
        with m.State("X_SAVE"):
            if x.rlog + x.layer_log:
                m.d.comb += x.rd.addr.eq(addr)
            lane = ci[:x.lane_log] if x.lane_log else Const(0, 1)
            m.d.comb += [self.o_ctx.valid.eq(1),
                         self.o_ctx.payload.eq(x.rd.data.as_value().word_select(
                             lane, self.entry_layout.size))]
            with m.If(self.o_ctx.ready):
                m.d.sync += ci.eq(ci + 1)
                with m.If(ci + 1 == cnt):
                    m.next = "IDLE"
                with m.Elif((ci[:x.lane_log] == N - 1) if x.lane_log else Const(1)):
                    m.next = "X_READ"
        with m.State("X_LOAD_HEADER"):
            m.d.comb += self.i_ctxd.ready.eq(1)
            with m.If(self.i_ctxd.valid):
                hn = hdr_i.n_open
                m.d.sync += cnt.eq(Mux(hn >= W, W, hn))
                with m.If(~bad):
                    m.d.sync += [x.n_open[cmd.layer].eq(hn),
                                 x.last_step[cmd.layer].eq(hdr_i.last_step)]
                with m.If(hn == 0):
                    m.next = "IDLE"
                with m.Else():
                    m.next = "X_LOAD"
        with m.State("X_LOAD"):
            m.d.comb += self.i_ctxd.ready.eq(1)
            entry = self.i_ctxd.payload[:self.entry_layout.size]
            m.d.comb += x.wr.addr.eq(addr)
            for j in range(N):
                m.d.comb += x.wr.data[j].eq(entry)
            with m.If(self.i_ctxd.valid):
                with m.If(~bad):
                    m.d.comb += x.wr.en.eq(Const(1, N) << (ci[:x.lane_log] if x.lane_log
                                                           else 0))
                m.d.sync += ci.eq(ci + 1)
                with m.If(ci + 1 == cnt):
                    m.next = "IDLE"

    def _control(self, m, x):
        """The token sequencer (IDLE, SCAN, DECIDE), the context commands, the commit and the
        counters."""
        perf = self.perf
        commit = Signal()
        nxt, cur = x.nxt, x.cur
        x.c_cmd = Signal(self.ctx_layout)

        def start_next(read_row0: bool):
            """Take the buffered token as the current one (issuing its row 0 now if asked),
            or go idle."""
            with m.If(x.nxt_valid):
                m.d.sync += [cur.eq(nxt), x.nxt_valid.eq(0), x.best.rank.eq(0),
                             x.token.eq(Mux(nxt.first, 0, x.token + 1))]
                with m.If(nxt.first | ~x.regs_taken):
                    m.d.sync += [x.th_hd.eq(self.th_hd), x.max_age.eq(self.max_age),
                                 x.age_limit.eq(self.age_limit), x.regs_taken.eq(1)]
                if read_row0:
                    m.d.comb += [x.spec.eq(1), x.issue.eq(1)]
                    m.d.sync += x.beat.eq(1)
                else:
                    m.d.sync += x.beat.eq(0)
                m.next = "SCAN"
            with m.Else():
                m.next = "IDLE"

        with m.FSM() as fsm:
            with m.State("IDLE"):
                with m.If(x.nxt_valid):
                    start_next(read_row0=False)
                with m.Elif(self.i_ctx.valid & ~self.i.valid):
                    # a context command, between tokens (a waiting token goes first)
                    m.d.comb += self.i_ctx.ready.eq(1)
                    m.d.sync += x.c_cmd.eq(self.i_ctx.payload)
                    m.next = "X_DECODE"
            self._context_states(m, x)
            with m.State("SCAN"):
                m.d.sync += perf.busy.eq(perf.busy + 1)
                with m.If(x.beat < x.beats):
                    m.d.comb += x.issue.eq(1)
                    m.d.sync += x.beat.eq(x.beat + 1)
                with m.Else():
                    m.next = "DECIDE"
            with m.State("DECIDE"):
                m.d.sync += perf.busy.eq(perf.busy + 1)
                drained = ~x.s1_valid & ~x.s2_valid & ~x.s2b_valid   # s3 merges combinationally
                m.d.comb += self.o.valid.eq(drained)
                with m.If(drained & ~self.o.ready):
                    m.d.sync += perf.stalled.eq(perf.stalled + 1)
                with m.If(drained & self.o.ready):
                    m.d.comb += commit.eq(1)
                    start_next(read_row0=True)
        m.d.comb += x.ctx_busy.eq(fsm.ongoing("X_DECODE") | fsm.ongoing("X_HEADER") |
                                  fsm.ongoing("X_READ") | fsm.ongoing("X_SAVE") |
                                  fsm.ongoing("X_LOAD_HEADER") | fsm.ongoing("X_LOAD"))
        with m.If(x.ctx_busy):
            m.d.sync += perf.busy.eq(perf.busy + 1)
        with m.If(commit):
            m.d.comb += x.wr.en.eq(Const(1, self._lanes) << x.slot_w[:x.lane_log])
            m.d.sync += perf.comparisons.eq(perf.comparisons + x.n_valid)
            with m.If(x.join):
                m.d.sync += perf.joined.eq(perf.joined + 1)
            with m.Else():
                m.d.sync += [perf.opened.eq(perf.opened + 1),
                             x.n_open[cur.layer].eq(x.n_cur + 1)]
