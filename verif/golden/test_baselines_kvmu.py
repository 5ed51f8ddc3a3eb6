import numpy as np
import pytest

from golden import baselines
from golden.kvmu import NEVER, fetch_cost, simulate_layout
from golden.trace import synthetic_trace


@pytest.fixture(scope="module")
def tr():
    return synthetic_trace(seed=21, n_frames=5, tokens_per_frame=12)


def test_full_and_window(tr):
    b = tr.step_bounds()
    f = baselines.full(tr, 8)
    w = baselines.window(tr, 8, 10)
    for s in range(tr.n_steps):
        assert f[:, s, :, 8:b[s]].all() and not f[:, s, :, :8].any() and not f[:, s, :, b[s]:].any()
        want = np.zeros(tr.n_tokens, bool)
        want[max(8, b[s] - 10):b[s]] = True
        assert (w[:, s] == want).all()


def test_topk_budget(tr):
    b = tr.step_bounds()
    out = baselines.topk(tr, 8, [5, 1000])
    for s in range(1, tr.n_steps):
        assert (out[5][:, s].sum(-1) == min(5, b[s] - 8)).all()
        assert (out[1000][:, s].sum(-1) == b[s] - 8).all()
    small = out[5]
    assert not (small & ~out[1000]).any()


def test_rekv_takes_whole_steps(tr):
    b = tr.step_bounds()
    out = baselines.rekv(tr, 8, [2])[2]
    for l in range(tr.n_layers):
        for s in range(1, tr.n_steps):
            m = out[l, s, 0]
            assert (out[l, s] == m).all()                          # shared by all heads
            taken = [u for u in range(s) if m[max(b[u], 8):b[u + 1]].any()]
            assert len(taken) == min(2, len([u for u in range(s) if b[u + 1] > 8]))
            for u in taken:
                assert m[max(b[u], 8):b[u + 1]].all()


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
