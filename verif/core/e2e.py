"""The end-to-end stimulus and check of the core, shared by both tiers: a stream (the bundled
trace, or a synthetic one) laid out in memory as a host would write it, its descriptors and
register settings, and the comparison of everything the core produced (hashes, cluster
assignments, selections, fetched tokens, output rows) with ``golden.core.run_stream``; a
mismatch names the step, layer, head and token."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from golden.core import head_chunks, run_stream
from golden.numerics import hyperplanes
from verif.lib.fcov import record
from vrex import regmap

__all__ = ["StreamPlan", "plan_stream", "synthetic_stream", "Observed", "compare_run",
           "failed_fetches",
           "compare_windows", "window_moves"]

ALIGN = 64


@dataclass
class StreamPlan:
    cfg: object
    golden: list                      # LayerStep per descriptor, in issue order
    descriptors: list                 # the descriptor fields, in issue order
    image: dict                       # address -> bytes the host writes before starting
    registers: list                   # (offset, value) the host writes first
    io_base: int
    io_size: int

    def o_rows(self, mem_read, k: int) -> np.ndarray:
        """Descriptor k's output ``O [q heads, t, d]`` as int16 from the memory."""
        desc, cfg = self.descriptors[k], self.cfg
        t, d = desc["step_len"], cfg.head_dim
        raw = mem_read(desc["o_addr"], cfg.n_q_heads * t * d * 2)
        return np.frombuffer(raw, "<i2").reshape(cfg.n_q_heads, t, d)


def synthetic_stream(seed: int, **kw):
    """A small synthetic stream (``golden.trace.synthetic_trace``: frames of patches that
    drift, so tokens cluster across frames) and its quantised tensors."""
    from golden.trace import quantise, synthetic_trace
    tr = synthetic_trace(seed=seed, **kw)
    return tr, quantise(tr)


def _alloc(state, n):
    a = state["next"]
    state["next"] = a + -(-n // ALIGN) * ALIGN
    return a


def plan_stream(trace, qt, cfg, *, steps=None, io_base=None, io_size=None) -> StreamPlan:
    """The stream as a host lays it out: per descriptor its Q, K, hash-input K, V, the
    layer's hyperplanes and room for O in the I/O window; per layer the sink tokens' K and
    V ([kv heads, n_sink, d]); the registers (memory windows, ReSV settings, the window,
    interrupts, enable)."""
    golden = run_stream(trace, qt, cfg, steps=steps)
    G, d = cfg.hash_groups, cfg.head_dim
    if io_base is None:      # past the saved cluster windows
        io_base = -(-(cfg.ctx_base + cfg.windows * cfg.ctx_image_bytes) // (1 << 20)) << 20
    state = {"next": io_base}
    image = {}
    src = qt.k_pre if cfg.hash_input == "pre_rope" else qt.k
    bounds = trace.step_bounds()
    from golden.resv import sink_count
    n_sink = sink_count(trace, cfg)
    sinks = {}
    for l in range(cfg.n_layers):
        ks, vs = (np.ascontiguousarray(x[l, :, :n_sink]).astype(np.int8) for x in (qt.k, qt.v))
        sinks[l] = (_alloc(state, ks.nbytes), _alloc(state, vs.nbytes))
        image[sinks[l][0]], image[sinks[l][1]] = ks.tobytes(), vs.tobytes()
    hps = {}
    for l in range(cfg.n_layers):
        hp = np.stack([hyperplanes(cfg.hp_seed, l, g, cfg.n_hp, cfg.hash_dim)
                       for g in range(G)]).astype(np.int8)
        hps[l] = _alloc(state, hp.nbytes)
        image[hps[l]] = hp.tobytes()
    descs, version = [], 0
    stages = trace.step_stage()
    for ls in golden:
        s, l = ls.step, ls.layer
        a, b = int(bounds[s]), int(bounds[s + 1])
        bufs = {}
        for name, arr in (("q_addr", qt.q), ("k_addr", qt.k), ("k_hash_addr", src),
                          ("v_addr", qt.v)):
            x = np.ascontiguousarray(arr[l, :, a:b]).astype(np.int8)
            bufs[name] = _alloc(state, x.nbytes)
            image[bufs[name]] = x.tobytes()
        o_bytes = cfg.n_q_heads * (b - a) * d * 2
        bufs["o_addr"] = _alloc(state, o_bytes)
        image[bufs["o_addr"]] = bytes([0xA5]) * o_bytes      # not zero: unwritten shows
        version += 1
        descs.append(dict(version=version, layer=l, kind=int(stages[s] == "text"),
                          dense=int(ls.dense),
                          step_len=b - a, step=s, hp_addr=hps[l], beta_m=ls.beta_m,
                          beta_shift=ls.beta_shift, n_sink=n_sink, token0=a,
                          sink_k_addr=sinks[l][0], sink_v_addr=sinks[l][1], **bufs))
    io_size = io_size or -(-(state["next"] - io_base) // 4096) * 4096
    regs = _registers(cfg, io_base, io_size)
    return StreamPlan(cfg, golden, descs, image, regs, io_base, io_size)


def _registers(cfg, io_base, io_size) -> list:
    off = {r.name: r.offset for r in regmap.REGISTERS}
    kv = cfg.block_registers("kvmu")
    hpg = cfg.heads_per_group
    lo_hi = lambda name, v: [(off[f"{name}_LO"], v & 0xFFFFFFFF), (off[f"{name}_HI"], v >> 32)]
    regs = [*lo_hi("NEAR_BASE", kv["near_base"]), (off["NEAR_BLOCKS"], kv["near_slots"] * hpg),
            *lo_hi("FAR_BASE", kv["far_base"]), (off["FAR_BLOCKS"], kv["far_slots"] * hpg),
            *lo_hi("HC_BASE", kv["hc_base"]), *lo_hi("CTX_BASE", cfg.ctx_base),
            (off["MAX_BURST"], kv["max_burst"]),
            (off["TH_HD"], cfg.th_hd | (cfg.cluster_cap or 0) << 16),
            (off["AGE"], (cfg.max_age or 0) | int(cfg.max_age is not None) << 16),
            (off["TH_R"], cfg.th_r_fixed),
            *lo_hi("IO_BASE", io_base), (off["IO_SIZE"], io_size),
            (off["IRQ_ENABLE"], 0b111), (off["CTRL"], 1 | int(cfg.centre) << 2)]
    return regs


@dataclass
class Observed:
    """What a testbench saw inside the core, in order: the engine's hash beats, the HCU's
    assignments, the WTU's output beats and the KVMU's fetched beats (per beat: token,
    end), plus the output rows read back per descriptor."""
    hashes: list = field(default_factory=list)
    clusters: list = field(default_factory=list)
    selections: list = field(default_factory=list)   # (cluster, last) per beat
    fetched: list = field(default_factory=list)      # (token, end) per beat
    o_rows: list = field(default_factory=list)       # per descriptor: int16 [Hq, t, d]
    done: int = 0


def window_moves(plan: StreamPlan) -> list:
    """The cluster windows' moves the core makes for the plan, in order
    (``golden.core.window_moves``, flattened)."""
    from golden.core import window_moves as per_descriptor
    return [mv for moves in per_descriptor(plan.golden, plan.cfg) for mv in moves]


def compare_windows(plan: StreamPlan, mem_read) -> tuple[int, list]:
    """The saved cluster windows at ``CTX_BASE`` against the golden model, for a build with
    fewer HCU contexts than windows: every window whose last move was a save has its final
    image's header (clusters opened, last step) in memory. Returns (windows checked,
    differences)."""
    cfg = plan.cfg
    G = cfg.hash_groups
    opened, last = {}, {}
    for ls in plan.golden:
        for g in range(G if ls.clusters.shape[1] else 0):
            w = ls.layer * G + g
            opened[w] = max(opened.get(w, 0), int(ls.clusters[g].max()) + 1)
            last[w] = ls.step
    final = {}
    for kind, w in window_moves(plan):
        final[w] = kind
    words = cfg.ctx_word_bytes
    id_mask = (1 << cfg.cluster_id_bits) - 1
    bad, checked = [], 0
    for w in sorted(w for w, kind in final.items() if kind == "save"):
        raw = mem_read(cfg.ctx_base + w * cfg.ctx_image_bytes, words)
        head = int.from_bytes(raw, "little")
        got = (head & id_mask, (head >> cfg.cluster_id_bits) & ((1 << cfg.step_bits) - 1))
        checked += 1
        if got != (opened[w], last[w]):
            bad.append(f"saved window {w} (layer {w // G}, group {w % G}): header {got}, "
                       f"golden (opened, last step) {(opened[w], last[w])}")
    return checked, bad


def failed_fetches(bad: list) -> tuple[set, list]:
    """Split :func:`compare_run`'s differences of a run with failed fetches: the
    descriptors (``"step S layer L "``) whose fetched tokens differ, and every difference
    that is neither such a fetch nor an output row of one of them (expected empty)."""
    pat = re.compile(r"(fetched tokens|output) of (step \d+ layer \d+ )")
    hit = {mo.group(2) for b in bad
           if (mo := pat.match(b)) and mo.group(1) == "fetched tokens"}
    return hit, [b for b in bad if not ((mo := pat.match(b)) and mo.group(2) in hit)]


def compare_run(plan: StreamPlan, obs: Observed, limit: int = 10, taps: bool = True) -> list:
    """Every difference between the run and the golden model, as sentences naming the
    step, layer, head and token (empty: the run matches bit for bit). ``taps=False``: the
    output rows only (a run without stream monitors)."""
    cfg = plan.cfg
    bad = []
    want_h, want_c, want_sel, want_f = [], [], [], []
    slot_beats = 2 * cfg.head_dim // cfg.kvmu_bus_bytes
    gq, d = cfg.group_size, cfg.head_dim
    for ls in plan.golden:
        where = f"step {ls.step} layer {ls.layer}"
        for hr_i, hr in enumerate(ls.heads):
            if hr.clusters and not ls.dense:      # a dense head: no WTU selection
                want_sel += [(f"{where} head {hr_i}", c) for c in hr.selected] + \
                    [(f"{where} head {hr_i} (end)", None)]
            if hr.selected:
                # a set longer than B is attended in chunks, each fetched again per row
                # tile and pass (docs/core.md): every token that many times, in that many
                # fetches (each closed by an end beat)
                copies, runs = 1, 1
                if chunks := head_chunks(hr, cfg.attn_b_rows):
                    copies = 2 * -(-gq * ls.step_len // cfg.attn_n)
                    runs = copies * len(chunks)
                want_f.append((f"{where} head {hr_i}", sorted(hr.fetched), copies, runs))
        for g in range(ls.hashes.shape[0]):
            for i in range(ls.hashes.shape[1]):
                tok = ls.token0 + ls.hashed + i
                want_h.append((f"{where} group {g} token {tok}", int(ls.hashes[g, i])))
                want_c.append((f"{where} group {g} token {tok}", int(ls.clusters[g, i])))

    def seq(what, want, got):
        for k, (w, g) in enumerate(zip(want, got)):
            if w[1] != g:
                bad.append(f"{what} of {w[0]}: {g}, golden {w[1]}")
        if len(got) != len(want):
            bad.append(f"{what}: {len(got)} produced, golden {len(want)}"
                       + (f" (first missing: {want[len(got)][0]})" if len(got) < len(want)
                          else ""))
    if taps:
        seq("hash", want_h, obs.hashes)
        seq("cluster", want_c, obs.clusters)
        seq("selection", want_sel, [c if not last else None for c, last in obs.selections])
    # fetched tokens: per fetch (closed by an end beat) the set of slot tokens; a head's
    # fetches of a chunked attention together
    runs, cur = [], []
    for tok, end in obs.fetched:
        if end:
            runs.append(sorted(set(cur)))
            cur = []
        else:
            cur.append(tok)
    fetches, r = [], 0
    for *_, n_runs in want_f:
        if r >= len(runs):
            break
        fetches.append(sorted(sum(runs[r:r + n_runs], [])))
        r += n_runs
    fetches += runs[r:]
    if taps:
        seq("fetched tokens", [(w, sorted(toks * copies)) for w, toks, copies, _ in want_f],
            fetches)
    for k, ls in enumerate(plan.golden):
        if k >= len(obs.o_rows):
            bad.append(f"output of step {ls.step} layer {ls.layer}: not produced")
            continue
        got = obs.o_rows[k]
        t = ls.step_len
        for h, hr in enumerate(ls.heads):
            want = hr.o.reshape(gq, t, d)
            g = got[h * gq:(h + 1) * gq].astype(np.int64)
            diff = np.argwhere(g != want)
            for qh, tok, col in diff[:3]:
                bad.append(f"output of step {ls.step} layer {ls.layer} head {h * gq + qh} "
                           f"token {ls.token0 + tok} dim {col}: {g[qh, tok, col]}, golden "
                           f"{want[qh, tok, col]}")
    if not bad and any(hr.attended > cfg.attn_b_rows for ls in plan.golden for hr in ls.heads):
        record("core:chunked attention")     # a run that matched attended a set in chunks
    return bad[:limit] + ([f"... {len(bad) - limit} more"] if len(bad) > limit else [])


# --- the builds the core's runs use (the suite's build points, the demo, the cycle model) ---

# the synthetic streams' shape (synthetic_stream's arguments), the model's geometry among them
SYNTH = dict(n_layers=2, n_q_heads=4, n_kv_heads=2, head_dim=16, n_frames=3,
             tokens_per_frame=8, prefix_tokens=6, header_tokens=1, question_tokens=3)
GEOMETRY = ("n_layers", "n_q_heads", "n_kv_heads", "head_dim")
# the small build those streams run on
SYNTH_BUILD = dict(kvmu_clusters=64, kvmu_blocks=128, near_blocks=16, attn_b_rows=64,
                   core_max_tokens=64, wtu_row_entries=64)


def synth_config(preset="paper", **kw):
    """A small build for the synthetic streams of :data:`SYNTH`."""
    from vrex.config import Config
    geo = {k: SYNTH[k] for k in GEOMETRY}
    return Config.from_preset(preset, **geo, **{**SYNTH_BUILD, **kw})


def trace_config(preset="paper", **kw):
    """The bundled trace's geometry; B holds the longest attended set (889 tokens)."""
    from verif.lib.traces import bundled
    from vrex.config import Config
    tr, _ = bundled()
    return Config.from_preset(preset, **tr.geometry(),
                              **{**dict(attn_b_rows=1024, attn_acc_bits=34), **kw})


def trace_point_config():
    """The build the suite and the demo run the bundled trace's first steps on: the default B
    (sets longer than it in chunks) and two HCU contexts for the trace's three layers' windows.
    One build for both, so the demo compiles from the suite's cache entries."""
    return trace_config(attn_b_rows=256, attn_acc_bits=32, hcu_contexts=2)

