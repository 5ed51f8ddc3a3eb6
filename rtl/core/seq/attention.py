"""The sequencer's attention phase: a KV head's light attention over its sinks, its selected
clusters' fetched tokens and the step's own tokens, whole or in chunks."""
from __future__ import annotations

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...attn.engine import SPAN_BITS, Kind, Part
from ...kvmu.kvmu import KvMemoryManager
from .common import (ERR, SRC_DMA, SRC_KV, A, B, Tap, descriptor_layout, offer, walk_layout)
from .counts import _leave, _raise

__all__ = ["AttentionPhase"]


class AttentionPhase(wiring.Component):
    """A KV head's light attention (``H_ATTEND`` .. ``H_ATT_WAIT``): the engine's ``ATTEND``
    command over the attended set (the sinks, the selected clusters' past tokens, the step's
    own tokens; K and V in pairs), the fetched clusters (``FETCH`` by candidate index,
    straight from the KVMU's ``o_kv`` into B: the B source turned to the fetches with the
    beats due), the sink rows and the step's own rows (read-DMA programs), then the query
    rows. While the engine attends, the next head's candidate list runs ahead in the KVMU
    (``pre_issue``; after a descriptor's last head, the queued descriptor's first head's,
    ``next_desc``, if it is of another layer and within ``core_max_tokens`` and the order is
    ``select_first``: ``ahead``). A fetch delivers the clusters' members from steps before
    the descriptor's (``past``): in the cluster-first order the step's own have joined.
    A set longer than B goes in chunks (``L_*``, :meth:`_chunked`). A fetch's end beat
    (``kv``) reports a stale fetch or a read error the KVMU raised before it.

    Latency: the head ends once the engine's last output row is out and written
    (``attn_last``, ``out_idle``) and the list ahead is in."""

    def __init__(self, cfg, *, phase, kv_layout, kv_lg: int, idx_bits: int):
        self._cfg, self._kv_lg = cfg, kv_lg
        cb, n = cfg.count_bits, cfg.attn_n
        super().__init__({
            "ctl": Out(phase), "dsc": In(descriptor_layout()),
            "walk": In(walk_layout(cfg.kvmu_addr_bits)),
            "next_desc": In(descriptor_layout()), "next_valid": In(1),
            "nsel": In(16), "fetched": In(24),
            "count_addr": Out(32), "count_word": In(data.ArrayLayout(cb, n)),
            "sel_addr": Out(16), "sel_data": In(idx_bits),
            "pre_issued": In(1), "pre_done": In(1), "pre_issue": Out(1), "ahead": Out(1),
            "b_src": In(2), "kerr_before": In(1), "kv": In(Tap(kv_layout)),
            "attn_last": In(1), "out_idle": In(1), "dma_idle": In(1), "prog_level": In(3),
        })

    def _fetch_ended(self, m):
        """A fetch's end beat (returned: it is taken this cycle) turns B's source back to the
        DMA, through the zero padding if the fetch came short, and reports its stale flag, or
        its error flag if the KVMU's error was raised before (address 0: the KVMU keeps its
        first error's)."""
        ko, req = self.kv, self.ctl.req
        end = ko.valid & ko.payload.end & ko.ready
        with m.If(end):
            m.d.comb += self.ctl.bsrc.fetch_end.eq(1)
            with m.If(ko.payload.stale):
                _raise(m, req, ERR["KV_STALE"])
            with m.Elif(ko.payload.error & self.kerr_before):
                _raise(m, req, ERR["BUS_READ"])
        return end

    def _pairs(self, m, b0, b1, rows):
        """``rows`` tokens of the head, K row then V row each, into B: one program."""
        d = self._cfg.head_dim
        offer(m, self.ctl.prog, b0=b0, b1=b1, beats=d // self._cfg.kvmu_bus_bytes,
              n_out=rows, n_in=1, s_out=d, pair=1, dest=B)

    def _sinks_and_own(self, m, sinks, own, then):
        """Two states: the head's sink tokens (none: straight on), then the step's own
        tokens, each one program of K/V pairs into B; then state ``then``."""
        w, prog = self.walk, self.ctl.prog
        with m.State(sinks):
            with m.If(w.sinks == 0):
                m.next = own
            with m.Else():
                self._pairs(m, w.ptr.sk, w.ptr.sv, w.sinks)
                with m.If(prog.ready):
                    m.next = own
        with m.State(own):
            self._pairs(m, w.ptr.k, w.ptr.v, self.dsc.step_len)
            with m.If(prog.ready):
                m.next = then

    def elaborate(self, platform):
        m = Module()
        cfg, ctl, d, w = self._cfg, self.ctl, self.dsc, self.walk
        hd, brows = cfg.head_dim, cfg.attn_b_rows
        kv_lg = self._kv_lg
        t = d.step_len
        i = Signal(16)
        attn_done = Signal()
        with m.If(self.attn_last):
            m.d.sync += attn_done.eq(1)
        # a chunked attention's place: the set's length, the row tile (its first row and
        # that row's step position), the pass (maximum or sums), the chunk (its first
        # selected cluster, the next, its tokens, the tokens before it, whether it is the
        # last: the sinks and the step's own tokens)
        lc = {"len": Signal(SPAN_BITS, name="lc_len"), "row0": Signal(16, name="lc_row0"),
              "pos0": Signal(16, name="lc_pos0"), "sums": Signal(name="lc_sums"),
              "ci0": Signal(16, name="lc_ci0"), "ci": Signal(16, name="lc_ci"),
              "clen": Signal(16, name="lc_clen"), "t0": Signal(SPAN_BITS, name="lc_t0"),
              "final": Signal(name="lc_final")}
        beta = dict(beta_m=d.beta_m, beta_shift=d.beta_shift)
        row_beats = hd // cfg.kvmu_bus_bytes
        attend_len = Signal(24)
        # a chunk's row tile: n query rows, fewer in the head's last
        tile_rows = Signal(range(cfg.attn_n + 1))
        m.d.comb += tile_rows.eq(Mux(w.rows - lc["row0"] >= cfg.attn_n, cfg.attn_n,
                                     w.rows - lc["row0"]))
        with m.FSM(name="attention"):
            with m.State("IDLE"):
                with m.If(ctl.go):
                    m.next = "H_ATTEND"
            with m.State("H_ATTEND"):
                m.d.comb += attend_len.eq(self.fetched + w.sinks + t)
                with m.If(attend_len > brows):
                    # longer than B: chunked commands, if the last chunk (the sinks and the
                    # step's own tokens) fits and the set fits a command's span
                    with m.If((w.sinks + t > brows) | (attend_len >> SPAN_BITS != 0)):
                        _raise(m, ctl.req, ERR["CORE_LIMIT"])
                        _leave(m, ctl)
                    with m.Else():
                        m.d.sync += [lc["len"].eq(attend_len), lc["row0"].eq(0),
                                     lc["pos0"].eq(0), lc["sums"].eq(0), i.eq(0)]
                        m.d.comb += [ctl.req.set_phase.eq(1), ctl.req.phase.eq(2)]
                        m.next = "L_CHECK"
                with m.Else():
                    offer(m, ctl.ecmd, kind=Kind.ATTEND, m=w.rows, k=hd, l=attend_len,
                          causal=t, pairs=1, **beta)
                    with m.If(ctl.ecmd.ready):
                        m.d.sync += [attn_done.eq(0), i.eq(0)]
                        m.d.comb += [ctl.req.set_phase.eq(1), ctl.req.phase.eq(2),
                                     ctl.bsrc.set.eq(1),
                                     ctl.bsrc.src.eq(Mux(self.nsel != 0, SRC_KV, SRC_DMA)),
                                     ctl.bsrc.load.eq(1),
                                     ctl.bsrc.left.eq(self.fetched << kv_lg)]
                        m.next = "H_ATT_SINKS"
            self._sinks_and_own(m, "H_ATT_SINKS", "H_ATT_OWN", "H_ATT_Q")
            with m.State("H_ATT_Q"):
                offer(m, ctl.prog, b0=w.ptr.q, beats=w.rows * row_beats, n_out=1, n_in=1,
                      dest=A)
                with m.If(ctl.prog.ready):
                    m.next = "H_FETCH"
            with m.State("H_FETCH"):
                m.d.comb += self.sel_addr.eq(i)
                with m.If(i == self.nsel):
                    m.next = "H_ATT_WAIT"
                with m.Else():
                    offer(m, ctl.kcmd, op=KvMemoryManager.FETCH, layer=d.layer, group=w.gi,
                          head=w.gj, owner=self.sel_data, version=d.version, first=i == 0,
                          last=i == self.nsel - 1, by_index=1, step=d.step, past=1)
                    with m.If(ctl.kcmd.ready):
                        m.d.sync += i.eq(i + 1)
            self._chunked(m, lc, i, attn_done, tile_rows)
            with m.State("H_ATT_WAIT"):
                self._fetch_ended(m)
                self._ahead(m)
                with m.If(attn_done & self.out_idle & (self.b_src == SRC_DMA) &
                          ((w.head == cfg.n_kv_heads - 1) | self.pre_done)):
                    _leave(m, ctl)
        return m

    def _ahead(self, m):
        """The overlap: once the fetches are in, the next head's counts list runs in the
        KVMU while the engine attends (the HC table is the step's, unchanged until the stores
        after the last head); after the last head, the queued descriptor's first head's, if
        it is of another layer (its table is not this descriptor's to store into) and will
        run (within core_max_tokens). The counts phase takes the list as it comes, in any
        state, until its head uses it."""
        cfg, ctl, d, w, f = self._cfg, self.ctl, self.dsc, self.walk, self.next_desc
        hpg = cfg.heads_per_group
        last_head = w.head == cfg.n_kv_heads - 1
        # (cluster first, the queued descriptor stores its step's tokens before its lists)
        ahead = self.next_valid & (f.layer != d.layer) & (f.step_len <= cfg.core_max_tokens) \
            if cfg.order == "select_first" else Const(0)
        nl = Mux(last_head, f.layer, d.layer)
        ngi = Mux(last_head, 0, Mux(w.gj == hpg - 1, w.gi + 1, w.gi))
        ngj = Mux(last_head | (w.gj == hpg - 1), 0, w.gj + 1)
        nstep = Mux(last_head, f.step, d.step)
        with m.If((~last_head | ahead) & ~self.pre_issued & (self.b_src == SRC_DMA)):
            offer(m, ctl.kcmd, op=KvMemoryManager.CAND, layer=nl, group=ngi, head=ngj,
                  step=nstep, counts=1)
            with m.If(ctl.kcmd.ready):
                m.d.comb += [self.pre_issue.eq(1), self.ahead.eq(last_head)]

    def _count_of(self, m, idx):
        """Selected cluster ``idx``'s member count (its candidate's, from the list)."""
        n = self._cfg.attn_n
        lg = exact_log2(n)
        m.d.comb += [self.sel_addr.eq(idx), self.count_addr.eq(self.sel_data >> lg)]
        return self.count_word[self.sel_data[:lg]] if n > 1 else self.count_word[0]

    def _chunked(self, m, lc, i, attn_done, tile_rows):
        """The states of a KV head's light attention over a set longer than B (``L_*``;
        docs/core.md): the set in chunks of whole selected clusters (as many as fit B,
        fetched from the KVMU) and a last chunk of the sinks and the step's own tokens (from
        memory); per row tile of n query rows, the engine's maximum's pass over the chunks,
        then its sums' pass, whose last chunk writes the tile's output rows. A selected
        cluster larger than B is refused first (``CORE_LIMIT``), before any command."""
        cfg, ctl, d, w = self._cfg, self.ctl, self.dsc, self.walk
        hd, brows = cfg.head_dim, cfg.attn_b_rows
        t, nsel = d.step_len, self.nsel
        with m.State("L_CHECK"):
            big = self._count_of(m, i) > brows
            with m.If(i == nsel):
                m.next = "L_PASS"
            with m.Elif(big):
                _raise(m, ctl.req, ERR["CORE_LIMIT"])
                _leave(m, ctl)
            with m.Else():
                m.d.sync += i.eq(i + 1)
        with m.State("L_PASS"):
            m.d.sync += [lc[k].eq(0) for k in ("ci", "ci0", "clen", "t0", "final")]
            m.next = "L_PLAN"
        with m.State("L_PLAN"):
            # whole clusters while they fit; then, after the last, the sinks and own tokens
            count = self._count_of(m, lc["ci"])
            with m.If(lc["ci"] == nsel):
                with m.If(lc["clen"] == 0):
                    m.d.sync += [lc["clen"].eq(w.sinks + t), lc["final"].eq(1)]
                m.next = "L_CMD"
            with m.Elif(lc["clen"] + count > brows):
                m.next = "L_CMD"
            with m.Else():
                m.d.sync += [lc["clen"].eq(lc["clen"] + count), lc["ci"].eq(lc["ci"] + 1)]
        with m.State("L_CMD"):
            # a chunk of fetched tokens turns B's source to the KVMU once the DMA's B jobs
            # (the last chunk's, of the pass before) are through
            with m.If(lc["final"] | (self.dma_idle & (self.prog_level == 0) &
                                     (self.b_src == SRC_DMA))):
                offer(m, ctl.ecmd, kind=Kind.ATTEND, m=tile_rows, k=hd, l=lc["clen"],
                      causal=t, pairs=1, part=Mux(lc["sums"], Part.SUM, Part.MAX),
                      first=lc["t0"] == 0, final=lc["final"], span=lc["len"] - lc["t0"],
                      pos0=lc["pos0"], row0=lc["row0"], beta_m=d.beta_m,
                      beta_shift=d.beta_shift)
                with m.If(ctl.ecmd.ready):
                    m.d.sync += attn_done.eq(0)
                    with m.If(lc["final"]):
                        m.next = "L_SINKS"
                    with m.Else():
                        m.d.sync += i.eq(lc["ci0"])
                        m.d.comb += [ctl.bsrc.set.eq(1), ctl.bsrc.src.eq(SRC_KV),
                                     ctl.bsrc.load.eq(1),
                                     ctl.bsrc.left.eq(lc["clen"] << self._kv_lg)]
                        m.next = "L_Q"
        self._chunk_moves(m, lc, i, tile_rows)

    def _chunk_moves(self, m, lc, i, tile_rows):
        """A chunk's operands (the last chunk's sinks and own tokens, the tile's query rows,
        the fetches), then the next chunk, pass or row tile."""
        cfg, ctl, d, w = self._cfg, self.ctl, self.dsc, self.walk
        n, hd = cfg.attn_n, cfg.head_dim
        t = d.step_len
        self._sinks_and_own(m, "L_SINKS", "L_OWN", "L_Q")
        with m.State("L_Q"):
            offer(m, ctl.prog, b0=w.ptr.q + lc["row0"] * hd,
                  beats=tile_rows * (hd // cfg.kvmu_bus_bytes), n_out=1, n_in=1, dest=A)
            with m.If(ctl.prog.ready):
                m.next = "L_FETCH"
        with m.State("L_FETCH"):
            m.d.comb += self.sel_addr.eq(i)
            with m.If(lc["final"]):
                m.next = "L_NEXT"
            with m.Elif(i == lc["ci"]):
                m.next = "L_FWAIT"
            with m.Else():
                offer(m, ctl.kcmd, op=KvMemoryManager.FETCH, layer=d.layer, group=w.gi,
                      head=w.gj, owner=self.sel_data, version=d.version,
                      first=i == lc["ci0"], last=i == lc["ci"] - 1, by_index=1,
                      step=d.step, past=1)
                with m.If(ctl.kcmd.ready):
                    m.d.sync += i.eq(i + 1)
        with m.State("L_FWAIT"):
            with m.If(self._fetch_ended(m)):
                m.next = "L_NEXT"
        with m.State("L_NEXT"):
            m.d.sync += [lc["t0"].eq(lc["t0"] + lc["clen"]), lc["clen"].eq(0),
                         lc["ci0"].eq(lc["ci"])]
            with m.If(~lc["final"]):
                m.next = "L_PLAN"
            with m.Elif(~lc["sums"]):
                m.d.sync += lc["sums"].eq(1)
                m.next = "L_PASS"
            with m.Elif(lc["row0"] + n < w.rows):
                m.d.sync += [lc["row0"].eq(lc["row0"] + n), lc["pos0"].eq(lc["pos0"] + n),
                             lc["sums"].eq(0)]
                m.next = "L_POS"
            with m.Else():
                m.next = "H_ATT_WAIT"
        with m.State("L_POS"):
            # the next tile's first row's step position: (row0) mod t, by subtraction
            with m.If(lc["pos0"] >= t):
                m.d.sync += lc["pos0"].eq(lc["pos0"] - t)
            with m.Else():
                m.next = "L_PASS"
