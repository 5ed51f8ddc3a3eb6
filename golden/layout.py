"""A stream as a host lays it out for the core: per descriptor its Q, K, hash-input K and V
in memory with room for O, per layer the sink tokens' K and V and the hyperplanes, the
descriptors in issue order and the register settings, with the golden model's run of the same
stream (``golden.core.run_stream``) to compare the outputs with. The one layout the
testbenches, the demo and a board's host use (:mod:`vrex.host.driver` runs it), and the
crop of a trace a board's memory holds (:func:`board_trace`)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from vrex import regmap

__all__ = ["StreamPlan", "plan_stream", "compact_layout", "compare_outputs", "board_trace",
           "ALIGN"]

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
    # per descriptor, address -> bytes written just before it is queued (a plan whose
    # descriptors share one I/O window, :func:`plan_stream`'s ``per_descriptor``); empty:
    # everything is in ``image``
    desc_images: list = field(default_factory=list)

    def o_rows(self, mem_read, k: int) -> np.ndarray:
        """Descriptor k's output ``O [q heads, t, d]`` as int16 from the memory."""
        desc, cfg = self.descriptors[k], self.cfg
        t, d = desc["step_len"], cfg.head_dim
        raw = mem_read(desc["o_addr"], cfg.n_q_heads * t * d * 2)
        return np.frombuffer(raw, "<i2").reshape(cfg.n_q_heads, t, d)


def _alloc(state, n):
    a = state["next"]
    state["next"] = a + -(-n // ALIGN) * ALIGN
    return a


def plan_stream(trace, qt, cfg, *, steps=None, io_base=None, io_size=None,
                layout: dict | None = None, per_descriptor: bool = False,
                fill_o: bool = True) -> StreamPlan:
    """The stream as a host lays it out: per layer the sink tokens' K and V ([kv heads,
    n_sink, d]) and the hyperplanes; per descriptor its Q, K, hash-input K, V and room for
    O in the I/O window (filled with 0xA5 with ``fill_o``: a value the core did not write
    shows); the registers (memory windows, ReSV settings, the window, interrupts, enable).

    ``layout``: the memory's areas (:func:`compact_layout`: the KV tiers, the HC table, the
    saved windows, the I/O window's base) in place of the Config's defaults.
    ``per_descriptor``: every descriptor's buffers in one part of the I/O window, written
    before it is queued (``desc_images``): a small memory runs a stream a descriptor at a
    time."""
    from .core import run_stream
    golden = run_stream(trace, qt, cfg, steps=steps)
    layout = layout or {}
    if io_base is None:
        # past the saved cluster windows
        io_base = layout.get("io_base") or (
            -(-(cfg.ctx_base + cfg.windows * cfg.ctx_image_bytes) // (1 << 20)) << 20)
    state = {"next": io_base}
    image, desc_images = {}, []
    hps, sinks, n_sink = _layer_buffers(trace, qt, cfg, state, image)
    window, end = state["next"], state["next"]
    descs, version = [], 0
    stages, bounds = trace.step_stage(), trace.step_bounds()
    src = qt.k_pre if cfg.hash_input == "pre_rope" else qt.k
    for ls in golden:
        s, l = ls.step, ls.layer
        a, b = int(bounds[s]), int(bounds[s + 1])
        into = image
        if per_descriptor:
            state["next"], into = window, {}
            desc_images.append(into)
        bufs = {}
        for name, arr in (("q_addr", qt.q), ("k_addr", qt.k), ("k_hash_addr", src),
                          ("v_addr", qt.v)):
            x = np.ascontiguousarray(arr[l, :, a:b]).astype(np.int8)
            bufs[name] = _alloc(state, x.nbytes)
            into[bufs[name]] = x.tobytes()
        o_bytes = cfg.n_q_heads * (b - a) * cfg.head_dim * 2
        bufs["o_addr"] = _alloc(state, o_bytes)
        if fill_o:
            into[bufs["o_addr"]] = bytes([0xA5]) * o_bytes      # not zero: unwritten shows
        version += 1
        descs.append(dict(version=version, layer=l, kind=int(stages[s] == "text"),
                          dense=int(ls.dense),
                          step_len=b - a, step=s, hp_addr=hps[l], beta_m=ls.beta_m,
                          beta_shift=ls.beta_shift, n_sink=n_sink, token0=a,
                          sink_k_addr=sinks[l][0], sink_v_addr=sinks[l][1], **bufs))
        end = max(end, state["next"])
    io_size = io_size or -(-(end - io_base) // 4096) * 4096
    regs = _registers(cfg, io_base, io_size, layout)
    return StreamPlan(cfg, golden, descs, image, regs, io_base, io_size, desc_images)


def _layer_buffers(trace, qt, cfg, state, image):
    """The sink tokens' K and V and the hyperplanes of every layer allocated and written
    into ``image``: ``(hyperplanes by layer, (sink K, sink V) by layer, sink tokens)``."""
    from .numerics import hyperplanes
    from .resv import sink_count
    n_sink = sink_count(trace, cfg)
    layers = range(cfg.n_layers)
    sinks, hps = {}, {}
    for l in layers:
        ks, vs = (np.ascontiguousarray(x[l, :, :n_sink]).astype(np.int8) for x in (qt.k, qt.v))
        sinks[l] = (_alloc(state, ks.nbytes), _alloc(state, vs.nbytes))
        image[sinks[l][0]], image[sinks[l][1]] = ks.tobytes(), vs.tobytes()
    for l in layers:
        hp = np.stack([hyperplanes(cfg.hp_seed, l, g, cfg.n_hp, cfg.hash_dim)
                       for g in range(cfg.hash_groups)]).astype(np.int8)
        hps[l] = _alloc(state, hp.nbytes)
        image[hps[l]] = hp.tobytes()
    return hps, sinks, n_sink


def compact_layout(cfg, *, far_slots: int) -> dict:
    """The memory's areas packed from address 0 (a board's small memory): the near tier
    (``near_blocks`` KV blocks), the far tier (``far_slots`` logical blocks), the HC table,
    the saved cluster windows (a build with fewer HCU contexts than windows), then the I/O
    window's base; each area 4 KB aligned. ``end``: the I/O window's base, the bytes the
    areas before it take."""
    up = lambda x: -(-x // 4096) * 4096
    hpg = cfg.heads_per_group
    far_base = up(cfg.near_blocks * cfg.kv_block_bytes)
    hc_base = far_base + up(far_slots * hpg * cfg.kv_block_bytes)
    ctx_base = hc_base + up(cfg.hc_bytes)
    io_base = ctx_base + up(cfg.windows * cfg.ctx_image_bytes if cfg.contexts < cfg.windows
                            else 0)
    return {"near_base": 0, "far_base": far_base, "far_slots": far_slots,
            "hc_base": hc_base, "ctx_base": ctx_base, "io_base": io_base, "end": io_base}


def _registers(cfg, io_base, io_size, layout=None) -> list:
    off = {r.name: r.offset for r in regmap.REGISTERS}
    kv = {**cfg.block_registers("kvmu"), "ctx_base": cfg.ctx_base, **(layout or {})}
    hpg = cfg.heads_per_group
    lo_hi = lambda name, v: [(off[f"{name}_LO"], v & 0xFFFFFFFF), (off[f"{name}_HI"], v >> 32)]
    regs = [*lo_hi("NEAR_BASE", kv["near_base"]), (off["NEAR_BLOCKS"], kv["near_slots"] * hpg),
            *lo_hi("FAR_BASE", kv["far_base"]), (off["FAR_BLOCKS"], kv["far_slots"] * hpg),
            *lo_hi("HC_BASE", kv["hc_base"]), *lo_hi("CTX_BASE", kv["ctx_base"]),
            (off["MAX_BURST"], kv["max_burst"]),
            (off["TH_HD"], cfg.th_hd | (cfg.cluster_cap or 0) << 16),
            (off["AGE"], (cfg.max_age or 0) | int(cfg.max_age is not None) << 16),
            (off["TH_R"], cfg.th_r_fixed),
            *lo_hi("IO_BASE", io_base), (off["IO_SIZE"], io_size),
            (off["IRQ_ENABLE"], 0b111), (off["CTRL"], 1 | int(cfg.centre) << 2)]
    return regs


def compare_outputs(plan: StreamPlan, o_rows: list, per_head: int = 3) -> list:
    """The output rows read back (``o_rows[k]``: descriptor k's ``[q heads, t, d]``) against
    the golden model's, as sentences naming the step, layer, head, token and dimension of
    each difference (at most ``per_head`` a KV head); empty when every row matches."""
    cfg, bad = plan.cfg, []
    gq, d = cfg.group_size, cfg.head_dim
    for k, ls in enumerate(plan.golden):
        if k >= len(o_rows):
            bad.append(f"output of step {ls.step} layer {ls.layer}: not produced")
            continue
        got, t = o_rows[k], ls.step_len
        for h, hr in enumerate(ls.heads):
            want = hr.o.reshape(gq, t, d)
            g = got[h * gq:(h + 1) * gq].astype(np.int64)
            for qh, tok, col in np.argwhere(g != want)[:per_head]:
                bad.append(f"output of step {ls.step} layer {ls.layer} head {h * gq + qh} "
                           f"token {ls.token0 + tok} dim {col}: {g[qh, tok, col]}, golden "
                           f"{want[qh, tok, col]}")
    return bad


def board_trace(trace, board="ulx3s", steps: int | None = None,
                tokens: int | None = None):
    """The crop of ``trace`` the board's memory holds: its first ``steps`` steps, the first
    ``tokens_per_step`` tokens of each, every layer (``steps``, ``tokens``: a smaller
    crop)."""
    from vrex.boards import BOARDS
    from .trace import cut_trace
    b = BOARDS[board] if isinstance(board, str) else board
    c = b.crop
    return cut_trace(trace, range(steps or c["steps"]), range(trace.n_layers),
                     f"{trace.name}_{b.name}", tokens_per_step=tokens or c["tokens_per_step"])
