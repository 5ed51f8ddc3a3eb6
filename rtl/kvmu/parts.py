"""The KVMU's small parts: the bus's bookkeeping, the versions announced per layer, the sticky
error, and the layouts they and the control share (``rtl.kvmu.kvmu`` joins them)."""
from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Array, Cat, Module, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, ceil_log2

__all__ = ["KvmuLayouts", "events", "KvmuBus", "KvmuVersions", "KvmuErrors"]


@dataclass(frozen=True)
class KvmuLayouts:
    """The tables' entries and the fetch bursts' descriptors, and the sizes they follow."""
    bid_bits: int           # a block's number
    ns_bits: int            # a near slot's number
    block_beats: int        # bus beats of a block
    ctab: data.StructLayout     # a cluster: its block list, counts, poisoning
    btab: data.StructLayout     # a block: the next one, its fill, tier and slot
    nown: data.StructLayout     # a near slot's owner
    desc: data.StructLayout     # a fetch burst (or a fetch's end) for the delivery

    @classmethod
    def of(cls, unit) -> "KvmuLayouts":
        bid_bits = max(1, ceil_log2(unit._blocks))
        ns_bits = max(1, ceil_log2(unit._near_slots))
        block_beats = unit.block_bytes // unit._bus_bytes
        ctab = data.StructLayout({"valid": 1, "head": bid_bits, "tail": bid_bits,
                                  "count": unit._count_bits, "cur_step": unit._step_bits,
                                  "cur_n": unit._count_bits, "poisoned": 1})
        btab = data.StructLayout({"next": bid_bits, "has_next": 1,
                                  "fill": bits_for(unit._bt), "far": 1,
                                  "slot": max(bid_bits, ns_bits)})
        nown = data.StructLayout({"valid": 1, "bid": bid_bits})
        desc = data.StructLayout({"end": 1, "stale": 1, "err": 1, "far": 1, "bid": bid_bits,
                                  "off": bits_for(block_beats), "beats": 9,
                                  "addr": unit._addr_bits})
        return cls(bid_bits, ns_bits, block_beats, ctab, btab, nown, desc)


def events(*names) -> Out:
    """An ``ev`` port: one flag a counter, set in a cycle the counter advances (the unit adds
    the counter's step once when any part sets its flag)."""
    return Out(data.StructLayout({n: 1 for n in names}))


class KvmuBus(wiring.Component):
    """The AXI4 master's bookkeeping: the bursts outstanding, the address of every write
    burst in flight (for the error report of its B), the first B error of the current STORE
    or offload (``b_err``, until ``b_clear``) and the channels' counters."""

    COUNTERS = ("wait_ar", "wait_aw", "wait_w", "wait_r", "wait_b", "read_bursts",
                "write_bursts", "bus_errors")

    def __init__(self, *, bus_bytes: int, addr_bits: int, max_reads: int, max_writes: int):
        self._bus_bytes, self._addr_bits = bus_bytes, addr_bits
        self._max_reads, self._max_writes = max_reads, max_writes
        super().__init__({
            "arvalid": In(1), "arready": In(1), "awvalid": In(1), "awready": In(1),
            "awaddr": In(addr_bits), "wvalid": In(1), "wready": In(1), "rvalid": In(1),
            "rready": In(1), "rlast": In(1), "bvalid": In(1), "bresp": In(2),
            "reads_out": Out(range(max_reads + 1)), "writes_out": Out(range(max_writes + 1)),
            "b_clear": In(1),
            "b_err": Out(1), "b_err_addr": Out(addr_bits), "b_err_resp": Out(2),
            "ev": events(*self.COUNTERS),
        })

    def elaborate(self, platform):
        m = Module()
        ar_go = self.arvalid & self.arready
        aw_go = self.awvalid & self.awready
        r_go = self.rvalid & self.rready
        b_go = self.bvalid                  # (bready is always 1)
        m.d.sync += [self.reads_out.eq(self.reads_out + ar_go - (r_go & self.rlast)),
                     self.writes_out.eq(self.writes_out + aw_go - b_go)]
        m.submodules.wq = wq = fifo.SyncFIFO(width=self._addr_bits, depth=self._max_writes)
        m.d.comb += [wq.w_data.eq(self.awaddr), wq.w_en.eq(aw_go), wq.r_en.eq(b_go)]
        with m.If(b_go & (self.bresp != 0) & ~self.b_err):
            m.d.sync += [self.b_err.eq(1), self.b_err_addr.eq(wq.r_data),
                         self.b_err_resp.eq(self.bresp)]
        with m.If(self.b_clear):
            m.d.sync += self.b_err.eq(0)
        ev = self.ev
        m.d.comb += [ev.wait_ar.eq(self.arvalid & ~self.arready),
                     ev.wait_aw.eq(self.awvalid & ~self.awready),
                     ev.wait_w.eq(self.wvalid & ~self.wready),
                     ev.wait_r.eq((self.reads_out != 0) & ~self.rvalid),
                     ev.wait_b.eq((self.writes_out != 0) & ~self.bvalid),
                     ev.read_bursts.eq(ar_go), ev.write_bursts.eq(aw_go),
                     ev.bus_errors.eq(b_go & (self.bresp != 0))]
        return m


class KvmuVersions(wiring.Component):
    """The newest version announced per layer on ``announce``, for the stale check (read
    for ``layer``: ``seen``, ``newest``); a layer beyond the build (``bad``) or a version
    older than the layer's newest (``back``) is ignored and reported; ``reset`` forgets
    every layer's."""

    def __init__(self, *, layers: int, version_bits: int):
        self._layers, self._bits = layers, version_bits
        super().__init__({
            "announce": In(stream.Signature(data.StructLayout(
                {"layer": 8, "version": version_bits}))),
            "reset": In(1), "layer": In(8),
            "seen": Out(1), "newest": Out(version_bits),
            "bad": Out(1), "back": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        v = self.announce
        newest = Array(Signal(self._bits, name=f"newest_{i}") for i in range(self._layers))
        seen = Array(Signal(name=f"seen_{i}") for i in range(self._layers))
        m.d.comb += v.ready.eq(1)
        with m.If(v.valid):
            with m.If(v.payload.layer >= self._layers):
                m.d.comb += self.bad.eq(1)
            with m.Elif(seen[v.payload.layer] &
                        (v.payload.version < newest[v.payload.layer])):
                m.d.comb += self.back.eq(1)
            with m.Else():
                m.d.sync += [newest[v.payload.layer].eq(v.payload.version),
                             seen[v.payload.layer].eq(1)]
        with m.If(self.reset):
            m.d.sync += [s.eq(0) for s in seen]
        m.d.comb += [self.seen.eq(seen[self.layer]), self.newest.eq(newest[self.layer])]
        return m


class KvmuErrors(wiring.Component):
    """The sticky error: the first one since ``clear`` keeps its code, response and
    address. Each source's event is registered as it is (the decisions that raise one were
    the clock's limit), then the first source in order is taken: the error shows one cycle
    after its event, ``pending`` (busy) stays up meanwhile, and ``clear`` drops both.
    ``sources``: the sources' constant codes, or None for one given on its port."""

    def __init__(self, *, sources: tuple, addr_bits: int):
        self._codes = sources
        ports = {"clr": In(1), "pending": Out(1), "sticky": Out(1), "code": Out(4),
                 "resp": Out(2), "addr": Out(addr_bits)}
        for i, code in enumerate(sources):
            ports[f"ev{i}"] = In(1)
            ports[f"resp{i}"] = In(2)
            ports[f"addr{i}"] = In(addr_bits)
            if code is None:
                ports[f"code{i}"] = In(4)
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        regs = []
        for i, code in enumerate(self._codes):
            ev, code_r = Signal(name=f"e{i}_ev"), Signal(4, name=f"e{i}_code")
            resp, addr = Signal(2, name=f"e{i}_resp"), Signal(len(self.addr),
                                                              name=f"e{i}_addr")
            m.d.sync += [ev.eq(getattr(self, f"ev{i}") & ~self.clr),
                         code_r.eq(getattr(self, f"code{i}") if code is None else code),
                         resp.eq(getattr(self, f"resp{i}")),
                         addr.eq(getattr(self, f"addr{i}"))]
            regs.append((ev, code_r, resp, addr))
        m.d.comb += self.pending.eq(Cat(*[r[0] for r in regs]).any())
        with m.If(self.clr):
            m.d.sync += self.sticky.eq(0)
        with m.Elif(self.pending):
            m.d.sync += self.sticky.eq(1)
        with m.If(~self.clr & ~self.sticky):
            for k, (ev, code, resp, addr) in enumerate(regs):
                with (m.If if k == 0 else m.Elif)(ev):
                    m.d.sync += [self.code.eq(code), self.resp.eq(resp),
                                 self.addr.eq(addr)]
        return m
