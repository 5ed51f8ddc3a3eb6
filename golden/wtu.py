"""Block-level golden model of the WiCSum threshold unit (WTU), docs/design.md D8 and D9.

Input: rows (one per query row of a KV head's group), each a list of candidates (integer
score, weight, count), grouped into heads. Per row the bucketed WiCSum of
:func:`golden.numerics.wicsum_bucket` picks entries; the rows of a head are united (D9), and the
head's selected candidate indices come out in ascending order with their count. A row longer
than the unit's score memory is refused: it selects nothing and raises the error status.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .numerics import wicsum_bucket

__all__ = ["Row", "WtuResult", "wtu_reference", "wtu_beats", "sort_baseline_cycles"]


@dataclass
class Row:
    score: np.ndarray
    weight: np.ndarray
    count: np.ndarray
    valid: np.ndarray | None = None     # False marks a padding entry (no candidate)

    def __post_init__(self):
        self.score = np.asarray(self.score, np.int64)
        self.weight = np.asarray(self.weight, np.int64)
        self.count = np.asarray(self.count, np.int64)
        if self.valid is None:
            self.valid = np.ones(len(self.score), bool)
        self.valid = np.asarray(self.valid, bool)


@dataclass
class WtuResult:
    heads: list = field(default_factory=list)      # per head: sorted selected indices
    visited: list = field(default_factory=list)    # per row: buckets visited
    refused: list = field(default_factory=list)    # per row: refused as too long
    counters: dict = field(default_factory=dict)
    first_error: tuple | None = None                # (code 1, head, row) of the first refusal


def wtu_reference(heads, *, th_r_fixed: int, th_r_frac_bits: int, buckets: int,
                  row_entries: int, lanes: int, pass_buckets: int) -> WtuResult:
    """``heads``: a list of heads, each a list of :class:`Row`. Counters as the RTL counts them:
    rows, buckets visited, buckets skipped by early exit (B - visited, rows with entries),
    entries read (lanes x beats per pass over the row: ``ceil(visited / pass_buckets)``
    passes, each summing ``pass_buckets`` buckets) and rows refused."""
    res = WtuResult()
    c = dict(rows=0, buckets_visited=0, buckets_skipped=0, entries_read=0, rows_refused=0)
    for rows in heads:
        union = np.zeros(row_entries, bool)
        for k, r in enumerate(rows):
            n = len(r.score)
            c["rows"] += 1
            if n > row_entries:
                if res.first_error is None:
                    res.first_error = (1, len(res.heads), k)
                res.refused.append(True)
                res.visited.append(0)
                c["rows_refused"] += 1
                continue
            res.refused.append(False)
            sel, vis = wicsum_bucket(r.score[None], r.weight[None], r.count[None],
                                     r.valid[None], th_r_fixed, th_r_frac_bits, buckets)
            v = int(vis[0])
            res.visited.append(v)
            union[:n] |= sel[0]
            c["buckets_visited"] += v
            if r.valid.any():
                c["buckets_skipped"] += buckets - v
            if v:
                c["entries_read"] += -(-v // pass_buckets) * lanes * -(-n // lanes)
        res.heads.append(np.flatnonzero(union))
    res.counters = c
    return res


def wtu_beats(res: WtuResult) -> list[dict]:
    """The WTU's ``o`` beats for a result: per head its selected candidate indices in
    ascending order (``count`` 1, 2, ...; ``last`` 0), then one closing beat (``last`` 1,
    ``count`` the head's total)."""
    beats = []
    for ids in res.heads:
        beats += [{"cluster": int(c), "count": k + 1, "last": 0} for k, c in enumerate(ids)]
        beats.append({"cluster": 0, "count": len(ids), "last": 1})
    return beats


def sort_baseline_cycles(n: int, lanes: int) -> int:
    """Cycles of a full-sort WiCSum with the same lanes, as a model (not RTL): a merge sort
    that does ``lanes`` compare-and-swaps a cycle, ``n · ceil(log2 n)`` in all, then one
    cumulative-sum pass of ``ceil(n / lanes)`` cycles; receiving the row costs the same
    ``ceil(n / lanes)`` as the WTU's and is counted too."""
    if n <= 1:
        return 2 * max(n, 1)
    beats = -(-n // lanes)
    return -(-n * math.ceil(math.log2(n)) // lanes) + 2 * beats
