"""The KV memory manager (KVMU, docs/design.md D12): cluster-contiguous KV blocks in a near and a
far tier behind one AXI4 master, block tables per cluster, prefetch of selected clusters with
stale-fetch drop; address-exact with ``golden.kvmu.KvMemory``."""

from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, ceil_log2, exact_log2

from vrex.rules import kvmu_rules

from ..lib import bump, counter_layout, mul_const
from .axi import axi4_master_members, burst_beats

__all__ = ["KvMemoryManager"]


class KvMemoryManager(wiring.Component):
    """Stores tokens' K and V rows into per-cluster blocks and fetches selected clusters.

    Computes what ``golden.kvmu.KvMemory`` computes, address for address (docs/kvmu.md).

    Layout. A token slot is its K row then its V row (``2 · head_dim`` bytes); a physical
    block is ``block_tokens`` slots of one KV head; a logical block is the ``heads_per_group``
    physical blocks of one cluster (hash group), allocated, filled and moved together. The
    near tier is a ring of ``near_slots`` (register) logical slots from ``near_base``: the k-th
    block allocated takes slot ``k mod near_slots``, so when the ring is full the block to
    move is the one in the slot being taken; it is read from near and written to the far tier
    (from ``far_base``, append-only, up to the ``far_slots`` register) and its table entry
    turns far only after every write
    answered OKAY. A token goes to its cluster's last block if that has room and is near, else
    to a new block linked behind it.

    Commands on ``i_cmd`` (``op``):
        ``STORE`` (0): token ``token`` of cluster ``owner`` of (``layer``, ``group``); its
        data follows on ``i_data``: for each head of the group its K row then V row, whole
        bus beats. Waits for outstanding reads to finish (a block moved out of near must not
        be read after its slot is reused), and completes when every write answered, so the
        block table never lists an unwritten slot.
        ``FETCH`` (1): cluster ``owner`` of (``layer``, ``group``) for KV head ``head`` of the
        group, at ``version``; a fetch is the run of FETCH commands from one with ``first``
        to one with ``last``. At its first command the version is checked against the newest
        one announced for the layer on ``i_version``; an older one drops the whole fetch (no
        read, no token; ``stale_dropped``). Every block of the cluster is read in allocation
        order as INCR bursts (split at 4 KB and at ``max_burst``), up to ``max_reads``
        outstanding, and delivered on ``o_kv`` beat by beat with the slot's token index; the
        fetch closes with one ``end`` beat (``stale`` if dropped, ``error`` if a read failed,
        after which the fetch's remaining beats are read and discarded).
        ``CLEAR`` (2): forget every table (a new stream); also done after reset.

    Errors (sticky ``error`` until ``clear``; the first keeps ``error_code``, the AXI
    ``error_resp`` and ``error_addr``): 1 a command out of range (refused; a STORE's data is
    consumed), 2 a register out of range (near_base or far_base not 4 KB aligned,
    ``near_slots`` or ``max_burst`` 0 or above the build's), 3 the block table full,
    4 a fetch read, 5 a store write (the token is not stored), 6 and 7 an offload's read or
    write (the block stays near, the token is not stored), 8 a version going backwards on
    ``i_version`` (ignored), 9 the far tier full (``far_slots`` logical blocks moved; the
    token is not stored).

    Parameters (keyword-only, all required; :meth:`from_config`; checked by
    ``vrex.rules.kvmu_rules``): ``layers``, ``groups`` (hash groups a layer), and
    ``heads_per_group``; ``head_dim``; ``block_tokens``; ``clusters`` table entries per
    (layer, group) (cluster ids below it); ``blocks`` logical block-table entries;
    ``near_slots`` the largest near ring; ``bus_bytes`` 8 or 16; ``max_burst`` beats;
    ``max_reads``, ``max_writes`` outstanding bursts; ``addr_bits``; ``token_bits``,
    ``id_bits``, ``version_bits``, ``counter_bits``.

    On chip: the cluster table (head and tail block per cluster), the block table (next
    block, fill, tier, slot), each slot's token index and the near ring's owners; in memory:
    the K and V rows. ``blocks`` bounds the blocks of a stream (error 3 past it).
    """

    STORE, FETCH, CLEAR, CAND = 0, 1, 2, 3
    ERRORS = {1: "command out of range", 2: "register out of range", 3: "block table full",
              4: "fetch read", 5: "store write", 6: "offload read", 7: "offload write",
              8: "version backwards", 9: "far tier full", 10: "HC update (cluster poisoned)",
              11: "member count full", 12: "candidate read"}
    PERF = ("near_read_bytes", "near_read_beats", "near_write_bytes", "near_write_beats",
            "far_read_bytes", "far_read_beats", "far_write_bytes", "far_write_beats",
            "read_bursts", "write_bursts", "stored_tokens", "offloaded_blocks",
            "fetched_clusters", "delivered_tokens", "stale_dropped", "refused", "bus_errors",
            "hc_read_beats", "hc_write_beats", "candidates",
            "wait_ar", "wait_r", "wait_aw", "wait_w", "wait_b", "busy")

    def __init__(self, *, layers: int, groups: int, heads_per_group: int, head_dim: int,
                 block_tokens: int, clusters: int, blocks: int, near_slots: int,
                 bus_bytes: int, max_burst: int, max_reads: int, max_writes: int,
                 addr_bits: int, token_bits: int, id_bits: int, version_bits: int,
                 step_bits: int, count_bits: int, counter_bits: int):
        kvmu_rules(layers=layers, groups=groups, heads_per_group=heads_per_group,
                   head_dim=head_dim, block_tokens=block_tokens, clusters=clusters,
                   blocks=blocks, near_slots=near_slots, bus_bytes=bus_bytes,
                   max_burst=max_burst, max_reads=max_reads, max_writes=max_writes,
                   addr_bits=addr_bits, token_bits=token_bits, version_bits=version_bits,
                   step_bits=step_bits, count_bits=count_bits, counter_bits=counter_bits)
        if not isinstance(id_bits, int) or id_bits < exact_log2(clusters):
            raise ValueError(f"id_bits must be at least log2(clusters) "
                             f"({exact_log2(clusters)}), not {id_bits!r}")
        self._layers, self._groups, self._hpg = layers, groups, heads_per_group
        self._head_dim, self._bt, self._clusters, self._blocks = (
            head_dim, block_tokens, clusters, blocks)
        self._near_slots, self._bus_bytes, self._max_burst = near_slots, bus_bytes, max_burst
        self._max_reads, self._max_writes, self._addr_bits = max_reads, max_writes, addr_bits
        self._token_bits, self._id_bits, self._version_bits = token_bits, id_bits, version_bits
        self._step_bits, self._count_bits = step_bits, count_bits
        self.perf_layout = counter_layout(self.PERF, counter_bits)
        cmd = data.StructLayout({"op": 3, "layer": 8, "group": 8, "head": 8,
                                 "owner": id_bits, "token": token_bits, "step": step_bits,
                                 "version": version_bits, "first": 1, "last": 1,
                                 "by_index": 1, "counts": 1})
        cand = data.StructLayout({"data": 8 * bus_bytes, "cluster": id_bits,
                                  "count": count_bits, "first": 1, "end": 1, "error": 1})
        kv = data.StructLayout({"data": 8 * bus_bytes, "token": token_bits, "first": 1,
                                "end": 1, "stale": 1, "error": 1})
        super().__init__({
            "i_cmd": In(stream.Signature(cmd)),
            "i_data": In(stream.Signature(8 * bus_bytes)),
            "i_version": In(stream.Signature(data.StructLayout(
                {"layer": 8, "version": version_bits}))),
            "o_kv": Out(stream.Signature(kv)),
            "o_cand": Out(stream.Signature(cand)),
            "near_base": In(addr_bits), "far_base": In(addr_bits), "hc_base": In(addr_bits),
            "near_slots": In(bits_for(near_slots)), "far_slots": In(bits_for(blocks)),
            "max_burst": In(9),
            "clear": In(1),
            "error": Out(1), "error_code": Out(4), "error_resp": Out(2),
            "error_addr": Out(addr_bits),
            "busy": Out(1),
            "perf": Out(self.perf_layout),
            **axi4_master_members("m_axi", addr_bits, 8 * bus_bytes),
        })

    @classmethod
    def from_config(cls, cfg) -> "KvMemoryManager":
        return cls(**cfg.block_params("kvmu"))

    # --- sizes -----------------------------------------------------------------------------
    @property
    def token_bytes(self) -> int:
        return 2 * self._head_dim

    @property
    def block_bytes(self) -> int:
        return self._bt * self.token_bytes

    @property
    def beats_per_token(self) -> int:
        return self.token_bytes // self._bus_bytes

    @property
    def memory_bits(self) -> int:
        """Bits of on-chip table memory."""
        bid, slot = max(1, ceil_log2(self._blocks)), max(1, ceil_log2(self._near_slots))
        ctab = self._layers * self._groups * self._clusters * (
            2 + 2 * bid + 2 * self._count_bits + self._step_bits + exact_log2(self._clusters))
        btab = self._blocks * (bid + 1 + bits_for(self._bt) + 1 + max(bid, slot))
        toks = self._blocks * self._bt * self._token_bits
        return ctab + btab + toks + self._near_slots * (1 + bid)

    def elaborate(self, platform):
        m = Module()
        x = SimpleNamespace(e_pend=Signal(name="e_pend"))   # an error on its way (_errors)
        self._tables(m, x)
        self._bus(m, x)
        self._delivery(m, x)
        self._versions(m, x)
        self._control(m, x)
        self._errors(m, x)
        return m

    # --- sections --------------------------------------------------------------------------
    def _tables(self, m, x):
        """The cluster table, block table, slot tokens and near ring owners, and the read
        FIFO of burst descriptors the delivery side walks."""
        x.bid_bits = bid_bits = max(1, ceil_log2(self._blocks))
        x.ns_bits = max(1, ceil_log2(self._near_slots))
        x.bt_lg = exact_log2(self._bt)
        x.bpt_lg = exact_log2(self.beats_per_token)
        x.bb_lg = exact_log2(self.block_bytes)
        x.bus_lg = exact_log2(self._bus_bytes)
        x.block_beats = self.block_bytes // self._bus_bytes
        x.ctab_t = data.StructLayout({"valid": 1, "head": bid_bits, "tail": bid_bits,
                                      "count": self._count_bits, "cur_step": self._step_bits,
                                      "cur_n": self._count_bits, "poisoned": 1})
        x.btab_t = data.StructLayout({"next": bid_bits, "has_next": 1,
                                      "fill": bits_for(self._bt), "far": 1,
                                      "slot": max(bid_bits, x.ns_bits)})
        x.nown_t = data.StructLayout({"valid": 1, "bid": bid_bits})
        x.desc_t = data.StructLayout({"end": 1, "stale": 1, "err": 1, "far": 1,
                                      "bid": bid_bits, "off": bits_for(x.block_beats),
                                      "beats": 9, "addr": self._addr_bits})
        depth = self._layers * self._groups * self._clusters
        m.submodules.ctab = ctab = memory.Memory(shape=x.ctab_t, depth=depth, init=[])
        m.submodules.btab = btab = memory.Memory(shape=x.btab_t, depth=self._blocks, init=[])
        m.submodules.toks = toks = memory.Memory(shape=self._token_bits,
                                                 depth=self._blocks * self._bt, init=[])
        m.submodules.nown = nown = memory.Memory(shape=x.nown_t, depth=self._near_slots,
                                                 init=[])
        x.ct_rd, x.ct_wr = ctab.read_port(), ctab.write_port()
        # the last candidate list of each (layer, group): index -> cluster id
        x.cl_lg = exact_log2(self._clusters)
        m.submodules.cmap = cmap = memory.Memory(shape=max(1, x.cl_lg), depth=depth, init=[])
        x.cm_rd, x.cm_wr = cmap.read_port(), cmap.write_port()
        # the K rows of the token being stored, one per head of the group, for the HC update
        x.kbeats = -(-self._head_dim // self._bus_bytes)
        m.submodules.kbuf = kbuf = memory.Memory(shape=8 * self._bus_bytes,
                                                 depth=self._hpg * x.kbeats, init=[])
        x.kb_rd, x.kb_wr = kbuf.read_port(domain="comb"), kbuf.write_port()
        ctx = self._layers * self._groups
        x.n_clusters = Array(Signal(range(self._clusters + 1), name=f"n_clusters_{i}")
                             for i in range(ctx))
        x.n_cand = Array(Signal(range(self._clusters + 1), name=f"n_cand_{i}")
                         for i in range(ctx))
        x.bt_rd, x.bt_wr = btab.read_port(), btab.write_port()
        x.tk_rd, x.tk_wr = toks.read_port(), toks.write_port()
        x.nw_rd, x.nw_wr = nown.read_port(), nown.write_port()
        # the block table's and the near ring's reads registered as they are, always (the
        # RAMs' own output registers on an FPGA: synth/bram_outreg.py), so no decision waits
        # on a block RAM's clock-to-out: an entry is in ``bt_q`` two cycles after its address
        x.bt_q = Signal(x.btab_t, name="bt_q", reset_less=True)
        x.nw_q = Signal(x.nown_t, name="nw_q", reset_less=True)
        m.d.sync += [x.bt_q.eq(x.bt_rd.data), x.nw_q.eq(x.nw_rd.data)]
        m.submodules.rq = x.rq = fifo.SyncFIFOBuffered(width=x.desc_t.size,
                                                       depth=self._max_reads + 2)
        x.rq_w = data.View(x.desc_t, x.rq.w_data)
        x.rq_r = data.View(x.desc_t, x.rq.r_data)
        x.ctab_depth = depth

    def _axi(self, name):
        return getattr(self, f"m_axi_{name}")

    def _bus(self, m, x):
        """Constant AXI fields, outstanding-burst counts, B responses, channel counters."""
        a = self._axi
        for ch in ("aw", "ar"):
            m.d.comb += [a(f"{ch}id").eq(0), a(f"{ch}size").eq(x.bus_lg), a(f"{ch}burst").eq(1),
                         a(f"{ch}cache").eq(0b0011), a(f"{ch}prot").eq(0),
                         a(f"{ch}lock").eq(0)]
        m.d.comb += [a("wstrb").eq((1 << self._bus_bytes) - 1), a("bready").eq(1)]
        x.reads_out = Signal(range(self._max_reads + 1))
        x.writes_out = Signal(range(self._max_writes + 1))
        x.ar_go = a("arvalid") & a("arready")
        x.aw_go = a("awvalid") & a("awready")
        x.w_go = a("wvalid") & a("wready")
        x.r_go = a("rvalid") & a("rready")
        x.b_go = a("bvalid") & a("bready")
        m.d.sync += [x.reads_out.eq(x.reads_out + x.ar_go - (x.r_go & a("rlast"))),
                     x.writes_out.eq(x.writes_out + x.aw_go - x.b_go)]
        # the address of every write burst in flight, for the error report of its B
        m.submodules.wq = x.wq = fifo.SyncFIFO(width=self._addr_bits,
                                                depth=self._max_writes)
        m.d.comb += [x.wq.w_data.eq(a("awaddr")), x.wq.w_en.eq(x.aw_go),
                     x.wq.r_en.eq(x.b_go)]
        x.b_err = Signal()          # a B of the current STORE or offload answered an error
        x.b_err_addr = Signal(self._addr_bits)
        x.b_err_resp = Signal(2)
        with m.If(x.b_go & (a("bresp") != 0) & ~x.b_err):
            m.d.sync += [x.b_err.eq(1), x.b_err_addr.eq(x.wq.r_data),
                         x.b_err_resp.eq(a("bresp"))]
        p = self.perf
        with m.If(a("arvalid") & ~a("arready")):
            m.d.sync += bump(p.wait_ar)
        with m.If(a("awvalid") & ~a("awready")):
            m.d.sync += bump(p.wait_aw)
        with m.If(a("wvalid") & ~a("wready")):
            m.d.sync += bump(p.wait_w)
        with m.If((x.reads_out != 0) & ~a("rvalid")):
            m.d.sync += bump(p.wait_r)
        with m.If((x.writes_out != 0) & ~a("bvalid")):
            m.d.sync += bump(p.wait_b)
        with m.If(x.ar_go):
            m.d.sync += bump(p.read_bursts)
        with m.If(x.aw_go):
            m.d.sync += bump(p.write_bursts)
        with m.If(x.b_go & (a("bresp") != 0)):
            m.d.sync += bump(p.bus_errors)

    def _delivery(self, m, x):
        """R beats of fetch bursts to ``o_kv`` through one output register, the slot's token
        index read beside it; a read error drops the fetch's remaining beats up to its
        ``end``."""
        a, p, o = self._axi, self.perf, self.o_kv
        d = x.rq_r
        x.own_r = Signal()                 # the control takes R beats (offload, HC, CAND)
        x.r_drop = Signal()
        x.r_i = Signal(9)                  # beat within the head descriptor's burst
        out_valid, out_data = Signal(), Signal(8 * self._bus_bytes)
        out_first, out_end, out_stale, out_err = Signal(), Signal(), Signal(), Signal()
        can_load = ~out_valid | o.ready
        # the data register loads the R channel's data whenever it may load (an end beat's
        # data reads as 0 at the output), so its 8·bus_bytes enables carry none of the R
        # channel's decisions (they were the clock's limit: docs/kvmu.md)
        with m.If(can_load):
            m.d.sync += out_data.eq(a("rdata"))
        m.d.comb += [o.valid.eq(out_valid), o.payload.data.eq(Mux(out_end, 0, out_data)),
                     o.payload.token.eq(Mux(out_end, 0, x.tk_rd.data)),
                     o.payload.first.eq(out_first), o.payload.end.eq(out_end),
                     o.payload.stale.eq(out_stale), o.payload.error.eq(out_err)]
        with m.If(o.valid & o.ready):
            m.d.sync += out_valid.eq(0)
            with m.If(out_first & ~out_end):
                m.d.sync += bump(p.delivered_tokens)
        pos = Signal(bits_for(x.block_beats))
        m.d.comb += pos.eq(d.off + x.r_i)
        # the token index is read whenever the output register may load, not only when an R
        # beat does: a register that does not load goes idle (or holds an end beat, whose
        # token reads as 0), so the read enable needs none of the R channel's decisions
        # (they were the clock's limit: docs/kvmu.md)
        m.d.comb += [x.tk_rd.addr.eq(Cat(pos[x.bpt_lg:x.bpt_lg + x.bt_lg], d.bid)),
                     x.tk_rd.en.eq(can_load)]
        x.r_err = Signal()                 # this cycle a fetch beat answered an error
        x.r_err_addr = Signal(self._addr_bits)
        m.d.comb += x.r_err_addr.eq(d.addr + (x.r_i << x.bus_lg))
        with m.If(~x.own_r & x.rq.r_rdy):
            with m.If(d.end):
                with m.If(can_load):
                    m.d.comb += x.rq.r_en.eq(1)
                    m.d.sync += [out_valid.eq(1), out_end.eq(1), out_first.eq(0),
                                 out_stale.eq(d.stale), out_err.eq(d.err | x.r_drop),
                                 x.r_drop.eq(0)]
            with m.Else():
                m.d.comb += a("rready").eq(x.r_drop | can_load)
                with m.If(x.r_go):
                    bad = a("rresp") != 0
                    with m.If(~x.r_drop & ~bad):
                        m.d.sync += [out_valid.eq(1), out_end.eq(0), out_stale.eq(0),
                                     out_err.eq(0), out_first.eq(pos[:x.bpt_lg] == 0)]
                    with m.If(bad):
                        m.d.sync += [x.r_drop.eq(1), bump(p.bus_errors)]
                        m.d.comb += x.r_err.eq(~x.r_drop)
                    self._count_beat(m, d.far, write=False)
                    m.d.sync += x.r_i.eq(x.r_i + 1)
                    with m.If(x.r_i == d.beats - 1):
                        m.d.comb += x.rq.r_en.eq(1)
                        m.d.sync += x.r_i.eq(0)
        x.delivery_idle = ~out_valid & ~x.rq.r_rdy

    def _count_beat(self, m, far, write: bool):
        p, d = self.perf, "write" if write else "read"
        with m.If(far):
            m.d.sync += [bump(p[f"far_{d}_beats"]), bump(p[f"far_{d}_bytes"], self._bus_bytes)]
        with m.Else():
            m.d.sync += [bump(p[f"near_{d}_beats"]),
                         bump(p[f"near_{d}_bytes"], self._bus_bytes)]

    def _versions(self, m, x):
        """The newest version announced per layer (``i_version``), for the stale check."""
        v = self.i_version
        x.newest = Array(Signal(self._version_bits, name=f"newest_{i}")
                         for i in range(self._layers))
        x.seen = Array(Signal(name=f"seen_{i}") for i in range(self._layers))
        x.v_bad = Signal()
        x.v_back = Signal()
        x.v_reset = Signal()
        m.d.comb += v.ready.eq(1)
        with m.If(v.valid):
            with m.If(v.payload.layer >= self._layers):
                m.d.comb += x.v_bad.eq(1)
            with m.Elif(x.seen[v.payload.layer] &
                        (v.payload.version < x.newest[v.payload.layer])):
                m.d.comb += x.v_back.eq(1)
            with m.Else():
                m.d.sync += [x.newest[v.payload.layer].eq(v.payload.version),
                             x.seen[v.payload.layer].eq(1)]
        with m.If(x.v_reset):
            m.d.sync += [s.eq(0) for s in x.seen]

    def _errors(self, m, x):
        """The sticky error: the first one since ``clear`` keeps its code, response and
        address. Each source's event is registered as it is (the decisions that raise one
        were the clock's limit), then the first source in order (the control's, a fetch
        read's, a candidate read's, a bad or backwards version) is taken: the error shows
        one cycle after its event, ``busy`` stays up meanwhile, and ``clear`` drops both."""
        a = self._axi
        ab = self._addr_bits
        # per source: (event, code, response, address), registered
        srcs = [(x.c_err, x.c_code, x.c_resp, x.c_addr),
                (x.r_err, 4, a("rresp"), x.r_err_addr),
                (x.k_err, 12, a("rresp"), x.k_err_addr),
                (x.v_bad, 1, 0, 0),
                (x.v_back, 8, 0, 0)]
        regs = []
        for i, (ev, code, resp, addr) in enumerate(srcs):
            r = SimpleNamespace(ev=Signal(name=f"e{i}_ev"), code=Signal(4, name=f"e{i}_code"),
                                resp=Signal(2, name=f"e{i}_resp"),
                                addr=Signal(ab, name=f"e{i}_addr"))
            m.d.sync += [r.ev.eq(ev & ~self.clear), r.code.eq(code), r.resp.eq(resp),
                         r.addr.eq(addr)]
            regs.append(r)
        m.d.comb += x.e_pend.eq(Cat(*[r.ev for r in regs]).any())
        with m.If(self.clear):
            m.d.sync += self.error.eq(0)
        with m.Elif(x.e_pend):
            m.d.sync += self.error.eq(1)
        with m.If(~self.clear & ~self.error):
            for k, r in enumerate(regs):
                with (m.If if k == 0 else m.Elif)(r.ev):
                    m.d.sync += [self.error_code.eq(r.code), self.error_resp.eq(r.resp),
                                 self.error_addr.eq(r.addr)]

    def _control(self, m, x):
        """The command sequencer: clear, store (allocate, offload, write), fetch."""
        c = SimpleNamespace()
        c.cmd = Signal.like(self.i_cmd.payload)
        c.ct = Signal(x.ctab_t)
        c.bid = Signal(x.bid_bits)
        c.be = Signal(x.btab_t)
        c.addr = Signal(self._addr_bits)
        c.dst = Signal(self._addr_bits)
        rec_beats = self._hpg * 4 * self._head_dim // self._bus_bytes   # a cluster's sums
        c.rem = Signal(bits_for(max(x.block_beats, rec_beats)))
        c.off = Signal(bits_for(x.block_beats))
        c.j = Signal(range(self._hpg + 1))
        c.wi = Signal(9)
        c.wbeats = Signal(9)
        c.next_bid = Signal(x.bid_bits + 1)
        c.far_count = Signal(x.bid_bits + 1)
        c.alloc_slot = Signal(x.ns_bits)
        c.target = Signal(x.bid_bits)
        c.tslot = Signal(max(x.bid_bits, x.ns_bits))
        c.tfill = Signal(bits_for(self._bt))
        c.victim = Signal(x.bid_bits)
        c.vfill = Signal(bits_for(self._bt))
        c.hc = Signal()                 # the move updates sums (else it offloads a block)
        c.rd = Signal()                 # the move reads before it writes
        c.rerr = Signal()               # a read of the move answered an error
        c.rerr_addr = Signal(self._addr_bits)
        c.rerr_resp = Signal(2)
        c.fetch_drop = Signal()
        c.fetch_err = Signal()
        c.drain = Signal(range(self._hpg * self.beats_per_token + 1))
        c.init_i = Signal(range(max(x.ctab_depth, self._near_slots) + 1))
        c.ci = Signal(range(self._clusters + 1))        # CAND: the cluster id visited
        c.ncand = Signal(range(self._clusters + 1))     # CAND: candidates so far
        c.cand_mode = Signal()                          # the cluster table read by c.ci
        c.cand_ok = Signal()                            # CAND: the entry is a candidate
        c.idx_bad = Signal()                            # FETCH: by index, past the list
        c.rx = Signal()                                 # CAND: R beats go to the dividers
        c.cm_addr = Signal(max(1, ceil_log2(x.ctab_depth)))
        c.hb = Signal(range(self.beats_per_token + 1))  # STORE: beat within a head's slot
        c.hi = Signal(range(4 * self._head_dim // self._bus_bytes + 1))  # beat of a head's sums
        c.h_err = Signal()              # the sums' update failed; a candidate read failed
        c.seen = Signal()               # FETCH: the layer's newest version, registered
        c.newest = Signal(self._version_bits)
        c.ctx = Signal(range(self._layers * self._groups))   # layer · groups + group
        x.c_err, x.c_code = Signal(), Signal(4)
        x.c_resp, x.c_addr = Signal(2), Signal(self._addr_bits)
        cmd = c.cmd
        m.d.comb += [x.ct_rd.addr.eq(Mux(c.cand_mode, self._index(c.ctx, c.ci),
                                         self._index(c.ctx, cmd.owner))),
                     x.bt_rd.addr.eq(c.bid), x.nw_rd.addr.eq(c.alloc_slot),
                     x.cm_rd.addr.eq(c.cm_addr)]
        c.max_burst = self.max_burst
        # addresses are made in two cycles: an offset from the registers (a product by a
        # constant, as shifted additions, and an add), then ADD_BASE adds the tier's base
        # register and goes on to c.ret
        c.block_off = lambda slot, j: (mul_const(slot, self._hpg) + j) << x.bb_lg
        c.abase, c.dbase = Signal(2), Signal(2)         # 0 near, 1 far, 2 HC table
        c.ret = Signal(2)                               # 0 F_AR, 1 S_AW, 2 M_PICK, 3 C_AR
        # the next burst's length, registered before the state that asks for it: from the
        # offset in ADD_BASE (the bases are 4 KB aligned, so the offset's place in its page
        # is the address's), again in LEN after a burst that left beats, and in M_PICK for
        # a move (the shorter of its read's and its write's)
        c.beats = Signal(9)
        c.next_beats = burst_beats(m, c.addr, c.rem, c.max_burst, self._bus_bytes, "n")
        c.next_dst_beats = burst_beats(m, c.dst, c.rem, c.max_burst, self._bus_bytes, "d")
        self._cand_keys(m, x, c)
        with m.If(c.rx):
            m.d.comb += x.own_r.eq(1)
        with m.FSM(init="INIT") as fsm:
            self._init_states(m, x, c)
            self._decode_states(m, x, c)
            self._fetch_states(m, x, c)
            self._store_states(m, x, c)
            self._write_states(m, x, c)
            self._move_states(m, x, c)
            with m.State("ADD_BASE"):
                bases = Array([self.near_base, self.far_base, self.hc_base, self.hc_base])
                m.d.sync += [c.addr.eq(c.addr + bases[c.abase]),
                             c.dst.eq(c.dst + bases[c.dbase]), c.beats.eq(c.next_beats)]
                self._return(m, c)
            with m.State("LEN"):
                m.d.sync += c.beats.eq(c.next_beats)
                self._return(m, c)
            self._cand_states(m, x, c)
        working = ~fsm.ongoing("IDLE") | ~x.delivery_idle | (x.reads_out != 0) | (
            x.writes_out != 0)
        m.d.comb += self.busy.eq(working | x.e_pend)
        with m.If(working):
            m.d.sync += bump(self.perf.busy)

    @staticmethod
    def _return(m, c):
        with m.Switch(c.ret):
            for k, state in enumerate(("F_AR", "S_AW", "M_PICK", "C_AR")):
                with m.Case(k):
                    m.next = state

    def _ctab_index(self, c):
        return self._index(c.ctx, c.cmd.owner)

    def _index(self, ctx, cluster):
        """The cluster table's (and candidate map's) entry of ``cluster`` in context ``ctx``
        (layer · groups + group)."""
        lg = exact_log2(self._clusters)
        return Cat(cluster[:lg], ctx) if lg else ctx

    def _fail(self, m, x, code, resp=0, addr=0):
        m.d.comb += [x.c_err.eq(1), x.c_code.eq(code), x.c_resp.eq(resp), x.c_addr.eq(addr)]

    def _init_states(self, m, x, c):
        with m.State("INIT"):
            m.d.comb += [x.ct_wr.addr.eq(c.init_i), x.ct_wr.data.eq(0),
                         x.ct_wr.en.eq(c.init_i < x.ctab_depth),
                         x.nw_wr.addr.eq(c.init_i), x.nw_wr.data.eq(0),
                         x.nw_wr.en.eq(c.init_i < self._near_slots), x.v_reset.eq(1)]
            m.d.sync += [c.init_i.eq(c.init_i + 1), c.next_bid.eq(0), c.far_count.eq(0),
                         c.alloc_slot.eq(0), c.fetch_drop.eq(0), c.fetch_err.eq(0),
                         *[n.eq(0) for n in x.n_clusters], *[n.eq(0) for n in x.n_cand]]
            with m.If(c.init_i == max(x.ctab_depth, self._near_slots) - 1):
                m.next = "IDLE"

    def _decode_states(self, m, x, c):
        cmd, i = c.cmd, self.i_cmd
        with m.State("IDLE"):
            m.d.comb += i.ready.eq(1)
            with m.If(i.valid):
                # the command's (layer, group) context registered with it
                m.d.sync += [cmd.eq(i.payload),
                             c.ctx.eq(mul_const(i.payload.layer, self._groups) +
                                      i.payload.group)]
                m.next = "DECODE"
        with m.State("DECODE"):
            ctx_ok = (cmd.layer < self._layers) & (cmd.group < self._groups)
            by_index = (cmd.op == self.FETCH) & cmd.by_index
            # the owner against the table's size by its high bits alone, and (by index)
            # against the list's length by its low ones: no comparison of all id_bits
            high = cmd.owner[x.cl_lg:].any() if len(cmd.owner) > x.cl_lg else Const(0)
            low = cmd.owner[:x.cl_lg] if x.cl_lg else Const(0)
            bad_fields = (~ctx_ok | (cmd.head >= self._hpg) | (cmd.op > self.CAND) | high)
            # a fetch by index past the list: refused in F_MAP (the comparison is registered
            # here, off the next-state logic), unless refused here for another reason
            bad_index = by_index & (low >= x.n_cand[c.ctx])
            m.d.sync += c.idx_bad.eq(bad_index)
            bad_cmd = bad_fields | bad_index
            bad_reg = ((self.near_base[:12] != 0) | (self.far_base[:12] != 0) |
                       (self.hc_base[:12] != 0) |
                       (self.near_slots == 0) | (self.near_slots > self._near_slots) |
                       (self.max_burst == 0) | (self.max_burst > self._max_burst))
            with m.If(cmd.op == self.CLEAR):
                m.d.sync += c.init_i.eq(0)
                m.next = "INIT"
            with m.Elif(bad_fields | bad_reg):
                self._fail(m, x, Mux(bad_cmd, 1, 2))
                m.d.sync += bump(self.perf.refused)
                with m.If(cmd.op == self.STORE):
                    m.d.sync += c.drain.eq(self._hpg * self.beats_per_token)
                    m.next = "DRAIN"
                with m.Elif(cmd.op == self.FETCH):
                    self._refuse_fetch(m, c)
                with m.Elif(cmd.op == self.CAND):
                    m.next = "C_BAD"
                with m.Else():
                    m.next = "IDLE"
            with m.Elif(cmd.op == self.STORE):
                m.next = "S_WAIT"
            with m.Elif(cmd.op == self.CAND):
                m.next = "C_WAIT"
            with m.Elif(cmd.by_index):
                m.d.sync += c.cm_addr.eq(self._index(c.ctx, cmd.owner))
                m.next = "F_MAP"
            with m.Else():
                m.next = "F_START"
        with m.State("DRAIN"):
            m.d.comb += self.i_data.ready.eq(c.drain != 0)
            with m.If(self.i_data.valid & (c.drain != 0)):
                m.d.sync += c.drain.eq(c.drain - 1)
            with m.If((c.drain == 0) | ((c.drain == 1) & self.i_data.valid)):
                m.next = "IDLE"

    def _refuse_fetch(self, m, c):
        m.d.sync += c.fetch_err.eq(1)
        with m.If(c.cmd.first):
            m.d.sync += c.fetch_drop.eq(0)
        m.next = "F_DONE"

    def _fetch_states(self, m, x, c):
        cmd, a, p = c.cmd, self._axi, self.perf
        with m.State("F_MAP"):
            with m.If(c.idx_bad):
                self._fail(m, x, 1)
                m.d.sync += bump(p.refused)
                self._refuse_fetch(m, c)
            with m.Else():
                m.next = "F_MAP2"
        with m.State("F_MAP2"):
            m.d.sync += cmd.owner.eq(x.cm_rd.data)
            m.next = "F_MAP3"
        with m.State("F_MAP3"):
            m.next = "F_START"
        with m.State("F_START"):       # the cluster entry and the layer's newest version
            m.d.sync += [c.ct.eq(x.ct_rd.data), c.seen.eq(x.seen[cmd.layer]),
                         c.newest.eq(x.newest[cmd.layer])]
            m.next = "F_CHECK"
        with m.State("F_CHECK"):
            stale = c.seen & (cmd.version < c.newest)
            drop = Mux(cmd.first, stale, c.fetch_drop)
            with m.If(cmd.first):
                m.d.sync += [c.fetch_drop.eq(stale), c.fetch_err.eq(0)]
                with m.If(stale):
                    m.d.sync += bump(p.stale_dropped)
            with m.If(drop):
                m.next = "F_DONE"
            with m.Else():
                m.d.sync += bump(p.fetched_clusters)
                with m.If(c.ct.valid):
                    m.d.sync += c.bid.eq(c.ct.head)
                    m.next = "F_BT"
                with m.Else():
                    m.next = "F_DONE"
        with m.State("F_BT"):
            m.next = "F_BT2"
        with m.State("F_BT2"):
            m.next = "F_BT3"
        with m.State("F_BT3"):
            be = x.bt_q
            m.d.sync += [c.be.eq(be), c.off.eq(0), c.rem.eq(be.fill << x.bpt_lg)]
            with m.If(be.fill != 0):
                m.next = "F_OFF"
            with m.Elif(be.has_next):
                m.d.sync += c.bid.eq(be.next)
                m.next = "F_BT"
            with m.Else():
                m.next = "F_DONE"
        with m.State("F_OFF"):
            m.d.sync += [c.addr.eq(c.block_off(c.be.slot, cmd.head)), c.abase.eq(c.be.far),
                         c.ret.eq(0)]
            m.next = "ADD_BASE"
        with m.State("F_AR"):
            beats = c.beats
            room = (x.reads_out < self._max_reads) & x.rq.w_rdy
            m.d.comb += [a("araddr").eq(c.addr), a("arlen").eq(beats - 1),
                         a("arvalid").eq(room),
                         x.rq_w.far.eq(c.be.far), x.rq_w.bid.eq(c.bid), x.rq_w.off.eq(c.off),
                         x.rq_w.beats.eq(beats), x.rq_w.addr.eq(c.addr),
                         x.rq.w_en.eq(x.ar_go)]
            with m.If(x.ar_go):
                m.d.sync += [c.addr.eq(c.addr + (beats << x.bus_lg)), c.rem.eq(c.rem - beats),
                             c.off.eq(c.off + beats)]
                with m.If(c.rem == beats):
                    with m.If(c.be.has_next):
                        m.d.sync += c.bid.eq(c.be.next)
                        m.next = "F_BT"
                    with m.Else():
                        m.next = "F_DONE"
                with m.Else():
                    m.next = "LEN"
        with m.State("F_DONE"):
            with m.If(cmd.last):
                m.d.comb += [x.rq_w.end.eq(1), x.rq_w.stale.eq(c.fetch_drop),
                             x.rq_w.err.eq(c.fetch_err), x.rq.w_en.eq(1)]
                with m.If(x.rq.w_rdy):
                    m.d.sync += [c.fetch_drop.eq(0), c.fetch_err.eq(0)]
                    m.next = "IDLE"
            with m.Else():
                m.next = "IDLE"

    def _store_states(self, m, x, c):
        """Find the token's block: the cluster's last one if it has room and is near, else a
        new one (moving the ring's oldest block out first when the ring is full)."""
        cmd, p = c.cmd, self.perf
        with m.State("S_WAIT"):
            with m.If((x.reads_out == 0) & x.delivery_idle):
                m.d.sync += c.ct.eq(x.ct_rd.data)
                m.next = "S_FIND"
        with m.State("S_FIND"):
            ct = c.ct
            with m.If(ct.count == (1 << self._count_bits) - 1):
                self._fail(m, x, 11)
                m.d.sync += [bump(p.refused), c.drain.eq(self._hpg * self.beats_per_token)]
                m.next = "DRAIN"
            with m.Elif(ct.valid):
                m.d.sync += c.bid.eq(ct.tail)
                m.next = "S_TAIL"
            with m.Else():
                m.next = "S_ALLOC"
        with m.State("S_TAIL"):
            m.next = "S_TAIL2"
        with m.State("S_TAIL2"):
            m.next = "S_TAIL3"
        with m.State("S_TAIL3"):
            be = x.bt_q
            with m.If((be.fill < self._bt) & ~be.far):
                m.d.sync += [c.target.eq(c.bid), c.tslot.eq(be.slot), c.tfill.eq(be.fill),
                             c.j.eq(0)]
                m.next = "S_W_SETUP"
            with m.Else():
                m.next = "S_ALLOC"
        with m.State("S_ALLOC"):
            with m.If(c.next_bid == self._blocks):
                self._fail(m, x, 3)
                m.d.sync += [bump(p.refused), c.drain.eq(self._hpg * self.beats_per_token)]
                m.next = "DRAIN"
            with m.Else():
                m.next = "S_ALLOC2"
        with m.State("S_ALLOC2"):
            m.next = "S_ALLOC3"
        with m.State("S_ALLOC3"):
            nw = x.nw_q
            with m.If(nw.valid & (c.far_count >= self.far_slots)):
                self._fail(m, x, 9)
                m.d.sync += [bump(p.refused), c.drain.eq(self._hpg * self.beats_per_token)]
                m.next = "DRAIN"
            with m.Elif(nw.valid):
                m.d.sync += [c.victim.eq(nw.bid), c.bid.eq(nw.bid)]
                m.next = "S_VIC"
            with m.Else():
                m.next = "S_NEW"
        with m.State("S_VIC"):
            m.next = "S_VIC2"
        with m.State("S_VIC2"):
            m.next = "S_VIC3"
        with m.State("S_VIC3"):
            m.d.sync += [c.be.eq(x.bt_q), c.vfill.eq(x.bt_q.fill), c.j.eq(0),
                         c.rerr.eq(0), x.b_err.eq(0), c.hc.eq(0)]
            m.next = "M_SETUP"
        with m.State("S_NEW"):
            nb = c.next_bid[:x.bid_bits]
            m.d.comb += [x.bt_wr.addr.eq(nb), x.bt_wr.en.eq(1),
                         x.bt_wr.data.slot.eq(c.alloc_slot),
                         x.nw_wr.addr.eq(c.alloc_slot), x.nw_wr.en.eq(1),
                         x.nw_wr.data.valid.eq(1), x.nw_wr.data.bid.eq(nb),
                         x.ct_wr.addr.eq(self._ctab_index(c)), x.ct_wr.en.eq(1),
                         x.ct_wr.data.eq(c.ct), x.ct_wr.data.valid.eq(1),
                         x.ct_wr.data.tail.eq(nb),
                         x.ct_wr.data.head.eq(Mux(c.ct.valid, c.ct.head, nb))]
            m.d.sync += [c.ct.valid.eq(1), c.ct.tail.eq(nb),
                         c.ct.head.eq(Mux(c.ct.valid, c.ct.head, nb))]
            last_slot = c.alloc_slot == self.near_slots - 1
            m.d.sync += [c.target.eq(nb), c.tslot.eq(c.alloc_slot), c.tfill.eq(0), c.j.eq(0),
                         c.next_bid.eq(c.next_bid + 1),
                         c.alloc_slot.eq(Mux(last_slot, 0, c.alloc_slot + 1))]
            with m.If(c.ct.valid):
                m.d.sync += c.bid.eq(c.ct.tail)
                m.next = "S_LINK"
            with m.Else():
                m.next = "S_W_SETUP"
        with m.State("S_LINK"):
            m.next = "S_LINK2"
        with m.State("S_LINK2"):
            m.next = "S_LINK3"
        with m.State("S_LINK3"):
            be = x.bt_q
            m.d.comb += [x.bt_wr.addr.eq(c.bid), x.bt_wr.en.eq(1), x.bt_wr.data.eq(be),
                         x.bt_wr.data.has_next.eq(1), x.bt_wr.data.next.eq(c.target)]
            m.next = "S_W_SETUP"

    def _write_states(self, m, x, c):
        """Write the token's rows, one slot per head of the group, from ``i_data``; commit
        the slot (its token index, the block's fill) once every write answered OKAY."""
        a, p, cmd, i = self._axi, self.perf, c.cmd, self.i_data
        with m.State("S_W_SETUP"):
            m.d.sync += [c.addr.eq(c.block_off(c.tslot, c.j) +
                                   (c.tfill << exact_log2(self.token_bytes))),
                         c.abase.eq(0), c.ret.eq(1),
                         c.rem.eq(self.beats_per_token), c.hb.eq(0)]
            with m.If(c.j == 0):
                m.d.sync += x.b_err.eq(0)
            m.next = "ADD_BASE"
        with m.State("S_AW"):
            beats = c.beats
            m.d.comb += [a("awaddr").eq(c.addr), a("awlen").eq(beats - 1),
                         a("awvalid").eq(x.writes_out < self._max_writes)]
            with m.If(x.aw_go):
                m.d.sync += [c.wbeats.eq(beats), c.wi.eq(0)]
                m.next = "S_W"
        with m.State("S_W"):
            m.d.comb += [a("wvalid").eq(i.valid), a("wdata").eq(i.payload),
                         a("wlast").eq(c.wi == c.wbeats - 1), i.ready.eq(a("wready")),
                         x.kb_wr.addr.eq(mul_const(c.j, x.kbeats) + c.hb),
                         x.kb_wr.data.eq(i.payload),
                         x.kb_wr.en.eq(x.w_go & (c.hb < x.kbeats))]
            with m.If(x.w_go):
                self._count_beat(m, 0, write=True)
                m.d.sync += [c.wi.eq(c.wi + 1), c.hb.eq(c.hb + 1)]
                with m.If(c.wi == c.wbeats - 1):
                    m.d.sync += [c.addr.eq(c.addr + (c.wbeats << x.bus_lg)),
                                 c.rem.eq(c.rem - c.wbeats)]
                    with m.If(c.rem != c.wbeats):
                        m.next = "LEN"
                    with m.Elif(c.j == self._hpg - 1):
                        m.next = "S_B"
                    with m.Else():
                        m.d.sync += c.j.eq(c.j + 1)
                        m.next = "S_W_SETUP"
        with m.State("S_B"):
            with m.If(x.writes_out == 0):
                with m.If(x.b_err):
                    self._fail(m, x, 5, x.b_err_resp, x.b_err_addr)
                    m.d.sync += [bump(p.refused), x.b_err.eq(0)]
                    m.next = "IDLE"
                with m.Elif(c.ct.poisoned):
                    m.next = "S_COMMIT"
                with m.Else():
                    m.d.sync += [c.j.eq(0), c.h_err.eq(0), c.rerr.eq(0), c.hc.eq(1)]
                    m.next = "M_SETUP"
        with m.State("S_COMMIT"):
            # the token's slot and the cluster's count (or its poisoning), then the fill
            ctx = c.ctx
            m.d.comb += [x.tk_wr.addr.eq(Cat(c.tfill[:x.bt_lg], c.target)),
                         x.tk_wr.data.eq(cmd.token), x.tk_wr.en.eq(1),
                         x.ct_wr.addr.eq(self._ctab_index(c)), x.ct_wr.en.eq(1),
                         x.ct_wr.data.eq(c.ct)]
            with m.If(c.h_err):
                m.d.comb += x.ct_wr.data.poisoned.eq(1)
            with m.Elif(~c.ct.poisoned):
                same = c.ct.cur_step == cmd.step
                m.d.comb += [x.ct_wr.data.count.eq(c.ct.count + 1),
                             x.ct_wr.data.cur_step.eq(cmd.step),
                             x.ct_wr.data.cur_n.eq(Mux(same & (c.ct.count != 0),
                                                       c.ct.cur_n + 1, 1))]
            low = cmd.owner[:x.cl_lg] if x.cl_lg else Const(0)   # the owner is in range
            with m.If(low >= x.n_clusters[ctx]):
                m.d.sync += x.n_clusters[ctx].eq(low + 1)
            m.d.sync += [c.bid.eq(c.target), bump(p.stored_tokens)]
            m.next = "S_C"
        with m.State("S_C"):
            m.next = "S_C2"
        with m.State("S_C2"):
            m.next = "S_C3"
        with m.State("S_C3"):
            be = x.bt_q
            m.d.comb += [x.bt_wr.addr.eq(c.bid), x.bt_wr.en.eq(1), x.bt_wr.data.eq(be),
                         x.bt_wr.data.fill.eq(be.fill + 1)]
            m.next = "IDLE"

    def _hc_off(self, c, head):
        """The offset from ``hc_base`` of the sums of ``head`` in the command's cluster
        record (or, listing candidates, in cluster ``c.ci``'s)."""
        rec = self._hpg * 4 * self._head_dim
        idx = Mux(c.cand_mode, self._index(c.ctx, c.ci), self._ctab_index(c))
        return mul_const(idx, rec) + mul_const(head, 4 * self._head_dim)

    def _k_lanes(self, m, x, c):
        """The K values (sign-extended) of the sums beat ``c.hi`` of head ``c.j`` (the record
        holds the heads' sums one after another; ``c.j`` moves on as ``c.hi`` wraps): read a
        beat ahead (for the beat it will be after this cycle) and registered, so the K
        buffer's read is not on the path from an R beat to its W beat."""
        lanes = self._bus_bytes // 4
        hi_next = Signal.like(c.hi, name="hi_next")
        j_next = Signal.like(c.j, name="j_next")
        kq = Signal(8 * lanes, name="kq")
        m.d.comb += [hi_next.eq(Mux(x.w_go, Mux(c.hi_wrap, 0, c.hi + 1), c.hi)),
                     j_next.eq(Mux(x.w_go & c.hi_wrap, c.j + 1, c.j)),
                     x.kb_rd.addr.eq(mul_const(j_next, x.kbeats) + (hi_next >> 2))]
        m.d.sync += kq.eq(x.kb_rd.data.word_select(hi_next[:2], 8 * lanes))
        return [kq[8 * k:8 * k + 8].as_signed() for k in range(lanes)]

    def _move_states(self, m, x, c):
        """One sequence for both read-modify-write jobs, burst by burst (AR, AW, then each R
        beat becomes a W beat as it arrives): an offload (``c.hc`` = 0) copies the victim's
        filled slots from near to far, per head of the group, and, only if every transfer
        answered OKAY, turns its entry far; the update of the sums (``c.hc`` = 1) adds the
        token's K rows to its cluster's record, every head's sums in one run of bursts (a
        round trip for the record, not one a head; a first member's is written without
        reading), and poisons the cluster if a transfer failed."""
        a, p = self._axi, self.perf
        hbeats = 4 * self._head_dim // self._bus_bytes
        lanes = self._bus_bytes // 4
        c.hi_wrap = c.hi == hbeats - 1
        k = self._k_lanes(m, x, c)
        with m.State("M_SETUP"):
            with m.If(c.hc):
                off = self._hc_off(c, 0)
                m.d.sync += [c.addr.eq(off), c.dst.eq(off), c.abase.eq(2), c.dbase.eq(2),
                             c.rem.eq(self._hpg * hbeats), c.hi.eq(0),
                             c.rd.eq(c.ct.count != 0)]
            with m.Else():
                m.d.sync += [c.addr.eq(c.block_off(c.alloc_slot, c.j)), c.abase.eq(0),
                             c.dst.eq(c.block_off(c.far_count, c.j)), c.dbase.eq(1),
                             c.rem.eq(c.vfill << x.bpt_lg), c.rd.eq(1)]
            m.d.sync += c.ret.eq(2)
            m.next = "ADD_BASE"
        with m.State("M_PICK"):
            m.d.sync += c.beats.eq(Mux(c.next_beats < c.next_dst_beats, c.next_beats,
                                       c.next_dst_beats))
            with m.If(c.rem == 0):
                m.next = "M_NEXT"
            with m.Elif(c.rd):
                m.next = "M_AR"
            with m.Else():
                m.next = "M_AW"
        beats = c.beats
        with m.State("M_AR"):
            m.d.comb += [a("araddr").eq(c.addr), a("arlen").eq(beats - 1), a("arvalid").eq(1)]
            with m.If(x.ar_go):
                m.next = "M_AW"
        with m.State("M_AW"):
            m.d.comb += [a("awaddr").eq(c.dst), a("awlen").eq(beats - 1),
                         a("awvalid").eq(x.writes_out < self._max_writes)]
            with m.If(x.aw_go):
                m.d.sync += [c.wbeats.eq(beats), c.wi.eq(0)]
                m.next = "M_DATA"
        with m.State("M_DATA"):
            old = [a("rdata")[32 * i:32 * i + 32].as_signed() for i in range(lanes)]
            summed = Cat(*[Mux(c.rd, old[i] + k[i], k[i])[:32] for i in range(lanes)])
            m.d.comb += [a("wdata").eq(Mux(c.hc, summed, a("rdata"))),
                         a("wlast").eq(c.wi == c.wbeats - 1),
                         a("wvalid").eq(~c.rd | a("rvalid")), x.own_r.eq(c.rd),
                         a("rready").eq(c.rd & a("wready"))]
            with m.If(x.w_go):
                m.d.sync += [c.wi.eq(c.wi + 1), c.hi.eq(Mux(c.hi_wrap, 0, c.hi + 1))]
                with m.If(c.hc):
                    m.d.sync += bump(p.hc_write_beats)
                    with m.If(c.hi_wrap):
                        m.d.sync += c.j.eq(c.j + 1)         # the next head's sums
                    with m.If(c.rd):
                        m.d.sync += bump(p.hc_read_beats)
                with m.Else():
                    self._count_beat(m, 0, write=False)
                    self._count_beat(m, 1, write=True)
                with m.If(c.rd & (a("rresp") != 0)):
                    m.d.sync += bump(p.bus_errors)
                    with m.If(~c.rerr):
                        m.d.sync += [c.rerr.eq(1), c.rerr_resp.eq(a("rresp")),
                                     c.rerr_addr.eq(c.addr + (c.wi << x.bus_lg))]
                with m.If(c.wi == c.wbeats - 1):
                    m.d.sync += [c.addr.eq(c.addr + (c.wbeats << x.bus_lg)),
                                 c.dst.eq(c.dst + (c.wbeats << x.bus_lg)),
                                 c.rem.eq(c.rem - c.wbeats)]
                    m.next = "M_PICK"
        with m.State("M_NEXT"):
            with m.If(c.hc | (c.j == self._hpg - 1)):
                m.next = "M_B"
            with m.Else():
                m.d.sync += c.j.eq(c.j + 1)
                m.next = "M_SETUP"
        with m.State("M_B"):
            bad = c.rerr | x.b_err
            resp = Mux(c.rerr, c.rerr_resp, x.b_err_resp)
            where = Mux(c.rerr, c.rerr_addr, x.b_err_addr)
            with m.If(x.writes_out == 0):
                m.d.sync += x.b_err.eq(0)
                with m.If(c.hc):
                    with m.If(bad):
                        self._fail(m, x, 10, resp, where)
                    m.d.sync += c.h_err.eq(bad)
                    m.next = "S_COMMIT"
                with m.Elif(bad):
                    self._fail(m, x, Mux(c.rerr, 6, 7), resp, where)
                    m.d.sync += [bump(p.refused),
                                 c.drain.eq(self._hpg * self.beats_per_token)]
                    m.next = "DRAIN"
                with m.Else():
                    m.d.comb += [x.bt_wr.addr.eq(c.victim), x.bt_wr.en.eq(1),
                                 x.bt_wr.data.eq(c.be), x.bt_wr.data.far.eq(1),
                                 x.bt_wr.data.slot.eq(c.far_count)]
                    m.d.sync += [c.far_count.eq(c.far_count + 1), bump(p.offloaded_blocks)]
                    m.next = "S_NEW"

    def _cand_keys(self, m, x, c):
        """The keyed candidate list's receiving side: the sums' R beats, one a cycle, through
        a pipeline of ``bus_bytes / 4`` restoring dividers (a quotient bit a stage, saturated
        when the quotient reaches 256) into ``o_cand`` words of ``bus_bytes`` int8 values.
        The issuing side (``C_*`` states) pushes each candidate (cluster id, count, past
        count, address of its sums) on ``x.cq`` as its first burst is asked for; its last
        beat pops it."""
        a, p, o = self._axi, self.perf, self.o_cand
        hbeats = 4 * self._head_dim // self._bus_bytes
        lanes, cb = self._bus_bytes // 4, self._count_bits
        meta_t = data.StructLayout({"ci": len(c.ci), "cnt": cb, "past": cb,
                                    "addr": self._addr_bits})
        m.submodules.cq = x.cq = cq = fifo.SyncFIFO(width=meta_t.size,
                                                    depth=self._max_reads + 1)
        x.cq_w = data.View(meta_t, cq.w_data)
        head = data.View(meta_t, cq.r_data)
        x.k_err = Signal()                 # this cycle a sums beat answered an error
        x.k_err_addr = Signal(self._addr_bits)
        rx_i = Signal(range(hbeats))       # beat of the candidate's sums
        out_valid, out_data = Signal(), Signal(8 * self._bus_bytes)
        out_ci, out_past, out_first = Signal(len(c.ci)), Signal(cb), Signal()
        m.d.comb += [o.valid.eq(out_valid), o.payload.data.eq(out_data),
                     o.payload.cluster.eq(out_ci), o.payload.count.eq(out_past),
                     o.payload.first.eq(out_first)]
        with m.If(o.valid & o.ready):
            m.d.sync += out_valid.eq(0)
        adv = Signal()                     # the pipeline moves (its output has room)
        m.d.comb += adv.eq(~out_valid | o.ready)
        # stage layout: candidate fields, the beat's place in its output word, and per lane
        # the sign, saturation, remainder and quotient so far
        stages = 9
        stage_t = data.StructLayout({"valid": 1, "cnt": cb, "ci": len(c.ci), "past": cb,
                                     "pos": 2, "first": 1, "last": 1})
        meta = [Signal(stage_t, name=f"kd{s}") for s in range(stages + 1)]
        neg = [[Signal(name=f"kd{s}_neg{i}") for i in range(lanes)] for s in range(stages + 1)]
        sat = [[Signal(name=f"kd{s}_sat{i}") for i in range(lanes)] for s in range(stages + 1)]
        # stage 0 holds |sum|; stage s >= 1 the remainder after s - 1 quotient bits, below
        # (2 · count) << (9 - s)
        num = [[Signal(32 if s == 0 else cb + 10 - s, name=f"kd{s}_num{i}")
                for i in range(lanes)] for s in range(stages + 1)]
        q = [[Signal(max(1, s - 1), name=f"kd{s}_q{i}") for i in range(lanes)]
             for s in range(stages + 1)]
        with m.If(adv):
            # stage 0: the R beat, when the list is keyed and a candidate is waiting
            with m.If(c.rx):
                m.d.comb += a("rready").eq(cq.r_rdy)
            # the stage's fields load on every move, valid or not (only `valid` says which),
            # so their enables carry none of the R channel's decisions
            m.d.sync += [meta[0].valid.eq(x.r_go & c.rx),
                         meta[0].cnt.eq(head.cnt), meta[0].ci.eq(head.ci),
                         meta[0].past.eq(head.past), meta[0].pos.eq(rx_i[:2]),
                         meta[0].first.eq(rx_i < 4),
                         meta[0].last.eq((rx_i[:2] == 3) | (rx_i == hbeats - 1))]
            bad = a("rresp") != 0               # a failed beat's sums are taken as zero
            for i in range(lanes):
                s = a("rdata")[32 * i:32 * i + 32].as_signed()
                m.d.sync += [neg[0][i].eq(~bad & (s < 0)),
                             num[0][i].eq(Mux(bad, 0, Mux(s < 0, -s, s)))]
            with m.If(x.r_go & c.rx):
                m.d.sync += [rx_i.eq(rx_i + 1), bump(p.hc_read_beats)]
                with m.If(rx_i == hbeats - 1):
                    m.d.comb += cq.r_en.eq(1)
                    m.d.sync += rx_i.eq(0)
                with m.If(bad & ~c.h_err):
                    m.d.comb += [x.k_err.eq(1),
                                 x.k_err_addr.eq(head.addr + (rx_i << x.bus_lg))]
                    m.d.sync += [c.h_err.eq(1), bump(p.bus_errors)]
            # stage 1: 2·|sum| + count (round half away from zero), saturated at 256·2·count
            for i in range(lanes):
                n2 = (num[0][i] << 1) + meta[0].cnt
                big = n2 >= (meta[0].cnt << 9)
                m.d.sync += [neg[1][i].eq(neg[0][i]), sat[1][i].eq(big),
                             num[1][i].eq(Mux(big, 0, n2))]
            # stages 2..9: one quotient bit each against (2·count) << (8 - s)
            for s in range(1, stages):
                den = meta[s].cnt << (stages - s)
                for i in range(lanes):
                    ge = num[s][i] >= den
                    bits = Cat(ge, q[s][i]) if s > 1 else ge
                    m.d.sync += [neg[s + 1][i].eq(neg[s][i]), sat[s + 1][i].eq(sat[s][i]),
                                 num[s + 1][i].eq(Mux(ge, num[s][i] - den, num[s][i])),
                                 q[s + 1][i].eq(bits)]
            for s in range(stages):
                m.d.sync += meta[s + 1].eq(meta[s])
            # the output word: quotients clipped to int8, word by word
            last = meta[stages]
            cw = Signal(8 * self._bus_bytes)
            vals = []
            for i in range(lanes):
                qq = Mux(sat[stages][i], 255, q[stages][i])
                v = Mux(neg[stages][i], Mux(qq > 128, -128, -qq), Mux(qq > 127, 127, qq))
                vals.append(v[:8])
            word = Cat(*[Mux(last.pos == j, Cat(*vals), Mux(last.pos == 0, 0,
                                                             cw.word_select(j, 8 * lanes)))
                         for j in range(4)])
            with m.If(last.valid):
                with m.If(last.last):
                    m.d.sync += [out_valid.eq(1), out_data.eq(word), out_ci.eq(last.ci),
                                 out_past.eq(last.past), out_first.eq(last.first)]
                with m.Else():
                    m.d.sync += cw.eq(word)
        x.keys_idle = ~cq.r_rdy & ~out_valid & ~Cat(*[s.valid for s in meta]).any()

    def _cand_states(self, m, x, c):
        """The candidate list of (layer, group) at ``step`` for one head: every cluster with
        past members, in id order (``counts``: one beat each with its past count, no key),
        with its representative key (``round_div(sum, count)``, :meth:`_cand_keys`) and its
        past count, on ``o_cand``; closed by an ``end`` beat holding the number of
        candidates. The sums' reads are issued while earlier ones are divided, up to
        ``max_reads`` bursts outstanding."""
        a, p, cmd, o = self._axi, self.perf, c.cmd, self.o_cand
        hbeats = 4 * self._head_dim // self._bus_bytes
        cb = self._count_bits
        cnt, past = Signal(cb), Signal(cb)
        with m.State("C_WAIT"):
            with m.If((x.reads_out == 0) & x.delivery_idle):
                m.d.sync += [c.cand_mode.eq(1), c.ci.eq(0), c.ncand.eq(0), c.h_err.eq(0),
                             c.rx.eq(~cmd.counts)]
                m.next = "C_RD"
        with m.State("C_RD"):
            with m.If(c.ci == x.n_clusters[c.ctx]):
                m.next = "C_DRAIN"
            with m.Else():
                m.next = "C_CHK"
        with m.State("C_CHK"):
            m.d.sync += c.ct.eq(x.ct_rd.data)
            m.next = "C_CHK2"
        with m.State("C_CHK2"):
            # the entry's past members (and whether it is a candidate) registered, then used
            e = c.ct
            pst = e.count - Mux(e.cur_step == cmd.step, e.cur_n, 0)
            m.d.sync += [cnt.eq(e.count), past.eq(pst),
                         c.cand_ok.eq(e.valid & ~e.poisoned & (pst[:cb] != 0))]
            m.next = "C_CHK3"
        with m.State("C_CHK3"):
            with m.If(c.cand_ok):
                m.d.comb += [x.cm_wr.addr.eq(self._index(c.ctx, c.ncand)),
                             x.cm_wr.data.eq(c.ci), x.cm_wr.en.eq(1)]
                m.d.sync += [c.ncand.eq(c.ncand + 1), bump(p.candidates)]
                with m.If(cmd.counts):
                    m.next = "C_COUNT"
                with m.Else():
                    m.d.sync += [c.rem.eq(hbeats), c.addr.eq(self._hc_off(c, cmd.head)),
                                 c.abase.eq(2), c.ret.eq(3)]
                    m.next = "ADD_BASE"
            with m.Else():
                m.d.sync += c.ci.eq(c.ci + 1)
                m.next = "C_RD"
        beats = c.beats
        with m.State("C_AR"):
            # the ready-valid rule: once raised, arvalid stays until taken (only this state's
            # own AR fills reads_out and the candidate FIFO)
            room = (x.reads_out < self._max_reads) & x.cq.w_rdy
            m.d.comb += [a("araddr").eq(c.addr), a("arlen").eq(beats - 1),
                         a("arvalid").eq(room)]
            with m.If(x.ar_go):
                with m.If(c.rem == hbeats):
                    m.d.comb += [x.cq.w_en.eq(1), x.cq_w.ci.eq(c.ci), x.cq_w.cnt.eq(cnt),
                                 x.cq_w.past.eq(past), x.cq_w.addr.eq(c.addr)]
                with m.If(c.rem == beats):
                    m.d.sync += c.ci.eq(c.ci + 1)
                    m.next = "C_RD"
                with m.Else():
                    m.d.sync += [c.addr.eq(c.addr + (beats << x.bus_lg)),
                                 c.rem.eq(c.rem - beats)]
                    m.next = "LEN"
        with m.State("C_COUNT"):
            # a counts-only list: one beat a candidate, no key read
            m.d.comb += [o.valid.eq(1), o.payload.data.eq(0), o.payload.cluster.eq(c.ci),
                         o.payload.count.eq(past), o.payload.first.eq(1)]
            with m.If(o.ready):
                m.d.sync += c.ci.eq(c.ci + 1)
                m.next = "C_RD"
        with m.State("C_DRAIN"):
            with m.If(x.keys_idle & (x.reads_out == 0)):
                m.d.sync += c.rx.eq(0)
                m.next = "C_END"
        with m.State("C_END"):
            m.d.comb += [o.valid.eq(1), o.payload.end.eq(1), o.payload.first.eq(0),
                         o.payload.data.eq(0), o.payload.cluster.eq(0),
                         o.payload.count.eq(c.ncand), o.payload.error.eq(c.h_err)]
            with m.If(o.ready):
                m.d.sync += [x.n_cand[c.ctx].eq(c.ncand), c.cand_mode.eq(0)]
                m.next = "IDLE"
        with m.State("C_BAD"):
            m.d.comb += [o.valid.eq(1), o.payload.end.eq(1), o.payload.first.eq(0),
                         o.payload.data.eq(0), o.payload.cluster.eq(0),
                         o.payload.count.eq(0), o.payload.error.eq(1)]
            with m.If(o.ready):
                m.next = "IDLE"
