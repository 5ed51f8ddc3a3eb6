"""rtl.lib.stepped_counter: the counter against a Python model and its registered flags
against the compare they stand for, cycle by cycle, under random steps, resets and limits."""
import random

import pytest
from amaranth.hdl import Module, Signal, signed
from amaranth.sim import Simulator

from rtl.lib import stepped_counter


@pytest.mark.parametrize("width, seed", [(4, 0), (4, 1), (6, 2)])
def test_stepped_counter_flags_are_the_compares(width, seed):
    m = Module()
    lasts = {"a": Signal(signed(width + 2)), "b": Signal(width)}
    c = stepped_counter(m, "c", width, lasts)
    rng = random.Random(seed)
    log = []

    async def tb(ctx):
        pos, prev_last = 0, {k: 0 for k in lasts}
        hits = 0
        for cycle in range(3000):
            # a flag stands for the compare of the counter with the limit as it was a
            # cycle before (a limit that just changed is seen a cycle later); from the
            # first cycle after reset (the flags reset clear)
            for k, flag in (c.at.items() if cycle else ()):
                want = pos == prev_last[k]
                hits += want
                if ctx.get(flag) != want:
                    log.append((cycle, k, pos, prev_last[k], ctx.get(flag)))
            if ctx.get(c.pos) != pos:
                log.append((cycle, "pos", ctx.get(c.pos), pos))
            inc, zero = rng.random() < 0.6, rng.random() < 0.08
            ctx.set(c.inc, inc)
            ctx.set(c.zero, zero)
            if rng.random() < 0.05:
                ctx.set(lasts["a"], rng.randrange(-1, 1 << width))
            if rng.random() < 0.05:
                ctx.set(lasts["b"], rng.randrange(1 << width))
            prev_last = {k: ctx.get(v) for k, v in lasts.items()}
            if ctx.get(c.next) != (0 if zero else (pos + 1) % (1 << width) if inc else pos):
                log.append((cycle, "next", ctx.get(c.next)))
            pos = 0 if zero else (pos + 1) % (1 << width) if inc else pos
            await ctx.tick()
        assert hits > 100                   # the flags were set, not only clear

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert not log, log[:5]
