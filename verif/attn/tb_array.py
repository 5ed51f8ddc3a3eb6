"""Systolic-array testbench for cocotb + Verilator on the emitted Verilog (run by
test_verilog.py). Every tile's rows are compared with the golden GEMM."""
from __future__ import annotations

import itertools

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles

from golden.numerics import hash_bits
from rtl import SystolicArray
from verif.attn.model import gemm_case, tile_beats, tile_rows, trace_hash_case
from verif.lib.cocotb_tb import BlockTB, named, test
from verif.lib.pauses import CROSSINGS, no_pause
from verif.lib.scoreboard import compare


class ArrayTB(BlockTB):
    def __init__(self, dut):
        super().__init__(dut, SystolicArray, sources={"i": lambda b: b.in_layout},
                         sinks={"o": lambda b: b.out_layout})

    async def run(self, tiles):
        """Send the tiles' beats, take and compare every row; the counters since the call."""
        n = self.model.n
        base = await self.perf()
        send = cocotb.start_soon(self.source["i"].send(tile_beats(tiles, n)))
        got = []
        for _ in tiles:
            got += await self.sink["o"].take(n, timeout=20_000, until_last="last")
        await send
        compare(got, tile_rows(tiles, n), what="row")
        await self.sink["o"].expect_quiet(2 * n + 4)
        perf = await self.perf()
        perf = {k: perf[k] - base[k] for k in perf}
        assert perf["tiles"] == len(tiles) and perf["rows"] == n * len(tiles)
        assert perf["beats"] == sum(self.model.tile_beats(t[2].shape[1]) for t in tiles)
        return got, perf


@test()
@cocotb.parametrize(crossing=named(CROSSINGS))
async def gemm_crossed(dut, crossing):
    """M, K, L not multiples of n, tiles back to back, under each crossing."""
    tb = ArrayTB(dut)
    tb.cross(crossing, seed=1)
    await tb.start()
    n = tb.model.n
    rng = np.random.default_rng(10 + list(CROSSINGS).index(crossing))
    await tb.run(gemm_case(rng, 2 * n + 3, 37, n + 5, n))


@test()
@cocotb.parametrize(k=[1, 2, 5, 64])
async def reductions(dut, k):
    """Short reductions (padded to n beats) and a long one, with back-pressure."""
    tb = ArrayTB(dut)
    tb.cross("both", seed=2)
    await tb.start()
    n = tb.model.n
    await tb.run(gemm_case(np.random.default_rng(k), n + 1, k, 2 * n - 1, n))


@test()
@cocotb.parametrize(kind=named(["min", "max", "sparse"]))
async def extremes(dut, kind):
    """All -128 over the longest reduction the accumulators are built for (the largest sum),
    all 127, mostly zero."""
    tb = ArrayTB(dut)
    tb.cross("periodic", seed=3)
    await tb.start()
    n = tb.model.n
    k = tb.cfg.attn_k_max if kind == "min" else 300
    tiles = gemm_case(np.random.default_rng(3), n, k, n, n, kind)
    got, _ = await tb.run(tiles)
    if kind == "min":
        assert got[0]["c"][0] == 128 * 128 * k


@test()
async def real_trace_hash_projection(dut):
    """The bundled trace's keys against the layer's hyperplanes: the signs of the array's
    projections are the golden ReSV run's hashes."""
    tb = ArrayTB(dut)
    tb.cross("both", seed=4)
    await tb.start()
    n = tb.model.n
    tiles, keys, hp, hashes, clustered = trace_hash_case(8 * n, n)
    got, _ = await tb.run(tiles)
    n_hp = hp.shape[0]
    col_tiles = -(-n_hp // n)
    proj = np.zeros((len(keys), n_hp), np.int64)
    for t, (i, j, *_rest) in enumerate(tiles):
        for r in range(n):
            row = i * n + r
            cols = range(j * n, min(j * n + n, n_hp))
            if row < len(keys):
                proj[row, list(cols)] = got[t * n + r]["c"][:len(cols)]
    mine = hash_bits(proj)
    assert (mine[clustered] == hashes[clustered]).all()
    assert col_tiles * -(-len(keys) // n) == len(tiles)


@test()
async def reset_mid_tile(dut):
    """A reset in the middle of a tile leaves the array clean."""
    tb = ArrayTB(dut)
    tb.cross("both", seed=5)
    await tb.start()
    n = tb.model.n
    rng = np.random.default_rng(5)
    sender = cocotb.start_soon(tb.source["i"].send(tile_beats(gemm_case(rng, 2 * n, 50, n, n),
                                                              n)))
    tb.dut.o__ready.value = 1
    await ClockCycles(dut.clk, 60)
    sender.cancel()
    await tb.reset(3)
    assert all(v == 0 for v in (await tb.perf()).values())
    await tb.run(gemm_case(rng, n, 20, n, n))


@test()
async def utilisation(dut):
    """Without idle or back-pressure the array takes one beat a cycle: a 4n x 64 x 4n GEMM
    finishes in tile_cycles, so its MAC utilisation is useful MACs / (n² x cycles)."""
    tb = ArrayTB(dut)
    await tb.start()
    n = tb.model.n
    tiles = gemm_case(np.random.default_rng(6), 4 * n, 64, 4 * n, n)
    first = len(tb.source["i"].stamps)
    await tb.run(tiles)
    cycles = tb.sink["o"].stamps[-1] - tb.source["i"].stamps[first]
    assert cycles == tb.model.tile_cycles(64, len(tiles))
    util = (4 * n) * 64 * (4 * n) / (n * n * (cycles + 1))
    assert util >= (64 * len(tiles)) / (64 * len(tiles) + tb.model.latency) - 1e-9


@test()
async def blocked_output(dut):
    """A consumer that takes nothing for 40n cycles: the array takes beats until a tile's
    ``last`` would owe more rows than its queue holds and waits there (``held``), never
    freezes; released, every row comes out right."""
    tb = ArrayTB(dut)
    await tb.start()
    n = tb.model.n
    blocked = 40 * n
    tb.sink["o"].pauses = itertools.chain(itertools.repeat(True, blocked), no_pause())
    tiles = gemm_case(np.random.default_rng(7), 6 * n, 3, 2 * n, n)
    _, perf = await tb.run(tiles)
    # tiles whose rows the queue and the output register hold
    lets_through = (tb.model.queue_rows + tb.model.output_rows) // n
    assert perf["held"] >= blocked - (lets_through + 2) * n, perf
