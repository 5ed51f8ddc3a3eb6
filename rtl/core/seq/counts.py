"""The sequencer's prediction phases: a KV head's candidate counts, its scoring and the WTU's
selection."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...attn.engine import Kind
from ...kvmu.kvmu import KvMemoryManager
from .common import ERR, SRC_CAND, SRC_DMA, A, Tap, descriptor_layout, offer, walk_layout

__all__ = ["CountsPhase", "ScoringPhase", "SelectionPhase"]


def _raise(m, req, code, addr=0):
    m.d.comb += [req.err_code.eq(code), req.err_addr.eq(addr)]


def _leave(m, ctl, exit_=0):
    m.d.comb += [ctl.done.eq(1), ctl.exit.eq(exit_)]
    m.next = "IDLE"


class CountsPhase(wiring.Component):
    """A KV head's candidate list, counts only (``H_COUNTS``, ``H_COUNTS_RX``): a ``CAND``
    command to the KVMU, its beats' counts into the counts memory (n a word, the last
    partial word on the list's end), their sum (``total``); then the head is scored (exit
    ``SCORE``), attends without scoring (``ATTEND``: no candidates, or a dense descriptor,
    whose selection is the whole list) or is refused (``NEXT``: more candidates than B or
    the WTU's row hold, ``CORE_LIMIT``). A list taken ahead (``pre_issue``, by the
    attention phase while the previous head attends) comes in whatever state the sequencer
    is in (``cand_take``); its head uses it. ``sel_clear``: the selection restarts.
    ``bias_*`` and ``count_*`` read the counts memory (a word by address, combinationally).

    Latency: the list's end beat decides the exit in its cycle."""

    SCORE, ATTEND, NEXT = 0, 1, 2

    def __init__(self, cfg, *, phase, cand_layout):
        self._cfg = cfg
        n, cb = cfg.attn_n, cfg.count_bits
        super().__init__({
            "ctl": Out(phase), "dsc": In(descriptor_layout()),
            "walk": In(walk_layout(cfg.kvmu_addr_bits)), "cand": In(Tap(cand_layout)),
            "cand_take": Out(1), "ncand": Out(16), "total": Out(24), "sel_clear": Out(1),
            "pre_issue": In(1), "pre_issued": Out(1), "pre_done": Out(1),
            "bias_addr": In(16), "bias_word": Out(data.ArrayLayout(cb, n)),
            "count_addr": In(32), "count_word": Out(data.ArrayLayout(cb, n)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, ctl = self._cfg, self.ctl
        n, brows = cfg.attn_n, cfg.attn_b_rows
        cm = memory.Memory(shape=data.ArrayLayout(cfg.count_bits, n), depth=brows // n,
                           init=[])
        m.submodules.count_mem = cm
        cm_w, cm_r, cm_f = cm.write_port(), cm.read_port(domain="comb"), \
            cm.read_port(domain="comb")
        m.d.comb += [cm_r.addr.eq(self.bias_addr), self.bias_word.eq(cm_r.data),
                     cm_f.addr.eq(self.count_addr), self.count_word.eq(cm_f.data)]
        cw = Signal(data.ArrayLayout(cfg.count_bits, n))
        ncand, total = Signal(16), Signal(24)
        issued, done, err = Signal(), Signal(), Signal()
        m.d.comb += [self.ncand.eq(ncand), self.total.eq(total), self.pre_issued.eq(issued),
                     self.pre_done.eq(done)]
        take = lambda: self._take(m, cm_w, cw, ncand, total)
        with m.If(self.pre_issue):
            m.d.sync += [issued.eq(1), ncand.eq(0), total.eq(0), cw.eq(0)]
        with m.FSM(name="counts"):
            with m.State("IDLE"):
                with m.If(ctl.go):
                    m.next = "H_COUNTS"
            with m.State("H_COUNTS"):
                m.d.comb += [self.sel_clear.eq(1), ctl.req.set_phase.eq(1),
                             ctl.req.phase.eq(1)]
                with m.If(issued):
                    # taken ahead (while the previous head, or descriptor, attended): this
                    # head's list, once it is in
                    with m.If(done):
                        m.d.sync += [issued.eq(0), done.eq(0)]
                        self._taken(m, err, ncand)
                with m.Else():
                    d, w = self.dsc, self.walk
                    offer(m, ctl.kcmd, op=KvMemoryManager.CAND, layer=d.layer, group=w.gi,
                          head=w.gj, step=d.step, counts=1)
                    m.d.sync += [ncand.eq(0), total.eq(0), cw.eq(0)]
                    with m.If(ctl.kcmd.ready):
                        m.next = "H_COUNTS_RX"
            with m.State("H_COUNTS_RX"):
                m.d.comb += self.cand_take.eq(1)
                take()
                with m.If(self.cand.valid & self.cand.payload.end):
                    self._taken(m, self.cand.payload.error, ncand)
        # a list taken ahead comes in whatever state the sequencer is in (only
        # ``H_COUNTS_RX`` and the scoring's keys take ``o_cand`` otherwise, and neither runs
        # while one is pending: ``H_COUNTS`` waits for it)
        with m.If(issued & ~done):
            m.d.comb += self.cand_take.eq(1)
            take()
            with m.If(self.cand.valid & self.cand.payload.end):
                m.d.sync += [done.eq(1), err.eq(self.cand.payload.error)]
        return m

    def _take(self, m, cm_w, cw, ncand, total):
        """A candidate list's beat: its count into the counts memory (``n`` a word) and the
        sum, the last partial word on the list's end."""
        n, brows = self._cfg.attn_n, self._cfg.attn_b_rows
        oc, lg = self.cand, exact_log2(n)
        lane = ncand[:lg] if n > 1 else Const(0, 1)
        with m.If(oc.valid & ~oc.payload.end):
            m.d.sync += [ncand.eq(ncand + 1), total.eq(total + oc.payload.count)]
            for ln in range(n):
                with m.If(lane == ln):
                    m.d.sync += cw[ln].eq(oc.payload.count)
            with m.If((lane == n - 1) & (ncand < brows)):
                m.d.comb += [cm_w.addr.eq(ncand >> lg), cm_w.en.eq(1)]
                m.d.comb += cm_w.data.as_value().eq(
                    Cat(*[cw[ln] for ln in range(n - 1)], oc.payload.count))
                m.d.sync += cw.eq(0)
        with m.If(oc.valid & oc.payload.end):
            with m.If(ncand[:lg] != 0 if n > 1 else Const(0)):
                m.d.comb += [cm_w.addr.eq(ncand >> lg), cm_w.en.eq(1), cm_w.data.eq(cw)]

    def _taken(self, m, error, ncand):
        """The list is in: score it, or attend without candidates, or refuse it."""
        cfg, ctl = self._cfg, self.ctl
        with m.If(error):
            _raise(m, ctl.req, ERR["KV_CLUSTER_LOST"])
        with m.If(ncand == 0):
            _leave(m, ctl, self.ATTEND)
        with m.Elif((ncand > cfg.attn_b_rows) | (ncand > cfg.wtu_row_entries)):
            _raise(m, ctl.req, ERR["CORE_LIMIT"])
            _leave(m, ctl, self.NEXT)
        with m.Elif(self.dsc.dense):
            _leave(m, ctl, self.ATTEND)
        with m.Else():
            _leave(m, ctl, self.SCORE)


class ScoringPhase(wiring.Component):
    """A KV head's scoring (``H_SCORE`` .. ``H_SCORE_RX``): the engine's ``SCORE`` command
    over the head's query rows and its ``ncand`` candidates, the query rows into A (a
    read-DMA program), the counts as the engine's column vector (``bias_*`` reads the counts
    memory), the candidates' representative keys from a second ``CAND`` command into B (the
    B source turned to the candidates until the list's end beat, ``cand``). The engine's
    rows go straight into the WTU; then the selection.

    Latency: a state a cycle while the engine, the program queue and the KVMU take."""

    def __init__(self, cfg, *, phase, cand_layout):
        self._cfg = cfg
        super().__init__({
            "ctl": Out(phase), "dsc": In(descriptor_layout()),
            "walk": In(walk_layout(cfg.kvmu_addr_bits)), "cand": In(Tap(cand_layout)),
            "ncand": In(16),
            "bias_addr": Out(16), "bias_word": In(data.ArrayLayout(cfg.count_bits, cfg.attn_n)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, ctl, d, w = self._cfg, self.ctl, self.dsc, self.walk
        n, hd = cfg.attn_n, cfg.head_dim
        i = Signal(16)
        with m.FSM(name="scoring"):
            with m.State("IDLE"):
                with m.If(ctl.go):
                    m.next = "H_SCORE"
            with m.State("H_SCORE"):
                offer(m, ctl.ecmd, kind=Kind.SCORE, m=w.rows, k=hd, l=self.ncand,
                      beta_m=d.beta_m, beta_shift=d.beta_shift)
                with m.If(ctl.ecmd.ready):
                    m.d.sync += i.eq(0)
                    m.next = "H_SCORE_Q"
            with m.State("H_SCORE_Q"):
                offer(m, ctl.prog, b0=w.ptr.q, beats=w.rows * (hd // cfg.kvmu_bus_bytes),
                      n_out=1, n_in=1, dest=A)
                with m.If(ctl.prog.ready):
                    m.next = "H_SCORE_BIAS"
            with m.State("H_SCORE_BIAS"):
                m.d.comb += [self.bias_addr.eq(i), ctl.bias.valid.eq(1)]
                for ln in range(n):
                    m.d.comb += ctl.bias.payload.data[ln].eq(self.bias_word[ln])
                with m.If(ctl.bias.ready):
                    m.d.sync += i.eq(i + 1)
                    with m.If(((i + 1) << exact_log2(n)) >= self.ncand):
                        m.next = "H_SCORE_KEYS"
            with m.State("H_SCORE_KEYS"):
                offer(m, ctl.kcmd, op=KvMemoryManager.CAND, layer=d.layer, group=w.gi,
                      head=w.gj, step=d.step, counts=0)
                with m.If(ctl.kcmd.ready):
                    m.d.comb += [ctl.bsrc.set.eq(1), ctl.bsrc.src.eq(SRC_CAND)]
                    m.next = "H_SCORE_RX"
            with m.State("H_SCORE_RX"):
                c = self.cand
                with m.If(c.valid & c.payload.end & c.ready):
                    with m.If(c.payload.error):
                        _raise(m, ctl.req, ERR["KV_CLUSTER_LOST"])
                    m.d.comb += [ctl.bsrc.set.eq(1), ctl.bsrc.src.eq(SRC_DMA)]
                    _leave(m, ctl)
        return m


class SelectionPhase(wiring.Component):
    """The WTU's selection of a KV head (``H_SELECT``): each selected candidate index from
    ``sel`` into the selection memory, their number (``nsel``) and their clusters' past
    tokens (``fetched``, from the counts memory through ``count_*``), until the selection's
    last beat; then the head attends. ``sel_clear`` restarts both counts; ``sel_addr`` reads
    the selection memory (combinationally).

    Latency: a selected index a cycle."""

    def __init__(self, cfg, *, phase, sel_layout):
        self._cfg = cfg
        cb, n = cfg.count_bits, cfg.attn_n
        self._idx = sel_layout.members["cluster"]
        super().__init__({
            "ctl": Out(phase), "sel": In(stream.Signature(sel_layout)),
            "sel_clear": In(1), "nsel": Out(16), "fetched": Out(24),
            "count_addr": Out(32), "count_word": In(data.ArrayLayout(cb, n)),
            "sel_addr": In(16), "sel_data": Out(self._idx),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, ctl = self._cfg, self.ctl
        n, lg = cfg.attn_n, exact_log2(cfg.attn_n)
        sm = memory.Memory(shape=self._idx, depth=cfg.attn_b_rows, init=[])
        m.submodules.selected = sm
        sm_w, sm_r = sm.write_port(), sm.read_port(domain="comb")
        m.d.comb += [sm_r.addr.eq(self.sel_addr), self.sel_data.eq(sm_r.data)]
        nsel, fetched = Signal(16), Signal(24)
        m.d.comb += [self.nsel.eq(nsel), self.fetched.eq(fetched)]
        with m.If(self.sel_clear):
            m.d.sync += [nsel.eq(0), fetched.eq(0)]
        s = self.sel
        with m.FSM(name="selection"):
            with m.State("IDLE"):
                with m.If(ctl.go):
                    m.next = "H_SELECT"
            with m.State("H_SELECT"):
                m.d.comb += s.ready.eq(1)
                idx = s.payload.cluster
                m.d.comb += self.count_addr.eq(idx >> lg)
                with m.If(s.valid & ~s.payload.last):
                    m.d.comb += [sm_w.addr.eq(nsel), sm_w.data.eq(idx), sm_w.en.eq(1)]
                    m.d.sync += [nsel.eq(nsel + 1),
                                 fetched.eq(fetched + self.count_word[idx[:lg]]
                                            if n > 1 else fetched + self.count_word[0])]
                with m.If(s.valid & s.payload.last):
                    _leave(m, ctl)
        return m
