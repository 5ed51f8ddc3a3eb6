"""The board's serial bridge and memory, fast tier: the host driver's serial link over a
simulated UART against the bridge, with the core's register file as the registers' target
(its reset values, its SLVERR on a read-only offset) and the on-chip memory behind the word
port; every frame error the line can make (a corrupted byte, a frame cut short, an unknown
op, an address out of range) is answered with its status and leaves registers and memory as
they were."""
import random

import pytest

from rtl import CoreRegisters
from rtl.board.system import BoardSystem
from verif.board.sim import run_board
from vrex import regmap
from vrex.config import Config
from vrex.host.driver import OFF, Host
from vrex.host.serial import STATUS, LinkError, SerialLink, crc8, request

DIVISOR = 4


def regs_board(mem_size=4096, bus_bytes=16, timeout=400):
    cfg = Config(kvmu_bus_bytes=bus_bytes)
    from rtl.core.map import perf_names
    regs = CoreRegisters(**cfg.block_params("core_regs"), perf=perf_names())
    return BoardSystem(regs, mem_size=mem_size, bus_bytes=bus_bytes, addr_bits=16,
                       divisor=DIVISOR, timeout=timeout)


@pytest.mark.parametrize("bus_bytes", [16, pytest.param(8, marks=pytest.mark.soak)])
def test_registers_and_memory_over_the_line(bus_bytes):
    """The ID and version registers, a read-write register written and read back, words
    of memory written in frames of several sizes at random places (some not whole words:
    the link reads the edges first) and read back against a model of the memory."""
    rng = random.Random(bus_bytes)
    size = 512
    dut = regs_board(mem_size=size, bus_bytes=bus_bytes)

    async def body(ctx, port):
        link = SerialLink(port, chunk=5)
        host = Host(link)
        ident = await host.identify()
        assert ident["id"] == regmap.ID and ident["version"] >> 24 == regmap.VERSION[0]
        await host.write("TH_R", 0x1234)
        assert await host.read("TH_R") == 0x1234
        model = bytearray(size)
        for _ in range(4):
            n = rng.randint(1, 30)
            a = rng.randrange(0, size - n)
            data = bytes(rng.randrange(256) for _ in range(n))
            await link.write_mem(a, data)
            model[a:a + n] = data
        got = await link.read_mem(0, size)
        return got, bytes(model)

    got, want = run_board(dut, DIVISOR, body)
    assert got == want


def test_line_errors_leave_everything_as_it_was():
    """A frame with a flipped payload bit (CRC), one cut short (TIMEOUT), an unknown op and
    a misaligned or out-of-range address (OP), a write to a read-only register (BUS); after
    each the memory and the registers hold what they held, and the next frame is done."""
    size = 1024
    dut = regs_board(mem_size=size)

    async def body(ctx, port):
        link = SerialLink(port)
        seen = []
        await link.write_mem(0, bytes(range(64)))
        await link.write32(OFF["TH_R"], 7)

        async def answer(frame):
            await port.send(frame)
            head = await port.recv(3)
            seen.append(head[1])
            return head
        bad = bytearray(request("MEM_WRITE", 0, 2, b"\xff" * 8))
        bad[8] ^= 0x10                                   # a payload bit on the line
        await answer(bytes(bad))
        await answer(request("MEM_WRITE", 16, 4, b"\xee" * 16)[:12])    # cut short
        frame = bytearray(request("REG_READ", 0))
        frame[1] = 9
        frame[-1] = crc8(bytes(frame[1:-1]))
        await answer(bytes(frame))                       # no such op
        await answer(request("MEM_WRITE", 2, 1, b"\xdd" * 4))             # misaligned
        await answer(request("MEM_WRITE", size - 4, 2, b"\xcc" * 8))      # past the end
        with pytest.raises(LinkError, match="BUS"):
            await link.write32(OFF["ID"], 0)
        mem = await link.read_mem(0, 64)
        th = await link.read32(OFF["TH_R"])
        return seen, mem, th

    seen, mem, th = run_board(dut, DIVISOR, body)
    assert seen == [STATUS[s][0] for s in ("CRC", "TIMEOUT", "OP", "OP", "OP")], seen
    assert mem == bytes(range(64)), "a refused frame changed the memory"
    assert th == 7
