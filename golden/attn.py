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
           "score_rows", "attend_mask", "attend", "attend_rows", "chunk_lengths",
           "attend_parts", "attend_parts_rows", "attend_chunked"]


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


def chunk_lengths(l: int, chunk: int) -> list[int]:
    """``l`` tokens in chunks of ``chunk`` (the last shorter)."""
    return [min(chunk, l - t) for t in range(0, l, chunk)]


def attend_parts(m: int, causal: int, lengths, n: int) -> list[dict]:
    """The commands of a chunked light attention (docs/attn.md, Longer sets): the set's
    tokens in chunks of ``lengths`` (in order, each at most the engine's ``b_rows``); per row
    tile of n rows (outer), the row maximum's pass over every chunk, then the sums' pass over
    every chunk, the final one dividing. Each command: ``part`` (1 maximum, 2 sums),
    ``first``/``final`` (its pass's first and last chunk), ``m`` rows from row ``row0`` (the
    row's step position ``pos0``), ``l`` tokens from token ``t0``, ``span = L - t0`` (the
    tokens from the chunk's start to the set's end) and ``causal``. The rows and their
    results are :func:`attend`'s over the whole set: the passes change where the sums are
    made, not what they are."""
    lengths = [int(x) for x in lengths]
    if not lengths or min(lengths) < 1:
        raise ValueError(f"chunks must be non-empty, not {lengths}")
    L = sum(lengths)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(int)
    out = []
    for r0 in range(0, m, n):
        rows = min(n, m - r0)
        for part in (1, 2):
            for c, (t0, lc) in enumerate(zip(starts, lengths)):
                out.append({"part": part, "first": int(c == 0),
                            "final": int(c == len(lengths) - 1), "m": rows, "row0": r0,
                            "pos0": r0 % causal if causal else 0, "l": lc, "t0": int(t0),
                            "span": L - int(t0), "causal": causal})
    return out


def attend_parts_rows(out, n: int) -> list[dict]:
    """The engine's ``o_attn`` beats of a chunked light attention's output ``[m, d]``: per
    row tile, the beats :func:`attend_rows` gives that tile (rows numbered from the set's
    first), ``last`` on each tile's final beat (its final command's)."""
    out = np.asarray(out, np.int64)
    beats = []
    for r0 in range(0, len(out), n):
        for b in _tile_rows(out[r0:r0 + n], n, "o"):
            beats.append({**b, "row": b["row"] + r0})
    return beats


def attend_chunked(q, k, v, causal: int, unit: ExpUnit, out_frac_bits: int, score_bits: int,
                   lengths, n: int) -> np.ndarray:
    """Light attention computed as the engine's chunked commands compute it
    (:func:`attend_parts`): each command sees only its chunk's tokens and its own rows, with
    the mask from its ``span`` and ``pos0`` (row i attends to the chunk's first ``span -
    causal + (pos0 + i) mod causal + 1`` tokens, all ``l`` when ``causal`` is 0); the
    maximum's pass keeps a running row maximum, the sums' pass adds the weights and P·V
    across chunks, the final chunk divides. Equal to :func:`attend` (the tests check it)."""
    from .numerics import check_width, int_matmul, round_div
    q, k, v = (np.asarray(x, np.int64) for x in (q, k, v))
    out = np.zeros((len(q), q.shape[1]), np.int64)
    low = -(np.int64(1) << (score_bits - 1))
    for c in attend_parts(len(q), causal, lengths, n):
        rows = slice(c["row0"], c["row0"] + c["m"])
        kc, vc = k[c["t0"]:c["t0"] + c["l"]], v[c["t0"]:c["t0"] + c["l"]]
        s = int_matmul(q[rows], kc.T)
        check_width(s, score_bits, True, "attention score")
        if causal:
            pos = (c["pos0"] + np.arange(c["m"])) % causal
            lim = c["span"] - causal + pos + 1
        else:
            lim = np.full(c["m"], c["l"])
        mask = np.arange(c["l"])[None, :] < lim[:, None]
        if c["part"] == 1:
            cm = np.where(mask, s, low).max(axis=1)
            mx = cm if c["first"] else np.maximum(mx, cm)
            continue
        p = np.where(mask, unit(np.where(mask, s - mx[:, None], 0)), 0)
        den = p.sum(axis=1) + (0 if c["first"] else den)
        num = int_matmul(p, vc) + (0 if c["first"] else num)
        if c["final"]:
            out[rows] = round_div(num << out_frac_bits, den[:, None])
    check_width(out, 8 + out_frac_bits, True, "attention output")
    return out
