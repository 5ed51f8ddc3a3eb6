"""The arithmetic of ReSV, written once: float reference and hardware-exact integers.

Everything the RTL computes is defined here and nowhere else; ``docs/numerics.md`` explains
each format. Integer functions take and return ``np.int64`` arrays and assert that no
intermediate leaves its stated width.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

__all__ = ["int_matmul", "round_div", "hyperplanes", "project", "hash_bits", "centring_bias",
           "hamming", "ExpUnit",
           "bucket_of", "bucket_bounds", "wicsum_bucket", "wicsum_bucket_sweep", "wicsum_exact",
           "wicsum_exact_sweep", "attention_float",
           "attention_int", "check_width"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def check_width(x, bits: int, signed: bool, what: str):
    """Assert every value of ``x`` fits ``bits`` (two's complement when ``signed``)."""
    x = np.asarray(x)
    if x.size == 0:
        return
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    mn, mx = int(x.min()), int(x.max())
    assert lo <= mn and mx <= hi, f"{what} leaves its {bits}-bit range: [{mn}, {mx}]"


def int_matmul(a, b) -> np.ndarray:
    """``a @ b`` of integer matrices, exact, as int64.

    NumPy multiplies int64 matrices without BLAS (tens of times slower than float64). When
    every partial sum is bounded by ``max|a| · max|b| · K < 2**53`` the float64 product is
    exact whatever the summation order, so it is used and converted back; otherwise the int64
    product is."""
    a = np.asarray(a)
    b = np.asarray(b)
    if a.size == 0 or b.size == 0:
        return np.asarray(a, np.int64) @ np.asarray(b, np.int64)
    bound = (int(np.abs(a).max()) * int(np.abs(b).max())) * a.shape[-1]
    if bound < (1 << 53):
        return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.int64)
    return a.astype(np.int64) @ b.astype(np.int64)


def round_div(num, den):
    """``num / den`` rounded to the nearest integer, halves away from zero; ``den > 0``.

    The one rounding rule of the integer mode (representative keys, hash bias, attention
    output): ``sign(num) · floor((2·|num| + den) / (2·den))``.
    """
    num = np.asarray(num, dtype=np.int64)
    den = np.asarray(den, dtype=np.int64)
    assert (den > 0).all(), "round_div needs a positive divisor"
    q = (2 * np.abs(num) + den) // (2 * den)
    return np.where(num < 0, -q, q)


# --- hashing (D1, D2) -----------------------------------------------------------------------

def _splitmix64(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def hyperplanes(seed: int, layer: int, group: int, n_hp: int, dim: int) -> np.ndarray:
    """The int8 hyperplanes ``[n_hp, dim]`` of one layer and hash group (D2).

    Generator: ``base = seed + φ·(1 + 256·layer + group)`` and value ``i`` (row-major) is
    ``(splitmix64(base + φ·i) >> 32) mod 255 - 127``, φ = 0x9E3779B97F4A7C15, all mod 2**64.
    Values are uniform on [-127, 127]; a C or Verilog model reproduces them in a few lines.
    """
    with np.errstate(over="ignore"):
        base = np.uint64(seed) + _GOLDEN * np.uint64(1 + 256 * layer + group)
        idx = np.arange(n_hp * dim, dtype=np.uint64)
        z = _splitmix64(base + _GOLDEN * idx)
    vals = ((z >> np.uint64(32)) % np.uint64(255)).astype(np.int64) - 127
    return vals.reshape(n_hp, dim).astype(np.int8)


def project(keys_int8: np.ndarray, hp: np.ndarray) -> np.ndarray:
    """Integer projections ``keys [T, D] · hpᵀ`` as int64 ``[T, n_hp]``."""
    p = int_matmul(keys_int8, np.asarray(hp).T)
    check_width(p, 16 + max(1, math.ceil(math.log2(hp.shape[1]))), True, "hash projection")
    return p


def hash_bits(proj: np.ndarray, bias=None) -> np.ndarray:
    """Pack ``(proj - bias) > 0`` over the last axis into uint64 words (bit j = hyperplane j)."""
    x = proj if bias is None else proj - bias
    bits = (x > 0).astype(np.uint64)
    shifts = np.arange(bits.shape[-1], dtype=np.uint64)
    return (bits << shifts).sum(axis=-1, dtype=np.uint64)


def centring_bias(key_sum, count: int, hp: np.ndarray) -> np.ndarray:
    """The per-hyperplane bias of centred hashing (D1): ``μ·hp`` for the running mean key
    ``μ = key_sum / count``, as ``round_div(key_sum · hpᵀ, count)`` (sign((k-μ)·r) =
    sign(k·r - μ·r), so the projection of the raw key less this bias gives the centred
    sign)."""
    return round_div(int_matmul(key_sum, np.asarray(hp).T), count)


def hamming(a, b) -> np.ndarray:
    return np.bitwise_count(np.bitwise_xor(np.asarray(a, np.uint64), np.asarray(b, np.uint64))
                            ).astype(np.int64)


# --- the exponential unit (D7, light attention) ----------------------------------------------

@dataclass(frozen=True)
class ExpUnit:
    """Fixed-point ``exp((s - max)·α)`` for integer score differences ``x = s - max <= 0``.

    α (folding 1/√d and the quantisation scales) is held as ``β = α·log2(e) = beta_m ·
    2**-beta_s`` with ``beta_m`` a 16-bit mantissa in [2**15, 2**16). Then
    ``n = -((x · beta_m) >> (beta_s - frac_bits))`` (arithmetic shift, so n rounds up),
    and the weight is ``table[n mod 2**frac_bits] >> (n >> frac_bits)``, 0 once the shift
    reaches ``weight_bits``. ``table[f] = round(2**(weight_bits-1) · 2**(-f / 2**frac_bits))``,
    so 1.0 is ``2**(weight_bits-1)``.
    """

    beta_m: int
    beta_s: int
    frac_bits: int
    weight_bits: int
    x_bits: int

    @classmethod
    def for_config(cls, alpha: float, cfg) -> "ExpUnit":
        """The unit of a build (``cfg.exp_frac_bits``, ``cfg.weight_bits``; inputs are score
        differences of ``cfg.score_bits + 1`` bits) for the scale ``alpha``."""
        return cls.from_alpha(alpha, cfg.exp_frac_bits, cfg.weight_bits, cfg.score_bits + 1)

    @classmethod
    def from_alpha(cls, alpha: float, frac_bits: int, weight_bits: int,
                   x_bits: int) -> "ExpUnit":
        if not (alpha > 0 and math.isfinite(alpha)):
            raise ValueError(f"alpha must be a positive finite number, not {alpha!r}")
        beta = alpha * math.log2(math.e)
        e = math.floor(math.log2(beta))
        beta_s = 15 - e
        beta_m = int(math.floor(beta * 2.0 ** beta_s + 0.5))
        if beta_m == 1 << 16:
            beta_m, beta_s = 1 << 15, beta_s - 1
        if beta_s < frac_bits:
            raise ValueError(f"alpha {alpha!r} is too large for the exp unit: "
                             f"alpha·log2(e) must stay below 2**{15 - frac_bits}")
        return cls(beta_m, beta_s, frac_bits, weight_bits, x_bits)

    @cached_property
    def table(self) -> np.ndarray:
        f = np.arange(1 << self.frac_bits)
        one = 1 << (self.weight_bits - 1)
        return np.floor(one * 2.0 ** (-f / (1 << self.frac_bits)) + 0.5).astype(np.int64)

    @property
    def alpha(self) -> float:
        return self.beta_m * 2.0 ** -self.beta_s / math.log2(math.e)

    def __call__(self, x) -> np.ndarray:
        x = np.asarray(x, dtype=np.int64)
        assert (x <= 0).all(), "the exp unit takes score differences s - max <= 0"
        check_width(x, self.x_bits, True, "exp input")
        prod = x * self.beta_m          # fits x_bits + 16 bits: beta_m < 2**16
        n = -(prod >> (self.beta_s - self.frac_bits))
        ip = n >> self.frac_bits
        frac = n & ((1 << self.frac_bits) - 1)
        w = self.table[frac] >> np.minimum(ip, 62)
        return np.where(ip >= self.weight_bits, 0, w)


# --- WiCSum (D8) -----------------------------------------------------------------------------

def bucket_bounds(smin: int, smax: int, buckets: int) -> np.ndarray:
    """Lower bounds ``lo[0..B]`` of the B equal-width score buckets, ``lo[B] = smax + 1``.

    ``lo[k] = smin + ((k · (smax - smin + 1)) >> log2(B))``; bucket k is ``lo[k] <= s < lo[k+1]``
    (empty when the range is narrower than B). A multiply by a constant and a shift: no divider.
    """
    r1 = smax - smin + 1
    k = np.arange(buckets + 1, dtype=np.int64)
    return smin + ((k * r1) >> int(math.log2(buckets)))


def bucket_of(s, smin, smax, buckets: int) -> np.ndarray:
    """The bucket index of each score: the largest k with ``lo[k] <= s`` (same as the bounds).

    Closed form ``((s - smin + 1)·B - 1) // (smax - smin + 1)``; broadcasts over rows.
    """
    s = np.asarray(s, np.int64)
    r1 = np.asarray(smax, np.int64) - np.asarray(smin, np.int64) + 1
    return ((s - smin + 1) * buckets - 1) // r1


def wicsum_bucket(s, w, n, valid, th_r_fixed: int, th_r_frac_bits: int, buckets: int):
    """The WTU's bucketed WiCSum over rows: ``s, w, n, valid`` are ``[R, C]``.

    Per row: min and max score over valid entries, ``total = Σ w·n``, threshold
    ``th = (total · th_r_fixed) >> th_r_frac_bits``. Buckets are walked from the top,
    adding each bucket's ``Σ w·n``; the walk exits after the first bucket whose running sum
    exceeds ``th`` (strictly), else it visits every bucket. Selected: valid entries with
    ``n > 0`` in visited buckets. Returns ``(selected [R, C] bool, visited [R] int)``;
    a row without valid entries selects nothing and visits no bucket.
    """
    return wicsum_bucket_sweep(s, w, n, valid, [th_r_fixed], th_r_frac_bits, buckets)[0]


def wicsum_bucket_sweep(s, w, n, valid, th_r_fixed, th_r_frac_bits: int, buckets: int):
    """:func:`wicsum_bucket` at every threshold of the list ``th_r_fixed``: the buckets and
    their sums are built once and only the walk's exit differs. A list of ``(selected,
    visited)``, one per threshold."""
    s = np.asarray(s, np.int64)
    w = np.asarray(w, np.int64)
    n = np.asarray(n, np.int64)
    valid = np.asarray(valid, bool)
    R, C = s.shape
    if R == 0 or C == 0:
        return [(np.zeros((R, C), bool), np.zeros(R, np.int64)) for _ in th_r_fixed]
    big = np.int64(1) << 62
    smin = np.where(valid, s, big).min(axis=1, keepdims=True)
    smax = np.where(valid, s, -big).max(axis=1, keepdims=True)
    has = valid.any(axis=1)
    smin = np.where(has[:, None], smin, 0)
    smax = np.where(has[:, None], smax, 0)
    b = np.clip(bucket_of(s, smin, smax, buckets), 0, buckets - 1)
    contrib = np.where(valid, w * n, 0)
    flat = (np.arange(R)[:, None] * buckets + b).ravel()
    if int(contrib.max(initial=0)) * C < (1 << 53):        # float64 sums stay exact
        per = np.bincount(flat, contrib.ravel().astype(np.float64), R * buckets)
        per = per.astype(np.int64).reshape(R, buckets)
    else:
        per = np.zeros(R * buckets, np.int64)
        np.add.at(per, flat, contrib.ravel())
        per = per.reshape(R, buckets)
    total = per.sum(axis=1)
    running = np.cumsum(per[:, ::-1], axis=1)[:, ::-1]        # running[k] = Σ_{j>=k} per[j]
    eligible = valid & (n > 0)
    out = []
    for thf in th_r_fixed:
        assert int(total.max()) < (1 << 62) // max(1, thf), "WiCSum threshold overflows"
        th = (total * thf) >> th_r_frac_bits
        crossed = running > th[:, None]
        # exit bucket: the highest k whose running sum crosses (the first crossing from the top)
        any_cross = crossed.any(axis=1)
        exit_k = np.where(any_cross, buckets - 1 - np.argmax(crossed[:, ::-1], axis=1), 0)
        visited = np.where(has, buckets - exit_k, 0)
        out.append((eligible & (b >= exit_k[:, None]), visited))
    return out


def wicsum_exact(w, n, valid, th_r):
    """Exact WiCSum over rows: descending weight, ties by lower index, the crossing entry kept.

    ``th = th_r · Σ w·n`` (float; for integer weights pass ``(th_r_fixed, frac_bits)`` as
    ``th_r`` to use the integer threshold of the WTU). Entries with ``n == 0`` or invalid
    are never selected. Returns ``selected [R, C]``.
    """
    return wicsum_exact_sweep(w, n, valid, [th_r])[0]


def wicsum_exact_sweep(w, n, valid, th_rs):
    """:func:`wicsum_exact` at every threshold of the list ``th_rs`` (each as
    :func:`wicsum_exact` takes it): one sort, one cumulative sum. A list of selections."""
    w = np.asarray(w)
    n = np.asarray(n)
    valid = np.asarray(valid, bool)
    R, C = w.shape
    if R == 0 or C == 0:
        return [np.zeros((R, C), bool) for _ in th_rs]
    # weights are non-negative, so -1 sorts invalid entries last; the stable sort keeps ties
    # in index order (lower cluster id first)
    key = np.where(valid, w, -1)
    order = np.argsort(-key, axis=1, kind="stable")
    contrib = np.where(valid, w * n, 0)
    cs = np.cumsum(np.take_along_axis(contrib, order, axis=1), axis=1)
    total = cs[:, -1]
    eligible = valid & (n > 0)
    place = np.empty((R, C), np.int64)           # each entry's place in its row's order
    np.put_along_axis(place, order, np.broadcast_to(np.arange(C), (R, C)), axis=1)
    out = []
    for th_r in th_rs:
        if isinstance(th_r, tuple):
            th = (total.astype(np.int64) * th_r[0]) >> th_r[1]
        else:
            th = total * th_r
        crossed = cs > th[:, None]
        k = np.where(crossed.any(axis=1), np.argmax(crossed, axis=1), C - 1)
        out.append((place <= k[:, None]) & eligible)
    return out


# --- light attention (D10) -------------------------------------------------------------------

def attention_float(q, k, v, mask, scale):
    """Softmax attention of rows ``q [R, d]`` over ``k, v [N, d]`` where ``mask [R, N]``."""
    logits = (q.astype(np.float64) @ k.astype(np.float64).T) * scale
    logits = np.where(mask, logits, -np.inf)
    m = logits.max(axis=1, keepdims=True)
    e = np.exp(logits - m)
    return (e @ v.astype(np.float64)) / e.sum(axis=1, keepdims=True)


def attention_int(q, k, v, mask, exp_unit: ExpUnit, out_frac_bits: int, score_bits: int):
    """Integer light attention: int8 ``q [R, d]``, ``k, v [N, d]``, ``mask [R, N]``.

    ``s = q·k`` (int), ``p = exp_unit(s - max_row)`` (weight format), ``o = round_div(
    Σ p·v · 2**out_frac_bits, Σ p)``: the output is in units of V's scale times
    ``2**-out_frac_bits`` and fits ``8 + out_frac_bits`` signed bits (a convex combination of
    int8 values). Rows with an empty mask give 0.
    """
    s = int_matmul(q, np.asarray(k).T)
    check_width(s, score_bits, True, "attention score")
    big = np.int64(1) << 40
    m = np.where(mask, s, -big).max(axis=1, keepdims=True)
    x = np.where(mask, s - m, 0)
    p = np.where(mask, exp_unit(x), 0)
    den = p.sum(axis=1)
    num = int_matmul(p, v) << out_frac_bits
    out = round_div(num, np.maximum(den, 1)[:, None])
    out = np.where((den > 0)[:, None], out, 0)
    check_width(out, 8 + out_frac_bits, True, "attention output")
    return out
