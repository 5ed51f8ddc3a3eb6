"""An AXI4 slave memory for the Amaranth simulator (the fast tier of a block with a bus):
the same contract the cocotb tier gets from cocotbext-axi's ``AxiRam``, with every channel
paused by a pause generator, a read and a write-response latency in cycles, one-shot faults
that answer SLVERR or DECERR at a chosen address, and a log of every burst. Responses come in
order and carry their burst's ID; byte strobes are honoured (``full_strobes`` asserts the
master never writes a partial beat). It checks the
master's side of the protocol as it goes: INCR bursts of the bus width, no 4 KB crossing,
``wlast`` exactly on the burst's last beat, at most 256 beats.
"""
from __future__ import annotations

from collections import deque

from .pauses import no_pause

__all__ = ["AxiMemSim", "take_fault"]


def take_fault(faults: dict, key) -> int:
    """The answer of the access ``key`` (``("read"|"write", addr)``) under ``faults``: a
    response code, one-shot; or a list of them, one per access to that address in turn
    (``[0, 2]``: the first is answered OKAY, the second SLVERR). 0: no fault."""
    v = faults.get(key, 0)
    if isinstance(v, list):
        resp = v.pop(0) if v else 0
        if not v:
            del faults[key]
        return resp
    faults.pop(key, None)
    return v


class AxiMemSim:
    """A sparse byte memory behind the ``{prefix}_*`` AXI4 ports of ``dut``."""

    def __init__(self, dut, *, bus_bytes: int, prefix: str = "m_axi", latency: int = 0,
                 pauses: dict | None = None, full_strobes: bool = True):
        self.dut, self.bus, self.prefix = dut, bus_bytes, prefix
        self.full_strobes = full_strobes
        self.latency = latency
        self.pauses = {ch: no_pause() for ch in ("ar", "r", "aw", "w", "b")}
        self.pauses.update(pauses or {})
        self.mem: dict[int, int] = {}
        self.ar_log: list = []          # (addr, bytes) per read burst, in order
        self.aw_log: list = []
        self.faults: dict = {}          # ("read"|"write", addr) -> resp(s): take_fault
        # a memory that keeps the wrong bytes: addr -> f(beat bytes) -> bytes kept, the first
        # time a beat is written there (answered OKAY)
        self.tamper: dict = {}
        self.stop = False

    def sig(self, name):
        return getattr(self.dut, f"{self.prefix}_{name}")

    def read_bytes(self, addr: int, n: int) -> bytes:
        return bytes(self.mem.get(addr + i, 0) for i in range(n))

    def write_bytes(self, addr: int, data: bytes):
        for i, b in enumerate(data):
            self.mem[addr + i] = b

    def _check(self, kind, addr, beats, size, burst):
        assert size == self.bus.bit_length() - 1, f"{kind}: size {size}, bus {self.bus} bytes"
        assert burst == 1, f"{kind}: burst type {burst}, not INCR"
        assert 1 <= beats <= 256
        assert addr % self.bus == 0, f"{kind}: unaligned address {addr:#x}"
        assert addr // 4096 == (addr + beats * self.bus - 1) // 4096, \
            f"{kind}: burst at {addr:#x} of {beats} beats crosses a 4 KB boundary"

    async def reads(self, ctx):
        q, cycle, beat = deque(), 0, 0
        held = None                         # the fault answer of a beat offered, not taken
        s = self.sig
        while not self.stop:
            arready = not next(self.pauses["ar"])
            ctx.set(s("arready"), arready)
            rvalid = False
            if q and cycle >= q[0][2] + self.latency and not next(self.pauses["r"]):
                addr, beats, _, rid = q[0]
                a = addr + beat * self.bus
                ctx.set(s("rid"), rid)
                if held is None:
                    held = take_fault(self.faults, ("read", a))
                resp = held
                ctx.set(s("rdata"), int.from_bytes(self.read_bytes(a, self.bus), "little"))
                ctx.set(s("rresp"), resp)
                ctx.set(s("rlast"), beat == beats - 1)
                rvalid = True
            ctx.set(s("rvalid"), rvalid)
            await ctx.delay(1e-9)
            if arready and ctx.get(s("arvalid")):
                addr, beats = ctx.get(s("araddr")), ctx.get(s("arlen")) + 1
                self._check("AR", addr, beats, ctx.get(s("arsize")), ctx.get(s("arburst")))
                q.append((addr, beats, cycle + 1, ctx.get(s("arid"))))
                self.ar_log.append((addr, beats * self.bus))
            if rvalid and ctx.get(s("rready")):
                held = None
                beat += 1
                if beat == q[0][1]:
                    q.popleft()
                    beat = 0
            await ctx.tick()
            cycle += 1

    async def writes(self, ctx):
        aws, bq, cycle, beat, resp = deque(), deque(), 0, 0, 0
        s = self.sig
        while not self.stop:
            awready = not next(self.pauses["aw"])
            wready = bool(aws) and not next(self.pauses["w"])
            ctx.set(s("awready"), awready)
            ctx.set(s("wready"), wready)
            bvalid = bool(bq) and cycle >= bq[0][1] + self.latency and \
                not next(self.pauses["b"])
            ctx.set(s("bvalid"), bvalid)
            ctx.set(s("bresp"), bq[0][0] if bvalid else 0)
            ctx.set(s("bid"), bq[0][2] if bvalid else 0)
            await ctx.delay(1e-9)
            if wready and ctx.get(s("wvalid")):
                addr, beats, wid = aws[0]
                a = addr + beat * self.bus
                strb = ctx.get(s("wstrb"))
                if self.full_strobes:
                    assert strb == (1 << self.bus) - 1
                raw = ctx.get(s("wdata")).to_bytes(self.bus, "little")
                if a in self.tamper:
                    raw = self.tamper.pop(a)(raw)
                for i in range(self.bus):
                    if strb >> i & 1:
                        self.mem[a + i] = raw[i]
                resp = resp or take_fault(self.faults, ("write", a))
                last = bool(ctx.get(s("wlast")))
                assert last == (beat == beats - 1), \
                    f"W: wlast={last} on beat {beat} of a {beats}-beat burst at {addr:#x}"
                beat += 1
                if last:
                    aws.popleft()
                    bq.append((resp, cycle + 1, wid))
                    beat, resp = 0, 0
            if awready and ctx.get(s("awvalid")):
                addr, beats = ctx.get(s("awaddr")), ctx.get(s("awlen")) + 1
                self._check("AW", addr, beats, ctx.get(s("awsize")), ctx.get(s("awburst")))
                aws.append((addr, beats, ctx.get(s("awid"))))
                self.aw_log.append((addr, beats * self.bus))
            if bvalid and ctx.get(s("bready")):
                bq.popleft()
            await ctx.tick()
            cycle += 1
