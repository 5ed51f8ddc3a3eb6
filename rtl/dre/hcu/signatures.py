"""The signatures that join the HCU's parts (``rtl.dre.hcu.unit`` builds and connects them):
each names what flows one way between two parts, a cycle at a time (the scan pipeline has no
back-pressure: a row that enters it leaves it a fixed number of cycles later)."""
from __future__ import annotations

from amaranth.lib import data, wiring
from amaranth.lib.wiring import Out

__all__ = ["entry_layout", "rank_layout", "lane_layout", "RowSignature", "LanesSignature",
           "WriteSignature", "BypassSignature", "BestSignature"]


def entry_layout(n_hp: int, step_bits: int, count_bits: int) -> data.StructLayout:
    """A window entry: a cluster's hash, opening step and member count."""
    return data.StructLayout({"hash": n_hp, "step": step_bits, "count": count_bits})


def rank_layout(wlog: int, dist_bits: int) -> data.StructLayout:
    """A lane's rank, ordered by one unsigned compare: eligible first, then the smaller
    distance (inverted in the compare), then the more recent slot (``key``: the slot and
    whether it is newer than the next opening; the tie rule of docs/design.md D4)."""
    return data.StructLayout({"key": wlog + 1, "dist": dist_bits, "elig": 1})


def lane_layout(wlog: int, dist_bits: int, count_bits: int) -> data.StructLayout:
    """A candidate: its rank, its cluster's count, and whether it is close enough to join."""
    return data.StructLayout({"rank": rank_layout(wlog, dist_bits), "count": count_bits,
                              "joins": 1})


class RowSignature(wiring.Signature):
    """A row of the window on its way through the scan: ``valid`` a cycle it holds a row,
    ``beat`` the row's index in the token's scan, ``row`` its ``lanes`` entries."""

    def __init__(self, entry, lanes: int, beat_bits: int):
        super().__init__({"valid": Out(1), "beat": Out(beat_bits),
                          "row": Out(data.ArrayLayout(entry, lanes))})


class LanesSignature(wiring.Signature):
    """Each lane's candidate (:func:`lane_layout`, ``joins`` not yet set), ``valid`` a cycle
    they hold a row."""

    def __init__(self, lane, lanes: int):
        super().__init__({"valid": Out(1), "lanes": Out(data.ArrayLayout(lane, lanes))})


class WriteSignature(wiring.Signature):
    """A write into the window, a cycle long: ``en`` the lanes whose count is written,
    ``ken`` those whose hash and step are too (at most one of each)."""

    def __init__(self, entry, lanes: int, addr_bits: int):
        super().__init__({"valid": Out(1), "addr": Out(addr_bits), "entry": Out(entry),
                          "en": Out(lanes), "ken": Out(lanes)})


class BypassSignature(wiring.Signature):
    """The entry a decision writes, for the read the decision cycle makes of the next token's
    row 0: ``hit`` the read holds it, ``key`` its hash and step too (an opened cluster),
    ``lanes`` its lane (one-hot)."""

    def __init__(self, entry, lanes: int):
        super().__init__({"hit": Out(1), "key": Out(1), "lanes": Out(lanes),
                          "entry": Out(entry)})


class BestSignature(wiring.Signature):
    """The token's winner so far and what follows from it, all registers: ``join`` (the
    token joins ``best``'s cluster), ``row0`` (best's slot is in row 0), ``lanes`` (its lane,
    one-hot), ``opens`` (one-hot: the layer whose counter the decision advances)."""

    def __init__(self, lane, lanes: int, layers: int):
        super().__init__({"best": Out(lane), "join": Out(1), "row0": Out(1),
                          "lanes": Out(lanes), "opens": Out(layers)})
