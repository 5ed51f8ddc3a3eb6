"""The HCU's window: the memories of every layer context's clusters, their registered write,
and the row reads of the scan as far as p1 (a row and the written entry bypassed into it)."""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from .signatures import BypassSignature, RowSignature, WriteSignature

__all__ = ["HcuWindow"]


class HcuWindow(wiring.Component):
    """Two memories of one address, ``depth`` rows of ``lanes`` entries: hashes and opening
    steps (``key``, padded to whole 9-bit bytes) and counts (a join rewrites only its count,
    so the winner carries no hash through the reduction).

    Latency: a row read at ``raddr`` in a cycle where ``issue`` is set is on ``o_row`` three
    cycles later (s1: the read; p0: the row registered as it leaves the block RAMs, whose
    clock-to-out leaves no time for logic; p1: the bypassed lanes replaced, registered beside
    the lanes). Throughput: a row a cycle. A write on ``w`` reaches the memories a cycle later
    (registered, from registers into the block RAMs); the reads that could miss it (the
    decision cycle's read of the next token's row 0, ``bypass``, and the read made while the
    write happens) take the written lanes from a bypass register instead (a transparent read
    port would keep the memory out of block RAM on FPGAs)."""

    def __init__(self, *, entry, key, count_word: int, lanes: int, depth: int,
                 beat_bits: int, init=()):
        self._entry, self._key, self._count_word = entry, key, count_word
        self._lanes, self._depth, self._init = lanes, depth, init
        addr_bits = max(1, (depth - 1).bit_length())
        super().__init__({
            "raddr": In(addr_bits),
            "issue": In(1),
            "rd_row": In(beat_bits),
            "w": In(WriteSignature(entry, lanes, addr_bits)),
            "bypass": In(BypassSignature(entry, lanes)),
            "o_row": Out(RowSignature(entry, lanes, beat_bits)),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        N = self._lanes
        # A read never relies on the memory for a word written in the same cycle
        # (``no_rw_check``: Yosys then adds no read-during-write multiplexer after the block
        # RAMs): such lanes come from the bypass.
        norw = {"no_rw_check": 1}
        init = [[{"hash": e["hash"], "step": e["step"]} for e in row] for row in self._init]
        m.submodules.mem = mem = memory.Memory(
            shape=data.ArrayLayout(self._key, N), depth=self._depth, init=init, attrs=norw)
        m.submodules.cmem = cmem = memory.Memory(
            shape=data.ArrayLayout(self._count_word, N), depth=self._depth,
            init=[[e["count"] for e in row] for row in self._init], attrs=norw)
        wr, cwr = mem.write_port(granularity=1), cmem.write_port(granularity=1)
        rd, crd = mem.read_port(), cmem.read_port()
        wq_addr = Signal(len(wr.addr))
        wq_entry = Signal(self._entry)
        wq_en, wq_ken = Signal(N), Signal(N)        # lanes whose count / hash and step
        wq_any = Signal()                           # (wq_en.any(), as a register)
        m.d.sync += [wq_en.eq(0), wq_ken.eq(0), wq_any.eq(0)]
        with m.If(self.w.valid):
            m.d.sync += [wq_addr.eq(self.w.addr), wq_entry.eq(self.w.entry),
                         wq_en.eq(self.w.en), wq_ken.eq(self.w.ken), wq_any.eq(1)]
        m.d.comb += [rd.addr.eq(self.raddr), crd.addr.eq(rd.addr), wr.addr.eq(wq_addr),
                     cwr.addr.eq(wq_addr), wr.en.eq(wq_ken), cwr.en.eq(wq_en)]
        for j in range(N):
            m.d.comb += [wr.data[j].hash.eq(wq_entry.hash), wr.data[j].step.eq(wq_entry.step),
                         cwr.data[j].eq(wq_entry.count)]

        s1_valid, s1_beat = Signal(), Signal.like(self.rd_row)
        m.d.sync += [s1_valid.eq(self.issue), s1_beat.eq(self.rd_row)]
        # the bypass: the decision cycle's own read (``bypass.hit``), or the read of the
        # cycle after, issued while the write happens (its address equals the write's). The
        # two never meet: a write is pending only in the cycle after a decision or a context
        # beat, never in a decision cycle; so the bypass's source is chosen by wq_any, a
        # register, not by the decision
        fwd_hit, fwd_key = Signal(), Signal()       # the count; the hash and step too
        fwd_en, fwd_entry = Signal(N), Signal(self._entry)
        late = Signal()
        m.d.comb += late.eq(wq_any & (wq_addr == rd.addr))
        m.d.sync += [fwd_hit.eq(self.bypass.hit | late),
                     fwd_key.eq(Mux(wq_any, late & wq_ken.any(), self.bypass.key)),
                     fwd_en.eq(Mux(wq_any, wq_en, self.bypass.lanes)),
                     fwd_entry.eq(Mux(wq_any, wq_entry, self.bypass.entry))]
        # p0 beside the block RAMs, p1 beside the lanes (the RAMs of a 16-lane window span
        # more of the chip than a register's input can reach in what the RAM's clock-to-out
        # leaves of the cycle); p0's bypass lanes are selected by registers
        p0_row = Signal(data.ArrayLayout(self._entry, N), reset_less=True)
        for j in range(N):
            m.d.sync += [p0_row[j].hash.eq(rd.data[j].hash), p0_row[j].step.eq(rd.data[j].step),
                         p0_row[j].count.eq(crd.data[j])]
        p0_valid, p0_beat = Signal(), Signal.like(s1_beat)
        p1, p1_row = self.o_row, Signal(data.ArrayLayout(self._entry, N), reset_less=True)
        p0_cnt_sel, p0_key_sel = Signal(N), Signal(N)     # lanes taking the bypass's
        p0_fwd_entry = Signal(self._entry)                # count; hash and step too
        m.d.sync += [p0_valid.eq(s1_valid), p0_beat.eq(s1_beat),
                     p0_cnt_sel.eq(Mux(fwd_hit, fwd_en, 0)),
                     p0_key_sel.eq(Mux(fwd_key, fwd_en, 0)), p0_fwd_entry.eq(fwd_entry),
                     p1.valid.eq(p0_valid), p1.beat.eq(p0_beat)]
        for j in range(N):
            src = p0_row[j]
            m.d.sync += [
                p1_row[j].count.eq(Mux(p0_cnt_sel[j], p0_fwd_entry.count, src.count)),
                p1_row[j].hash.eq(Mux(p0_key_sel[j], p0_fwd_entry.hash, src.hash)),
                p1_row[j].step.eq(Mux(p0_key_sel[j], p0_fwd_entry.step, src.step))]
        m.d.comb += [p1.row.eq(p1_row), self.busy.eq(s1_valid | p0_valid | p1.valid)]
        return m
