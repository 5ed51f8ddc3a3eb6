"""WTU stimulus and expectations: rows (random shapes, from the real trace) as input beats,
and the golden block model's output beats and counters (``golden.wtu``)."""
from __future__ import annotations

import numpy as np

from golden.numerics import ExpUnit
from golden.wtu import Row, wtu_beats, wtu_reference
from vrex.config import Config


def row_beats(row: Row, lanes: int, head_last: bool):
    n = len(row.score)
    nb = max(1, -(-n // lanes))
    beats = []
    for b in range(nb):
        entry, valid = [], 0
        for j in range(lanes):
            i = b * lanes + j
            if i < n:
                entry.append({"score": int(row.score[i]), "weight": int(row.weight[i]),
                              "count": int(row.count[i])})
                valid |= int(row.valid[i]) << j
            else:
                entry.append({"score": 0, "weight": 0, "count": 0})
        beats.append({"entry": entry, "valid": valid, "first": int(b == 0),
                      "last": int(b == nb - 1), "head_last": int(head_last and b == nb - 1)})
    return beats


def first_beat_index(heads, lanes):
    """The index, among all the input beats of ``heads``, of each row's first beat."""
    idx, out = 0, []
    for rows in heads:
        for r in rows:
            out.append(idx)
            idx += max(1, -(-len(r.score) // lanes))
    return out


def all_beats(heads, lanes):
    out = []
    for rows in heads:
        for k, r in enumerate(rows):
            out += row_beats(r, lanes, k == len(rows) - 1)
    return out


def expected(heads, cfg):
    """``(o beats, golden result)`` of the WTU built and set from ``cfg`` for ``heads``."""
    ref = wtu_reference(heads, th_r_fixed=cfg.th_r_fixed, th_r_frac_bits=cfg.th_r_frac_bits,
                        buckets=cfg.buckets, row_entries=cfg.wtu_row_entries,
                        lanes=cfg.wtu_lanes,
                        pass_buckets=cfg.block_params("wtu")["pass_buckets"])
    return wtu_beats(ref), ref


def random_rows(rng, n_rows, length, *, kind="exp", score_bits=22, count_max=40,
                invalid=0.0):
    """Rows of one head: ``kind`` shapes the scores (flat, peaky, exp-like, uniform)."""
    rows = []
    e = ExpUnit.for_config(2e-3, Config())
    for _ in range(n_rows):
        n = int(length) if np.isscalar(length) else int(rng.integers(*length))
        if kind == "flat":
            s = np.full(n, int(rng.integers(-1000, 1000)))
        elif kind == "peaky":
            s = rng.integers(-3000, -2000, n)
            s[rng.integers(0, max(n, 1), max(1, n // 10))] = 4000
        elif kind == "uniform":
            s = rng.integers(-(1 << (score_bits - 2)), 1 << (score_bits - 2), n)
        else:
            s = (rng.exponential(800, n) - 2000).astype(np.int64)
        w = e(s - s.max()) if n else np.zeros(0, np.int64)
        c = rng.integers(1, count_max, n)
        v = rng.random(n) >= invalid
        rows.append(Row(s, w, c, v))
    return rows


def trace_rows(trace, qt, preset: str, cfg, *, n_groups: int):
    """The WTU's input rows from a golden ReSV run of a trace: ``n_groups`` (layer, step, KV
    head) groups spread over the run, those whose rows fit ``cfg.wtu_row_entries``, each group
    one head. Returns ``(run_cfg, run, groups, heads)``: ``run_cfg`` is the preset on the
    trace's geometry with ``cfg``'s buckets; ``groups[k]`` (with its candidate cluster ids) is
    the source of ``heads[k]``."""
    from golden.resv import run_resv
    from vrex.config import Config
    row_entries = cfg.wtu_row_entries
    cfg = Config.from_preset(preset, **trace.geometry(), buckets=cfg.buckets)
    rec = []
    run = run_resv(trace, qt, cfg, [cfg.th_r], record_rows=rec)
    picks = [rec[i] for i in np.linspace(0, len(rec) - 1, n_groups).astype(int)]
    groups = [g for g in picks if len(g["count"]) <= row_entries]
    heads = [[Row(g["score"][i], g["weight"][i], g["count"]) for i in range(len(g["score"]))]
             for g in groups]
    return cfg, run, groups, heads


def schedule_rows(heads, ref):
    """The rows of ``heads`` as :func:`verif.wtu.timing.schedule` takes them, with the
    golden result ``ref``: ``(n, visited, refused, any_valid, head_last)`` per row."""
    rows = [(len(r.score), bool(r.valid.any()), k == len(h) - 1)
            for h in heads for k, r in enumerate(h)]
    return [(n, v, refused, valid, hl)
            for (n, valid, hl), v, refused in zip(rows, ref.visited, ref.refused)]
