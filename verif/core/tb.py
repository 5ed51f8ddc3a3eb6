"""The core end to end under cocotb + Verilator (run by test_verilog.py): a host on
``s_axil_*`` (cocotbext-axi's ``AxiLiteMaster``) writes the registers and every descriptor of
a stream as the queue takes them (polling STATUS, or on the ``space`` interrupt), the memory
is an ``AxiRam`` with random pipelined read latency and pauses on every channel; monitors on
the streams between the blocks record every hash, cluster assignment, selection and fetched
token, and the output rows are read back; all of it is compared with
``golden.core.run_stream`` (``verif.core.e2e.compare_run``)."""
from __future__ import annotations

import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster

from verif.core.e2e import (SYNTH, Observed, compare_run, failed_fetches, plan_stream,
                             synthetic_stream)
from verif.kvmu.tb import FaultRam
from verif.lib.cocotb_tb import CLOCK_NS, LONG_LIMIT_MS, Ticker, cycle_now, test, until_cycle
from verif.lib.fcov import record_error
from verif.lib.runner import tb_config
from rtl.core import map as core_map
from vrex import regmap
from vrex.host.driver import OFF, Host


class CoreTB:
    def __init__(self, dut, *, latency=(0, 0), bus_pause=None, seed=0):
        import logging
        self.dut, self.cfg = dut, tb_config()
        for name in ("cocotb.core.s_axil", "cocotb.core.m_axi"):
            logging.getLogger(name).setLevel(logging.WARNING)
        cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
        self.host = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)
        rng = random.Random(seed)
        lo, hi = latency
        self.ram = FaultRam(AxiBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst,
                            size=int(os.environ.get("VREX_RAM", 1 << 26)),
                            latency=(lambda: rng.randint(lo, hi)) if hi else None)
        self.ticker = Ticker(dut.clk)
        if bus_pause:
            self.ram.pause_all(bus_pause, seed, self.ticker)
        self.obs = Observed()
        self.driver = Host(AxilLink(self.host, self.ram, dut.clk), on_read=self._seen,
                           on_progress=lambda done, n: dut._log.info(
                               f"{done} of {n} descriptors done, cycle {self.cycle}"))

    @staticmethod
    def _seen(off, value):
        if off == OFF["ERROR_CODE"]:
            record_error(value)

    async def start(self):
        d = self.dut
        d.rst.value = 1
        await ClockCycles(d.clk, 3)
        d.rst.value = 0
        await RisingEdge(d.clk)
        self.taps = os.environ.get("VREX_TAPS", "1") != "0"
        if self.taps:       # VREX_TAPS=0: the output rows are compared, not the streams
            self.ticker.watch(self._monitors())

    @property
    def cycle(self) -> int:
        return cycle_now()

    def _stream(self, scope, port, fields):
        valid, ready = getattr(scope, f"{port}__valid"), getattr(scope, f"{port}__ready")
        payload = getattr(scope, f"{port}__payload")
        return valid, ready, payload, fields

    def _monitors(self):
        """Every handshake on the engine's hash words, the HCU's assignments, the WTU's
        selection and the KVMU's fetched beats, in order: a function the ticker calls in
        every cycle's read-only phase."""
        from rtl import VrexCore
        core = VrexCore(self.cfg)
        d = self.dut
        lay = lambda blk, port: getattr(blk, port).payload.shape()
        taps = [
            (d.engine, "o_hash", lay(core.engine, "o_hash"), ("hash",), "hashes",
             lambda v: v[0]),
            (d.hcu, "o", lay(core.hcu, "o"), ("cluster",), "clusters", lambda v: v[0]),
            (d.wtu, "o", lay(core.wtu, "o"), ("cluster", "last"), "selections", tuple),
            (d.kvmu, "o_kv", lay(core.kvmu, "o_kv"), ("token", "end"), "fetched", tuple),
        ]
        sigs = []
        for scope, port, layout, fields, into, fmt in taps:
            spans = [(layout[f].offset, layout[f].width) for f in fields]
            sigs.append((getattr(scope, f"{port}__valid"), getattr(scope, f"{port}__ready"),
                         getattr(scope, f"{port}__payload"), spans, into, fmt))
        def watch():
            for valid, ready, payload, spans, into, fmt in sigs:
                if valid.value and ready.value:
                    p = int(payload.value)
                    getattr(self.obs, into).append(
                        fmt([(p >> lo) & ((1 << w) - 1) for lo, w in spans]))
        return watch

    def snapshot(self) -> str:
        """The sequencer's and the blocks' states and the streams between them, for a
        hang's report."""
        d, out = self.dut, []
        probes = [("seq", ("seq",), "seq_state"),
                  ("engine", ("engine", "command"), "cmd_fsm_state"),
                  ("kvmu", ("kvmu", "control"), "fsm_state"),
                  ("wtu", ("wtu", "mark"), "mark_state")]
        for name, path, sig in probes:
            try:
                scope = d
                for part in path:
                    scope = getattr(scope, part)
                out.append(f"{name}.{sig}={int(getattr(scope, sig).value)}")
            except (AttributeError, ValueError):
                pass
        for scope, port in ((d.engine, "a"), (d.engine, "b"), (d.engine, "bias"),
                            (d.engine, "cmd"), (d.engine, "o_attn"), (d.engine, "o_score"),
                            (d.engine, "o_hash"), (d.kvmu, "i_cmd"), (d.kvmu, "i_data"),
                            (d.kvmu, "o_kv"), (d.kvmu, "o_cand"), (d.wtu, "o"), (d.hcu, "o"),
                            (d.dma, "o"), (d.dma, "job")):
            try:
                v = int(getattr(scope, f"{port}__valid").value)
                r = int(getattr(scope, f"{port}__ready").value)
                out.append(f"{scope._name}.{port}:{v}{r}")
            except (AttributeError, ValueError):
                pass
        return " ".join(out)

    async def write(self, off, value):
        await self.driver.write(off, value)

    async def read(self, off):
        return await self.driver.read(off)

    async def run_plan(self, plan, max_cycles=None, registers=True):
        """The host driver's run of the plan (``vrex.host``): memory image (written into
        the memory model), registers, descriptors as the queue takes them, the wait for all
        (at most ``max_cycles``, VREX_MAX_CYCLES); the output rows into ``self.obs``; returns
        the error register."""
        max_cycles = max_cycles or int(os.environ.get("VREX_MAX_CYCLES", 50_000_000))
        res = await self.driver.run(plan, registers=registers,
                                    max_polls=max_cycles // self.driver.poll,
                                    on_timeout=self.snapshot)
        self.obs.done = res.done
        self.obs.o_rows += res.o_rows
        return res.error_code

    async def counters(self):
        return await self.driver.counters(core_map.perf_registers())


class AxilLink:
    """The host driver's link in the testbench: registers over cocotbext-axi's AXI4-Lite
    master, the memory through the memory model's own contents, pauses in clock cycles."""

    def __init__(self, master, ram, clk):
        self.master, self.ram, self.clk = master, ram, clk

    async def read32(self, off):
        return await self.master.read_dword(off)

    async def write32(self, off, value):
        await self.master.write_dword(off, value)

    async def read_mem(self, addr, n):
        return bytes(self.ram.read(addr, n))

    async def write_mem(self, addr, data):
        self.ram.write(addr, data)

    async def pause(self, cycles):
        await until_cycle(self.clk, cycle_now() + cycles)


def _check(plan, tb, err):
    bad = compare_run(plan, tb.obs, taps=tb.taps)
    assert not bad, "the core differs from the golden model:\n" + "\n".join(bad)
    assert err & 0xFF == 0, f"ERROR_CODE {err:#x}"


async def _stream(dut, plan, **kw):
    tb = CoreTB(dut, **kw)
    await tb.start()
    err = await tb.run_plan(plan)
    _check(plan, tb, err)
    perf = await tb.counters()
    dut._log.info(f"{len(plan.descriptors)} descriptors in {tb.cycle} cycles; core counters "
                  + str({k: v for k, v in perf.items() if k.startswith("core_")}))
    return tb, perf


def _synthetic(cfg, seed):
    tr, qt = synthetic_stream(seed, **SYNTH)
    return plan_stream(tr, qt, cfg)


@test()
async def synthetic_stream_quiet_bus(dut):
    """A synthetic stream (prompt, frames, question) on a bus without pauses or latency;
    the core's busy cycles within 5% of the cycle model (``golden.cycles`` with the
    coefficients of ``data/cycle_model.json``, fitted on other runs), the stream queued as
    a whole: every descriptor after one of another layer has its first counts list taken
    ahead (``core_ahead``), while that one attended."""
    from golden.cycles import lists_ahead, load_fit, predict_stream
    cfg = tb_config()
    plan = _synthetic(cfg, 1)
    _, perf = await _stream(dut, plan)
    want = sum(lists_ahead(plan.golden, cfg.core_max_tokens, cfg.order))
    # (in the cluster-first order a descriptor stores its step's tokens before its lists:
    # none is taken ahead)
    assert (want > 0) == (cfg.order == "select_first") and perf["core_ahead"] == want, (
        f"{perf['core_ahead']} counts lists taken ahead, the stream has {want} descriptors "
        f"queued behind one of another layer")
    model = sum(predict_stream(load_fit(), plan.golden, cfg, 0, cfg.centre,
                               queued=True).values())
    err = (model - perf["core_busy"]) / perf["core_busy"]
    dut._log.info(f"cycle model: {model:.0f} cycles, the RTL {perf['core_busy']} "
                  f"({100 * err:+.2f}%)")
    assert abs(err) < 0.05, (f"the cycle model is {100 * err:+.1f}% off the RTL "
                             f"({model:.0f} against {perf['core_busy']} cycles): refit it "
                             f"(make cycles, then verif.core.cycles --save)")


@test()
async def synthetic_stream_hostile_bus(dut):
    """The same kind of stream with random pauses on every AXI channel and a random
    pipelined read latency of 0-60 cycles."""
    cfg = tb_config()
    await _stream(dut, _synthetic(cfg, 2), latency=(0, 60), bus_pause=0.3, seed=2)


async def soft_reset(tb):
    """CTRL.soft_reset, then wait until the core is idle with an empty queue."""
    await tb.driver.soft_reset()


def preset_plans(tr, qt, cfg, presets, steps=None):
    """``[(preset, StreamPlan)]``: one stream under each preset on the same build (the
    presets differ in run-time registers and the hash input)."""
    from vrex.config import PRESETS
    return [(p, plan_stream(tr, qt, cfg.replace(preset=p, **PRESETS[p]), steps=steps))
            for p in presets]


def trace_plans(cfg):
    """The bundled trace under each preset of VREX_PRESETS (both by default), its first
    VREX_STEPS steps (all by default)."""
    from verif.lib.traces import bundled
    tr, qt = bundled()
    return preset_plans(tr, qt, cfg, os.environ.get("VREX_PRESETS", "paper,tuned").split(","),
                        int(os.environ.get("VREX_STEPS", 0)) or None)


@test(limit_ms=LONG_LIMIT_MS)
async def bundled_trace(dut):
    """The bundled real trace end to end under both presets, one after the other with a
    soft reset between them (a new stream), under random latency and pauses; per step and
    layer a PASS/FAIL line (and VREX_TRACE_OUT gets the table and the cycle counts)."""
    import json
    cfg = tb_config()
    tb = CoreTB(dut, latency=(0, 30), bus_pause=0.2, seed=3)
    await tb.start()
    report = {}
    for k, (preset, plan) in enumerate(trace_plans(cfg)):
        if k:
            await soft_reset(tb)
        tb.obs = Observed()
        c0 = tb.cycle
        perf0 = await tb.counters()
        err = await tb.run_plan(plan)
        perf = await tb.counters()
        rows = []
        for i, ls in enumerate(plan.golden):
            rows.append({"step": ls.step, "layer": ls.layer, "tokens": ls.step_len,
                         "ok": _descriptor_ok(plan, tb.obs, i)})
        report[preset] = {"descriptors": len(plan.descriptors), "cycles": tb.cycle - c0,
                          "rows": rows, "error_code": err,
                          "counters": {n: perf[n] - perf0[n] for n in perf}}
        _check(plan, tb, err)
    out = os.environ.get("VREX_TRACE_OUT")
    if out:
        with open(out, "w") as f:
            json.dump(report, f, indent=1)


def _descriptor_ok(plan, obs, i) -> bool:
    """Descriptor i's output rows equal the golden model's (the whole-run comparison checks
    every hash, cluster, selection and fetch in order)."""
    import numpy as np
    ls, cfg = plan.golden[i], plan.cfg
    if i >= len(obs.o_rows):
        return False
    want = np.concatenate([h.o.reshape(cfg.group_size, ls.step_len, cfg.head_dim)
                           for h in ls.heads])
    return bool((obs.o_rows[i] == want).all())


@test()
async def write_error_is_reported_and_nothing_else_changes(dut):
    """SLVERR on one output beat's write: ERROR_CODE says BUS_WRITE with the descriptor's
    version and the address; every descriptor completes; every hash, cluster, selection and
    fetch, and every other output row, is the golden model's."""
    cfg = tb_config()
    plan = _synthetic(cfg, 5)
    k = next(i for i, g in enumerate(plan.golden) if g.heads[0].selected)
    addr = plan.descriptors[k]["o_addr"]
    tb = CoreTB(dut, latency=(0, 20), bus_pause=0.2, seed=5)
    await tb.start()
    tb.ram.faults[("write", addr)] = 2
    err = await tb.run_plan(plan)
    assert err & 0xFF == regmap.ERRORS["BUS_WRITE"][0], hex(err)
    assert err >> 16 == plan.descriptors[k]["version"]
    lo, hi = await tb.read(OFF["ERROR_ADDR_LO"]), await tb.read(OFF["ERROR_ADDR_HI"])
    assert lo | hi << 32 == addr
    o = tb.obs.o_rows[k]
    n = 2 * cfg.attn_n // 2
    assert (o[0, 0, :n] == -0x5A5B).all(), "the failed write changed memory"
    o = o.copy()
    o[0, 0, :n] = plan.golden[k].heads[0].o[0, :n]
    tb.obs.o_rows[k] = o
    bad = compare_run(plan, tb.obs)
    assert not bad, "\n".join(bad)


@test()
async def read_error_stores_nothing_of_its_descriptor(dut):
    """SLVERR on a query read (cluster first: on a hash-input read): BUS_READ with the
    address; every descriptor still completes and none of the failed descriptor's tokens is
    stored (the KVMU's stored-token count is
    the stream's less that descriptor's)."""
    cfg = tb_config()
    plan = _synthetic(cfg, 6)
    k = next(i for i, g in enumerate(plan.golden) if g.heads[0].clusters)
    addr = plan.descriptors[k]["q_addr"]
    if cfg.order == "cluster_first":
        # its stores come before its heads read their queries: its first hash-input read
        # fails instead (the first group's rows)
        addr = plan.descriptors[k]["k_hash_addr"] + plan.golden[k].hashed * cfg.head_dim
    tb = CoreTB(dut, latency=(0, 20), seed=6)
    await tb.start()
    tb.ram.faults[("read", addr)] = 3
    err = await tb.run_plan(plan)
    assert err & 0xFF == regmap.ERRORS["BUS_READ"][0], hex(err)
    assert err >> 16 == plan.descriptors[k]["version"]
    lo, hi = await tb.read(OFF["ERROR_ADDR_LO"]), await tb.read(OFF["ERROR_ADDR_HI"])
    assert lo | hi << 32 == addr
    perf = await tb.counters()
    hashed = [g.hashes.shape[1] * g.hashes.shape[0] for g in plan.golden]
    assert perf["kvmu_stored_tokens"] == sum(hashed) - hashed[k], \
        (perf["kvmu_stored_tokens"], sum(hashed), hashed[k])


@test()
async def fetch_read_error_is_padded_and_nothing_else_changes(dut):
    """SLVERR on a fetched KV block's read (the first far-tier block's first read: a block
    in the far tier is only ever read by fetches): the KVMU drops the fetch's other beats
    and the core pads the engine's B up to the command's tokens (nothing hangs); BUS_READ
    with the block's address and the descriptor's version; every descriptor completes; every
    hash, cluster and selection, every other head's fetch and output row, and every later
    fetch of the block (the stored KV unchanged) equal the golden model."""
    cfg = tb_config()
    plan = _synthetic(cfg, 9)
    far = cfg.block_registers("kvmu")["far_base"]
    tb = CoreTB(dut, latency=(0, 20), bus_pause=0.2, seed=9)
    await tb.start()
    tb.ram.faults[("read", far)] = 2
    err = await tb.run_plan(plan)
    assert err & 0xFF == regmap.ERRORS["BUS_READ"][0], hex(err)
    lo, hi = await tb.read(OFF["ERROR_ADDR_LO"]), await tb.read(OFF["ERROR_ADDR_HI"])
    assert lo | hi << 32 == far, hex(lo | hi << 32)
    k = [d["version"] for d in plan.descriptors].index(err >> 16)
    where = f"step {plan.golden[k].step} layer {plan.golden[k].layer} "
    hit, others = failed_fetches(compare_run(plan, tb.obs, limit=1000))
    assert not others, "\n".join(others)
    assert hit == {where}, hit
    assert (await tb.counters())["core_errors"] == 1
    dut._log.info(f"fetch error in {where}(descriptor {k}): the only differences are that "
                  f"descriptor's failed fetch and its output rows")


@test()
async def soft_reset_mid_stream_then_a_new_stream(dut):
    """A soft reset while the core runs (bursts in flight, under pauses and latency): it
    returns to idle with an empty queue and no error; the same stream then runs again from
    the start and matches the golden model bit for bit."""
    cfg = tb_config()
    plan = _synthetic(cfg, 7)
    tb = CoreTB(dut, latency=(0, 40), bus_pause=0.3, seed=7)
    await tb.start()
    for addr, raw in plan.image.items():
        tb.ram.write(addr, raw)
    for off, value in plan.registers:
        await tb.write(off, value)
    for desc in plan.descriptors[:3]:
        for w in regmap.encode_descriptor(**desc):
            await tb.write(OFF["DESC_DATA"], w)
    await ClockCycles(dut.clk, 3000)
    assert (await tb.read(OFF["STATUS"])) & 1, "the core should be busy"
    await soft_reset(tb)
    assert (await tb.read(OFF["ERROR_CODE"])) & 0xFF == 0
    tb.obs = Observed()
    err = await tb.run_plan(plan, registers=False)
    _check(plan, tb, err)


@test(limit_ms=LONG_LIMIT_MS)
async def soak(dut):
    """A long synthetic stream (VREX_SOAK_FRAMES frames, 6 by default) under random
    pipelined read latency (0-80 cycles) and pauses on every channel, with SLVERR injected on
    one output write in every fourth descriptor and on a fetched KV block's read (the far
    tier's first block, its first read, a fetch's: a block there is read by fetches only):
    every hash, cluster, selection, fetch and every output row not hit by a fault equals the
    golden model (the failed fetch's descriptor differs in that fetch and its output rows
    alone); each fault is reported once."""
    cfg = tb_config()
    frames = int(os.environ.get("VREX_SOAK_FRAMES", 6))
    tr, qt = synthetic_stream(11, **{**SYNTH, "n_frames": frames})
    plan = plan_stream(tr, qt, cfg)
    tb = CoreTB(dut, latency=(0, 80), bus_pause=0.25, seed=11)
    await tb.start()
    hit = [k for k in range(3, len(plan.descriptors), 4)]
    for k in hit:
        tb.ram.faults[("write", plan.descriptors[k]["o_addr"])] = 2
    far = ("read", cfg.block_registers("kvmu")["far_base"])
    tb.ram.faults[far] = 2
    err = await tb.run_plan(plan)
    assert far not in tb.ram.faults, "the stream never fetched the far tier's first block"
    assert err & 0xFF in (regmap.ERRORS["BUS_WRITE"][0], regmap.ERRORS["BUS_READ"][0]), \
        hex(err)
    n = cfg.attn_n
    for k in hit:
        o = tb.obs.o_rows[k].copy()
        assert (o[0, 0, :n] == -0x5A5B).all(), "a failed write changed memory"
        o[0, 0, :n] = plan.golden[k].heads[0].o[0, :n]
        tb.obs.o_rows[k] = o
    failed, others = failed_fetches(compare_run(plan, tb.obs, limit=1000))
    assert not others, "\n".join(others)
    assert len(failed) == 1, failed
    perf = await tb.counters()
    assert perf["core_errors"] == len(hit) + 1, \
        f"{perf['core_errors']} errors, {len(hit) + 1} injected (another error came too)"
    dut._log.info(f"soak: {len(plan.descriptors)} descriptors, {tb.cycle} cycles, "
                  f"{len(hit)} injected write errors and a fetch read error (in "
                  f"{failed.pop().strip()}), no other mismatch")
    out = os.environ.get("VREX_SOAK_OUT")
    if out:
        import json
        with open(out, "w") as f:
            json.dump({"descriptors": len(plan.descriptors), "cycles": tb.cycle,
                       "frames": frames, "write_errors": len(hit), "fetch_read_errors": 1,
                       "mismatches": 0}, f)


@test()
async def window_faults_then_a_clean_stream(dut):
    """A build with fewer HCU contexts than cluster windows: SLVERR on the first saved
    window's image write (BUS_WRITE at its address), then, after a soft reset, DECERR on
    the first loaded image's read (BUS_READ at its address); each time every descriptor
    completes and every hash is the golden model's (the window was lost or emptied, the
    clusters may differ). After another soft reset the stream runs clean: everything equals
    the golden model and every saved window's header in memory is the golden one."""
    from verif.core.e2e import compare_windows, window_moves
    cfg = tb_config()
    assert cfg.contexts < cfg.windows, "this build holds every window on chip"
    plan = _synthetic(cfg, 8)
    moves = window_moves(plan)
    image = lambda w: cfg.ctx_base + w * cfg.ctx_image_bytes
    first = {kind: next(w for k, w in moves if k == kind) for kind in ("save", "load")}
    tb = CoreTB(dut, latency=(0, 30), bus_pause=0.2, seed=8)
    await tb.start()
    for kind, code in (("write", "BUS_WRITE"), ("read", "BUS_READ")):
        addr = image(first["save" if kind == "write" else "load"])
        tb.ram.faults[(kind, addr)] = 2 if kind == "write" else 3
        tb.obs = Observed()
        err = await tb.run_plan(plan, registers=kind == "write")
        assert err & 0xFF == regmap.ERRORS[code][0], (kind, hex(err))
        lo, hi = await tb.read(OFF["ERROR_ADDR_LO"]), await tb.read(OFF["ERROR_ADDR_HI"])
        assert lo | hi << 32 == addr, (kind, hex(lo | hi << 32), hex(addr))
        assert tb.obs.done == len(plan.descriptors)
        bad = [b for b in compare_run(plan, tb.obs, limit=1000) if b.startswith("hash")]
        assert not bad, "\n".join(bad)
        await soft_reset(tb)
    tb.obs = Observed()
    err = await tb.run_plan(plan, registers=False)
    _check(plan, tb, err)
    checked, bad = compare_windows(plan, lambda a, n: bytes(tb.ram.read(a, n)))
    assert checked and not bad, (checked, bad)
    perf = await tb.counters()
    dut._log.info(f"{len(moves)} window moves, {perf['core_swap']} swap cycles of "
                  f"{perf['core_busy']} busy")
