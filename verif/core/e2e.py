"""The end-to-end stimulus and check of the core, shared by both tiers: a stream (the bundled
trace, or a synthetic one) laid out in memory as a host would write it, its descriptors and
register settings, and the comparison of everything the core produced (hashes, cluster
assignments, selections, fetched tokens, output rows) with ``golden.core.run_stream``; a
mismatch names the step, layer, head and token."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from golden.core import head_chunks
from verif.lib.fcov import record
from golden.layout import StreamPlan, compare_outputs, plan_stream

__all__ = ["StreamPlan", "plan_stream", "synthetic_stream", "Observed", "compare_run",
           "failed_fetches",
           "compare_windows", "window_moves"]


def synthetic_stream(seed: int, **kw):
    """A small synthetic stream (``golden.trace.synthetic_trace``: frames of patches that
    drift, so tokens cluster across frames) and its quantised tensors."""
    from golden.trace import quantise, synthetic_trace
    tr = synthetic_trace(seed=seed, **kw)
    return tr, quantise(tr)


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
    gq = cfg.group_size
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
    bad += compare_outputs(plan, obs.o_rows)
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

