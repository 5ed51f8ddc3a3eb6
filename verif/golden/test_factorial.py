"""The factorial comparison (golden.factorial): ReSV's predictor under ReSV's own policy is
ReSV (the float run on the same clusters), the count policy meets ReSV's count with whole
units, the fraction policy the fraction's budget, and the policies on hand cases."""
import numpy as np
import pytest

from golden import baselines
from golden.factorial import (CAP, POLICIES, PREDICTORS, _Context, factorial_masks, select,
                              stage_ratios, unit_scores)
from golden.resv import run_resv, sink_count
from golden.trace import quantise, synthetic_trace
from vrex.config import Config


@pytest.fixture(scope="module")
def case():
    tr = synthetic_trace(seed=5, n_frames=5, tokens_per_frame=12)
    cfg = Config.from_preset("paper", **tr.geometry())
    run = run_resv(tr, quantise(tr), cfg, [cfg.th_r])
    n_sink = sink_count(tr, cfg)
    hpg = tr.n_kv_heads // cfg.hash_groups
    other = run_resv(tr, quantise(tr), cfg.replace(hp_seed=cfg.hp_seed + 1), [cfg.th_r])
    capped = [run_resv(tr, quantise(tr), c.replace(cluster_cap=CAP), [cfg.th_r]).cluster_of
              for c in (cfg, cfg.replace(hp_seed=cfg.hp_seed + 1))]
    both = factorial_masks(tr, n_sink, [(run.masks[cfg.th_r], run.cluster_of),
                                        (other.masks[cfg.th_r], other.cluster_of)], hpg,
                           capped=capped, order=cfg.order)
    fx = {(p, q): m for (k, p, q), m in both.items() if k == 0}
    alone = factorial_masks(tr, n_sink, [(other.masks[cfg.th_r], other.cluster_of)], hpg,
                            capped=capped[1:], order=cfg.order)
    # a second seed's cells are those of a run of that seed alone
    assert all((both[(1, p, q)] == alone[(0, p, q)]).all() for p in PREDICTORS for q in POLICIES)
    return tr, cfg, run, n_sink, fx, capped[0]


def test_every_cell(case):
    tr, cfg, run, n_sink, fx, _ = case
    assert set(fx) == {(p, q) for p in PREDICTORS for q in POLICIES}


def test_resv_under_its_own_policy_is_resv(case):
    """ReSV's clusters under WiCSum at Th_r 0.3 (float, exact) are the golden model's float
    run on the integer run's clusters, token for token."""
    tr, cfg, run, n_sink, fx, capped = case
    ref = run_resv(tr, None, cfg.replace(numerics="float", wicsum="exact"), [cfg.th_r],
                   partition=run.cluster_of).masks[cfg.th_r]
    assert (fx[("resv", "wicsum")] == ref).all()
    # the capped clusters likewise: the float run on them; no cluster past the cap
    ref = run_resv(tr, None, cfg.replace(numerics="float", wicsum="exact"), [cfg.th_r],
                   partition=capped).masks[cfg.th_r]
    assert (fx[("resv_cap", "wicsum")] == ref).all()
    largest = max(np.unique(c[c >= 0], return_counts=True)[1].max()      # ids per layer, group
                  for c in capped.reshape(-1, capped.shape[-1]))
    assert largest == CAP
    assert not (fx[("resv_cap", "wicsum")] == fx[("resv", "wicsum")]).all()


def test_spread_term(case):
    """resv_spread's scores are resv's plus, per cluster and row, half the squared query norm
    times the squared scale times the members' mean squared distance from their mean key per
    dimension (its members: the past ones and, in the cluster-first order, the step's own),
    computed here from the trace directly for every (layer, step, KV head)."""
    tr, cfg, run, n_sink, fx, _ = case
    hpg = tr.n_kv_heads // cfg.hash_groups
    ctx = _Context(tr, n_sink, run.cluster_of, hpg, order=cfg.order)
    b, G, d = tr.step_bounds(), tr.n_q_heads // tr.n_kv_heads, tr.head_dim
    checked = 0
    for l in range(tr.n_layers):
        for s in range(2, tr.n_steps):
            for h in range(tr.n_kv_heads):
                units, base = unit_scores("resv", ctx, l, s, h)
                units2, sc = unit_scores("resv_spread", ctx, l, s, h)
                assert all((u == v).all() for u, v in zip(units, units2))
                q = tr.q[l, h * G:(h + 1) * G, b[s]:b[s + 1]].reshape(-1, d).astype(float)
                step_of = run.cluster_of[l, h // hpg, b[s]:b[s + 1]]
                for j, u in enumerate(units):
                    cid = run.cluster_of[l, h // hpg, u[0]]
                    own = np.arange(b[s], b[s + 1])[step_of == cid]
                    k = tr.k[l, h, np.concatenate([u, own]) if cfg.order == "cluster_first"
                             else u].astype(float)
                    var = ((k - k.mean(axis=0)) ** 2).sum() / len(k) / d
                    want = base[:, j] + 0.5 * (q * q).sum(axis=1) / d * var
                    assert np.allclose(sc[:, j], want, rtol=1e-9, atol=1e-9)
                    checked += len(u) > 1
    assert checked > 10


def test_count_and_fraction_budgets(case):
    """Count-matched: at least ReSV's count at every (layer, step, KV head), over it by less
    than one unit (a page is 16 tokens, a step's tokens, a cluster its members); fraction:
    exactly the budget of ReSV's ratio in the step's stage for token predictors."""
    tr, cfg, run, n_sink, fx, _ = case
    resv = run.masks[cfg.th_r]
    b, stage = tr.step_bounds(), tr.step_stage()
    ratio = stage_ratios(tr, n_sink, resv)
    assert 0 < ratio["frame"] < 1
    for s in range(1, tr.n_steps):
        lo = int(b[s])
        if lo <= n_sink:
            continue
        want = resv[:, s, :, n_sink:lo].sum(axis=-1)
        for p in PREDICTORS:
            got = fx[(p, "count")][:, s, :, n_sink:lo].sum(axis=-1)
            assert (got >= want).all(), (p, s)
            if p in ("tokens", "infinigen"):
                assert (got == want).all(), (p, s)
                frac = fx[(p, "fraction")][:, s, :, n_sink:lo].sum(axis=-1)
                assert (frac == baselines.budget(ratio[stage[s]], lo - n_sink)).all()
    assert (fx[("resv", "count")] == resv).sum() > 0


def test_policies_hand_case():
    """Three units of 1, 2 and 4 tokens; two rows. Ranked by mean probability: unit 2, 0, 1.
    WiCSum at 0.3 takes, per row, the heaviest units until their weighted sizes pass 0.3 of
    the row's total: row 0 unit 2 alone, row 1 unit 0 alone; the union. Ranked by the mean
    of the rows' probabilities (0.51, 0.0002, 0.49): unit 0, 2, 1."""
    units = [np.array([10]), np.array([11, 12]), np.array([13, 14, 15, 16])]
    sc = np.array([[0.0, -5.0, 3.0], [4.0, -5.0, 0.0]])
    take = lambda q, c=0, n=7: sorted(select(q, units, sc, available=n, count=c,
                                             fraction=0.3).tolist())
    assert take("count", 1) == [10]                              # the first ranked unit
    assert take("count", 2) == [10, 13, 14, 15, 16]             # whole units past the count
    assert take("fraction", n=10) == [10, 13, 14, 15, 16]       # budget(0.3, 10) = 3
    assert take("fraction", n=20) == [10, 11, 12, 13, 14, 15, 16]  # 6: past units 0 and 2
    assert take("wicsum") == [10, 13, 14, 15, 16]
    assert select("count", [], np.zeros((1, 0)), available=0, count=3).size == 0
