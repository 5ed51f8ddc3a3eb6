"""Payloads as plain Python values, packed and unpacked by their Amaranth layouts: a struct
is a dict, an array a list, a signed field a signed int. Both tiers use these."""
from __future__ import annotations

from amaranth.hdl import Shape
from amaranth.lib import data

__all__ = ["pack", "unpack"]


def pack(layout, value) -> int:
    """Pack a dict (struct), a list (array) or an int into the layout's bits, recursively;
    missing struct fields are 0."""
    if isinstance(layout, data.Layout):
        word = 0
        for key, field in layout:
            sub = value.get(key, 0) if isinstance(value, dict) else value[key]
            word |= pack(field.shape, sub) << field.offset
        return word
    return int(value) & ((1 << Shape.cast(layout).width) - 1)


def unpack(layout, word: int):
    """The value of ``word`` under ``layout``: dicts, lists and (signed) ints."""
    if isinstance(layout, data.StructLayout):
        return {name: unpack(f.shape, (word >> f.offset) & ((1 << f.width) - 1))
                for name, f in layout}
    if isinstance(layout, data.ArrayLayout):
        w = Shape.cast(layout.elem_shape).width
        return [unpack(layout.elem_shape, (word >> (k * w)) & ((1 << w) - 1))
                for k in range(layout.length)]
    shape = Shape.cast(layout)
    if shape.signed and word >> (shape.width - 1):
        return word - (1 << shape.width)
    return word
