"""The sequencer's context moves: a cluster window swapped into the HCU's context before its
group is hashed, and the paths of a window's image."""
from __future__ import annotations

from amaranth.hdl import Array, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ...dre.hcu import HashClusterUnit
from .common import CTX, Tap, offer
from .counts import _leave

__all__ = ["ContextMoves"]


class ContextMoves(wiring.Component):
    """The states that put window ``ctx`` in its context (``ctx mod contexts``, ``slot``)
    before a group is hashed (``X_*``): a hit goes on; otherwise the context's window is
    saved (if it holds one: ``SAVE`` to the HCU, its image through ``to_writer`` to the image
    writer at ``ctx_base + window · ctx_image_bytes``) and ``ctx`` loaded (``LOAD``, its image
    read by a read-DMA program and given to the HCU through ``load_out``), or emptied
    (``FLUSH``) if it was never saved. A failed save loses that window (its next use starts
    empty); a load with a bus error (a ``bad`` beat of destination ``CTX``) empties the
    context after it. ``wsel``: the write half of the bus serves the image writer.

    The image's paths: a save's words from the HCU (``save_in``), then zeros to the image's
    end; a load's words from the read DMA (``from_dma``) to the HCU, the header and its
    ``min(opened, window)`` entries, the rest dropped.

    Latency: a save and a load overlap; the phase ends when both are through and the
    program queue, the read DMA and the image writer are idle."""

    def __init__(self, cfg, *, phase, ctx_cmd_layout, ctx_bits: int, header_layout,
                 img_job_layout, dma_layout):
        self._cfg, self._ctx_bits, self._hdr = cfg, ctx_bits, header_layout
        super().__init__({
            "ctl": Out(phase), "ctx": In(range(max(2, cfg.windows))),
            "ctx_base": In(cfg.kvmu_addr_bits),
            "hcu_cmd": Out(stream.Signature(ctx_cmd_layout)),
            "save_in": In(stream.Signature(ctx_bits)),
            "load_out": Out(stream.Signature(ctx_bits)),
            "to_writer": Out(stream.Signature(8 * cfg.ctx_word_bytes)),
            "from_dma": In(stream.Signature(8 * cfg.ctx_word_bytes)),
            "img_job": Out(stream.Signature(img_job_layout)), "img_clear": Out(1),
            "img_idle": In(1), "img_error": In(1), "dma": In(Tap(dma_layout)),
            "dma_idle": In(1), "jobgen_busy": In(1), "prog_level": In(3),
            "wsel": Out(1), "slot": Out(range(max(2, cfg.contexts))),
        })

    def _side(self, name):
        words = self._cfg.ctx_image_bytes // self._cfg.ctx_word_bytes
        return {"on": Signal(name=f"{name}_on"), "k": Signal(range(words + 1), name=f"{name}_k"),
                "real": Signal(range(self._cfg.window + 2), name=f"{name}_real")}

    def _walk(self, m, st, word, fire):
        """A side's walk over the image's words; the header's count says how many come from
        (or go to) the HCU."""
        W = self._cfg.window
        words = self._cfg.ctx_image_bytes // self._cfg.ctx_word_bytes
        hdr = data.View(self._hdr, word[:self._hdr.size])
        with m.If(fire):
            m.d.sync += st["k"].eq(st["k"] + 1)
            with m.If(st["k"] == 0):
                m.d.sync += st["real"].eq(1 + Mux(hdr.n_open >= W, W, hdr.n_open))
            with m.If(st["k"] == words - 1):
                m.d.sync += st["on"].eq(0)
        return (st["k"] == 0) | (st["k"] < st["real"])

    def _paths(self, m, sv, ld, bad):
        """The image's paths (a save's and a load's) and the load's bad flag."""
        o, rs = self.save_in, self.to_writer
        real = self._walk(m, sv, o.payload, rs.valid & rs.ready)
        m.d.comb += [rs.payload.eq(Mux(real, o.payload, 0)),
                     rs.valid.eq(sv["on"] & Mux(real, o.valid, 1)),
                     o.ready.eq(sv["on"] & real & rs.ready)]
        rl, i = self.from_dma, self.load_out
        real = self._walk(m, ld, rl.payload, rl.valid & rl.ready)
        m.d.comb += [i.payload.eq(rl.payload[:self._ctx_bits]),
                     i.valid.eq(ld["on"] & real & rl.valid),
                     rl.ready.eq(ld["on"] & Mux(real, i.ready, 1))]
        d = self.dma
        with m.If(d.valid & d.ready & (d.payload.dest == CTX) & d.payload.bad):
            m.d.sync += bad.eq(1)

    def elaborate(self, platform):
        m = Module()
        cfg, ctl = self._cfg, self.ctl
        C, n_win, img = cfg.contexts, cfg.windows, cfg.ctx_image_bytes
        beats = img // cfg.kvmu_bus_bytes
        sv, ld, bad = self._side("save"), self._side("load"), Signal()
        self._paths(m, sv, ld, bad)
        slot = Signal(range(max(2, C)))
        wsel = Signal()
        m.d.comb += [self.slot.eq(slot), self.wsel.eq(wsel)]
        tag = Array(Signal(range(max(2, n_win)), name=f"ctx_tag_{i}") for i in range(C))
        held = Array(Signal(name=f"ctx_held_{i}") for i in range(C))
        saved = Array(Signal(name=f"win_saved_{i}") for i in range(n_win))
        slot_of = Array(Const(w % C, len(slot)) for w in range(n_win))
        victim, had = Signal.like(tag[0]), Signal()
        ctx = self.ctx

        def ctx_cmd(op):
            offer(m, self.hcu_cmd, op=op, layer=slot)

        def phase(value):
            m.d.comb += [ctl.req.set_phase.eq(1), ctl.req.phase.eq(value)]

        with m.FSM(name="moves"):
            with m.State("IDLE"):
                with m.If(ctl.go):
                    m.next = "X_CHECK"
            with m.State("X_CHECK"):
                s = slot_of[ctx]
                m.d.sync += [slot.eq(s), victim.eq(tag[s]), had.eq(held[s])]
                with m.If(held[s] & (tag[s] == ctx)):
                    _leave(m, ctl)
                with m.Else():
                    phase(5)
                    m.next = "X_SAVE"
            with m.State("X_SAVE"):
                with m.If(~had):
                    m.next = "X_LOAD"
                with m.Else():
                    ctx_cmd(HashClusterUnit.SAVE)
                    with m.If(self.hcu_cmd.ready):
                        m.d.sync += [sv["on"].eq(1), sv["k"].eq(0), wsel.eq(1)]
                        m.d.comb += self.img_clear.eq(1)
                        m.next = "X_SAVE_JOB"
            with m.State("X_SAVE_JOB"):
                offer(m, self.img_job, addr=self.ctx_base + victim * img, beats=beats)
                with m.If(self.img_job.ready):
                    m.next = "X_LOAD"
            with m.State("X_LOAD"):
                # the image's read goes out while the HCU still sends the saved window
                with m.If(saved[ctx]):
                    offer(m, ctl.prog, b0=self.ctx_base + ctx * img, beats=beats, n_out=1,
                          n_in=1, dest=CTX)
                    with m.If(ctl.prog.ready):
                        m.d.sync += bad.eq(0)
                        m.next = "X_LOAD_CMD"
                with m.Else():
                    ctx_cmd(HashClusterUnit.FLUSH)
                    with m.If(self.hcu_cmd.ready):
                        m.next = "X_WAIT"
            with m.State("X_LOAD_CMD"):
                ctx_cmd(HashClusterUnit.LOAD)
                with m.If(self.hcu_cmd.ready):
                    m.d.sync += [ld["on"].eq(1), ld["k"].eq(0)]
                    m.next = "X_WAIT"
            with m.State("X_WAIT"):
                with m.If(~sv["on"] & ~ld["on"] & self.img_idle & self.dma_idle &
                          ~self.jobgen_busy & (self.prog_level == 0)):
                    m.d.sync += [tag[slot].eq(ctx), held[slot].eq(1), wsel.eq(0)]
                    with m.If(had):
                        m.d.sync += saved[victim].eq(~self.img_error)
                    with m.If(bad):
                        m.next = "X_FLUSH"
                    with m.Else():
                        phase(3)
                        _leave(m, ctl)
            with m.State("X_FLUSH"):
                ctx_cmd(HashClusterUnit.FLUSH)
                with m.If(self.hcu_cmd.ready):
                    phase(3)
                    _leave(m, ctl)
        return m
