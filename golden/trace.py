"""KV traces: the shared ``.npz`` format, int8 quantisation, and a synthetic stream generator.

A :class:`Trace` holds, for ``L`` layers and ``T`` tokens, post-RoPE queries ``q [L, Hq, T, d]``,
post- and pre-RoPE keys ``k``/``k_pre [L, Hkv, T, d]``, values ``v [L, Hkv, T, d]`` and per-token
labels: the streaming ``step`` (non-decreasing), ``kind`` (0 text, 1 visual), ``frame``,
``patch`` and the RoPE position ``pos`` (``arange(T)`` when the file has none; a trace cut down
from a longer one keeps its tokens' original positions).

Quantisation is symmetric int8 with one scale per tensor per layer:
``scale = max|x| / 127`` and ``x_q = clip(round_half_away(x / scale), -127, 127)``. The scales
travel with the quantised trace so the host-side arithmetic (α of D7) can be reproduced.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["Trace", "TraceError", "QuantTrace", "load_trace", "save_trace", "quantise",
           "synthetic_trace", "rope", "cut_trace"]

ROPE_THETA_DEFAULT = 100000.0


class TraceError(ValueError):
    """A trace file or array does not follow the trace format."""


@dataclass
class Trace:
    name: str
    q: np.ndarray
    k: np.ndarray
    k_pre: np.ndarray
    v: np.ndarray
    step: np.ndarray
    kind: np.ndarray
    frame: np.ndarray
    patch: np.ndarray
    pos: np.ndarray
    layers: np.ndarray
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        self.validate()

    @property
    def n_layers(self) -> int:
        return self.k.shape[0]

    @property
    def n_q_heads(self) -> int:
        return self.q.shape[1]

    @property
    def n_kv_heads(self) -> int:
        return self.k.shape[1]

    @property
    def head_dim(self) -> int:
        return self.k.shape[3]

    @property
    def n_tokens(self) -> int:
        return self.k.shape[2]

    @property
    def n_steps(self) -> int:
        return int(self.step[-1]) + 1 if self.n_tokens else 0

    def step_bounds(self) -> np.ndarray:
        """``bounds[s]:bounds[s+1]`` are the tokens of step ``s``."""
        return np.searchsorted(self.step, np.arange(self.n_steps + 1), side="left")

    def step_stage(self) -> list[str]:
        """``frame`` for a step holding a visual token, else ``text``."""
        b = self.step_bounds()
        return ["frame" if (self.kind[b[s]:b[s + 1]] == 1).any() else "text"
                for s in range(self.n_steps)]

    def geometry(self) -> dict:
        return dict(n_layers=self.n_layers, n_q_heads=self.n_q_heads,
                    n_kv_heads=self.n_kv_heads, head_dim=self.head_dim)

    def validate(self):
        for name in ("q", "k", "k_pre", "v"):
            a = getattr(self, name)
            if not isinstance(a, np.ndarray) or a.ndim != 4:
                raise TraceError(f"array {name!r} must have 4 dimensions [L, H, T, d], "
                                 f"not shape {getattr(a, 'shape', None)}")
            if a.dtype.kind != "f":
                raise TraceError(f"array {name!r} must be floating point, not {a.dtype}")
            if not np.isfinite(a).all():
                bad = int((~np.isfinite(a)).sum())
                raise TraceError(f"array {name!r} holds {bad} NaN or infinite value(s)")
        L, Hkv, T, d = self.k.shape
        for name in ("k_pre", "v"):
            if getattr(self, name).shape != self.k.shape:
                raise TraceError(f"array {name!r} must have the shape of 'k' {self.k.shape}, "
                                 f"not {getattr(self, name).shape}")
        if self.q.shape[0] != L or self.q.shape[2] != T or self.q.shape[3] != d:
            raise TraceError(f"array 'q' must have shape [{L}, Hq, {T}, {d}], not {self.q.shape}")
        if self.q.shape[1] % Hkv:
            raise TraceError(f"array 'q' has {self.q.shape[1]} heads, not a multiple of the "
                             f"{Hkv} KV heads")
        for name, kinds in (("step", "iu"), ("kind", "iu"), ("frame", "iu"), ("patch", "iu"),
                            ("pos", "iu")):
            a = getattr(self, name)
            if not isinstance(a, np.ndarray) or a.shape != (T,):
                raise TraceError(f"array {name!r} must have shape ({T},), "
                                 f"not {getattr(a, 'shape', None)}")
            if a.dtype.kind not in kinds:
                raise TraceError(f"array {name!r} must hold integers, not {a.dtype}")
        if T and self.step[0] != 0:
            raise TraceError(f"array 'step' must start at 0, not {int(self.step[0])}")
        if T and (np.diff(self.step) < 0).any():
            i = int(np.flatnonzero(np.diff(self.step) < 0)[0])
            raise TraceError(f"array 'step' must be non-decreasing; it falls from "
                             f"{int(self.step[i])} to {int(self.step[i + 1])} at token {i + 1}")
        if T and (np.diff(self.step) > 1).any():
            i = int(np.flatnonzero(np.diff(self.step) > 1)[0])
            raise TraceError(f"array 'step' skips from {int(self.step[i])} to "
                             f"{int(self.step[i + 1])} at token {i + 1}")
        if not np.isin(self.kind, (0, 1)).all():
            raise TraceError("array 'kind' must hold only 0 (text) and 1 (visual)")
        if self.layers.shape != (L,):
            raise TraceError(f"array 'layers' must have shape ({L},), not {self.layers.shape}")


_REQUIRED = ("q", "k", "k_pre", "v", "layers", "step", "kind", "frame", "patch")


def load_trace(path) -> Trace:
    """Load a trace ``.npz`` of the shared format (see the traces' README)."""
    path = Path(path)
    if not path.exists():
        raise TraceError(f"no trace file at {path}")
    try:
        z = np.load(path, allow_pickle=False)
    except Exception as e:  # a truncated or foreign file
        raise TraceError(f"{path} is not a readable .npz file: {e}") from None
    with z:
        missing = [n for n in _REQUIRED if n not in z.files]
        if missing:
            raise TraceError(f"{path.name} lacks the array(s) {', '.join(map(repr, missing))}")
        arrays = {n: z[n] for n in _REQUIRED}
        pos = z["pos"] if "pos" in z.files else np.arange(arrays["k"].shape[2], dtype=np.int64)
        meta = json.loads(str(z["meta"])) if "meta" in z.files else {}
    return Trace(name=meta.get("trace", path.stem), pos=pos, meta=meta, **arrays)


def save_trace(trace: Trace, path, compressed: bool = True):
    save = np.savez_compressed if compressed else np.savez
    meta = dict(trace.meta, trace=trace.name)
    save(path, q=trace.q, k=trace.k, k_pre=trace.k_pre, v=trace.v, layers=trace.layers,
         step=trace.step, kind=trace.kind, frame=trace.frame, patch=trace.patch, pos=trace.pos,
         meta=np.array(json.dumps(meta)))


def cut_trace(trace: Trace, steps, layers, name: str, tokens_per_step: int | None = None
              ) -> Trace:
    """Keep the listed steps (renumbered 0..) and layer slots; tokens keep their positions.
    ``tokens_per_step``: of each kept step only its first that many tokens (a crop: the
    first patches of a frame, the start of a text)."""
    steps = list(steps)
    keep = np.isin(trace.step, steps)
    if tokens_per_step is not None:
        first = np.searchsorted(trace.step, trace.step)     # each token's step's first
        keep &= np.arange(trace.n_tokens) - first < tokens_per_step
    renum = np.zeros(trace.n_steps, dtype=np.int32)
    renum[steps] = np.arange(len(steps))
    li = list(layers)
    sub = lambda a: np.ascontiguousarray(a[li][:, :, keep])
    meta = dict(trace.meta, cut_from=trace.name, steps_kept=steps,
                layers_kept=[int(trace.layers[i]) for i in li])
    if tokens_per_step is not None:
        meta["tokens_per_step"] = tokens_per_step
    return Trace(name=name, q=sub(trace.q), k=sub(trace.k), k_pre=sub(trace.k_pre),
                 v=sub(trace.v), step=renum[trace.step[keep]], kind=trace.kind[keep],
                 frame=trace.frame[keep], patch=trace.patch[keep], pos=trace.pos[keep],
                 layers=trace.layers[li], meta=meta)


# --- int8 quantisation ---------------------------------------------------------------------

def round_half_away(x: np.ndarray) -> np.ndarray:
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def quantise_tensor(x: np.ndarray, axis=(1, 2, 3)):
    """Symmetric int8 per layer: returns ``(x_q int8, scale float64 [L])``."""
    x = x.astype(np.float64)
    amax = np.abs(x).max(axis=axis)
    scale = np.where(amax > 0, amax / 127.0, 1.0)
    xq = np.clip(round_half_away(x / scale[:, None, None, None]), -127, 127).astype(np.int8)
    return xq, scale


@dataclass
class QuantTrace:
    """The int8 tensors the host writes to device memory, with their per-layer scales."""
    q: np.ndarray
    k: np.ndarray
    k_pre: np.ndarray
    v: np.ndarray
    scale_q: np.ndarray
    scale_k: np.ndarray
    scale_k_pre: np.ndarray
    scale_v: np.ndarray


def quantise(trace: Trace) -> QuantTrace:
    out = {}
    for name in ("q", "k", "k_pre", "v"):
        out[name], out["scale_" + name] = quantise_tensor(getattr(trace, name))
    return QuantTrace(**out)


# --- RoPE and the synthetic stream ----------------------------------------------------------

def rope(x: np.ndarray, pos: np.ndarray, theta: float = ROPE_THETA_DEFAULT) -> np.ndarray:
    """Llama rotate_half RoPE over the last axis; ``x [..., T, d]``, ``pos [T]``."""
    d = x.shape[-1]
    half = d // 2
    inv = theta ** (-np.arange(half) * 2.0 / d)
    ang = pos[:, None].astype(np.float64) * inv[None, :]
    cos = np.concatenate([np.cos(ang)] * 2, axis=-1)
    sin = np.concatenate([np.sin(ang)] * 2, axis=-1)
    rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rot * sin


def synthetic_trace(*, seed: int = 0, n_layers: int = 2, n_q_heads: int = 4,
                    n_kv_heads: int = 2, head_dim: int = 32, n_frames: int = 8,
                    tokens_per_frame: int = 16, prefix_tokens: int = 8,
                    header_tokens: int = 2, question_tokens: int = 6,
                    temporal: float = 0.9, spatial: float = 0.3,
                    cuts: tuple = (), key_offset: float = 1.0) -> Trace:
    """A seeded streaming trace with controllable redundancy.

    ``temporal`` in [0, 1]: correlation between patch p of frame f and of frame f-1.
    ``spatial`` in [0, 1]: share of a patch's content taken from its left neighbour.
    ``cuts``: frame numbers at which the scene changes (no temporal correlation there).
    ``key_offset``: size of a direction shared by all keys (real keys have one; see D1).
    Layout as in the real traces: step 0 the prefix, one step per frame (a text header, the
    visual tokens, one closing text token), a final question step.
    """
    if not 0.0 <= temporal <= 1.0:
        raise ValueError(f"temporal must be from 0 to 1, not {temporal!r}")
    if not 0.0 <= spatial <= 1.0:
        raise ValueError(f"spatial must be from 0 to 1, not {spatial!r}")
    if n_q_heads % n_kv_heads:
        raise ValueError(f"n_q_heads must be a multiple of n_kv_heads, not {n_q_heads!r}")
    rng = np.random.default_rng(seed)
    feat = 3 * head_dim
    step, kind, frame, patch = [], [], [], []
    xs = []

    def text(n, s):
        for _ in range(n):
            xs.append(rng.standard_normal(feat))
            step.append(s), kind.append(0), frame.append(-1), patch.append(-1)

    text(prefix_tokens, 0)
    prev = None
    for f in range(n_frames):
        text(header_tokens, f + 1)
        fresh = rng.standard_normal((tokens_per_frame, feat))
        for p in range(1, tokens_per_frame):
            fresh[p] = np.sqrt(1 - spatial ** 2) * fresh[p] + spatial * fresh[p - 1]
        if prev is None or f in cuts:
            cur = fresh
        else:
            cur = temporal * prev + np.sqrt(1 - temporal ** 2) * fresh
        prev = cur
        for p in range(tokens_per_frame):
            xs.append(cur[p])
            step.append(f + 1), kind.append(1), frame.append(f), patch.append(p)
        text(1, f + 1)
    text(question_tokens, n_frames + 1)
    X = np.stack(xs)                                           # [T, feat]
    T = X.shape[0]
    pos = np.arange(T)
    Wk = rng.standard_normal((n_layers, n_kv_heads, feat, head_dim)) / np.sqrt(feat)
    Wv = rng.standard_normal((n_layers, n_kv_heads, feat, head_dim)) / np.sqrt(feat)
    Wq = rng.standard_normal((n_layers, n_q_heads, feat, head_dim)) / np.sqrt(feat)
    bias = key_offset * rng.standard_normal((n_layers, n_kv_heads, 1, head_dim))
    k_pre = np.einsum("tf,lhfd->lhtd", X, Wk) + bias
    v = np.einsum("tf,lhfd->lhtd", X, Wv)
    q = rope(np.einsum("tf,lhfd->lhtd", X, Wq), pos)
    k = rope(k_pre, pos)
    f32 = lambda a: a.astype(np.float32)
    return Trace(name=f"synthetic_s{seed}", q=f32(q), k=f32(k), k_pre=f32(k_pre), v=f32(v),
                 step=np.array(step, np.int32), kind=np.array(kind, np.int8),
                 frame=np.array(frame, np.int32), patch=np.array(patch, np.int32),
                 pos=pos.astype(np.int64), layers=np.arange(n_layers, dtype=np.int16),
                 meta=dict(synthetic=True, seed=seed, temporal=temporal, spatial=spatial,
                           cuts=list(cuts)))
