"""The serial link to a board's bridge (``rtl.board.bridge``): the frame format, written once
for the host, the board top's simulation and the bridge's own tests, and the host driver's
link over it (:class:`SerialLink`) for a simulated UART or a real serial port.

A request is ``0x5A, op, addr (4 bytes, little endian), n - 1, payload, crc``: ``op`` one of
:data:`OPS` on ``n`` 32-bit words (1 to :data:`MAX_WORDS`) at ``addr``, ``addr + 4``, ...
(register offsets of the core's AXI4-Lite window, or byte addresses of the board's memory,
4-byte aligned); the payload is the ``4 n`` bytes of a write (none for a read); ``crc`` the
CRC-8 (polynomial 0x07, initial 0) of every byte after the ``0x5A``. The bridge acts only on
a whole frame whose CRC matches.

The answer is ``0xA5, status, payload, crc``: ``status`` one of :data:`STATUS`, the payload
the ``4 n`` bytes read (a read answered ``OK`` or ``BUS``; none otherwise), the CRC over
``status`` and the payload. A frame cut short (no byte for the bridge's timeout, a few
byte times) is answered ``TIMEOUT`` and forgotten; a frame whose CRC differs is answered
``CRC`` and nothing of it is done; bytes between frames other than ``0x5A`` are ignored.
"""
from __future__ import annotations

import time

__all__ = ["OPS", "STATUS", "MAX_WORDS", "SYNC", "REPLY", "crc8", "request", "parse_reply",
           "reply_bytes", "LinkError", "SerialLink", "PySerialPort"]

SYNC, REPLY = 0x5A, 0xA5
OPS = {"REG_READ": 1, "REG_WRITE": 2, "MEM_READ": 3, "MEM_WRITE": 4}
STATUS = {
    "OK": (0, "done"),
    "CRC": (1, "the frame's CRC did not match: nothing was done"),
    "OP": (2, "an unknown op, an address not 4-byte aligned or outside the memory"),
    "TIMEOUT": (3, "the frame was cut short: no byte came for the bridge's timeout"),
    "BUS": (4, "a register access answered SLVERR or DECERR (the other words were done)"),
}
MAX_WORDS = 256
_NAMES = {code: name for name, (code, _) in STATUS.items()}


def crc8(data: bytes, crc: int = 0) -> int:
    """CRC-8, polynomial x^8 + x^2 + x + 1 (0x07), initial value ``crc``, no reflection."""
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = ((crc << 1) ^ 0x07) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
    return crc


def request(op: str, addr: int, words: int = 1, data: bytes = b"") -> bytes:
    """The request frame of ``op`` on ``words`` words at ``addr`` (``data``: a write's
    ``4 · words`` bytes)."""
    if not 1 <= words <= MAX_WORDS:
        raise ValueError(f"a frame carries 1 to {MAX_WORDS} words, not {words}")
    writes = op in ("REG_WRITE", "MEM_WRITE")
    if writes != bool(data) or (writes and len(data) != 4 * words):
        raise ValueError(f"{op} of {words} words with {len(data)} bytes of payload")
    body = bytes([OPS[op]]) + addr.to_bytes(4, "little") + bytes([words - 1]) + data
    return bytes([SYNC]) + body + bytes([crc8(body)])


def reply_bytes(status: int, payload: bytes = b"") -> bytes:
    """An answer frame (the bridge's side: its model in the tests)."""
    body = bytes([status]) + payload
    return bytes([REPLY]) + body + bytes([crc8(body)])


class LinkError(RuntimeError):
    """The bridge answered an error, or its answer was malformed or did not come."""

    def __init__(self, message: str, status: str | None = None):
        super().__init__(message)
        self.status = status


def parse_reply(raw: bytes, payload_len: int) -> tuple[str, bytes]:
    """``(status name, payload)`` of an answer frame; raises :class:`LinkError` on a bad
    frame (its sync byte, length or CRC)."""
    if len(raw) < 3 or raw[0] != REPLY:
        raise LinkError(f"malformed answer {raw[:8].hex()}: no 0x{REPLY:02X} sync byte")
    status = _NAMES.get(raw[1])
    if status is None:
        raise LinkError(f"answer with unknown status {raw[1]}")
    n = payload_len if status in ("OK", "BUS") else 0
    if len(raw) != 3 + n:
        raise LinkError(f"answer of {len(raw)} bytes, {3 + n} expected (status {status})")
    if crc8(raw[1:-1]) != raw[-1]:
        raise LinkError("the answer's CRC does not match: the line corrupted it")
    return status, bytes(raw[2:2 + n])


class SerialLink:
    """The host driver's link (:mod:`vrex.host.driver`) over the bridge. ``port`` has two
    coroutines: ``send(data)`` and ``recv(n)`` (``n`` bytes, or raises ``TimeoutError``),
    and ``flush()`` (drop anything received). A read or write of memory goes in frames of
    at most ``chunk`` words. An error answer raises :class:`LinkError` naming the status;
    ``retries`` times a ``CRC`` or ``TIMEOUT`` answer (the line's fault) is sent again."""

    def __init__(self, port, *, chunk: int = MAX_WORDS, retries: int = 0, pause=None):
        self.port, self.chunk, self.retries = port, chunk, retries
        self._pause = pause

    async def transact(self, op: str, addr: int, words: int = 1, data: bytes = b"") -> bytes:
        frame = request(op, addr, words, data)
        n = 4 * words if op in ("REG_READ", "MEM_READ") else 0
        for attempt in range(self.retries + 1):
            await self.port.send(frame)
            head = await self.port.recv(2)
            status = _NAMES.get(head[1]) if len(head) == 2 else None
            rest = await self.port.recv((n if status in ("OK", "BUS") else 0) + 1)
            status, payload = parse_reply(head + rest, n)
            if status == "OK":
                return payload
            if status not in ("CRC", "TIMEOUT") or attempt == self.retries:
                raise LinkError(f"{op} at {addr:#x}: the bridge answered {status} "
                                f"({STATUS[status][1]})", status)
            await self.port.flush()
        raise AssertionError("unreachable")

    async def read32(self, off: int) -> int:
        return int.from_bytes(await self.transact("REG_READ", off), "little")

    async def write32(self, off: int, value: int) -> None:
        await self.transact("REG_WRITE", off, 1, (value & 0xFFFFFFFF).to_bytes(4, "little"))

    async def read_mem(self, addr: int, n: int) -> bytes:
        lo, hi = addr & ~3, -(-(addr + n) // 4) * 4
        out = bytearray()
        for a in range(lo, hi, 4 * self.chunk):
            out += await self.transact("MEM_READ", a, min(self.chunk, (hi - a) // 4))
        return bytes(out[addr - lo:addr - lo + n])

    async def write_mem(self, addr: int, data: bytes) -> None:
        lo = addr & ~3
        if lo != addr or len(data) % 4:     # whole words: read the edges first
            hi = -(-(addr + len(data)) // 4) * 4
            old = bytearray(await self.read_mem(lo, hi - lo))
            old[addr - lo:addr - lo + len(data)] = data
            addr, data = lo, bytes(old)
        for off in range(0, len(data), 4 * self.chunk):
            part = data[off:off + 4 * self.chunk]
            await self.transact("MEM_WRITE", addr + off, len(part) // 4, part)

    async def pause(self, cycles: int) -> None:
        if self._pause:
            await self._pause(cycles)


class PySerialPort:
    """A real serial port through ``pyserial`` (``pip install pyserial``), as
    :class:`SerialLink`'s port: blocking reads with ``timeout`` seconds."""

    def __init__(self, device: str, baud: int = 115200, timeout: float = 2.0):
        import serial
        self.ser = serial.Serial(device, baud, timeout=timeout)

    async def send(self, data: bytes) -> None:
        self.ser.write(data)

    async def recv(self, n: int) -> bytes:
        got = self.ser.read(n)
        if len(got) < n:
            raise TimeoutError(f"{len(got)} of {n} bytes came from the board")
        return got

    async def flush(self) -> None:
        time.sleep(0.05)
        self.ser.reset_input_buffer()
