"""The V-Rex core: the host interface, the retrieval engine (HCU, WTU, KVMU) and the attention
engine joined by a sequencer that runs one descriptor (one layer of one step) at a time."""
from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Const, Module, Mux, ResetInserter, Signal, signed
from amaranth.lib import data, fifo, memory, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from vrex import regmap
from vrex.rules import ParameterError

from ..attn.engine import SPAN_BITS, AttentionEngine, Kind, Part
from ..dre.hcu import HashClusterUnit
from ..dre.wtu import WicsumThresholdUnit
from ..kvmu.axi import axi4_master_members
from ..kvmu.kvmu import KvMemoryManager
from ..lib import counter_layout
from .dma import AxiJoin, DmaReader, ImageWriter, OutputWriter, Repack
from .map import CORE_PERF, perf_names
from .regs import CoreRegisters

__all__ = ["VrexCore"]

# DMA destinations: the engine's A and B, the KVMU's store data, the centring sums, the
# centring dot products, a saved cluster window on its way into the HCU
_A, _B, _KV, _SUM, _DOT, _CTX = 0, 1, 2, 3, 4, 5
# where the engine's B operand comes from
_SRC_DMA, _SRC_CAND, _SRC_KV, _SRC_PAD = 0, 1, 2, 3

_E = regmap.ERRORS


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
    ``m_axi_*`` and ``irq``.

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
    DMA without error. The selection reads the HC table as it stood before the step (the
    golden model's order, ``golden.resv``).

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
            "irq": Out(1),
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

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        x = SimpleNamespace()
        x.reset_blocks = Signal()
        x.clear_errs = Signal()            # a descriptor starts: the movers' errors clear
        m.submodules.regs = regs = self.regs
        rst = lambda e: ResetInserter(x.reset_blocks)(e)
        m.submodules.engine = rst(self.engine)
        m.submodules.hcu = rst(self.hcu)
        m.submodules.wtu = rst(self.wtu)
        m.submodules.kvmu = rst(self.kvmu)
        x.dma = DmaReader(bus_bytes=cfg.kvmu_bus_bytes, addr_bits=cfg.kvmu_addr_bits,
                          burst=16, depth=cfg.core_dma_depth)
        x.out = OutputWriter(n=cfg.attn_n, value_bits=8 + cfg.out_frac_bits,
                             row_values=cfg.head_dim, bus_bytes=cfg.kvmu_bus_bytes,
                             addr_bits=cfg.kvmu_addr_bits)
        x.join = AxiJoin(addr_bits=cfg.kvmu_addr_bits, bus_bytes=cfg.kvmu_bus_bytes)
        m.submodules.dma, m.submodules.out = rst(x.dma), rst(x.out)
        m.submodules.join = x.join
        x.rep_a = Repack(cfg.kvmu_bus_bytes, cfg.attn_n)
        x.rep_b = Repack(cfg.kvmu_bus_bytes, cfg.attn_n)
        m.submodules.rep_a, m.submodules.rep_b = rst(x.rep_a), rst(x.rep_b)
        x.img = None
        if self.swaps:
            # a cluster window's image: context words of ctx_word_bytes, to and from the bus
            x.img = ImageWriter(bus_bytes=cfg.kvmu_bus_bytes, addr_bits=cfg.kvmu_addr_bits)
            x.rep_save = Repack(cfg.ctx_word_bytes, cfg.kvmu_bus_bytes)
            x.rep_load = Repack(cfg.kvmu_bus_bytes, cfg.ctx_word_bytes)
            m.submodules.img = rst(x.img)
            m.submodules.rep_save, m.submodules.rep_load = rst(x.rep_save), rst(x.rep_load)
            wiring.connect(m, x.rep_save.o, x.img.i)
        self._host(m, x)
        self._bus(m, x)
        self._datapath(m, x)
        self._sequencer(m, x)
        self._counters(m, x)
        return m

    # --- the host side -----------------------------------------------------------------------
    def _host(self, m, x):
        cfg, regs = self._cfg, self.regs
        for k in self.signature.members:
            if k.startswith("s_axil_"):
                port, inner = getattr(self, k), getattr(regs, k)
                if self.signature.members[k].flow == In:
                    m.d.comb += inner.eq(port)
                else:
                    m.d.comb += port.eq(inner)
        m.d.comb += self.irq.eq(regs.irq)
        hpg = cfg.heads_per_group
        ab = cfg.kvmu_addr_bits
        k = self.kvmu
        x.ctx_base = Signal(ab)
        near_slots = self._per_group(m, regs.near_blocks, hpg, "near_slots")
        far_slots = self._per_group(m, regs.far_blocks, hpg, "far_slots")
        m.d.comb += [
            k.near_base.eq(Cat(regs.near_base_lo, regs.near_base_hi)[:ab]),
            k.far_base.eq(Cat(regs.far_base_lo, regs.far_base_hi)[:ab]),
            k.hc_base.eq(Cat(regs.hc_base_lo, regs.hc_base_hi)[:ab]),
            x.ctx_base.eq(Cat(regs.ctx_base_lo, regs.ctx_base_hi)[:ab]),
            k.near_slots.eq(Mux(near_slots >> len(k.near_slots) != 0,
                                (1 << len(k.near_slots)) - 1, near_slots)),
            k.far_slots.eq(Mux(far_slots >> len(k.far_slots) != 0,
                               (1 << len(k.far_slots)) - 1, far_slots)),
            k.max_burst.eq(Mux(regs.max_burst > 256, 0, regs.max_burst)),
            self.hcu.th_hd.eq(regs.th_hd[:len(self.hcu.th_hd)]),
            self.hcu.max_age.eq(regs.age[:len(self.hcu.max_age)]),
            self.hcu.age_limit.eq(regs.age[16]),
            self.wtu.th_r.eq(regs.th_r[:len(self.wtu.th_r)]),
        ]
        # soft reset: stop issuing, let every burst finish, then reset the blocks
        x.resetting = Signal()
        with m.If(regs.soft_reset):
            m.d.sync += x.resetting.eq(1)
        with m.Elif(x.resetting & x.join.quiet):
            m.d.comb += x.reset_blocks.eq(1)
            m.d.sync += x.resetting.eq(0)
        m.d.comb += x.join.abort.eq(x.resetting)
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

    def _bus(self, m, x):
        j, k = x.join, self.kvmu
        x.wsel = Signal()                  # the write half serves the image writer
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
            src = x.dma if f.startswith(("ar", "r")) else x.out
            sb, jb = getattr(src, name), getattr(j, f"b_{f}")
            if src is x.out and x.img is not None:
                # the output rows or a window's image: never both at once (``x.wsel``)
                ib = getattr(x.img, name)
                if src.signature.members[name].flow == Out:
                    m.d.comb += jb.eq(Mux(x.wsel, ib, sb))
                elif f in ("awready", "wready", "bvalid"):
                    m.d.comb += [sb.eq(jb & ~x.wsel), ib.eq(jb & x.wsel)]
                else:
                    m.d.comb += [sb.eq(jb), ib.eq(jb)]
            elif src.signature.members[name].flow == Out:
                m.d.comb += jb.eq(sb)
            else:
                m.d.comb += sb.eq(jb)

    # --- the data paths between blocks ---------------------------------------------------
    def _datapath(self, m, x):
        e, h, w, k, d = self.engine, self.hcu, self.wtu, self.kvmu, x.dma
        wiring.connect(m, e.o_hash, h.i)
        wiring.connect(m, e.o_score, w.i)
        wiring.connect(m, e.o_attn, x.out.i)
        wiring.connect(m, x.rep_a.o, e.a)
        wiring.connect(m, x.rep_b.o, e.b)
        m.d.comb += e.o_gemm.ready.eq(1)
        x.b_src = Signal(2)
        x.kv_lg = exact_log2(self.kvmu.beats_per_token)     # bus beats of a token, log2
        x.kv_left = Signal(SPAN_BITS + x.kv_lg)
        x.drop_kv = Signal()               # a read failed: the store data is dropped
        dest = d.o.payload.dest
        ra, rb = x.rep_a.i, x.rep_b.i
        if x.img is not None:
            m.d.comb += [x.rep_load.i.payload.eq(d.o.payload.data),
                         x.rep_load.i.valid.eq(d.o.valid & (dest == _CTX))]
        m.d.comb += [ra.payload.eq(d.o.payload.data), k.i_data.payload.eq(d.o.payload.data),
                     ra.valid.eq(d.o.valid & (dest == _A)),
                     k.i_data.valid.eq(d.o.valid & (dest == _KV) & ~x.drop_kv)]
        with m.Switch(x.b_src):
            with m.Case(_SRC_DMA):
                m.d.comb += [rb.payload.eq(d.o.payload.data),
                             rb.valid.eq(d.o.valid & (dest == _B))]
            with m.Case(_SRC_CAND):
                m.d.comb += [rb.payload.eq(k.o_cand.payload.data),
                             rb.valid.eq(k.o_cand.valid & ~k.o_cand.payload.end)]
            with m.Case(_SRC_KV):
                m.d.comb += [rb.payload.eq(k.o_kv.payload.data),
                             rb.valid.eq(k.o_kv.valid & ~k.o_kv.payload.end &
                                         (x.kv_left != 0))]
            with m.Case(_SRC_PAD):
                m.d.comb += [rb.payload.eq(0), rb.valid.eq(1)]
        x.dot_ready = Signal()
        with m.Switch(dest):
            with m.Case(_A):
                m.d.comb += d.o.ready.eq(ra.ready)
            with m.Case(_B):
                m.d.comb += d.o.ready.eq((x.b_src == _SRC_DMA) & rb.ready)
            with m.Case(_KV):
                m.d.comb += d.o.ready.eq(x.drop_kv | k.i_data.ready)
            with m.Case(_SUM):
                m.d.comb += d.o.ready.eq(1)
            if x.img is not None:
                with m.Case(_CTX):
                    m.d.comb += d.o.ready.eq(x.rep_load.i.ready)
            with m.Default():
                m.d.comb += d.o.ready.eq(x.dot_ready)
        # the ends of candidate lists and fetches are the sequencer's
        x.cand_end = Signal()
        x.kv_end = Signal()
        x.cand_take = Signal()            # the sequencer takes o_cand beats itself
        m.d.comb += [
            k.o_cand.ready.eq(Mux(x.cand_take, 1, (x.b_src == _SRC_CAND) &
                                  (rb.ready | k.o_cand.payload.end))),
            k.o_kv.ready.eq((x.b_src == _SRC_KV) &
                            (rb.ready | k.o_kv.payload.end | (x.kv_left == 0))),
        ]
        # the bus beats the engine still expects from the KVMU's fetches: a fetch that ends
        # short (a read error drops its remaining beats, a stale or refused fetch delivers
        # none) is padded with zero beats, beats past the count are dropped, so the engine
        # always gets its command's tokens and never waits for ever (the error is reported
        # from the fetch's end beat; docs/core.md)
        # (counted in the sequencer, which owns b_src and kv_left)
        x.kv_take = Signal()
        m.d.comb += x.kv_take.eq(rb.valid & rb.ready &
                                 ((x.b_src == _SRC_KV) | (x.b_src == _SRC_PAD)))

    # --- light attention over a set longer than B ----------------------------------------
    def _chunked_attention(self, m, x, lc, s):
        """The states of a KV head's light attention over a set longer than B (``L_*``, in
        the sequencer's FSM; docs/core.md): the set in chunks of whole selected clusters (as
        many as fit B, fetched from the KVMU) and a last chunk of the sinks and the step's own
        tokens (from memory); per row tile of n query rows, the engine's maximum's pass over
        the chunks, then its sums' pass, whose last chunk writes the tile's output rows. A
        selected cluster larger than B is refused first (``CORE_LIMIT``), before any command."""
        cfg = self._cfg
        e = self.engine
        n, d, brows = cfg.attn_n, cfg.head_dim, cfg.attn_b_rows
        lg = exact_log2(n)
        sm_r, cm_f, nsel, i, pq = s["sm_r"], s["cm_f"], s["nsel"], s["i"], s["pq"]
        t, rows, ptr, dsc = s["t"], s["rows"], s["ptr"], s["dsc"]
        push, raise_error = s["push"], s["raise_error"]

        def count_of(idx):
            """Selected cluster ``idx``'s member count (its candidate's, from the list)."""
            m.d.comb += [sm_r.addr.eq(idx), cm_f.addr.eq(sm_r.data >> lg)]
            return cm_f.data[sm_r.data[:lg]] if n > 1 else cm_f.data[0]

        tile_rows = Signal(range(n + 1))
        m.d.comb += tile_rows.eq(Mux(rows - lc.row0 >= n, n, rows - lc.row0))
        with m.State("L_CHECK"):
            big = count_of(i) > brows
            with m.If(i == nsel):
                m.next = "L_PASS"
            with m.Elif(big):
                raise_error(_E["CORE_LIMIT"][0])
                m.next = "H_NEXT"
            with m.Else():
                m.d.sync += i.eq(i + 1)
        with m.State("L_PASS"):
            m.d.sync += [lc.ci.eq(0), lc.ci0.eq(0), lc.clen.eq(0), lc.t0.eq(0), lc.final.eq(0)]
            m.next = "L_PLAN"
        with m.State("L_PLAN"):
            # whole clusters while they fit; then, after the last, the sinks and own tokens
            count = count_of(lc.ci)
            with m.If(lc.ci == nsel):
                with m.If(lc.clen == 0):
                    m.d.sync += [lc.clen.eq(s["sinks"] + t), lc.final.eq(1)]
                m.next = "L_CMD"
            with m.Elif(lc.clen + count > brows):
                m.next = "L_CMD"
            with m.Else():
                m.d.sync += [lc.clen.eq(lc.clen + count), lc.ci.eq(lc.ci + 1)]
        with m.State("L_CMD"):
            # a chunk of fetched tokens turns B's source to the KVMU once the DMA's B jobs
            # (the last chunk's, of the pass before) are through
            with m.If(lc.final | (x.dma.idle & (pq.level == 0) & (x.b_src == _SRC_DMA))):
                s["engine_cmd"](kind=Kind.ATTEND, m=tile_rows, k=d, l=lc.clen, causal=t,
                                pairs=1, part=Mux(lc.sums, Part.SUM, Part.MAX),
                                first=lc.t0 == 0, final=lc.final, span=lc.len - lc.t0,
                                pos0=lc.pos0, row0=lc.row0, **s["beta"])
                with m.If(e.cmd.ready):
                    m.d.sync += x.attn_done.eq(0)
                    with m.If(lc.final):
                        m.next = "L_SINKS"
                    with m.Else():
                        m.d.sync += [x.b_src.eq(_SRC_KV), i.eq(lc.ci0),
                                     x.kv_left.eq(lc.clen << x.kv_lg)]
                        m.next = "L_Q"
        with m.State("L_SINKS"):
            with m.If(s["sinks"] == 0):
                m.next = "L_OWN"
            with m.Else():
                s["sink_pairs"]()
                with m.If(pq.w_rdy):
                    m.next = "L_OWN"
        with m.State("L_OWN"):
            s["own_pairs"]()
            with m.If(pq.w_rdy):
                m.next = "L_Q"
        with m.State("L_Q"):
            push(b0=ptr.q + lc.row0 * d, beats=tile_rows * s["row_beats"], n_out=1, n_in=1,
                 dest=_A)
            with m.If(pq.w_rdy):
                m.next = "L_FETCH"
        with m.State("L_FETCH"):
            m.d.comb += sm_r.addr.eq(i)
            with m.If(lc.final):
                m.next = "L_NEXT"
            with m.Elif(i == lc.ci):
                m.next = "L_FWAIT"
            with m.Else():
                s["kvmu_cmd"](op=KvMemoryManager.FETCH, layer=dsc["layer"], group=s["gi"],
                              head=s["gj"], owner=sm_r.data, version=dsc["version"],
                              first=i == lc.ci0, last=i == lc.ci - 1, by_index=1)
                with m.If(self.kvmu.i_cmd.ready):
                    m.d.sync += i.eq(i + 1)
        with m.State("L_FWAIT"):
            with m.If(s["fetch_ended"]()):
                m.next = "L_NEXT"
        with m.State("L_NEXT"):
            m.d.sync += [lc.t0.eq(lc.t0 + lc.clen), lc.clen.eq(0), lc.ci0.eq(lc.ci)]
            with m.If(~lc.final):
                m.next = "L_PLAN"
            with m.Elif(~lc.sums):
                m.d.sync += lc.sums.eq(1)
                m.next = "L_PASS"
            with m.Elif(lc.row0 + n < rows):
                m.d.sync += [lc.row0.eq(lc.row0 + n), lc.pos0.eq(lc.pos0 + n), lc.sums.eq(0)]
                m.next = "L_POS"
            with m.Else():
                m.next = "H_ATT_WAIT"
        with m.State("L_POS"):
            # the next tile's first row's step position: (row0) mod t, by subtraction
            with m.If(lc.pos0 >= t):
                m.d.sync += lc.pos0.eq(lc.pos0 - t)
            with m.Else():
                m.next = "L_PASS"

    # --- the sequencer -------------------------------------------------------------------
    def _sequencer(self, top, x):
        """The sequencer's FSM, in its own module so the soft reset clears all its state."""
        m = Module()
        top.submodules.seq = ResetInserter(x.reset_blocks)(m)
        cfg = self._cfg
        e, h, w, k, regs = self.engine, self.hcu, self.wtu, self.kvmu, self.regs
        n, d, bus = cfg.attn_n, cfg.head_dim, cfg.kvmu_bus_bytes
        gq, hpg, G, Hkv = cfg.group_size, cfg.heads_per_group, cfg.hash_groups, cfg.n_kv_heads
        ab = cfg.kvmu_addr_bits
        brows = cfg.attn_b_rows
        row_beats = d // bus

        # the descriptor's fields
        words = regs.o_desc.payload
        f = {}
        for word, name, lsb, width, _ in regmap.DESCRIPTOR:
            lo = Cat(*[words[word + i] for i in range((lsb + width + 31) // 32)])
            f[name] = lo[lsb:lsb + width]
        dsc = {name: Signal(len(v), name=f"d_{name}") for name, v in f.items()}
        t = dsc["step_len"]
        sinks = Signal(16)          # sink tokens attended from the sink buffers
        skip = Signal(16)           # the step's own tokens that are sinks (not hashed)
        nh = Signal(16)             # tokens hashed and stored
        rows = Signal(24)           # query rows of a KV head: G_q · t
        token_beats = 2 * hpg * row_beats

        # the programs of the read DMA: a two-level loop of jobs, in pairs (K then V) or not
        prog_t = data.StructLayout({"b0": ab, "b1": ab, "beats": 16, "n_out": 16, "n_in": 8,
                                    "s_out": ab, "s_in": ab, "pair": 1, "dest": 3})
        pq = fifo.SyncFIFOBuffered(width=prog_t.size, depth=4)
        m.submodules.programs = ResetInserter(x.reset_blocks)(pq)
        prog = Signal(prog_t)
        pw = Signal(prog_t)
        m.d.comb += pq.w_data.eq(pw)
        self._jobgen(m, x, pq, prog_t)
        x.pq_rdy, x.pq_level = pq.w_rdy, pq.level

        # the counts of the candidate list (n a word) and the selected candidate indices
        cm = memory.Memory(shape=data.ArrayLayout(cfg.count_bits, n), depth=brows // n,
                           init=[])
        m.submodules.counts = cm
        cm_w, cm_r = cm.write_port(), cm.read_port(domain="comb")
        cm_f = cm.read_port(domain="comb")
        sm = memory.Memory(shape=len(w.o.payload.cluster), depth=brows, init=[])
        m.submodules.selected = sm
        sm_w, sm_r = sm.write_port(), sm.read_port(domain="comb")
        cw = Signal(data.ArrayLayout(cfg.count_bits, n))
        ncand = Signal(16)
        nsel = Signal(16)
        fetched = Signal(24)        # the selected clusters' past tokens
        i = Signal(16)
        attend_len = Signal(24)
        # a chunked attention's place: the set's length, the row tile (its first row and
        # that row's step position), the pass (maximum or sums), the chunk (its first
        # selected cluster, the next, its tokens, the tokens before it, whether it is the
        # last: the sinks and the step's own tokens)
        lc = SimpleNamespace(len=Signal(SPAN_BITS), row0=Signal(16), pos0=Signal(16),
                             sums=Signal(), ci0=Signal(16), ci=Signal(16), clen=Signal(16),
                             t0=Signal(SPAN_BITS), final=Signal())
        # a counts list taken ahead, during a head's attention: the next head's, or after a
        # descriptor's last head the first head's of the queued descriptor (only one that
        # will reach its counts: of a step within core_max_tokens); its head uses it
        pre = SimpleNamespace(issued=Signal(), done=Signal(), err=Signal())
        x.ahead = Signal()                    # a list issued for the queued descriptor

        # the HCU's assignments of a group's tokens, in order
        aq = fifo.SyncFIFOBuffered(width=len(h.o.payload.cluster), depth=cfg.core_max_tokens)
        m.submodules.assign = ResetInserter(x.reset_blocks)(aq)
        m.d.comb += [aq.w_data.eq(h.o.payload.cluster), aq.w_en.eq(h.o.valid),
                     h.o.ready.eq(aq.w_rdy)]

        head = Signal(8)
        grp = Signal(8)
        gi, gj = Signal(8), Signal(8)         # head's group and index in the group
        ptr = SimpleNamespace(q=Signal(ab), k=Signal(ab), v=Signal(ab), o=Signal(ab),
                              sk=Signal(ab), sv=Signal(ab), kh=Signal(ab), kg=Signal(ab),
                              vg=Signal(ab), hp=Signal(ab))
        x.err_code = Signal(8)
        x.err_addr = Signal(64)
        x.failed = Signal()                   # this descriptor met an error
        x.attn_done = Signal()
        with m.If(e.o_attn.valid & e.o_attn.ready & e.o_attn.payload.last):
            m.d.sync += x.attn_done.eq(1)
        x.phase = Signal(3)                   # 0 idle, 1 predict, 2 attend, 3 hash, 4 store
        stores_left = Signal(16)
        kv_base = Signal(32)                  # the DMA's K/V beats received before the group
        kv_rx = Signal(32)
        m.d.comb += kv_rx.eq(x.dma.received - kv_base)
        stored = Signal(16)

        def raise_error(code, addr=0):
            m.d.comb += [x.err_code.eq(code), x.err_addr.eq(addr)]
            m.d.sync += x.failed.eq(1)

        # the KVMU's (sticky) error as it stood before the fetch in flight: a fetch's read
        # error raises the KVMU's error, reported with its address (``_errors``), unless it
        # was already raised; only then does the fetch's end beat report it (so each error
        # is reported and counted once)
        kerr_before = Signal()
        with m.If(x.b_src == _SRC_DMA):
            m.d.sync += kerr_before.eq(k.error)

        def fetch_ended():
            """A fetch's end beat (returned: it is taken this cycle) turns B's source back to
            the DMA, through the zero padding if the fetch came short, and reports its stale
            flag, or its error flag if the KVMU's error was raised before (address 0: the
            KVMU keeps its first error's)."""
            ko = k.o_kv
            end = ko.valid & ko.payload.end & ko.ready
            with m.If(end):
                m.d.sync += x.b_src.eq(Mux(x.kv_left != 0, _SRC_PAD, _SRC_DMA))
                with m.If(ko.payload.stale):
                    raise_error(_E["KV_STALE"][0])
                with m.Elif(ko.payload.error & kerr_before):
                    raise_error(_E["BUS_READ"][0])
            return end

        def push(**fields):
            m.d.comb += pq.w_en.eq(1)
            for key, v in fields.items():
                m.d.comb += getattr(pw, key).eq(v)

        def engine_cmd(**fields):
            m.d.comb += e.cmd.valid.eq(1)
            for key, v in fields.items():
                m.d.comb += getattr(e.cmd.payload, key).eq(v)

        def kvmu_cmd(**fields):
            m.d.comb += k.i_cmd.valid.eq(1)
            for key, v in fields.items():
                m.d.comb += getattr(k.i_cmd.payload, key).eq(v)

        c = self._centring(m, x, dsc, grp, G)
        win = self._windows(m, x) if x.img is not None else None
        beta = dict(beta_m=dsc["beta_m"], beta_shift=dsc["beta_shift"])
        m.d.comb += x.out.base.eq(ptr.o)
        m.d.comb += [regs.busy.eq(x.phase != 0)]
        def hyperplanes(dest):
            """The group's hyperplane rows, one job."""
            push(b0=ptr.hp, beats=cfg.n_hp * cfg.hash_dim // bus, n_out=1, n_in=1, dest=dest)

        def sink_pairs():
            """The head's sink tokens, K row then V row each, into B: one job."""
            push(b0=ptr.sk, b1=ptr.sv, beats=row_beats, n_out=sinks, n_in=1, s_out=d, pair=1,
                 dest=_B)

        def own_pairs():
            """The step's own tokens of the head, K row then V row each, into B: one job."""
            push(b0=ptr.k, b1=ptr.v, beats=row_beats, n_out=t, n_in=1, s_out=d, pair=1,
                 dest=_B)

        def hash_rows(dest):
            """The group's hash-input row of each hashed token: a job per head of the group."""
            push(b0=ptr.kh, beats=row_beats, n_out=nh, n_in=hpg, s_out=d, s_in=t * d,
                 dest=dest)

        with m.If(x.kv_take):
            m.d.sync += x.kv_left.eq(x.kv_left - 1)
            with m.If((x.b_src == _SRC_PAD) & (x.kv_left == 1)):
                m.d.sync += x.b_src.eq(_SRC_DMA)
        with m.FSM(name="seq"):
            with m.State("IDLE"):
                go = regs.ctrl[0] & ~x.resetting & c.init_done
                m.d.comb += regs.o_desc.ready.eq(go)
                with m.If(regs.o_desc.valid & go):
                    m.d.sync += [v.eq(f[name]) for name, v in dsc.items()]
                    m.d.sync += [x.failed.eq(0), x.phase.eq(1)]
                    m.d.comb += x.clear_errs.eq(1)
                    m.next = "SETUP"
            with m.State("SETUP"):
                past_sink = dsc["n_sink"] > dsc["token0"]
                left = dsc["n_sink"] - dsc["token0"]
                m.d.sync += [
                    sinks.eq(Mux(past_sink, dsc["token0"], dsc["n_sink"])),
                    skip.eq(Mux(past_sink, Mux(left > t, t, left), 0)),
                    rows.eq(t * gq),
                    head.eq(0), gi.eq(0), gj.eq(0),
                    ptr.q.eq(dsc["q_addr"]), ptr.k.eq(dsc["k_addr"]), ptr.v.eq(dsc["v_addr"]),
                    ptr.o.eq(dsc["o_addr"]), ptr.sk.eq(dsc["sink_k_addr"]),
                    ptr.sv.eq(dsc["sink_v_addr"])]
                m.next = "SETUP2"
            with m.State("SETUP2"):
                m.d.sync += nh.eq(t - skip)
                with m.If(t > cfg.core_max_tokens):
                    raise_error(_E["CORE_LIMIT"][0])
                    m.next = "FINISH"
                with m.Else():
                    m.next = "VERSION"
            with m.State("VERSION"):
                m.d.comb += [k.i_version.valid.eq(1), k.i_version.payload.layer.eq(dsc["layer"]),
                             k.i_version.payload.version.eq(dsc["version"])]
                with m.If(k.i_version.ready):
                    m.next = "H_COUNTS"

            # --- per KV head: counts, score, select, attend ---------------------------
            def take_counts():
                """A candidate list's beat on ``o_cand``: its count into the counts memory
                (``n`` a word), the last partial word on the list's end."""
                oc = k.o_cand
                lane = ncand[:exact_log2(n)] if n > 1 else Const(0, 1)
                with m.If(oc.valid & ~oc.payload.end):
                    m.d.sync += ncand.eq(ncand + 1)
                    for ln in range(n):
                        with m.If(lane == ln):
                            m.d.sync += cw[ln].eq(oc.payload.count)
                    with m.If((lane == n - 1) & (ncand < brows)):
                        m.d.comb += [cm_w.addr.eq(ncand >> exact_log2(n)), cm_w.en.eq(1)]
                        m.d.comb += cm_w.data.as_value().eq(
                            Cat(*[cw[ln] for ln in range(n - 1)], oc.payload.count))
                        m.d.sync += cw.eq(0)
                with m.If(oc.valid & oc.payload.end):
                    with m.If(ncand[:exact_log2(n)] != 0 if n > 1 else Const(0)):
                        m.d.comb += [cm_w.addr.eq(ncand >> exact_log2(n)), cm_w.en.eq(1),
                                     cm_w.data.eq(cw)]

            def counts_taken(error):
                """The list is in: score it, or attend without candidates, or refuse it."""
                with m.If(error):
                    raise_error(_E["KV_CLUSTER_LOST"][0])
                with m.If(ncand == 0):
                    m.next = "H_ATTEND"
                with m.Elif((ncand > brows) | (ncand > cfg.wtu_row_entries)):
                    raise_error(_E["CORE_LIMIT"][0])
                    m.next = "H_NEXT"
                with m.Else():
                    m.next = "H_SCORE"

            with m.State("H_COUNTS"):
                m.d.sync += [nsel.eq(0), fetched.eq(0), x.phase.eq(1)]
                with m.If(pre.issued):
                    # taken ahead (while the previous head, or descriptor, attended): this
                    # head's list, once it is in
                    with m.If(pre.done):
                        m.d.sync += [pre.issued.eq(0), pre.done.eq(0)]
                        counts_taken(pre.err)
                with m.Else():
                    kvmu_cmd(op=KvMemoryManager.CAND, layer=dsc["layer"], group=gi, head=gj,
                             step=dsc["step"], counts=1)
                    m.d.sync += [ncand.eq(0), cw.eq(0)]
                    with m.If(k.i_cmd.ready):
                        m.next = "H_COUNTS_RX"
            with m.State("H_COUNTS_RX"):
                m.d.comb += x.cand_take.eq(1)
                take_counts()
                with m.If(k.o_cand.valid & k.o_cand.payload.end):
                    counts_taken(k.o_cand.payload.error)
            with m.State("H_SCORE"):
                engine_cmd(kind=Kind.SCORE, m=rows, k=d, l=ncand, **beta)
                with m.If(e.cmd.ready):
                    m.d.sync += i.eq(0)
                    m.next = "H_SCORE_Q"
            with m.State("H_SCORE_Q"):
                push(b0=ptr.q, beats=rows * row_beats, n_out=1, n_in=1, dest=_A)
                with m.If(pq.w_rdy):
                    m.next = "H_SCORE_BIAS"
            with m.State("H_SCORE_BIAS"):
                m.d.comb += [cm_r.addr.eq(i), e.bias.valid.eq(1)]
                for ln in range(n):
                    m.d.comb += e.bias.payload.data[ln].eq(cm_r.data[ln])
                with m.If(e.bias.ready):
                    m.d.sync += i.eq(i + 1)
                    with m.If(((i + 1) << exact_log2(n)) >= ncand):
                        m.next = "H_SCORE_KEYS"
            with m.State("H_SCORE_KEYS"):
                kvmu_cmd(op=KvMemoryManager.CAND, layer=dsc["layer"], group=gi, head=gj,
                         step=dsc["step"], counts=0)
                with m.If(k.i_cmd.ready):
                    m.d.sync += x.b_src.eq(_SRC_CAND)
                    m.next = "H_SCORE_RX"
            with m.State("H_SCORE_RX"):
                with m.If(k.o_cand.valid & k.o_cand.payload.end & k.o_cand.ready):
                    with m.If(k.o_cand.payload.error):
                        raise_error(_E["KV_CLUSTER_LOST"][0])
                    m.d.sync += x.b_src.eq(_SRC_DMA)
                    m.next = "H_SELECT"
            with m.State("H_SELECT"):
                m.d.comb += w.o.ready.eq(1)
                idx = w.o.payload.cluster
                m.d.comb += [cm_f.addr.eq(idx >> exact_log2(n))]
                with m.If(w.o.valid & ~w.o.payload.last):
                    m.d.comb += [sm_w.addr.eq(nsel), sm_w.data.eq(idx), sm_w.en.eq(1)]
                    m.d.sync += [nsel.eq(nsel + 1),
                                 fetched.eq(fetched + cm_f.data[idx[:exact_log2(n)]]
                                            if n > 1 else fetched + cm_f.data[0])]
                with m.If(w.o.valid & w.o.payload.last):
                    m.next = "H_ATTEND"
            with m.State("H_ATTEND"):
                m.d.comb += attend_len.eq(fetched + sinks + t)
                with m.If(attend_len > brows):
                    # longer than B: chunked commands, if the last chunk (the sinks and the
                    # step's own tokens) fits and the set fits a command's span
                    with m.If((sinks + t > brows) | (attend_len >> SPAN_BITS != 0)):
                        raise_error(_E["CORE_LIMIT"][0])
                        m.next = "H_NEXT"
                    with m.Else():
                        m.d.sync += [lc.len.eq(attend_len), lc.row0.eq(0), lc.pos0.eq(0),
                                     lc.sums.eq(0), x.phase.eq(2), i.eq(0)]
                        m.next = "L_CHECK"
                with m.Else():
                    engine_cmd(kind=Kind.ATTEND, m=rows, k=d, l=attend_len, causal=t, pairs=1,
                               **beta)
                    with m.If(e.cmd.ready):
                        m.d.sync += [x.attn_done.eq(0), i.eq(0), x.phase.eq(2),
                                     x.b_src.eq(Mux(nsel != 0, _SRC_KV, _SRC_DMA)),
                                     x.kv_left.eq(fetched << x.kv_lg)]
                        m.next = "H_ATT_SINKS"
            with m.State("H_ATT_SINKS"):
                with m.If(sinks == 0):
                    m.next = "H_ATT_OWN"
                with m.Else():
                    sink_pairs()
                    with m.If(pq.w_rdy):
                        m.next = "H_ATT_OWN"
            with m.State("H_ATT_OWN"):
                own_pairs()
                with m.If(pq.w_rdy):
                    m.next = "H_ATT_Q"
            with m.State("H_ATT_Q"):
                push(b0=ptr.q, beats=rows * row_beats, n_out=1, n_in=1, dest=_A)
                with m.If(pq.w_rdy):
                    m.next = "H_FETCH"
            with m.State("H_FETCH"):
                m.d.comb += sm_r.addr.eq(i)
                with m.If(i == nsel):
                    m.next = "H_ATT_WAIT"
                with m.Else():
                    kvmu_cmd(op=KvMemoryManager.FETCH, layer=dsc["layer"], group=gi, head=gj,
                             owner=sm_r.data, version=dsc["version"], first=i == 0,
                             last=i == nsel - 1, by_index=1)
                    with m.If(k.i_cmd.ready):
                        m.d.sync += i.eq(i + 1)
            self._chunked_attention(m, x, lc, dict(
                engine_cmd=engine_cmd, kvmu_cmd=kvmu_cmd, push=push, raise_error=raise_error,
                sm_r=sm_r, cm_f=cm_f, nsel=nsel, sinks=sinks, t=t, rows=rows, ptr=ptr, dsc=dsc,
                gi=gi, gj=gj, i=i, beta=beta, row_beats=row_beats, pq=pq,
                sink_pairs=sink_pairs, own_pairs=own_pairs, fetch_ended=fetch_ended))

            with m.State("H_ATT_WAIT"):
                fetch_ended()
                # the overlap: once the fetches are in, the next head's counts list runs in
                # the KVMU while the engine attends (the HC table is the step's, unchanged
                # until the stores after the last head); after the last head, the queued
                # descriptor's first head's, if it is of another layer (its table is not
                # this descriptor's to store into) and will run (within core_max_tokens).
                # The list is taken as it comes, in any state (below), until its head uses
                # it (``H_COUNTS``).
                last_head = head == Hkv - 1
                ahead = (regs.o_desc.valid & (f["layer"] != dsc["layer"]) &
                         (f["step_len"] <= cfg.core_max_tokens))
                nl = Mux(last_head, f["layer"], dsc["layer"])
                ngi = Mux(last_head, 0, Mux(gj == hpg - 1, gi + 1, gi))
                ngj = Mux(last_head | (gj == hpg - 1), 0, gj + 1)
                nstep = Mux(last_head, f["step"], dsc["step"])
                with m.If((~last_head | ahead) & ~pre.issued & (x.b_src == _SRC_DMA)):
                    kvmu_cmd(op=KvMemoryManager.CAND, layer=nl, group=ngi, head=ngj,
                             step=nstep, counts=1)
                    with m.If(k.i_cmd.ready):
                        m.d.sync += [pre.issued.eq(1), ncand.eq(0), cw.eq(0)]
                        m.d.comb += x.ahead.eq(last_head)
                with m.If(x.attn_done & x.out.idle & (x.b_src == _SRC_DMA) &
                          (last_head | pre.done)):
                    m.next = "H_NEXT"
            with m.State("H_NEXT"):
                m.d.sync += [head.eq(head + 1), ptr.q.eq(ptr.q + rows * d),
                             ptr.o.eq(ptr.o + rows * (2 * d)), ptr.k.eq(ptr.k + t * d),
                             ptr.v.eq(ptr.v + t * d), ptr.sk.eq(ptr.sk + dsc["n_sink"] * d),
                             ptr.sv.eq(ptr.sv + dsc["n_sink"] * d)]
                with m.If(gj == hpg - 1):
                    m.d.sync += [gj.eq(0), gi.eq(gi + 1)]
                with m.Else():
                    m.d.sync += gj.eq(gj + 1)
                with m.If(head == Hkv - 1):
                    m.d.sync += [grp.eq(0), ptr.kh.eq(dsc["k_hash_addr"] + skip * d),
                                 ptr.kg.eq(dsc["k_addr"] + skip * d),
                                 ptr.vg.eq(dsc["v_addr"] + skip * d),
                                 ptr.hp.eq(dsc["hp_addr"]), x.phase.eq(3)]
                    m.next = "G_HASH"
                with m.Else():
                    m.next = "H_COUNTS"

            # --- per hash group: hash, cluster, store -----------------------------------
            with m.State("G_HASH"):
                with m.If(nh == 0):
                    m.next = "FINISH"
                if win is not None:
                    with m.Else():
                        m.next = "X_CHECK"
                else:
                    with m.Elif(regs.ctrl[2]):
                        m.next = "C_SUM_PROG"
                    with m.Else():
                        m.next = "G_HASH_CMD"
            if win is not None:
                self._swap_states(m, x, win, c, push)
                with m.State("G_PREP"):
                    with m.If(regs.ctrl[2]):
                        m.next = "C_SUM_PROG"
                    with m.Else():
                        m.next = "G_HASH_CMD"
            # centring: the running sum of the group's hash-input keys, then per hyperplane
            # the bias round_div(S · R_j, n) (docs/numerics.md §4)
            with m.State("C_SUM_PROG"):
                hash_rows(_SUM)
                m.d.sync += [c.sum_left.eq(nh * (hpg * row_beats)), c.w.eq(0)]
                with m.If(pq.w_rdy):
                    m.next = "C_SUM"
            with m.State("C_SUM"):
                with m.If(c.sum_left == 0):
                    m.d.comb += [c.n_wr.addr.eq(c.ctx), c.n_wr.en.eq(1),
                                 c.n_wr.data.eq(c.n_rd.data + nh)]
                    m.d.sync += [c.n.eq(c.n_rd.data + nh), c.j.eq(0), c.w.eq(0),
                                 c.acc.eq(0)]
                    m.next = "C_DOT_PROG"
            with m.State("C_DOT_PROG"):
                hyperplanes(_DOT)
                with m.If(pq.w_rdy):
                    m.next = "C_DOT"
            with m.State("C_DOT"):
                with m.If(c.j == cfg.n_hp):
                    m.next = "G_HASH_CMD"
            with m.State("G_HASH_CMD"):
                engine_cmd(kind=Kind.HASH, m=nh, k=cfg.hash_dim, l=cfg.n_hp,
                           layer=c.ctx if win is None else win.slot, step=dsc["step"])
                with m.If(e.cmd.ready):
                    m.d.sync += i.eq(0)
                    m.next = "G_HASH_HP"
            with m.State("G_HASH_HP"):
                hyperplanes(_B)
                with m.If(pq.w_rdy):
                    m.next = "G_HASH_KEYS"
            with m.State("G_HASH_KEYS"):
                hash_rows(_A)
                with m.If(pq.w_rdy):
                    m.next = "G_HASH_BIAS"
            with m.State("G_HASH_BIAS"):
                m.d.comb += e.bias.valid.eq(1)          # zero biases without centring
                with m.If(regs.ctrl[2]):
                    for ln in range(n):
                        m.d.comb += e.bias.payload.data[ln].eq(
                            Array(c.bias)[(i << exact_log2(n)) + ln] if n > 1 else
                            Array(c.bias)[i])
                with m.If(e.bias.ready):
                    m.d.sync += i.eq(i + 1)
                    with m.If(i == -(-cfg.n_hp // n) - 1):
                        m.d.sync += [i.eq(0), kv_base.eq(x.dma.received), stored.eq(0),
                                     x.drop_kv.eq(x.dma.error), x.phase.eq(4)]
                        m.next = "G_STORE_PROG"
            with m.State("G_STORE_PROG"):
                with m.If(x.dma.error):
                    m.d.sync += x.drop_kv.eq(1)
                push(b0=ptr.kg, b1=ptr.vg, beats=row_beats, n_out=nh, n_in=hpg, s_out=d,
                     s_in=t * d, pair=1, dest=_KV)
                with m.If(pq.w_rdy):
                    m.next = "G_STORE"
            with m.State("G_STORE"):
                # a token is stored once its rows are in the DMA without error
                have = kv_rx >= (stored + 1) * token_beats
                with m.If(x.dma.error):
                    m.d.sync += x.drop_kv.eq(1)
                with m.If(stored == nh):
                    m.next = "G_NEXT"
                with m.Elif(aq.r_rdy & (x.drop_kv | x.dma.error)):
                    m.d.comb += aq.r_en.eq(1)               # drop the assignment
                    m.d.sync += stored.eq(stored + 1)
                with m.Elif(aq.r_rdy & have):
                    kvmu_cmd(op=KvMemoryManager.STORE, layer=dsc["layer"], group=grp,
                             owner=aq.r_data, token=dsc["token0"] + skip + stored,
                             step=dsc["step"])
                    with m.If(k.i_cmd.ready):
                        m.d.comb += aq.r_en.eq(1)
                        m.d.sync += stored.eq(stored + 1)
            with m.State("G_NEXT"):
                # the dropped tokens' data still drains through the DMA
                with m.If(x.dma.idle & ~k.busy):
                    m.d.sync += [grp.eq(grp + 1), x.drop_kv.eq(0),
                                 ptr.hp.eq(ptr.hp + cfg.n_hp * cfg.hash_dim),
                                 ptr.kh.eq(ptr.kh + hpg * t * d),
                                 ptr.kg.eq(ptr.kg + hpg * t * d),
                                 ptr.vg.eq(ptr.vg + hpg * t * d)]
                    with m.If(grp == G - 1):
                        m.next = "FINISH"
                    with m.Else():
                        m.d.sync += x.phase.eq(3)
                        m.next = "G_HASH"
            with m.State("FINISH"):
                # (a list taken ahead for the queued descriptor may still be coming: the
                # KVMU runs it before this descriptor's stores, so it is in when they are)
                with m.If(x.dma.idle & x.out.idle & ~k.busy & (pq.level == 0) &
                          ~x.jobgen_busy):
                    m.d.comb += [regs.done.eq(1), regs.done_version.eq(dsc["version"])]
                    m.d.sync += x.phase.eq(0)
                    m.next = "IDLE"
        # a list taken ahead comes in whatever state the sequencer is in (only ``H_COUNTS_RX``
        # and ``H_SCORE_RX`` take ``o_cand`` otherwise, and neither runs while one is pending:
        # ``H_COUNTS`` waits for it)
        with m.If(pre.issued & ~pre.done):
            m.d.comb += x.cand_take.eq(1)
            take_counts()
            with m.If(k.o_cand.valid & k.o_cand.payload.end):
                m.d.sync += [pre.done.eq(1), pre.err.eq(k.o_cand.payload.error)]
        self._errors(m, x, dsc)

    def _windows(self, m, x):
        """The paths of a cluster window's image: a ``SAVE``'s words from the HCU, then
        zeros to the image's end, to the image writer; a ``LOAD``'s words from the read DMA
        to the HCU, the header and its ``min(opened, window)`` entries, the rest dropped.
        ``bad``: a word of the loaded image came with a bus error."""
        cfg, h = self._cfg, self.hcu
        W = cfg.window
        words = cfg.ctx_image_bytes // cfg.ctx_word_bytes
        win = SimpleNamespace(words=words, beats=cfg.ctx_image_bytes // cfg.kvmu_bus_bytes)
        win.slot = Signal(range(max(2, cfg.contexts)))
        for side in ("save", "load"):
            setattr(win, side, SimpleNamespace(on=Signal(name=f"{side}_on"),
                                               k=Signal(range(words + 1), name=f"{side}_k"),
                                               real=Signal(range(W + 2), name=f"{side}_real")))
        win.bad = Signal()

        def walk(st, word, fire):
            """A side's walk over the image's words; the header's count says how many
            come from (or go to) the HCU."""
            hdr = data.View(h.header_layout, word[:h.header_layout.size])
            with m.If(fire):
                m.d.sync += st.k.eq(st.k + 1)
                with m.If(st.k == 0):
                    m.d.sync += st.real.eq(1 + Mux(hdr.n_open >= W, W, hdr.n_open))
                with m.If(st.k == words - 1):
                    m.d.sync += st.on.eq(0)
            return (st.k == 0) | (st.k < st.real)

        # a save: the HCU's words, then zeros
        sv, o, rs = win.save, h.o_ctx, x.rep_save.i
        real = walk(sv, o.payload, rs.valid & rs.ready)
        m.d.comb += [rs.payload.eq(Mux(real, o.payload, 0)),
                     rs.valid.eq(sv.on & Mux(real, o.valid, 1)),
                     o.ready.eq(sv.on & real & rs.ready)]
        # a load: the words the HCU does not take are dropped
        ld, rl, i = win.load, x.rep_load.o, h.i_ctxd
        real = walk(ld, rl.payload, rl.valid & rl.ready)
        m.d.comb += [i.payload.eq(rl.payload[:h.ctx_bits]),
                     i.valid.eq(ld.on & real & rl.valid),
                     rl.ready.eq(ld.on & Mux(real, i.ready, 1))]
        d = x.dma.o
        with m.If(d.valid & d.ready & (d.payload.dest == _CTX) & d.payload.bad):
            m.d.sync += win.bad.eq(1)
        return win

    def _swap_states(self, m, x, win, c, push):
        """The sequencer's states that put window ``c.ctx`` in its context
        (``c.ctx mod contexts``) before a group is hashed: a hit goes on; otherwise the
        context's window is saved (if it holds one) and ``c.ctx`` loaded (or emptied, never
        saved before). A failed save loses that window (its next use starts empty); a
        load with a bus error empties the context after it. Both raise the bus error."""
        cfg, h = self._cfg, self.hcu
        C, n_win = cfg.contexts, cfg.windows
        img = cfg.ctx_image_bytes
        tag = Array(Signal(range(max(2, n_win)), name=f"ctx_tag_{i}") for i in range(C))
        held = Array(Signal(name=f"ctx_held_{i}") for i in range(C))
        saved = Array(Signal(name=f"win_saved_{i}") for i in range(n_win))
        slot_of = Array(Const(w % C, len(win.slot)) for w in range(n_win))
        victim, had = Signal.like(tag[0]), Signal()

        def ctx_cmd(op):
            m.d.comb += [h.i_ctx.valid.eq(1), h.i_ctx.payload.op.eq(op),
                         h.i_ctx.payload.layer.eq(win.slot)]

        with m.State("X_CHECK"):
            slot = slot_of[c.ctx]
            m.d.sync += [win.slot.eq(slot), victim.eq(tag[slot]), had.eq(held[slot])]
            with m.If(held[slot] & (tag[slot] == c.ctx)):
                m.next = "G_PREP"
            with m.Else():
                m.d.sync += x.phase.eq(5)
                m.next = "X_SAVE"
        with m.State("X_SAVE"):
            with m.If(~had):
                m.next = "X_LOAD"
            with m.Else():
                ctx_cmd(HashClusterUnit.SAVE)
                with m.If(h.i_ctx.ready):
                    m.d.sync += [win.save.on.eq(1), win.save.k.eq(0), x.wsel.eq(1)]
                    m.d.comb += x.img.clear.eq(1)
                    m.next = "X_SAVE_JOB"
        with m.State("X_SAVE_JOB"):
            m.d.comb += [x.img.job.valid.eq(1),
                         x.img.job.payload.addr.eq(x.ctx_base + victim * img),
                         x.img.job.payload.beats.eq(win.beats)]
            with m.If(x.img.job.ready):
                m.next = "X_LOAD"
        with m.State("X_LOAD"):
            # the image's read goes out while the HCU still sends the saved window
            with m.If(saved[c.ctx]):
                push(b0=x.ctx_base + c.ctx * img, beats=win.beats, n_out=1, n_in=1,
                     dest=_CTX)
                with m.If(x.pq_rdy):
                    m.d.sync += win.bad.eq(0)
                    m.next = "X_LOAD_CMD"
            with m.Else():
                ctx_cmd(HashClusterUnit.FLUSH)
                with m.If(h.i_ctx.ready):
                    m.next = "X_WAIT"
        with m.State("X_LOAD_CMD"):
            ctx_cmd(HashClusterUnit.LOAD)
            with m.If(h.i_ctx.ready):
                m.d.sync += [win.load.on.eq(1), win.load.k.eq(0)]
                m.next = "X_WAIT"
        with m.State("X_WAIT"):
            with m.If(~win.save.on & ~win.load.on & x.img.idle & x.dma.idle &
                      ~x.jobgen_busy & (x.pq_level == 0)):
                m.d.sync += [tag[win.slot].eq(c.ctx), held[win.slot].eq(1), x.wsel.eq(0)]
                with m.If(had):
                    m.d.sync += saved[victim].eq(~x.img.error)
                with m.If(win.bad):
                    m.next = "X_FLUSH"
                with m.Else():
                    m.d.sync += x.phase.eq(3)
                    m.next = "G_PREP"
        with m.State("X_FLUSH"):
            ctx_cmd(HashClusterUnit.FLUSH)
            with m.If(h.i_ctx.ready):
                m.d.sync += x.phase.eq(3)
                m.next = "G_PREP"

    def _centring(self, m, x, dsc, grp, G):
        """The centring sums ``S`` (per layer and group, ``hash_dim`` int32 values, on chip)
        and counts ``n``; the running sum takes the ``_SUM`` beats, a word of the hash input
        row a cycle; the dot products take the hyperplane rows (``_DOT`` beats) with
        ``bus_bytes`` multipliers, and a restoring divider gives ``round_div(S · R_j, n)``
        per hyperplane, one quotient bit a cycle. Cleared after reset (``INIT``)."""
        cfg = self._cfg
        bus = cfg.kvmu_bus_bytes
        W = cfg.hash_dim // bus                     # words of a hash input row
        ctxs = cfg.n_layers * G
        c = SimpleNamespace()
        c.ctx = Signal(range(max(2, ctxs)))
        m.d.comb += c.ctx.eq(dsc["layer"] * G + grp)
        sm = memory.Memory(shape=data.ArrayLayout(signed(32), bus), depth=ctxs * W, init=[])
        nm = memory.Memory(shape=32, depth=max(2, ctxs), init=[])
        m.submodules.centre_sums, m.submodules.centre_counts = sm, nm
        c.s_wr, c.s_rd = sm.write_port(), sm.read_port(domain="comb")
        c.n_wr, c.n_rd = nm.write_port(), nm.read_port(domain="comb")
        m.d.comb += c.n_rd.addr.eq(c.ctx)
        c.w = Signal(range(W + 1))                  # word of the row
        c.sum_left = Signal(32)
        c.n = Signal(32)
        c.j = Signal(range(cfg.n_hp + 1))
        c.acc = Signal(signed(64))
        c.bias = [Signal(signed(cfg.attn_acc_bits), name=f"centre_bias_{j}")
                  for j in range(cfg.n_hp)]
        c.init = Signal(range(ctxs * W + 2), init=0)
        c.init_done = Signal()
        d = x.dma.o
        word = d.payload.data
        vals = [word[8 * k:8 * k + 8].as_signed() for k in range(bus)]
        m.d.comb += c.s_rd.addr.eq(c.ctx * W + c.w)
        # clear after reset
        with m.If(~c.init_done):
            m.d.comb += [c.s_wr.addr.eq(c.init), c.s_wr.en.eq(1), c.s_wr.data.eq(0),
                         c.n_wr.addr.eq(c.init), c.n_wr.en.eq(c.init < ctxs),
                         c.n_wr.data.eq(0)]
            m.d.sync += c.init.eq(c.init + 1)
            with m.If(c.init == ctxs * W - 1):
                m.d.sync += c.init_done.eq(1)
        # the sums
        with m.If(d.valid & (d.payload.dest == _SUM)):
            m.d.comb += [c.s_wr.addr.eq(c.ctx * W + c.w), c.s_wr.en.eq(1)]
            for k in range(bus):
                m.d.comb += c.s_wr.data[k].eq(c.s_rd.data[k] + vals[k])
            m.d.sync += [c.w.eq(Mux(c.w == W - 1, 0, c.w + 1)), c.sum_left.eq(c.sum_left - 1)]
        # the dot products and the divider
        dividing = Signal()
        num, quo = Signal(66), Signal(66)
        den = Signal(34)
        rem = Signal(67)
        bit = Signal(range(67))
        neg = Signal()
        m.d.comb += x.dot_ready.eq(~dividing)
        with m.If(d.valid & (d.payload.dest == _DOT) & ~dividing):
            prods = [c.s_rd.data[k] * vals[k] for k in range(bus)]
            total = prods[0]
            for p in prods[1:]:
                total = total + p
            nxt = c.acc + total
            m.d.sync += [c.acc.eq(nxt), c.w.eq(Mux(c.w == W - 1, 0, c.w + 1))]
            with m.If(c.w == W - 1):
                # round_div: sign(a) · floor((2|a| + n) / (2n))
                mag = Mux(nxt < 0, -nxt, nxt)
                m.d.sync += [dividing.eq(1), neg.eq(nxt < 0), num.eq((mag << 1) + c.n),
                             den.eq(c.n << 1), rem.eq(0), quo.eq(0), bit.eq(65)]
        with m.If(dividing):
            r2 = Cat(num.bit_select(bit, 1), rem[:66])
            ge = r2 >= den
            m.d.sync += [rem.eq(Mux(ge, r2 - den, r2)), quo.eq(Cat(ge, quo[:65])),
                         bit.eq(bit - 1)]
            with m.If(bit == 0):
                q = Signal(signed(68))
                m.d.comb += q.eq(Mux(neg, -Cat(ge, quo[:65]), Cat(ge, quo[:65])))
                for j in range(cfg.n_hp):
                    with m.If(c.j == j):
                        m.d.sync += c.bias[j].eq(q)
                m.d.sync += [dividing.eq(0), c.j.eq(c.j + 1), c.acc.eq(0)]
        x.centre = c
        return c

    def _jobgen(self, m, x, pq, prog_t):
        """Programs (two-level loops of jobs) into the read DMA's jobs."""
        p = Signal(prog_t)
        busy = Signal()
        io, ii, side = Signal(16), Signal(8), Signal()
        row0, row1, a0, a1 = (Signal(len(p.b0), name=nm) for nm in ("row0", "row1", "a0", "a1"))
        j = x.dma.job
        m.d.comb += pq.r_en.eq(~busy)
        with m.If(~busy & pq.r_rdy):
            q = Signal(prog_t)
            m.d.comb += q.as_value().eq(pq.r_data)
            m.d.sync += [p.eq(q), busy.eq(q.n_out != 0), io.eq(0), ii.eq(0), side.eq(0),
                         row0.eq(q.b0), row1.eq(q.b1), a0.eq(q.b0), a1.eq(q.b1)]
        m.d.comb += [j.valid.eq(busy), j.payload.addr.eq(Mux(side, a1, a0)),
                     j.payload.beats.eq(p.beats), j.payload.dest.eq(p.dest)]
        with m.If(j.valid & j.ready):
            with m.If(p.pair & ~side):
                m.d.sync += side.eq(1)
            with m.Else():
                m.d.sync += side.eq(0)
                with m.If(ii == p.n_in - 1):
                    m.d.sync += [ii.eq(0), io.eq(io + 1), row0.eq(row0 + p.s_out),
                                 row1.eq(row1 + p.s_out), a0.eq(row0 + p.s_out),
                                 a1.eq(row1 + p.s_out)]
                    with m.If(io == p.n_out - 1):
                        m.d.sync += busy.eq(0)
                with m.Else():
                    m.d.sync += [ii.eq(ii + 1), a0.eq(a0 + p.s_in), a1.eq(a1 + p.s_in)]
        with m.If(x.reset_blocks):
            m.d.sync += busy.eq(0)
        x.jobgen_busy = busy

    def _errors(self, m, x, dsc):
        """The blocks' errors as the map's codes, to the register file (first kept)."""
        regs, k, e, h, w = self.regs, self.kvmu, self.engine, self.hcu, self.wtu
        code, addr = Signal(8), Signal(64)
        prev = SimpleNamespace(k=Signal(), e=Signal(), h=Signal(), w=Signal(), dma=Signal(),
                               out=Signal())
        prev.img = Signal()
        if x.img is not None:
            m.d.sync += prev.img.eq(x.img.error)
        m.d.sync += [prev.k.eq(k.error), prev.e.eq(e.error), prev.h.eq(h.error),
                     prev.w.eq(w.error), prev.dma.eq(x.dma.error), prev.out.eq(x.out.error)]
        kv_code = Signal(8)
        with m.Switch(k.error_code):
            with m.Case(3, 9, 11):
                m.d.comb += kv_code.eq(_E["KV_TABLE_FULL"][0])
            with m.Case(10):
                m.d.comb += kv_code.eq(_E["KV_CLUSTER_LOST"][0])
            with m.Case(4, 6, 12):
                m.d.comb += kv_code.eq(_E["BUS_READ"][0])
            with m.Case(5, 7):
                m.d.comb += kv_code.eq(_E["BUS_WRITE"][0])
            with m.Default():
                m.d.comb += kv_code.eq(_E["KV_REFUSED"][0])
        with m.If(x.err_code != 0):
            m.d.comb += [code.eq(x.err_code), addr.eq(x.err_addr)]
        with m.Elif(x.dma.error & ~prev.dma):
            m.d.comb += [code.eq(_E["BUS_READ"][0]), addr.eq(x.dma.error_addr)]
        with m.Elif(x.out.error & ~prev.out):
            m.d.comb += [code.eq(_E["BUS_WRITE"][0]), addr.eq(x.out.error_addr)]
        if x.img is not None:
            with m.Elif(x.img.error & ~prev.img):
                m.d.comb += [code.eq(_E["BUS_WRITE"][0]), addr.eq(x.img.error_addr)]
        with m.Elif(k.error & ~prev.k):
            m.d.comb += [code.eq(kv_code), addr.eq(k.error_addr)]
        with m.Elif(e.error & ~prev.e):
            m.d.comb += code.eq(_E["ENGINE_REFUSED"][0])
        with m.Elif((h.error & ~prev.h) | (w.error & ~prev.w)):
            m.d.comb += code.eq(_E["DRE_REFUSED"][0])
        m.d.comb += [regs.i_error.valid.eq(code != 0), regs.i_error.payload.code.eq(code),
                     regs.i_error.payload.addr.eq(addr),
                     regs.i_error.payload.version.eq(dsc["version"])]
        x.error_now = code != 0
        # the blocks' sticky errors are cleared when the host clears ERROR_CODE or resets
        m.d.comb += [x.dma.clear.eq(x.clear_errs), x.out.clear.eq(x.clear_errs)]

    def _counters(self, m, x):
        p, cb = self.perf, self._cfg.counter_bits
        top = (1 << cb) - 1

        def bump(c, cond=1):
            with m.If(cond & (c != top)):
                m.d.sync += c.eq(c + 1)
        bump(p.descriptors, self.regs.done)
        bump(p.busy, x.phase != 0)
        bump(p.predict, x.phase == 1)
        bump(p.attend, x.phase == 2)
        bump(p.hash, x.phase == 3)
        bump(p.store, x.phase == 4)
        bump(p.errors, x.error_now)
        bump(p.swap, x.phase == 5)
        bump(p.ahead, x.ahead)
        m.d.comb += [p.dma_bursts.eq(x.dma.bursts), p.dma_beats.eq(x.dma.beats),
                     p.out_bursts.eq(x.out.bursts)]
        with m.If(x.reset_blocks):
            m.d.sync += [getattr(p, c).eq(0) for c in self.PERF
                         if c not in ("dma_bursts", "dma_beats", "out_bursts")]
