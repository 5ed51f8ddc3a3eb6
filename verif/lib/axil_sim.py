"""An AXI4-Lite host for the Amaranth simulator: one write or read at a time on the
``{prefix}_*`` ports of a design, each channel paused by a pause generator."""
from __future__ import annotations

from .pauses import no_pause

__all__ = ["AxiLiteHost"]


class AxiLiteHost:
    def __init__(self, dut, *, prefix: str = "s_axil", src=None, snk=None):
        self.dut, self.prefix = dut, prefix
        self.src, self.snk = src or no_pause(), snk or no_pause()

    def s(self, name):
        return getattr(self.dut, f"{self.prefix}_{name}")

    async def _wait(self, ctx, pauses):
        while next(pauses):
            await ctx.tick()

    async def write(self, ctx, off: int, data: int, strb: int = 0xF) -> int:
        """Write one word; returns BRESP."""
        s = self.s
        await self._wait(ctx, self.src)
        ctx.set(s("awaddr"), off)
        ctx.set(s("awvalid"), 1)
        await ctx.tick().until(s("awready"))
        ctx.set(s("awvalid"), 0)
        await self._wait(ctx, self.src)
        ctx.set(s("wdata"), data)
        ctx.set(s("wstrb"), strb)
        ctx.set(s("wvalid"), 1)
        await ctx.tick().until(s("wready"))
        ctx.set(s("wvalid"), 0)
        await self._wait(ctx, self.snk)
        ctx.set(s("bready"), 1)
        (resp,) = await ctx.tick().sample(s("bresp")).until(s("bvalid"))
        ctx.set(s("bready"), 0)
        return resp

    async def read(self, ctx, off: int) -> tuple[int, int]:
        """Read one word; returns ``(data, RRESP)``."""
        s = self.s
        await self._wait(ctx, self.src)
        ctx.set(s("araddr"), off)
        ctx.set(s("arvalid"), 1)
        await ctx.tick().until(s("arready"))
        ctx.set(s("arvalid"), 0)
        await self._wait(ctx, self.snk)
        ctx.set(s("rready"), 1)
        data, resp = await ctx.tick().sample(s("rdata"), s("rresp")).until(s("rvalid"))
        ctx.set(s("rready"), 0)
        return data, resp
