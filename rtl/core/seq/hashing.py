"""The sequencer's group phases: a hash group's hashing (with its centring) and its stores."""
from __future__ import annotations

from amaranth.hdl import Array, Module, Signal, signed
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...attn.engine import Kind
from ...kvmu.kvmu import KvMemoryManager
from .common import DOT, ERR, KV, SUM, A, B, descriptor_layout, offer, walk_layout
from .counts import _leave, _raise

__all__ = ["HashingPhase", "StoresPhase"]


class HashingPhase(wiring.Component):
    """A hash group's hashing: with centring on (entry ``CENTRE``), the running sum of the
    group's hash-input keys (``C_SUM_PROG``, ``C_SUM``: a read-DMA program to the centring
    sums, :class:`~.centring.Centring`) and per hyperplane the bias ``round_div(S · R_j, n)``
    (``C_DOT_PROG``, ``C_DOT``: the hyperplane rows to its dot products); then (entry ``CMD``
    without centring) the engine's ``HASH`` command on window ``layer``, the hyperplanes into
    B, the group's hash-input rows of the hashed tokens into A, the biases (zero without
    centring) as the column vector. The engine's hash words go straight into the HCU; then
    the stores.

    Latency: a state a cycle while the engine and the program queue take."""

    CENTRE, CMD = 0, 1

    def __init__(self, cfg, *, phase):
        self._cfg = cfg
        super().__init__({
            "ctl": Out(phase), "dsc": In(descriptor_layout()),
            "walk": In(walk_layout(cfg.kvmu_addr_bits)), "layer": In(range(max(2, cfg.windows))),
            "centre": In(1),
            "sum_load": Out(1), "sum_beats": Out(32), "sum_close": Out(1),
            "sum_zero": In(1), "j_done": In(1),
            "biases": In(data.ArrayLayout(signed(cfg.attn_acc_bits), cfg.n_hp)),
        })

    def _rows(self, m, dest):
        """The group's hash-input row of each hashed token: a job per head of the group."""
        cfg, w, t = self._cfg, self.walk, self.dsc.step_len
        d = cfg.head_dim
        offer(m, self.ctl.prog, b0=w.ptr.kh, beats=d // cfg.kvmu_bus_bytes, n_out=w.nh,
              n_in=cfg.heads_per_group, s_out=d, s_in=t * d, dest=dest)

    def _hyperplanes(self, m, dest):
        """The group's hyperplane rows, one job."""
        cfg = self._cfg
        offer(m, self.ctl.prog, b0=self.walk.ptr.hp,
              beats=cfg.n_hp * cfg.hash_dim // cfg.kvmu_bus_bytes, n_out=1, n_in=1, dest=dest)

    def elaborate(self, platform):
        m = Module()
        cfg, ctl, w = self._cfg, self.ctl, self.walk
        n = cfg.attn_n
        row_beats = cfg.head_dim // cfg.kvmu_bus_bytes
        i = Signal(16)
        with m.FSM(name="hashing"):
            with m.State("IDLE"):
                with m.If(ctl.go & (ctl.entry == self.CENTRE)):
                    m.next = "C_SUM_PROG"
                with m.Elif(ctl.go):
                    m.next = "G_HASH_CMD"
            # centring: the running sum of the group's hash-input keys, then per hyperplane
            # the bias round_div(S · R_j, n) (docs/numerics.md §4)
            with m.State("C_SUM_PROG"):
                self._rows(m, SUM)
                m.d.comb += [self.sum_load.eq(1),
                             self.sum_beats.eq(w.nh * (cfg.heads_per_group * row_beats))]
                with m.If(ctl.prog.ready):
                    m.next = "C_SUM"
            with m.State("C_SUM"):
                with m.If(self.sum_zero):
                    m.d.comb += self.sum_close.eq(1)
                    m.next = "C_DOT_PROG"
            with m.State("C_DOT_PROG"):
                self._hyperplanes(m, DOT)
                with m.If(ctl.prog.ready):
                    m.next = "C_DOT"
            with m.State("C_DOT"):
                with m.If(self.j_done):
                    m.next = "G_HASH_CMD"
            with m.State("G_HASH_CMD"):
                offer(m, ctl.ecmd, kind=Kind.HASH, m=w.nh, k=cfg.hash_dim, l=cfg.n_hp,
                      layer=self.layer, step=self.dsc.step)
                with m.If(ctl.ecmd.ready):
                    m.d.sync += i.eq(0)
                    m.next = "G_HASH_HP"
            with m.State("G_HASH_HP"):
                self._hyperplanes(m, B)
                with m.If(ctl.prog.ready):
                    m.next = "G_HASH_KEYS"
            with m.State("G_HASH_KEYS"):
                self._rows(m, A)
                with m.If(ctl.prog.ready):
                    m.next = "G_HASH_BIAS"
            with m.State("G_HASH_BIAS"):
                m.d.comb += ctl.bias.valid.eq(1)          # zero biases without centring
                biases = Array(self.biases[j] for j in range(cfg.n_hp))
                with m.If(self.centre):
                    for ln in range(n):
                        m.d.comb += ctl.bias.payload.data[ln].eq(
                            biases[(i << exact_log2(n)) + ln] if n > 1 else biases[i])
                with m.If(ctl.bias.ready):
                    m.d.sync += i.eq(i + 1)
                    with m.If(i == -(-cfg.n_hp // n) - 1):
                        m.d.sync += i.eq(0)
                        m.d.comb += [ctl.req.set_phase.eq(1), ctl.req.phase.eq(4)]
                        _leave(m, ctl)
        return m


class StoresPhase(wiring.Component):
    """A hash group's stores (``G_STORE_PROG``, ``G_STORE``): from the moment it starts
    (``go``: the DMA's K/V beats received so far kept as the base, the drop flag from the
    DMA's error), a read-DMA program of the group's hashed tokens' K and V rows into the
    KVMU's store data, and per token, in order, its HCU assignment (``assign``, queued as
    the HCU gives them) with a ``STORE`` command once its rows are in the DMA without error;
    once a read failed (``drop_kv``, cleared by ``clear_drop``) the assignments are dropped
    and no token is stored. A token the HCU refuses (``refused``, a cycle per token, from
    the group's hashing on: the HCU's refusal counter moved) has no assignment: it counts as
    done, the group's later assignments and store data are dropped (the tokens' order is
    lost) and the group ends with ``DRE_REFUSED``, so it never waits for an assignment that
    will not come. Then the next group.

    Latency: a token's command the cycle its rows are in and its assignment is queued."""

    def __init__(self, cfg, *, phase, cluster_bits: int):
        self._cfg = cfg
        super().__init__({
            "ctl": Out(phase), "dsc": In(descriptor_layout()),
            "walk": In(walk_layout(cfg.kvmu_addr_bits)),
            "assign": In(stream.Signature(cluster_bits)),
            "dma_error": In(1), "dma_received": In(32), "clear_drop": In(1),
            "refused": In(1), "drop_kv": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, ctl, d, w = self._cfg, self.ctl, self.dsc, self.walk
        hd, hpg = cfg.head_dim, cfg.heads_per_group
        row_beats = hd // cfg.kvmu_bus_bytes
        token_beats = 2 * hpg * row_beats
        t = d.step_len
        # the HCU's assignments of a group's tokens, in order
        aq = fifo.SyncFIFOBuffered(width=len(self.assign.payload), depth=cfg.core_max_tokens)
        m.submodules.assign = aq
        m.d.comb += [aq.w_data.eq(self.assign.payload), aq.w_en.eq(self.assign.valid),
                     self.assign.ready.eq(aq.w_rdy)]
        stored = Signal(16)
        kv_base = Signal(32)                  # the DMA's K/V beats received before the group
        kv_rx = Signal(32)
        m.d.comb += kv_rx.eq(self.dma_received - kv_base)
        drop = Signal()                       # a read failed: the store data is dropped
        m.d.comb += self.drop_kv.eq(drop)
        lost = Signal(16)                     # the group's tokens the HCU refused
        with m.If(self.refused):
            m.d.sync += [lost.eq(lost + 1), drop.eq(1)]
        with m.If(self.clear_drop):
            m.d.sync += drop.eq(0)
        with m.FSM(name="stores"):
            with m.State("IDLE"):
                with m.If(ctl.go):
                    m.d.sync += [kv_base.eq(self.dma_received), stored.eq(0),
                                 drop.eq(drop | self.dma_error)]
                    m.next = "G_STORE_PROG"
            with m.State("G_STORE_PROG"):
                with m.If(self.dma_error):
                    m.d.sync += drop.eq(1)
                offer(m, ctl.prog, b0=w.ptr.kg, b1=w.ptr.vg, beats=row_beats, n_out=w.nh,
                      n_in=hpg, s_out=hd, s_in=t * hd, pair=1, dest=KV)
                with m.If(ctl.prog.ready):
                    m.next = "G_STORE"
            with m.State("G_STORE"):
                # a token is stored once its rows are in the DMA without error
                have = kv_rx >= (stored + 1) * token_beats
                with m.If(self.dma_error):
                    m.d.sync += drop.eq(1)
                with m.If(stored + lost == w.nh):
                    m.d.sync += lost.eq(0)
                    with m.If(lost != 0):
                        _raise(m, ctl.req, ERR["DRE_REFUSED"])
                    _leave(m, ctl)
                with m.Elif(aq.r_rdy & (drop | self.dma_error)):
                    m.d.comb += aq.r_en.eq(1)               # drop the assignment
                    m.d.sync += stored.eq(stored + 1)
                with m.Elif(aq.r_rdy & have):
                    offer(m, ctl.kcmd, op=KvMemoryManager.STORE, layer=d.layer, group=w.grp,
                          owner=aq.r_data, token=d.token0 + w.skip + stored, step=d.step)
                    with m.If(ctl.kcmd.ready):
                        m.d.comb += aq.r_en.eq(1)
                        m.d.sync += stored.eq(stored + 1)
        return m
