import math

import numpy as np
import pytest

from golden.numerics import (ExpUnit, attention_float, attention_int, bucket_bounds, bucket_of,
                             hamming, hash_bits, hyperplanes, project, round_div, wicsum_bucket,
                             wicsum_exact)
from vrex.config import Config

CFG = Config()        # the default formats: exp_frac_bits 8, weight_bits 16, score_bits 22

RNG = np.random.default_rng(1234)


@pytest.mark.parametrize("num, den, want", [(5, 2, 3), (-5, 2, -3), (7, 3, 2), (8, 3, 3),
                                            (-8, 3, -3), (0, 5, 0), (1, 2, 1), (-1, 2, -1),
                                            (1, 3, 0), (-127 * 3, 3, -127)])
def test_round_div(num, den, want):
    assert int(round_div(num, den)) == want


def _splitmix_ref(x):
    m = (1 << 64) - 1
    z = x & m
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    return z ^ (z >> 31)


def test_hyperplanes_follow_the_documented_generator():
    phi, m = 0x9E3779B97F4A7C15, (1 << 64) - 1
    seed, layer, group, n_hp, dim = 0x5EED, 3, 1, 4, 5
    base = (seed + phi * (1 + 256 * layer + group)) & m
    want = [((_splitmix_ref((base + phi * i) & m) >> 32) % 255) - 127 for i in range(n_hp * dim)]
    got = hyperplanes(seed, layer, group, n_hp, dim)
    assert got.dtype == np.int8
    assert got.ravel().tolist() == want
    big = hyperplanes(1, 0, 0, 32, 192).astype(int)
    assert big.min() >= -127 and big.max() <= 127 and abs(big.mean()) < 3
    assert not np.array_equal(big, hyperplanes(1, 1, 0, 32, 192))


def test_hash_bits_and_hamming():
    proj = np.array([[5, -1, 0, 3], [-2, -2, 7, 0]])
    h = hash_bits(proj)
    assert h.tolist() == [0b1001, 0b0100]                  # x > 0 -> 1, x <= 0 -> 0
    assert hash_bits(proj, np.array([5, 0, 0, 0])).tolist() == [0b1000, 0b0100]
    assert hamming(h[0], h[1]).tolist() == 3
    assert hamming(np.uint64(2**64 - 1), np.uint64(0)).tolist() == 64


def test_projection_of_extremes_fits():
    k = np.full((2, 192), -127, np.int8)
    hp = np.full((32, 192), -127, np.int8)
    assert project(k, hp)[0, 0] == 127 * 127 * 192


def test_exp_unit_hand_values():
    e = ExpUnit.for_config(2.0 ** -8 / math.log2(math.e), CFG)       # β = 2**-8 exactly
    assert (e.beta_m, e.beta_s) == (1 << 15, 23)
    assert e(np.array([0, -128, -256, -512, -256 * 16])).tolist() == [32768, 23170, 16384, 8192, 0]
    assert len(e.table) == 256 and e.table[0] == 32768


def test_exp_unit_tracks_exp():
    for alpha in (1e-4, 3.7e-3, 0.05, 0.9):
        e = ExpUnit.for_config(alpha, CFG)
        x = -np.unique(RNG.integers(0, int(12 / alpha), 5000))
        w = e(x) / 32768
        ref = np.exp(x * alpha)
        assert np.all(np.abs(w - ref) <= 0.004 * ref + 2.0 ** -15)
        assert np.all(np.diff(e(np.sort(x)[::-1])) <= 0)       # non-increasing as x falls
    with pytest.raises(ValueError, match="alpha must be a positive finite number"):
        ExpUnit.for_config(0.0, CFG)
    with pytest.raises(ValueError, match="too large for the exp unit"):
        ExpUnit.for_config(200.0, CFG)


@pytest.mark.parametrize("B", [1, 2, 4, 8, 16, 32])
def test_bucket_closed_form_matches_bounds(B):
    for smin in (-7, 0, 3):
        for width in range(0, 70):
            smax = smin + width
            lo = bucket_bounds(smin, smax, B)
            assert lo[0] == smin and lo[B] == smax + 1
            s = np.arange(smin, smax + 1)
            want = np.searchsorted(lo[1:B], s, side="right")
            np.testing.assert_array_equal(bucket_of(s, smin, smax, B), want)


def test_paper_wicsum_example():
    """PAPER.md: Th_r = 0.8, weighted sum 100, running sums 36, 76, 81: the third is the last."""
    w = np.array([[36, 20, 5, 1]])
    n = np.array([[1, 2, 1, 19]])
    ok = np.ones_like(w, bool)
    for th in (0.8, (round(0.8 * 65536), 16)):
        assert wicsum_exact(w, n, ok, th).tolist() == [[True, True, True, False]]
    assert wicsum_exact(w.astype(float), n, ok, 0.8).tolist() == [[True, True, True, False]]


def test_paper_wtu_example():
    """PAPER.md: sum 1000, min 0, max 40, threshold 800; exit at 802 in the bucket 28..30."""
    s = np.array([[40, 35, 30, 28, 10, 0]])
    w = np.array([[500, 200, 90, 12, 197, 1]])
    n = np.ones_like(s)
    assert bucket_bounds(0, 40, 16)[11:13].tolist() == [28, 30]
    sel, visited = wicsum_bucket(s, w, n, np.ones_like(s, bool), round(0.8 * 65536), 16, 16)
    assert sel.tolist() == [[True, True, True, True, False, False]]
    assert visited.tolist() == [5]                  # buckets 15..11, the rest skipped


def test_wicsum_edge_cases():
    args = (round(0.3 * 65536), 16, 16)
    # empty row and a row without valid entries
    sel, vis = wicsum_bucket(np.zeros((1, 0)), np.zeros((1, 0)), np.zeros((1, 0)),
                             np.zeros((1, 0), bool), *args)
    assert sel.shape == (1, 0) and vis.tolist() == [0]
    sel, vis = wicsum_bucket(np.ones((1, 3)), np.ones((1, 3)), np.ones((1, 3)),
                             np.zeros((1, 3), bool), *args)
    assert not sel.any() and vis.tolist() == [0]
    # all scores equal (max = min): one bucket holds everything
    sel, vis = wicsum_bucket(np.full((1, 5), 7), np.full((1, 5), 100), np.ones((1, 5)),
                             np.ones((1, 5), bool), *args)
    assert sel.all() and vis.tolist() == [1]
    # zero sum: no bucket crosses, every entry holding tokens is taken
    sel, vis = wicsum_bucket(np.array([[3, 1, 2]]), np.zeros((1, 3)), np.ones((1, 3)),
                             np.ones((1, 3), bool), *args)
    assert sel.all() and vis.tolist() == [16]
    # a count of zero is never selected, even in a visited bucket
    sel, _ = wicsum_bucket(np.array([[9, 9, 1]]), np.array([[10, 10, 10]]),
                           np.array([[1, 0, 1]]), np.ones((1, 3), bool), *args)
    assert sel.tolist() == [[True, False, False]]
    assert wicsum_exact(np.array([[10, 10, 1]]), np.array([[0, 1, 1]]), np.ones((1, 3), bool),
                        0.3).tolist() == [[False, True, False]]


def test_wicsum_exact_tie_goes_to_lower_index():
    sel = wicsum_exact(np.array([[5, 5, 5]]), np.ones((1, 3)), np.ones((1, 3), bool), 0.3)
    assert sel.tolist() == [[True, False, False]]


def _random_rows(R=40, C=60):
    s = RNG.integers(-5000, 5000, (R, C))
    e = ExpUnit.for_config(2e-3, CFG)
    w = e(s - s.max(axis=1, keepdims=True))
    n = RNG.integers(1, 40, (R, C))
    valid = RNG.random((R, C)) < 0.9
    valid[:, 0] = True
    return s, w, n, valid


@pytest.mark.parametrize("B", [8, 16, 32])
def test_wicsum_properties(B):
    s, w, n, valid = _random_rows()
    prev_b = prev_e = None
    for th in (0.0, 0.05, 0.1, 0.3, 0.5, 0.8, 0.95, 1.0):
        thf = round(th * 65536)
        sb, vis = wicsum_bucket(s, w, n, valid, thf, 16, B)
        se = wicsum_exact(w, n, valid, (thf, 16))
        assert sb.any(axis=1).all() and se.any(axis=1).all()      # never empty
        assert not (sb & ~valid).any() and not (se & ~valid).any()
        assert ((1 <= vis) & (vis <= B)).all()
        if prev_b is not None:                                     # monotone in Th_r
            assert not (prev_b & ~sb).any() and not (prev_e & ~se).any()
        prev_b, prev_e = sb, se
    np.testing.assert_array_equal(prev_b, valid)                  # Th_r = 1 takes everything
    np.testing.assert_array_equal(prev_e, valid)


def test_bucketed_covers_exact_mass():
    """The bucketed walk exits late, never early: its selection holds at least Th_r of the mass."""
    s, w, n, valid = _random_rows(200, 80)
    thf = round(0.3 * 65536)
    sb, _ = wicsum_bucket(s, w, n, valid, thf, 16, 16)
    c = np.where(valid, w * n, 0)
    assert ((c * sb).sum(axis=1) > (c.sum(axis=1) * thf) >> 16).all()


def test_attention_float_is_softmax():
    q = RNG.standard_normal((5, 8))
    k = RNG.standard_normal((7, 8))
    v = RNG.standard_normal((7, 8))
    mask = RNG.random((5, 7)) < 0.7
    mask[:, 0] = True
    got = attention_float(q, k, v, mask, 0.3)
    for i in range(5):
        logit = (k[mask[i]] @ q[i]) * 0.3
        p = np.exp(logit) / np.exp(logit).sum()
        np.testing.assert_allclose(got[i], p @ v[mask[i]], rtol=1e-12)


def test_attention_int_hand_case():
    e = ExpUnit.for_config(0.01, CFG)
    q = np.array([[1, 0]], np.int8)
    k = np.zeros((2, 2), np.int8)
    v = np.array([[10, -3], [11, -4]], np.int8)
    out = attention_int(q, k, v, np.ones((1, 2), bool), e, 8, 22)
    assert out.tolist() == [[round(10.5 * 256), -round(3.5 * 256)]]     # halves away from 0
    assert attention_int(q, k, v, np.zeros((1, 2), bool), e, 8, 22).tolist() == [[0, 0]]


def test_attention_int_tracks_float():
    d = 64
    qf, kf, vf = (RNG.standard_normal((n, d)) for n in (20, 300, 300))
    sq, sk, sv = (np.abs(x).max() / 127 for x in (qf, kf, vf))
    qi, ki, vi = (np.round(x / s).astype(np.int8) for x, s in ((qf, sq), (kf, sk), (vf, sv)))
    mask = RNG.random((20, 300)) < 0.5
    e = ExpUnit.for_config(sq * sk / math.sqrt(d), CFG)
    oi = attention_int(qi, ki, vi, mask, e, 8, 22) * sv / 256
    of = attention_float(qi * sq, ki * sk, vi * sv, mask, 1 / math.sqrt(d))
    cos = (oi * of).sum(1) / np.linalg.norm(oi, axis=1) / np.linalg.norm(of, axis=1)
    assert cos.min() > 0.999
    extreme = attention_int(np.full((1, d), -127, np.int8), np.full((4, d), -127, np.int8),
                            np.full((4, d), -128, np.int8), np.ones((1, 4), bool), e, 8, 22)
    assert (extreme == -128 * 256).all()


@pytest.mark.parametrize("seed", range(6))
def test_chunked_attention_equals_whole(seed):
    """Light attention as the engine's chunked commands make it (golden.attn.attend_chunked:
    a maximum's pass and a sums' pass over chunks, per row tile) equals the whole-set
    attention exactly: chunks of random lengths (one token, chunks wholly masked for early
    rows of the step), several row tiles whose step positions wrap, steep and flat
    exponentials, all -128."""
    from golden.attn import attend, attend_chunked, chunk_lengths
    rng = np.random.default_rng(seed)
    cfg = Config()
    n = int(rng.choice([1, 4, 8]))
    causal = int(rng.integers(0, 12))
    m = int(rng.integers(1, 40)) if causal == 0 else causal * int(rng.integers(1, 4))
    L = causal + int(rng.integers(1 if causal == 0 else 0, 90))
    d = int(rng.integers(1, 40))
    cuts = np.sort(rng.choice(np.arange(1, L), size=min(L - 1, int(rng.integers(0, 8))),
                              replace=False)) if L > 1 else np.array([], int)
    lengths = np.diff(np.concatenate([[0], cuts, [L]])).tolist()
    kind = "min" if seed == 5 else "uniform"
    gen = (lambda s: np.full(s, -128)) if kind == "min" else (lambda s: rng.integers(-128, 128, s))
    q, k, v = gen((m, d)), gen((L, d)), gen((L, d))
    unit = ExpUnit.for_config([3e-3, 0.5, 1e-4][seed % 3], cfg)
    want = attend(q, k, v, causal, unit, cfg.out_frac_bits, cfg.score_bits)
    for ls in (lengths, chunk_lengths(L, 1), chunk_lengths(L, 7)):
        got = attend_chunked(q, k, v, causal, unit, cfg.out_frac_bits, cfg.score_bits, ls, n)
        assert np.array_equal(got, want), ls
