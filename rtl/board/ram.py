"""The board's on-chip memory: an AXI4 slave for the core's master (INCR bursts, a beat a
cycle, one burst at a time) and a word port for the serial bridge, over one block RAM."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from rtl.kvmu.axi import axi4_master_members
from vrex.rules import ParameterError

__all__ = ["BoardRam", "WordPort", "ram_rules"]

OKAY, SLVERR = 0, 2


class WordPort(wiring.Signature):
    """A 32-bit word access from the bridge's side: ``req`` with ``addr`` (a byte address,
    4-byte aligned), ``write``, ``wdata`` held until ``ack``; ``rdata`` and ``err`` (the
    address is outside the memory: nothing written) valid with ``ack``."""

    def __init__(self, addr_bits: int):
        super().__init__({"req": Out(1), "addr": Out(addr_bits), "write": Out(1),
                          "wdata": Out(32), "ack": In(1), "rdata": In(32), "err": In(1)})


def ram_rules(*, size, bus_bytes, addr_bits) -> None:
    if bus_bytes not in (4, 8, 16, 32):
        raise ParameterError(f"bus_bytes must be 4, 8, 16 or 32, not {bus_bytes!r}")
    if not isinstance(size, int) or size < bus_bytes or size % bus_bytes:
        raise ParameterError(f"size must be a positive multiple of bus_bytes ({bus_bytes}), "
                             f"not {size!r}")
    if size > 1 << addr_bits:
        raise ParameterError(f"size ({size}) must fit the {addr_bits}-bit address")


class BoardRam(wiring.Component):
    """``size`` bytes, ``8 · bus_bytes`` bits a word, at address 0 of the AXI4 slave
    (``s_axi_*``, the core's ``m_axi_*`` flipped) and of ``port``. A burst that reaches past
    the memory answers SLVERR on those beats (a read's data 0, a write's beats dropped); the
    bridge's accesses go between bursts."""

    def __init__(self, *, size: int, bus_bytes: int, addr_bits: int):
        ram_rules(size=size, bus_bytes=bus_bytes, addr_bits=addr_bits)
        self.size, self.bus_bytes, self.addr_bits = size, bus_bytes, addr_bits
        master = axi4_master_members("s_axi", addr_bits, 8 * bus_bytes)
        super().__init__({**{k: v.flip() for k, v in master.items()},
                          "port": In(WordPort(addr_bits))})

    @property
    def memory_bits(self) -> int:
        return 8 * self.size

    def elaborate(self, platform):
        m = Module()
        depth, bb = self.size // self.bus_bytes, self.bus_bytes
        lg = exact_log2(bb)
        m.submodules.mem = mem = memory.Memory(shape=8 * bb, depth=depth, init=[])
        wr = mem.write_port(granularity=8)
        rd = mem.read_port(transparent_for=())
        s = lambda n: getattr(self, f"s_axi_{n}")
        p = self.port
        addr = Signal(self.addr_bits)           # the burst's next beat's byte address
        left = Signal(9)                        # beats of the burst still to issue
        inside = Signal()
        m.d.comb += [inside.eq(addr < self.size),
                     rd.addr.eq(addr[lg:lg + ceil_log2(depth)] if depth > 1 else 0),
                     wr.addr.eq(rd.addr)]
        rvalid, rerr, rlast = Signal(), Signal(), Signal()
        m.d.comb += [s("rvalid").eq(rvalid), s("rresp").eq(Mux(rerr, SLVERR, OKAY)),
                     s("rlast").eq(rlast), s("rdata").eq(Mux(rerr, 0, rd.data)),
                     s("rid").eq(0), s("bid").eq(0)]
        berr = Signal()
        lane = Signal(range(bb // 4) if bb > 4 else 1)
        with m.FSM(name="ram_fsm"):
            with m.State("IDLE"):
                m.d.comb += [s("arready").eq(1), s("awready").eq(~s("arvalid"))]
                with m.If(s("arvalid")):
                    m.d.sync += [addr.eq(s("araddr")), left.eq(s("arlen") + 1)]
                    m.next = "READ"
                with m.Elif(s("awvalid")):
                    m.d.sync += [addr.eq(s("awaddr")), berr.eq(0)]
                    m.next = "WRITE"
                with m.Elif(p.req):
                    m.d.sync += addr.eq(p.addr)
                    m.next = "PORT"
            with m.State("READ"):
                issue = Signal()
                m.d.comb += [issue.eq((left != 0) & (~rvalid | s("rready"))), rd.en.eq(issue)]
                with m.If(issue):
                    m.d.sync += [rvalid.eq(1), rerr.eq(~inside), rlast.eq(left == 1),
                                 addr.eq(addr + bb), left.eq(left - 1)]
                with m.Elif(s("rready")):
                    m.d.sync += rvalid.eq(0)
                    with m.If(left == 0):
                        m.next = "IDLE"
            with m.State("WRITE"):
                m.d.comb += [s("wready").eq(1), wr.data.eq(s("wdata"))]
                with m.If(s("wvalid")):
                    m.d.comb += wr.en.eq(Mux(inside, s("wstrb"), 0))
                    m.d.sync += [addr.eq(addr + bb), berr.eq(berr | ~inside)]
                    with m.If(s("wlast")):
                        m.next = "RESP"
            with m.State("RESP"):
                m.d.comb += [s("bvalid").eq(1), s("bresp").eq(Mux(berr, SLVERR, OKAY))]
                with m.If(s("bready")):
                    m.next = "IDLE"
            self._port(m, wr, rd, addr, inside, lane, lg)
        return m

    def _port(self, m, wr, rd, addr, inside, lane, lg):
        """The FSM's states of the bridge's word: a write's strobes on its lane (``PORT``), a
        read's word out of the memory the next cycle (``PORT_READ``)."""
        p, bb = self.port, self.bus_bytes
        if bb > 4:
            m.d.comb += lane.eq(addr[2:lg])
        with m.State("PORT"):
            m.d.comb += wr.data.eq(Cat(*[p.wdata] * (bb // 4)))
            with m.If(p.write):
                m.d.comb += [wr.en.eq(Mux(inside, Const(0xF, 4) << (lane * 4), 0)),
                             p.ack.eq(1), p.err.eq(~inside)]
                m.next = "IDLE"
            with m.Else():
                m.next = "PORT_READ"
        with m.State("PORT_READ"):
            m.d.comb += [p.ack.eq(1), p.err.eq(~inside),
                         p.rdata.eq(Mux(inside, rd.data.word_select(lane, 32), 0))]
            m.next = "IDLE"
