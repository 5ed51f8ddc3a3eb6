"""DRE hash-cluster unit (HCU): Hamming clustering of new-token hashes, bit-exact with the
golden block model (``golden.hcu.hcu_reference``, docs/design.md D3 and D4). The unit joins
its parts: the input (:mod:`.tokens`), the sequencer (:mod:`.sequencer`), the window
(:mod:`.window`), the lanes (:mod:`.lanes`), the reduction (:mod:`.tournament`) and the
decision (:mod:`.decision`)."""

from __future__ import annotations

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from vrex.rules import hcu_rules

from ...lib import counter_layout
from .decision import HcuDecision
from .lanes import HcuLanes
from .sequencer import FLUSH, LOAD, SAVE, HcuSequencer
from .signatures import entry_layout, lane_layout
from .tokens import HcuTokens
from .tournament import HcuTournament
from .window import HcuWindow

__all__ = ["HashClusterUnit"]


class HashClusterUnit(wiring.Component):
    """Hamming clustering of a stream of hash words, one layer context per token.

    Computes, for every hash on ``i``, what ``golden.hcu.hcu_reference`` computes
    (``golden.resv.HashClusterer`` per token): the minimum Hamming distance to the ``window``
    most recently opened clusters of the token's layer that are at most ``max_age`` steps old
    (``age_limit`` = 0: no limit), ties to the most recently opened; the token joins that
    cluster if the distance is ``< th_hd``, else it opens a cluster whose hash is its own (the
    oldest cluster of a full window falls out). It emits one beat on ``o`` per token: the
    token's index in its frame (``first`` restarts it), the cluster id, ``opened``, the distance
    (``n_hp + 1`` when no cluster was eligible) and the cluster's new member count, which is
    also the HC-table update ``(cluster, count)`` the KV manager consumes. Counts saturate at
    ``2**count_bits - 1``. A layer's steps never decrease (a token whose step does is refused),
    so an entry's age is the token's step less the entry's.

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

    Pipeline (every stage a register, for the clock: docs/hcu.md): a token is taken,
    checked and buffered (:class:`.tokens.HcuTokens`) while the previous one is processed
    (:class:`.sequencer.HcuSequencer`). The scan reads one row per cycle (``lanes``
    comparisons) from an address register set a cycle ahead; p0 and p1 register the row as it
    leaves the block RAMs (:class:`.window.HcuWindow`); p2 holds each lane's XOR-popcount
    half summed and its eligibility, s2 each lane's rank ``{eligible, distance, recency}``
    (:class:`.lanes.HcuLanes`); two all-pairs tournaments, each split between its compares
    (s2a, s2b) and its selection, give the row's winner (s3); ``best`` takes s3 if it wins,
    with the join decision registered beside it (:class:`.tournament.HcuTournament`); the
    decision reads ``best`` (:class:`.decision.HcuDecision`). Counts sit in a memory of
    their own, so the tournaments carry a count, not the hash (a join rewrites only the
    count). Writes are registered (they reach the memories a cycle after the decision), and a
    read that could miss one takes the written lanes from a bypass. The decision cycle also
    reads the next token's first row: with ``o`` ready and the next token waiting, a token
    whose layer holds n clusters takes ``cycles_per_token(n) = max(1, ceil(min(n, window) /
    lanes)) + latency`` cycles (``latency`` = 8), and a full 1024-entry, 16-lane window
    compares at 64/72 = 88.9% of the lanes' peak.

    Parameters (keyword-only, all required; :meth:`from_config` takes them from the build's
    ``Config``; checked by ``vrex.rules.hcu_rules`` with exact messages)
        ``n_hp`` hash bits (1-64); ``lanes`` comparisons per cycle (a power of two);
        ``window`` clusters compared per layer (a power of two, at least ``lanes``);
        ``layers`` layer contexts on chip; ``count_bits``, ``step_bits``, ``id_bits`` (more
        than log2(window)), ``token_bits`` field widths; ``counter_bits`` counter width.

    Attributes
        ``i`` (in stream: ``hash``, ``layer``, ``step``, ``first``, ``last``); ``o`` (out
        stream: ``token``, ``cluster``, ``opened``, ``distance``, ``count``, ``layer``,
        ``first``, ``last``); ``th_hd``, ``max_age``, ``age_limit`` and ``cluster_cap``
        run-time registers (``Config.block_registers("hcu")``), taken with each run's
        ``first`` token (``cluster_cap``: a token whose winner already has that many members
        opens a cluster instead of joining it, one compare of the winner's count; 0: no
        cap); ``perf``
        counters: cycles ``busy``, cycles ``stalled`` on ``o``, ``comparisons`` made (window
        entries scanned), clusters ``opened``, tokens ``joined``.

    Timing: :attr:`latency`, :meth:`cycles_per_token`.
    """

    PERF = ("busy", "stalled", "comparisons", "opened", "joined", "refused")

    # context commands on ``i_ctx`` (``op``)
    SAVE, LOAD, FLUSH = SAVE, LOAD, FLUSH

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
        self._dist_bits, self._layer_bits = dist_bits, layer_bits
        self.entry_layout = entry_layout(n_hp, step_bits, count_bits)
        # the window memory's lane words, padded to whole 9-bit bytes: the block RAMs write
        # by bytes of 9 bits (ECP5, 7-series), and a lane write that is not whole bytes is
        # emulated by Yosys with a second copy and a multiplexer after the RAM, on the path
        # the clock is limited by
        pad = -(n_hp + step_bits) % 9
        self.key_layout = data.StructLayout({"hash": n_hp, "step": step_bits,
                                             **({"pad": pad} if pad else {})})
        self._count_word = count_bits + (-count_bits % 9)
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
            "cluster_cap": In(count_bits),
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
        """Bits of the window memories (entries padded to whole 9-bit bytes)."""
        return self._layers * self._window * (self.key_layout.size + self._count_word)

    @property
    def latency(self) -> int:
        """Cycles a token takes beyond its row reads: the stages from a row's read to the
        decision (p0, p1, p2, s2, s2a, s2b, s3, best)."""
        return 8

    def cycles_per_token(self, n_clusters: int) -> int:
        """Cycles from a token's start to the next token's start, ``o`` ready and the next
        token waiting, for a layer holding ``n_clusters``: ``max(1, ceil(min(n, window) /
        lanes)) + latency`` (row 0 is always read)."""
        beats = -(-min(n_clusters, self._window) // self._lanes)
        return max(1, beats) + self.latency

    def elaborate(self, platform):
        m = Module()
        N, W, Lh = self._lanes, self._window, self._layers
        wlog, rlog = exact_log2(W), exact_log2(W // N)
        depth = max(2, Lh * (W // N))   # (a one-word memory has a zero-width address)
        addr_bits, beat_bits = ceil_log2(depth), rlog if rlog else 1
        lane = lane_layout(wlog, self._dist_bits, self._count_bits)
        common = dict(lanes=N, window=W)
        m.submodules.tokens = tokens = HcuTokens(
            token_layout=self.in_layout, layers=Lh, layer_bits=self._layer_bits,
            step_bits=self._step_bits)
        m.submodules.seq = seq = HcuSequencer(
            entry=self.entry_layout, token_layout=self.in_layout, ctx_layout=self.ctx_layout,
            header_layout=self.header_layout, ctx_bits=self.ctx_bits, layers=Lh,
            layer_bits=self._layer_bits, n_hp=self._n_hp, step_bits=self._step_bits,
            id_bits=self._id_bits, token_bits=self._token_bits, dist_bits=self._dist_bits,
            addr_bits=addr_bits, counter_bits=self._counter_bits, count_bits=self._count_bits,
            **common)
        m.submodules.window = window = HcuWindow(
            entry=self.entry_layout, key=self.key_layout, count_word=self._count_word,
            lanes=N, depth=depth, beat_bits=beat_bits, init=self.window_init)
        m.submodules.lanes = lanes = HcuLanes(
            entry=self.entry_layout, lane=lane, n_hp=self._n_hp, step_bits=self._step_bits,
            id_bits=self._id_bits, beat_bits=beat_bits, **common)
        m.submodules.tournament = tour = HcuTournament(
            lane=lane, layers=Lh, dist_bits=self._dist_bits, layer_bits=self._layer_bits,
            count_bits=self._count_bits, **common)
        m.submodules.decision = dec = HcuDecision(
            entry=self.entry_layout, lane=lane, layers=Lh, n_hp=self._n_hp,
            count_bits=self._count_bits, id_bits=self._id_bits, token_layout=self.in_layout,
            out_layout=self.out_layout, token_bits=self._token_bits, addr_bits=addr_bits,
            layer_bits=self._layer_bits, **common)
        wiring.connect(m, wiring.flipped(self.i), tokens.i_token)
        wiring.connect(m, wiring.flipped(self.i_ctx), seq.ctx_cmd)
        wiring.connect(m, wiring.flipped(self.i_ctxd), seq.ctx_in)
        wiring.connect(m, seq.ctx_out, wiring.flipped(self.o_ctx))
        wiring.connect(m, window.o_row, lanes.i_row)
        wiring.connect(m, lanes.o_lanes, tour.i_lanes)
        wiring.connect(m, tour.o_best, dec.best)
        self._join(m, tokens, seq, window, lanes, tour, dec)
        self._errors_and_counters(m, tokens, seq)
        return m

    def _join(self, m, tokens, seq, window, lanes, tour, dec):
        """The ports that are not whole signatures: the sequencer's registers to the parts
        that read them, the decision's write (over a LOAD's entry) and bypass to the window."""
        cur = seq.cur
        m.d.comb += [
            tokens.ctx_busy.eq(seq.ctx_busy), tokens.take.eq(seq.start),
            tokens.ctx_apply.eq(seq.ctx_apply), tokens.ctx_layer.eq(seq.ctx_layer),
            tokens.ctx_step.eq(seq.ctx_step),
            seq.nxt.eq(tokens.nxt), seq.nxt_valid.eq(tokens.nxt_valid),
            seq.inb_valid.eq(tokens.inb_valid), seq.nxt_layer.eq(tokens.nxt_layer),
            seq.i_valid.eq(self.i.valid), seq.ctx_last_step.eq(tokens.ctx_last_step),
            seq.reg_th_hd.eq(self.th_hd), seq.reg_max_age.eq(self.max_age),
            seq.reg_age_limit.eq(self.age_limit), seq.reg_cluster_cap.eq(self.cluster_cap),
            seq.o_ready.eq(self.o.ready), self.o.valid.eq(seq.o_valid),
            self.o.payload.eq(dec.beat),
            seq.join.eq(tour.o_best.join), seq.opens.eq(tour.o_best.opens),
            seq.rows_busy.eq(window.busy | lanes.busy | tour.busy),
            seq.row.eq(window.o_row.row),
            window.raddr.eq(seq.raddr), window.issue.eq(seq.issue),
            window.rd_row.eq(seq.rd_row),
            lanes.hash.eq(cur.hash), lanes.step.eq(cur.step), lanes.n_cur.eq(seq.n_cur),
            lanes.r.eq(seq.n_cur[:len(lanes.r)]), lanes.oldest_age.eq(seq.max_age_r),
            lanes.age_on.eq(seq.age_limit_r),
            tour.join_below.eq(seq.th_hd_r), tour.cap.eq(seq.cluster_cap_r), tour.start.eq(seq.start),
            tour.start_layer.eq(tokens.nxt.layer), tour.fresh.eq(seq.fresh),
            tour.layer.eq(cur.layer),
            dec.cur.eq(cur), dec.token.eq(seq.token), dec.n_cur.eq(seq.n_cur),
            dec.n_hi_m1.eq(seq.n_hi_m1), dec.commit.eq(seq.commit),
        ]
        w, dw, lw = window.w, dec.w, seq.w_load
        m.d.comb += [w.valid.eq(dw.valid | lw.valid)]
        m.d.comb += [getattr(w, f).eq(Mux(dw.valid, getattr(dw, f), getattr(lw, f)))
                     for f in ("addr", "entry", "en", "ken")]
        # the decision cycle's read of the next token's row 0 holds the entry decided when
        # both tokens are of one layer and the slot written is in row 0
        same = (tokens.nxt.layer == cur.layer) if self._layers > 1 else Const(1)
        now = Signal()
        m.d.comb += [now.eq(seq.spec & same & dec.row0),
                     window.bypass.hit.eq(now), window.bypass.key.eq(now & ~tour.o_best.join),
                     window.bypass.lanes.eq(dw.en), window.bypass.entry.eq(dw.entry)]

    def _errors_and_counters(self, m, tokens, seq):
        """A refusal (a token, or a context command): counted, the first's code kept, a
        cycle later (registered, for the clock); the other counters are the sequencer's."""
        refuse, code = Signal(), Signal(2)
        m.d.comb += [refuse.eq(tokens.refuse | seq.refuse),
                     code.eq(Mux(seq.refuse, 3, tokens.refuse_code))]
        refused, refused_code = Signal(), Signal(2)
        n_refused = Signal.like(self.perf.refused)
        m.d.sync += [refused.eq(refuse), refused_code.eq(code)]
        with m.If(refused):
            m.d.sync += [self.error.eq(1), n_refused.eq(n_refused + 1)]
            with m.If(~self.error):
                m.d.sync += self.error_code.eq(refused_code)
        m.d.comb += [getattr(self.perf, c).eq(getattr(seq.counts, c))
                     for c, _ in seq.perf_layout]
        m.d.comb += self.perf.refused.eq(n_refused)

