"""A stream as a host lays it out for the core: per descriptor its Q, K, hash-input K and V
in memory with room for O, per layer the sink tokens' K and V and the hyperplanes, the
descriptors in issue order and the register settings, with the golden model's run of the same
stream (``golden.core.run_stream``) to compare the outputs with. The one layout the
testbenches, the demo and a board's host use (:mod:`vrex.host.driver` runs it)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vrex import regmap

__all__ = ["StreamPlan", "plan_stream", "compare_outputs", "ALIGN"]

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


def _alloc(state, n):
    a = state["next"]
    state["next"] = a + -(-n // ALIGN) * ALIGN
    return a


def plan_stream(trace, qt, cfg, *, steps=None, io_base=None, io_size=None) -> StreamPlan:
    """The stream as a host lays it out: per descriptor its Q, K, hash-input K, V, the
    layer's hyperplanes and room for O in the I/O window; per layer the sink tokens' K and
    V ([kv heads, n_sink, d]); the registers (memory windows, ReSV settings, the window,
    interrupts, enable)."""
    from golden.core import run_stream
    from golden.numerics import hyperplanes
    from golden.resv import sink_count
    golden = run_stream(trace, qt, cfg, steps=steps)
    G, d = cfg.hash_groups, cfg.head_dim
    if io_base is None:      # past the saved cluster windows
        io_base = -(-(cfg.ctx_base + cfg.windows * cfg.ctx_image_bytes) // (1 << 20)) << 20
    state = {"next": io_base}
    image = {}
    src = qt.k_pre if cfg.hash_input == "pre_rope" else qt.k
    bounds = trace.step_bounds()
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
