"""The core's register file under cocotb + Verilator (run by test_verilog.py): the actions of
verif.core.model driven by cocotbext-axi's AxiLiteMaster, every channel paused by the named
crossing, everything compared with the reference model as it goes."""
from __future__ import annotations

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
from cocotbext.axi import AxiLiteBus, AxiLiteMaster

from verif.core.model import RegsModel, scenario
from verif.lib.cocotb_tb import CLOCK_NS, test
from verif.lib.fcov import record_error
from verif.lib.pauses import crossing
from verif.lib.runner import tb_config
from vrex import regmap


def _runs(strb):
    """The contiguous byte runs of a strobe: (first byte, bytes)."""
    out, k = [], 0
    while k < 4:
        if strb >> k & 1:
            j = k
            while j < 4 and strb >> j & 1:
                j += 1
            out.append((k, j - k))
            k = j
        else:
            k += 1
    return out


@test()
async def host_session(dut):
    """The host's run under random pauses on every channel (the crossings run in the fast
    tier; one AxiLiteMaster a simulation)."""
    cross = "both"
    cfg = tb_config()
    cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
    master = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)
    src, snk = crossing(cross, 5)
    for ch in (master.write_if.aw_channel, master.write_if.w_channel,
               master.read_if.ar_channel):
        ch.set_pause_generator(src)
    for ch in (master.write_if.b_channel, master.read_if.r_channel):
        ch.set_pause_generator(snk)
    n_perf = len(RegsModel(cfg, []).names)
    perf = [1000 + 7 * k for k in range(n_perf)]
    dut.perf_in.value = sum(v << (32 * k) for k, v in enumerate(perf))
    for name in ("done", "o_desc__ready", "i_error__valid", "busy"):
        getattr(dut, name).value = 0
    dut.rst.value = 1
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    model = RegsModel(cfg, perf)
    desc_off, err_off = regmap.offsets({})["DESC_DATA"], regmap.offsets({})["ERROR_CODE"]
    actions = scenario(cfg, seed=3)
    injected = {act[1] for act in actions if act[0] == "error"}    # the sequencer's, here
    for k, act in enumerate(actions):
        kind = act[0]
        if kind == "write":
            _, off, data, strb = act
            for first, n in _runs(strb):       # the master sends a run's own address
                want = model.write(off, data, ((1 << n) - 1) << first)
                got = await master.write((off & ~3) + first,
                                         data.to_bytes(4, "little")[first:first + n])
                assert int(got.resp) == want, f"action {k}: bresp {int(got.resp)}"
            continue
        want = model.apply(act)
        if kind == "read":                      # an unaligned one: its word's upper bytes
            lo = act[1] & 3
            r = await master.read(act[1], 4 - lo)
            got = (int.from_bytes(r.data, "little"), int(r.resp))
            want = (want[0] >> 8 * lo, want[1])
        elif kind == "desc":
            got = [int((await master.write(desc_off, w.to_bytes(4, "little"))).resp)
                   for w in regmap.encode_descriptor(**act[1])]
            await ClockCycles(dut.clk, 4)
        elif kind == "pop":
            got = []
            dut.o_desc__ready.value = 1
            for _ in range(8 * len(want)):
                if len(got) == len(want):
                    break
                await ReadOnly()
                if int(dut.o_desc__valid.value):
                    v = int(dut.o_desc__payload.value)
                    got.append([(v >> (32 * i)) & 0xFFFFFFFF
                                for i in range(regmap.DESC_WORDS)])
                await RisingEdge(dut.clk)
            dut.o_desc__ready.value = 0
        elif kind == "done":
            dut.done.value, dut.done_version.value = 1, act[1]
            await RisingEdge(dut.clk)
            dut.done.value = 0
            got = None
        elif kind == "error":
            dut.i_error__payload.value = act[1] | act[2] << 8 | act[3] << 72
            dut.i_error__valid.value = 1
            await RisingEdge(dut.clk)
            dut.i_error__valid.value = 0
            got = None
        await ClockCycles(dut.clk, 2)
        await ReadOnly()
        assert got == want, f"action {k} {act[:2]}: got {got}, want {want}"
        assert int(dut.irq.value) == model.irq, f"action {k}: irq {int(dut.irq.value)}"
        if kind == "read" and act[1] == err_off and got[0] & 0xFF not in injected:
            record_error(got[0])            # a code the register file raised itself
        await RisingEdge(dut.clk)
