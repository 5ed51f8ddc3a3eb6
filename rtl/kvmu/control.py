"""The KVMU's command sequencer: decode, then a store (find or allocate the token's block,
offload the ring's oldest, write, update the cluster's sums, commit), a fetch (walk the
cluster's blocks, ask for their bursts) or a candidate list; its tables live here."""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, ceil_log2, exact_log2

from ..lib import mul_const
from .axi import burst_beats
from .fetch import FetchStates
from .keys import key_meta
from .parts import events
from .store import StoreStates

__all__ = ["KvmuControl"]


class _Regs:
    """The sequencer's registers and tables, made once and read by its states."""

    def __init__(self, u: "KvmuControl", m):
        L = u.layouts
        self.bid_bits, self.ns_bits = L.bid_bits, L.ns_bits
        self.bt_lg = exact_log2(u._bt)
        self.bpt_lg = exact_log2(u.beats_per_token)
        self.bb_lg = exact_log2(u.block_bytes)
        self.bus_lg = exact_log2(u._bus_bytes)
        self.block_beats = L.block_beats
        self.ctab_depth = depth = u._layers * u._groups * u._clusters
        self.cl_lg = exact_log2(u._clusters)
        self.kbeats = -(-u._head_dim // u._bus_bytes)
        self._tables(u, m, L, depth)
        self.cmd = Signal.like(u.cmd_in.payload)
        self.ct = Signal(L.ctab)
        self.bid = Signal(L.bid_bits)
        self.be = Signal(L.btab)
        self.addr = Signal(u._addr_bits)
        self.dst = Signal(u._addr_bits)
        rec_beats = u._hpg * 4 * u._head_dim // u._bus_bytes   # a cluster's sums
        self.rem = Signal(bits_for(max(L.block_beats, rec_beats)))
        self.off = Signal(bits_for(L.block_beats))
        self.j = Signal(range(u._hpg + 1))
        self.wi, self.wbeats = Signal(9), Signal(9)
        self.next_bid = Signal(L.bid_bits + 1)
        self.far_count = Signal(L.bid_bits + 1)
        self.alloc_slot = Signal(L.ns_bits)
        self.target = Signal(L.bid_bits)
        self.tslot = Signal(max(L.bid_bits, L.ns_bits))
        self.tfill = Signal(bits_for(u._bt))
        self.victim = Signal(L.bid_bits)
        self.vfill = Signal(bits_for(u._bt))
        self.hc = Signal()              # the move updates sums (else it offloads a block)
        self.rd = Signal()              # the move reads before it writes
        self.rerr = Signal()            # a read of the move answered an error
        self.rerr_addr = Signal(u._addr_bits)
        self.rerr_resp = Signal(2)
        self.fetch_drop = Signal()
        self.fetch_err = Signal()
        self.flim = Signal(u._count_bits)     # FETCH past: members left to deliver
        self.flim_on = Signal()               # FETCH past: the limit applies
        self.drain = Signal(range(u._hpg * u.beats_per_token + 1))
        self.init_i = Signal(range(max(depth, u._near_slots) + 1))
        self.ci = Signal(range(u._clusters + 1))        # CAND: the cluster id visited
        self.ncand = Signal(range(u._clusters + 1))     # CAND: candidates so far
        self.cand_mode = Signal()                       # the cluster table read by ci
        self.cand_ok = Signal()                         # CAND: the entry is a candidate
        self.idx_bad = Signal()                         # FETCH: by index, past the list
        self.rx = Signal()                              # CAND: R beats go to the dividers
        self.cm_addr = Signal(max(1, ceil_log2(depth)))
        self.hb = Signal(range(u.beats_per_token + 1))  # STORE: beat within a head's slot
        self.hi = Signal(range(4 * u._head_dim // u._bus_bytes + 1))  # beat of a head's sums
        self.h_err = Signal()           # the sums' update failed; a candidate read failed
        self.seen = Signal()            # FETCH: the layer's newest version, registered
        self.newest = Signal(u._version_bits)
        self.ctx = Signal(range(u._layers * u._groups))     # layer · groups + group
        self.abase, self.dbase = Signal(2), Signal(2)       # 0 near, 1 far, 2 HC table
        self.ret = Signal(2)                            # 0 F_AR, 1 S_AW, 2 M_PICK, 3 C_AR
        self.beats = Signal(9)
        self.cand_cnt, self.cand_past = Signal(u._count_bits), Signal(u._count_bits)

    def _tables(self, u, m, L, depth):
        """The cluster table, block table, slot tokens' near ring owners, the candidate map
        and the K rows of the token being stored (for the HC update)."""
        m.submodules.ctab = ctab = memory.Memory(shape=L.ctab, depth=depth, init=[])
        m.submodules.btab = btab = memory.Memory(shape=L.btab, depth=u._blocks, init=[])
        m.submodules.nown = nown = memory.Memory(shape=L.nown, depth=u._near_slots, init=[])
        self.ct_rd, self.ct_wr = ctab.read_port(), ctab.write_port()
        # the last candidate list of each (layer, group): index -> cluster id
        m.submodules.cmap = cmap = memory.Memory(shape=max(1, self.cl_lg), depth=depth,
                                                 init=[])
        self.cm_rd, self.cm_wr = cmap.read_port(), cmap.write_port()
        m.submodules.kbuf = kbuf = memory.Memory(shape=8 * u._bus_bytes,
                                                 depth=u._hpg * self.kbeats, init=[])
        self.kb_rd, self.kb_wr = kbuf.read_port(domain="comb"), kbuf.write_port()
        ctx = u._layers * u._groups
        self.n_clusters = Array(Signal(range(u._clusters + 1), name=f"n_clusters_{i}")
                                for i in range(ctx))
        self.n_cand = Array(Signal(range(u._clusters + 1), name=f"n_cand_{i}")
                            for i in range(ctx))
        self.bt_rd, self.bt_wr = btab.read_port(), btab.write_port()
        self.nw_rd, self.nw_wr = nown.read_port(), nown.write_port()
        # the block table's and the near ring's reads registered as they are, always (the
        # RAMs' own output registers on an FPGA: synth/bram_outreg.py), so no decision waits
        # on a block RAM's clock-to-out: an entry is in ``bt_q`` two cycles after its address
        self.bt_q = Signal(L.btab, name="bt_q", reset_less=True)
        self.nw_q = Signal(L.nown, name="nw_q", reset_less=True)
        m.d.sync += [self.bt_q.eq(self.bt_rd.data), self.nw_q.eq(self.nw_rd.data)]


class KvmuControl(FetchStates, StoreStates, wiring.Component):
    """The command sequencer (``i_cmd``; its FSM's paths: :class:`.fetch.FetchStates`,
    :class:`.store.StoreStates`). It drives the AXI4 master's AR, AW and W channels and
    takes the R beats of its own reads (``own_r``: an offload's, a sums update's, a keyed
    list's go to :class:`.keys.KvmuKeys`); a fetch's bursts go to the delivery
    (``rq_*``). Addresses are made in two cycles: an offset from the registers (a product by
    a constant, as shifted additions, and an add), then ``ADD_BASE`` adds the tier's base
    register; the next burst's length is registered before the state that asks for it."""

    COUNTERS = ("refused", "stale_dropped", "fetched_clusters", "stored_tokens",
                "offloaded_blocks", "candidates", "hc_write_beats", "hc_read_beats",
                "bus_errors", "near_write_beats", "near_write_bytes", "near_read_beats",
                "near_read_bytes", "far_write_beats", "far_write_bytes", "far_read_beats",
                "far_read_bytes", "busy")

    def __init__(self, unit, layouts, *, cmd, cand):
        for k in ("_layers", "_groups", "_hpg", "_head_dim", "_bt", "_clusters", "_blocks",
                  "_near_slots", "_bus_bytes", "_max_burst", "_max_reads", "_max_writes",
                  "_addr_bits", "_token_bits", "_version_bits", "_step_bits", "_count_bits"):
            setattr(self, k, getattr(unit, k))
        self.layouts = L = layouts
        self.token_bytes, self.block_bytes = unit.token_bytes, unit.block_bytes
        self.beats_per_token = unit.beats_per_token
        self.STORE, self.FETCH, self.CLEAR, self.CAND = unit.STORE, unit.FETCH, unit.CLEAR, \
            unit.CAND
        ab, bus = self._addr_bits, 8 * self._bus_bytes
        super().__init__({
            "cmd_in": In(stream.Signature(cmd)), "data_in": In(stream.Signature(bus)),
            "reg_near_base": In(ab), "reg_far_base": In(ab), "reg_hc_base": In(ab),
            "reg_near_slots": In(bits_for(self._near_slots)),
            "reg_far_slots": In(bits_for(self._blocks)),
            "reg_max_burst": In(9),
            "araddr": Out(ab), "arlen": Out(8), "arvalid": Out(1),
            "awaddr": Out(ab), "awlen": Out(8), "awvalid": Out(1),
            "wdata": Out(bus), "wlast": Out(1), "wvalid": Out(1), "wready": In(1),
            "rvalid": In(1), "rdata": In(bus), "rresp": In(2), "rready": Out(1),
            "ar_go": In(1), "aw_go": In(1), "w_go": In(1), "r_go": In(1),
            "reads_out": In(range(self._max_reads + 1)),
            "writes_out": In(range(self._max_writes + 1)),
            "b_err": In(1), "b_err_addr": In(ab), "b_err_resp": In(2), "b_clear": Out(1),
            "own_r": Out(1),
            "rq_valid": Out(1), "rq_desc": Out(L.desc), "rq_rdy": In(1),
            "delivery_idle": In(1),
            "toks": In(memory.WritePort.Signature(
                addr_width=ceil_log2(self._blocks * self._bt), shape=self._token_bits)),
            "v_layer": Out(8), "v_reset": Out(1), "seen": In(1),
            "newest": In(self._version_bits),
            "rx": Out(1), "cq_valid": Out(1),
            "cq": Out(key_meta(len(Signal(range(self._clusters + 1))), self._count_bits, ab)),
            "cq_rdy": In(1), "h_err_set": In(1), "h_err": Out(1), "keys_idle": In(1),
            "cand_valid": Out(1), "cand": Out(cand), "cand_ready": In(1),
            "c_err": Out(1), "c_code": Out(4), "c_resp": Out(2), "c_addr": Out(ab),
            "working": Out(1),
            "ev": events(*self.COUNTERS),
        })

    def elaborate(self, platform):
        m = Module()
        c = _Regs(self, m)
        cmd = c.cmd
        m.d.comb += [c.ct_rd.addr.eq(Mux(c.cand_mode, self._index(c.ctx, c.ci),
                                         self._index(c.ctx, cmd.owner))),
                     c.bt_rd.addr.eq(c.bid), c.nw_rd.addr.eq(c.alloc_slot),
                     c.cm_rd.addr.eq(c.cm_addr), self.v_layer.eq(cmd.layer),
                     self.rx.eq(c.rx), self.h_err.eq(c.h_err)]
        c.block_off = lambda slot, j: (mul_const(slot, self._hpg) + j) << c.bb_lg
        # the next burst's length, registered before the state that asks for it: from the
        # offset in ADD_BASE (the bases are 4 KB aligned, so the offset's place in its page
        # is the address's), again in LEN after a burst that left beats, and in M_PICK for
        # a move (the shorter of its read's and its write's)
        c.next_beats = burst_beats(m, c.addr, c.rem, self.reg_max_burst, self._bus_bytes, "n")
        c.next_dst_beats = burst_beats(m, c.dst, c.rem, self.reg_max_burst, self._bus_bytes, "d")
        with m.If(self.h_err_set):          # a keyed list's read failed (KvmuKeys)
            m.d.sync += c.h_err.eq(1)
        with m.If(c.rx):
            m.d.comb += self.own_r.eq(1)
        with m.FSM(init="INIT") as fsm:
            self._init_states(m, c)
            self._decode_states(m, c)
            self._fetch_states(m, c)
            self._store_states(m, c)
            self._write_states(m, c)
            self._move_states(m, c)
            with m.State("ADD_BASE"):
                bases = Array([self.reg_near_base, self.reg_far_base, self.reg_hc_base,
                               self.reg_hc_base])
                m.d.sync += [c.addr.eq(c.addr + bases[c.abase]),
                             c.dst.eq(c.dst + bases[c.dbase]), c.beats.eq(c.next_beats)]
                self._return(m, c)
            with m.State("LEN"):
                m.d.sync += c.beats.eq(c.next_beats)
                self._return(m, c)
            self._cand_states(m, c)
        m.d.comb += self.working.eq(~fsm.ongoing("IDLE") | ~self.delivery_idle |
                                    (self.reads_out != 0) | (self.writes_out != 0))
        with m.If(self.working):
            m.d.comb += self.ev.busy.eq(1)
        return m

    @staticmethod
    def _return(m, c):
        with m.Switch(c.ret):
            for k, state in enumerate(("F_AR", "S_AW", "M_PICK", "C_AR")):
                with m.Case(k):
                    m.next = state

    @staticmethod
    def _table_read(m, first: str, last: str):
        """The states of a block-table (or near-ring) read: the address in ``first``, the
        entry registered as it leaves the block RAM (``bt_q``, ``nw_q``) in ``last``, two
        cycles on; the caller writes ``last``."""
        with m.State(first):
            m.next = first + "2"
        with m.State(first + "2"):
            m.next = last

    def _ctab_index(self, c):
        return self._index(c.ctx, c.cmd.owner)

    def _index(self, ctx, cluster):
        """The cluster table's (and candidate map's) entry of ``cluster`` in context ``ctx``
        (layer · groups + group)."""
        lg = exact_log2(self._clusters)
        return Cat(cluster[:lg], ctx) if lg else ctx

    def _fail(self, m, code, resp=0, addr=0):
        m.d.comb += [self.c_err.eq(1), self.c_code.eq(code), self.c_resp.eq(resp),
                     self.c_addr.eq(addr)]

    def _count_beat(self, m, far, write: bool):
        d = "write" if write else "read"
        with m.If(far):
            m.d.comb += [self.ev[f"far_{d}_beats"].eq(1), self.ev[f"far_{d}_bytes"].eq(1)]
        with m.Else():
            m.d.comb += [self.ev[f"near_{d}_beats"].eq(1), self.ev[f"near_{d}_bytes"].eq(1)]

    def _init_states(self, m, c):
        with m.State("INIT"):
            m.d.comb += [c.ct_wr.addr.eq(c.init_i), c.ct_wr.data.eq(0),
                         c.ct_wr.en.eq(c.init_i < c.ctab_depth),
                         c.nw_wr.addr.eq(c.init_i), c.nw_wr.data.eq(0),
                         c.nw_wr.en.eq(c.init_i < self._near_slots), self.v_reset.eq(1)]
            m.d.sync += [c.init_i.eq(c.init_i + 1), c.next_bid.eq(0), c.far_count.eq(0),
                         c.alloc_slot.eq(0), c.fetch_drop.eq(0), c.fetch_err.eq(0),
                         *[n.eq(0) for n in c.n_clusters], *[n.eq(0) for n in c.n_cand]]
            with m.If(c.init_i == max(c.ctab_depth, self._near_slots) - 1):
                m.next = "IDLE"

    def _decode_states(self, m, c):
        cmd, i = c.cmd, self.cmd_in
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
            high = cmd.owner[c.cl_lg:].any() if len(cmd.owner) > c.cl_lg else Const(0)
            low = cmd.owner[:c.cl_lg] if c.cl_lg else Const(0)
            bad_fields = (~ctx_ok | (cmd.head >= self._hpg) | (cmd.op > self.CAND) | high)
            # a fetch by index past the list: refused in F_MAP (the comparison is registered
            # here, off the next-state logic), unless refused here for another reason
            bad_index = by_index & (low >= c.n_cand[c.ctx])
            m.d.sync += c.idx_bad.eq(bad_index)
            bad_cmd = bad_fields | bad_index
            bad_reg = ((self.reg_near_base[:12] != 0) | (self.reg_far_base[:12] != 0) |
                       (self.reg_hc_base[:12] != 0) |
                       (self.reg_near_slots == 0) | (self.reg_near_slots > self._near_slots) |
                       (self.reg_max_burst == 0) | (self.reg_max_burst > self._max_burst))
            with m.If(cmd.op == self.CLEAR):
                m.d.sync += c.init_i.eq(0)
                m.next = "INIT"
            with m.Elif(bad_fields | bad_reg):
                self._fail(m, Mux(bad_cmd, 1, 2))
                m.d.comb += self.ev.refused.eq(1)
                with m.If(cmd.op == self.STORE):
                    m.d.sync += c.drain.eq(self._hpg * self.beats_per_token)
                    m.next = "DRAIN"
                with m.Elif(cmd.op == self.FETCH):
                    self._refuse_fetch(m, c)
                with m.Elif(cmd.op == self.CAND):
                    m.next = "C_REFUSED"
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
            m.d.comb += self.data_in.ready.eq(c.drain != 0)
            with m.If(self.data_in.valid & (c.drain != 0)):
                m.d.sync += c.drain.eq(c.drain - 1)
            with m.If((c.drain == 0) | ((c.drain == 1) & self.data_in.valid)):
                m.next = "IDLE"
