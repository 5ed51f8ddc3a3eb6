"""Attention-engine stimulus and expectations: GEMM tiles as the array's input beats and
output rows, and exp-unit inputs, from the golden models (``golden.attn``)."""
from __future__ import annotations

import numpy as np

from golden.attn import gemm_tiles

__all__ = ["tile_beats", "tile_rows", "random_int8"]


def tile_beats(tiles, n: int):
    """The array's input beats for a list of tiles (``golden.attn.gemm_tiles``), a reduction
    shorter than n padded with zero beats (the array's contract)."""
    beats = []
    for _, _, at, bt, _ in tiles:
        K = max(at.shape[1], n)
        for k in range(K):
            a = at[:, k] if k < at.shape[1] else np.zeros(n, np.int64)
            b = bt[:, k] if k < bt.shape[1] else np.zeros(n, np.int64)
            beats.append({"a": [int(x) for x in a], "b": [int(x) for x in b],
                          "first": int(k == 0), "last": int(k == K - 1)})
    return beats


def tile_rows(tiles, n: int):
    """The array's output beats for the tiles: n rows each, ``last`` on row n - 1."""
    return [{"c": [int(x) for x in ct[r]], "row": r, "last": int(r == n - 1)}
            for _, _, _, _, ct in tiles for r in range(n)]


def random_int8(rng, shape, kind="uniform"):
    """int8 matrices: uniform, all -128, all 127, or sparse (mostly zero)."""
    if kind == "min":
        return np.full(shape, -128, np.int64)
    if kind == "max":
        return np.full(shape, 127, np.int64)
    x = rng.integers(-128, 128, shape)
    if kind == "sparse":
        x[rng.random(shape) < 0.8] = 0
    return x


def gemm_case(rng, m, k, l, n, kind="uniform"):
    a, b = random_int8(rng, (m, k), kind), random_int8(rng, (l, k), kind)
    return gemm_tiles(a, b, n)


def trace_hash_case(n_tokens: int, n: int):
    """The bundled trace's layer-0 hash projection as a GEMM (``paper`` preset: post-RoPE keys
    of all KV heads concatenated, against the layer's hyperplanes), its tiles, the golden
    ReSV run's hashes of those tokens and their sink mask. Returns ``(tiles, keys, hp,
    hashes, clustered)``."""
    from golden.numerics import hyperplanes
    from golden.resv import run_resv
    from verif.lib.traces import bundled
    from vrex.config import Config
    tr, qt = bundled()
    cfg = Config.from_preset("paper", **tr.geometry())
    run = run_resv(tr, qt, cfg, [cfg.th_r])
    keys = np.transpose(qt.k[0], (1, 0, 2)).reshape(tr.n_tokens, -1)[:n_tokens]
    hp = hyperplanes(cfg.hp_seed, 0, 0, cfg.n_hp, cfg.hash_dim)
    clustered = run.cluster_of[0, 0, :n_tokens] >= 0
    return gemm_tiles(keys, hp, n), keys, hp, run.hashes[0, 0, :n_tokens], clustered


# --- the engine's commands -------------------------------------------------------------------

def chunks(mat, n: int) -> list[dict]:
    """A matrix's rows as the engine's operand beats: ``ceil(k / n)`` chunks of n int8 a row,
    the last zero-padded."""
    mat = np.asarray(mat, np.int64)
    k = mat.shape[1]
    kc = -(-k // n)
    padded = np.zeros((mat.shape[0], kc * n), np.int64)
    padded[:, :k] = mat
    return [{"data": [int(v) for v in padded[r, c * n:(c + 1) * n]]}
            for r in range(mat.shape[0]) for c in range(kc)]


def empty_ports():
    return {"cmd": [], "a": [], "b": [], "bias": []}


def gemm_command(ports: dict, a, b, n: int) -> list[dict]:
    """Append a GEMM command's beats to ``ports``; return its ``o_gemm`` beats."""
    from golden.attn import gemm_rows
    a, b = np.asarray(a), np.asarray(b)
    ports["cmd"].append({"kind": 0, "m": a.shape[0], "k": a.shape[1], "l": b.shape[0]})
    ports["b"] += chunks(b, n)
    ports["a"] += chunks(a, n)
    return gemm_rows(a, b, n)


def hash_command(ports: dict, keys, hp, bias, n: int, layer: int = 0, step: int = 0):
    """Append a hash command's beats to ``ports``; return its ``o_hash`` beats."""
    from golden.attn import hash_words
    keys, hp = np.asarray(keys), np.asarray(hp)
    n_hp = hp.shape[0]
    ports["cmd"].append({"kind": 1, "m": keys.shape[0], "k": keys.shape[1], "l": n_hp,
                         "layer": layer, "step": step})
    ports["bias"] += vector_beats(np.zeros(n_hp, np.int64) if bias is None else bias, n)
    ports["b"] += chunks(hp, n)
    ports["a"] += chunks(keys, n)
    words = hash_words(keys, hp, None if bias is None else np.asarray(bias, np.int64))
    T = len(words)
    return [{"hash": int(w), "layer": layer, "step": step, "first": int(t == 0),
             "last": int(t == T - 1)} for t, w in enumerate(words)]


def bad_command(ports: dict, kind, m, k, l, n: int, causal: int = 0, extra=None):
    """Append a command the engine must refuse, with the operand beats its sizes imply
    (``extra``: more command fields)."""
    kc = -(-k // n)
    ports["cmd"].append({"kind": kind, "m": m, "k": k, "l": l, "causal": causal,
                         **(extra or {})})
    if kind in (1, 2):
        ports["bias"] += [{"data": [0] * n}] * (-(-l // n))
    # light attention's B is K and V, but K alone in an unpaired maximum's pass
    x = extra or {}
    k_only = x.get("part") == 1 and not x.get("pairs")
    ports["b"] += [{"data": [1] * n}] * (l * kc * (2 if kind == 3 and not k_only else 1))
    ports["a"] += [{"data": [1] * n}] * (m * kc)


def trace_hash_commands(preset: str, cfg, steps=None):
    """The bundled trace's hash work as engine commands, as the core will issue them: per
    step (outer) and layer (inner, up to ``cfg.contexts``), the step's non-sink tokens'
    hash-input keys (all KV heads concatenated, D1) against the layer's hyperplanes, less the
    golden run's centring bias (``tuned``; none for ``paper``). Returns ``(ports, o_hash
    beats, tokens for the HCU, run_cfg)``; the expected words are the golden ReSV run's
    hashes, not recomputed here."""
    from golden.hcu import Token
    from golden.numerics import hyperplanes
    from golden.resv import run_resv
    from verif.lib.traces import bundled
    from vrex.config import Config
    tr, qt = bundled()
    run_cfg = Config.from_preset(preset, **tr.geometry(), n_hp=cfg.n_hp)
    run = run_resv(tr, qt, run_cfg, [run_cfg.th_r])
    src = qt.k_pre if run_cfg.hash_input == "pre_rope" else qt.k
    bounds = tr.step_bounds()
    ports, want, tokens = empty_ports(), [], []
    n = cfg.attn_n
    for s in range(tr.n_steps) if steps is None else steps:
        a0, b = max(bounds[s], run.n_sink), bounds[s + 1]
        if a0 >= b:
            continue
        for layer in range(min(tr.n_layers, cfg.contexts)):
            keys = np.transpose(src[layer][:, a0:b], (1, 0, 2)).reshape(b - a0, -1)
            hp = hyperplanes(run_cfg.hp_seed, layer, 0, run_cfg.n_hp, run_cfg.hash_dim)
            bias = run.biases[layer].get((0, s))
            hash_command(ports, keys, hp, bias, n, layer=layer, step=s)
            words = run.hashes[layer, 0, a0:b]
            want += [{"hash": int(w), "layer": layer, "step": s, "first": int(t == 0),
                      "last": int(t == b - a0 - 1)} for t, w in enumerate(words)]
            tokens += [Token(int(w), layer, s, int(t == 0), int(t == b - a0 - 1))
                       for t, w in enumerate(words)]
    return ports, want, tokens, run_cfg


def score_command(ports: dict, queries, reps, counts, unit, cfg) -> list[dict]:
    """Append a score command (one KV head's query rows against its candidates'
    representative keys and member counts) to ``ports``; return its ``o_score`` beats, the
    WTU's input beats of ``golden.attn.score_rows``."""
    from golden.attn import exp_registers, score_rows
    from verif.wtu.model import all_beats
    queries, reps = np.asarray(queries), np.asarray(reps)
    counts = np.asarray(counts, np.int64)
    _score_operands(ports, queries, reps, counts, exp_registers(unit), cfg.attn_n)
    return all_beats([score_rows(queries, reps, counts, unit, cfg.score_bits)], cfg.wtu_lanes)


def vector_beats(v, n: int) -> list[dict]:
    """A column vector (biases, counts) as ``bias`` beats of n values, the last zero-padded."""
    v = np.asarray(v, np.int64)
    v = np.concatenate([v, np.zeros(-len(v) % n, np.int64)])
    return [{"data": [int(x) for x in v[i:i + n]]} for i in range(0, len(v), n)]


def _score_operands(ports: dict, queries, reps, counts, regs: dict, n: int):
    """A score command and its operand beats: counts on ``bias``, keys on ``b``, queries on
    ``a``."""
    ports["cmd"].append({"kind": 2, "m": queries.shape[0], "k": queries.shape[1],
                         "l": reps.shape[0], **regs})
    ports["bias"] += vector_beats(counts, n)
    ports["b"] += chunks(reps, n)
    ports["a"] += chunks(queries, n)


def trace_score_commands(preset: str, cfg, n_groups: int, max_rows: int | None = None):
    """The bundled trace's cluster scoring as engine commands, one per (layer, step, KV head)
    group of the golden ReSV run (``n_groups`` spread over the run, rows that fit the WTU):
    the group's query rows (the first ``max_rows`` of them, if given) against its candidates'
    representative keys; groups with more candidates than ``cfg.attn_b_rows`` are left out.
    The expected beats are the golden run's own scores, weights and counts (``record_rows``),
    not recomputed. Returns ``(ports, o_score beats, heads for the WTU, run_cfg)``."""
    from golden.attn import exp_registers
    from verif.lib.traces import bundled
    from verif.wtu.model import all_beats, trace_rows
    tr, qt = bundled()
    run_cfg, _, groups, heads = trace_rows(tr, qt, preset, cfg, n_groups=n_groups)
    keep = [k for k, g in enumerate(groups) if len(g["count"]) <= cfg.attn_b_rows]
    groups = [groups[k] for k in keep]
    heads = [heads[k][:max_rows] for k in keep]
    ports = empty_ports()
    n = cfg.attn_n
    for g in groups:
        _score_operands(ports, g["query"][:max_rows], g["rep"], g["count"],
                        exp_registers(g["exp"]), n)
    return ports, all_beats(heads, cfg.wtu_lanes), heads, run_cfg


def kv_beats(k, v, n: int, pairs: bool) -> list[dict]:
    """Light attention's ``b`` beats: K's rows then V's, or per token its K row then its V
    row (``pairs``); K's alone when ``v`` is None."""
    if v is None:
        return chunks(k, n)
    if pairs:
        return [b for kr, vr in zip(k, v) for b in chunks(kr[None], n) + chunks(vr[None], n)]
    return chunks(k, n) + chunks(v, n)


def attend_command(ports: dict, q, k, v, causal: int, unit, cfg, pairs: bool = False
                   ) -> list[dict]:
    """Append a light-attention command (one KV head's query rows over ``l`` tokens whose last
    ``causal`` are the step's own) to ``ports``; return its ``o_attn`` beats
    (``golden.attn.attend``). ``pairs``: K and V rows interleaved per token on ``b``."""
    from golden.attn import attend, attend_rows, exp_registers
    n = cfg.attn_n
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    ports["cmd"].append({"kind": 3, "m": q.shape[0], "k": q.shape[1], "l": k.shape[0],
                         "causal": causal, "pairs": int(pairs), **exp_registers(unit)})
    ports["b"] += kv_beats(k, v, n, pairs)
    ports["a"] += chunks(q, n)
    return attend_rows(attend(q, k, v, causal, unit, cfg.out_frac_bits, cfg.score_bits), n)


def trace_attend_commands(preset: str, cfg, n_groups: int, max_rows: int | None = None,
                          long: bool = False):
    """The bundled trace's light attention as engine commands, as the core will issue them:
    per (layer, step, KV head) group of the golden ReSV run (``n_groups`` spread over the run,
    those whose attended set fits ``cfg.attn_b_rows``; with ``long``, those whose set does
    not, as chunked commands of ``attn_b_rows`` tokens), the group's query rows (the first
    ``max_rows``, if given) over the sink tokens, the head's selected past tokens and the
    step's own tokens (causal), with the layer's exp unit. Returns ``(ports, o_attn beats,
    groups)``; the expected rows are ``golden.numerics.attention_int`` over that set."""
    from golden.attn import chunk_lengths
    from golden.numerics import ExpUnit
    from golden.resv import run_resv, sink_count
    from verif.lib.traces import bundled
    from vrex.config import Config
    tr, qt = bundled()
    run_cfg = Config.from_preset(preset, **tr.geometry())
    run = run_resv(tr, qt, run_cfg, [run_cfg.th_r])
    mask = run.masks[run_cfg.th_r]
    n_sink = sink_count(tr, run_cfg)
    bounds = tr.step_bounds()
    L, Hkv, _, d = tr.k.shape
    G = tr.n_q_heads // Hkv
    cands = []
    for layer in range(L):
        for s in range(1, tr.n_steps):
            a, b = int(bounds[s]), int(bounds[s + 1])
            if a <= n_sink:
                continue
            for h in range(Hkv):
                col = np.ones(b, bool)
                col[n_sink:a] = mask[layer, s, h, n_sink:a]
                if (col.sum() > cfg.attn_b_rows) == long:
                    cands.append((layer, s, h, a, b, col))
    if not cands:
        raise ValueError(f"no attended set of the bundled trace {'exceeds' if long else 'fits'}"
                         f" attn_b_rows ({cfg.attn_b_rows})")
    picks = [cands[i] for i in np.linspace(0, len(cands) - 1, n_groups).astype(int)]
    ports, want = empty_ports(), []
    for layer, s, h, a, b, col in picks:
        unit = ExpUnit.for_config(float(qt.scale_q[layer] * qt.scale_k[layer]) / np.sqrt(d),
                                  run_cfg)
        q = qt.q[layer, h * G:(h + 1) * G, a:b].reshape(-1, d)[:max_rows]
        k, v = qt.k[layer, h, :b][col], qt.v[layer, h, :b][col]
        if long:
            want += attend_chunked_command(ports, q, k, v, b - a, unit, cfg,
                                           chunk_lengths(len(k), cfg.attn_b_rows), pairs=True)
        else:
            want += attend_command(ports, q, k, v, b - a, unit, cfg)
    return ports, want, picks


def attend_chunked_command(ports: dict, q, k, v, causal: int, unit, cfg, lengths,
                           pairs: bool = False) -> list[dict]:
    """Append a chunked light attention (``golden.attn.attend_parts``: per row tile the
    maximum's pass then the sums' pass over the chunks of ``lengths``) to ``ports``, as the
    core issues it; return its ``o_attn`` beats. The maximum's pass sends K's rows alone
    unless ``pairs``. The expected rows are ``golden.attn.attend`` over the whole set."""
    from golden.attn import attend, attend_parts, attend_parts_rows, exp_registers
    n = cfg.attn_n
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    for c in attend_parts(len(q), causal, lengths, n):
        ports["cmd"].append({"kind": 3, "k": q.shape[1], "pairs": int(pairs),
                             **{f: c[f] for f in ("m", "l", "causal", "part", "first", "final",
                                                  "span", "pos0", "row0")},
                             **exp_registers(unit)})
        ks, vs = k[c["t0"]:c["t0"] + c["l"]], v[c["t0"]:c["t0"] + c["l"]]
        ports["b"] += kv_beats(ks, vs if pairs or c["part"] == 2 else None, n, pairs)
        ports["a"] += chunks(q[c["row0"]:c["row0"] + c["m"]], n)
    return attend_parts_rows(attend(q, k, v, causal, unit, cfg.out_frac_bits, cfg.score_bits),
                             n)
