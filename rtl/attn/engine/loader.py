"""The attention engine's A loader: A's row tiles into the two halves of the A buffer."""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Module, Mux, Signal, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ...lib import stepped_counter
from .common import EngineShape, StateSignature, mem_addr

__all__ = ["ALoader"]


class ALoader(wiring.Component):
    """Load A's row tiles into the two halves (one memory per row residue, ``a_wr``), a half
    as soon as the feeder frees it (``half_free``); ``half_full`` says which halves hold a
    tile. A tile's load starts after a cycle of WAIT, then takes a beat a cycle from ``i_a``
    (n rows of ``kc`` beats, fewer rows in the last tile); ``st.start`` low resets it.

    Latency: a half is full the cycle after its tile's last beat."""

    def __init__(self, shape: EngineShape, *, cmd_layout, chunk_layout):
        self._sh = shape
        word = data.ArrayLayout(signed(8), shape.n)
        super().__init__({
            "st": In(StateSignature(cmd_layout)),
            "i_a": In(stream.Signature(chunk_layout)),
            "a_wr": In(memory.WritePort.Signature(addr_width=ceil_log2(2 * shape.kc_max),
                                                  shape=word)).array(shape.n),
            "half_full": Out(2), "half_free": In(2),
        })

    def elaborate(self, platform):
        m = Module()
        sh, st, n = self._sh, self.st, self._sh.n
        tile = Signal(16)
        row = Signal(range(n + 1))
        # the tile's rows less one and whether the chunk is a row's last, in registers (the
        # tile's rows had been a subtraction, a compare and a second subtraction in front of
        # the row's compare and the tile counter's enable: for the clock). The rows follow
        # the tile a cycle later, in time: a tile's load starts after a cycle of WAIT.
        rows_m1 = Signal(range(n))
        left = Signal(signed(18))
        m.d.comb += left.eq(st.cur.m - (tile << sh.log_n))
        m.d.sync += rows_m1.eq(Mux(left >= n, n, left) - 1)
        cc = stepped_counter(m, "a_chunk", 16, {"kc": st.m1.kc})
        chunk, chunk_last = cc.pos, cc.at["kc"]
        half = tile[0]
        half_full = [Signal(name=f"a_half_full_{h}") for h in range(2)]
        m.d.comb += self.half_full.eq(Cat(half_full))
        # the lanes' address and data whatever the state (only the enables wait for LOAD:
        # the address had gone through a LUT of the state, shared by the lanes' RAMs, routed
        # 4.7 ns from the chunk counter and 4.3 ns on: for the clock)
        for wr in self.a_wr:
            m.d.comb += [wr.addr.eq(mem_addr(half, chunk, sh.kc_max)),
                         wr.data.eq(self.i_a.payload.data)]
        with m.FSM(name="a_fsm"):
            with m.State("WAIT"):
                with m.If(st.start & (tile < st.mt) & ~Array(half_full)[half]):
                    m.next = "LOAD"
                with m.If(~st.start):
                    m.d.sync += [tile.eq(0), row.eq(0)]
                    m.d.comb += cc.zero.eq(1)
            with m.State("LOAD"):
                m.d.comb += self.i_a.ready.eq(1)
                for r, wr in enumerate(self.a_wr):
                    m.d.comb += wr.en.eq(self.i_a.valid & (row == r))
                with m.If(self.i_a.valid):
                    with m.If(chunk_last):
                        m.d.comb += cc.zero.eq(1)
                        m.d.sync += row.eq(row + 1)
                        with m.If(row == rows_m1):
                            m.d.sync += [row.eq(0), tile.eq(tile + 1)]
                            for h in range(2):
                                with m.If(half == h):
                                    m.d.sync += half_full[h].eq(1)
                            m.next = "WAIT"
                    with m.Else():
                        m.d.comb += cc.inc.eq(1)
        for h in range(2):
            with m.If(self.half_free[h]):
                m.d.sync += half_full[h].eq(0)
        return m
