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
    (``s_axi_*``, the core's ``m_axi_*`` flipped) and of ``port``. Reads and writes run at
    once (one burst of each at a time, on the memory's read and write ports: a master may
    hold a write's data until a read returns); a response carries its request's ID (the
    core routes responses by ID). A burst that reaches past the memory answers
    SLVERR on those beats (a read's data 0, a write's beats dropped); the bridge's accesses
    go between bursts."""

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
        word = lambda a: a[lg:lg + ceil_log2(depth)] if depth > 1 else 0
        port = Signal()                         # the bridge's word has both ports
        r_idle, w_idle = Signal(), Signal()
        self._reads(m, rd, word, port, r_idle)
        self._writes(m, wr, word, port, w_idle)
        self._port(m, rd, wr, word, port, r_idle & w_idle)
        return m

    def _reads(self, m, rd, word, port, idle):
        """Read bursts: a beat a cycle while ``rready`` holds, SLVERR past the memory."""
        s = lambda n: getattr(self, f"s_axi_{n}")
        bb = self.bus_bytes
        addr, left = Signal(self.addr_bits, name="r_addr"), Signal(9, name="r_left")
        rvalid, rerr, rlast = Signal(), Signal(), Signal()
        rid = Signal.like(s("arid"), name="r_id")
        m.d.comb += [s("rvalid").eq(rvalid), s("rresp").eq(Mux(rerr, SLVERR, OKAY)),
                     s("rlast").eq(rlast), s("rdata").eq(Mux(rerr, 0, rd.data)),
                     s("rid").eq(rid)]
        with m.If(~port):
            m.d.comb += rd.addr.eq(word(addr))
        with m.FSM(name="read_fsm"):
            with m.State("IDLE"):
                m.d.comb += [idle.eq(1), s("arready").eq(~port)]
                with m.If(s("arvalid") & ~port):
                    m.d.sync += [addr.eq(s("araddr")), left.eq(s("arlen") + 1),
                                 rid.eq(s("arid"))]
                    m.next = "READ"
            with m.State("READ"):
                issue = Signal()
                m.d.comb += [issue.eq((left != 0) & (~rvalid | s("rready"))), rd.en.eq(issue)]
                with m.If(issue):
                    m.d.sync += [rvalid.eq(1), rerr.eq(addr >= self.size), rlast.eq(left == 1),
                                 addr.eq(addr + bb), left.eq(left - 1)]
                with m.Elif(s("rready")):
                    m.d.sync += rvalid.eq(0)
                    with m.If(left == 0):
                        m.next = "IDLE"

    def _writes(self, m, wr, word, port, idle):
        """Write bursts: a beat a cycle; the response SLVERR if a beat fell past the memory
        (that beat dropped)."""
        s = lambda n: getattr(self, f"s_axi_{n}")
        addr, berr = Signal(self.addr_bits, name="w_addr"), Signal()
        bid = Signal.like(s("awid"), name="w_id")
        m.d.comb += s("bid").eq(bid)
        with m.If(~port):
            m.d.comb += [wr.addr.eq(word(addr)), wr.data.eq(s("wdata"))]
        with m.FSM(name="write_fsm"):
            with m.State("IDLE"):
                m.d.comb += [idle.eq(1), s("awready").eq(~port)]
                with m.If(s("awvalid") & ~port):
                    m.d.sync += [addr.eq(s("awaddr")), berr.eq(0), bid.eq(s("awid"))]
                    m.next = "WRITE"
            with m.State("WRITE"):
                m.d.comb += s("wready").eq(1)
                with m.If(s("wvalid")):
                    m.d.comb += wr.en.eq(Mux(addr < self.size, s("wstrb"), 0))
                    m.d.sync += [addr.eq(addr + self.bus_bytes),
                                 berr.eq(berr | (addr >= self.size))]
                    with m.If(s("wlast")):
                        m.next = "RESP"
            with m.State("RESP"):
                m.d.comb += [s("bvalid").eq(1), s("bresp").eq(Mux(berr, SLVERR, OKAY))]
                with m.If(s("bready")):
                    m.next = "IDLE"

    def _port(self, m, rd, wr, word, port, idle):
        """The bridge's word, between bursts (both channels idle, no new burst taken while
        it runs): a write's strobes on its lane, a read's word the next cycle."""
        p, bb = self.port, self.bus_bytes
        lg = exact_log2(bb)
        addr = Signal(self.addr_bits, name="p_addr")
        lane = Signal(range(bb // 4) if bb > 4 else 1)
        inside = Signal()
        if bb > 4:
            m.d.comb += lane.eq(addr[2:lg])
        m.d.comb += inside.eq(addr < self.size)
        with m.If(port):
            m.d.comb += [rd.addr.eq(word(addr)), wr.addr.eq(word(addr)),
                         wr.data.eq(Cat(*[p.wdata] * (bb // 4)))]
        with m.FSM(name="port_fsm"):
            with m.State("IDLE"):
                with m.If(p.req & idle & ~self.s_axi_arvalid & ~self.s_axi_awvalid):
                    m.d.sync += addr.eq(p.addr)
                    m.next = "ACCESS"
            with m.State("ACCESS"):
                m.d.comb += [port.eq(1), rd.en.eq(1)]
                with m.If(p.write):
                    m.d.comb += [wr.en.eq(Mux(inside, Const(0xF, 4) << (lane * 4), 0)),
                                 p.ack.eq(1), p.err.eq(~inside)]
                    m.next = "IDLE"
                with m.Else():
                    m.next = "READ"
            with m.State("READ"):
                m.d.comb += [port.eq(1), p.ack.eq(1), p.err.eq(~inside),
                             p.rdata.eq(Mux(inside, rd.data.word_select(lane, 32), 0))]
                m.next = "IDLE"
