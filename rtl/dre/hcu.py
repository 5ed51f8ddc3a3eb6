"""DRE hash-cluster unit (HCU): Hamming clustering of new-token hashes, bit-exact with the
golden block model (``golden.hcu.hcu_reference``, docs/design.md D3 and D4)."""

from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from vrex.rules import hcu_rules

from ..lib import counter_layout, reduce_tree

__all__ = ["HashClusterUnit", "popcount"]


def popcount(m: Module, v, name: str, levels: int | None = None):
    """A balanced adder tree over the bits of ``v`` (each level one bit wider); with
    ``levels``, the partial sums after that many levels (:func:`reduce_tree`)."""
    return reduce_tree(m, [v[i] for i in range(len(v))], lambda a, b: a + b, name,
                       levels=levels)


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
    manager consumes. Counts saturate at ``2**count_bits - 1``. A layer's steps never
    decrease (a token whose step does is refused), so an entry's age is the token's step
    less the entry's.

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

    Pipeline (every stage a register, for the clock: docs/hcu.md): a token is taken into
    ``inb``, checked there, and moves to a one-token buffer while the previous one is
    processed. The scan reads one row per cycle (``lanes`` comparisons) from an address
    register set a cycle ahead; p0 and p1 register the row as it leaves the block RAMs (their
    clock-to-out leaves no time for logic); p2 holds each lane's XOR-popcount half summed and
    its eligibility; s2 each lane's rank ``{eligible, distance, recency}``; two all-pairs
    tournaments, each split between its compares (s2a, s2b) and its selection, give the row's
    winner (s3); ``best`` takes s3 if it wins, with the join decision registered beside it;
    the decision reads ``best``. Counts sit in a memory of their own, so the tournaments
    carry a count, not the hash (a join rewrites only the count). Writes are registered (they
    reach the memories a cycle after the decision), and a read that could miss one takes the
    written lanes from a bypass. The decision cycle also reads the next token's first row:
    with ``o`` ready and the next token waiting, a token whose layer holds n clusters takes
    ``cycles_per_token(n) = max(1, ceil(min(n, window) / lanes)) + latency`` cycles
    (``latency`` = 8; 3 before the stages were registered, at less than half the clock), and
    a full 1024-entry, 16-lane window compares at 64/72 = 88.9% of the lanes' peak.

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
        # two memories of one address: hashes and opening steps, and counts (a join rewrites
        # only its count, so the winner carries no hash through the reduction)
        depth = max(2, Lh * x.rows)
        init = [[{"hash": e["hash"], "step": e["step"]} for e in row]
                for row in self.window_init]
        # Writes are registered (``wq``: address, entry, lane enables, all from registers into
        # the block RAMs) and reach the memory a cycle after the decision or the context beat
        # that makes them. A read never relies on the memory for a word written in the same
        # cycle (``no_rw_check``: Yosys then adds no read-during-write multiplexer after the
        # block RAMs): the scan takes such lanes from a bypass instead (_scan).
        norw = {"no_rw_check": 1}
        m.submodules.mem = mem = memory.Memory(
            shape=data.ArrayLayout(self.key_layout, N), depth=depth, init=init, attrs=norw)
        m.submodules.cmem = cmem = memory.Memory(
            shape=data.ArrayLayout(self._count_word, N), depth=depth,
            init=[[e["count"] for e in row] for row in self.window_init], attrs=norw)
        x.wr, x.cwr = mem.write_port(granularity=1), cmem.write_port(granularity=1)
        x.rd, x.crd = mem.read_port(), cmem.read_port()
        x.wq_addr = Signal(len(x.wr.addr))
        x.wq_entry = Signal(self.entry_layout)
        x.wq_en, x.wq_ken = Signal(N), Signal(N)     # lanes whose count / hash and step
        x.wq_any = Signal()                          # (wq_en.any(), as a register)
        # (a pulse: set for one cycle by a decision, _control, or a context beat, X_LOAD)
        m.d.sync += [x.wq_en.eq(0), x.wq_ken.eq(0), x.wq_any.eq(0)]
        m.d.comb += [x.crd.addr.eq(x.rd.addr), x.wr.addr.eq(x.wq_addr),
                     x.cwr.addr.eq(x.wq_addr), x.wr.en.eq(x.wq_ken), x.cwr.en.eq(x.wq_en)]
        for j in range(N):
            m.d.comb += [x.wr.data[j].hash.eq(x.wq_entry.hash),
                         x.wr.data[j].step.eq(x.wq_entry.step),
                         x.cwr.data[j].eq(x.wq_entry.count)]

        x.n_open = Array(Signal(self._id_bits, name=f"n_open_{l}") for l in range(Lh))
        # the decision (driven in _decide): join or open, and the entry it writes
        x.join, x.new_entry = Signal(), Signal(self.entry_layout)
        # (and with join, one-hot: the layer whose counter the decision advances)
        x.opens = [Signal(name=f"opens_{l}") for l in range(Lh)]

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
        # a token is taken into inb, checked there (its check registered with it), and moves
        # to the one-token buffer (nxt) when that is free
        x.inb, x.inb_valid = inb, inb_valid = Signal(self.in_layout), Signal()
        inb_bad_layer, inb_bad_step = Signal(), Signal()
        m.d.comb += self.i.ready.eq(~inb_valid & ~x.ctx_busy)
        # bad input is refused as it arrives: a layer beyond the contexts, or a step older
        # than the layer's last (steps never decrease nor wrap: docs/numerics.md §5); the
        # token is dropped (no output beat, no state change), the first error's code kept
        p = self.i.payload
        x.last_step = last_step = Array(Signal(self._step_bits, name=f"last_step_{l}")
                                        for l in range(Lh))
        bad_layer, bad_step = self._beyond(m, p.layer), Signal()
        m.d.comb += bad_step.eq(~bad_layer & (p.step < last_step[p.layer]))
        # a refusal (a token here, a context command in X_DECODE): counted, the first's code
        # kept, a cycle later (registered, for the clock)
        x.refuse, x.refuse_code = Signal(), Signal(2)
        refused, refused_code = Signal(), Signal(2)
        m.d.sync += [refused.eq(x.refuse), refused_code.eq(x.refuse_code)]
        with m.If(refused):
            m.d.sync += [self.error.eq(1), self.perf.refused.eq(self.perf.refused + 1)]
            with m.If(~self.error):
                m.d.sync += self.error_code.eq(refused_code)
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [inb.eq(p), inb_valid.eq(1), inb_bad_layer.eq(bad_layer),
                         inb_bad_step.eq(bad_step)]
        with m.If(inb_valid & (inb_bad_layer | inb_bad_step)):
            m.d.comb += [x.refuse.eq(1), x.refuse_code.eq(Mux(inb_bad_layer, 1, 2))]
            m.d.sync += inb_valid.eq(0)
        with m.Elif(inb_valid & ~nxt_valid):
            m.d.sync += [nxt.eq(inb), nxt_valid.eq(1), inb_valid.eq(0),
                         last_step[inb.layer].eq(inb.step)]
        # the buffered token's layer as of the next cycle (raddr is set a cycle ahead)
        x.nxt_layer = Signal.like(nxt.layer)
        m.d.comb += x.nxt_layer.eq(Mux(inb_valid & ~nxt_valid, inb.layer, nxt.layer))

        # beside each layer's cluster counter, the rows a token of that layer reads, so that a
        # token's start takes both from registers
        x.beats_l = Array(Signal(range(x.rows + 1), name=f"beats_{l}") for l in range(Lh))
        # (and whether those rows are at least one, more than one: a token's first scan
        # cycle then knows from registers whether it issues a row)
        x.nz_l = Array(Signal(name=f"beats_nz_{l}") for l in range(Lh))
        x.gt1_l = Array(Signal(name=f"beats_gt1_{l}") for l in range(Lh))
        # the current token's clusters and rows, loaded as it starts, and what follows from
        # them a cycle later (used from the token's first ranks on, or at its decision)
        x.n_cur = n_cur = Signal(self._id_bits)
        x.beats = Signal(range(x.rows + 1))
        x.n_valid = Signal(range(W + 1))          # entries compared: min(n, window)
        x.n_p1 = Signal(self._id_bits)            # the counter if the token opens a cluster
        x.beats_p1 = Signal(range(x.rows + 1))    # and its layer's rows then
        x.n_hi_m1 = Signal(self._id_bits - x.wlog)    # the window's previous lap
        # (n_valid and beats_p1 two cycles after, from three registers: the window a power
        # of two, n >= W is "a bit above the window's is set", and the rows of n + 1
        # clusters, min(ceil((n + 1) / N), W / N), are n's row + 1 unless n >= W - 1; both
        # are read at the token's decision at the earliest)
        full, low_all, row_nz = Signal(), Signal(), Signal()
        row_p1 = Signal.like(x.beats_p1)
        lane_log = exact_log2(N)
        m.d.sync += [full.eq(n_cur[x.wlog:].any()), low_all.eq(n_cur[:x.wlog].all()),
                     row_p1.eq(n_cur[lane_log:x.wlog] + 1),
                     row_nz.eq(n_cur[lane_log:x.wlog].any())]
        x.beats_p1_gt1 = Signal()                 # beats_p1 > 1
        m.d.sync += [x.n_valid.eq(Mux(full, W, n_cur)), x.n_p1.eq(n_cur + 1),
                     x.beats_p1.eq(Mux(full | low_all, x.rows, row_p1)),
                     x.beats_p1_gt1.eq(Mux(full | low_all, x.rows > 1, row_nz)),
                     x.n_hi_m1.eq(n_cur[x.wlog:] - 1)]
        x.r = n_cur[:x.wlog]                      # slot the next cluster opens in

    def _rows_of(self, n):
        """The rows a token reads when its layer holds ``n`` clusters."""
        W, N = self._window, self._lanes
        return Mux(n >= W, W // N, (n + N - 1) >> exact_log2(N))

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
        # smaller distance (inverted in the compare), then the more recent slot (the tie rule
        # of D4); the distance is stored as the popcount's adder gives it, so that the adder's
        # carry chain ends in the s2 register (the eligibility is the register's reset)
        x.dist_bits = ceil_log2(self._n_hp + 2)
        x.rank_t = data.StructLayout({"key": x.wlog + 1, "dist": x.dist_bits, "elig": 1})
        # (joins: the lane's distance is under th_hd, set from s2a on)
        x.lane_t = data.StructLayout({"rank": x.rank_t, "count": self._count_bits, "joins": 1})
        x.s2_valid = Signal()
        x.s2 = [Signal(x.lane_t, name=f"s2_lane_{j}") for j in range(N)]
        x.best = Signal(x.lane_t)
        x.best_row0 = Signal()            # best's slot is in row 0
        x.best_lanes = Signal(N)          # best's slot's lane (one-hot), registered with it

        x.lane_log, x.layer_log = exact_log2(N), ceil_log2(Lh)
        x.spec = spec = Signal()    # the decision cycle also reads the buffered token's row 0
        rd, wr = x.rd, x.wr
        rd_row = Signal.like(beat)
        m.d.comb += rd_row.eq(Mux(spec, 0, beat))
        # the read address is a register (it fans out to every block RAM of the window), set
        # a cycle ahead by the sequencer (_control): the row a scan reads next, else row 0 of
        # the buffered token's layer, which the decision cycle reads
        x.raddr = Signal(len(rd.addr))
        m.d.comb += rd.addr.eq(x.raddr)
        m.d.sync += [x.s1_valid.eq(x.issue), x.s1_beat.eq(rd_row)]

        # The memory is written a cycle after the decision (the write is registered), so two
        # reads can miss the entry it writes: the decision cycle's own read of the next
        # token's row 0 (the entry is in it if both tokens are of one layer and the slot
        # written is in row 0), and the read of the cycle after, issued while the write
        # happens (its address equals the write's). Either takes the written lanes from a
        # bypass register instead of the memory (a transparent read port would keep the
        # memory out of block RAM on FPGAs; the lanes not written read as usual).
        x.fwd_hit, x.fwd_key = Signal(), Signal()     # the count; the hash and step too
        x.fwd_en = Signal(N)
        x.fwd_entry = Signal(self.entry_layout)
        x.row0 = Signal()                 # the slot the decision writes is in row 0
        x.commit_lanes = Signal(N)        # the lane the decision writes (one-hot)
        same = (x.nxt.layer == x.cur.layer) if x.layer_log else Const(1)
        now = Signal()                    # the decision cycle's read holds the entry
        m.d.comb += now.eq(spec & same & x.row0)
        late = Signal()                   # this read meets the registered write
        m.d.comb += late.eq(x.wq_any & (x.wq_addr == rd.addr))
        # (the two never meet: a write is pending only in the cycle after a decision or a
        # context beat, never in a decision cycle; so the bypass's source is chosen by
        # wq_any, a register, not by the decision)
        m.d.sync += [x.fwd_hit.eq(now | late),
                     x.fwd_key.eq(Mux(x.wq_any, late & x.wq_ken.any(), now & ~x.join)),
                     x.fwd_en.eq(Mux(x.wq_any, x.wq_en, x.commit_lanes)),
                     x.fwd_entry.eq(Mux(x.wq_any, x.wq_entry, x.new_entry))]
        # p0: the row read, registered as it leaves the block RAM (its clock-to-out leaves no
        # time for logic), with the bypass that goes with it (its lanes selected by
        # registers); p1: the row with the bypassed lanes replaced
        # (two registers: p0 beside the block RAMs, p1 beside the lanes; the RAMs of a
        # 16-lane window span more of the chip than a register's input can reach in what
        # the RAM's clock-to-out leaves of the cycle)
        x.p0_row = Signal(data.ArrayLayout(self.entry_layout, N), reset_less=True)
        for j in range(N):
            m.d.sync += [x.p0_row[j].hash.eq(rd.data[j].hash),
                         x.p0_row[j].step.eq(rd.data[j].step),
                         x.p0_row[j].count.eq(x.crd.data[j])]
        x.p0_valid, x.p1_valid = Signal(), Signal()
        x.p0_beat, x.p1_beat = Signal.like(x.s1_beat), Signal.like(x.s1_beat)
        x.p1_row = Signal(data.ArrayLayout(self.entry_layout, N), reset_less=True)
        p0_cnt_sel, p0_key_sel = Signal(N), Signal(N)     # lanes taking the bypass's
        p0_fwd_entry = Signal(self.entry_layout)          # count; hash and step too
        m.d.sync += [x.p0_valid.eq(x.s1_valid), x.p0_beat.eq(x.s1_beat),
                     p0_cnt_sel.eq(Mux(x.fwd_hit, x.fwd_en, 0)),
                     p0_key_sel.eq(Mux(x.fwd_key, x.fwd_en, 0)), p0_fwd_entry.eq(x.fwd_entry),
                     x.p1_valid.eq(x.p0_valid), x.p1_beat.eq(x.p0_beat)]
        for j in range(N):
            src = x.p0_row[j]
            m.d.sync += [
                x.p1_row[j].count.eq(Mux(p0_cnt_sel[j], p0_fwd_entry.count, src.count)),
                x.p1_row[j].hash.eq(Mux(p0_key_sel[j], p0_fwd_entry.hash, src.hash)),
                x.p1_row[j].step.eq(Mux(p0_key_sel[j], p0_fwd_entry.step, src.step))]

    def _rank(self, m, x):
        """p1 -> p2 -> s2: per lane, the XOR-popcount (its first half in p2) and the
        eligibility (p2), then the distance (s2)."""
        levels = ceil_log2(self._n_hp)
        x.p2_valid = Signal()
        m.d.sync += [x.p2_valid.eq(x.p1_valid), x.s2_valid.eq(x.p2_valid)]
        # age <= max_age as one compare of the entry's step: step >= cur.step - max_age
        # (every entry is young when cur.step <= max_age, or without an age limit), both
        # registered a cycle after the token's start, before its first row reaches p1
        young_all, oldest = Signal(), Signal(self._step_bits)
        m.d.sync += [young_all.eq(~x.age_limit | (x.cur.step <= x.max_age)),
                     oldest.eq(x.cur.step - x.max_age)]
        for j in range(self._lanes):
            e = x.p1_row[j]
            slot = Signal(x.wlog, name=f"p1_slot_{j}")
            m.d.comb += slot.eq(Cat(Const(j, x.lane_log), x.p1_beat[:x.rlog]))
            # a slot opened after the next one (a one-row window's last lane never is: a
            # constant compare there is a lint error)
            newer = slot < x.r if x.rlog or j < self._window - 1 else Const(0, 1)
            parts = popcount(m, e.hash ^ x.cur.hash, f"p1_pop_{j}", levels=(levels + 1) // 2)
            p2_parts = [Signal(v.shape(), name=f"p2_pop_{j}_{k}") for k, v in enumerate(parts)]
            elig = Signal(name=f"p2_elig_{j}")
            p2_key = Signal(x.wlog + 1, name=f"p2_key_{j}")
            p2_count = Signal(self._count_bits, name=f"p2_count_{j}")
            with m.If(x.p1_valid):
                m.d.sync += [*(r.eq(v) for r, v in zip(p2_parts, parts)),
                             # (slot < window <= n_cur when full)
                             elig.eq((slot < x.n_cur) & (young_all | (e.step >= oldest))),
                             p2_key.eq(Cat(slot, newer)), p2_count.eq(e.count)]
            dist = reduce_tree(m, p2_parts, lambda a, b: a + b, f"p2_pop_{j}")
            # (every cycle, without an enable: s2 is read only with s2_valid, and a register
            # without an enable takes the eligibility as its synchronous reset, so that the
            # adder's carry chain ends in the register; an ineligible lane's slot may never
            # have been written: its distance is forced to 0 so that no compare sees its
            # contents)
            m.d.sync += [x.s2[j].rank.elig.eq(elig), x.s2[j].rank.dist.eq(Mux(elig, dist, 0)),
                         x.s2[j].rank.key.eq(p2_key), x.s2[j].count.eq(p2_count)]

    def _reduce(self, m, x):
        """s2 -> s2a -> s2b -> s3 -> best: the row's winner, then the token's."""
        N, s2 = self._lanes, x.s2
        # two all-pairs tournaments (every pair of a group compared at once, the winner the
        # one that beats all others: one compare deep, where a binary tree is log2(group)
        # compares deep): groups of 2^ceil(log2(N) / 2) lanes, then the groups' winners.
        # Candidates are compared in scan order (:meth:`_wins`). Registers split each
        # tournament between its compares and its selection: s2a holds the lanes and their
        # groups' compares; s2b the groups' winners and their compares; s3 the row's winner.
        group = 1 << ((exact_log2(N) + 1) // 2)
        x.s2a_valid, x.s2b_valid = s2a_valid, s2b_valid = Signal(), Signal()
        m.d.sync += [s2a_valid.eq(x.s2_valid), s2b_valid.eq(s2a_valid)]
        s2a = [Signal(x.lane_t, name=f"s2a_lane_{j}") for j in range(N)]
        groups = [s2a[g * group:(g + 1) * group] for g in range(N // group)]
        # the groups' winners' compares are looked up, not made: every pair of lanes in two
        # different groups is compared in s2 (registered in s2a), and in s2a the pair of
        # the two groups' winners picks its result (no compare after the selection)
        n_groups = N // group
        cross = {}
        for g in range(n_groups):
            for h in range(g + 1, n_groups):
                for a in range(g * group, (g + 1) * group):
                    for b in range(h * group, (h + 1) * group):
                        cross[a, b] = Signal(name=f"s2a_x_{a}_{b}")
                        with m.If(x.s2_valid):
                            m.d.sync += cross[a, b].eq(self._wins(s2[a], s2[b]))
        gts = []
        for g in range(N // group):
            gt = self._compare(m, s2[g * group:(g + 1) * group], f"s2_gt_{g}")
            gt_r = {k: Signal(name=f"s2a_gt_{g}_{k[0]}_{k[1]}") for k in gt}
            with m.If(x.s2_valid):
                m.d.sync += [*(gt_r[k].eq(v) for k, v in gt.items()),
                             *(a.eq(b) for a, b in zip(groups[g], s2[g * group:])),]
                # whether the lane's cluster is close enough to join, beside the compares
                m.d.sync += [a.joins.eq(b.rank.elig & (b.rank.dist < x.th_hd))
                             for a, b in zip(groups[g], s2[g * group:])]
            gts.append(gt_r)
        s2b = [Signal(x.lane_t, name=f"s2b_node_{g}") for g in range(N // group)]
        lane_wins = [[] for _ in range(n_groups)]
        wins = [self._select(m, groups[g], gts[g], f"s2a_pick_{g}", lane_wins[g])
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
            m.d.sync += [*(a.eq(b) for a, b in zip(s2b, wins)),
                         *(gt2_r[k].eq(v) for k, v in gt2.items())]
        winner_is = []
        winner = self._select(m, s2b, gt2_r, "s2b_pick", winner_is)
        # s3 registers the row's winner; best, the token's winner so far, takes it a cycle
        # later; the decision reads best
        x.s2b_valid = s2b_valid
        x.s3_valid = s3_valid = Signal()
        s3 = Signal(x.lane_t)
        m.d.sync += s3_valid.eq(s2b_valid)
        with m.If(s2b_valid):
            m.d.sync += s3.eq(winner)
        # best takes s3 if s3 wins against it. That compare is looked up, not made: in s2b,
        # each group's winner is compared with best and with s3 as they are then, and the
        # row winner's two results registered beside s3; best is, a cycle later, the best
        # of then (no merge), s3 of then (it merged) or empty (a token started: s3 wins)
        beats_best, beats_s3 = Signal(), Signal()     # best (s3) of then wins over s3
        def row_winner_loses_to(ref):
            return Cat(*[w & self._wins(ref, c) for w, c in zip(winner_is, s2b)]).any()
        m.d.sync += [beats_best.eq(row_winner_loses_to(x.best)),
                     beats_s3.eq(row_winner_loses_to(s3))]
        merged, x.fresh = Signal(), Signal()     # (fresh: set by _control)
        fresh = x.fresh
        take = Signal()
        m.d.comb += take.eq(s3_valid & (fresh | ~Mux(merged, beats_s3, beats_best)))
        m.d.sync += merged.eq(take)
        # whether the token joins best's cluster, registered with it
        with m.If(take):
            joins = s3.joins
            m.d.sync += [x.best.eq(s3), x.join.eq(joins),
                         x.best_row0.eq(s3.rank.key[x.lane_log:x.wlog] == 0),
                         x.best_lanes.eq(Const(1, len(x.best_lanes))
                                         << (s3.rank.key[:x.lane_log] if x.lane_log else 0)),
                         *(x.opens[l].eq(~joins & (x.cur.layer == l))
                           for l in range(self._layers))]

    @staticmethod
    def _wins(a, b):
        """Whether candidate ``a`` outranks ``b``, ``a`` scanned before ``b`` (a lower slot):
        the unsigned compare of the ranks ``{key, ~distance, eligible}``, where the keys
        ``{slot, newer}`` need only the newer bits, since slots grow in scan order and a slot
        scanned later is newer only if the earlier one is (slots below the next opening are
        the newer ones): ``a`` wins with a higher ``{eligible, ~distance}`` or, equal there,
        by being newer than ``b``; that is ``{eligible, ~distance, newer}`` of ``a`` above
        ``b``'s, one 8-bit compare (one carry chain, nothing after it) where the whole rank
        takes 18."""
        return (Cat(a.rank.key[-1], ~a.rank.dist, a.rank.elig) >
                Cat(b.rank.key[-1], ~b.rank.dist, b.rank.elig))

    @classmethod
    def _compare(cls, m, cands, name):
        """Every pair of ``cands`` (in scan order) compared once: ``{(i, k): i wins}``, i < k."""
        gt = {}
        for i in range(len(cands)):
            for k in range(i + 1, len(cands)):
                gt[i, k] = Signal(name=f"{name}_{i}_{k}")
                m.d.comb += gt[i, k].eq(cls._wins(cands[i], cands[k]))
        return gt

    @staticmethod
    def _select(m, cands, gt, name, wins_out=None):
        """The candidate that wins against every other, by the compares ``gt``
        (:meth:`_compare`), selected one-hot (the one-hot flags appended to ``wins_out``)."""
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

    def _decide(self, m, x):
        """Join or open; the output beat; the entry written back."""
        W, N = self._window, self._lanes
        wlog, fin, cur = x.wlog, x.best, x.cur
        cmax = (1 << self._count_bits) - 1
        best_elig, best_key = fin.rank.elig, fin.rank.key
        best_dist = Signal(x.dist_bits)
        m.d.comb += best_dist.eq(fin.rank.dist)
        join = x.join               # (registered with best, in _reduce)
        # a joined cluster's id: its slot in this lap of the window, or in the previous lap
        # for a slot not reopened since (slot >= r)
        cid = Signal(self._id_bits)
        m.d.comb += cid.eq(Mux(join, Cat(best_key[:wlog], Mux(best_key[wlog], x.n_cur[wlog:],
                                                              x.n_hi_m1)), x.n_cur))
        new_count = Signal(self._count_bits)
        m.d.comb += new_count.eq(Mux(join, Mux(fin.count == cmax, cmax, fin.count + 1), 1))
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
        if x.rlog:
            # (both parts registered: best's with best, the next opening's a cycle after the
            # token's start)
            r_row0 = Signal()
            m.d.sync += r_row0.eq(x.r[x.lane_log:] == 0)
            m.d.comb += x.row0.eq(Mux(join, x.best_row0, r_row0))
        else:
            m.d.comb += x.row0.eq(1)
        # the entry written: a joined cluster's count, or an opened one's hash, step and count 1
        new_entry = x.new_entry
        m.d.comb += [new_entry.hash.eq(cur.hash), new_entry.step.eq(cur.step),
                     new_entry.count.eq(new_count)]
        x.w_addr = Signal(len(x.wr.addr))
        m.d.comb += x.w_addr.eq(Cat(slot_w[x.lane_log:], cur.layer[:x.layer_log]))
        # the lane written (one-hot) from registers: best's, registered with it, or the next
        # opening's, registered a cycle after the token's start (as r_row0)
        x.r_lanes = Signal(N)
        m.d.sync += x.r_lanes.eq(Const(1, N) << (x.r[:x.lane_log] if x.lane_log else 0))
        m.d.comb += x.commit_lanes.eq(Mux(join, x.best_lanes, x.r_lanes))

    def _row_addr(self, x, row, layer):
        """The window memory's address of ``row`` of ``layer``'s context."""
        row = Cat(row, Const(0, x.rlog))          # (at least rlog bits wide)
        parts = ([row[:x.rlog]] if x.rlog else []) + ([layer[:x.layer_log]] if x.layer_log
                                                      else [])
        return Cat(*parts) if parts else Const(0, 1)

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
        hdr_i = data.View(self.header_layout, self.i_ctxd.payload[:self.header_layout.size])
        n = Signal(self._id_bits)
        m.d.comb += n.eq(x.n_open[cmd.layer])
        rem = Signal(range(W + 1))          # the image's entries still to move
        ci = Signal(range(W + 1))           # the entry being moved
        row = Signal(max(1, x.rlog))
        m.d.comb += row.eq(ci[x.lane_log:] if x.rlog else 0)
        addr = Cat(row[:x.rlog], lay) if x.rlog else lay
        # the FSM's moves read flags set a cycle ahead, not compares of the counters: no
        # entry to move (rem == 0), one left (rem == 1), ci the last lane of its row
        rem_none, rem_one, ci_row_end = Signal(), Signal(), Signal()
        w_one = Const(int(W == 1), 1)
        # o_ctx's payload is chosen by a register (the header's cycle), not by the FSM's
        # state: the header, else the entry ci's lane of p1 (applied after the FSM, _control)
        x_hdr = Signal()
        hdr_word = Signal(self.header_layout)
        m.d.comb += [hdr_word.n_open.eq(Mux(bad, 0, n)),
                     hdr_word.last_step.eq(Mux(bad, 0, x.last_step[cmd.layer]))]
        lane = ci[:x.lane_log] if x.lane_log else Const(0, 1)
        x.ctx_payload = Mux(x_hdr, hdr_word.as_value(),
                            x.p1_row.as_value().word_select(lane, self.entry_layout.size))

        def start(count, refused=Const(0, 1)):
            # the image's length: min(count, W) entries, none if refused
            m.d.sync += [rem.eq(Mux(refused, 0, Mux(count >= W, W, count))),
                         rem_one.eq(~refused & Mux(count >= W, w_one, count == 1))]

        # ci's lane (one-hot, rotated with ci) and whether a LOAD's entries are written (the
        # FSM is in X_LOAD and the layer is not refused), so the write's enables come from
        # registers (written in _control, after the FSM), not from the state's decode
        x.ci_lane, x.loading = Signal(N, init=1), Signal()
        x.ld_addr = addr
        x.ld_entry = data.View(self.entry_layout, self.i_ctxd.payload[:self.entry_layout.size])

        def step():
            m.d.sync += [ci.eq(ci + 1), rem.eq(rem - 1), rem_one.eq(rem == 2),
                         ci_row_end.eq((ci[:x.lane_log] == N - 2) if x.lane_log else 1),
                         x.ci_lane.eq(x.ci_lane.rotate_left(1))]
        with m.State("X_DECODE"):
            m.d.comb += [x.refuse.eq(bad), x.refuse_code.eq(3)]
            start(n, bad)
            m.d.sync += [ci.eq(0), rem_none.eq(bad | (n == 0)), ci_row_end.eq(N == 1),
                         x.ci_lane.eq(1)]
            with m.Switch(cmd.op):
                with m.Case(self.SAVE):
                    m.d.sync += x_hdr.eq(1)
                    m.next = "X_HEADER"
                with m.Case(self.LOAD):
                    m.next = "X_LOAD_HEADER"
                with m.Default():           # FLUSH (and the unused op 3)
                    with m.If(~bad):
                        m.d.sync += [x.ctx_apply.eq(1), x.ctx_n.eq(0), x.ctx_step.eq(0)]
                    self._to_idle(m, x)
        with m.State("X_HEADER"):
            m.d.comb += self.o_ctx.valid.eq(1)
            m.d.sync += x.raddr.eq(addr)            # row 0, read in X_READ
            with m.If(self.o_ctx.ready):
                m.d.sync += x_hdr.eq(0)
                m.next = "X_READ"
                with m.If(rem_none):
                    self._to_idle(m, x)
        with m.State("X_READ"):
            # the row of entry ci (raddr): its data on the port the next cycle, in p1 the
            # cycle after
            m.next = "X_WAIT"
        with m.State("X_WAIT"):
            m.next = "X_WAIT_P0"
        with m.State("X_WAIT_P0"):
            m.next = "X_SAVE"
        with m.State("X_SAVE"):
            m.d.comb += self.o_ctx.valid.eq(1)
            with m.If(self.o_ctx.ready):
                step()
                with m.If(rem_one):
                    self._to_idle(m, x)
                with m.Elif(ci_row_end):
                    m.next = "X_READ"
                    m.d.sync += x.raddr.eq(self._row_addr(x, row + 1, lay))
        with m.State("X_LOAD_HEADER"):
            m.d.comb += self.i_ctxd.ready.eq(1)
            with m.If(self.i_ctxd.valid):
                hn = hdr_i.n_open
                start(hn)
                with m.If(~bad):
                    m.d.sync += [x.ctx_apply.eq(1), x.ctx_n.eq(hn),
                                 x.ctx_step.eq(hdr_i.last_step)]
                with m.If(hn == 0):
                    self._to_idle(m, x)
                with m.Else():
                    m.d.sync += x.loading.eq(~bad)
                    m.next = "X_LOAD"
        with m.State("X_LOAD"):
            m.d.comb += self.i_ctxd.ready.eq(1)
            with m.If(self.i_ctxd.valid):
                step()
                with m.If(rem_one):
                    m.d.sync += x.loading.eq(0)
                    self._to_idle(m, x)

    @staticmethod
    def _to_idle(m, x):
        """Return the FSM to IDLE, setting the registered ``idle`` flag (_control) with it."""
        m.d.sync += x.idle.eq(1)
        m.next = "IDLE"

    def _control(self, m, x):
        """The token sequencer (IDLE, SCAN, DECIDE), the context commands, the commit and the
        counters."""
        perf = self.perf
        nxt, cur = x.nxt, x.cur
        x.c_cmd = Signal(self.ctx_layout)

        # The sequencer's decisions come from registers, so that the clock enables of the
        # next token's registers (a few hundred) hang off one LUT: ``idle`` (the FSM is in
        # IDLE) and ``ready`` (it is in DECIDE with the token's rows drained from the scan)
        # are registered beside the FSM's state, each set as the FSM enters its state.
        x.idle, x.ready = idle, ready = Signal(init=1), Signal()
        commit = Signal()
        m.d.comb += commit.eq(ready & self.o.ready)
        x.more = Signal()       # in SCAN: a row is issued this cycle (beat < beats)
        start = Signal()        # the buffered token becomes the current one
        m.d.comb += start.eq(x.nxt_valid & (idle | commit))
        m.d.sync += x.fresh.eq(start)       # (best empty: the next row's winner takes it)
        with m.If(start):
            # (best and the decision as for a token that sees no cluster: it opens one). Its
            # layer's clusters and rows come from the layer's registers, or, after a decision
            # that opens a cluster of the same layer, from the counts the decision leaves
            m.d.sync += [*(x.opens[l].eq(nxt.layer == l) for l in range(self._layers)),
                         cur.eq(nxt), x.nxt_valid.eq(0), x.best.rank.eq(0), x.join.eq(0),
                         x.token.eq(Mux(nxt.first, 0, x.token + 1)),
                         x.beat.eq(commit)]            # (row 0 issued now, after a decision)
            grown = Signal()
            same = (nxt.layer == cur.layer) if x.layer_log else Const(1)
            m.d.comb += grown.eq(commit & ~x.join & same)
            m.d.sync += [x.n_cur.eq(Mux(grown, x.n_p1, x.n_open[nxt.layer])),
                         x.beats.eq(Mux(grown, x.beats_p1, x.beats_l[nxt.layer])),
                         # (whether the scan's first cycle issues a row: beat < beats)
                         x.more.eq(Mux(grown, x.beats_p1_gt1,
                                       Mux(commit, x.gt1_l[nxt.layer], x.nz_l[nxt.layer])))]
            with m.If(nxt.first | ~x.regs_taken):
                m.d.sync += [x.th_hd.eq(self.th_hd), x.max_age.eq(self.max_age),
                             x.age_limit.eq(self.age_limit), x.regs_taken.eq(1)]

        # the pipeline holds a row of the token (as of the next cycle: every stage's valid is
        # the one before's, a cycle late)
        busy_rows = Signal()
        m.d.comb += busy_rows.eq(x.issue | x.s1_valid | x.p0_valid | x.p1_valid |
                                 x.p2_valid | x.s2_valid | x.s2a_valid | x.s2b_valid)
        m.d.sync += [idle.eq(0), ready.eq(0)]
        # a FLUSH's or a LOAD's new header (clusters, last step) reaches the layer's registers
        # a cycle later (registered, for the clock; no token can start or be checked before)
        x.ctx_apply = Signal()
        x.ctx_n, x.ctx_step = Signal(self._id_bits), Signal(self._step_bits)
        m.d.sync += x.ctx_apply.eq(0)
        with m.If(x.ctx_apply):
            for l in range(self._layers):
                with m.If(x.c_cmd.layer == l):
                    m.d.sync += [x.n_open[l].eq(x.ctx_n), x.last_step[l].eq(x.ctx_step),
                                 x.beats_l[l].eq(self._rows_of(x.ctx_n)),
                                 x.nz_l[l].eq(x.ctx_n != 0),
                                 x.gt1_l[l].eq((x.ctx_n > self._lanes) if x.rows > 1 else 0)]
        with m.FSM() as fsm:
            with m.State("IDLE"):
                m.d.sync += [idle.eq(1),
                             x.raddr.eq(self._row_addr(x, Const(0, 1), x.nxt_layer))]
                with m.If(x.nxt_valid):
                    m.d.sync += idle.eq(0)
                    m.next = "SCAN"
                with m.Elif(self.i_ctx.valid & ~self.i.valid & ~x.inb_valid):
                    # a context command, between tokens (a waiting token goes first)
                    m.d.comb += self.i_ctx.ready.eq(1)
                    m.d.sync += [x.c_cmd.eq(self.i_ctx.payload), idle.eq(0)]
                    m.next = "X_DECODE"
            self._context_states(m, x)
            with m.State("SCAN"):
                m.d.sync += perf.busy.eq(perf.busy + 1)
                with m.If(x.more):
                    m.d.comb += x.issue.eq(1)
                    m.d.sync += [x.beat.eq(x.beat + 1), x.more.eq(x.beat + 1 < x.beats),
                                 x.raddr.eq(self._row_addr(x, x.beat + 1, cur.layer))]
                with m.Else():
                    m.d.sync += [x.raddr.eq(self._row_addr(x, Const(0, 1), x.nxt_layer)),
                                 ready.eq(~busy_rows)]
                    m.next = "DECIDE"
            with m.State("DECIDE"):
                m.d.sync += perf.busy.eq(perf.busy + 1)
                m.d.comb += self.o.valid.eq(ready)
                with m.If(ready & ~self.o.ready):
                    m.d.sync += perf.stalled.eq(perf.stalled + 1)
                m.d.sync += [x.raddr.eq(self._row_addr(x, Const(0, 1), x.nxt_layer)),
                             ready.eq(~commit & ~busy_rows)]
                with m.If(commit):
                    with m.If(x.nxt_valid):
                        # the next token's row 0 read now (the buffered token's layer)
                        m.d.comb += [x.spec.eq(1), x.issue.eq(1)]
                        m.d.sync += x.raddr.eq(self._row_addr(x, Const(1, 2), nxt.layer))
                        m.next = "SCAN"
                    with m.Else():
                        self._to_idle(m, x)
        m.d.comb += self.o_ctx.payload.eq(x.ctx_payload)
        m.d.comb += x.ctx_busy.eq(fsm.ongoing("X_DECODE") | fsm.ongoing("X_HEADER") |
                                  fsm.ongoing("X_READ") | fsm.ongoing("X_WAIT") |
                                  fsm.ongoing("X_WAIT_P0") | fsm.ongoing("X_SAVE") |
                                  fsm.ongoing("X_LOAD_HEADER") | fsm.ongoing("X_LOAD"))
        with m.If(x.ctx_busy):
            m.d.sync += perf.busy.eq(perf.busy + 1)
        with m.If(x.loading & self.i_ctxd.valid):        # (X_LOAD: ready is 1 there)
            m.d.sync += [x.wq_addr.eq(x.ld_addr), x.wq_entry.eq(x.ld_entry),
                         x.wq_en.eq(x.ci_lane), x.wq_ken.eq(x.ci_lane), x.wq_any.eq(1)]
        with m.If(commit):
            m.d.sync += [x.wq_addr.eq(x.w_addr), x.wq_entry.eq(x.new_entry),
                         x.wq_en.eq(x.commit_lanes), x.wq_any.eq(1),
                         x.wq_ken.eq(Mux(x.join, 0, x.r_lanes))]
            for l in range(self._layers):
                with m.If(x.opens[l]):
                    m.d.sync += [x.n_open[l].eq(x.n_p1), x.beats_l[l].eq(x.beats_p1),
                                 x.nz_l[l].eq(1), x.gt1_l[l].eq(x.beats_p1_gt1)]
        # the counters a cycle after the decision (n_valid is still the token's then)
        counted, counted_join = Signal(), Signal()
        m.d.sync += [counted.eq(commit), counted_join.eq(x.join)]
        with m.If(counted):
            m.d.sync += perf.comparisons.eq(perf.comparisons + x.n_valid)
            with m.If(counted_join):
                m.d.sync += perf.joined.eq(perf.joined + 1)
            with m.Else():
                m.d.sync += perf.opened.eq(perf.opened + 1)
