"""The V-Rex core: the host interface, the retrieval engine (HCU, WTU, KVMU) and the attention
engine joined by a sequencer that runs one descriptor (one layer of one step) at a time."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, ResetInserter, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from vrex.rules import ParameterError

from ..attn.engine import SPAN_BITS, AttentionEngine
from ..dre.hcu import HashClusterUnit
from ..dre.wtu import WicsumThresholdUnit
from ..kvmu.axi import axi4_master_members
from ..kvmu.kvmu import KvMemoryManager
from ..lib import counter_layout
from .dma import AxiJoin, DmaReader, ImageWriter, OutputWriter, Repack
from .map import CORE_PERF, perf_names
from .regs import CoreRegisters
from .seq.common import (A, B, CTX, KV, SUM, SRC_CAND, SRC_DMA, SRC_KV, SRC_PAD, shape_of,
                         tap)
from .seq.top import Sequencer

__all__ = ["VrexCore"]


def core_rules(cfg):
    """What the sequencer needs of a build (``ParameterError`` with the rule)."""
    d, n, bus = cfg.head_dim, cfg.attn_n, cfg.kvmu_bus_bytes
    if d % bus or d % n:
        raise ParameterError(f"head_dim ({d}) must be a multiple of kvmu_bus_bytes ({bus}) "
                             f"and of attn_n ({n}): rows move as whole bus words and chunks")
    if cfg.hash_dim > cfg.attn_k_buf:
        raise ParameterError(f"attn_k_buf ({cfg.attn_k_buf}) must hold a hash input row "
                             f"(hash_dim {cfg.hash_dim})")
    if max(2 * n, bus) % min(2 * n, bus):
        raise ParameterError(f"an output beat (2·attn_n = {2 * n} bytes) and the bus "
                             f"({bus} bytes): one must divide the other")
    if not (isinstance(cfg.core_max_tokens, int) and 1 <= cfg.core_max_tokens and
            cfg.core_max_tokens * cfg.group_size < 1 << 16):
        raise ParameterError(f"core_max_tokens must be a positive integer with "
                             f"core_max_tokens · group_size below 65536 (a command's rows), "
                             f"not {cfg.core_max_tokens!r}")
    if cfg.attn_b_rows % cfg.attn_n:
        raise ParameterError("attn_b_rows must be a multiple of attn_n")
    beats = 2 * cfg.heads_per_group * d // bus
    if not isinstance(cfg.core_dma_depth, int) or cfg.core_dma_depth < max(16, beats):
        raise ParameterError(f"core_dma_depth ({cfg.core_dma_depth}) must hold one token's "
                             f"K and V rows of a hash group ({beats} beats)")


class VrexCore(wiring.Component):
    """One Verilog core: ``s_axil_*`` registers (``vrex.regmap``), one AXI4 master
    ``m_axi_*``, ``irq`` and ``error`` (``ERROR_CODE`` holds an error: a board's LED).

    A descriptor (one layer of one step, docs/core.md) runs as: announce its version to the
    KVMU; per KV head h, the candidate list's counts (``CAND`` counts only), the scoring
    command (counts as the engine's column vector, the representative keys from a second
    ``CAND`` into B, the head's query rows into A) whose rows go straight into the WTU, the
    WTU's selection kept, the attended set's size (sinks + the selected clusters' past
    counts + the step's tokens), the light-attention command with K and V in pairs: the
    fetched clusters (``FETCH`` by candidate index, straight from ``o_kv``), the sink rows
    and the step's own rows (read DMA), then the query rows; the output rows written to O.
    Then per hash group: the hash command (hyperplanes into B, the group's hash-input rows
    of the non-sink tokens into A) whose words go straight into the HCU; the HCU's
    assignments queued; each token stored (``STORE``) once its K and V rows are in the read
    DMA without error. That is the ``select_first`` order: the selection reads the HC table
    as it stood before the step. In the ``cluster_first`` order (``Config.order``) the hash
    groups run first and then the heads, whose representative keys include the step's own
    tokens while their counts and fetches (``FETCH`` with ``past``) are the earlier steps'
    members (``golden.resv``).

    Cluster windows: the HCU holds ``contexts`` of the model's ``n_layers · hash_groups``
    windows; with fewer, window ``w = layer · G + group`` lives in context ``w mod
    contexts``, and before a group is hashed a context holding another window is swapped:
    its window saved (``SAVE``, the image written to ``CTX_BASE + window ·
    ctx_image_bytes``), then ``w`` loaded from its image (``LOAD``), or emptied (``FLUSH``)
    if it was never saved. The centring sums stay on chip for every window.

    Errors (``ERROR_CODE``, the first kept): the blocks' refusals and bus errors mapped to
    the map's codes; the descriptor still runs to its end (nothing hangs), and once a read
    failed no token of it is stored. A soft reset stops issuing bus addresses, lets every
    outstanding burst finish (a write burst completed with no byte enabled), then resets
    every block: a new stream.
    """

    PERF = CORE_PERF

    def __init__(self, cfg):
        core_rules(cfg)
        self._cfg = cfg
        self.engine = AttentionEngine.from_config(cfg)
        self.hcu = HashClusterUnit.from_config(cfg)
        self.wtu = WicsumThresholdUnit.from_config(cfg)
        self.kvmu = KvMemoryManager.from_config(cfg)
        perf = perf_names()
        self.regs = CoreRegisters(**cfg.block_params("core_regs"), perf=perf)
        self._perf_names = perf
        ab = cfg.kvmu_addr_bits
        self.perf_layout = counter_layout(self.PERF, cfg.counter_bits)
        r = self.regs.signature.members
        super().__init__({
            **{k: v for k, v in r.items() if k.startswith("s_axil_")},
            **axi4_master_members("m_axi", ab, 8 * cfg.kvmu_bus_bytes),
            "irq": Out(1), "error": Out(1),
            "perf": Out(self.perf_layout),
        })

    @classmethod
    def from_config(cls, cfg) -> "VrexCore":
        return cls(cfg)

    @property
    def memory_bits(self) -> int:
        """Bits of every memory: the blocks' and the core's own (read DMA buffer, the HCU's
        assignments of a step, candidate counts and selections, centring sums, the image
        writer's queues)."""
        cfg = self._cfg
        blocks = sum(getattr(b, "memory_bits", 0) for b in (self.engine, self.hcu, self.wtu,
                                                             self.kvmu))
        own = (cfg.core_dma_depth * (8 * cfg.kvmu_bus_bytes + 4)
               + cfg.core_max_tokens * cfg.cluster_id_bits
               + cfg.attn_b_rows * (cfg.count_bits + cfg.cluster_id_bits)
               + cfg.n_layers * cfg.hash_groups * (cfg.hash_dim * 32 + 32))
        if self.swaps:          # the image writer's burst lengths and addresses
            own += 8 * (8 + cfg.kvmu_addr_bits)
        return blocks + own

    @property
    def swaps(self) -> bool:
        """The build moves cluster windows through memory (fewer contexts than windows)."""
        return self._cfg.contexts < self._cfg.windows

    def _layouts(self, movers) -> dict:
        """The payloads of the blocks' streams the sequencer drives, takes or watches."""
        e, h, w, k, r = self.engine, self.hcu, self.wtu, self.kvmu, self.regs
        lay = dict(desc=shape_of(r, "o_desc"), error=shape_of(r, "i_error"),
                   ecmd=e.cmd_layout, bias=e.bias_layout, kcmd=shape_of(k, "i_cmd"),
                   kver=shape_of(k, "i_version"), cand=shape_of(k, "o_cand"),
                   kv=shape_of(k, "o_kv"), sel=shape_of(w, "o"),
                   cluster_bits=h.out_layout.members["cluster"],
                   job=movers["dma"].job_layout, dma=movers["dma"].out_layout,
                   kv_left=SPAN_BITS + exact_log2(k.beats_per_token))
        if self.swaps:
            lay.update(ctx_cmd=shape_of(h, "i_ctx"), ctx_bits=h.ctx_bits,
                       header=h.header_layout, img_job=movers["img"].job_layout)
        return lay

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        reset_blocks = Signal()
        m.submodules.regs = self.regs
        rst = lambda e: ResetInserter(reset_blocks)(e)
        m.submodules.engine = rst(self.engine)
        m.submodules.hcu = rst(self.hcu)
        m.submodules.wtu = rst(self.wtu)
        m.submodules.kvmu = rst(self.kvmu)
        bus, ab = cfg.kvmu_bus_bytes, cfg.kvmu_addr_bits
        mv = dict(
            dma=DmaReader(bus_bytes=bus, addr_bits=ab, burst=16, depth=cfg.core_dma_depth),
            out=OutputWriter(n=cfg.attn_n, value_bits=8 + cfg.out_frac_bits,
                             row_values=cfg.head_dim, bus_bytes=bus, addr_bits=ab),
            rep_a=Repack(bus, cfg.attn_n), rep_b=Repack(bus, cfg.attn_n))
        if self.swaps:
            # a cluster window's image: context words of ctx_word_bytes, to and from the bus
            mv.update(img=ImageWriter(bus_bytes=bus, addr_bits=ab),
                      rep_save=Repack(cfg.ctx_word_bytes, bus),
                      rep_load=Repack(bus, cfg.ctx_word_bytes))
        for name, part in mv.items():
            m.submodules[name] = rst(part)
        m.submodules.join = join = AxiJoin(addr_bits=ab, bus_bytes=bus)
        if self.swaps:
            wiring.connect(m, mv["rep_save"].o, mv["img"].i)
        # the sequencer, in its own module so the soft reset clears all its state
        seq = Sequencer(cfg, layouts=self._layouts(mv),
                        kv_lg=exact_log2(self.kvmu.beats_per_token), swaps=self.swaps)
        m.submodules.seq = rst(seq)
        self._host(m, seq, join, reset_blocks)
        self._bus(m, join, mv, seq)
        self._datapath(m, mv, seq)
        self._join_seq(m, mv, seq)
        self._counters(m, seq, mv, reset_blocks)
        return m

    # --- the host side -----------------------------------------------------------------------
    def _host(self, m, seq, join, reset_blocks):
        cfg, regs = self._cfg, self.regs
        for k in self.signature.members:
            if k.startswith("s_axil_"):
                port, inner = getattr(self, k), getattr(regs, k)
                if self.signature.members[k].flow == In:
                    m.d.comb += inner.eq(port)
                else:
                    m.d.comb += port.eq(inner)
        m.d.comb += [self.irq.eq(regs.irq), self.error.eq(regs.error)]
        hpg = cfg.heads_per_group
        ab = cfg.kvmu_addr_bits
        k = self.kvmu
        near_slots = self._per_group(m, regs.near_blocks, hpg, "near_slots")
        far_slots = self._per_group(m, regs.far_blocks, hpg, "far_slots")
        m.d.comb += [
            k.near_base.eq(Cat(regs.near_base_lo, regs.near_base_hi)[:ab]),
            k.far_base.eq(Cat(regs.far_base_lo, regs.far_base_hi)[:ab]),
            k.hc_base.eq(Cat(regs.hc_base_lo, regs.hc_base_hi)[:ab]),
            seq.ctx_base.eq(Cat(regs.ctx_base_lo, regs.ctx_base_hi)[:ab]),
            k.near_slots.eq(Mux(near_slots >> len(k.near_slots) != 0,
                                (1 << len(k.near_slots)) - 1, near_slots)),
            k.far_slots.eq(Mux(far_slots >> len(k.far_slots) != 0,
                               (1 << len(k.far_slots)) - 1, far_slots)),
            k.max_burst.eq(Mux(regs.max_burst > 256, 0, regs.max_burst)),
            self.hcu.th_hd.eq(regs.th_hd[:len(self.hcu.th_hd)]),
            self.hcu.cluster_cap.eq(regs.th_hd[16:32]),
            self.hcu.max_age.eq(regs.age[:len(self.hcu.max_age)]),
            self.hcu.age_limit.eq(regs.age[16]),
            self.wtu.th_r.eq(regs.th_r[:len(self.wtu.th_r)]),
        ]
        # soft reset: stop issuing, let every burst finish, then reset the blocks
        resetting = Signal()
        with m.If(regs.soft_reset):
            m.d.sync += resetting.eq(1)
        with m.Elif(resetting & join.quiet):
            m.d.comb += reset_blocks.eq(1)
            m.d.sync += resetting.eq(0)
        m.d.comb += [join.abort.eq(resetting), seq.resetting.eq(resetting)]
        perf = []
        for name, blk in (("hcu", self.hcu), ("wtu", self.wtu), ("attn", self.engine),
                          ("kvmu", self.kvmu), ("core", self)):
            for c in type(blk).PERF:
                perf.append(getattr(blk.perf, c))
        for i, v in enumerate(perf):
            m.d.comb += regs.perf_in[i].eq(v)

    @staticmethod
    def _per_group(m, blocks, hpg: int, name: str):
        """``blocks // hpg`` of a register (KV blocks to logical blocks of a hash group): a
        shift when ``hpg`` is a power of two, else a restoring divider, a quotient bit a
        cycle, run again whenever the register changes (its result follows a write within
        33 cycles; a combinational divider would cost thousands of gates for a value the
        host writes once)."""
        if hpg & (hpg - 1) == 0:
            return blocks >> exact_log2(hpg)
        out = Signal(32, name=name)
        src = Signal(32, name=f"{name}_src")
        busy = Signal(name=f"{name}_busy")
        k = Signal(5, name=f"{name}_bit")
        rem = Signal(range(2 * hpg), name=f"{name}_rem")
        quo = Signal(32, name=f"{name}_quo")
        with m.If(~busy & (blocks != src)):
            m.d.sync += [src.eq(blocks), busy.eq(1), k.eq(31), rem.eq(0), quo.eq(0)]
        with m.If(busy):
            r2 = Cat(src.bit_select(k, 1), rem)
            ge = r2 >= hpg
            m.d.sync += [rem.eq(Mux(ge, r2 - hpg, r2)), quo.eq(Cat(ge, quo[:31])),
                         k.eq(k - 1)]
            with m.If(k == 0):
                m.d.sync += [busy.eq(0), out.eq(Cat(ge, quo[:31]))]
        return out

    def _bus(self, m, j, mv, seq):
        k = self.kvmu
        img = mv.get("img")
        wsel = seq.wsel if img is not None else None   # the write half serves the image writer
        for name in axi4_master_members("m_axi", 1, 8).keys():
            f = name[6:]
            mine, a = getattr(self, name), getattr(j, name)
            if self.signature.members[name].flow == Out:
                m.d.comb += mine.eq(a)
            else:
                m.d.comb += a.eq(mine)
            ka, jb = getattr(k, name), getattr(j, f"a_{f}")
            if k.signature.members[name].flow == Out:
                m.d.comb += jb.eq(ka)
            else:
                m.d.comb += ka.eq(jb)
            src = mv["dma"] if f.startswith(("ar", "r")) else mv["out"]
            sb, jb = getattr(src, name), getattr(j, f"b_{f}")
            if src is mv["out"] and img is not None:
                # the output rows or a window's image: never both at once (``wsel``)
                ib = getattr(img, name)
                if src.signature.members[name].flow == Out:
                    m.d.comb += jb.eq(Mux(wsel, ib, sb))
                elif f in ("awready", "wready", "bvalid"):
                    m.d.comb += [sb.eq(jb & ~wsel), ib.eq(jb & wsel)]
                else:
                    m.d.comb += [sb.eq(jb), ib.eq(jb)]
            elif src.signature.members[name].flow == Out:
                m.d.comb += jb.eq(sb)
            else:
                m.d.comb += sb.eq(jb)

    # --- the data paths between blocks ---------------------------------------------------
    def _datapath(self, m, mv, seq):
        e, h, w, k, d = self.engine, self.hcu, self.wtu, self.kvmu, mv["dma"]
        wiring.connect(m, e.o_hash, h.i)
        wiring.connect(m, e.o_score, w.i)
        wiring.connect(m, e.o_attn, mv["out"].i)
        wiring.connect(m, mv["rep_a"].o, e.a)
        wiring.connect(m, mv["rep_b"].o, e.b)
        m.d.comb += e.o_gemm.ready.eq(1)
        b_src, kv_left = seq.b_src, seq.kv_left
        dest = d.o.payload.dest
        ra, rb = mv["rep_a"].i, mv["rep_b"].i
        if "rep_load" in mv:
            m.d.comb += [mv["rep_load"].i.payload.eq(d.o.payload.data),
                         mv["rep_load"].i.valid.eq(d.o.valid & (dest == CTX))]
        m.d.comb += [ra.payload.eq(d.o.payload.data), k.i_data.payload.eq(d.o.payload.data),
                     ra.valid.eq(d.o.valid & (dest == A)),
                     k.i_data.valid.eq(d.o.valid & (dest == KV) & ~seq.drop_kv)]
        with m.Switch(b_src):
            with m.Case(SRC_DMA):
                m.d.comb += [rb.payload.eq(d.o.payload.data),
                             rb.valid.eq(d.o.valid & (dest == B))]
            with m.Case(SRC_CAND):
                m.d.comb += [rb.payload.eq(k.o_cand.payload.data),
                             rb.valid.eq(k.o_cand.valid & ~k.o_cand.payload.end)]
            with m.Case(SRC_KV):
                m.d.comb += [rb.payload.eq(k.o_kv.payload.data),
                             rb.valid.eq(k.o_kv.valid & ~k.o_kv.payload.end &
                                         (kv_left != 0))]
            with m.Case(SRC_PAD):
                m.d.comb += [rb.payload.eq(0), rb.valid.eq(1)]
        with m.Switch(dest):
            with m.Case(A):
                m.d.comb += d.o.ready.eq(ra.ready)
            with m.Case(B):
                m.d.comb += d.o.ready.eq((b_src == SRC_DMA) & rb.ready)
            with m.Case(KV):
                m.d.comb += d.o.ready.eq(seq.drop_kv | k.i_data.ready)
            with m.Case(SUM):
                m.d.comb += d.o.ready.eq(1)
            if "rep_load" in mv:
                with m.Case(CTX):
                    m.d.comb += d.o.ready.eq(mv["rep_load"].i.ready)
            with m.Default():
                m.d.comb += d.o.ready.eq(seq.dot_ready)
        # the ends of candidate lists and fetches are the sequencer's; it takes o_cand beats
        # itself while it reads a list's counts
        m.d.comb += [
            k.o_cand.ready.eq(Mux(seq.cand_take, 1, (b_src == SRC_CAND) &
                                  (rb.ready | k.o_cand.payload.end))),
            k.o_kv.ready.eq((b_src == SRC_KV) &
                            (rb.ready | k.o_kv.payload.end | (kv_left == 0))),
        ]
        # the bus beats the engine still expects from the KVMU's fetches: a fetch that ends
        # short (a read error drops its remaining beats, a stale or refused fetch delivers
        # none) is padded with zero beats, beats past the count are dropped, so the engine
        # always gets its command's tokens and never waits for ever (the error is reported
        # from the fetch's end beat; docs/core.md); counted in the sequencer's B source
        m.d.comb += seq.kv_take.eq(rb.valid & rb.ready &
                                   ((b_src == SRC_KV) | (b_src == SRC_PAD)))

    def _join_seq(self, m, mv, seq):
        """The sequencer's ports to the register file, the blocks and the movers."""
        e, h, w, k, regs, d, o = (self.engine, self.hcu, self.wtu, self.kvmu, self.regs,
                                  mv["dma"], mv["out"])
        wiring.connect(m, regs.o_desc, seq.desc)
        wiring.connect(m, seq.i_error, regs.i_error)
        wiring.connect(m, seq.ecmd, e.cmd)
        wiring.connect(m, seq.bias, e.bias)
        wiring.connect(m, seq.kcmd, k.i_cmd)
        wiring.connect(m, seq.kver, k.i_version)
        wiring.connect(m, w.o, seq.sel)
        wiring.connect(m, seq.job, d.job)
        for port, stream_ in ((seq.cand, k.o_cand), (seq.kv, k.o_kv), (seq.dma, d.o)):
            tap(m, port, stream_)
        ao = e.o_attn
        m.d.comb += [
            seq.assign.valid.eq(h.o.valid), seq.assign.payload.eq(h.o.payload.cluster),
            h.o.ready.eq(seq.assign.ready),
            seq.ctrl.eq(regs.ctrl[:3]), regs.done.eq(seq.done),
            regs.done_version.eq(seq.done_version), regs.busy.eq(seq.busy),
            seq.attn_last.eq(ao.valid & ao.ready & ao.payload.last),
            seq.dma_idle.eq(d.idle), seq.dma_received.eq(d.received),
            seq.dma_err.error.eq(d.error), seq.dma_err.addr.eq(d.error_addr),
            seq.out_idle.eq(o.idle), seq.out_err.error.eq(o.error),
            seq.out_err.addr.eq(o.error_addr), o.base.eq(seq.out_base),
            d.clear.eq(seq.dma_clear), o.clear.eq(seq.out_clear),
            seq.k_busy.eq(k.busy), seq.k_error.eq(k.error), seq.k_code.eq(k.error_code),
            seq.k_addr.eq(k.error_addr), seq.e_error.eq(e.error), seq.h_error.eq(h.error),
            seq.h_refusals.eq(h.perf.refused),
            seq.w_error.eq(w.error),
        ]
        if self.swaps:
            img = mv["img"]
            wiring.connect(m, seq.ctx_cmd, h.i_ctx)
            wiring.connect(m, h.o_ctx, seq.ctx_save)
            wiring.connect(m, seq.ctx_load, h.i_ctxd)
            wiring.connect(m, seq.img_job, img.job)
            wiring.connect(m, seq.rep_save, mv["rep_save"].i)
            wiring.connect(m, mv["rep_load"].o, seq.rep_load)
            m.d.comb += [img.clear.eq(seq.img_clear), seq.img_idle.eq(img.idle),
                         seq.img_err.error.eq(img.error), seq.img_err.addr.eq(img.error_addr)]

    def _counters(self, m, seq, mv, reset_blocks):
        p, cb = self.perf, self._cfg.counter_bits
        top = (1 << cb) - 1

        def bump(c, cond=1):
            with m.If(cond & (c != top)):
                m.d.sync += c.eq(c + 1)
        phase = seq.phase
        bump(p.descriptors, self.regs.done)
        bump(p.busy, phase != 0)
        bump(p.predict, phase == 1)
        bump(p.attend, phase == 2)
        bump(p.hash, phase == 3)
        bump(p.store, phase == 4)
        bump(p.errors, seq.error_now)
        bump(p.swap, phase == 5)
        bump(p.ahead, seq.ahead)
        m.d.comb += [p.dma_bursts.eq(mv["dma"].bursts), p.dma_beats.eq(mv["dma"].beats),
                     p.out_bursts.eq(mv["out"].bursts)]
        with m.If(reset_blocks):
            m.d.sync += [getattr(p, c).eq(0) for c in self.PERF
                         if c not in ("dma_bursts", "dma_beats", "out_bursts")]
