"""The board's design under cocotb + Verilator (run by test_verilog.py): the core, the on-chip
memory and the serial bridge, with cocotbext-uart's UART as the host's serial port and the
host driver that a board's host runs (``vrex.host``: the same driver, the same serial link)
loading a crop of the bundled trace, queuing its descriptors, reading its output rows, all
compared with the golden model under both presets; before that, line faults (a corrupted
frame, a frame cut short) are answered with their status and leave the core and the memory
as they were."""
from __future__ import annotations

import logging
import os

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, Timer
from cocotbext.uart import UartSink, UartSource

from verif.lib.cocotb_tb import CLOCK_NS, LONG_LIMIT_MS, test
from verif.lib.runner import tb_config
from vrex import regmap
from vrex.host.driver import Host
from golden.layout import compare_outputs
from vrex.host.serial import STATUS, LinkError, SerialLink, request

DIVISOR = int(os.environ.get("VREX_DIVISOR", 4))
TIMEOUT = int(os.environ.get("VREX_TIMEOUT", 640))


class CocotbUartPort:
    """:class:`vrex.host.serial.SerialLink`'s port over cocotbext-uart: bytes out on the
    board's ``rx``, in from its ``tx``, at the board's rate."""

    def __init__(self, dut, divisor: int):
        baud = 1e9 / (CLOCK_NS * divisor)
        self.tx = UartSource(dut.rx, baud=baud)
        self.rx = UartSink(dut.tx, baud=baud)
        for name in ("cocotb.board.rx", "cocotb.board.tx"):
            logging.getLogger(name).setLevel(logging.WARNING)
        self.timeout_ns = 200 * CLOCK_NS * divisor * 10      # 200 byte times
        self.dut, self.sent = dut, 0

    async def send(self, data: bytes) -> None:
        await self.tx.write(data)
        await self.tx.wait()
        self.sent += len(data)

    async def recv(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            if self.rx.empty():
                await self.rx.wait(timeout=self.timeout_ns)
                if self.rx.empty():
                    raise TimeoutError(f"{len(out)} of {n} bytes came from the board")
            out += self.rx.read_nowait(min(n - len(out), self.rx.count()))
        return bytes(out)

    async def flush(self) -> None:
        await self.pause(2 * TIMEOUT)
        self.rx.clear()

    async def pause(self, cycles: int) -> None:
        # a timer, not ClockCycles: no Python at every clock edge while the core runs
        await Timer(cycles * CLOCK_NS, unit="ns")


async def start(dut):
    for name in ("cocotb.board.rx", "cocotb.board.tx"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # the clock in the simulator interface (C++), not a Python coroutine: nothing of Python
    # runs at a clock edge unless a test waits on one
    cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns", impl="gpi").start())
    dut.rx.value = 1
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    port = CocotbUartPort(dut, DIVISOR)
    link = SerialLink(port, pause=port.pause)
    progress = lambda done, n: dut._log.info(f"{done} of {n} descriptors done, "
                                             f"{port.sent} bytes sent")
    return port, link, Host(link, poll=400, on_progress=progress)


def board_plans(cfg):
    """The board's crop of the bundled trace (its first VREX_STEPS steps and VREX_TOKENS
    tokens of each, the board's crop by default) under each preset of VREX_PRESETS, laid out
    in the board's memory a descriptor at a time
    (``vrex.boards``)."""
    from golden.layout import board_trace, compact_layout, plan_stream
    from golden.trace import quantise
    from verif.lib.traces import bundled
    from vrex.boards import BOARDS
    from vrex.config import PRESETS
    board = BOARDS[os.environ.get("VREX_BOARD", "ulx3s")]
    tr, _ = bundled()
    crop = board_trace(tr, board, int(os.environ.get("VREX_STEPS", 0)) or None,
                       int(os.environ.get("VREX_TOKENS", 0)) or None)
    qt = quantise(crop)
    out = []
    for p in os.environ.get("VREX_PRESETS", "paper,tuned").split(","):
        c = cfg.replace(preset=p, **PRESETS[p])
        lay = compact_layout(c, far_slots=board.far_slots)
        plan = plan_stream(crop, qt, c, layout=lay, per_descriptor=True, fill_o=False)
        assert plan.io_base + plan.io_size <= board.mem_bytes, "the crop does not fit"
        out.append((p, plan))
    return out


async def line_faults(dut, port, link, host):
    """A frame with a payload bit flipped on the line (CRC) and one cut short (TIMEOUT):
    each answered with its status, the memory and the registers unchanged."""
    pattern = bytes(range(256)) * 2
    await link.write_mem(0x1000, pattern)
    await host.write("TH_R", 0x4242)
    bad = bytearray(request("MEM_WRITE", 0x1000, 4, b"\xff" * 16))
    bad[10] ^= 0x08
    for frame, want in ((bytes(bad), "CRC"),
                        (request("REG_WRITE", 0x038, 1, b"\x00" * 4)[:6], "TIMEOUT")):
        await port.send(frame)
        head = await port.recv(3)
        assert head[0] == 0xA5 and head[1] == STATUS[want][0], (want, head.hex())
    try:
        await link.write32(regmap.REGISTERS[0].offset, 0)          # ID: read only
        raise AssertionError("a write to ID was not refused")
    except LinkError as e:
        assert e.status == "BUS", e
    assert await link.read_mem(0x1000, len(pattern)) == pattern, "a bad frame wrote memory"
    assert await host.read("TH_R") == 0x4242, "a bad frame wrote a register"


@test(limit_ms=LONG_LIMIT_MS)
async def board_stream(dut):
    """Line faults, then the board's crop of the bundled trace under each preset (a soft
    reset between: a new stream), every output row equal to the golden model's."""
    cfg = tb_config()
    port, link, host = await start(dut)
    ident = await host.identify()
    assert ident["id"] == regmap.ID
    await line_faults(dut, port, link, host)
    dut._log.info("line faults answered; memory and registers unchanged")
    for k, (preset, plan) in enumerate(board_plans(cfg)):
        if k:
            await host.soft_reset()
        sent = port.sent
        res = await host.run(plan, max_polls=2_000)
        names = {code: name for name, (code, _) in regmap.ERRORS.items()}
        assert res.error == 0, (f"{preset}: ERROR_CODE {res.error_code:#x} "
                                f"({names.get(res.error)}, address {res.error_addr:#x})")
        bad = compare_outputs(plan, res.o_rows)
        assert not bad, f"{preset}: the board differs from the golden model:\n" + "\n".join(
            bad[:10])
        sel = sum(len(h.selected) for g in plan.golden for h in g.heads)
        dut._log.info(f"{preset}: {len(plan.descriptors)} descriptors bit-exact ({sel} "
                      f"clusters selected), {port.sent - sent} bytes sent on the line")
