"""The KV memory manager (KVMU, docs/design.md D12): cluster-contiguous KV blocks in a near and a
far tier behind one AXI4 master, block tables per cluster, prefetch of selected clusters with
stale-fetch drop; address-exact with ``golden.kvmu.KvMemory``. The unit joins its parts: the
command sequencer and its tables (:mod:`.control`, with :mod:`.fetch` and :mod:`.store`), the
delivery of fetched beats (:mod:`.delivery`), the keyed candidate list (:mod:`.keys`), the
bus's bookkeeping, the versions and the sticky error (:mod:`.parts`)."""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, ceil_log2, exact_log2

from vrex.rules import kvmu_rules

from ..lib import bump, counter_layout
from .axi import axi4_master_members
from .control import KvmuControl
from .delivery import KvmuDelivery
from .keys import KvmuKeys
from .parts import KvmuBus, KvmuErrors, KvmuLayouts, KvmuVersions

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
        self._cmd_layout = cmd = data.StructLayout({"op": 3, "layer": 8, "group": 8, "head": 8,
                                 "owner": id_bits, "token": token_bits, "step": step_bits,
                                 "version": version_bits, "first": 1, "last": 1,
                                 "by_index": 1, "counts": 1, "past": 1})
        self._cand_layout = cand = data.StructLayout({
            "data": 8 * bus_bytes, "cluster": id_bits, "count": count_bits, "first": 1,
            "end": 1, "error": 1})
        self._kv_layout = kv = data.StructLayout({
            "data": 8 * bus_bytes, "token": token_bits, "first": 1, "end": 1, "stale": 1,
            "error": 1})
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
        L = KvmuLayouts.of(self)
        m.submodules.bus = bus = KvmuBus(bus_bytes=self._bus_bytes, addr_bits=self._addr_bits,
                                         max_reads=self._max_reads,
                                         max_writes=self._max_writes)
        m.submodules.delivery = dl = KvmuDelivery(
            desc=L.desc, kv=self._kv_layout, bus_bytes=self._bus_bytes, block_tokens=self._bt,
            beats_per_token=self.beats_per_token, blocks=self._blocks,
            token_bits=self._token_bits, addr_bits=self._addr_bits, max_reads=self._max_reads)
        m.submodules.versions = vs = KvmuVersions(layers=self._layers,
                                                  version_bits=self._version_bits)
        m.submodules.keys = ks = KvmuKeys(
            bus_bytes=self._bus_bytes, head_dim=self._head_dim, count_bits=self._count_bits,
            ci_bits=len(Signal(range(self._clusters + 1))), addr_bits=self._addr_bits,
            max_reads=self._max_reads, cand=self._cand_layout)
        m.submodules.control = ctl = KvmuControl(self, L, cmd=self._cmd_layout,
                                                 cand=self._cand_layout)
        # per source of the sticky error, in order: the control's, a fetch read's, a
        # candidate read's, a bad or backwards version
        m.submodules.errors = er = KvmuErrors(sources=(None, 4, 12, 1, 8),
                                              addr_bits=self._addr_bits)
        # each slot's token index: written by a store's commit, read by the delivery
        m.submodules.toks = toks = memory.Memory(shape=self._token_bits,
                                                 depth=self._blocks * self._bt, init=[])
        wiring.connect(m, ctl.toks, toks.write_port())
        wiring.connect(m, dl.toks, toks.read_port())
        wiring.connect(m, wiring.flipped(self.i_cmd), ctl.cmd_in)
        wiring.connect(m, wiring.flipped(self.i_data), ctl.data_in)
        wiring.connect(m, wiring.flipped(self.i_version), vs.announce)
        wiring.connect(m, dl.o_beats, wiring.flipped(self.o_kv))
        self._axi_channels(m, bus, dl, ks, ctl)
        self._join(m, bus, dl, vs, ks, ctl, er)
        self._counters(m, bus, dl, ks, ctl)
        return m

    def _axi(self, name):
        return getattr(self, f"m_axi_{name}")

    def _axi_channels(self, m, bus, dl, ks, ctl):
        """The AXI4 master: the control's AR, AW and W; R ready from whichever part takes
        the beats (the delivery, the dividers, a move: never two at once); the constant
        fields."""
        a = self._axi
        for ch in ("aw", "ar"):
            m.d.comb += [a(f"{ch}id").eq(0), a(f"{ch}size").eq(exact_log2(self._bus_bytes)),
                         a(f"{ch}burst").eq(1), a(f"{ch}cache").eq(0b0011),
                         a(f"{ch}prot").eq(0), a(f"{ch}lock").eq(0)]
        m.d.comb += [a("wstrb").eq((1 << self._bus_bytes) - 1), a("bready").eq(1)]
        m.d.comb += [a(n).eq(getattr(ctl, n)) for n in ("araddr", "arlen", "arvalid",
                                                       "awaddr", "awlen", "awvalid",
                                                       "wdata", "wlast", "wvalid")]
        m.d.comb += a("rready").eq(dl.rready | ks.rready | ctl.rready)
        go = {ch: a(f"{ch}valid") & a(f"{ch}ready") for ch in ("ar", "aw", "w", "r")}
        m.d.comb += [ctl.ar_go.eq(go["ar"]), ctl.aw_go.eq(go["aw"]), ctl.w_go.eq(go["w"]),
                     ctl.r_go.eq(go["r"]), dl.r_go.eq(go["r"]), ks.r_go.eq(go["r"])]
        m.d.comb += [getattr(bus, n).eq(a(n)) for n in (
            "arvalid", "arready", "awvalid", "awready", "awaddr", "wvalid", "wready",
            "rvalid", "rready", "rlast", "bvalid", "bresp")]
        m.d.comb += [ctl.wready.eq(a("wready")), ctl.rvalid.eq(a("rvalid")),
                     ctl.rdata.eq(a("rdata")), ctl.rresp.eq(a("rresp")),
                     dl.rvalid.eq(a("rvalid")), dl.rdata.eq(a("rdata")),
                     dl.rresp.eq(a("rresp")), ks.rdata.eq(a("rdata")),
                     ks.rresp.eq(a("rresp"))]

    def _join(self, m, bus, dl, vs, ks, ctl, er):
        """The parts' other links: the registers, the bus's counts and B error, the fetch
        bursts, the versions, the dividers, the candidate list's beats (the dividers' keyed
        ones, or the control's counts-only and end beats), the errors, busy."""
        a, o = self._axi, self.o_cand
        m.d.comb += [getattr(ctl, f"reg_{n}").eq(getattr(self, n)) for n in (
            "near_base", "far_base", "hc_base", "near_slots", "far_slots", "max_burst")]
        m.d.comb += [
            ctl.reads_out.eq(bus.reads_out), ctl.writes_out.eq(bus.writes_out),
            ctl.b_err.eq(bus.b_err), ctl.b_err_addr.eq(bus.b_err_addr),
            ctl.b_err_resp.eq(bus.b_err_resp), bus.b_clear.eq(ctl.b_clear),
            dl.own_r.eq(ctl.own_r), dl.rq_valid.eq(ctl.rq_valid), dl.rq_desc.eq(ctl.rq_desc),
            ctl.rq_rdy.eq(dl.rq_rdy), ctl.delivery_idle.eq(dl.idle),
            vs.layer.eq(ctl.v_layer), vs.reset.eq(ctl.v_reset), ctl.seen.eq(vs.seen),
            ctl.newest.eq(vs.newest),
            ks.rx.eq(ctl.rx), ks.cq_valid.eq(ctl.cq_valid), ks.cq.eq(ctl.cq),
            ctl.cq_rdy.eq(ks.cq_rdy), ks.h_err.eq(ctl.h_err), ctl.h_err_set.eq(ks.h_err_set),
            ctl.keys_idle.eq(ks.idle),
            o.valid.eq(ks.o_valid | ctl.cand_valid),
            o.payload.eq(Mux(ctl.cand_valid, ctl.cand, ks.o)),
            ks.o_ready.eq(o.ready), ctl.cand_ready.eq(o.ready),
            er.clr.eq(self.clear),
            er.ev0.eq(ctl.c_err), er.code0.eq(ctl.c_code), er.resp0.eq(ctl.c_resp),
            er.addr0.eq(ctl.c_addr),
            er.ev1.eq(dl.r_err), er.resp1.eq(a("rresp")), er.addr1.eq(dl.r_err_addr),
            er.ev2.eq(ks.k_err), er.resp2.eq(a("rresp")), er.addr2.eq(ks.k_err_addr),
            er.ev3.eq(vs.bad), er.ev4.eq(vs.back),
            self.error.eq(er.sticky), self.error_code.eq(er.code),
            self.error_resp.eq(er.resp), self.error_addr.eq(er.addr),
            self.busy.eq(ctl.working | er.pending)]

    def _counters(self, m, *parts):
        """Each counter advances by its step (a beat's bytes, else 1) in a cycle where any
        part sets its event."""
        for name in self.PERF:
            evs = [p.ev[name] for p in parts if name in p.COUNTERS]
            step = self._bus_bytes if name.endswith("_bytes") else 1
            with m.If(Cat(*evs).any()):
                m.d.sync += bump(self.perf[name], step)
