import numpy as np
import pytest

from vrex.config import Config, ConfigError
from golden.numerics import hamming, round_div
from golden.resv import HashClusterer, ResvLayer, run_resv, sink_count
from golden.trace import quantise, synthetic_trace

RNG = np.random.default_rng(77)


def reference_cluster(hashes, steps, n_hp, th_hd, window, max_age):
    """A second, plain-Python statement of D3/D4 to check the golden clusterer against."""
    opened_hash, opened_step, out = [], [], []
    for h, s in zip(hashes, steps):
        best, arg = n_hp + 1, -1
        for c in range(max(0, len(opened_hash) - window), len(opened_hash)):
            if max_age is not None and s - opened_step[c] > max_age:
                continue
            d = bin(int(h) ^ int(opened_hash[c])).count("1")
            if d <= best:                      # '<=': a tie goes to the later cluster
                best, arg = d, c
        if arg >= 0 and best < th_hd:
            out.append((arg, False, best))
        else:
            opened_hash.append(h)
            opened_step.append(s)
            out.append((len(opened_hash) - 1, True, best))
    return out


def test_hand_clustering():
    hc = HashClusterer(n_hp=8, th_hd=3, window=16, max_age=None)
    cid, opened, dist = hc.assign([0x00, 0x03, 0xF0, 0xF1, 0x0F], step=0)
    assert cid.tolist() == [0, 0, 1, 1, 2]
    assert opened.tolist() == [True, False, True, False, True]
    assert dist.tolist() == [9, 2, 4, 1, 4]               # 9 = n_hp + 1: no candidate


def test_threshold_boundary_and_ties():
    hc = HashClusterer(n_hp=8, th_hd=3, window=16, max_age=None)
    hc.assign([0x00], 0)
    assert hc.assign([0x03], 0)[1].tolist() == [False]    # distance Th_hd - 1 joins
    assert hc.assign([0x07], 0)[1].tolist() == [True]     # distance Th_hd opens
    hc = HashClusterer(n_hp=8, th_hd=5, window=16, max_age=None)
    for h in (0x00, 0xF0, 0x0F):                          # force three clusters
        hc._open(np.uint64(h), 0)
    cid, opened, dist = hc.assign([0x3C], 0)              # distance 4 to each
    assert (cid.tolist(), dist.tolist()) == ([2], [4])    # the most recent wins


def test_window_and_age():
    hc = HashClusterer(n_hp=8, th_hd=3, window=2, max_age=None)
    hc.assign([0x00, 0xFF, 0xF0], 0)                     # three clusters
    assert hc.assign([0x01], 1)[1].tolist() == [True]    # cluster 0 fell out of the window
    hc = HashClusterer(n_hp=8, th_hd=3, window=16, max_age=2)
    hc.assign([0x00], 0)
    assert hc.assign([0x01], 2)[0].tolist() == [0]       # exactly A steps old: still open
    assert hc.assign([0x01], 3)[1].tolist() == [True]    # A + 1: closed to new members
    hc = HashClusterer(n_hp=8, th_hd=3, window=16, max_age=0)
    hc.assign([0x00], 0)
    assert hc.assign([0x00], 1)[1].tolist() == [True]    # age 0: only this step's clusters


@pytest.mark.parametrize("n_hp, th_hd, window, max_age",
                         [(32, 7, 1024, None), (32, 9, 64, 3), (16, 4, 16, 1), (64, 20, 128, None),
                          (8, 0, 16, None), (8, 9, 16, 0)])
def test_matches_reference(n_hp, th_hd, window, max_age):
    # hashes with structure: a few centres plus flipped bits, so both joins and opens occur
    centres = RNG.integers(0, 2**n_hp, 12, dtype=np.uint64)
    hashes = []
    for i in range(600):
        h = int(centres[RNG.integers(12)])
        for b in RNG.choice(n_hp, RNG.integers(0, th_hd + 3), replace=True):
            h ^= 1 << int(b)
        hashes.append(h)
    steps = np.sort(RNG.integers(0, 10, 600))
    hc = HashClusterer(n_hp=n_hp, th_hd=th_hd, window=window, max_age=max_age, capacity=4)
    got = []
    for s in np.unique(steps):
        c, o, d = hc.assign(np.array(hashes, np.uint64)[steps == s], int(s))
        got += list(zip(c.tolist(), o.tolist(), d.tolist()))
    assert got == reference_cluster(hashes, steps, n_hp, th_hd, window, max_age)


def _cfg(tr, preset="paper", **kw):
    return Config.from_preset(preset, **tr.geometry(), **kw)


@pytest.fixture(scope="module")
def syn():
    tr = synthetic_trace(seed=11, n_frames=6, tokens_per_frame=16)
    return tr, quantise(tr)


def test_masks_cover_only_past_non_sink_tokens(syn):
    tr, qt = syn
    for preset in ("paper", "tuned"):
        cfg = _cfg(tr, preset)
        r = run_resv(tr, qt, cfg, [0.3])
        m = r.masks[0.3]
        b = tr.step_bounds()
        n_sink = sink_count(tr, cfg)
        for s in range(tr.n_steps):
            assert not m[:, s, :, b[s]:].any()
            assert not m[:, s, :, :n_sink].any()
        assert (r.cluster_of[..., :n_sink] == -1).all()
        assert (r.cluster_of[..., n_sink:] >= 0).all()


def test_th_r_one_takes_every_past_token(syn):
    tr, qt = syn
    for numerics, wicsum in (("int", "bucket"), ("int", "exact"), ("float", "exact")):
        cfg = _cfg(tr, numerics=numerics, wicsum=wicsum)
        m = run_resv(tr, qt, cfg, [1.0]).masks[1.0]
        b = tr.step_bounds()
        n_sink = sink_count(tr, cfg)
        for s in range(1, tr.n_steps):
            assert m[:, s, :, n_sink:b[s]].all()


def test_selection_grows_with_th_r(syn):
    tr, qt = syn
    r = run_resv(tr, qt, _cfg(tr, "tuned"), [0.1, 0.3, 0.6, 0.9])
    for lo, hi in ((0.1, 0.3), (0.3, 0.6), (0.6, 0.9)):
        assert not (r.masks[lo] & ~r.masks[hi]).any()
    b = tr.step_bounds()
    for s in range(2, tr.n_steps):         # candidates exist: never empty
        assert r.masks[0.1][:, s].any(axis=-1).all()


def test_th_hd_zero_is_no_clustering(syn):
    tr, qt = syn
    a = run_resv(tr, qt, _cfg(tr, th_hd=0), [0.3])
    b = run_resv(tr, qt, _cfg(tr), [0.3], clustering=False)
    np.testing.assert_array_equal(a.masks[0.3], b.masks[0.3])
    assert a.n_clusters.sum() == (a.cluster_of >= 0).sum()


def test_representative_is_rounded_mean(syn):
    tr, qt = syn
    cfg = _cfg(tr)
    lay = ResvLayer(cfg, tr, qt, 0, sink_count(tr, cfg))
    b = tr.step_bounds()
    for s in range(tr.n_steps):
        lay.cluster(s, int(b[s]), int(b[s + 1]))
    cl = lay.cluster_of[0]
    for c in range(lay.clusterers[0].n):
        members = np.flatnonzero(cl == c)
        keys = qt.k[0][:, members].astype(np.int64)              # [Hkv, n, d]
        np.testing.assert_array_equal(lay.sums[0, c], keys.sum(axis=1))
        rep = round_div(keys.sum(axis=1), len(members))
        assert ((-128 <= rep) & (rep <= 127)).all()


@pytest.mark.parametrize("order", ["select_first", "cluster_first"])
def test_scoring_order(syn, order):
    """Select first (the core's order): the representative keys are the means of the past
    members. Cluster first (docs/design.md read literally): the means over every member so far,
    the step's own included. Either way the candidates are the clusters with past members
    and the scores' weights count only those."""
    tr, qt = syn
    cfg = _cfg(tr, order=order)
    rows = []
    r = run_resv(tr, qt, cfg, [0.3], record_rows=rows)
    b = tr.step_bounds()
    hpg = tr.n_kv_heads // cfg.hash_groups
    checked = own_in = 0
    for row in rows:
        l, s, h = row["layer"], row["step"], row["head"]
        a, e = int(b[s]), int(b[s + 1])
        cl = r.cluster_of[l, h // hpg]
        upto = e if order == "cluster_first" else a
        for c, cnt, rep in zip(row["cluster"], row["count"], row["rep"]):
            past = np.flatnonzero(cl[:a] == c)
            members = np.flatnonzero(cl[:upto] == c)
            own_in += len(members) - len(past)
            assert cnt == len(past) > 0
            want = round_div(qt.k[l, h, members].astype(np.int64).sum(axis=0), len(members))
            np.testing.assert_array_equal(rep, np.clip(want, -128, 127))
            checked += 1
    assert checked > 50
    assert (own_in > 0) == (order == "cluster_first")   # the step's own tokens did join


def test_timing_scope_and_hash_scope(syn):
    tr, qt = syn
    base = run_resv(tr, qt, _cfg(tr), [0.3]).masks[0.3]
    prev = run_resv(tr, qt, _cfg(tr, timing="prev_layer"), [0.3]).masks[0.3]
    np.testing.assert_array_equal(prev[1:], base[:-1])
    np.testing.assert_array_equal(prev[0], base[0])
    lay = run_resv(tr, qt, _cfg(tr, scope="layer"), [0.3]).masks[0.3]
    assert (lay == lay[:, :, :1]).all() and not (base & ~lay).any()
    ph = run_resv(tr, qt, _cfg(tr, hash_scope="per_head"), [0.3])
    assert ph.cluster_of.shape[1] == tr.n_kv_heads
    relu = run_resv(tr, qt, _cfg(tr, weight_mode="relu"), [0.3]).masks[0.3]
    assert relu.any()


def test_float_and_int_agree_on_synthetic(syn):
    tr, qt = syn
    for preset in ("paper", "tuned"):
        cfg = _cfg(tr, preset)
        mi = run_resv(tr, qt, cfg, [0.3]).masks[0.3]
        mf = run_resv(tr, None, cfg.replace(numerics="float", wicsum="exact"), [0.3]).masks[0.3]
        inter, union = (mi & mf).sum(-1), (mi | mf).sum(-1)
        assert (inter[union > 0] / union[union > 0]).mean() > 0.5


def test_partition_forced(syn):
    """A run on another run's clusters: its own clusters give back its own selection exactly
    (every order and preset); the float mode on the integer clusters has the same clusters,
    so the same candidates, and agrees with the integer mode at least as well as the float
    mode on its own clusters."""
    tr, qt = syn
    for preset in ("paper", "tuned"):
        for order in ("select_first", "cluster_first"):
            cfg = _cfg(tr, preset).replace(order=order)
            r = run_resv(tr, qt, cfg, [0.3, 0.6])
            rp = run_resv(tr, qt, cfg, [0.3, 0.6], partition=r.cluster_of)
            assert (rp.cluster_of == r.cluster_of).all()
            assert (rp.n_clusters == r.n_clusters).all()
            for th in (0.3, 0.6):
                assert (rp.masks[th] == r.masks[th]).all()
        fcfg = _cfg(tr, preset).replace(numerics="float", wicsum="exact")
        mi = run_resv(tr, qt, _cfg(tr, preset), [0.3])
        same = run_resv(tr, None, fcfg, [0.3], partition=mi.cluster_of)
        own = run_resv(tr, None, fcfg, [0.3])
        assert (same.cluster_of == mi.cluster_of).all()

        def jac(a, b):
            inter, union = (a & b).sum(-1), (a | b).sum(-1)
            return (inter[union > 0] / union[union > 0]).mean()
        assert jac(mi.masks[0.3], same.masks[0.3]) >= jac(mi.masks[0.3], own.masks[0.3])


def test_errors(syn):
    tr, qt = syn
    with pytest.raises(ConfigError, match=r"head_dim of the configuration \(64\) does not match "
                                          r"the trace \(32\)"):
        run_resv(tr, qt, Config.from_preset("paper", **{**tr.geometry(), "head_dim": 64}))
    with pytest.raises(ConfigError, match="wicsum 'bucket' needs numerics 'int'"):
        run_resv(tr, qt, _cfg(tr, numerics="float"))
    with pytest.raises(ValueError, match="numerics 'int' needs the quantised trace"):
        run_resv(tr, None, _cfg(tr))


def test_tuned_clusters_same_patch_across_frames(bundled, bundled_q):
    """docs/design.md D1 on real data: only centred pre-RoPE hashes follow a patch across frames."""
    share = {}
    for preset in ("paper", "tuned"):
        r = run_resv(bundled, bundled_q, Config.from_preset(preset, **bundled.geometry()), [0.3])
        vis = np.flatnonzero(bundled.kind == 1)
        key = {(int(bundled.frame[t]), int(bundled.patch[t])): t for t in vis}
        hits = tot = 0
        for t in vis:
            f, p = int(bundled.frame[t]), int(bundled.patch[t])
            if f == 0:
                continue
            tot += bundled.n_layers
            hits += int((r.cluster_of[:, 0, t] == r.cluster_of[:, 0, key[(f - 1, p)]]).sum())
        share[preset] = hits / tot
    assert share["tuned"] > 2 * share["paper"]


def test_the_core_runs_either_order(syn):
    """The core's golden run takes both orders (the heads' candidates and counts are the
    same past members; the cluster-first keys include the step's own) and refuses what the
    core does not run; an unknown order is refused by the Config."""
    from golden.core import run_stream
    tr, qt = syn
    runs = {o: run_stream(tr, qt, _cfg(tr, order=o), outputs=False)
            for o in ("select_first", "cluster_first")}
    for a, b in zip(*runs.values()):
        assert [(h.clusters, h.counts) for h in a.heads] == \
            [(h.clusters, h.counts) for h in b.heads]
    with pytest.raises(ValueError, match="timing 'same_layer'"):
        run_stream(tr, qt, _cfg(tr, timing="prev_layer"))
    with pytest.raises(ConfigError, match="order"):
        _cfg(tr, order="sideways")


@pytest.mark.parametrize("order", ["select_first", "cluster_first"])
def test_dense_layers(syn, order):
    """D14: the model's first ``dense_layers`` layers attend every past non-sink token and
    score nothing; their tokens are clustered as before, and every other layer selects as
    without them. The core's golden run gives a dense head its whole counts list: every
    cluster with past members, id order, all selected."""
    from golden.core import run_stream
    from golden.resv import dense_rows
    tr, qt = syn
    assert list(tr.layers[:2]) == [0, 1]
    base = _cfg(tr, order=order)
    sparse = run_resv(tr, qt, base, [0.3])
    dense = run_resv(tr, qt, base.replace(dense_layers=1), [0.3])
    assert list(dense_rows(tr, 1)) == [0]
    b, n_sink = tr.step_bounds(), dense.n_sink
    m, ms = dense.masks[0.3], sparse.masks[0.3]
    for s in range(tr.n_steps):
        assert m[0, s, :, n_sink:b[s]].all() and not m[0, s, :, :n_sink].any()
        assert not m[0, s, :, b[s]:].any()
    assert (m[1:] == ms[1:]).all() and (ms[0] != m[0]).any()
    assert (dense.cluster_of == sparse.cluster_of).all()
    assert dense.candidates[0].sum() == 0 and (dense.candidates[1:] == sparse.candidates[1:]).all()
    for ls in run_stream(tr, qt, base.replace(dense_layers=1), outputs=False):
        assert ls.dense == (ls.layer == 0)
        for h, hr in enumerate(ls.heads):
            if not ls.dense:
                continue
            g = h // base.heads_per_group
            past = dense.cluster_of[0, g, :ls.token0]
            assert hr.clusters == sorted(set(past[past >= 0].tolist()))
            assert hr.counts == [int((past == c).sum()) for c in hr.clusters]
            assert hr.selected == list(range(len(hr.clusters)))
            assert hr.fetched == list(range(n_sink, max(n_sink, ls.token0)))
    with pytest.raises(ConfigError, match="dense_layers"):
        _cfg(tr, dense_layers=-1)
