"""The core's host interface: the AXI4-Lite register file of ``vrex.regmap``, the descriptor
queue and the front-end checks of ``golden.core.check_descriptor``."""

from __future__ import annotations

from dataclasses import dataclass
from amaranth.hdl import Array, Cat, Const, Module, Mux, ResetInserter, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from vrex import regmap

__all__ = ["CoreRegisters", "DescriptorCheck", "ErrorStatus"]

_OKAY, _SLVERR = 0, 2
_BUFFERS = ("q_addr", "k_addr", "k_hash_addr", "v_addr", "hp_addr", "o_addr", "sink_k_addr",
            "sink_v_addr")
_SINKS = ("sink_k_addr", "sink_v_addr")


class CoreRegisters(wiring.Component):
    """The register map of ``vrex.regmap`` behind an AXI4-Lite slave (``s_axil_*``).

    RW registers drive the outputs of the same name (lower case, 32 bits; the core takes
    their fields); ``CTRL.soft_reset`` is a one-cycle ``soft_reset`` pulse (it also empties
    the queue and clears the error here). Descriptor words written to ``DESC_DATA`` gather
    in a staging buffer; the last one starts the checks of ``golden.core.check_descriptor``
    in its order (zero step length, unknown layer, an address not aligned to ``bus_bytes``,
    a buffer outside the I/O window, a version older than the layer's last accepted one, a
    step older than the layer's last accepted one or past ``step_bits``): a descriptor that
    fails is refused with its error code, one that passes is queued (``queue_depth`` deep)
    and leaves on ``o_desc`` as its words. A word written while the queue is full
    (``QUEUE_OVERFLOW``) or without all four byte strobes (``DESC_PARTIAL_WRITE``, answered
    SLVERR) is dropped with the rest of its descriptor: the words are counted whatever
    happens to them, so the next descriptor's land in their slots. The sequencer reports completion
    on ``done`` (with ``done_version``) and errors on ``i_error``; the first error since
    the last clear (write 1 to ``ERROR_CODE`` bit 0) is kept. ``irq`` is the OR of
    ``IRQ_STATUS & IRQ_ENABLE`` (causes: done, error, space: the queue has room again after
    being full); ``error`` is high while ``ERROR_CODE`` holds an error (``STATUS.error``).
    Counters (``PERF_*``) read ``perf_in``. A write to an unmapped or read-only
    offset, or a read of an unmapped one, answers SLVERR and changes nothing; address bits
    1:0 are ignored (``vrex.regmap.BUS_RULES``).

    Parameters (keyword-only): ``layers``, ``step_bits``, ``bus_bytes`` (alignment),
    ``buffer_bytes``
    (name -> bytes a step token of that buffer spans, ``hp_addr`` a fixed size),
    ``queue_depth``, ``build`` (BUILD0-BUILD2 values), ``perf`` (the counter names, in
    map order).
    """

    def __init__(self, *, layers: int, step_bits: int, bus_bytes: int, buffer_bytes: dict,
                 hp_bytes: int, queue_depth: int, build: dict, perf: tuple):
        if not (isinstance(queue_depth, int) and 1 <= queue_depth <= 64):
            raise ValueError(f"queue_depth must be an integer from 1 to 64, not "
                             f"{queue_depth!r}")
        if not (isinstance(layers, int) and 1 <= layers <= 256):
            raise ValueError(f"layers must be an integer from 1 to 256, not {layers!r}")
        if not (isinstance(step_bits, int) and 1 <= step_bits <= 16):
            raise ValueError(f"step_bits must be an integer from 1 to 16, not {step_bits!r}")
        self._layers, self._bus_bytes, self._queue_depth = layers, bus_bytes, queue_depth
        self._step_bits = step_bits
        self._buffer_bytes, self._hp_bytes = dict(buffer_bytes), hp_bytes
        self._build, self._perf = dict(build), tuple(perf)
        self.regs = list(regmap.REGISTERS) + [
            regmap.Register(f"PERF_{n.upper()}", regmap.PERF_BASE + 4 * k, "RO", n)
            for k, n in enumerate(self._perf)]
        rw = {r.name.lower(): Out(32, init=r.reset) for r in regmap.REGISTERS
              if r.access == "RW"}
        super().__init__({
            "s_axil_awaddr": In(12), "s_axil_awprot": In(3), "s_axil_awvalid": In(1),
            "s_axil_awready": Out(1), "s_axil_wdata": In(32), "s_axil_wstrb": In(4),
            "s_axil_wvalid": In(1), "s_axil_wready": Out(1), "s_axil_bresp": Out(2),
            "s_axil_bvalid": Out(1), "s_axil_bready": In(1), "s_axil_araddr": In(12),
            "s_axil_arprot": In(3), "s_axil_arvalid": In(1), "s_axil_arready": Out(1),
            "s_axil_rdata": Out(32), "s_axil_rresp": Out(2), "s_axil_rvalid": Out(1),
            "s_axil_rready": In(1),
            **rw,
            "soft_reset": Out(1),
            "o_desc": Out(stream.Signature(data.ArrayLayout(32, regmap.DESC_WORDS))),
            "busy": In(1), "done": In(1), "done_version": In(16),
            "i_error": In(stream.Signature(data.StructLayout(
                {"code": 8, "addr": 64, "version": 16}))),
            "perf_in": In(data.ArrayLayout(32, max(1, len(self._perf)))),
            "irq": Out(1), "error": Out(1),
        })

    @classmethod
    def from_config(cls, cfg) -> "CoreRegisters":
        """The build's register file; its counters are the core's (``rtl.core.map``)."""
        from .map import perf_names
        perf = perf_names()
        return cls(**cfg.block_params("core_regs"), perf=perf)

    def elaborate(self, platform):
        m = Module()
        flush = Signal()                    # a soft reset: the queue emptied, a new stream
        q = fifo.SyncFIFOBuffered(width=32 * regmap.DESC_WORDS, depth=self._queue_depth)
        m.submodules.queue = q = ResetInserter(flush)(q)
        m.d.comb += [self.o_desc.valid.eq(q.r_rdy), self.o_desc.payload.as_value().eq(
            q.r_data), q.r_en.eq(self.o_desc.ready)]
        m.submodules.check = chk = DescriptorCheck(
            layers=self._layers, step_bits=self._step_bits, bus_bytes=self._bus_bytes,
            buffer_bytes=self._buffer_bytes, hp_bytes=self._hp_bytes)
        m.submodules.status = st = ErrorStatus()
        wiring.connect(m, wiring.flipped(self.i_error), st.seq_error)
        full = Signal()
        m.d.comb += [full.eq(q.level == self._queue_depth),
                     q.w_data.eq(chk.push.data), q.w_en.eq(chk.push.valid),
                     chk.flush.eq(flush), chk.io_base.eq(Cat(self.io_base_lo, self.io_base_hi)),
                     chk.io_size.eq(self.io_size),
                     st.refuse.eq(chk.refuse), st.refuse_code.eq(chk.refuse_code),
                     st.refuse_version.eq(chk.refuse_version),
                     st.full.eq(full), st.irq_enable.eq(self.irq_enable[:3]),
                     st.completed.eq(self.done), st.completed_version.eq(self.done_version),
                     self.irq.eq(st.interrupt), self.error.eq(st.code != 0)]
        self._bus(m, _Host(chk=chk, st=st, level=q.level, full=full, flush=flush))
        return m

    def _read_value(self, h, reg):
        """What a read of ``reg`` returns."""
        name, st = reg.name, h.st
        if name == "ID" or name == "VERSION":
            return Const(reg.reset, 32)
        if name in ("BUILD0", "BUILD1", "BUILD2"):
            return Const(self._build[name], 32)
        if name == "STATUS":
            q = h.level
            return Cat(self.busy, q == 0, q == self._queue_depth, st.code != 0, Const(0, 4),
                       q[:8])
        if name == "ERROR_CODE":
            return Cat(st.code, Const(0, 8), st.err_version)
        if name == "ERROR_ADDR_LO":
            return st.err_addr[:32]
        if name == "ERROR_ADDR_HI":
            return st.err_addr[32:]
        if name == "IRQ_STATUS":
            return st.irq_status
        if name == "DESC_DONE":
            return st.desc_done
        if name == "DESC_VERSION":
            return st.desc_version
        if name.startswith("PERF_"):
            return self.perf_in[self._perf.index(name[5:].lower())]
        if reg.access == "RW":
            if name == "CTRL":
                return getattr(self, "ctrl") & ~2     # soft_reset reads 0
            return getattr(self, name.lower())
        return Const(0, 32)                      # WO

    def _bus(self, m, h):
        """The AXI4-Lite slave: one write (AW and W taken in either order) and one read at a
        time, each answered before the next is taken (none while a descriptor is checked:
        STATUS then already counts it)."""
        s = lambda n: getattr(self, f"s_axil_{n}")
        checking = h.chk.checking
        aw_have, w_have = Signal(), Signal()
        aw, wd, ws = Signal(12), Signal(32), Signal(4)
        m.d.comb += [s("awready").eq(~aw_have & ~s("bvalid") & ~checking),
                     s("wready").eq(~w_have & ~s("bvalid") & ~checking)]
        with m.If(s("awvalid") & s("awready")):
            m.d.sync += [aw_have.eq(1), aw.eq(s("awaddr"))]
        with m.If(s("wvalid") & s("wready")):
            m.d.sync += [w_have.eq(1), wd.eq(s("wdata")), ws.eq(s("wstrb"))]
        with m.If(s("bvalid") & s("bready")):
            m.d.sync += s("bvalid").eq(0)
        mask = Cat(*[b.replicate(8) for b in ws])
        with m.If(aw_have & w_have):
            m.d.sync += [aw_have.eq(0), w_have.eq(0), s("bvalid").eq(1),
                         s("bresp").eq(_SLVERR)]
            with m.Switch(aw[2:]):
                for r in self.regs:
                    if r.access == "RO":
                        continue
                    with m.Case(r.offset >> 2):
                        m.d.sync += s("bresp").eq(_OKAY)
                        self._write(m, h, r, wd, mask)
        m.d.comb += s("arready").eq(~s("rvalid") & ~checking)
        with m.If(s("rvalid") & s("rready")):
            m.d.sync += s("rvalid").eq(0)
        with m.If(s("arvalid") & s("arready")):
            m.d.sync += [s("rvalid").eq(1), s("rresp").eq(_SLVERR), s("rdata").eq(0)]
            with m.Switch(s("araddr")[2:]):
                for r in self.regs:
                    with m.Case(r.offset >> 2):
                        m.d.sync += [s("rresp").eq(_OKAY),
                                     s("rdata").eq(self._read_value(h, r))]

    def _write(self, m, h, r, wd, mask):
        name = r.name
        if name == "CTRL":
            m.d.sync += self.ctrl.eq((self.ctrl & ~mask) | (wd & mask & 0b101))
            with m.If(wd[1] & mask[1]):
                m.d.comb += [self.soft_reset.eq(1), h.flush.eq(1), h.st.clear.eq(1)]
        elif name == "ERROR_CODE":
            with m.If(wd[0] & mask[0]):
                m.d.comb += h.st.clear.eq(1)
        elif name == "IRQ_STATUS":
            m.d.comb += h.st.irq_clear.eq(wd[:3] & mask[:3])
        elif name == "DESC_DATA":
            # every word counts; one dropped drops its descriptor
            partial = ~mask.all()
            m.d.comb += [h.chk.word_valid.eq(1), h.chk.word.eq(wd),
                         h.chk.spoil.eq(partial | h.full),
                         h.st.partial.eq(partial), h.st.overflow.eq(~partial & h.full)]
            with m.If(partial):
                m.d.sync += self.s_axil_bresp.eq(_SLVERR)
        elif r.access == "RW":
            reg = getattr(self, name.lower())
            m.d.sync += reg.eq((reg & ~mask) | (wd & mask))


@dataclass(frozen=True)
class _Host:
    """What the bus reaches: the check, the status, the queue's level and fullness, the
    soft reset's flush."""
    chk: "DescriptorCheck"
    st: "ErrorStatus"
    level: object
    full: Signal
    flush: Signal


class DescriptorCheck(wiring.Component):
    """Descriptor words (``word_valid``, ``word``) gather in a staging buffer; the last one
    starts the checks of ``golden.core.check_descriptor`` in its order, over three cycles
    (``checking``: buffer ends, comparisons, the decision): a descriptor that fails is
    refused (``refuse`` a cycle long, with its code and version), one that passes is pushed
    (``push``, its words) and its layer's version and step kept (a later one may not be
    older). A word that comes with ``spoil`` (dropped) is counted, and its descriptor is
    neither checked nor pushed. ``flush`` (a soft reset) restarts the staging and forgets
    the versions and steps."""

    def __init__(self, *, layers: int, step_bits: int, bus_bytes: int, buffer_bytes: dict,
                 hp_bytes: int):
        self._layers, self._bus_bytes, self._step_bits = layers, bus_bytes, step_bits
        self._buffer_bytes, self._hp_bytes = buffer_bytes, hp_bytes
        super().__init__({
            "word_valid": In(1), "word": In(32), "spoil": In(1), "flush": In(1),
            "io_base": In(64), "io_size": In(32),
            "checking": Out(1),
            "push": Out(wiring.Signature({"valid": Out(1),
                                          "data": Out(32 * regmap.DESC_WORDS)})),
            "refuse": Out(1), "refuse_code": Out(8), "refuse_version": Out(16),
        })

    def elaborate(self, platform):
        m = Module()
        stage_w = Array(Signal(32, name=f"stage_{i}") for i in range(regmap.DESC_WORDS))
        word = Signal(range(regmap.DESC_WORDS))
        start = Signal()                    # the last word came: check the descriptor
        spoiled = Signal()                  # a word of this descriptor was dropped
        with m.If(self.word_valid):
            m.d.sync += [stage_w[word].eq(self.word), word.eq(word + 1),
                         spoiled.eq(spoiled | self.spoil)]
            with m.If(word == regmap.DESC_WORDS - 1):
                m.d.sync += [word.eq(0), spoiled.eq(0), start.eq(~spoiled & ~self.spoil)]
        with m.If(self.flush):
            m.d.sync += [word.eq(0), spoiled.eq(0)]
        f = {}
        for w, name, lsb, width, _ in regmap.DESCRIPTOR:
            lo = Cat(*[stage_w[w + k] for k in range((lsb + width + 31) // 32)])
            f[name] = lo[lsb:lsb + width]
        io_end = Signal(66)
        m.d.comb += io_end.eq(self.io_base + self.io_size)
        ends = {b: Signal(66, name=f"end_{b}") for b in _BUFFERS}
        last = Array(Signal(16, name=f"last_version_{i}") for i in range(self._layers))
        last_step = Array(Signal(16, name=f"last_step_{i}") for i in range(self._layers))
        stage = Signal(2)
        m.d.comb += self.checking.eq(start | (stage != 0))
        with m.If(start):
            m.d.sync += [start.eq(0), stage.eq(1)]
            for b in _BUFFERS:
                if b == "hp_addr":
                    size = self._hp_bytes
                elif b in _SINKS:
                    size = f["n_sink"] * self._buffer_bytes["k_addr"]
                else:
                    size = f["step_len"] * self._buffer_bytes[b]
                m.d.sync += ends[b].eq(f[b] + size)
        code = self._decide(m, f, ends, io_end, last, last_step, stage)
        with m.If(stage == 2):
            m.d.sync += stage.eq(0)
            with m.If(code != 0):
                m.d.comb += [self.refuse.eq(1), self.refuse_code.eq(code),
                             self.refuse_version.eq(f["version"])]
            with m.Else():
                m.d.comb += [self.push.data.eq(Cat(*stage_w)), self.push.valid.eq(1)]
                m.d.sync += [last[f["layer"]].eq(f["version"]),
                             last_step[f["layer"]].eq(f["step"])]
        with m.If(self.flush):              # a soft reset starts a new stream
            m.d.sync += [v.eq(0) for v in (*last, *last_step)]
        return m

    def _decide(self, m, f, ends, io_end, last, last_step, stage):
        """The comparisons (registered at stage 1) and the first failing check's code."""
        io_base = self.io_base
        bad = {k: Signal(name=f"bad_{k}") for k in ("zero", "layer", "align", "window",
                                                    "version", "step")}
        wide = f["step"][self._step_bits:].any() if self._step_bits < 16 else Const(0, 1)

        def used(b):        # the sink buffers only with sink tokens
            return (f["n_sink"] != 0) if b in _SINKS else Const(1, 1)

        with m.If(stage == 1):
            lg = (self._bus_bytes - 1).bit_length()
            m.d.sync += [
                bad["zero"].eq(f["step_len"] == 0),
                bad["layer"].eq(f["layer"] >= self._layers),
                bad["align"].eq(Cat(*[used(b) & (f[b][:lg] != 0) for b in _BUFFERS]).any()),
                bad["window"].eq(Cat(*[used(b) & ((f[b] < io_base) | (ends[b] > io_end))
                                       for b in _BUFFERS]).any()),
                bad["version"].eq(f["version"] < last[f["layer"]]),
                bad["step"].eq((f["step"] < last_step[f["layer"]]) | wide),
                stage.eq(2)]
        e = regmap.ERRORS
        return Mux(bad["zero"], e["DESC_ZERO_LENGTH"][0],
                   Mux(bad["layer"], e["DESC_UNKNOWN_LAYER"][0],
                       Mux(bad["align"], e["DESC_MISALIGNED"][0],
                           Mux(bad["window"], e["DESC_OUT_OF_WINDOW"][0],
                               Mux(bad["version"], e["DESC_VERSION_BACKWARDS"][0],
                                   Mux(bad["step"], e["DESC_BAD_STEP"][0], 0))))))


class ErrorStatus(wiring.Component):
    """The first error since the last clear (``clear``) and the interrupt's causes.

    An error comes from the sequencer (``seq_error``), a descriptor word dropped on a full
    queue (``overflow``) or without all its strobes (``partial``), or a refused descriptor
    (``refuse``, which wins over the others in its cycle; a dropped word's over the
    sequencer's code, whose version and address stay).
    ``irq_status`` gathers done, error and space (the queue has room again after being
    full) until cleared (``irq_clear``); ``interrupt`` is its OR under ``irq_enable``. The
    completions are counted (``desc_done``) and the last one's version kept."""

    def __init__(self):
        super().__init__({
            "seq_error": In(stream.Signature(data.StructLayout(
                {"code": 8, "addr": 64, "version": 16}))),
            "overflow": In(1), "partial": In(1),
            "refuse": In(1), "refuse_code": In(8), "refuse_version": In(16),
            "clear": In(1), "irq_clear": In(3), "irq_enable": In(3), "full": In(1),
            "completed": In(1), "completed_version": In(16),
            "code": Out(8), "err_version": Out(16), "err_addr": Out(64),
            "irq_status": Out(3), "interrupt": Out(1), "desc_done": Out(32),
            "desc_version": Out(16),
        })

    def elaborate(self, platform):
        m = Module()
        raise_code = Signal(8)              # this cycle's error (0: none), with:
        raise_version, raise_addr = Signal(16), Signal(64)
        i = self.seq_error
        m.d.comb += i.ready.eq(1)
        with m.If(i.valid):
            m.d.comb += [raise_code.eq(i.payload.code), raise_version.eq(i.payload.version),
                         raise_addr.eq(i.payload.addr)]
        with m.If(self.overflow):
            m.d.comb += raise_code.eq(regmap.ERRORS["QUEUE_OVERFLOW"][0])
        with m.If(self.partial):
            m.d.comb += raise_code.eq(regmap.ERRORS["DESC_PARTIAL_WRITE"][0])
        with m.If(self.refuse):
            m.d.comb += [raise_code.eq(self.refuse_code),
                         raise_version.eq(self.refuse_version)]
        with m.If(self.clear):
            m.d.sync += self.code.eq(0)
        with m.Elif((raise_code != 0) & (self.code == 0)):
            m.d.sync += [self.code.eq(raise_code), self.err_version.eq(raise_version),
                         self.err_addr.eq(raise_addr)]
        was_full = Signal()
        m.d.sync += was_full.eq(self.full)
        causes = Cat(self.completed, raise_code != 0, was_full & ~self.full)
        m.d.sync += self.irq_status.eq((self.irq_status & ~self.irq_clear) | causes)
        m.d.comb += self.interrupt.eq((self.irq_status & self.irq_enable).any())
        with m.If(self.completed):
            m.d.sync += [self.desc_done.eq(self.desc_done + 1),
                         self.desc_version.eq(self.completed_version)]
        return m
