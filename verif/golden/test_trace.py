import json

import numpy as np
import pytest

from golden.trace import (TraceError, cut_trace, load_trace, quantise, rope, save_trace,
                          synthetic_trace)

from verif.lib.traces import shared_traces


def _write(tmp_path, **over):
    tr = synthetic_trace(seed=1, n_frames=2)
    arrays = dict(q=tr.q, k=tr.k, k_pre=tr.k_pre, v=tr.v, layers=tr.layers, step=tr.step,
                  kind=tr.kind, frame=tr.frame, patch=tr.patch, meta=np.array(json.dumps({})))
    arrays.update(over)
    arrays = {k: v for k, v in arrays.items() if v is not None}
    p = tmp_path / "t.npz"
    np.savez(p, **arrays)
    return p, tr


def test_bundled_trace(bundled):
    assert bundled.geometry() == dict(n_layers=3, n_q_heads=9, n_kv_heads=3, head_dim=64)
    assert bundled.n_steps == 14 and bundled.n_tokens == 950
    assert list(bundled.layers) == [4, 16, 29]
    st = bundled.step_stage()
    assert st[0] == "text" and st[-1] == "text" and set(st[1:-1]) == {"frame"}
    # tokens keep their original positions: k is still RoPE(k_pre) at pos
    k = rope(bundled.k_pre.astype(np.float64), bundled.pos)
    assert np.abs(k - bundled.k).max() < 0.05
    assert bundled.pos[-1] > bundled.n_tokens      # the cut removed frames 12-15


@pytest.mark.parametrize("path", shared_traces(), ids=lambda p: p.name)
def test_shared_traces_load(path):
    tr = load_trace(path)
    assert tr.n_kv_heads == 3 and tr.head_dim == 64
    assert (tr.kind[tr.step == 0] == 0).all()


def test_missing_file(tmp_path):
    with pytest.raises(TraceError, match="no trace file at"):
        load_trace(tmp_path / "nope.npz")


def test_not_npz(tmp_path):
    p = tmp_path / "bad.npz"
    p.write_bytes(b"hello")
    with pytest.raises(TraceError, match="is not a readable .npz file"):
        load_trace(p)


def test_missing_array(tmp_path):
    p, _ = _write(tmp_path, v=None)
    with pytest.raises(TraceError, match="lacks the array.*'v'"):
        load_trace(p)


def test_wrong_shape(tmp_path):
    tr = synthetic_trace(seed=1, n_frames=2)
    p, _ = _write(tmp_path, v=tr.v[:, :, :-1])
    with pytest.raises(TraceError, match=r"array 'v' must have the shape of 'k'"):
        load_trace(p)
    p, _ = _write(tmp_path, step=tr.step[:-1])
    with pytest.raises(TraceError, match=r"array 'step' must have shape"):
        load_trace(p)


def test_wrong_dtype(tmp_path):
    tr = synthetic_trace(seed=1, n_frames=2)
    p, _ = _write(tmp_path, k=tr.k.astype(np.int16))
    with pytest.raises(TraceError, match="array 'k' must be floating point, not int16"):
        load_trace(p)
    p, _ = _write(tmp_path, step=tr.step.astype(np.float32))
    with pytest.raises(TraceError, match="array 'step' must hold integers"):
        load_trace(p)


def test_nan(tmp_path):
    tr = synthetic_trace(seed=1, n_frames=2)
    q = tr.q.copy()
    q[0, 0, 3, 1] = np.nan
    p, _ = _write(tmp_path, q=q)
    with pytest.raises(TraceError, match="array 'q' holds 1 NaN or infinite value"):
        load_trace(p)


def test_non_monotone_steps(tmp_path):
    tr = synthetic_trace(seed=1, n_frames=2)
    step = tr.step.copy()
    step[-1] = 0
    p, _ = _write(tmp_path, step=step)
    with pytest.raises(TraceError, match="must be non-decreasing; it falls from 3 to 0"):
        load_trace(p)


def test_save_load_round_trip(tmp_path):
    tr = synthetic_trace(seed=2, n_frames=3)
    save_trace(tr, tmp_path / "x.npz")
    back = load_trace(tmp_path / "x.npz")
    assert back.name == tr.name
    for a in ("q", "k", "k_pre", "v", "step", "pos"):
        np.testing.assert_array_equal(getattr(back, a), getattr(tr, a))


def test_cut_renumbers_steps():
    tr = synthetic_trace(seed=3, n_frames=5)
    c = cut_trace(tr, [0, 1, 2, 6], [1], "cut")
    assert c.n_steps == 4 and c.n_layers == 1
    np.testing.assert_array_equal(np.unique(c.step), [0, 1, 2, 3])
    np.testing.assert_array_equal(c.pos, tr.pos[np.isin(tr.step, [0, 1, 2, 6])])


def test_quantise():
    tr = synthetic_trace(seed=4)
    qt = quantise(tr)
    for name in ("q", "k", "k_pre", "v"):
        x, xq, sc = getattr(tr, name), getattr(qt, name), getattr(qt, "scale_" + name)
        assert xq.dtype == np.int8 and np.abs(xq.astype(int)).max() == 127
        back = xq * sc[:, None, None, None]
        assert np.abs(back - x).max() <= sc.max() / 2 + 1e-6


def _consec_cos(tr):
    vis = tr.kind == 1
    F = int(tr.frame.max()) + 1
    X = tr.k_pre[:, :, vis].astype(np.float64).reshape(tr.n_layers, tr.n_kv_heads, F, -1, tr.head_dim)
    X = X - X.mean(axis=(2, 3), keepdims=True)
    X /= np.linalg.norm(X, axis=-1, keepdims=True)
    return (X[:, :, 1:] * X[:, :, :-1]).sum(-1).mean(axis=(0, 1, 3))


def test_synthetic_redundancy_controls():
    hi = _consec_cos(synthetic_trace(seed=5, temporal=0.95))
    lo = _consec_cos(synthetic_trace(seed=5, temporal=0.2))
    assert hi.mean() > 0.8 > 0.3 > lo.mean()
    cut = _consec_cos(synthetic_trace(seed=5, temporal=0.95, cuts=(4,)))
    assert cut[3] < 0.3 and np.delete(cut, 3).min() > 0.8    # frame 3 -> 4 is the cut
    with pytest.raises(ValueError, match="temporal must be from 0 to 1, not 1.5"):
        synthetic_trace(temporal=1.5)


def test_synthetic_is_seeded():
    a, b = synthetic_trace(seed=9), synthetic_trace(seed=9)
    np.testing.assert_array_equal(a.k, b.k)
    assert not np.array_equal(a.k, synthetic_trace(seed=10).k)
