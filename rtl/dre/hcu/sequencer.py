"""The HCU's sequencer: a token's start, its scan and decision, and the context commands."""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...lib import copies, counter_layout
from .signatures import WriteSignature
from .tokens import beyond

__all__ = ["HcuSequencer", "SAVE", "LOAD", "FLUSH"]

SAVE, LOAD, FLUSH = 0, 1, 2          # context commands on ``i_ctx`` (``op``)
COUNTERS = ("busy", "stalled", "comparisons", "opened", "joined")
LANE_COPIES = 4                 # registers that select a SAVE's entry from its row


class HcuSequencer(wiring.Component):
    """The token sequencer (IDLE, SCAN, DECIDE) and the context commands (``SAVE`` streams a
    layer's context image out on ``o_ctx``, ``LOAD`` writes one taken from ``i_ctxd``,
    ``FLUSH`` empties the layer), with each layer's cluster counter and the rows its tokens
    read.

    A token starts (``start``) from the buffer (``nxt``) when the unit is idle or as the
    previous token commits; its rows are issued one a cycle (``issue``, the window's read
    address ``raddr`` a register set a cycle ahead); once they have left the scan
    (``rows_busy``) its decision is offered on ``o`` (``o_valid``) and commits when taken
    (``commit``), which also reads the next token's row 0 (``spec``). Timing: a token whose
    layer holds n clusters takes ``max(1, ceil(min(n, window) / lanes)) + 8`` cycles, ``o``
    ready and the next token waiting. The decisions come from registers (``idle``: the FSM
    in IDLE; ``ready``: in DECIDE with the token's rows drained), so the clock enables of the
    next token's registers hang off one LUT."""

    def __init__(self, *, entry, token_layout, ctx_layout, header_layout, ctx_bits: int,
                 lanes: int, window: int, layers: int, layer_bits: int, n_hp: int,
                 step_bits: int, id_bits: int, token_bits: int, dist_bits: int,
                 addr_bits: int, counter_bits: int, count_bits: int):
        self._entry, self._header = entry, header_layout
        self._lanes, self._window, self._layers = lanes, window, layers
        self._step_bits, self._id_bits, self._token_bits = step_bits, id_bits, token_bits
        self._rows = window // lanes
        self._wlog, self._rlog = exact_log2(window), exact_log2(self._rows)
        self._lane_log, self._layer_log = exact_log2(lanes), (layers - 1).bit_length()
        self.perf_layout = counter_layout(COUNTERS, counter_bits)
        beat_bits = self._rlog if self._rlog else 1
        super().__init__({
            "nxt": In(token_layout), "nxt_valid": In(1), "inb_valid": In(1),
            "nxt_layer": In(layer_bits), "i_valid": In(1),
            "reg_th_hd": In(dist_bits), "reg_max_age": In(step_bits), "reg_age_limit": In(1),
            "reg_cluster_cap": In(count_bits),
            "ctx_cmd": In(stream.Signature(ctx_layout)),
            "ctx_in": In(stream.Signature(ctx_bits)),
            "ctx_out": Out(stream.Signature(ctx_bits)),
            "o_valid": Out(1), "o_ready": In(1),
            "join": In(1), "opens": In(layers), "rows_busy": In(1),
            "row": In(data.ArrayLayout(entry, lanes)),
            "ctx_last_step": In(step_bits),
            "raddr": Out(addr_bits), "issue": Out(1), "rd_row": Out(beat_bits),
            "spec": Out(1), "start": Out(1), "fresh": Out(1), "commit": Out(1),
            "cur": Out(token_layout), "token": Out(token_bits, init=(1 << token_bits) - 1),
            "n_cur": Out(id_bits), "n_hi_m1": Out(id_bits - self._wlog),
            "th_hd_r": Out(dist_bits), "max_age_r": Out(step_bits), "age_limit_r": Out(1),
            "cluster_cap_r": Out(count_bits),
            "ctx_busy": Out(1), "refuse": Out(1),
            "ctx_apply": Out(1), "ctx_layer": Out(layer_bits), "ctx_step": Out(step_bits),
            "w_load": Out(WriteSignature(entry, lanes, addr_bits)),
            "counts": Out(self.perf_layout),
        })

    def elaborate(self, platform):
        m = Module()
        s = _State(self)
        self._layer_table(m, s)
        self._starts(m, s)
        with m.FSM() as fsm:
            self._idle_state(m, s)
            self._context_states(m, s)
            self._scan_states(m, s)
        m.d.comb += self.ctx_busy.eq(Cat(*(fsm.ongoing(k) for k in _CTX_STATES)).any())
        self._writes_and_counts(m, s)
        return m


    def _row_addr(self, row, layer):
        """The window memory's address of ``row`` of ``layer``'s context."""
        rlog, layer_log = self._rlog, self._layer_log
        row = Cat(row, Const(0, rlog))            # (at least rlog bits wide)
        parts = ([row[:rlog]] if rlog else []) + ([layer[:layer_log]] if layer_log else [])
        return Cat(*parts) if parts else Const(0, 1)

    def _rows_of(self, n):
        """The rows a token reads when its layer holds ``n`` clusters."""
        W, N = self._window, self._lanes
        return Mux(n >= W, W // N, (n + N - 1) >> exact_log2(N))

    @staticmethod
    def _to_idle(m, s):
        """Return the FSM to IDLE, setting the registered ``idle`` flag with it."""
        m.d.sync += s.idle.eq(1)
        m.next = "IDLE"

    def _layer_table(self, m, s):
        """What follows from the current token's layer a cycle after its start (the counter
        if it opens a cluster, the rows then, the entries it compares: from three registers,
        the window a power of two: n >= W is "a bit above the window's is set", and the rows
        of n + 1 clusters, min(ceil((n + 1) / N), W / N), are n's row + 1 unless n >= W - 1;
        all read at the token's decision at the earliest); a FLUSH's or a LOAD's new header
        into its layer's registers a cycle after the command's decision."""
        W, rows, wlog, lane_log = self._window, self._rows, self._wlog, self._lane_log
        n_cur = self.n_cur
        full, low_all, row_nz = Signal(), Signal(), Signal()
        row_p1 = Signal.like(s.beats_p1)
        m.d.sync += [full.eq(n_cur[wlog:].any()), low_all.eq(n_cur[:wlog].all()),
                     row_p1.eq(n_cur[lane_log:wlog] + 1),
                     row_nz.eq(n_cur[lane_log:wlog].any())]
        m.d.sync += [s.n_valid.eq(Mux(full, W, n_cur)), s.n_p1.eq(n_cur + 1),
                     s.beats_p1.eq(Mux(full | low_all, rows, row_p1)),
                     s.beats_p1_gt1.eq(Mux(full | low_all, rows > 1, row_nz)),
                     self.n_hi_m1.eq(n_cur[wlog:] - 1)]
        m.d.comb += self.ctx_layer.eq(s.c_cmd.layer)
        m.d.sync += self.ctx_apply.eq(0)
        with m.If(self.ctx_apply):
            for l in range(self._layers):
                with m.If(s.c_cmd.layer == l):
                    m.d.sync += [s.n_open[l].eq(s.ctx_n),
                                 s.beats_l[l].eq(self._rows_of(s.ctx_n)),
                                 s.nz_l[l].eq(s.ctx_n != 0),
                                 s.gt1_l[l].eq((s.ctx_n > self._lanes) if rows > 1 else 0)]

    def _starts(self, m, s):
        """A token's start: the buffered token becomes the current one, with its layer's
        clusters and rows from the layer's registers or, after a decision that opens a
        cluster of the same layer, from the counts the decision leaves."""
        nxt, cur = self.nxt, self.cur
        m.d.comb += [self.commit.eq(s.ready & self.o_ready),
                     self.start.eq(self.nxt_valid & (s.idle | self.commit)),
                     self.rd_row.eq(Mux(self.spec, 0, s.beat))]
        m.d.sync += self.fresh.eq(self.start)   # (best empty: the next row's winner takes it)
        with m.If(self.start):
            m.d.sync += [cur.eq(nxt), self.token.eq(Mux(nxt.first, 0, self.token + 1)),
                         s.beat.eq(self.commit)]   # (row 0 issued now, after a decision)
            grown = Signal()
            same = (nxt.layer == cur.layer) if self._layer_log else Const(1)
            m.d.comb += grown.eq(self.commit & ~self.join & same)
            m.d.sync += [self.n_cur.eq(Mux(grown, s.n_p1, s.n_open[nxt.layer])),
                         s.beats.eq(Mux(grown, s.beats_p1, s.beats_l[nxt.layer])),
                         # (whether the scan's first cycle issues a row: beat < beats)
                         s.more.eq(Mux(grown, s.beats_p1_gt1,
                                       Mux(self.commit, s.gt1_l[nxt.layer],
                                           s.nz_l[nxt.layer])))]
            # the run-time registers, taken with a run's first token (and the first token
            # after reset), so a change while tokens are in flight applies from the next run
            with m.If(nxt.first | ~s.regs_taken):
                m.d.sync += [self.th_hd_r.eq(self.reg_th_hd), self.max_age_r.eq(self.reg_max_age),
                             self.age_limit_r.eq(self.reg_age_limit),
                             self.cluster_cap_r.eq(self.reg_cluster_cap), s.regs_taken.eq(1)]
        m.d.sync += [s.idle.eq(0), s.ready.eq(0)]

    def _idle_state(self, m, s):
        with m.State("IDLE"):
            m.d.sync += [s.idle.eq(1),
                         self.raddr.eq(self._row_addr(Const(0, 1), self.nxt_layer))]
            with m.If(self.nxt_valid):
                m.d.sync += s.idle.eq(0)
                m.next = "SCAN"
            with m.Elif(self.ctx_cmd.valid & ~self.i_valid & ~self.inb_valid):
                # a context command, between tokens (a waiting token goes first)
                m.d.comb += self.ctx_cmd.ready.eq(1)
                m.d.sync += [s.c_cmd.eq(self.ctx_cmd.payload), s.idle.eq(0)]
                m.next = "X_DECODE"

    def _scan_states(self, m, s):
        perf, cur, nxt = self.counts, self.cur, self.nxt
        # the pipeline holds a row of the token (as of the next cycle: every stage's valid
        # is the one before's, a cycle late)
        busy_rows = Signal()
        m.d.comb += busy_rows.eq(self.issue | self.rows_busy)
        with m.State("SCAN"):
            m.d.sync += perf.busy.eq(perf.busy + 1)
            with m.If(s.more):
                m.d.comb += self.issue.eq(1)
                m.d.sync += [s.beat.eq(s.beat + 1), s.more.eq(s.beat + 1 < s.beats),
                             self.raddr.eq(self._row_addr(s.beat + 1, cur.layer))]
            with m.Else():
                m.d.sync += [self.raddr.eq(self._row_addr(Const(0, 1), self.nxt_layer)),
                             s.ready.eq(~busy_rows)]
                m.next = "DECIDE"
        with m.State("DECIDE"):
            m.d.sync += perf.busy.eq(perf.busy + 1)
            m.d.comb += self.o_valid.eq(s.ready)
            with m.If(s.ready & ~self.o_ready):
                m.d.sync += perf.stalled.eq(perf.stalled + 1)
            m.d.sync += [self.raddr.eq(self._row_addr(Const(0, 1), self.nxt_layer)),
                         s.ready.eq(~self.commit & ~busy_rows)]
            with m.If(self.commit):
                with m.If(self.nxt_valid):
                    # the next token's row 0 read now (the buffered token's layer)
                    m.d.comb += [self.spec.eq(1), self.issue.eq(1)]
                    m.d.sync += self.raddr.eq(self._row_addr(Const(1, 2), nxt.layer))
                    m.next = "SCAN"
                with m.Else():
                    self._to_idle(m, s)


    def _context_states(self, m, s):
        """``SAVE`` streams a layer's context image out on ``o_ctx`` (a header word: clusters
        opened, last step; then the ``min(opened, window)`` entries in slot order), ``LOAD``
        writes one taken from ``i_ctxd``, ``FLUSH`` empties the layer (no clusters, step 0).
        A layer beyond the contexts is refused (error 3): a ``SAVE`` then sends an empty
        image (a zero header), a ``LOAD`` consumes its image and changes nothing."""
        N = self._lanes
        mv = _Move(self, m, s)
        cmd, bad = s.c_cmd, mv.bad
        with m.State("X_DECODE"):
            m.d.comb += self.refuse.eq(bad)
            mv.start(mv.n, bad)
            mv.restart()
            m.d.sync += [mv.ci.eq(0), mv.rem_none.eq(bad | (mv.n == 0)),
                         mv.ci_row_end.eq(N == 1), s.ci_lane.eq(1)]
            with m.Switch(cmd.op):
                with m.Case(SAVE):
                    m.d.sync += s.x_hdr.eq(1)
                    m.next = "X_HEADER"
                with m.Case(LOAD):
                    m.next = "X_LOAD_HEADER"
                with m.Default():           # FLUSH (and the unused op 3)
                    with m.If(~bad):
                        m.d.sync += [self.ctx_apply.eq(1), s.ctx_n.eq(0),
                                     self.ctx_step.eq(0)]
                    self._to_idle(m, s)
        with m.State("X_HEADER"):
            m.d.comb += self.ctx_out.valid.eq(1)
            m.d.sync += self.raddr.eq(mv.addr)              # row 0, read in X_READ
            with m.If(self.ctx_out.ready):
                m.d.sync += s.x_hdr.eq(0)
                m.next = "X_READ"
                with m.If(mv.rem_none):
                    self._to_idle(m, s)
        # X_READ: the row of entry ci (raddr): its data on the port the next cycle, in p1
        # (``row``) three cycles after
        with m.State("X_READ"):
            m.next = "X_WAIT"
        with m.State("X_WAIT"):
            m.next = "X_WAIT_P0"
        with m.State("X_WAIT_P0"):
            m.next = "X_SAVE"
        with m.State("X_SAVE"):
            m.d.comb += self.ctx_out.valid.eq(1)
            with m.If(self.ctx_out.ready):
                mv.step()
                with m.If(mv.rem_one):
                    self._to_idle(m, s)
                with m.Elif(mv.ci_row_end):
                    m.next = "X_READ"
                    m.d.sync += self.raddr.eq(self._row_addr(mv.row + 1, mv.lay))
        with m.State("X_LOAD_HEADER"):
            m.d.comb += self.ctx_in.ready.eq(1)
            with m.If(self.ctx_in.valid):
                hn = mv.hdr_i.n_open
                mv.start(hn)
                with m.If(~bad):
                    m.d.sync += [self.ctx_apply.eq(1), s.ctx_n.eq(hn),
                                 self.ctx_step.eq(mv.hdr_i.last_step)]
                with m.If(hn == 0):
                    self._to_idle(m, s)
                with m.Else():
                    m.d.sync += s.loading.eq(~bad)
                    m.next = "X_LOAD"
        with m.State("X_LOAD"):
            m.d.comb += self.ctx_in.ready.eq(1)
            with m.If(self.ctx_in.valid):
                mv.step()
                with m.If(mv.rem_one):
                    m.d.sync += s.loading.eq(0)
                    self._to_idle(m, s)

    def _writes_and_counts(self, m, s):
        """A LOAD's entry written; a commit's layer counters; the counters a cycle after
        the decision (n_valid is still the token's then)."""
        perf = self.counts
        with m.If(self.ctx_busy):
            m.d.sync += perf.busy.eq(perf.busy + 1)
        w = self.w_load
        m.d.comb += [w.valid.eq(s.loading & self.ctx_in.valid),       # (X_LOAD: ready is 1)
                     w.addr.eq(s.ld_addr), w.en.eq(s.ci_lane), w.ken.eq(s.ci_lane),
                     w.entry.eq(self.ctx_in.payload[:self._entry.size])]
        with m.If(self.commit):
            for l in range(self._layers):
                with m.If(self.opens[l]):
                    m.d.sync += [s.n_open[l].eq(s.n_p1), s.beats_l[l].eq(s.beats_p1),
                                 s.nz_l[l].eq(1), s.gt1_l[l].eq(s.beats_p1_gt1)]
        counted, counted_join = Signal(), Signal()
        m.d.sync += [counted.eq(self.commit), counted_join.eq(self.join)]
        with m.If(counted):
            m.d.sync += perf.comparisons.eq(perf.comparisons + s.n_valid)
            with m.If(counted_join):
                m.d.sync += perf.joined.eq(perf.joined + 1)
            with m.Else():
                m.d.sync += perf.opened.eq(perf.opened + 1)


_CTX_STATES = ("X_DECODE", "X_HEADER", "X_READ", "X_WAIT", "X_WAIT_P0", "X_SAVE",
               "X_LOAD_HEADER", "X_LOAD")


class _State:
    """The sequencer's own registers, made once and read by its sections."""

    def __init__(self, seq: "HcuSequencer"):
        rows, layers = seq._rows, range(seq._layers)
        # per layer: clusters opened, the rows a token reads and whether they are at least
        # one, more than one (a token's first scan cycle then knows from registers whether it
        # issues a row)
        self.n_open = Array(Signal(seq._id_bits, name=f"n_open_{l}") for l in layers)
        self.beats_l = Array(Signal(range(rows + 1), name=f"beats_{l}") for l in layers)
        self.nz_l = Array(Signal(name=f"beats_nz_{l}") for l in layers)
        self.gt1_l = Array(Signal(name=f"beats_gt1_{l}") for l in layers)
        # the current token's rows, the entries it compares (min(n, window)), its layer's
        # clusters if it opens one and the rows then (and whether those are more than one)
        self.beats = Signal(range(rows + 1))
        self.n_valid = Signal(range(seq._window + 1))
        self.n_p1 = Signal(seq._id_bits)
        self.beats_p1 = Signal(range(rows + 1))
        self.beats_p1_gt1 = Signal()
        self.beat = Signal(range(rows + 1))     # the next row a scan reads
        self.more = Signal()                    # in SCAN: a row is issued this cycle
        self.idle = Signal(init=1)              # the FSM is in IDLE (registered)
        self.ready = Signal()                   # in DECIDE, the token's rows drained
        self.regs_taken = Signal()              # the run-time registers taken since reset
        self.c_cmd = Signal(seq.ctx_cmd.payload.shape())      # the context command running
        self.loading = Signal()                 # a LOAD's entries are written
        self.ci_lane = Signal(seq._lanes, init=1)   # the lane a LOAD's entry goes to
        self.x_hdr = Signal()                   # o_ctx carries the header (a register)
        self.ctx_n = Signal(seq._id_bits)       # a FLUSH's or a LOAD's clusters
        self.ld_addr = Signal(len(seq.raddr))   # the row a LOAD's entry goes to


class _Move:
    """A context image on its way (a ``SAVE`` out, a ``LOAD`` in): the entries still to
    move, the entry moving, its row's address, and the flags the FSM reads, set a cycle
    ahead (no entry to move, one left, the entry the last lane of its row)."""

    def __init__(self, seq: HcuSequencer, m, s: _State):
        N, W, lane_log, rlog = seq._lanes, seq._window, seq._lane_log, seq._rlog
        self.m, self.s, self.lanes, self.window = m, s, N, W
        cmd = s.c_cmd
        self.bad = beyond(m, cmd.layer, seq._layers)
        self.lay = cmd.layer[:seq._layer_log] if seq._layer_log else Const(0, 1)
        self.hdr_i = data.View(seq._header, seq.ctx_in.payload[:seq._header.size])
        self.n = Signal(seq._id_bits)
        m.d.comb += self.n.eq(s.n_open[cmd.layer])
        self.rem = Signal(range(W + 1))         # the image's entries still to move
        self.ci = Signal(range(W + 1))          # the entry being moved
        self.row = Signal(max(1, rlog))
        m.d.comb += self.row.eq(self.ci[lane_log:] if rlog else 0)
        self.addr = Cat(self.row[:rlog], self.lay) if rlog else self.lay
        m.d.comb += s.ld_addr.eq(self.addr)
        self.rem_none, self.rem_one, self.ci_row_end = Signal(), Signal(), Signal()
        self.w_one = Const(int(W == 1), 1)
        self.lane_log = lane_log
        # o_ctx's payload is chosen by a register (the header's cycle), not by the FSM's
        # state: the header, else the entry ci's lane of the row in p1
        hdr_word = Signal(seq._header)
        m.d.comb += [hdr_word.n_open.eq(Mux(self.bad, 0, self.n)),
                     hdr_word.last_step.eq(Mux(self.bad, 0, seq.ctx_last_step))]
        m.d.comb += seq.ctx_out.payload.eq(Mux(s.x_hdr, hdr_word.as_value(),
                                             self._entry_word(m, seq)))

    def _entry_word(self, m, seq):
        """Entry ci's lane of the row in p1. The lane is ``ci``'s low bits, taken from copies
        of them (each loaded with ``ci``'s next low bits, so equal to them), each copy
        selecting a share of the word's bits: the select of a 16-lane row fans out to every
        bit of the word, and one register placed far from the multiplexer left too little of
        the cycle for it."""
        E, lane_log = seq._entry.size, self.lane_log
        row = seq.row.as_value()
        if not lane_log:
            return row[:E]
        self.lane_next = Signal(lane_log)
        m.d.comb += self.lane_next.eq(self.ci[:lane_log])        # (held; moved in step)
        k = min(LANE_COPIES, E)
        sel = copies(m, self.lane_next, k, "ctx_lane")
        cuts = [E * g // k for g in range(k + 1)]
        return Cat(row.word_select(sel[g], E)[cuts[g]:cuts[g + 1]] for g in range(k))

    def restart(self):
        """ci back to entry 0 (its lane copies with it)."""
        if self.lane_log:
            self.m.d.comb += self.lane_next.eq(0)

    def start(self, count, refused=Const(0, 1)):
        """The image's length: min(count, window) entries, none if refused."""
        W = self.window
        self.m.d.sync += [self.rem.eq(Mux(refused, 0, Mux(count >= W, W, count))),
                          self.rem_one.eq(~refused & Mux(count >= W, self.w_one, count == 1))]

    def step(self):
        N, lane_log = self.lanes, self.lane_log
        if lane_log:
            self.m.d.comb += self.lane_next.eq(self.ci[:lane_log] + 1)
        self.m.d.sync += [self.ci.eq(self.ci + 1), self.rem.eq(self.rem - 1),
                          self.rem_one.eq(self.rem == 2),
                          self.ci_row_end.eq((self.ci[:lane_log] == N - 2) if lane_log else 1),
                          self.s.ci_lane.eq(self.s.ci_lane.rotate_left(1))]
