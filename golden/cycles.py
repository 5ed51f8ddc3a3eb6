"""The core's cycle model: per-operation cycle formulas, their coefficients fitted from the
RTL's own counters, and the paper's setting evaluated with them.

A descriptor (one layer of one step) runs its phases one after another, each counted by the
core (``core_predict``, ``core_attend``, ``core_hash``, ``core_swap``, ``core_store``,
docs/core.md). Each
phase's cycles are modelled as a sum of terms, one per operation, each term a coefficient
times a *feature*: a cycle count written from the hardware's structure (array tiles, buffer
loads, bus beats, divider passes, memory round trips) as a function of the build (array n,
bus bytes, head geometry), the descriptor's sizes (step tokens, candidates, selected
clusters, attended tokens) and the memory latency L. The features are exact for the parts
the blocks' own timing models cover (the array's tiles, ``rtl/attn/engine/unit.py:
command_cycles``) and first-order for the rest (handshakes, the KVMU's command overheads);
the coefficients, fitted by non-negative least squares on the fitting runs' descriptors
(``verif/core/cycles.py``), absorb what the features leave out. The model is then checked on
held-out runs (another trace, other build sizes, other latencies).

Phases and operations (per KV head h: ``rows = G_q·t`` query rows, ``C`` candidates, ``S``
selected clusters, ``l`` attended tokens; ``mt = ceil(rows/n)``, ``lt = ceil(l/n)``,
``kc = ceil(d/n)``; per hash group ``T`` tokens hashed):

- predict: after a reset, the KVMU's HC table initialisation (an entry a cycle: layers ·
  groups · ``kvmu_clusters``, on the first descriptor); the first head's counts list (a
  constant per candidate: the HC table's visits, and a round trip; a later head's list runs
  while the previous head attends, hidden behind its compute; in a queued stream the first
  head's walk runs while the descriptor before attends, :func:`predict_stream`), scoring
  (the engine's SCORE command, whose B buffer
  loads the representative keys as the KVMU streams them: a candidate every ``max(kc,
  interval)`` cycles instead of ``kc``, the interval the slowest of the KVMU's issue of one
  candidate in 5 cycles, its ``4d/bus`` sum beats through the pipelined dividers, its
  ``d/min(n, bus)`` words into B, and the memory's round trip shared by ``max_reads``
  bursts in flight: ``max(5, 4d/bus, d/min(n, bus), (L + 4d/bus)/max_reads)``),
  selection (the WTU: a constant a row and a pass over ``ceil(C/lanes)`` beats), a round
  trip per scored head's key list;
- attend (the light attention): the fetch (a command per selected cluster), K and V into B
  (``2·l·d / min(n, bus)`` words), Q·Kᵀ tiles (``mt·lt·max(d, n)``), P·V tiles
  (``mt·kc·max(l, 9n)``: the dividers' 9 cycles a row bound a short tile), the exp passes
  that nothing hides (``2n·lt``), round trips; a set longer than B (``attn_b_rows``) in
  chunks (``golden.core.fetch_chunks``) has its own terms of the same operations per
  command (two passes per row tile, a command per chunk; ``_chunked``);
- hash: (``tuned``) the centring sums over the hash inputs and the biases' dot products and
  divisions;
- store: per hashed token a constant, a constant per head (its bursts), its store's beats
  (K and V rows and the cluster record's read-add-write, ``hpg·(2d + 8d)/bus``) and the
  hash projection (``hash_dim·n_hp/n²`` cycles a token on the array), added: the step's
  hash-input keys go through the DMA before its K and V rows, so the stores start as the
  hash ends; the record's read, a round trip a token (``L``), for every token but those that
  open their cluster (whose sums are written without a read: ``opened``,
  :func:`opened_tokens`); the blocks the stores move to the far tier (the near ring full,
  :func:`moved_blocks`): per head a constant, a round trip and the block's filled slots;
- swap (a build with fewer HCU contexts than cluster windows, ``golden.core.window_moves``):
  a constant a move; a save streams the HCU's window out (``words + 3W/lanes`` cycles, the
  image's ``words`` context words, a word a cycle through the width converter) while the next image's read
  goes out; a load streams ``words`` in; the memory's round trip of each.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from vrex.config import ctx_image_bytes as image_bytes

from .core import fetch_chunks, head_chunks
from .kvmu import KvGeometry, KvMemory

__all__ = ["PHASES", "bench_features", "descriptor_sizes", "part_cycles", "features", "fit", "predict",
           "predict_stream", "predict_descriptors", "lists_ahead", "opened_tokens",
           "moved_blocks", "load_fit",
           "FIT", "report", "paper_setting", "figure", "summary", "nnls"]

PHASES = ("predict", "attend", "hash", "swap", "store")
# the attend phase's terms of a head attended in chunks (:func:`_chunked`)
CHUNK_TERMS = ("chunk_engine", "chunk_cmd", "chunk_trips", "chunk_fetch")


def _cdiv(a, b):
    return -(-a // b)


def score_cycles(n: int, m: int, k: int, l: int) -> int:
    """The engine's command cycles (``rtl/attn/engine/unit.py: command_cycles``: the command,
    B's rows, A's first row tile, a tile of ``max(k, n)`` beats per row and column tile,
    the array's flush) for ``m`` rows of ``k`` over ``l`` columns."""
    if m == 0 or l == 0:
        return 0
    kc, mt, lt = _cdiv(k, n), _cdiv(m, n), _cdiv(l, n)
    array_latency = 2 * n + 2       # rtl/attn/array.py: SystolicArray.latency
    return (2 + l * kc + min(n, m) * kc + 3 + mt * lt * max(k, n) - 1 + array_latency
            - (n - 1 - (m - 1) % n))


def part_cycles(n: int, d: int, m: int, l: int, part: int, pairs: bool = True) -> int:
    """The engine's cycles for one command of a chunked light attention (``part`` 1: the
    maximum's pass, 2: the sums' pass, not its final chunk), from its transfer to the next
    command's, every stream valid: B's ``l`` tokens (K, and V when ``pairs`` or in the sums'
    pass), A's ``m <= n`` rows, a tile of ``max(d, n)`` beats and ``m`` output rows per column
    tile, the array's flush; in the sums' pass the P·V tiles (``max(l, n)`` beats each of
    ``ceil(d / n)``) and their flush. Measured equal to the RTL
    (verif/attn/test_engine_sim.py: ``test_part_command_cycles``)."""
    kc, lt = _cdiv(d, n), _cdiv(l, n)
    load_b = (2 if pairs or part == 2 else 1) * l * kc
    cyc = load_b + lt * (max(d, n) + m) + m * kc + 2 * n + 18
    if part == 2:
        cyc += kc * max(l, n) + 2 * n + 7 - min(3, n - m)
    return cyc


def _geometry(cfg) -> dict:
    return dict(n=cfg.attn_n, bus=cfg.kvmu_bus_bytes, d=cfg.head_dim, gq=cfg.group_size,
                hpg=cfg.heads_per_group, G=cfg.hash_groups, H=cfg.n_kv_heads,
                hash_dim=cfg.hash_dim, n_hp=cfg.n_hp, lanes=cfg.wtu_lanes,
                reads=cfg.kvmu_max_reads,
                table=cfg.n_layers * cfg.hash_groups * cfg.kvmu_clusters,
                window=cfg.window, hcu_lanes=cfg.hcu_lanes,
                ctx_words=image_bytes(cfg.window, cfg.ctx_word_bytes, cfg.kvmu_bus_bytes)
                // cfg.ctx_word_bytes)


def descriptor_sizes(ls, moves=(), b_rows: int | None = None) -> dict:
    """What the model needs of one descriptor, from its golden results
    (:class:`golden.core.LayerStep`), its cluster windows' moves
    (``golden.core.window_moves``) and the build's B (``attn_b_rows``: a head whose set is
    longer runs in chunks, ``golden.core.fetch_chunks``): the sizes :func:`features` reads."""
    kinds = [k for k, _ in moves]

    def chunks(h):
        return [] if b_rows is None else head_chunks(h, b_rows)
    return {"tokens": ls.step_len, "sinks": ls.n_sink, "hashed": int(ls.hashes.shape[1]),
            "saves": kinds.count("save"), "loads": kinds.count("load"),
            "flushes": kinds.count("flush"),
            "dense": ls.dense,
            "heads": [{"cand": len(h.clusters), "sel": len(h.selected),
                       "fetched": len(h.fetched), "attended": h.attended,
                       "chunks": chunks(h)}
                      for h in ls.heads]}


def features(row: dict, g: dict, lat: int, centre: bool) -> dict:
    """``phase -> {term: value}`` of one descriptor: ``row`` its sizes (``tokens``,
    ``sinks``, ``hashed`` and per head ``cand``, ``sel``, ``attended``), ``g`` the build's
    geometry (:func:`_geometry`), ``lat`` the memory's read latency in cycles."""
    n, bus, d = g["n"], g["bus"], g["d"]
    t, T = row["tokens"], row["hashed"]
    rows = g["gq"] * t
    mt, kc = _cdiv(rows, n), _cdiv(d, n)
    wide = min(n, bus)
    f = {p: {} for p in PHASES}
    pr, at = f["predict"], f["attend"]
    pr["descriptor"] = 1.0
    pr["init"] = float(g.get("table", 0)) if row.get("first") else 0.0
    pr["head"] = float(g["H"])
    hbeats = _cdiv(4 * d, bus)
    key_interval = max(5, hbeats, d / wide, (lat + hbeats) / g["reads"])
    for p in ("cand", "counts_trip", "score", "select", "select_rows", "scored_head",
              "list_trips"):
        pr[p] = 0.0
    for p in ("head", "qk", "pv", "kv_load", "q_load", "exp", "fetch", "trips") + CHUNK_TERMS:
        at[p] = 0.0
    for j, h in enumerate(row["heads"]):
        C, S, l = h["cand"], h["sel"], h["attended"]
        if j == 0:
            # a later head's counts list runs while the previous head attends (hidden)
            pr["cand"] += C
            pr["counts_trip"] += lat
        if C and not row.get("dense"):      # a dense layer's heads: no scoring, no WTU
            pr["scored_head"] += 1
            # the engine loads B (kc beats a candidate) from the key stream at its pace
            pr["score"] += score_cycles(n, rows, d, C) + C * (max(kc, key_interval) - kc)
            pr["select"] += rows * _cdiv(C, g["lanes"])
            pr["select_rows"] += rows
            pr["list_trips"] += lat
        at["head"] += 1
        if h.get("chunks"):
            _chunked(at, h["chunks"], row["sinks"] + t, S, rows, g, lat)
            continue
        lt = _cdiv(l, n)
        at["qk"] += mt * lt * max(d, n)
        at["pv"] += mt * kc * max(l, 9 * n)
        at["kv_load"] += 2 * l * d / wide
        at["q_load"] += rows * d / wide
        at["exp"] += 2 * n * lt
        at["fetch"] += S
        at["trips"] += lat
    hs, st = f["hash"], f["store"]
    groups = g["G"] if T else 0
    hs["group"] = float(groups)
    TG = T * groups                 # token-groups: every hash group hashes and stores T
    hs["centre_sums"] = TG * g["hpg"] * d / bus if centre else 0.0
    hs["centre_biases"] = groups * (g["n_hp"] * g["hash_dim"] / bus + g["n_hp"] * 34) \
        if centre else 0.0
    hs["centre_trips"] = 2 * groups * lat if centre else 0.0
    hash_tok = g["hash_dim"] * g["n_hp"] / (n * n)
    store_tok = g["hpg"] * (2 * d + 8 * d) / bus
    st["group"] = float(groups)
    st["tokens"] = float(TG)
    st["store_heads"] = float(TG * g["hpg"])
    # the step's hash-input keys go through the DMA before its K and V rows, so a token's
    # stores follow its group's hash projection: the two added, a coefficient each
    st["store_beats"] = TG * store_tok
    st["hash_beats"] = TG * hash_tok
    # blocks moved to the far tier (the near ring full): per head a read of the block's
    # filled slots, each beat written as it arrives; its round trip counted with the
    # records' (one coefficient a round trip)
    moves, moved = row.get("moved", (0, 0))
    st["token_trips"] = (TG - row["opened"] + moves * g["hpg"]) * lat
    st["moves"] = float(moves * g["hpg"])
    st["move_beats"] = float(g["hpg"] * moved * _cdiv(2 * d, bus))
    sw = f["swap"]
    saves, loads = row.get("saves", 0), row.get("loads", 0)    # a row without: no moves
    words = g["ctx_words"]         # a word a cycle through the width converter (no gap)
    sw["move"] = float(loads + row.get("flushes", 0))
    # (the HCU reads a row of its window, and registers it twice, for every ``lanes`` entries)
    sw["save"] = saves * (words + 3 * g["window"] / g["hcu_lanes"])
    sw["load"] = loads * words
    sw["trips"] = (saves + loads) * lat
    return f


def _chunked(at: dict, chunks, last: int, S: int, rows: int, g: dict, lat: int) -> None:
    """A head's light attention over a set longer than B (docs/core.md, *Sets longer than
    B*): per row tile of n query rows, the maximum's pass and the sums' pass, each a command
    per chunk (the fetched ones, ``chunks``, then the sinks and own tokens, ``last``): the
    engine's own cycles for each (:func:`part_cycles`, K and V in pairs in both passes as the
    core sends them), the core's work and a memory round trip a command, a fetch command per
    selected cluster a pass and tile. The engine's formula takes a word of B a cycle: the
    bus delivers that when it is at least as wide as the array (``rtl/core/dma.py: Repack``
    splits a bus word without a gap); a narrower bus delivers ``bus / n`` of a word a
    cycle, added here to the engine's cycles as it comes (no fitted run has such a bus)."""
    n, d, bus = g["n"], g["d"], g["bus"]
    lengths = list(chunks) + [last]
    cmds = 0
    for r0 in range(0, rows, n):
        m = min(n, rows - r0)
        for lc in lengths:
            at["chunk_engine"] += part_cycles(n, d, m, lc, 1) + part_cycles(n, d, m, lc, 2)
            cmds += 2
    at["chunk_cmd"] += cmds
    at["chunk_trips"] += cmds * lat
    at["chunk_fetch"] += 2 * _cdiv(rows, n) * S
    if bus < n:         # B's K and V words, both passes, at bus / n of a word a cycle
        at["chunk_engine"] += 2 * _cdiv(rows, n) * 2 * sum(lengths) * _cdiv(d, n) * (n / bus - 1)


def nnls(A: np.ndarray, b: np.ndarray, iters: int = 500) -> np.ndarray:
    """Non-negative least squares (Lawson and Hanson's active set)."""
    m, k = A.shape
    x, passive = np.zeros(k), np.zeros(k, bool)
    w = A.T @ (b - A @ x)
    for _ in range(iters):
        if passive.all() or (w[~passive] <= 1e-10 * max(1.0, np.abs(w).max())).all():
            break
        j = np.argmax(np.where(passive, -np.inf, w))
        passive[j] = True
        while True:
            z = np.zeros(k)
            z[passive] = np.linalg.lstsq(A[:, passive], b, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            neg = passive & (z <= 0)
            alpha = np.min(x[neg] / (x[neg] - z[neg]))
            x = x + alpha * (z - x)
            passive &= x > 1e-12
            x[~passive] = 0
        w = A.T @ (b - A @ x)
    return x


def bench_features(rep: dict, cfg, lat: int):
    """Every descriptor of a core bench report (``verif.core.bench``) run on the build of
    ``cfg`` at memory latency ``lat``: ``(preset, its row, its features)``."""
    g = _geometry(cfg)
    for preset, p in rep["presets"].items():
        for i, r in enumerate(p["rows"]):
            r = dict(r, first=i == 0)           # after a (soft) reset: the KVMU's table init
            yield preset, r, features(r, g, lat, preset == "tuned")


def _rows(runs: dict, cfgs: dict):
    """Every descriptor of ``runs`` (``name -> (role, build, latency, bench report)``) as
    ``(run name, role, features, measured phases)``."""
    return [(name, role, f, {ph: r[ph] for ph in PHASES})
            for name, (role, build, lat, rep) in runs.items()
            for _, r, f in bench_features(rep, cfgs[build], lat)]


def fit(rows) -> dict:
    """``phase -> {term: coefficient}``, fitted on ``rows`` (``(features, measured)``) by
    non-negative least squares, each descriptor weighted by the inverse of its phase's
    cycles (relative error) with a floor so near-empty phases do not dominate."""
    coef = {}
    for ph in PHASES:
        terms = list(rows[0][0][ph])
        A = np.array([[f[ph][t] for t in terms] for f, _ in rows], float)
        b = np.array([m[ph] for _, m in rows], float)
        w = 1.0 / np.maximum(b, 200.0)
        scale = np.maximum(np.abs(A).max(axis=0), 1e-9)
        x = nnls(A * w[:, None] / scale, b * w) / scale
        coef[ph] = {t: float(v) for t, v in zip(terms, x)}
    return coef


def predict(coef: dict, f: dict) -> dict:
    return {ph: sum(coef[ph][t] * v for t, v in f[ph].items()) for ph in PHASES}


# the coefficients ``make cycles`` fitted last (``verif.core.cycles --save``), with the runs
# they were fitted and checked on
FIT = Path(__file__).resolve().parents[1] / "data" / "cycle_model.json"


def load_fit(path=FIT) -> dict:
    return json.loads(Path(path).read_text())["coefficients"]


def opened_tokens(golden_steps) -> list[int]:
    """Per descriptor of a stream from a reset: its stored tokens (one per hash group) that
    open their cluster, the cluster having had no member before (the KVMU writes such a
    token's sums without reading them)."""
    seen, out = {}, []
    for ls in golden_steps:
        n = 0
        for g in range(ls.clusters.shape[0]):
            have = seen.setdefault((ls.layer, g), set())
            for c in ls.clusters[g].tolist():
                n += c not in have
                have.add(c)
        out.append(n)
    return out


def moved_blocks(golden_steps, cfg) -> list[tuple[int, int]]:
    """Per descriptor of a stream from a reset: the KV blocks its stores move from the near
    tier to the far one (an allocation with the near ring full, ``golden.kvmu.KvMemory``
    with the build's ``near_blocks``) and the tokens those blocks hold."""
    mem = KvMemory(KvGeometry(block_tokens=cfg.block_tokens, head_dim=cfg.head_dim,
                              heads_per_group=cfg.heads_per_group,
                              near_blocks=cfg.near_blocks))
    out = []
    for ls in golden_steps:
        n0 = len(mem.offloads)
        for g in range(ls.clusters.shape[0]):
            for t, c in enumerate(ls.clusters[g].tolist()):
                mem.store(ls.step, ls.layer, g, ls.token0 + t, c)
        moved = mem.offloads[n0:]
        out.append((len(moved), sum(len(mem.blocks[o.block].tokens) for o in moved)))
    return out


# the KVMU's counts-only walk: a cycle a state of C_RD, C_CHK, C_CHK2, C_CHK3, C_COUNT per
# candidate, about as many for the list's start and end (rtl/kvmu/kvmu.py)
WALK_CYCLES = 5


def lists_ahead(golden_steps, max_tokens: int, order: str = "select_first") -> list[bool]:
    """Per descriptor of a stream queued as a whole: whether its first head's counts list is
    taken ahead, while the descriptor before it attends its last head: if that one's layer
    is another (its stores do not change this one's HC table) and both run (steps within
    ``max_tokens``, the build's ``core_max_tokens``); never in the cluster-first ``order``
    (a descriptor stores its own tokens before its lists)."""
    return [order == "select_first" and i > 0 and prev.layer != ls.layer and
            max(prev.step_len, ls.step_len) <= max_tokens
            for i, (prev, ls) in enumerate(zip([None] + list(golden_steps), golden_steps))]


def predict_stream(coef: dict, golden_steps, cfg, latency: int, centre: bool,
                   queued: bool = False) -> dict:
    """The model's cycles per phase for a stream's descriptors (``golden.core.run_stream``'s
    :class:`~golden.core.LayerStep` list) run one after another from a reset: each written
    once the one before is done (as the fitted runs were), or (``queued``) all in the queue:
    then a descriptor's first counts list is taken ahead (:func:`lists_ahead`) and its walk,
    ``WALK_CYCLES`` a candidate and as many for the list, hidden behind the attention before
    it. Only the walk: the fitted per-candidate coefficient also carries costs of the keyed
    list that grow with the candidates, and those stay."""
    tot = dict.fromkeys(PHASES, 0.0)
    for ph in predict_descriptors(coef, golden_steps, cfg, latency, centre, queued):
        for k, v in ph.items():
            tot[k] += v
    return tot


def predict_descriptors(coef: dict, golden_steps, cfg, latency: int, centre: bool,
                        queued: bool = False) -> list[dict]:
    """:func:`predict_stream`'s cycles per phase, descriptor by descriptor."""
    from .core import window_moves
    g = _geometry(cfg)
    ahead = (lists_ahead(golden_steps, cfg.core_max_tokens, cfg.order) if queued
             else [False] * len(golden_steps))
    opened, moved = opened_tokens(golden_steps), moved_blocks(golden_steps, cfg)
    out = []
    for i, (ls, moves) in enumerate(zip(golden_steps, window_moves(golden_steps, cfg))):
        row = dict(descriptor_sizes(ls, moves, cfg.attn_b_rows), first=i == 0,
                   opened=opened[i], moved=moved[i])
        ph = predict(coef, features(row, g, latency, centre))
        if ahead[i] and row["heads"]:
            ph["predict"] -= WALK_CYCLES * (row["heads"][0]["cand"] + 1)
        out.append(ph)
    return out


def report(runs: dict, cfgs: dict) -> dict:
    """Fit on the runs whose role is ``fit``; every run's measured and predicted cycles
    (total and per phase) and the errors; the paper-setting evaluation."""
    rows = _rows(runs, cfgs)
    coef = fit([(f, m) for _, role, f, m in rows if role == "fit"])
    per_run = {}
    for name, (role, build, lat, rep) in runs.items():
        mine = [(f, m) for nm, _, f, m in rows if nm == name]
        meas = {ph: sum(m[ph] for _, m in mine) for ph in PHASES}
        pred = {ph: sum(predict(coef, f)[ph] for f, _ in mine) for ph in PHASES}
        desc_err = [abs(sum(predict(coef, f).values()) - sum(m.values())) / sum(m.values())
                    for f, m in mine]
        tot_m, tot_p = sum(meas.values()), sum(pred.values())
        per_run[name] = {"role": role, "build": build, "latency": lat,
                         "stream": rep.get("stream"), "descriptors": len(mine),
                         "chunked_heads": sum(1 for p in rep["presets"].values()
                                              for r in p["rows"] for h in r["heads"]
                                              if h.get("chunks")),
                         "measured": meas, "predicted": {k: round(v) for k, v in pred.items()},
                         "cycles": tot_m, "model": round(tot_p),
                         "error": (tot_p - tot_m) / tot_m,
                         "phase_error": {ph: (pred[ph] - meas[ph]) / meas[ph]
                                         for ph in PHASES if meas[ph] >= 0.02 * tot_m},
                         "descriptor_error_median": float(np.median(desc_err)),
                         "descriptor_error_max": float(np.max(desc_err))}
    held = [r for r in per_run.values() if r["role"] == "validate"]
    return {"builds": {b: _geometry(c) for b, c in cfgs.items()}, "coefficients": coef,
            "runs": per_run,
            "validation_max_error": max(abs(r["error"]) for r in held) if held else None,
            "paper": paper_setting(coef),
            # the bundled trace's frames: 64 visual tokens, a header and a newline
            "paper_76": paper_setting(coef, frame_tokens=76)}


# --- the paper's setting --------------------------------------------------------------------

PAPER = dict(
    # Llama-3-8B (PAPER.md): 32 layers, 32 query heads, 8 KV heads of 128; its weights in
    # BF16 (the LLM's other layers are not this core's: they are counted as the paper's
    # engine would run them, below); this core's KV is int8
    n_layers=32, n_q_heads=32, n_kv_heads=8, head_dim=128, hidden=4096, ffn=14336,
    weight_bytes=2, kv_bytes=1,
    # the edge system of the paper's Fig.: 8 cores, each with a 64 x 64 array (the paper: 64
    # MAC trees of 64) at 800 MHz; the cores split a layer's KV heads (one each)
    n=64, clock_mhz=800, cores=8,
    # near tier: LPDDR5 as on Jetson AGX Orin, 204.8 GB/s = 256 bytes a cycle at 800 MHz,
    # shared by the cores; each core's own port is as wide (bus 256); 100 ns = 80 cycles of
    # read latency
    bus=256, shared_bus=256, latency=80,
    # far tier: PCIe 3.0 x4 NVMe SSD, 3.5 GB/s, 80 us a request; the near tier holds
    # near_capacity_tokens tokens of every layer (the newest; older ones are on the SSD)
    ssd_gbps=3.5, ssd_latency_us=80.0, near_capacity_tokens=1 << 20,
    # ReSV's statistics (PAPER.md): clusters of 32 tokens on average, 32.7% of past tokens
    # retrieved in the frame stage; N_hp = 32 over the concatenated KV heads (one hash
    # group); the WTU's 16 lanes; the KVMU's 8 reads outstanding (the default build's; at
    # 80 cycles of latency they bound a candidate's key to (80 + 2) / 8 = 10 cycles)
    cluster_tokens=32, retrieved=0.327, n_hp=32, lanes=16, max_reads=8,
    # frames of 10 tokens (VideoLLM-online: the CLS token and 3 x 3 pooled patches); 24
    # sink tokens (the prompt, as in the bundled trace)
    frame_tokens=10, sinks=24,
    # the HCU holds 2 of the 32 layers' cluster windows (1024 entries, 8-byte context
    # words): every layer saves one window and loads its own each frame
    window=1024, hcu_lanes=16, contexts=2, ctx_word_bytes=8,
    # B holds 1024 tokens' K and V (256 KB a core): a longer attended set runs in chunks of
    # whole clusters, two passes (the query rows' maxima, then the sums), every chunk's K and
    # V fetched once a pass (the frame's 40 query rows of a KV head are one row tile)
    b_rows=1024,
)


def paper_setting(coef: dict, caches=(1024, 5120, 10240, 20480, 40960), batch: int = 1,
                  **over) -> dict:
    """A frame through the LLM at each cache size (``PAPER``, overridden by ``over``), of
    each of ``batch`` streams served together (``golden.batch``): the weights streamed once a
    batch step, every stream's heads, hashes, stores, bytes and SSD reads on the same cores.

    The core's cycles per layer come from the fitted model at the paper's geometry, for one
    KV head per core (prediction and attention; the hash and the stores of the layer's
    tokens, one hash group over every head, on one core). A layer's retrieval-and-attention
    time is the larger of those cycles and the bytes it moves over the shared LPDDR5
    (fetched K and V, once a pass when the set is longer than B and runs in chunks; query,
    own K and V, the candidates' sums, output). The LLM's other work
    per layer (QKV, O and FFN projections on the frame's tokens) is the larger of its MACs
    on the 8 arrays at full use and its BF16 weights streamed over the shared LPDDR5.
    Reported: per-frame latency, frames per second, the prediction's share of attention and
    of the frame's compute, the arrays' MAC utilisation in attention, the SSD's share."""
    P = dict(PAPER, **over)
    n, d, H = P["n"], P["head_dim"], P["n_kv_heads"]
    gq = P["n_q_heads"] // H
    per_core = max(1, -(-batch * H // P["cores"]))          # heads a core, every stream's
    one = dict(n=n, bus=P["bus"], d=d, gq=gq, hpg=H, G=1, H=per_core,
               hash_dim=H * d, n_hp=P["n_hp"], lanes=P["lanes"], reads=P["max_reads"],
               window=P["window"], hcu_lanes=P["hcu_lanes"],
               ctx_words=image_bytes(P["window"], P["ctx_word_bytes"], P["bus"])
               // P["ctx_word_bytes"])
    swaps = int(P["contexts"] < P["n_layers"])
    hz = P["clock_mhz"] * 1e6
    t, L = P["frame_tokens"], P["n_layers"]
    params = (P["hidden"] * (P["n_q_heads"] + 2 * H) * d + P["n_q_heads"] * d * P["hidden"]
              + 3 * P["hidden"] * P["ffn"])
    other = max(batch * t * params / (n * n * P["cores"]),
                params * P["weight_bytes"] / P["shared_bus"])
    out = []
    for cache in caches:
        past = cache - P["sinks"]
        C = max(1, past // P["cluster_tokens"])
        fetched = round(P["retrieved"] * past)
        S = max(1, round(P["retrieved"] * C))
        l = P["sinks"] + fetched + t
        chunks = fetch_chunks([P["cluster_tokens"]] * S, P["b_rows"]) if l > P["b_rows"] \
            else []
        heads = [{"cand": C, "sel": S, "fetched": fetched, "attended": l,
                  "chunks": chunks}] * per_core
        # the fetched K and V cross the bus once a pass and row tile when chunked
        passes = 2 * _cdiv(gq * t, n) if chunks else 1
        # clusters of cluster_tokens tokens: one token in that many opens its cluster
        row = {"tokens": t, "sinks": P["sinks"], "hashed": t, "heads": heads,
               "saves": swaps, "loads": swaps, "opened": t / P["cluster_tokens"]}
        ph = predict(coef, features(row, one, P["latency"], centre=False))
        core = ph["predict"] + ph["attend"]
        byts = batch * (H * (2 * passes * fetched * d * P["kv_bytes"] + C * 4 * d
                             + gq * t * d * 3 + 2 * t * d * P["kv_bytes"])
                        + t * H * d * (2 * P["kv_bytes"] + 8))
        layer = max(core, byts / P["shared_bus"]) + batch * (ph["hash"] + ph["swap"]
                                                              + ph["store"])
        far = max(0, past - P["near_capacity_tokens"]) / past if past else 0.0
        ssd_s = batch * (L * H * fetched * far * 2 * d * P["kv_bytes"] / (P["ssd_gbps"] * 1e9)
                         + (P["ssd_latency_us"] * 1e-6 * L if far else 0.0))
        frame_s = L * (layer + other) / hz + ssd_s
        macs = gq * t * 2 * l * d * per_core
        out.append({
            "cache_tokens": cache, "candidates": C, "selected": S, "fetched": fetched,
            "attended": l, "chunks": len(chunks) + 1 if chunks else 0,
            "core_cycles_per_layer": {k: round(v) for k, v in ph.items()},
            "bus_bound": byts / P["shared_bus"] > core,
            "core_ms_per_frame": L * layer / hz * 1e3,
            "other_ms_per_frame": L * other / hz * 1e3,
            "ssd_ms_per_frame": ssd_s * 1e3,
            "frame_ms": frame_s * 1e3, "fps": 1.0 / frame_s, "batch": batch,
            "fps_all_streams": batch / frame_s,
            "prediction_share_of_attention": ph["predict"] / ph["attend"],
            "prediction_share_of_compute": ph["predict"] / (layer + other),
            "attention_mac_utilisation": macs / (n * n * max(core, 1))})
    return {"assumptions": P, "frames": out}


def summary(rep: dict) -> list[str]:
    out = ["run                   role      build latency descr   measured      model   error"
           "  (per phase over 2% of the run)"]
    for name, r in rep["runs"].items():
        out.append(f"{name:21s} {r['role']:9s} {r['build']:5s} {r['latency']:7d} "
                   f"{r['descriptors']:5d} {r['cycles']:10d} {r['model']:10d} "
                   f"{100 * r['error']:+6.2f}%  ("
                   + ", ".join(f"{ph} {100 * e:+.1f}%" for ph, e in r["phase_error"].items())
                   + ")")
    if rep["validation_max_error"] is not None:
        out.append(f"held-out runs: largest error {100 * rep['validation_max_error']:.2f}%")
    for key in ("paper", "paper_76"):
        out += _paper_lines(rep[key])
    return out


def _paper_lines(p: dict) -> list[str]:
    out = [f"paper setting (Llama-3-8B, {p['assumptions']['cores']} cores of 64x64 at 800 MHz, "
           f"LPDDR5), frames of {p['assumptions']['frame_tokens']} tokens:"]
    for fr in p["frames"]:
        out.append(f"  {fr['cache_tokens']:6d} cached: {fr['frame_ms']:7.1f} ms/frame "
                   f"({fr['fps']:.1f} FPS), retrieval+attention {fr['core_ms_per_frame']:.2f}"
                   f" ms, prediction {100 * fr['prediction_share_of_attention']:.1f}% of "
                   f"attention, {100 * fr['prediction_share_of_compute']:.2f}% of compute, "
                   f"MAC use {100 * fr['attention_mac_utilisation']:.0f}%")
    return out


def figure(rep: dict, path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a0, a1) = plt.subplots(1, 2, figsize=(12, 4.2))
    names = list(rep["runs"])
    meas = [rep["runs"][k]["cycles"] for k in names]
    mod = [rep["runs"][k]["model"] for k in names]
    cols = ["tab:blue" if rep["runs"][k]["role"] == "fit" else "tab:orange" for k in names]
    a0.scatter(meas, mod, c=cols)
    lim = [0, max(meas + mod) * 1.05]
    a0.plot(lim, lim, "k:", lw=1)
    for k, x, y in zip(names, meas, mod):
        a0.annotate(k, (x, y), fontsize=7)
    a0.set_xlabel("RTL cycles (measured)")
    a0.set_ylabel("model cycles")
    a0.set_title("cycle model: fit (blue) and held-out runs (orange)")
    frames = rep["paper"]["frames"]
    x = [f["cache_tokens"] / 1024 for f in frames]
    bottom = np.zeros(len(frames))
    for ph in PHASES:
        y = np.array([f["core_cycles_per_layer"][ph] for f in frames]) / 1e3
        a1.bar(x, y, bottom=bottom, width=1.5, label=ph)
        bottom += y
    a1.set_xlabel("cached tokens (K)")
    a1.set_ylabel("kilocycles per layer and frame (one core)")
    a1.set_title("paper setting: the core's operations against cache size")
    a1.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
