import dataclasses

import numpy as np
import pytest

from golden import baselines
from golden.kvmu import NEVER, fetch_cost, simulate_layout
from golden.trace import synthetic_trace


@pytest.fixture(scope="module")
def tr():
    return synthetic_trace(seed=21, n_frames=5, tokens_per_frame=12)


def test_budget_rounds_half_up_and_keeps_one():
    assert baselines.budget(0.3, 10) == 3 and baselines.budget(0.25, 10) == 3
    assert baselines.budget(0.01, 10) == 1 and baselines.budget(0.0, 10) == 0
    assert baselines.budget(2.0, 10) == 10 and baselines.budget(0.5, 0) == 0


def test_full_and_window(tr):
    b = tr.step_bounds()
    f = baselines.full(tr, 8)
    w = baselines.window(tr, 8, 0.25)
    for s in range(tr.n_steps):
        assert f[:, s, :, 8:b[s]].all() and not f[:, s, :, :8].any() and not f[:, s, :, b[s]:].any()
        want = np.zeros(tr.n_tokens, bool)
        n = baselines.budget(0.25, b[s] - 8)
        want[b[s] - n:b[s]] = True
        assert (w[:, s] == want).all()


def test_oracle_topk_budget(tr):
    b = tr.step_bounds()
    out = baselines.oracle_topk(tr, 8, [0.1, 1.0])
    for s in range(1, tr.n_steps):
        assert (out[0.1][:, s].sum(-1) == baselines.budget(0.1, b[s] - 8)).all()
        assert (out[1.0][:, s].sum(-1) == b[s] - 8).all()
    assert not (out[0.1] & ~out[1.0]).any()


def test_oracle_topk_hand_case():
    """Two past tokens, one query row: the one with the larger q·k is taken."""
    tr = synthetic_trace(seed=1, n_layers=1, n_q_heads=1, n_kv_heads=1, head_dim=2,
                         n_frames=1, tokens_per_frame=1, prefix_tokens=2, header_tokens=0,
                         question_tokens=1)
    tr.q[...] = 0
    tr.k[...] = 0
    b = tr.step_bounds()                  # steps: prefix (2), frame (1 + newline), question
    s = 2
    lo = int(b[s])
    tr.q[0, 0, lo:] = [1.0, 0.0]
    tr.k[0, 0, 0] = [0.0, 0.0]
    tr.k[0, 0, 1] = [3.0, 0.0]            # token 1 scores 3, token 2 (the frame's) scores 0
    m = baselines.oracle_topk(tr, 1, [0.01])[0.01]
    assert m[0, s, 0, :lo].tolist() == [False, True] + [False] * (lo - 2)


def test_infinigen_hand_case():
    """Half of two dimensions: the prompt makes dimension 1 the one scored, so the token that
    wins on dimension 1 is taken though the exact score (the oracle) prefers another."""
    tr = synthetic_trace(seed=1, n_layers=1, n_q_heads=1, n_kv_heads=1, head_dim=2,
                         n_frames=1, tokens_per_frame=1, prefix_tokens=2, header_tokens=0,
                         question_tokens=1)
    tr.q[...] = 0
    tr.k[...] = 0
    b = tr.step_bounds()
    s = 2
    lo = int(b[s])
    tr.q[0, 0, 0] = [0.1, 1.0]            # the prompt (the one sink): mean|q_d|·mean|k_d|
    tr.k[0, 0, 0] = [0.1, 1.0]            # is 0.01 for d = 0, 1 for d = 1
    tr.q[0, 0, lo:] = [1.0, 0.5]
    tr.k[0, 0, 1] = [3.0, 0.0]            # exact score 3, on dimension 1: 0
    tr.k[0, 0, 2] = [0.0, 2.0]            # exact score 1, on dimension 1: 1
    assert baselines.infinigen_dims(tr, 1, 0, 0, 0.5).tolist() == [1]
    m = baselines.infinigen(tr, 1, [0.01], r_frac=0.5, dense_layers=0, skew=False)[0.01]
    assert m[0, s, 0, :lo].tolist() == [False, False, True] + [False] * (lo - 3)
    o = baselines.oracle_topk(tr, 1, [0.01])[0.01]
    assert o[0, s, 0, :lo].tolist() == [False, True] + [False] * (lo - 2)


def _two_dims(prompt_q, prompt_k, q, keys):
    """One layer, one head, two dimensions: a one-token prompt (the sink), then the past
    ``keys`` and a step whose rows are ``q``; returns (trace, the step, its first token)."""
    tr = synthetic_trace(seed=1, n_layers=1, n_q_heads=1, n_kv_heads=1, head_dim=2,
                         n_frames=1, tokens_per_frame=1, prefix_tokens=2, header_tokens=0,
                         question_tokens=1)
    tr.q[...] = 0
    tr.k[...] = 0
    lo = int(tr.step_bounds()[2])
    tr.q[0, 0, 0], tr.k[0, 0, 0] = prompt_q, prompt_k
    tr.q[0, 0, lo:] = q
    for i, k in enumerate(keys):
        tr.k[0, 0, 1 + i] = k
    return tr, 2, lo


def test_infinigen_skew_and_per_step_hand_cases():
    """Skewing: the prompt's query (1, 1) makes its direction the first turned dimension, so
    one dimension scores exactly and takes the key the exact score prefers (unturned, the
    prompt's dimension 0 wins and takes the other). Per step: the step's own rows pick
    dimension 1 where the prompt picked 0."""
    tr, s, lo = _two_dims([1.0, 1.0], [1.0, 0.9], [1.0, 1.0], [[2.0, 0.0], [0.5, 3.0]])
    A = baselines.skewing(tr, 1, 0, 0)
    assert np.allclose(A.T @ A, np.eye(2)) and np.allclose(abs(A[:, 0]), 2 ** -0.5)
    pick = lambda **kw: baselines.infinigen(tr, 1, [0.01], r_frac=0.5, dense_layers=0,
                                            **kw)[0.01][0, s, 0, 1:3].tolist()
    assert pick(skew=False) == [True, False] and pick(skew=True) == [False, True]
    assert baselines.oracle_topk(tr, 1, [0.01])[0.01][0, s, 0, 1:3].tolist() == [False, True]
    tr, s, lo = _two_dims([1.0, 0.0], [1.0, 0.1], [0.1, 1.0], [[2.0, 0.0], [0.0, 1.0]])
    assert pick(skew=False) == [True, False]
    assert pick(skew=False, per_step=True) == [False, True]


def test_infinigen_adaptive_count():
    """The reference's count: per row the tokens whose speculative logit is within alpha of
    the row's maximum; the budget caps it."""
    tr, s, lo = _two_dims([1.0, 1.0], [1.0, 1.0], [1.0, 1.0],
                          [[4.0, 4.0], [3.9, 4.0], [0.0, 0.0]])
    n = lo - 1
    run = lambda f, a: int(baselines.infinigen(tr, 1, [f], r_frac=1.0, dense_layers=0,
                                               alpha=a)[f][0, s, 0, 1:lo].sum())
    assert run(1.0, 1e-9) == 1                     # the maximum only
    assert run(1.0, 1.0) == 2                      # the two close keys (logits 5.66, 5.59)
    assert run(1.0, 100.0) == n and run(0.3, 100.0) == baselines.budget(0.3, n)


def test_quest_bounds_hand_case():
    """A page's bound is Σ_d max(q_d·min_d, q_d·max_d), never below a member's score."""
    K = np.array([[1.0, -2.0], [3.0, 0.5], [-1.0, 4.0]])
    q = np.array([[2.0, -1.0], [-1.0, 1.0]])
    ub = baselines.quest_bounds(q, K, page=2)
    # page 0 = keys 0, 1: min (1, -2), max (3, 0.5); page 1 = key 2
    assert ub.tolist() == [[2 * 3 + (-1) * (-2), 2 * -1 + (-1) * 4],
                           [(-1) * 1 + 1 * 0.5, (-1) * -1 + 1 * 4]]
    assert (ub[:, :1] >= (q @ K[:2].T).max(axis=1, keepdims=True) - 1e-12).all()


def test_quest_takes_whole_pages(tr):
    b = tr.step_bounds()
    out = baselines.quest(tr, 8, [0.1, 0.5], page=4, dense_layers=0)
    for f, m in out.items():
        for s in range(1, tr.n_steps):
            n = b[s] - 8
            if n <= 0:
                continue
            for l in range(tr.n_layers):
                for h in range(tr.n_kv_heads):
                    sel = m[l, s, h, 8:b[s]]
                    pages = [sel[i:i + 4] for i in range(0, n, 4)]
                    assert all(p.all() or not p.any() for p in pages)     # whole pages
                    got = int(sel.sum())
                    assert got >= baselines.budget(f, n)
                    assert got - baselines.budget(f, n) < 4               # one page at most over


def test_infinigen_dims_and_full_dims_equal_the_oracle(tr):
    dims = baselines.infinigen_dims(tr, 8, 0, 0, 0.25)
    assert len(dims) == tr.head_dim // 4 and (np.diff(dims) > 0).all()
    # with every dimension the speculation is the exact score: the oracle's selection
    full_dims = baselines.infinigen(tr, 8, [0.2], r_frac=1.0, dense_layers=0)[0.2]
    assert (full_dims == baselines.oracle_topk(tr, 8, [0.2])[0.2]).all()


def test_dense_first_layers_as_the_references(tr):
    """Quest keeps the model's first two layers dense, InfiniGen its first (their reference
    code); by the model's layer numbers (a trace holds a subset); the other layers' selection
    unchanged; a dense layer costs nothing to predict."""
    full = baselines.full(tr, 8)
    assert tr.layers.tolist() == [0, 1]
    sparse = baselines.quest(tr, 8, [0.1], page=4, dense_layers=0)[0.1]
    assert (baselines.quest(tr, 8, [0.1], page=4)[0.1] == full).all()
    one = baselines.quest(tr, 8, [0.1], page=4, dense_layers=1)[0.1]
    assert (one[0] == full[0]).all() and (one[1] == sparse[1]).all()
    assert not (sparse[0] == full[0]).all()
    ig, ig0 = (baselines.infinigen(tr, 8, [0.1], dense_layers=n)[0.1] for n in (1, 0))
    assert (ig[0] == full[0]).all() and (ig[1] == ig0[1]).all()
    assert not (ig0[0] == full[0]).all()
    later = dataclasses.replace(tr, layers=np.array([4, 16]))  # past the dense ones
    assert (baselines.quest(later, 8, [0.1], page=4)[0.1] == sparse).all()
    keys = baselines.prediction_keys("quest", tr, 8, page=4, dense_layers=1)
    assert (keys[0] == 0).all() and (keys[1] > 0).any()


def test_rekv_takes_whole_steps(tr):
    b = tr.step_bounds()
    out = baselines.rekv(tr, 8, [0.3])[0.3]
    for l in range(tr.n_layers):
        for s in range(1, tr.n_steps):
            m = out[l, s, 0]
            assert (out[l, s] == m).all()                          # shared by all heads
            taken = [u for u in range(s) if m[max(b[u], 8):b[u + 1]].any()]
            for u in taken:
                assert m[max(b[u], 8):b[u + 1]].all()
            if b[s] > 8:
                assert m.sum() >= baselines.budget(0.3, b[s] - 8)


def test_prediction_keys(tr):
    b = tr.step_bounds()
    s = tr.n_steps - 1
    avail = b[s] - 8
    keys = {m: baselines.prediction_keys(m, tr, 8, page=16, r_frac=0.25)
            for m in ("oracle_topk", "quest", "infinigen", "rekv", "window", "full")}
    assert (keys["oracle_topk"][:, s] == avail).all()
    assert (keys["quest"][:, s] == 2 * -(-avail // 16)).all()
    assert (keys["infinigen"][:, s] == avail * (tr.head_dim // 4) / tr.head_dim).all()
    assert b[1] == 8                                       # step 0 is all sinks:
    assert (keys["rekv"][:, s] == s - 1).all()             # one mean key a past step
    assert not keys["window"].any() and not keys["full"].any()
    cand = np.ones((tr.n_layers, tr.n_steps, tr.n_kv_heads), int)
    assert (baselines.prediction_keys("resv", tr, 8, candidates=cand) == 1).all()
    with pytest.raises(ValueError, match="no prediction cost"):
        baselines.prediction_keys("nothing", tr, 8)


def test_resv_counts_its_candidates(tr):
    from golden.resv import run_resv
    from golden.trace import quantise
    from vrex.config import Config
    cfg = Config.from_preset("paper", **tr.geometry())
    r = run_resv(tr, quantise(tr), cfg)
    rows = []
    run_resv(tr, quantise(tr), cfg, record_rows=rows)
    for row in rows:
        assert r.candidates[row["layer"], row["step"], row["head"]] == len(row["cluster"])
    assert r.candidates[:, 0].sum() == 0
    noclust = run_resv(tr, quantise(tr), cfg, clustering=False)
    b = tr.step_bounds()
    n_sink = r.n_sink
    s = tr.n_steps - 1
    assert (noclust.candidates[:, s] == b[s] - n_sink).all()      # a token is a cluster


def test_layout_hand_case():
    owner = np.array([[[0, 0, 1, 0, 1, 1]]])
    bounds = np.array([0, 3, 6, 6])
    lay = simulate_layout(owner, bounds, block_tokens=2, near_blocks=2, heads_per_group=1,
                          head_dim=4)
    assert lay.block_of[0, 0].tolist() == [0, 0, 1, 2, 1, 3]
    assert lay.far_from.tolist() == [2, 2, NEVER, NEVER]
    masks = np.zeros((1, 3, 1, 6), bool)
    masks[0, 2, 0, [0, 3]] = True
    masks[0, 1, 0, [0, 1, 2]] = True
    cost = fetch_cost(lay, masks, bounds, head_dim=4)
    assert cost["bytes_far"][0, 2, 0] == 8 and cost["bytes_near"][0, 2, 0] == 8
    assert cost["bursts_far"][0, 2, 0] == 1 and cost["bursts_near"][0, 2, 0] == 1
    assert cost["bursts_near"][0, 1, 0] == 2 and cost["bytes_near"][0, 1, 0] == 24
    assert cost["bytes_far"][0, 1].sum() == 0          # blocks 0, 1 move during step 1


def test_layout_never_exceeds_near_capacity():
    rng = np.random.default_rng(0)
    owner = rng.integers(-1, 6, (2, 3, 200))
    bounds = np.array([0, 50, 120, 200])
    lay = simulate_layout(owner, bounds, block_tokens=4, near_blocks=12, heads_per_group=2,
                          head_dim=4)
    k = lay.offloaded()
    assert k > 0
    assert (lay.far_from[:k] != NEVER).all() and (lay.far_from[k:] == NEVER).all()  # oldest first
    assert (lay.n_blocks - k) * 2 <= 12                  # what stays near fits the capacity
    assert (np.diff(lay.far_from[:k]) >= 0).all()
    # every block is full unless it was the last of its owner or moved away
    blk = lay.block_of[lay.block_of >= 0]
    assert np.bincount(blk).max() <= 4


@pytest.mark.parametrize("head_dim, block_tokens, beats, near_base", [
    (4, 2, 256, 0), (24, 5, 2, 4000), (64, 16, 4, 0), (40, 7, 3, 4090)])
def test_fetch_cost_counts_the_bursts_of_every_fetch(head_dim, block_tokens, beats, near_base):
    """The array-counted fetch cost equals the bursts KvMemory.fetch lists, fetch by fetch,
    on geometries whose runs cross 4 KB boundaries and are longer than a burst."""
    rng = np.random.default_rng(head_dim)
    L, G, hpg, T = 2, 2, 2, 300
    owner = rng.integers(-1, 9, (L, G, T))
    bounds = np.array([0, 40, 110, 180, 260, 300])
    lay = simulate_layout(owner, bounds, block_tokens=block_tokens, near_blocks=10,
                          heads_per_group=hpg, head_dim=head_dim, max_burst_beats=beats,
                          near_base=near_base)
    S = len(bounds) - 1
    masks = rng.random((L, S, G * hpg, T)) < 0.4
    masks &= np.broadcast_to(owner[:, None, :, None, :] >= 0,
                             (L, S, G, hpg, T)).reshape(L, S, G * hpg, T)
    cost = fetch_cost(lay, masks, bounds, head_dim)
    assert lay.offloaded() > 0 and cost["bursts_far"].sum() > 0
    for l in range(L):
        for s in range(S):
            for h in range(G * hpg):
                sel = np.flatnonzero(masks[l, s, h, :bounds[s]])
                bursts = lay.memory.fetch(s, l, h, sel)[0] if len(sel) else []
                for tier in ("near", "far"):
                    mine = [b for b in bursts if b.tier == tier]
                    assert cost[f"bytes_{tier}"][l, s, h] == sum(b.length for b in mine)
                    assert cost[f"bursts_{tier}"][l, s, h] == len(mine), (l, s, h, tier)
