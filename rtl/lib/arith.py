"""Multiplication by a constant as shifted additions.

Yosys maps a product by a constant that is not a power of two to a DSP multiplier on ECP5
(MULT18X18D, about 4 ns of logic and a route to it and back) and shares one multiplier among
the products an FSM makes in different states, behind a multiplexer of their operands; the
KVMU's address offsets (a block's slot times the heads of a group, a cluster's index times
its record) were its critical path that way. :func:`mul_const` writes the product as the
sum of the shifted copies of the value that the constant's set bits name: one carry chain
for a constant with two set bits, no multiplier and nothing to share.
"""
from __future__ import annotations

from amaranth.hdl import Const, Value

__all__ = ["mul_const"]


def mul_const(value, k: int, max_terms: int = 3) -> Value:
    """``value * k`` for an unsigned ``value`` and a constant ``k >= 0``: the sum of
    ``value << i`` over the set bits i of ``k`` when it has at most ``max_terms`` of them
    (a power of two is a shift), else the product itself (a DSP's job)."""
    if not isinstance(k, int) or k < 0:
        raise ValueError(f"mul_const: the constant must be an int >= 0, not {k!r}")
    value = Value.cast(value)
    if value.shape().signed:
        raise ValueError("mul_const: the value must be unsigned")
    bits = [i for i in range(k.bit_length()) if k >> i & 1]
    if not bits:
        return Const(0, 1)
    if len(bits) > max_terms:
        return value * k
    out = value << bits[0]
    for i in bits[1:]:
        out = out + (value << i)
    return out
