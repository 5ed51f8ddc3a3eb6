"""The host's serial link against a model of the bridge in Python (``vrex.host.serial``'s
frames): words of registers and memory, unaligned memory writes (the edges read first),
frames split at the link's chunk, a line error answered and retried, an error answer
raised with its status, a malformed answer refused."""
import asyncio

import pytest

from vrex.host.serial import (OPS, STATUS, LinkError, SerialLink, crc8, parse_reply,
                              reply_bytes, request)


class ModelPort:
    """Answers each request as the bridge does; ``faults``: statuses to answer in turn
    instead of doing the next requests."""

    def __init__(self, size=1024, faults=()):
        self.mem, self.regs, self.out = bytearray(size), {}, bytearray()
        self.faults, self.frames = list(faults), []

    async def send(self, data):
        assert data[0] == 0x5A and crc8(data[1:-1]) == data[-1]
        op, addr, n = data[1], int.from_bytes(data[2:6], "little"), data[6] + 1
        self.frames.append((op, addr, n))
        if self.faults:
            self.out += reply_bytes(STATUS[self.faults.pop(0)][0])
            return
        payload, body = b"", data[7:-1]
        if op == OPS["MEM_WRITE"]:
            self.mem[addr:addr + 4 * n] = body
        elif op == OPS["MEM_READ"]:
            payload = bytes(self.mem[addr:addr + 4 * n])
        elif op == OPS["REG_WRITE"]:
            self.regs[addr] = int.from_bytes(body, "little")
        else:
            payload = self.regs.get(addr, 0).to_bytes(4, "little")
        self.out += reply_bytes(0, payload)

    async def recv(self, n):
        if len(self.out) < n:
            raise TimeoutError("no answer")
        got, self.out[:] = bytes(self.out[:n]), self.out[n:]
        return got

    async def flush(self):
        self.out.clear()


def test_words_chunks_and_edges():
    port = ModelPort()
    link = SerialLink(port, chunk=3)

    async def go():
        await link.write32(0x38, 0xDEADBEEF)
        assert await link.read32(0x38) == 0xDEADBEEF
        await link.write_mem(0, bytes(range(64)))
        await link.write_mem(5, b"\xAA\xBB\xCC")          # inside one word, unaligned
        return await link.read_mem(1, 30)
    got = asyncio.run(go())
    want = bytearray(range(64))
    want[5:8] = b"\xAA\xBB\xCC"
    assert got == bytes(want[1:31])
    assert max(n for _, _, n in port.frames) == 3


def test_line_errors_are_retried_and_errors_raised():
    port = ModelPort(faults=["CRC", "TIMEOUT"])
    link = SerialLink(port, retries=2)
    asyncio.run(link.write32(0x38, 5))
    assert port.regs[0x38] == 5 and len(port.frames) == 3
    port.faults = ["BUS"]
    with pytest.raises(LinkError, match="BUS") as e:
        asyncio.run(link.write32(0x0, 5))
    assert e.value.status == "BUS"
    port.faults = ["CRC"]
    with pytest.raises(LinkError, match="CRC"):
        asyncio.run(SerialLink(port).read32(0))


def test_malformed_answers_and_requests():
    with pytest.raises(LinkError, match="CRC"):
        parse_reply(reply_bytes(0, b"\x01\x02\x03\x04")[:-1] + b"\x00", 4)
    with pytest.raises(LinkError, match="sync"):
        parse_reply(b"\x00\x00\x00", 0)
    with pytest.raises(ValueError, match="1 to 256 words"):
        request("MEM_READ", 0, 0)
    with pytest.raises(ValueError, match="payload"):
        request("MEM_WRITE", 0, 2, b"\x00" * 4)
