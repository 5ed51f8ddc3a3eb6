"""The board's on-chip memory under cocotb + Verilator (run by test_verilog.py): cocotbext-axi's
AXI4 master on its slave with every channel paused at random (idle cycles on AW, W and AR,
back-pressure on R and B), reads and writes of random lengths and byte offsets in flight
at once with both IDs, against a model of the memory; bursts past the end answer SLVERR and
write nothing."""
from __future__ import annotations

import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiBus, AxiMaster, AxiResp

from verif.lib.cocotb_tb import CLOCK_NS, Ticker, test
from verif.lib.pauses import pause

SIZE = 4096


async def start(dut, spec, seed):
    import logging
    logging.getLogger("cocotb.board_ram.s_axi").setLevel(logging.WARNING)
    cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
    dut.rst.value = 1
    for n in ("port__req", "port__write"):
        getattr(dut, n).value = 0
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    master = AxiMaster(AxiBus.from_prefix(dut, "s_axi"), dut.clk, dut.rst)
    ticker = Ticker(dut.clk)
    rd, wr = master.read_if, master.write_if
    for k, ch in enumerate([getattr(rd.ar_channel, "channel", rd.ar_channel), rd.r_channel,
                            wr.aw_channel, wr.w_channel, wr.b_channel]):
        ticker.pause(ch, pause(spec, seed + k))
    return master


@test()
async def random_traffic_under_pauses(dut):
    rng = random.Random(5)
    master = await start(dut, 0.3, 5)
    model = bytearray(SIZE)

    async def writer(k):
        for _ in range(30):
            n = rng.randint(1, 200)
            a = rng.randrange(0, SIZE - n)
            data = bytes(rng.randrange(256) for _ in range(n))
            # writes of each task to their own quarter: the reads below race them only
            # where nothing is written
            a = k * SIZE // 4 + a % (SIZE // 4 - n)
            await master.write(a, data, awid=k % 2)
            model[a:a + n] = data

    tasks = [cocotb.start_soon(writer(k)) for k in range(2)]
    for t in tasks:
        await t
    reads = [cocotb.start_soon(master.read(a, 256, arid=a // 256 % 2))
             for a in range(0, SIZE, 256)]
    got = b"".join([bytes((await t).data) for t in reads])
    assert got == bytes(model), "the memory differs from the model"


@test()
async def bursts_past_the_end_answer_slverr(dut):
    master = await start(dut, 0.2, 9)
    await master.write(SIZE - 64, bytes(range(64)))
    w = await master.write(SIZE - 32, b"\xee" * 64)
    assert w.resp == AxiResp.SLVERR, w.resp
    r = await master.read(SIZE - 64, 64)
    assert r.resp == AxiResp.OKAY
    assert bytes(r.data[:32]) == bytes(range(32)) and bytes(r.data[32:]) == b"\xee" * 32
    r = await master.read(SIZE - 16, 32)
    assert r.resp == AxiResp.SLVERR, r.resp
