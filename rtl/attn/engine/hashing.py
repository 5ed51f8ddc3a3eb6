"""The attention engine's hash stage: a hash command's rows into the HCU's hash words."""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Module, Mux, Signal, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ...lib import copies
from .common import EngineShape, StateSignature

__all__ = ["HashStage"]


class HashStage(wiring.Component):
    """Bit ``j·n + t`` of a token's hash word is ``c[t] > bias[j·n + t]`` for its row ``c``
    of column tile j (docs/numerics.md §4). A hash row goes through two register stages: h1
    takes the row (``beat``, when ``valid`` and ``real`` and h1 has room) and its column
    tile's bias word, h2 the bits compared from them; the compare had run on the array's
    queue head (a LUT RAM) into the output and the gathering registers (for the clock). A
    row's bits of the tiles before its last shift in from the top of its register, n at a
    time (tile j ends at bit j·n after the last tile's shift), so no bit goes through a
    shift by the tile's index; on its last tile the word is that register and h2's bits, out
    on ``hashes`` in the HCU's input format.

    The bias word of the column tile at the array's output is read a cycle ahead, the
    current tile's and the next one's (two ports, ``bias_rd`` at ``j`` and ``bias_rd_next``
    at the next tile), the next one's taken when the row before ended a tile (the address
    had been chosen by the output's handshake: for the clock).

    Latency: two cycles from the row's take to its word; a row a cycle."""

    def __init__(self, shape: EngineShape, *, cmd_layout, drain_layout, hash_layout):
        self._sh = shape
        bias_rd = In(memory.ReadPort.Signature(
            addr_width=ceil_log2(shape.bias_words),
            shape=data.ArrayLayout(signed(shape.acc_bits), shape.n)))
        super().__init__({
            "st": In(StateSignature(cmd_layout)),
            "beat": In(drain_layout), "valid": In(1), "real": In(1), "take": In(1),
            "j": In(16), "j1": In(16), "j_lt_last": In(1), "grow": In(16),
            "bias_rd": bias_rd, "bias_rd_next": bias_rd,
            "hashes": Out(stream.Signature(hash_layout)),
            "room_next": Out(1), "busy": Out(1),
        })

    @staticmethod
    def _stage(name, n):
        return {"valid": Signal(name=f"hash_{name}_valid"),
                "row": Signal(range(n), name=f"hash_{name}_row"),
                "emit": Signal(name=f"hash_{name}_emit"),      # the row's last column tile
                "first": Signal(name=f"hash_{name}_first"),
                "last": Signal(name=f"hash_{name}_last"),
                "go": Signal(name=f"hash_{name}_go")}

    def elaborate(self, platform):
        m = Module()
        sh, st, n = self._sh, self.st, self._sh.n
        o, out = self.beat, self.hashes
        next_j = Signal(16)
        m.d.comb += next_j.eq(Mux(self.j_lt_last, 0, self.j1))
        m.d.comb += [self.bias_rd.addr.eq(self.j), self.bias_rd_next.addr.eq(next_j)]
        moved = Signal()
        m.d.sync += moved.eq(self.take & o.last)
        h1, h2 = self._stage("h1", n), self._stage("h2", n)
        h1_c = [Signal(signed(sh.acc_bits), name=f"hash_h1_c_{t}", reset_less=True)
                for t in range(n)]
        h1_bias = [Signal(signed(sh.acc_bits), name=f"hash_h1_bias_{t}", reset_less=True)
                   for t in range(n)]
        h2_bits = Signal(n, name="hash_h2_bits", reset_less=True)
        h1_in = Signal(name="hash_h1_in")              # a real hash row taken into h1
        m.d.comb += [h2["go"].eq(h2["valid"] & (~h2["emit"] | out.ready)),
                     h1["go"].eq(h1["valid"] & (~h2["valid"] | h2["go"]))]
        # h1 has room: h1's take below (the array's ready sees it a cycle ahead, from the
        # stages' next values)
        h1_room = Signal(name="hash_h1_room")
        m.d.comb += h1_room.eq(~h1["valid"] | h1["go"])
        h1_valid_n = Signal(name="hash_h1_valid_next")
        h2_valid_n = Signal(name="hash_h2_valid_next")
        h2_emit_n = Signal(name="hash_h2_emit_next")
        m.d.comb += [h1_valid_n.eq(st.start & (h1_in | h1["valid"] & ~h1["go"])),
                     h2_valid_n.eq(st.start & (h1["go"] | h2["valid"] & ~h2["go"])),
                     h2_emit_n.eq(Mux(h1["go"], h1["emit"], h2["emit"]))]
        m.d.sync += [h1["valid"].eq(h1_valid_n), h2["valid"].eq(h2_valid_n),
                     h2["emit"].eq(h2_emit_n)]
        room_next = ~h1_valid_n | ~h2_valid_n | ~h2_emit_n
        m.d.comb += [self.room_next.eq(room_next), self.busy.eq(h1["valid"] | h2["valid"])]
        # h1's data loads whenever h1 has room, its valid flag with a real row's take (the
        # take, behind h1's and h2's flags and o_hash's ready, had been routed 4.3 ns into
        # the enable of h1's 2n words and 4.3 ns on: for the clock): its room is o_hash's
        # ready or ``~h1.valid | ~h2.valid | ~h2.emit``, a register set from their next
        # values, in n + 1 copies (one a lane's two words, one for the row's fields)
        h1_open = copies(m, room_next, n + 1, "hash_h1_open", init=1)
        with m.If(h1_open[n] | out.ready):
            m.d.sync += [h1["row"].eq(o.row), h1["emit"].eq(self.j_lt_last),
                         h1["first"].eq(self.grow == 0), h1["last"].eq(self.grow == st.m1.m)]
        for t in range(n):
            with m.If(h1_open[t] | out.ready):
                m.d.sync += [h1_c[t].eq(o.c[t]),
                             h1_bias[t].eq(Mux(moved, self.bias_rd_next.data[t],
                                               self.bias_rd.data[t]))]

        # the compare is unsigned, on the values with their sign bit flipped (the same
        # order): the carry chain's carry out is the bit (the signed compare's correction,
        # a LUT behind the chain, had been on seed 1's one failing path: for the clock)
        def biased(v):
            return Cat(v[:-1], ~v[-1])
        with m.If(h1["go"]):
            m.d.sync += [h2["row"].eq(h1["row"]), h2["first"].eq(h1["first"]),
                         h2["last"].eq(h1["last"]),
                         h2_bits.eq(Cat(biased(h1_c[t]) > biased(h1_bias[t])
                                        for t in range(n)))]
        tiles = -(-sh.n_hp // n)
        word = Signal(tiles * n)
        if tiles > 1:
            acc = Array(Signal((tiles - 1) * n, name=f"hash_acc_{r}") for r in range(n))
            m.d.comb += word.eq(Cat(acc[h2["row"]], h2_bits))
            with m.If(h2["go"] & ~h2["emit"]):
                m.d.sync += acc[h2["row"]].eq(Cat(acc[h2["row"]][n:], h2_bits) if tiles > 2
                                              else h2_bits)
        else:
            m.d.comb += word.eq(h2_bits)
        m.d.comb += [out.payload.hash.eq(word[:sh.n_hp]),
                     out.payload.layer.eq(st.cur.layer),
                     out.payload.step.eq(st.cur.step),
                     out.payload.first.eq(h2["first"]),
                     out.payload.last.eq(h2["last"]),
                     out.valid.eq(h2["valid"] & h2["emit"])]
        # a real hash row taken, spelled out (h1 has room) rather than through the output's
        # multiplexer of every kind's ready, so the P·V stages' handshake and the GEMM
        # output's do not reach h1's 2n words' enables (for the clock)
        m.d.comb += h1_in.eq(self.valid & self.real & st.is_.hash & h1_room)
        return m
