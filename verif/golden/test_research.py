"""The research variants of golden/research.py: cluster caps, the
two-stage selection and the report's shape, on a small synthetic trace."""
import numpy as np
import pytest

from golden import baselines
from golden.research import format_research, run_research, two_stage
from golden.resv import HashClusterer, run_resv, sink_count
from golden.trace import quantise, synthetic_trace
from vrex.config import Config


@pytest.fixture(scope="module")
def syn():
    tr = synthetic_trace(seed=5, n_frames=5, tokens_per_frame=12)
    return tr, quantise(tr)


def test_cap_splits_clusters():
    """Equal hashes join one cluster until it holds ``cap`` members, then open the next."""
    hc = HashClusterer(n_hp=8, th_hd=2, window=8, max_age=None, cap=3)
    cid, opened, _ = hc.assign([5] * 7, 0)
    assert list(cid) == [0, 0, 0, 1, 1, 1, 2]
    assert list(opened) == [1, 0, 0, 1, 0, 0, 1]


def test_cap_limits(syn):
    """A cap of one is ReSV without clustering; a cap above every cluster's size changes
    nothing."""
    tr, qt = syn
    cfg = Config.from_preset("paper", **tr.geometry())
    plain = run_resv(tr, qt, cfg, [0.3])
    big = run_resv(tr, qt, cfg, [0.3], cluster_cap=tr.n_tokens)
    one = run_resv(tr, qt, cfg, [0.3], cluster_cap=1)
    none = run_resv(tr, qt, cfg, [0.3], clustering=False)
    assert (big.masks[0.3] == plain.masks[0.3]).all()
    assert (one.masks[0.3] == none.masks[0.3]).all()
    assert (one.candidates >= plain.candidates).all()


def test_two_stage_keeps_the_best_share(syn):
    """The second stage keeps ``budget(keep, n)`` of each selection's n tokens, the ones the
    oracle ranks highest among them; keep = 1 keeps the selection."""
    tr, qt = syn
    cfg = Config.from_preset("paper", **tr.geometry())
    n_sink = sink_count(tr, cfg)
    m = run_resv(tr, qt, cfg, [0.5]).masks[0.5]
    assert (two_stage(tr, n_sink, m, 1.0) == m).all()
    half = two_stage(tr, n_sink, m, 0.5)
    assert not (half & ~m).any()
    n = m.sum(-1)
    want = np.vectorize(lambda k: baselines.budget(0.5, int(k)))(n)
    assert (half.sum(-1) == want).all()
    # within one selection, a kept token never has a lower mean probability than a dropped one
    G = tr.n_q_heads // tr.n_kv_heads
    b = tr.step_bounds()
    checked = 0
    for l in range(tr.n_layers):
        for s in range(1, tr.n_steps):
            lo, hi = int(b[s]), int(b[s + 1])
            for h in range(tr.n_kv_heads):
                kept, dropped = half[l, s, h, :lo], m[l, s, h, :lo] & ~half[l, s, h, :lo]
                if not kept.any() or not dropped.any():
                    continue
                p = baselines._mean_probability(baselines._rows(tr, l, h, lo, hi),
                                                tr.k[l, h, :hi].astype(np.float64), lo, hi, G,
                                                1.0 / np.sqrt(tr.head_dim))[:lo]
                assert p[kept].min() >= p[dropped].max()
                checked += 1
    assert checked > 0


def test_report(syn):
    tr, _ = syn
    r = run_research(tr, progress=False)
    for preset in ("paper", "tuned"):
        p = r["presets"][preset]
        assert set(p["matched"]) == {"cap8", "cap16", "th_hd-2", "per_head", "two_stage0.5",
                                     "two_stage0.75"}
        assert 0 < p["resv"]["retrieval_ratio"] < 1
    assert "resv" in format_research(r)
