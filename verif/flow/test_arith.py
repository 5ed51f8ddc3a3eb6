"""rtl.lib.mul_const: products by constants as shifted additions, exact over every input of
a few widths, with no multiplier in the netlist unless the constant has too many set bits."""
import pytest
from amaranth.back import rtlil
from amaranth.hdl import Module, Signal, signed
from amaranth.sim import Simulator

from rtl.lib import mul_const

CONSTS = (0, 1, 2, 3, 5, 6, 7, 12, 768, 0b1011011)


def _module(width, k, **kw):
    m = Module()
    x = Signal(width)
    ys = [Signal(width + max(k, 1).bit_length(), name=f"y_{j}") for j in range(len(CONSTS))]
    m.d.comb += [y.eq(mul_const(x, c, **kw)) for y, c in zip(ys, CONSTS)]
    return m, x, ys


@pytest.mark.parametrize("width", [1, 4, 8])
def test_mul_const_is_the_product(width):
    m, x, ys = _module(width, max(CONSTS))
    sim = Simulator(m)
    bad = []

    async def tb(ctx):
        for v in range(1 << width):
            ctx.set(x, v)
            bad.extend((v, c, ctx.get(y)) for y, c in zip(ys, CONSTS) if ctx.get(y) != v * c)

    sim.add_testbench(tb)
    sim.run()
    assert not bad, bad[:5]


def test_mul_const_leaves_no_multiplier_but_past_max_terms():
    def muls(k, **kw):
        m = Module()
        x, y = Signal(12), Signal(24)
        m.d.comb += y.eq(mul_const(x, k, **kw))
        return rtlil.convert(m, ports=[x, y]).count("$mul")

    assert muls(3) == muls(768) == muls(0b10101) == 0
    assert muls(0b1011011) == 1                         # five set bits: the DSP's job
    assert muls(0b1011011, max_terms=5) == 0


def test_mul_const_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match="must be an int >= 0"):
        mul_const(Signal(4), -3)
    with pytest.raises(ValueError, match="must be unsigned"):
        mul_const(Signal(signed(4)), 3)
