"""The core's host driver, written once: it loads a stream into the memory the core reads,
writes the registers and the descriptors as the queue takes them, waits for the descriptors
to complete, and reads back the output rows, the error registers and the performance
counters.

The driver speaks to the core through a *link*, any object with these coroutines:

``read32(offset)`` / ``write32(offset, value)``
    a register of the core's AXI4-Lite window (``vrex.regmap``);
``read_mem(addr, n)`` / ``write_mem(addr, data)``
    bytes of the memory on the core's AXI4 master;
``pause(cycles)``
    let about that many core clock cycles pass (a poll's interval).

Three links use it: the core's cocotb testbench (an AXI4-Lite bus model and the memory
model's own contents), the board top's simulation (the serial bridge over a simulated UART,
:mod:`vrex.host.serial`) and a board over a serial port (the same bridge through
``pyserial``). The driver is coroutines so that one text serves a simulator's event loop
and :func:`asyncio.run` alike.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from vrex import regmap

__all__ = ["Host", "RunResult", "HostTimeout", "OFF"]

OFF = {r.name: r.offset for r in regmap.REGISTERS}


class HostTimeout(RuntimeError):
    """The core did not complete the descriptors within the driver's limit."""


@dataclass
class RunResult:
    """What a run gave back: descriptors completed, the output rows per descriptor
    (``[q heads, t, d]`` int16), ``ERROR_CODE`` and the error address."""
    done: int = 0
    o_rows: list = field(default_factory=list)
    error_code: int = 0
    error_addr: int = 0

    @property
    def error(self) -> int:
        """The error's code (``vrex.regmap.ERRORS``), 0 for none."""
        return self.error_code & 0xFF


class Host:
    """The driver of one core behind ``link``. ``poll`` is the cycles between two polls of
    the status; ``on_progress(done, total)`` is called when more
    descriptors have completed; ``on_read(offset, value)`` sees every register read (a
    testbench records the error codes it saw)."""

    def __init__(self, link, *, poll: int = 200, on_progress=None, on_read=None):
        self.link, self.poll = link, poll
        self.on_progress, self.on_read = on_progress, on_read

    async def read(self, name_or_offset) -> int:
        off = OFF.get(name_or_offset, name_or_offset)
        value = await self.link.read32(off)
        if self.on_read:
            self.on_read(off, value)
        return value

    async def write(self, name_or_offset, value: int) -> None:
        await self.link.write32(OFF.get(name_or_offset, name_or_offset), value)

    async def identify(self) -> dict:
        """The ID and version registers and the build's values (``vrex.regmap``); raises if
        the ID is not V-Rex's."""
        ident = await self.read("ID")
        if ident != regmap.ID:
            raise RuntimeError(f"ID register reads {ident:#010x}, not V-Rex's {regmap.ID:#010x}:"
                               " is this a V-Rex core?")
        out = {"id": ident, "version": await self.read("VERSION")}
        for r in regmap.REGISTERS:
            if r.name.startswith("BUILD"):
                out[r.name] = await self.read(r.name)
        return out

    async def load(self, image: dict) -> None:
        """Write every ``address -> bytes`` of a stream's memory image."""
        for addr, raw in image.items():
            await self.link.write_mem(addr, bytes(raw))

    async def configure(self, registers) -> None:
        for off, value in registers:
            await self.write(off, value)

    async def submit(self, descriptors) -> None:
        """Queue each descriptor (``vrex.regmap.encode_descriptor`` of its fields) once the
        queue has room (``STATUS.queue_full`` clear)."""
        for desc in descriptors:
            while await self.read("STATUS") & 4:
                await self.link.pause(self.poll // 10 or 1)
            for w in regmap.encode_descriptor(**desc):
                await self.write("DESC_DATA", w)

    async def wait_done(self, n: int, base: int, *, max_polls: int | None = None,
                        on_timeout=None) -> int:
        """Poll ``DESC_DONE`` until ``n`` descriptors past ``base`` completed; returns how
        many did. Past ``max_polls`` polls raises :class:`HostTimeout` (with what
        ``on_timeout()`` says, e.g. a testbench's snapshot of the core)."""
        polls, logged = 0, 0
        while True:
            done = (await self.read("DESC_DONE") - base) & 0xFFFFFFFF
            if done > logged and self.on_progress:
                self.on_progress(done, n)
            logged = max(logged, done)
            if done >= n:
                return done
            polls += 1
            if max_polls is not None and polls > max_polls:
                err, st = await self.read("ERROR_CODE"), await self.read("STATUS")
                extra = f": {on_timeout()}" if on_timeout else ""
                raise HostTimeout(f"the core did not finish ({done} of {n} done; ERROR_CODE "
                                  f"{err:#x}, STATUS {st:#x}){extra}")
            await self.link.pause(self.poll)

    async def error(self) -> tuple[int, int]:
        """``ERROR_CODE`` and the error address."""
        code = await self.read("ERROR_CODE")
        lo, hi = await self.read("ERROR_ADDR_LO"), await self.read("ERROR_ADDR_HI")
        return code, lo | hi << 32

    async def clear_error(self) -> None:
        await self.write("ERROR_CODE", 1)

    async def counters(self, perf_registers) -> dict:
        """The performance counters (``rtl.core.map.perf_registers()``: the build's), by
        name without the ``PERF_`` prefix, lower case."""
        return {r.name[5:].lower(): await self.read(r.offset) for r in perf_registers}

    async def soft_reset(self, max_polls: int = 5000) -> None:
        """``CTRL.soft_reset``, then wait until the core is idle with an empty queue."""
        ctrl = await self.read("CTRL")
        await self.write("CTRL", ctrl | 2)
        for _ in range(max_polls):
            st = await self.read("STATUS")
            if st & 1 == 0 and st & 2:
                return
            await self.link.pause(10)
        raise HostTimeout(f"not idle after a soft reset: STATUS {st:#x}")

    async def run(self, plan, *, registers: bool = True, load: bool = True,
                  max_polls: int | None = None, on_timeout=None) -> RunResult:
        """A :class:`golden.layout.StreamPlan` end to end: its memory image and registers
        (``registers``/``load`` False: the core and memory keep what they hold), every
        descriptor as the queue takes it, the wait for all, then the output rows and the
        error registers. A plan laid out a descriptor at a time (``desc_images``) writes
        each descriptor's buffers, queues it, waits for it and reads its rows before the
        next."""
        if load:
            await self.load(plan.image)
        if registers:
            await self.configure(plan.registers)
        res = RunResult()
        base = await self.read("DESC_DONE")
        wait = dict(max_polls=max_polls, on_timeout=on_timeout)
        if plan.desc_images:
            for k, desc in enumerate(plan.descriptors):
                await self.load(plan.desc_images[k])
                await self.submit([desc])
                res.done = await self.wait_done(k + 1, base, **wait)
                res.o_rows.append(await self.output(plan, k))
        else:
            await self.submit(plan.descriptors)
            res.done = await self.wait_done(len(plan.descriptors), base, **wait)
            for k in range(len(plan.descriptors)):
                res.o_rows.append(await self.output(plan, k))
        res.error_code, res.error_addr = await self.error()
        return res

    async def output(self, plan, k: int):
        """Descriptor k's output rows ``O [q heads, t, d]`` (int16) read from memory."""
        import numpy as np
        desc, cfg = plan.descriptors[k], plan.cfg
        t, d = desc["step_len"], cfg.head_dim
        raw = await self.link.read_mem(desc["o_addr"], cfg.n_q_heads * t * d * 2)
        return np.frombuffer(bytes(raw), "<i2").reshape(cfg.n_q_heads, t, d)

