"""KVMU testbench for cocotb + Verilator on the emitted Verilog (run by test_verilog.py).

The bus is cocotbext-axi's ``AxiRam`` holding both tiers (the near window from 0, the far one
from ``far_base``), every channel paused by a pause generator, reads answered after a random
or fixed latency (pipelined: the latency runs from each AR's acceptance), write responses late
by a random number of cycles where a test asks for it, and one-shot faults
that answer SLVERR or DECERR at the address the golden replay says the failing transfer uses.
Everything is compared with the golden replay (``verif.kvmu.model.expect``): the bursts on AR
and AW in order, every ``o_kv`` beat, the counters, the first error and each stored token's
rows in memory.
"""
from __future__ import annotations

import random
from collections import deque

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, Event, ReadOnly, RisingEdge, with_timeout
from cocotbext.axi import AxiBus, AxiRam, AxiResp

from rtl import KvMemoryManager
from verif.kvmu.model import check_memory, check_scored, cmd_beats, data_beats, expect, \
    random_rows, registers, synthetic_ops, trace_ops
from verif.kvmu.sim import COUNTERS
from verif.lib.axi_sim import take_fault
from verif.lib.cocotb_tb import (CLOCK_NS, BlockTB, Ticker, cycle_now, named, test,
                                  until_cycle)
from verif.lib.fcov import record, record_page_cuts
from verif.lib.pauses import CROSSINGS, pause
from verif.lib.scoreboard import compare, compare_counters

__all__ = ["KvmuTB", "LatencyAr", "FaultRam"]

RESP = {2: AxiResp.SLVERR, 3: AxiResp.DECERR}


class LatencyAr:
    """Stands in for an ``AxiRam``'s AR channel: each read burst is answered no earlier than
    ``latency()`` cycles after its AR was accepted, in order (a pipelined memory). Cycles
    are counted by the simulation time, not by a coroutine woken every edge."""

    def __init__(self, channel, clk, latency):
        self.channel, self.clk, self.latency = channel, clk, latency
        self.q, self.ev = deque(), Event()
        cocotb.start_soon(self._pump())

    async def _pump(self):
        while True:
            ar = await self.channel.recv()
            self.q.append((cycle_now() + self.latency(), ar))
            self.ev.set()

    async def recv(self):
        while not self.q:
            self.ev.clear()
            await self.ev.wait()
        due, ar = self.q.popleft()
        await until_cycle(self.clk, due)
        return ar

    def clear(self):
        self.q.clear()
        self.channel.clear()


class FaultRam(AxiRam):
    """``AxiRam`` with one-shot faults: ``faults[("read"|"write", addr)] = 2 | 3`` answers
    the read beat at ``addr``, or the write burst starting at ``addr``, with SLVERR (2) or
    DECERR (3); a list answers the accesses to ``addr`` in turn (``[0, 2]``: the second
    fails; ``verif.lib.axi_sim.take_fault``)."""

    def __init__(self, bus, clk, rst, *, size, latency=None, b_latency=None):
        super().__init__(bus, clk, rst, size=size)
        self.clk = clk
        self.faults = {}
        self._pending = {"read": deque(), "write": deque()}
        rd, wr = self.read_if, self.write_if
        orig_read, orig_write = rd._read, wr._write
        orig_r_send, orig_b_send = rd.r_channel.send, wr.b_channel.send

        async def read(address, length):
            resp = take_fault(self.faults, ("read", address))
            if resp:
                self._pending["read"].append(resp)
                raise IOError("injected read fault")
            return await orig_read(address, length)

        async def write(address, data):
            resp = take_fault(self.faults, ("write", address))
            if resp:
                self._pending["write"].append(resp)
                raise IOError("injected write fault")
            return await orig_write(address, data)

        async def r_send(r):
            if int(r.rresp) != 0 and self._pending["read"]:
                r.rresp = RESP[self._pending["read"].popleft()]
            await orig_r_send(r)

        async def b_send(b):
            if int(b.bresp) != 0 and self._pending["write"]:
                b.bresp = RESP[self._pending["write"].popleft()]
            if b_latency is not None:       # the write response comes late (and the next
                await ClockCycles(clk, 1 + b_latency())     # burst's address waits for it)
            await orig_b_send(b)

        rd._read, wr._write = read, write
        rd.r_channel.send, wr.b_channel.send = r_send, b_send
        if latency is not None:
            rd.ar_channel = LatencyAr(rd.ar_channel, clk, latency)
            if rd._process_read_cr is not None:
                rd._process_read_cr.kill()
                rd._process_read_cr = cocotb.start_soon(rd._process_read())

    def pause_all(self, spec, seed, ticker=None):
        """Pause every channel by its own seeded generator of ``spec``, driven by ``ticker``
        (a :class:`~verif.lib.cocotb_tb.Ticker` of the testbench's, or a new one)."""
        ticker = ticker or Ticker(self.clk)
        rd, wr = self.read_if, self.write_if
        chans = [getattr(rd.ar_channel, "channel", rd.ar_channel), rd.r_channel,
                 wr.aw_channel, wr.w_channel, wr.b_channel]
        for k, ch in enumerate(chans):
            ticker.pause(ch, pause(spec, seed + k))


class KvmuTB(BlockTB):
    def __init__(self, dut, *, latency=None, b_latency=None, size=1 << 27):
        super().__init__(dut, KvMemoryManager,
                         sources={"i_cmd": lambda b: b.i_cmd.payload.shape(),
                                  "i_data": lambda b: b.i_data.payload.shape()},
                         sinks={"o_kv": lambda b: b.o_kv.payload.shape(),
                                "o_cand": lambda b: b.o_cand.payload.shape()})
        self.ram = FaultRam(AxiBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst, size=size,
                            latency=latency, b_latency=b_latency)
        self.axi["ram"] = self.ram
        self.bus = self.cfg.kvmu_bus_bytes
        self.ar_log, self.aw_log = [], []
        dut.i_version__valid.value = 0
        dut.clear.value = 0
        self.ticker = Ticker(dut.clk)
        self.ticker.watch(self._monitor)

    def _monitor(self):
        """The bursts on AR and AW, in order (every cycle's read-only phase)."""
        d = self.dut
        if int(d.m_axi_arvalid.value) and int(d.m_axi_arready.value):
            self.ar_log.append((int(d.m_axi_araddr.value),
                                (int(d.m_axi_arlen.value) + 1) * self.bus))
        if int(d.m_axi_awvalid.value) and int(d.m_axi_awready.value):
            self.aw_log.append((int(d.m_axi_awaddr.value),
                                (int(d.m_axi_awlen.value) + 1) * self.bus))

    async def after_reset(self):
        while int(self.dut.busy.value):             # the tables' clearing pass
            await RisingEdge(self.dut.clk)

    async def announce(self, layer, version):
        d = self.dut
        d.i_version__payload.value = layer | (version << 8)
        d.i_version__valid.value = 1
        await RisingEdge(d.clk)
        d.i_version__valid.value = 0

    async def idle(self):
        while True:
            await ReadOnly()
            if not int(self.dut.busy.value):
                break
            await RisingEdge(self.dut.clk)
        await RisingEdge(self.dut.clk)

    async def run(self, ops, rows, regs, *, timeout=200_000, before=None):
        """Drive ``ops`` (the contract of verif.kvmu.model) and compare everything with the
        golden replay; ``before(k, op)``, if given, is awaited before operation k is sent.
        Returns ``(expected, counters)``; counters are the run's own. ``timeout`` bounds each
        stream's wait for its beats, and four times it the whole run, in cycles: a KVMU that
        stops taking commands or never goes idle fails the test there (SimTimeoutError),
        not at the test's own limit."""
        return await with_timeout(self._run(ops, rows, regs, timeout=timeout, before=before),
                                  4 * timeout * CLOCK_NS, "ns")

    async def _run(self, ops, rows, regs, *, timeout, before):
        self.registers(regs)
        exp = expect(self.cfg, regs, ops, rows)
        base = await self.perf()
        self.ar_log.clear()
        self.aw_log.clear()
        data = [w for op in ops for w in data_beats(self.cfg, op, rows)]
        feed = cocotb.start_soon(self.source["i_data"].send(data))
        take = cocotb.start_soon(self.sink["o_kv"].take(len(exp.kv), timeout=timeout))
        take_c = cocotb.start_soon(self.sink["o_cand"].take(len(exp.cand), timeout=timeout))
        self.tasks = [feed, take, take_c]
        for k, op in enumerate(ops):
            if before is not None:
                await before(k, op)
            if op[0] == "version":
                for _ in range(3):
                    await RisingEdge(self.dut.clk)
                await self.announce(op[1], op[2])
                continue
            if k in exp.faults:
                await self.idle()
                ch, addr, resp = exp.faults[k]
                self.ram.faults[(ch, addr)] = resp
            beats = cmd_beats(op)
            newer = op[-1].get("newer_during") if isinstance(op[-1], dict) else None
            if newer is not None:
                await self.source["i_cmd"].send(beats[:1])
                for _ in range(3):
                    await RisingEdge(self.dut.clk)
                await self.announce(op[1], newer)
                beats = beats[1:]
            await self.source["i_cmd"].send(beats)
        got = await take
        cands = await take_c
        await feed
        await self.idle()
        await self.sink["o_kv"].expect_quiet(8)
        await self.sink["o_cand"].expect_quiet(2)
        perf = await self.perf()
        run = {k: perf[k] - base[k] for k in perf}
        compare([dict(addr=a, bytes=n) for a, n in self.ar_log],
                [dict(addr=a, bytes=n) for a, n in exp.ar], what="read burst")
        compare([dict(addr=a, bytes=n) for a, n in self.aw_log],
                [dict(addr=a, bytes=n) for a, n in exp.aw], what="write burst")
        compare(got, exp.kv, what="o_kv beat")
        compare(cands, exp.cand, what="o_cand beat")
        compare_counters(run, {k: exp.counters[k] for k in COUNTERS})
        d = self.dut
        if exp.first_error is None:
            assert not int(d.error.value), f"error {int(d.error_code.value)} raised"
        else:
            got_err = (int(d.error_code.value), int(d.error_resp.value),
                       int(d.error_addr.value))
            assert int(d.error.value) and got_err == exp.first_error, \
                (got_err, exp.first_error)
        check_memory(exp, self.ram.read)
        if any(b["end"] and b["stale"] for b in got):
            record("kvmu:stale fetch")
        record_page_cuts(self.ar_log, self.aw_log)
        return exp, run

    async def clear_error(self):
        self.dut.clear.value = 1
        await RisingEdge(self.dut.clk)
        self.dut.clear.value = 0
        await RisingEdge(self.dut.clk)


def _spill(cfg):
    """Registers with a near ring small enough to spill, bursts cut at 16 beats."""
    return registers(cfg, near_slots=max(3, 12 // cfg.heads_per_group), max_burst=16,
                     far_base=1 << 24)


@test()
@cocotb.parametrize(crossing=named(CROSSINGS))
async def synthetic_stream(dut, crossing):
    """A synthetic stream (candidate lists, fetches by index, stores with the sums' updates)
    under the named crossing on the streams and random pauses on every AXI channel."""
    tb = KvmuTB(dut)
    tb.cross(crossing, seed=1)
    tb.ram.pause_all(0.0 if crossing == "none" else 0.3, seed=2, ticker=tb.ticker)
    await tb.start()
    cfg = tb.cfg
    ops = synthetic_ops(cfg, np.random.default_rng(3), steps=3, tokens=5,
                        max_owner=min(cfg.kvmu_clusters, 12), by_index=True)
    exp, run = await tb.run(ops, random_rows(3, 2 * cfg.head_dim), _spill(cfg))
    assert run["offloaded_blocks"] > 0


@test()
@cocotb.parametrize(order=named(["select_first", "cluster_first"]))
async def random_latency(dut, order):
    """Reads answered 0 to 40 cycles after their AR (random, in order), with stalls; in
    both orders of the core (cluster first: each step's tokens stored first, then candidate
    lists and fetches by index of the members from earlier steps only, ``past``)."""
    rng = random.Random(5)
    tb = KvmuTB(dut, latency=lambda: rng.randrange(41))
    tb.cross("both", seed=4)
    tb.ram.pause_all(0.2, seed=6, ticker=tb.ticker)
    await tb.start()
    cfg = tb.cfg
    first = order == "cluster_first"
    ops = synthetic_ops(cfg, np.random.default_rng(7), steps=3, tokens=4,
                        max_owner=min(cfg.kvmu_clusters, 10), by_index=first,
                        stores_first=first)
    await tb.run(ops, random_rows(7, 2 * cfg.head_dim), _spill(cfg))
    assert first == any(op[0] == "fetch" and op[6].get("past") for op in ops)


@test()
@cocotb.parametrize(fail=named(["write", "offload_read", "offload_write", "read", "hc_read",
                                "hc_write", "cand_read"]),
                    resp=named(["SLVERR", "DECERR"]))
async def bus_errors(dut, fail, resp):
    """One transfer answered with an error, under random read latency and late write
    responses: the sticky status names the operation, the response and the address; the
    stream goes on; the memory matches the tables (an offload that turned its block far
    before the failed write's response came would leave a far block never written)."""
    from verif.kvmu.faults import with_fault
    lat = random.Random(7)
    tb = KvmuTB(dut, latency=lambda: lat.randrange(24), b_latency=lambda: lat.randrange(24))
    tb.cross("both", seed=8)
    tb.ram.pause_all(0.2, seed=9, ticker=tb.ticker)
    await tb.start()
    cfg = tb.cfg
    regs = _spill(cfg)
    ops = synthetic_ops(cfg, np.random.default_rng(10), steps=4, tokens=5,
                        max_owner=min(cfg.kvmu_clusters, 12))
    rows = random_rows(10, 2 * cfg.head_dim)
    await tb.run(with_fault(cfg, regs, ops, rows, fail, resp), rows, regs, timeout=50_000)
    await tb.clear_error()
    await ReadOnly()
    assert not int(dut.error.value), "clear left the error set"


@test()
async def stale_fetches(dut):
    """Dropped whole when a newer command of the layer was announced before the fetch
    started; completed when the newer one came mid-fetch."""
    tb = KvmuTB(dut)
    tb.cross("both", seed=11)
    await tb.start()
    cfg = tb.cfg
    ops = synthetic_ops(cfg, np.random.default_rng(12), steps=2, tokens=5,
                        max_owner=min(cfg.kvmu_clusters, 8))
    last = max(op[2] for op in ops if op[0] == "version")
    ops += [("version", 0, last + 1),
            ("fetch", 0, 0, 0, [0, 1], last + 1, dict(newer_during=last + 2)),
            ("fetch", 0, 0, 0, [0, 1], last + 1), ("fetch", 0, 0, 0, [1], last + 2)]
    exp, run = await tb.run(ops, random_rows(12, 2 * cfg.head_dim), _spill(cfg))
    assert run["stale_dropped"] == 1


@test()
async def reset_mid_burst(dut):
    """Reset while a fetch's bursts are on the bus (the memory model reset with it): the
    KVMU comes back with empty tables and runs a new stream exactly."""
    tb = KvmuTB(dut)
    await tb.start()
    cfg = tb.cfg
    rows = random_rows(13, 2 * cfg.head_dim)
    regs = _spill(cfg)
    ops = synthetic_ops(cfg, np.random.default_rng(13), steps=3, tokens=5,
                        max_owner=min(cfg.kvmu_clusters, 8))
    tb.registers(regs)
    tb.sink["o_kv"].ready.value = 1
    run = cocotb.start_soon(tb.run(ops, rows, regs))
    beats = 0
    while beats < 40:                       # well inside the stream's fetches
        await ReadOnly()
        beats += int(dut.m_axi_rvalid.value) & int(dut.m_axi_rready.value)
        await RisingEdge(dut.clk)
    for t in [run, *tb.tasks]:
        t.cancel()
    for s in tb.source.values():
        s.valid.value = 0
    await tb.reset()
    tb.ar_log.clear()
    tb.aw_log.clear()
    ops = synthetic_ops(cfg, np.random.default_rng(14), steps=2, tokens=5,
                        max_owner=min(cfg.kvmu_clusters, 8))
    await tb.run(ops, random_rows(14, 2 * cfg.head_dim), regs)


@test()
@cocotb.parametrize(preset=named(["paper", "tuned"]))
async def real_trace(dut, preset):
    """The bundled trace's first steps (its rows, golden clusters and selections), the near
    tier spilling: every candidate list is the golden run's own (ids, counts, keys), every
    fetch (by candidate index) delivers exactly the golden run's selected past tokens."""
    tb = KvmuTB(dut)
    tb.cross("both", seed=15)
    tb.ram.pause_all(0.1, seed=16, ticker=tb.ticker)
    await tb.start()
    cfg = tb.cfg
    ops, tcfg, rows, selected, scored = trace_ops(preset, steps=4)
    assert (tcfg.n_layers, tcfg.n_kv_heads, tcfg.head_dim, tcfg.hash_groups) == \
        (cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, cfg.hash_groups), \
        "the trace test runs on builds of the trace's geometry (test_verilog.py)"
    exp, run = await tb.run(ops, rows, registers(cfg, near_slots=16, far_base=1 << 24))
    assert exp.fetched == selected and run["offloaded_blocks"] > 0
    assert check_scored(exp, scored) > 0
