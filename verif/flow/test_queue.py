"""rtl.lib.head_queue: a queue offered from its head, against a Python deque, cycle by cycle,
under random writes and random back-pressure, at several depths."""
import collections
import random

import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from rtl.lib import head_queue


@pytest.mark.parametrize("depth", [1, 2, 3, 9])
@pytest.mark.parametrize("seed", [0, 1])
def test_head_queue_is_a_fifo_offered_from_its_head(depth, seed):
    m = Module()
    put, data, ready = Signal(), Signal(12), Signal()
    valid, head, get = head_queue(m, "q", 12, depth, put=put, data=data, ready=ready)
    rng = random.Random(seed)
    log = []

    async def tb(ctx):
        model = collections.deque()       # entries written before this cycle
        word = 0
        for cycle in range(1500):
            p_put = rng.choice((0.2, 0.6, 0.95))
            p_ready = rng.choice((0.1, 0.5, 1.0))
            # a write only into room: the queue's callers keep that promise
            taking = bool(model) and rng.random() < p_ready
            w = len(model) - taking < depth and rng.random() < p_put
            ctx.set(ready, taking or (not model and rng.random() < 0.5))
            ctx.set(put, w)
            ctx.set(data, word)
            # valid says the queue holds an entry written before this cycle; head is the
            # oldest; get is valid and ready
            if ctx.get(valid) != bool(model):
                log.append((cycle, "valid", ctx.get(valid), len(model)))
            if model and ctx.get(head) != model[0]:
                log.append((cycle, "head", ctx.get(head), model[0]))
            if ctx.get(get) != (bool(model) and bool(ctx.get(ready))):
                log.append((cycle, "get", ctx.get(get)))
            if ctx.get(get):
                model.popleft()
            if w:
                model.append(word)
                word = (word + 1) % 4096
            await ctx.tick()
        assert word > 300                   # the queue moved entries, not only idled

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert not log, log[:5]
