"""The serial bridge: request frames from the host's UART (``vrex.host.serial`` has the
format) become AXI4-Lite accesses of the core's registers or word accesses of the board's
memory; each frame is answered. Nothing of a frame is done before its CRC has matched."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from vrex.host.serial import MAX_WORDS, OPS, REPLY, STATUS, SYNC
from vrex.rules import ParameterError

from .ram import WordPort

__all__ = ["SerialBridge", "crc8_next", "axil_master_members"]

REG_WINDOW = 4096
ST = {name: code for name, (code, _) in STATUS.items()}


def crc8_next(crc, byte):
    """The CRC-8 (polynomial 0x07) after ``byte``: eight shifts, unrolled."""
    c = crc ^ byte
    for _ in range(8):
        c = Mux(c[7], (c << 1)[:8] ^ 0x07, (c << 1)[:8])
    return c


def axil_master_members(prefix: str, addr_bits: int = 12) -> dict:
    """An AXI4-Lite master's members, named as the core's ``s_axil_*`` flipped."""
    p = prefix
    return {f"{p}_awaddr": Out(addr_bits), f"{p}_awprot": Out(3), f"{p}_awvalid": Out(1),
            f"{p}_awready": In(1), f"{p}_wdata": Out(32), f"{p}_wstrb": Out(4),
            f"{p}_wvalid": Out(1), f"{p}_wready": In(1), f"{p}_bresp": In(2),
            f"{p}_bvalid": In(1), f"{p}_bready": Out(1), f"{p}_araddr": Out(addr_bits),
            f"{p}_arprot": Out(3), f"{p}_arvalid": Out(1), f"{p}_arready": In(1),
            f"{p}_rdata": In(32), f"{p}_rresp": In(2), f"{p}_rvalid": In(1),
            f"{p}_rready": Out(1)}


class SerialBridge(wiring.Component):
    """Bytes in on ``rx``, answers out on ``tx``; ``m_axil_*`` to the core's registers,
    ``mem`` to the board's memory of ``mem_size`` bytes. A frame with no byte for
    ``timeout`` cycles is answered ``TIMEOUT``. ``frames`` and ``errors`` count the frames
    answered and those answered with an error status (for the board's LEDs)."""

    def __init__(self, *, mem_size: int, addr_bits: int, timeout: int):
        for name, v, lo in (("mem_size", mem_size, 4), ("timeout", timeout, 2)):
            if not isinstance(v, int) or v < lo:
                raise ParameterError(f"{name} must be an int of at least {lo}, not {v!r}")
        if mem_size > 1 << addr_bits or mem_size % 4:
            raise ParameterError(f"mem_size ({mem_size}) must be a multiple of 4 within the "
                                 f"{addr_bits}-bit address")
        self.mem_size, self.addr_bits, self.timeout = mem_size, addr_bits, timeout
        super().__init__({"rx": In(stream.Signature(8)), "tx": Out(stream.Signature(8)),
                          **axil_master_members("m_axil"), "mem": Out(WordPort(addr_bits)),
                          "frames": Out(16), "errors": Out(16)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.buf = buf = memory.Memory(shape=32, depth=MAX_WORDS, init=[])
        bw, br = buf.write_port(), buf.read_port(transparent_for=())
        f = _Frame(m)
        timer = Signal(range(self.timeout + 1))
        got, in_frame = Signal(), Signal()
        rx, tx = self.rx, self.tx
        m.d.comb += got.eq(rx.valid & rx.ready)
        with m.If(got | ~in_frame):            # the gap since the frame's last byte
            m.d.sync += timer.eq(0)
        with m.Elif(timer != self.timeout):
            m.d.sync += timer.eq(timer + 1)
        with m.If(got):
            m.d.sync += f.crc.eq(crc8_next(f.crc, rx.payload))
        with m.If(tx.valid & tx.ready):
            m.d.sync += f.tcrc.eq(crc8_next(f.tcrc, tx.payload))
        s = lambda n: getattr(self, f"m_axil_{n}")
        p = self.mem
        addr = Signal(32)
        m.d.comb += [addr.eq(f.addr + Cat(Const(0, 2), f.count)), br.addr.eq(f.count),
                     s("awaddr").eq(addr[:12]), s("araddr").eq(addr[:12]),
                     s("wdata").eq(br.data), s("wstrb").eq(0xF),
                     p.addr.eq(addr), p.wdata.eq(br.data)]
        with m.FSM(name="bridge_fsm"):
            self._receive(m, f, bw, timer, got, in_frame)
            self._execute(m, f, bw)
            self._answer(m, f, br)
        return m

    def _receive(self, m, f, bw, timer, got, in_frame):
        """IDLE to CHECK: the frame's bytes, its CRC and the timeout."""
        rx = self.rx

        def timed_out():
            with m.If(~got & (timer == self.timeout)):
                m.d.sync += f.status.eq(ST["TIMEOUT"])
                m.next = "ANSWER"
        with m.State("IDLE"):
            m.d.comb += rx.ready.eq(1)
            with m.If(got & (rx.payload == SYNC)):
                m.d.sync += [f.crc.eq(0), f.count.eq(0), f.status.eq(ST["OK"])]
                m.next = "HEAD"
        with m.State("HEAD"):                 # op, address, words - 1: six bytes
            m.d.comb += [rx.ready.eq(1), in_frame.eq(1)]
            with m.If(got):
                m.d.sync += [f.head.eq(Cat(f.head[8:], rx.payload)), f.count.eq(f.count + 1)]
                with m.If(f.count == 5):
                    m.d.sync += f.count.eq(0)
                    with m.If(f.is_write_op(f.head[8:16])):
                        m.next = "DATA"
                    with m.Else():
                        m.next = "CRC"
            timed_out()
        with m.State("DATA"):                 # a write's payload into the buffer
            m.d.comb += [rx.ready.eq(1), in_frame.eq(1)]
            with m.If(got):
                m.d.sync += [f.word.eq(Cat(f.word[8:], rx.payload)), f.count.eq(f.count + 1)]
                with m.If(f.count[:2] == 3):
                    m.d.comb += [bw.en.eq(1), bw.addr.eq(f.count[2:]),
                                 bw.data.eq(Cat(f.word[8:], rx.payload))]
                    with m.If(f.count[2:] == f.last):
                        m.next = "CRC"
            timed_out()
        with m.State("CRC"):
            m.d.comb += [rx.ready.eq(1), in_frame.eq(1)]
            with m.If(got):
                with m.If(rx.payload != f.crc):
                    m.d.sync += f.status.eq(ST["CRC"])
                    m.next = "ANSWER"
                with m.Else():
                    m.next = "CHECK"
            timed_out()
        with m.State("CHECK"):
            end = f.addr + Cat(Const(0, 2), f.last + 1)
            bad = Signal()
            m.d.comb += bad.eq((f.addr[:2] != 0) | (f.op == 0) | (f.op > 4) |
                               Mux(f.op <= OPS["REG_WRITE"], end > REG_WINDOW,
                                   end > self.mem_size))
            m.d.sync += f.count.eq(0)
            with m.If(bad):
                m.d.sync += f.status.eq(ST["OP"])
                m.next = "ANSWER"
            with m.Else():
                m.next = "EXEC"

    def _execute(self, m, f, bw):
        """EXEC to the end of the frame's words: each a register access over AXI4-Lite or
        a word of the memory; a read's words into the buffer, a write's out of it (the
        buffer's word at the count is read in EXEC)."""
        s = lambda n: getattr(self, f"m_axil_{n}")
        p = self.mem

        def nxt():
            m.d.sync += f.count.eq(f.count + 1)
            with m.If(f.count == f.last):
                m.next = "ANSWER"
            with m.Else():
                m.next = "EXEC"
        with m.State("EXEC"):
            with m.If(f.op == OPS["REG_READ"]):
                m.next = "AR"
            with m.Elif(f.op == OPS["REG_WRITE"]):
                m.next = "AW"
            with m.Else():
                m.next = "MEM"
        with m.State("AR"):
            m.d.comb += s("arvalid").eq(1)
            with m.If(s("arready")):
                m.next = "R"
        with m.State("R"):
            m.d.comb += s("rready").eq(1)
            with m.If(s("rvalid")):
                m.d.comb += [bw.en.eq(1), bw.addr.eq(f.count), bw.data.eq(s("rdata"))]
                with m.If(s("rresp") != 0):
                    m.d.sync += f.status.eq(ST["BUS"])
                nxt()
        with m.State("AW"):                 # address and data together, then the answer
            m.d.comb += [s("awvalid").eq(~f.aw_done), s("wvalid").eq(~f.w_done)]
            aw = f.aw_done | s("awready")
            w = f.w_done | s("wready")
            m.d.sync += [f.aw_done.eq(aw), f.w_done.eq(w)]
            with m.If(aw & w):
                m.d.sync += [f.aw_done.eq(0), f.w_done.eq(0)]
                m.next = "B"
        with m.State("B"):
            m.d.comb += s("bready").eq(1)
            with m.If(s("bvalid")):
                with m.If(s("bresp") != 0):
                    m.d.sync += f.status.eq(ST["BUS"])
                nxt()
        with m.State("MEM"):
            m.d.comb += [p.req.eq(1), p.write.eq(f.op == OPS["MEM_WRITE"])]
            with m.If(p.ack):
                with m.If(f.op == OPS["MEM_READ"]):
                    m.d.comb += [bw.en.eq(1), bw.addr.eq(f.count), bw.data.eq(p.rdata)]
                nxt()

    def _answer(self, m, f, br):
        """ANSWER to IDLE: ``0xA5``, the status, a read's words (answered OK or BUS), the
        CRC; the frame counters."""
        tx = self.tx
        payload = Signal()
        sent = tx.valid & tx.ready
        with m.State("ANSWER"):
            m.d.comb += [tx.valid.eq(1), tx.payload.eq(REPLY)]
            with m.If(sent):
                m.d.sync += [f.tcrc.eq(0), f.count.eq(0),
                             self.frames.eq(self.frames + 1),
                             self.errors.eq(self.errors + (f.status != ST["OK"]))]
                m.next = "STATUS"
        with m.State("STATUS"):
            m.d.comb += payload.eq(f.is_read_op(f.op) & ((f.status == ST["OK"]) |
                                                         (f.status == ST["BUS"])))
            m.d.comb += [tx.valid.eq(1), tx.payload.eq(f.status), br.addr.eq(0)]
            with m.If(sent & payload):
                m.next = "WORDS"
            with m.Elif(sent):
                m.next = "TCRC"
        with m.State("WORDS"):              # byte count[:2] of word count[2:]
            m.d.comb += [tx.valid.eq(1), br.addr.eq(f.count[2:] + (sent & (f.count[:2] == 3))),
                         tx.payload.eq(br.data.word_select(f.count[:2], 8))]
            with m.If(sent):
                m.d.sync += f.count.eq(f.count + 1)
                with m.If((f.count[:2] == 3) & (f.count[2:] == f.last)):
                    m.next = "TCRC"
        with m.State("TCRC"):
            m.d.comb += [tx.valid.eq(1), tx.payload.eq(f.tcrc)]
            with m.If(sent):
                m.next = "IDLE"


class _Frame:
    """The frame's registers: the header's six bytes (op, address, words - 1), the CRCs,
    a byte or word counter, the status, the write handshakes' progress."""

    def __init__(self, m):
        width = ceil_log2(MAX_WORDS) + 2
        self.head = Signal(48, name="frame_head")
        self.crc, self.tcrc = Signal(8, name="frame_crc"), Signal(8, name="frame_tcrc")
        self.count = Signal(width + 1, name="frame_count")
        self.word = Signal(32, name="frame_word")
        self.status = Signal(8, name="frame_status")
        self.aw_done, self.w_done = Signal(name="aw_done"), Signal(name="w_done")
        self.op, self.addr, self.last = self.head[:8], self.head[8:40], self.head[40:48]

    @staticmethod
    def is_write_op(op):
        return (op == OPS["REG_WRITE"]) | (op == OPS["MEM_WRITE"])

    @staticmethod
    def is_read_op(op):
        return (op == OPS["REG_READ"]) | (op == OPS["MEM_READ"])
