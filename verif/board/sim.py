"""The board's serial line in the Amaranth simulator: a host's UART (bits driven on ``rx``
and decoded from ``tx`` at the board's divisor) as the port of :class:`vrex.host.serial.
SerialLink`, so that the host driver runs against the bridge in the fast tier too."""
from __future__ import annotations

from amaranth.sim import Simulator

__all__ = ["SimUartPort", "run_board"]


class SimUartPort:
    """``send`` drives each byte's bits on ``rx``, ``gap`` idle bit times between bytes (a
    host that pauses); ``recv`` takes bytes a background process decoded from ``tx`` (a
    ``TimeoutError`` after ``timeout`` cycles without one)."""

    def __init__(self, dut, divisor: int, *, timeout: int = 200_000):
        self.dut, self.d, self.timeout = dut, divisor, timeout
        self.got, self.ctx, self.gap = [], None, 0

    async def send(self, data: bytes) -> None:
        ctx, d = self.ctx, self.d
        for byte in data:
            bits = [0] + [(byte >> i) & 1 for i in range(8)] + [1] + [1] * self.gap
            for b in bits:
                ctx.set(self.dut.rx, b)
                await ctx.tick().repeat(d)

    async def recv(self, n: int) -> bytes:
        waited = 0
        while len(self.got) < n:
            await self.ctx.tick()
            waited += 1
            if waited > self.timeout:
                raise TimeoutError(f"{len(self.got)} of {n} bytes came from the board")
        out, self.got[:] = bytes(self.got[:n]), self.got[n:]
        return out

    async def flush(self) -> None:
        await self.ctx.tick().repeat(self.timeout // 20)
        self.got.clear()

    async def pause(self, cycles: int) -> None:
        await self.ctx.tick().repeat(cycles)

    def decoder(self):
        """The background process that decodes ``tx`` (8N1, sampled mid-bit)."""
        dut, d = self.dut, self.d

        async def run(ctx):
            while True:
                while ctx.get(dut.tx):
                    await ctx.tick()
                await ctx.tick().repeat(d // 2)
                byte = 0
                for i in range(8):
                    await ctx.tick().repeat(d)
                    byte |= ctx.get(dut.tx) << i
                await ctx.tick().repeat(d)
                assert ctx.get(dut.tx) == 1, "the board's stop bit is low"
                self.got.append(byte)
        return run


def run_board(dut, divisor: int, body, *, timeout: int = 200_000):
    """Simulate ``dut`` (a :class:`rtl.board.system.BoardSystem`) with ``body(ctx, port)``
    as the host's testbench; returns what ``body`` returned."""
    port = SimUartPort(dut, divisor, timeout=timeout)
    out = {}

    async def host(ctx):
        port.ctx = ctx
        ctx.set(dut.rx, 1)
        await ctx.tick().repeat(4)
        out["value"] = await body(ctx, port)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(host)
    sim.add_testbench(port.decoder(), background=True)
    sim.run()
    return out["value"]
