"""Block-level golden model of the attention engine's parts (docs/numerics.md §4, §6, §7,
§10): the GEMM tiles of the systolic array and the exponential unit.

The array computes ``C = A·Bᵀ`` of int8 matrices exactly (int64 here; the RTL's accumulators
are ``attn_acc_bits`` wide, enough for ``attn_k_max`` products), one n x n output tile at a
time: tile (i, j) is rows ``i·n ..`` of A against rows ``j·n ..`` of B, zero-padded past the
edges, emitted row by row. The exp unit is :class:`golden.numerics.ExpUnit`.
"""
from __future__ import annotations

import numpy as np

from .numerics import ExpUnit, hash_bits, int_matmul, project

__all__ = ["gemm", "gemm_tiles", "gemm_rows", "hash_words", "ExpUnit", "exp_registers",
           "score_rows", "attend_mask", "attend", "attend_rows"]


def gemm(a, b) -> np.ndarray:
    """``A·Bᵀ`` of int8 ``a [M, K]`` and ``b [L, K]``, exact, int64 ``[M, L]``."""
    return int_matmul(a, np.asarray(b).T)


def _pad(x, rows: int) -> np.ndarray:
    out = np.zeros((rows, x.shape[1]), np.int64)
    out[:len(x)] = x
    return out


def gemm_tiles(a, b, n: int):
    """The tiles of ``A·Bᵀ`` in the order a tile sequencer runs them (row tiles outer, column
    tiles inner): a list of ``(i, j, a_tile [n, K], b_tile [n, K], c_tile [n, n])``."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    out = []
    for i in range(0, max(len(a), 1), n):
        for j in range(0, max(len(b), 1), n):
            at, bt = _pad(a[i:i + n], n), _pad(b[j:j + n], n)
            out.append((i // n, j // n, at, bt, at @ bt.T))
    return out


def gemm_rows(a, b, n: int) -> list[dict]:
    """The engine's ``o_gemm`` beats for ``A·Bᵀ``: per row tile (outer) and column tile, the
    tile's real rows, each ``c[n]`` (zero past B's last row) with its row and first column;
    ``last`` on the final beat."""
    return _tile_rows(gemm(a, b), n, "c")


def _tile_rows(out, n: int, field: str) -> list[dict]:
    """A result matrix as the engine emits it: per row tile (outer) and n-column tile, the
    tile's real rows, each ``field[n]`` (zero past the last column) with its row and first
    column; ``last`` on the final beat."""
    out = np.asarray(out, np.int64)
    M, L = out.shape
    beats = []
    for i in range(0, M, n):
        for j in range(0, L, n):
            for r in range(i, min(i + n, M)):
                row = np.zeros(n, np.int64)
                row[:min(n, L - j)] = out[r, j:j + n]
                beats.append({field: [int(v) for v in row], "row": r, "col": j, "last": 0})
    beats[-1]["last"] = 1
    return beats


def hash_words(keys, hp, bias=None) -> np.ndarray:
    """The hash word of every key: bit j set when ``keys · hp[j] > bias[j]``
    (:func:`golden.numerics.hash_bits` of :func:`golden.numerics.project`)."""
    return hash_bits(project(np.asarray(keys, np.int64), np.asarray(hp)), bias)


def exp_registers(unit: ExpUnit) -> dict:
    """The exp unit's run-time registers for a golden unit: ``beta_m`` and ``beta_shift =
    beta_s - frac_bits``."""
    return {"beta_m": unit.beta_m, "beta_shift": unit.beta_s - unit.frac_bits}


def score_rows(queries, reps, counts, unit: ExpUnit, score_bits: int) -> list:
    """Cluster scoring (docs/numerics.md §6) of one KV head's query rows against its
    candidates' representative keys: per row a :class:`golden.wtu.Row` of the integer scores
    ``s = q·k̄``, the weights ``unit(s - max_row s)`` and the member counts, as the WTU
    takes them (``golden.resv.ResvLayer.select`` computes the same)."""
    from .numerics import check_width
    from .wtu import Row
    sc = gemm(queries, reps)
    check_width(sc, score_bits, True, "score")
    w = unit(sc - sc.max(axis=1, keepdims=True))
    counts = np.asarray(counts, np.int64)
    return [Row(sc[r], w[r], counts) for r in range(len(sc))]


def attend_mask(m: int, l: int, causal: int) -> np.ndarray:
    """The attended set of light attention's rows (docs/numerics.md §10) as the engine
    takes it: ``l`` tokens whose last ``causal`` are the step's own; ``m`` rows, the group's
    query heads each over the step's ``causal`` tokens in order (row r is token r mod causal
    of the step), so row r attends to the first ``l - causal + (r mod causal) + 1`` tokens
    (all ``l`` when ``causal`` is 0)."""
    cols = np.arange(l)[None, :]
    if causal == 0:
        return np.ones((m, l), bool)
    lim = l - causal + np.arange(m) % causal + 1
    return cols < lim[:, None]


def attend(q, k, v, causal: int, unit: ExpUnit, out_frac_bits: int, score_bits: int):
    """Light attention of int8 rows ``q [m, d]`` over ``k, v [l, d]`` with the mask of
    :func:`attend_mask`: :func:`golden.numerics.attention_int`, ``[m, d]`` int."""
    from .numerics import attention_int
    q, k, v = (np.asarray(x, np.int64) for x in (q, k, v))
    return attention_int(q, k, v, attend_mask(len(q), len(k), causal), unit, out_frac_bits,
                         score_bits)


def attend_rows(out, n: int) -> list[dict]:
    """The engine's ``o_attn`` beats for light attention's output ``[m, d]``: per row tile
    (outer) and n-dimension column tile, the tile's rows, each ``o[n]`` (zero past d), the
    row and the first dimension; ``last`` on the final beat."""
    return _tile_rows(out, n, "o")
