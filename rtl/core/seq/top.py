"""The sequencer: the phase controller that walks a descriptor's KV heads and hash groups and
runs the phase controllers in turn."""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .attention import AttentionPhase
from .centring import Centring
from .common import (ERR, PhaseSignature, Tap, descriptor_fields, descriptor_layout, offer,
                     program_layout, requests_layout, tap, walk_layout)
from .counts import CountsPhase, ScoringPhase, SelectionPhase
from .hashing import HashingPhase, StoresPhase
from .jobs import BSource, ErrorMap, JobGen
from .windows import ContextMoves

__all__ = ["Sequencer"]


class Sequencer(wiring.Component):
    """Runs one descriptor (one layer of one step) at a time, docs/core.md: announce its
    version to the KVMU; per KV head the counts, scoring and selection phases
    (:mod:`.counts`) and the attention phase (:mod:`.attention`); per hash group the context
    moves (:mod:`.windows`, when the HCU holds fewer contexts than windows), the hashing and
    the stores (:mod:`.hashing`); a dense descriptor (D14) skips the scoring and the
    selection, its heads attending every candidate of the counts list; the heads first (``order`` ``select_first``) or the
    groups first (``cluster_first``). This controller keeps the descriptor, the walk over heads
    and groups (``walk_layout``) and the phase counter, starts each phase controller and
    moves on when it is done (:class:`~.common.PhaseSignature`: a phase's last state and the
    next one's first are one cycle apart), and joins the resources the phases share: the
    read DMA's programs (:class:`~.jobs.JobGen`), the engine's commands and column vectors,
    the KVMU's commands, the engine's B source (:class:`~.jobs.BSource`) and the error
    codes (:class:`~.jobs.ErrorMap`).

    The ports are the blocks' streams the sequencer drives or takes (``desc`` the register
    file's descriptors, ``ecmd`` and ``bias`` the engine's, ``kcmd`` and ``kver`` the KVMU's,
    ``sel`` the WTU's selection, ``assign`` the HCU's assignments, ``job`` the read DMA's),
    the streams it watches (``cand``, ``kv``, ``dma``: :class:`~.common.Tap`) and the
    blocks' status; with window moves also the HCU's context streams and the image path."""

    def __init__(self, cfg, *, layouts: dict, kv_lg: int, swaps: bool):
        self._cfg, self._lay, self._kv_lg, self._swaps = cfg, layouts, kv_lg, swaps
        ab, L = cfg.kvmu_addr_bits, layouts
        self._phase = PhaseSignature(prog=program_layout(ab), ecmd=L["ecmd"], bias=L["bias"],
                                     kcmd=L["kcmd"], kv_lg=kv_lg)
        mover = data.StructLayout({"error": 1, "addr": ab})
        ports = {
            "desc": In(stream.Signature(L["desc"])), "ctrl": In(3), "resetting": In(1),
            "done": Out(1), "done_version": Out(16), "busy": Out(1),
            "i_error": Out(stream.Signature(L["error"])),
            "ecmd": Out(stream.Signature(L["ecmd"])), "bias": Out(stream.Signature(L["bias"])),
            "kcmd": Out(stream.Signature(L["kcmd"])), "kver": Out(stream.Signature(L["kver"])),
            "cand": In(Tap(L["cand"])), "kv": In(Tap(L["kv"])), "attn_last": In(1),
            "sel": In(stream.Signature(L["sel"])),
            "assign": In(stream.Signature(L["cluster_bits"])),
            "job": Out(stream.Signature(L["job"])), "dma": In(Tap(L["dma"])),
            "dma_idle": In(1), "dma_received": In(32), "dma_err": In(mover),
            "out_idle": In(1), "out_err": In(mover), "out_base": Out(ab),
            "k_busy": In(1), "k_error": In(1), "k_code": In(8), "k_addr": In(ab),
            "e_error": In(1), "h_error": In(1), "w_error": In(1),
            "h_refusals": In(cfg.counter_bits),
            "ctx_base": In(ab), "kv_take": In(1),
            "b_src": Out(2), "kv_left": Out(L["kv_left"]), "drop_kv": Out(1),
            "cand_take": Out(1), "dot_ready": Out(1), "clear_errs": Out(1),
            "dma_clear": Out(1), "out_clear": Out(1),
            "phase": Out(3), "ahead": Out(1), "error_now": Out(1),
        }
        if swaps:
            ports.update({
                "ctx_cmd": Out(stream.Signature(L["ctx_cmd"])),
                "ctx_save": In(stream.Signature(L["ctx_bits"])),
                "ctx_load": Out(stream.Signature(L["ctx_bits"])),
                "img_job": Out(stream.Signature(L["img_job"])), "img_clear": Out(1),
                "img_idle": In(1), "img_err": In(mover),
                "rep_save": Out(stream.Signature(8 * cfg.ctx_word_bytes)),
                "rep_load": In(stream.Signature(8 * cfg.ctx_word_bytes)),
                "wsel": Out(1)})
        super().__init__(ports)

    def _parts(self):
        cfg, L, ph = self._cfg, self._lay, self._phase
        parts = dict(
            jobgen=JobGen(addr_bits=cfg.kvmu_addr_bits, job_layout=L["job"]),
            bsrc=BSource(kv_lg=self._kv_lg),
            errors=ErrorMap(addr_bits=cfg.kvmu_addr_bits, error_layout=L["error"],
                            swaps=self._swaps),
            centring=Centring(cfg, dma_layout=L["dma"]),
            counts=CountsPhase(cfg, phase=ph, cand_layout=L["cand"]),
            scoring=ScoringPhase(cfg, phase=ph, cand_layout=L["cand"]),
            selection=SelectionPhase(cfg, phase=ph, sel_layout=L["sel"]),
            attention=AttentionPhase(cfg, phase=ph, kv_layout=L["kv"], kv_lg=self._kv_lg,
                                     idx_bits=L["sel"].members["cluster"]),
            hashing=HashingPhase(cfg, phase=ph),
            stores=StoresPhase(cfg, phase=ph, cluster_bits=L["cluster_bits"]))
        if self._swaps:
            parts["moves"] = ContextMoves(cfg, phase=ph, ctx_cmd_layout=L["ctx_cmd"],
                                          ctx_bits=L["ctx_bits"], header_layout=L["header"],
                                          img_job_layout=L["img_job"], dma_layout=L["dma"])
        return parts

    def elaborate(self, platform):
        m = Module()
        p = self._parts()
        for name, part in p.items():
            m.submodules[name] = part
        phases = [p[k] for k in ("counts", "scoring", "selection", "attention", "hashing",
                                 "stores", "moves") if k in p]
        dsc = Signal(descriptor_layout(), name="dsc")
        walk = Signal(walk_layout(self._cfg.kvmu_addr_bits), name="walk")
        for ph in phases:
            if "dsc" in ph.signature.members:
                m.d.comb += ph.dsc.eq(dsc)
            if "walk" in ph.signature.members:
                m.d.comb += ph.walk.eq(walk)
        err_code, err_addr, own = Signal(8), Signal(64), Signal(8, name="seq_err_code")
        req = self._merge(m, p, phases)
        m.d.comb += [err_code.eq(req["err_code"] | own), err_addr.eq(req["err_addr"])]
        f = descriptor_fields(self.desc.payload)      # the queued descriptor's fields
        self._join(m, p, dsc, walk, f)
        self._errors(m, p, dsc, err_code, err_addr)
        phase = Signal(3)
        m.d.comb += [self.phase.eq(phase), self.busy.eq(phase != 0)]
        with m.If(req["set_phase"]):
            m.d.sync += phase.eq(req["phase"])
        self._walk(m, p, dsc, walk, f, phase, own)
        return m

    def _merge(self, m, p, phases):
        """The shared resources: each phase drives its requests only in its own states, so
        they are ORed; every phase sees the resource's ready. Returns the ORed requests to
        this controller's registers (:func:`~.common.requests_layout`)."""
        ctl = [ph.ctl for ph in phases]
        either = lambda get: _or([get(c) for c in ctl])
        jg, bs = p["jobgen"], p["bsrc"]
        for name, sink in (("prog", jg.prog), ("ecmd", self.ecmd), ("bias", self.bias),
                           ("kcmd", self.kcmd)):
            m.d.comb += [sink.valid.eq(either(lambda c: getattr(c, name).valid)),
                         sink.payload.eq(either(lambda c: getattr(c, name).payload.as_value())),
                         *(getattr(c, name).ready.eq(sink.ready) for c in ctl)]
        m.d.comb += bs.req.eq(either(lambda c: c.bsrc.as_value()))
        req = {k: Signal(fld.shape, name=f"req_{k}") for k, fld in requests_layout()}
        for k, sig in req.items():
            m.d.comb += sig.eq(either(lambda c, k=k: getattr(c.req, k)))
        return req

    def _join(self, m, p, dsc, walk, f):
        """The parts' links to each other and to the blocks' streams and status."""
        jg, bs, cen = p["jobgen"], p["bsrc"], p["centring"]
        cnt, sc, sel, att = p["counts"], p["scoring"], p["selection"], p["attention"]
        hs, stn = p["hashing"], p["stores"]
        # a token the HCU refuses moves its refusal counter (every refusal the core can meet
        # is a token's: its context commands name contexts that exist); the HCU and this
        # controller reset together
        refusals_seen = Signal.like(self.h_refusals)
        m.d.sync += refusals_seen.eq(self.h_refusals)
        wiring.connect(m, jg.job, wiring.flipped(self.job))
        wiring.connect(m, wiring.flipped(self.sel), sel.sel)
        wiring.connect(m, wiring.flipped(self.assign), stn.assign)
        m.d.comb += [
            bs.take.eq(self.kv_take), bs.k_error.eq(self.k_error),
            self.b_src.eq(bs.src), self.kv_left.eq(bs.left),
            cen.layer.eq(dsc.layer), cen.grp.eq(walk.grp), self.dot_ready.eq(cen.dot_ready),
            self.cand_take.eq(cnt.cand_take),
            sc.ncand.eq(cnt.ncand), cnt.bias_addr.eq(sc.bias_addr),
            sc.bias_word.eq(cnt.bias_word),
            sel.sel_clear.eq(cnt.sel_clear),
            cnt.count_addr.eq(sel.count_addr | att.count_addr),
            sel.count_word.eq(cnt.count_word), att.count_word.eq(cnt.count_word),
            sel.sel_addr.eq(att.sel_addr),
            # a dense descriptor (D14) selects its whole counts list: index i is the i-th
            att.sel_data.eq(Mux(dsc.dense, att.sel_addr, sel.sel_data)),
            att.nsel.eq(Mux(dsc.dense, cnt.ncand, sel.nsel)),
            att.fetched.eq(Mux(dsc.dense, cnt.total, sel.fetched)),
            att.pre_issued.eq(cnt.pre_issued), att.pre_done.eq(cnt.pre_done),
            cnt.pre_issue.eq(att.pre_issue), self.ahead.eq(att.ahead),
            att.b_src.eq(bs.src), att.kerr_before.eq(bs.kerr_before),
            att.attn_last.eq(self.attn_last), att.out_idle.eq(self.out_idle),
            att.dma_idle.eq(self.dma_idle), att.prog_level.eq(jg.level),
            att.next_valid.eq(self.desc.valid),
            *(getattr(att.next_desc, k).eq(v) for k, v in f.items()),
            hs.centre.eq(self.ctrl[2]), cen.sum_load.eq(hs.sum_load),
            cen.sum_beats.eq(hs.sum_beats), cen.sum_close.eq(hs.sum_close),
            cen.nh.eq(walk.nh), hs.sum_zero.eq(cen.sum_zero), hs.j_done.eq(cen.j_done),
            hs.biases.eq(cen.bias),
            stn.dma_error.eq(self.dma_err.error), stn.dma_received.eq(self.dma_received),
            stn.refused.eq(self.h_refusals != refusals_seen),
            self.drop_kv.eq(stn.drop_kv),
        ]
        for sink, src in ((cen.dma, self.dma), (cnt.cand, self.cand), (sc.cand, self.cand),
                          (att.kv, self.kv)):
            tap(m, sink, src)
        if "moves" in p:
            mv = p["moves"]
            wiring.connect(m, mv.hcu_cmd, wiring.flipped(self.ctx_cmd))
            wiring.connect(m, wiring.flipped(self.ctx_save), mv.save_in)
            wiring.connect(m, mv.load_out, wiring.flipped(self.ctx_load))
            wiring.connect(m, mv.img_job, wiring.flipped(self.img_job))
            wiring.connect(m, mv.to_writer, wiring.flipped(self.rep_save))
            wiring.connect(m, wiring.flipped(self.rep_load), mv.from_dma)
            m.d.comb += [mv.ctx.eq(cen.ctx), mv.ctx_base.eq(self.ctx_base),
                         self.img_clear.eq(mv.img_clear), mv.img_idle.eq(self.img_idle),
                         mv.img_error.eq(self.img_err.error),
                         mv.dma_idle.eq(self.dma_idle), mv.jobgen_busy.eq(jg.busy),
                         mv.prog_level.eq(jg.level), self.wsel.eq(mv.wsel),
                         hs.layer.eq(mv.slot)]
            tap(m, mv.dma, self.dma)
        else:
            m.d.comb += hs.layer.eq(cen.ctx)

    def _errors(self, m, p, dsc, err_code, err_addr):
        em = p["errors"]
        wiring.connect(m, em.i_error, wiring.flipped(self.i_error))
        m.d.comb += [em.seq_code.eq(err_code), em.seq_addr.eq(err_addr),
                     em.version.eq(dsc.version), em.clear.eq(self.clear_errs),
                     em.dma.eq(self.dma_err), em.out.eq(self.out_err),
                     em.k_error.eq(self.k_error), em.k_code.eq(self.k_code),
                     em.k_addr.eq(self.k_addr), em.e_error.eq(self.e_error),
                     em.h_error.eq(self.h_error), em.w_error.eq(self.w_error),
                     self.error_now.eq(em.now), self.dma_clear.eq(em.dma_clear),
                     self.out_clear.eq(em.out_clear)]
        if self._swaps:
            m.d.comb += em.img.eq(self.img_err)

    def _walk(self, m, p, dsc, walk, f, phase, own):
        """The phase controller's states: the descriptor taken and set up, its version
        announced, then per KV head the head's phases (``RUN``) and the next head
        (``H_NEXT``), per hash group the group's phases and the next group (``G_NEXT``), and
        the descriptor's end (``FINISH``: the movers idle)."""
        cfg = self._cfg
        hd, hpg, G, Hkv = cfg.head_dim, cfg.heads_per_group, cfg.hash_groups, cfg.n_kv_heads
        cnt, hs = p["counts"], p["hashing"]
        w, t = walk, dsc.step_len
        m.d.comb += self.out_base.eq(w.ptr.o)

        def start_hashing():
            m.d.comb += [hs.ctl.go.eq(1), hs.ctl.entry.eq(Mux(self.ctrl[2], hs.CENTRE,
                                                               hs.CMD))]
            m.next = "RUN"

        first_groups = cfg.order == "cluster_first"
        heads_start, groups_start, groups_end = self._order(m, cnt, dsc, w, phase,
                                                            first_groups)

        with m.FSM(name="seq"):
            with m.State("IDLE"):
                go = self.ctrl[0] & ~self.resetting & p["centring"].init_done
                m.d.comb += self.desc.ready.eq(go)
                with m.If(self.desc.valid & go):
                    m.d.sync += [getattr(dsc, k).eq(v) for k, v in f.items()]
                    m.d.sync += phase.eq(1)
                    m.d.comb += self.clear_errs.eq(1)
                    m.next = "SETUP"
            with m.State("SETUP"):
                past_sink = dsc.n_sink > dsc.token0
                left = dsc.n_sink - dsc.token0
                m.d.sync += [
                    w.sinks.eq(Mux(past_sink, dsc.token0, dsc.n_sink)),
                    w.skip.eq(Mux(past_sink, Mux(left > t, t, left), 0)),
                    w.rows.eq(t * cfg.group_size),
                    w.head.eq(0), w.gi.eq(0), w.gj.eq(0),
                    w.ptr.q.eq(dsc.q_addr), w.ptr.k.eq(dsc.k_addr), w.ptr.v.eq(dsc.v_addr),
                    w.ptr.o.eq(dsc.o_addr), w.ptr.sk.eq(dsc.sink_k_addr),
                    w.ptr.sv.eq(dsc.sink_v_addr)]
                m.next = "SETUP2"
            with m.State("SETUP2"):
                m.d.sync += w.nh.eq(t - w.skip)
                with m.If(t > cfg.core_max_tokens):
                    m.d.comb += own.eq(ERR["CORE_LIMIT"])
                    m.next = "FINISH"
                with m.Else():
                    m.next = "VERSION"
            with m.State("VERSION"):
                offer(m, self.kver, layer=dsc.layer, version=dsc.version)
                with m.If(self.kver.ready):
                    if first_groups:
                        groups_start()
                        m.next = "G_HASH"
                    else:
                        heads_start()
            with m.State("RUN"):
                self._dispatch(m, p)
            with m.State("H_NEXT"):
                m.d.sync += [w.head.eq(w.head + 1), w.ptr.q.eq(w.ptr.q + w.rows * hd),
                             w.ptr.o.eq(w.ptr.o + w.rows * (2 * hd)),
                             w.ptr.k.eq(w.ptr.k + t * hd), w.ptr.v.eq(w.ptr.v + t * hd),
                             w.ptr.sk.eq(w.ptr.sk + dsc.n_sink * hd),
                             w.ptr.sv.eq(w.ptr.sv + dsc.n_sink * hd)]
                with m.If(w.gj == hpg - 1):
                    m.d.sync += [w.gj.eq(0), w.gi.eq(w.gi + 1)]
                with m.Else():
                    m.d.sync += w.gj.eq(w.gj + 1)
                with m.If(w.head == Hkv - 1):
                    if first_groups:
                        m.next = "FINISH"
                    else:
                        groups_start()
                        m.next = "G_HASH"
                with m.Else():
                    m.d.comb += cnt.ctl.go.eq(1)
                    m.next = "RUN"
            with m.State("G_HASH"):
                with m.If(w.nh == 0):
                    groups_end()
                with m.Else():
                    if self._swaps:
                        m.d.comb += p["moves"].ctl.go.eq(1)
                        m.next = "RUN"
                    else:
                        start_hashing()
            with m.State("G_PREP"):
                start_hashing()
            with m.State("G_NEXT"):
                # the dropped tokens' data still drains through the DMA
                with m.If(self.dma_idle & ~self.k_busy):
                    m.d.comb += p["stores"].clear_drop.eq(1)
                    m.d.sync += [w.grp.eq(w.grp + 1),
                                 w.ptr.hp.eq(w.ptr.hp + cfg.n_hp * cfg.hash_dim),
                                 w.ptr.kh.eq(w.ptr.kh + hpg * t * hd),
                                 w.ptr.kg.eq(w.ptr.kg + hpg * t * hd),
                                 w.ptr.vg.eq(w.ptr.vg + hpg * t * hd)]
                    with m.If(w.grp == G - 1):
                        groups_end()
                    with m.Else():
                        m.d.sync += phase.eq(3)
                        m.next = "G_HASH"
            with m.State("FINISH"):
                # (a list taken ahead for the queued descriptor may still be coming: the
                # KVMU runs it before this descriptor's stores, so it is in when they are)
                with m.If(self.dma_idle & self.out_idle & ~self.k_busy &
                          (p["jobgen"].level == 0) & ~p["jobgen"].busy):
                    m.d.comb += [self.done.eq(1), self.done_version.eq(dsc.version)]
                    m.d.sync += phase.eq(0)
                    m.next = "IDLE"

    def _order(self, m, cnt, dsc, w, phase, first_groups):
        """The walk's order (docs/core.md): select first, the heads then the hash groups;
        cluster first, the hash groups (the step's tokens stored) then the heads. The moves
        that start the heads, start the groups and end the groups."""
        hd = self._cfg.head_dim

        def heads_start():
            m.d.sync += phase.eq(1)
            m.d.comb += cnt.ctl.go.eq(1)
            m.next = "RUN"

        def groups_start():
            m.d.sync += [w.grp.eq(0), w.ptr.kh.eq(dsc.k_hash_addr + w.skip * hd),
                         w.ptr.kg.eq(dsc.k_addr + w.skip * hd),
                         w.ptr.vg.eq(dsc.v_addr + w.skip * hd),
                         w.ptr.hp.eq(dsc.hp_addr), phase.eq(3)]

        def groups_end():
            if first_groups:
                heads_start()
            else:
                m.next = "FINISH"
        return heads_start, groups_start, groups_end

    def _dispatch(self, m, p):
        """While a phase runs: when it is done, the next phase starts in the same cycle, or
        this controller moves on."""
        cnt = p["counts"]

        def go(name):
            m.d.comb += p[name].ctl.go.eq(1)
        with m.If(cnt.ctl.done):
            with m.Switch(cnt.ctl.exit):
                with m.Case(cnt.SCORE):
                    go("scoring")
                with m.Case(cnt.ATTEND):
                    go("attention")
                with m.Default():
                    m.next = "H_NEXT"
        with m.If(p["scoring"].ctl.done):
            go("selection")
        with m.If(p["selection"].ctl.done):
            go("attention")
        with m.If(p["attention"].ctl.done):
            m.next = "H_NEXT"
        if "moves" in p:
            with m.If(p["moves"].ctl.done):
                m.next = "G_PREP"
        with m.If(p["hashing"].ctl.done):
            go("stores")
        with m.If(p["stores"].ctl.done):
            m.next = "G_NEXT"


def _or(values):
    out = values[0]
    for v in values[1:]:
        out = out | v
    return out
