"""The KV memory manager (KVMU, DESIGN.md D12): cluster-contiguous KV blocks in a near and a
far tier behind one AXI4 master, block tables per cluster, prefetch of selected clusters with
stale-fetch drop; address-exact with ``golden.kvmu.KvMemory``."""

from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, ceil_log2, exact_log2

from vrex.rules import kvmu_rules

from ..lib import bump, counter_layout
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
    (from ``far_base``, append-only) and its table entry turns far only after every write
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
    ``i_version`` (ignored).

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

    STORE, FETCH, CLEAR = 0, 1, 2
    ERRORS = {1: "command out of range", 2: "register out of range", 3: "block table full",
              4: "fetch read", 5: "store write", 6: "offload read", 7: "offload write",
              8: "version backwards"}
    PERF = ("near_read_bytes", "near_read_beats", "near_write_bytes", "near_write_beats",
            "far_read_bytes", "far_read_beats", "far_write_bytes", "far_write_beats",
            "read_bursts", "write_bursts", "stored_tokens", "offloaded_blocks",
            "fetched_clusters", "delivered_tokens", "stale_dropped", "refused", "bus_errors",
            "wait_ar", "wait_r", "wait_aw", "wait_w", "wait_b", "busy")

    def __init__(self, *, layers: int, groups: int, heads_per_group: int, head_dim: int,
                 block_tokens: int, clusters: int, blocks: int, near_slots: int,
                 bus_bytes: int, max_burst: int, max_reads: int, max_writes: int,
                 addr_bits: int, token_bits: int, id_bits: int, version_bits: int,
                 counter_bits: int):
        kvmu_rules(layers=layers, groups=groups, heads_per_group=heads_per_group,
                   head_dim=head_dim, block_tokens=block_tokens, clusters=clusters,
                   blocks=blocks, near_slots=near_slots, bus_bytes=bus_bytes,
                   max_burst=max_burst, max_reads=max_reads, max_writes=max_writes,
                   addr_bits=addr_bits, token_bits=token_bits, version_bits=version_bits,
                   counter_bits=counter_bits)
        if not isinstance(id_bits, int) or id_bits < exact_log2(clusters):
            raise ValueError(f"id_bits must be at least log2(clusters) "
                             f"({exact_log2(clusters)}), not {id_bits!r}")
        self._layers, self._groups, self._hpg = layers, groups, heads_per_group
        self._head_dim, self._bt, self._clusters, self._blocks = (
            head_dim, block_tokens, clusters, blocks)
        self._near_slots, self._bus_bytes, self._max_burst = near_slots, bus_bytes, max_burst
        self._max_reads, self._max_writes, self._addr_bits = max_reads, max_writes, addr_bits
        self._token_bits, self._id_bits, self._version_bits = token_bits, id_bits, version_bits
        self.perf_layout = counter_layout(self.PERF, counter_bits)
        cmd = data.StructLayout({"op": 2, "layer": 8, "group": 8, "head": 8,
                                 "owner": id_bits, "token": token_bits,
                                 "version": version_bits, "first": 1, "last": 1})
        kv = data.StructLayout({"data": 8 * bus_bytes, "token": token_bits, "first": 1,
                                "end": 1, "stale": 1, "error": 1})
        super().__init__({
            "i_cmd": In(stream.Signature(cmd)),
            "i_data": In(stream.Signature(8 * bus_bytes)),
            "i_version": In(stream.Signature(data.StructLayout(
                {"layer": 8, "version": version_bits}))),
            "o_kv": Out(stream.Signature(kv)),
            "near_base": In(addr_bits), "far_base": In(addr_bits),
            "near_slots": In(bits_for(near_slots)), "max_burst": In(9),
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
        ctab = self._layers * self._groups * self._clusters * (1 + 2 * bid)
        btab = self._blocks * (bid + 1 + bits_for(self._bt) + 1 + max(bid, slot))
        toks = self._blocks * self._bt * self._token_bits
        return ctab + btab + toks + self._near_slots * (1 + bid)

    def elaborate(self, platform):
        m = Module()
        x = SimpleNamespace()
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
        x.ctab_t = data.StructLayout({"valid": 1, "head": bid_bits, "tail": bid_bits})
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
        x.bt_rd, x.bt_wr = btab.read_port(), btab.write_port()
        x.tk_rd, x.tk_wr = toks.read_port(), toks.write_port()
        x.nw_rd, x.nw_wr = nown.read_port(), nown.write_port()
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
        x.offload_data = Signal()          # the control moves R beats to W (an offload)
        x.r_drop = Signal()
        x.r_i = Signal(9)                  # beat within the head descriptor's burst
        out_valid, out_data = Signal(), Signal(8 * self._bus_bytes)
        out_first, out_end, out_stale, out_err = Signal(), Signal(), Signal(), Signal()
        can_load = ~out_valid | o.ready
        m.d.comb += [o.valid.eq(out_valid), o.payload.data.eq(out_data),
                     o.payload.token.eq(Mux(out_end, 0, x.tk_rd.data)),
                     o.payload.first.eq(out_first), o.payload.end.eq(out_end),
                     o.payload.stale.eq(out_stale), o.payload.error.eq(out_err)]
        with m.If(o.valid & o.ready):
            m.d.sync += out_valid.eq(0)
            with m.If(out_first & ~out_end):
                m.d.sync += bump(p.delivered_tokens)
        pos = Signal(bits_for(x.block_beats))
        m.d.comb += pos.eq(d.off + x.r_i)
        m.d.comb += [x.tk_rd.addr.eq(Cat(pos[x.bpt_lg:x.bpt_lg + x.bt_lg], d.bid)), x.tk_rd.en.eq(0)]
        x.r_err = Signal()                 # this cycle a fetch beat answered an error
        x.r_err_addr = Signal(self._addr_bits)
        m.d.comb += x.r_err_addr.eq(d.addr + (x.r_i << x.bus_lg))
        with m.If(~x.offload_data & x.rq.r_rdy):
            with m.If(d.end):
                with m.If(can_load):
                    m.d.comb += x.rq.r_en.eq(1)
                    m.d.sync += [out_valid.eq(1), out_end.eq(1), out_first.eq(0), out_data.eq(0),
                                 out_stale.eq(d.stale), out_err.eq(d.err | x.r_drop),
                                 x.r_drop.eq(0)]
            with m.Else():
                m.d.comb += a("rready").eq(x.r_drop | can_load)
                with m.If(x.r_go):
                    bad = a("rresp") != 0
                    with m.If(~x.r_drop & ~bad):
                        m.d.comb += x.tk_rd.en.eq(1)
                        m.d.sync += [out_valid.eq(1), out_end.eq(0), out_stale.eq(0),
                                     out_err.eq(0), out_data.eq(a("rdata")),
                                     out_first.eq(pos[:x.bpt_lg] == 0)]
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
        address."""
        a = self._axi
        raised = Signal()
        code, resp, addr = Signal(4), Signal(2), Signal(self._addr_bits)
        with m.If(x.c_err):
            m.d.comb += [raised.eq(1), code.eq(x.c_code), resp.eq(x.c_resp),
                         addr.eq(x.c_addr)]
        with m.Elif(x.r_err):
            m.d.comb += [raised.eq(1), code.eq(4), resp.eq(a("rresp")), addr.eq(x.r_err_addr)]
        with m.Elif(x.v_bad):
            m.d.comb += [raised.eq(1), code.eq(1)]
        with m.Elif(x.v_back):
            m.d.comb += [raised.eq(1), code.eq(8)]
        with m.If(self.clear):
            m.d.sync += self.error.eq(0)
        with m.Elif(raised):
            m.d.sync += self.error.eq(1)
            with m.If(~self.error):
                m.d.sync += [self.error_code.eq(code), self.error_resp.eq(resp),
                             self.error_addr.eq(addr)]

    def _control(self, m, x):
        """The command sequencer: clear, store (allocate, offload, write), fetch."""
        c = SimpleNamespace()
        c.cmd = Signal.like(self.i_cmd.payload)
        c.ct = Signal(x.ctab_t)
        c.bid = Signal(x.bid_bits)
        c.be = Signal(x.btab_t)
        c.addr = Signal(self._addr_bits)
        c.dst = Signal(self._addr_bits)
        c.rem = Signal(bits_for(x.block_beats))
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
        c.o_rerr = Signal()
        c.o_rerr_addr = Signal(self._addr_bits)
        c.o_rerr_resp = Signal(2)
        c.fetch_drop = Signal()
        c.fetch_err = Signal()
        c.drain = Signal(range(self._hpg * self.beats_per_token + 1))
        c.init_i = Signal(range(max(x.ctab_depth, self._near_slots) + 1))
        x.c_err, x.c_code = Signal(), Signal(4)
        x.c_resp, x.c_addr = Signal(2), Signal(self._addr_bits)
        cmd = c.cmd
        m.d.comb += [x.ct_rd.addr.eq(self._ctab_index(cmd)), x.bt_rd.addr.eq(c.bid),
                     x.nw_rd.addr.eq(c.alloc_slot)]
        c.max_burst = self.max_burst
        c.block_addr = lambda base, slot, j: base + ((slot * self._hpg + j) << x.bb_lg)
        with m.FSM(init="INIT") as fsm:
            self._init_states(m, x, c)
            self._decode_states(m, x, c)
            self._fetch_states(m, x, c)
            self._store_states(m, x, c)
            self._offload_states(m, x, c)
            self._write_states(m, x, c)
        m.d.comb += self.busy.eq(~fsm.ongoing("IDLE") | ~x.delivery_idle |
                                 (x.reads_out != 0) | (x.writes_out != 0))
        with m.If(self.busy):
            m.d.sync += bump(self.perf.busy)

    def _ctab_index(self, cmd):
        lg = exact_log2(self._clusters)
        return Cat(cmd.owner[:lg], (cmd.layer * self._groups + cmd.group)) if lg else \
            cmd.layer * self._groups + cmd.group

    def _fail(self, m, x, code, resp=0, addr=0):
        m.d.comb += [x.c_err.eq(1), x.c_code.eq(code), x.c_resp.eq(resp), x.c_addr.eq(addr)]

    def _init_states(self, m, x, c):
        with m.State("INIT"):
            m.d.comb += [x.ct_wr.addr.eq(c.init_i), x.ct_wr.data.eq(0),
                         x.ct_wr.en.eq(c.init_i < x.ctab_depth),
                         x.nw_wr.addr.eq(c.init_i), x.nw_wr.data.eq(0),
                         x.nw_wr.en.eq(c.init_i < self._near_slots), x.v_reset.eq(1)]
            m.d.sync += [c.init_i.eq(c.init_i + 1), c.next_bid.eq(0), c.far_count.eq(0),
                         c.alloc_slot.eq(0), c.fetch_drop.eq(0), c.fetch_err.eq(0)]
            with m.If(c.init_i == max(x.ctab_depth, self._near_slots) - 1):
                m.next = "IDLE"

    def _decode_states(self, m, x, c):
        cmd, i = c.cmd, self.i_cmd
        with m.State("IDLE"):
            m.d.comb += i.ready.eq(1)
            with m.If(i.valid):
                m.d.sync += cmd.eq(i.payload)
                m.next = "DECODE"
        with m.State("DECODE"):
            bad_cmd = ((cmd.layer >= self._layers) | (cmd.group >= self._groups) |
                       (cmd.head >= self._hpg) | (cmd.owner >= self._clusters) |
                       (cmd.op == 3))
            bad_reg = ((self.near_base[:12] != 0) | (self.far_base[:12] != 0) |
                       (self.near_slots == 0) | (self.near_slots > self._near_slots) |
                       (self.max_burst == 0) | (self.max_burst > self._max_burst))
            with m.If(cmd.op == self.CLEAR):
                m.d.sync += c.init_i.eq(0)
                m.next = "INIT"
            with m.Elif(bad_cmd | bad_reg):
                self._fail(m, x, Mux(bad_cmd, 1, 2))
                m.d.sync += bump(self.perf.refused)
                with m.If(cmd.op == self.STORE):
                    m.d.sync += c.drain.eq(self._hpg * self.beats_per_token)
                    m.next = "DRAIN"
                with m.Elif(cmd.op == self.FETCH):
                    m.d.sync += c.fetch_err.eq(1)
                    with m.If(cmd.first):
                        m.d.sync += c.fetch_drop.eq(0)
                    m.next = "F_DONE"
                with m.Else():
                    m.next = "IDLE"
            with m.Elif(cmd.op == self.STORE):
                m.next = "S_WAIT"
            with m.Else():
                m.next = "F_START"
        with m.State("DRAIN"):
            m.d.comb += self.i_data.ready.eq(c.drain != 0)
            with m.If(self.i_data.valid & (c.drain != 0)):
                m.d.sync += c.drain.eq(c.drain - 1)
            with m.If((c.drain == 0) | ((c.drain == 1) & self.i_data.valid)):
                m.next = "IDLE"

    def _fetch_states(self, m, x, c):
        cmd, a, p = c.cmd, self._axi, self.perf
        with m.State("F_START"):
            stale = x.seen[cmd.layer] & (cmd.version < x.newest[cmd.layer])
            drop = Mux(cmd.first, stale, c.fetch_drop)
            with m.If(cmd.first):
                m.d.sync += [c.fetch_drop.eq(stale), c.fetch_err.eq(0)]
                with m.If(stale):
                    m.d.sync += bump(p.stale_dropped)
            with m.If(drop):
                m.next = "F_DONE"
            with m.Else():
                m.d.sync += bump(p.fetched_clusters)
                with m.If(x.ct_rd.data.valid):
                    m.d.sync += c.bid.eq(x.ct_rd.data.head)
                    m.next = "F_BT"
                with m.Else():
                    m.next = "F_DONE"
        with m.State("F_BT"):
            m.next = "F_BT2"
        with m.State("F_BT2"):
            be = x.bt_rd.data
            m.d.sync += [c.be.eq(be), c.off.eq(0), c.rem.eq(be.fill << x.bpt_lg),
                         c.addr.eq(c.block_addr(Mux(be.far, self.far_base, self.near_base),
                                                be.slot, cmd.head))]
            with m.If(be.fill != 0):
                m.next = "F_AR"
            with m.Elif(be.has_next):
                m.d.sync += c.bid.eq(be.next)
                m.next = "F_BT"
            with m.Else():
                m.next = "F_DONE"
        with m.State("F_AR"):
            beats = burst_beats(m, c.addr, c.rem, c.max_burst, self._bus_bytes, "f")
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
                ct = x.ct_rd.data
                m.d.sync += c.ct.eq(ct)
                with m.If(ct.valid):
                    m.d.sync += c.bid.eq(ct.tail)
                    m.next = "S_TAIL"
                with m.Else():
                    m.next = "S_ALLOC"
        with m.State("S_TAIL"):
            m.next = "S_TAIL2"
        with m.State("S_TAIL2"):
            be = x.bt_rd.data
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
            nw = x.nw_rd.data
            with m.If(nw.valid):
                m.d.sync += [c.victim.eq(nw.bid), c.bid.eq(nw.bid)]
                m.next = "S_VIC"
            with m.Else():
                m.next = "S_NEW"
        with m.State("S_VIC"):
            m.next = "S_VIC2"
        with m.State("S_VIC2"):
            m.d.sync += [c.be.eq(x.bt_rd.data), c.vfill.eq(x.bt_rd.data.fill), c.j.eq(0),
                         c.o_rerr.eq(0), x.b_err.eq(0)]
            m.next = "O_SETUP"
        with m.State("S_NEW"):
            nb = c.next_bid[:x.bid_bits]
            m.d.comb += [x.bt_wr.addr.eq(nb), x.bt_wr.en.eq(1),
                         x.bt_wr.data.slot.eq(c.alloc_slot),
                         x.nw_wr.addr.eq(c.alloc_slot), x.nw_wr.en.eq(1),
                         x.nw_wr.data.valid.eq(1), x.nw_wr.data.bid.eq(nb),
                         x.ct_wr.addr.eq(self._ctab_index(cmd)), x.ct_wr.en.eq(1),
                         x.ct_wr.data.valid.eq(1), x.ct_wr.data.tail.eq(nb),
                         x.ct_wr.data.head.eq(Mux(c.ct.valid, c.ct.head, nb))]
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
            be = x.bt_rd.data
            m.d.comb += [x.bt_wr.addr.eq(c.bid), x.bt_wr.en.eq(1), x.bt_wr.data.eq(be),
                         x.bt_wr.data.has_next.eq(1), x.bt_wr.data.next.eq(c.target)]
            m.next = "S_W_SETUP"

    def _offload_states(self, m, x, c):
        """Move the victim (in the slot being allocated) to the far tier: per head, bursts
        read from near and written to far as they arrive; its entry turns far only when
        every write answered OKAY."""
        a, p = self._axi, self.perf
        with m.State("O_SETUP"):
            m.d.sync += [c.addr.eq(c.block_addr(self.near_base, c.alloc_slot, c.j)),
                         c.dst.eq(c.block_addr(self.far_base, c.far_count, c.j)),
                         c.rem.eq(c.vfill << x.bpt_lg)]
            with m.If(c.vfill == 0):
                m.next = "O_B"
            with m.Else():
                m.next = "O_AR"
        with m.State("O_AR"):
            rb = burst_beats(m, c.addr, c.rem, c.max_burst, self._bus_bytes, "or")
            wb = burst_beats(m, c.dst, c.rem, c.max_burst, self._bus_bytes, "ow")
            beats = Mux(rb < wb, rb, wb)
            m.d.comb += [a("araddr").eq(c.addr), a("arlen").eq(beats - 1),
                         a("arvalid").eq(1)]
            with m.If(x.ar_go):
                m.d.sync += [c.wbeats.eq(beats), c.wi.eq(0)]
                m.next = "O_AW"
        with m.State("O_AW"):
            m.d.comb += [a("awaddr").eq(c.dst), a("awlen").eq(c.wbeats - 1),
                         a("awvalid").eq(x.writes_out < self._max_writes)]
            with m.If(x.aw_go):
                m.next = "O_DATA"
        with m.State("O_DATA"):
            m.d.comb += [x.offload_data.eq(1), a("wvalid").eq(a("rvalid")),
                         a("wdata").eq(a("rdata")), a("wlast").eq(c.wi == c.wbeats - 1),
                         a("rready").eq(a("wready"))]
            with m.If(x.r_go):
                self._count_beat(m, 0, write=False)
                self._count_beat(m, 1, write=True)
                m.d.sync += c.wi.eq(c.wi + 1)
                with m.If((a("rresp") != 0)):
                    m.d.sync += bump(p.bus_errors)
                    with m.If(~c.o_rerr):
                        m.d.sync += [c.o_rerr.eq(1), c.o_rerr_resp.eq(a("rresp")),
                                     c.o_rerr_addr.eq(c.addr + (c.wi << x.bus_lg))]
                with m.If(c.wi == c.wbeats - 1):
                    m.d.sync += [c.addr.eq(c.addr + (c.wbeats << x.bus_lg)),
                                 c.dst.eq(c.dst + (c.wbeats << x.bus_lg)),
                                 c.rem.eq(c.rem - c.wbeats)]
                    with m.If(c.rem == c.wbeats):
                        m.next = "O_NEXT"
                    with m.Else():
                        m.next = "O_AR"
        with m.State("O_NEXT"):
            with m.If(c.j == self._hpg - 1):
                m.next = "O_B"
            with m.Else():
                m.d.sync += c.j.eq(c.j + 1)
                m.next = "O_SETUP"
        with m.State("O_B"):
            with m.If(x.writes_out == 0):
                with m.If(c.o_rerr | x.b_err):
                    self._fail(m, x, Mux(c.o_rerr, 6, 7),
                               Mux(c.o_rerr, c.o_rerr_resp, x.b_err_resp),
                               Mux(c.o_rerr, c.o_rerr_addr, x.b_err_addr))
                    m.d.sync += [bump(p.refused), x.b_err.eq(0),
                                 c.drain.eq(self._hpg * self.beats_per_token)]
                    m.next = "DRAIN"
                with m.Else():
                    m.d.comb += [x.bt_wr.addr.eq(c.victim), x.bt_wr.en.eq(1),
                                 x.bt_wr.data.eq(c.be), x.bt_wr.data.far.eq(1),
                                 x.bt_wr.data.slot.eq(c.far_count)]
                    m.d.sync += [c.far_count.eq(c.far_count + 1), bump(p.offloaded_blocks)]
                    m.next = "S_NEW"

    def _write_states(self, m, x, c):
        """Write the token's rows, one slot per head of the group, from ``i_data``; commit
        the slot (its token index, the block's fill) once every write answered OKAY."""
        a, p, cmd, i = self._axi, self.perf, c.cmd, self.i_data
        with m.State("S_W_SETUP"):
            m.d.sync += [c.addr.eq(c.block_addr(self.near_base, c.tslot, c.j) +
                                   (c.tfill << exact_log2(self.token_bytes))),
                         c.rem.eq(self.beats_per_token)]
            with m.If(c.j == 0):
                m.d.sync += x.b_err.eq(0)
            m.next = "S_AW"
        with m.State("S_AW"):
            beats = burst_beats(m, c.addr, c.rem, c.max_burst, self._bus_bytes, "s")
            m.d.comb += [a("awaddr").eq(c.addr), a("awlen").eq(beats - 1),
                         a("awvalid").eq(x.writes_out < self._max_writes)]
            with m.If(x.aw_go):
                m.d.sync += [c.wbeats.eq(beats), c.wi.eq(0)]
                m.next = "S_W"
        with m.State("S_W"):
            m.d.comb += [a("wvalid").eq(i.valid), a("wdata").eq(i.payload),
                         a("wlast").eq(c.wi == c.wbeats - 1), i.ready.eq(a("wready"))]
            with m.If(x.w_go):
                self._count_beat(m, 0, write=True)
                m.d.sync += c.wi.eq(c.wi + 1)
                with m.If(c.wi == c.wbeats - 1):
                    m.d.sync += [c.addr.eq(c.addr + (c.wbeats << x.bus_lg)),
                                 c.rem.eq(c.rem - c.wbeats)]
                    with m.If(c.rem != c.wbeats):
                        m.next = "S_AW"
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
                with m.Else():
                    m.d.comb += [x.tk_wr.addr.eq(Cat(c.tfill[:x.bt_lg], c.target)),
                                 x.tk_wr.data.eq(cmd.token), x.tk_wr.en.eq(1)]
                    m.d.sync += [c.bid.eq(c.target), bump(p.stored_tokens)]
                    m.next = "S_C"
        with m.State("S_C"):
            m.next = "S_C2"
        with m.State("S_C2"):
            be = x.bt_rd.data
            m.d.comb += [x.bt_wr.addr.eq(c.bid), x.bt_wr.en.eq(1), x.bt_wr.data.eq(be),
                         x.bt_wr.data.fill.eq(be.fill + 1)]
            m.next = "IDLE"
