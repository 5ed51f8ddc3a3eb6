"""What the WTU's parts share: small arithmetic helpers, the layouts of what passes between
them, and the signatures of those links (``rtl.dre.wtu.unit`` joins the parts)."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Mux, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import Out
from amaranth.utils import exact_log2

__all__ = ["add", "lesser", "greater", "bank_word", "times", "wrap", "store_layout",
           "row_layout", "mark_layout", "QueueSignature", "PushSignature"]

add = lambda a, b: a + b
lesser = lambda a, b: Mux(a < b, a, b)
greater = lambda a, b: Mux(a > b, a, b)


def bank_word(bank, word, D: int):
    """The code memory's address of ``word`` in ``bank`` (banks of D words): the two side by
    side when D is a power of two (no adder)."""
    if D & (D - 1) == 0:
        return Cat(word[:exact_log2(D)], bank) if D > 1 else bank
    return bank * D + word


def times(v, c: int):
    """``v · c`` for a constant ``c >= 0`` as shifts and adds (no multiplier cell)."""
    terms = [v << i for i in range(c.bit_length()) if c >> i & 1]
    return sum(terms[1:], terms[0]) if terms else Const(0)


def wrap(ptr, n: int):
    """``ptr + 1`` modulo ``n``."""
    return Mux(ptr == n - 1, 0, ptr + 1)


def store_layout(score_bits: int, prod_bits: int) -> data.StructLayout:
    """A ring entry: the score, ``w·n`` (0 for an invalid lane) and ``n > 0`` of a valid lane
    (as wide as score, weight, count and valid were)."""
    return data.StructLayout({"score": signed(score_bits), "prod": prod_bits, "nz": 1})


def row_layout(D: int, sum_bits: int, score_bits: int, blog: int, P: int):
    """A received row on its way to the walk: its ring words (``base``, ``stored``), whether
    it overflowed or has a valid entry, whether it ends its head, its threshold ``th``, its
    minimum and range ``r1``, the pass's accumulated offset ``acc`` and bucket bounds."""
    bound = signed(score_bits + 2)
    return data.StructLayout({
        "base": range(D), "stored": range(D + 1), "overflow": 1, "any": 1, "head_last": 1,
        "th": sum_bits, "smin": signed(score_bits), "r1": score_bits + 1,
        "acc": score_bits + 1 + blog, "lo": data.ArrayLayout(bound, P), "hi": bound})


def mark_layout(D: int, P: int) -> data.StructLayout:
    """A walked row for the marker: its words, its exit bucket (``P``: none), whether it
    overflowed and whether it ends its head."""
    return data.StructLayout({"stored": range(D + 1), "exit": range(P + 1), "overflow": 1,
                              "head_last": 1})


class QueueSignature(wiring.Signature):
    """A finished row into the walk's queue (a cycle long): the row, and its flags
    ``{overflow, skip}`` (skip: overflowed or without a valid entry)."""

    def __init__(self, row):
        super().__init__({"valid": Out(1), "row": Out(row), "flags": Out(2)})


class PushSignature(wiring.Signature):
    """A walked row handed to the marker through its code bank (a cycle long; the push
    register): the bank, the row, and its words less one."""

    def __init__(self, mark, banks: int, D: int):
        super().__init__({"valid": Out(1), "bank": Out(range(banks)), "rec": Out(mark),
                          "m1": Out(range(D))})
