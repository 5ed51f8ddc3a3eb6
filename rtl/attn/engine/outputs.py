"""The attention engine's output part: the array's rows taken, counted and sent on (GEMM
rows out, hash rows to the hash stage, score rows to the score writer, P·V rows to the
dividers)."""
from __future__ import annotations

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...lib import register
from .common import EngineShape, StateSignature, job

__all__ = ["Outputs", "OutHalfSignature"]


class OutHalfSignature(wiring.Signature):
    """The half of the score buffer that the row tile at the array's output will use next
    cycle: the one it uses (``stay``), the next row tile's (``move``) or, stopped, the
    first's (``zero``), and whether it moves on (``moves``)."""

    def __init__(self):
        super().__init__({k: Out(1) for k in ("stay", "move", "zero", "moves")})


class Outputs(wiring.Component):
    """Rows leaving the array (``drain``): the row tile, column tile and job each belongs
    to, counted here (``i``, ``j``, ``pv``, ``grow`` its row in the command); whether it is
    a real row (``real``: padding rows are dropped). A real row goes out on ``gemm``, to the
    hash stage (when it has ``hash_room``), into a free half of the score buffer
    (``half_free``) or to the dividers (``div_valid``; ``div_room_next`` their room a cycle
    ahead). What the counters imply is kept in registers beside them, set from the counters'
    next values, so the array's ready sees flags, not compare chains (for the clock).

    Latency: none (the take is the array's handshake); a row a cycle."""

    def __init__(self, shape: EngineShape, *, cmd_layout, drain_layout, gemm_layout):
        self._sh = shape
        super().__init__({
            "st": In(StateSignature(cmd_layout)),
            "drain": In(stream.Signature(drain_layout)),
            "gemm": Out(stream.Signature(gemm_layout)),
            "hash_room_next": In(1), "hash_ready": In(1), "hash_busy": In(1),
            "half_free": In(1), "div_room_next": In(1),
            "div_valid": Out(1), "take": Out(1), "real": Out(1), "real_next": Out(1),
            "i": Out(16), "j": Out(16), "j1": Out(16), "pv": Out(1), "pv_next": Out(1),
            "j_lt_last": Out(1), "j_zero": Out(1), "grow": Out(16),
            "half": Out(OutHalfSignature()),
            "done": Out(1), "stalled": Out(1),
        })

    def _tile_regs(self, m, out_s, out_p):
        """The job, its row tile, its real rows and where the column tile stands, in
        registers: returns them, their values a column tile on, a row tile on and at 0."""
        st, n = self.st, self._sh.n

        def col_flags(pv, j_):
            return dict(jl=j_ == st.m1.lt, jlast=j_ == Mux(pv, st.m1.kc, st.m1.lt))

        def derive(s_, p_, j_, tag):
            pv, oi = job(m, st, s_, p_, f"out_{tag}")
            return finish(pv, oi, j_, tag)

        def finish(pv, oi, j_, tag):
            base = oi << exact_log2(n)
            rows = Signal(range(n + 1), name=f"out_rows_{tag}")
            m.d.comb += rows.eq(Mux(st.cur.m > base, Mux(st.cur.m - base >= n, n,
                                                           st.cur.m - base), 0))
            return dict(pv=pv, oi=oi, rows=rows, li=oi == st.m1.mt, **col_flags(pv, j_))

        reg = dict(pv=Signal(name="out_pv"), oi=Signal(16, name="out_i"),
                   rows=Signal(range(n + 1), name="out_rows"),
                   li=Signal(name="out_i_last"), jl=Signal(name="out_j_lt_last"),
                   jlast=Signal(name="out_j_last"))
        if n >= 4:
            # computed ahead over three registered stages, as in the feeder: a row tile's
            # rows leave the array >= n cycles apart (its n rows, padding included)
            s_a, p_a = register(m, [out_s + ~reg["pv"], out_p + reg["pv"]], "out_next_sp")
            pv_a, oi_a = job(m, st, s_a, p_a, "out_next")
            pv_a, oi_a = register(m, [pv_a, oi_a], "out_next_a")
            nxt = finish(pv_a, oi_a, Const(0, 16), "next")
            tile_next = dict(zip(nxt, register(m, list(nxt.values()), "out_next_b")))
        else:
            tile_next = derive(out_s + ~reg["pv"], out_p + reg["pv"], Const(0, 16), "tile")
        step_next = col_flags(reg["pv"], self.j1)        # a column tile on, same row tile
        zero = derive(Const(0, 16), Const(0, 16), Const(0, 16), "zero")
        return reg, step_next, tile_next, zero

    def elaborate(self, platform):
        m = Module()
        st, n = self.st, self._sh.n
        out_s = Signal(16)                      # the next row tile whose scores come out
        out_p = Signal(16)                      # the next row tile whose P·V comes out
        out_j = Signal(16)
        out_j1 = Signal(16, init=1)             # out_j + 1, kept beside it (for the clock)
        out_j0 = Signal(init=1, name="out_j_zero")  # out_j == 0, likewise
        o = self.drain.payload
        take = Signal()
        m.d.comb += [self.j.eq(out_j), self.j1.eq(out_j1), self.j_zero.eq(out_j0),
                     self.take.eq(take)]
        reg, step_next, tile_next, zero = self._tile_regs(m, out_s, out_p)
        out_pv, out_i, last_j_now = reg["pv"], reg["oi"], reg["jlast"]

        # a register's next value: ``if_taken`` or ``held`` as the row is taken or not, each
        # worked out from registers (``zero`` while the engine is stopped), so the take, the
        # last to settle (the array's valid flag and the ready of every kind of output), only
        # selects (it had run into a multiplexer of six inputs and more, routed 2.6 ns and
        # 2.9 ns, ahead of the real flag's copies: for the clock; cycle for cycle the same)
        def taken_or_not(if_taken, held, zero_):
            return Mux(take, Mux(st.start, if_taken, zero_), Mux(st.start, held, zero_))
        grow = Signal(16)
        m.d.comb += grow.eq((out_i << exact_log2(n)) + o.row)
        # the row leaving the array is a real one (``o.row < rows``), in a register set from
        # what the take does to the row (it steps, or goes back to 0 with the tile's last
        # row) and to the rows (the next row tile's); the compare had sat in front of the
        # array's ready and every enable behind it (for the clock). The array's row counter
        # is 0 while the engine is stopped: every tile leaves all its n rows.
        real = Signal(name="out_real")
        real_n = Signal(name="out_real_next")
        m.d.comb += real_n.eq(taken_or_not(
            Mux(o.last, Mux(reg["jlast"], tile_next["rows"], reg["rows"]) != 0,
                o.row + 1 < reg["rows"]),
            real, zero["rows"] != 0))
        m.d.sync += real.eq(real_n)
        last_tile = Signal()
        m.d.comb += last_tile.eq(reg["li"] & reg["jl"])
        hs = self.half
        m.d.comb += [self.i.eq(out_i), self.pv.eq(out_pv), self.real.eq(real),
                     self.real_next.eq(real_n), self.j_lt_last.eq(reg["jl"]),
                     self.grow.eq(grow),
                     hs.stay.eq(out_i[0]), hs.move.eq(tile_next["oi"][0]),
                     hs.zero.eq(zero["oi"][0]), hs.moves.eq(take & o.last & last_j_now)]
        nxt = {k: Signal.like(v, name=f"{v.name}_next") for k, v in reg.items()}
        m.d.comb += [nxt[k].eq(taken_or_not(
            Mux(o.last, Mux(last_j_now, tile_next[k], step_next.get(k, v)), v), v, zero[k]))
            for k, v in reg.items()]
        m.d.sync += [reg[k].eq(v) for k, v in nxt.items()]
        m.d.comb += self.pv_next.eq(nxt["pv"])
        g = self.gemm.payload
        m.d.comb += [g.row.eq(grow), g.col.eq(out_j << exact_log2(n)),
                     g.last.eq(last_tile & (grow == st.m1.m)),
                     *(g.c[t].eq(o.c[t]) for t in range(n))]
        self._ready(m, take, real, real_n, out_pv, nxt["pv"])
        with m.If(take):
            with m.If(o.last):
                with m.If(last_j_now):
                    m.d.sync += [out_j.eq(0), out_j1.eq(1), out_j0.eq(1)]
                    with m.If(out_pv):
                        m.d.sync += out_p.eq(out_p + 1)
                    with m.Else():
                        m.d.sync += out_s.eq(out_s + 1)
                with m.Else():
                    m.d.sync += [out_j.eq(out_j1), out_j1.eq(out_j1 + 1), out_j0.eq(0)]
        m.d.comb += self.done.eq((out_i >= st.mt) & ~self.hash_busy)
        with m.If(~st.start):
            m.d.sync += [out_s.eq(0), out_p.eq(0), out_j.eq(0), out_j1.eq(1), out_j0.eq(1)]
        m.d.comb += self.stalled.eq(self.drain.valid & ~self.drain.ready)
        return m

    def _ready(self, m, take, real, real_n, out_pv, pv_next):
        """The array's ready: padding rows are dropped; a real row goes to the hash stage
        when it has room, to the dividers' first stage (P·V), into a free half of the score
        buffer, or out on ``gemm``. What it needs of the engine's state is kept in registers
        set from the next values (the kind, real and P·V flags ANDed in, the hash stage's
        room but for its output's ready, the dividers' room), so the take is an OR of
        registers and the two outputs' readies and the half-free flag: the multiplexer of
        every kind's room had been the engine's slowest path into the output's counters,
        the array's queue and the half-free flag (for the clock; cycle for cycle the
        same)."""
        st, d = self.st, self.drain
        is_hash = st.is_.hash
        free = Signal(name="out_ready_free")    # padding, or h1 has room without o_hash
        pv = Signal(name="out_ready_pv")        # a P·V row, and the dividers have room
        score = Signal(name="out_sel_score")    # a score row (it needs a free half)
        gemm = Signal(name="out_sel_gemm")      # a GEMM row (it needs o_gemm's ready)
        # a hash row (it needs o_hash's ready unless h1 has room: ``free``; padding is
        # ``free`` too): the command's flag, with its fan-out over the engine, had been
        # routed into the array's ready and on into its room flag (for the clock)
        hsel = Signal(name="out_sel_hash")
        m.d.sync += [free.eq(~real_n | is_hash & self.hash_room_next),
                     pv.eq(real_n & pv_next & self.div_room_next),
                     score.eq(real_n & ~pv_next & st.is_.scoring),
                     gemm.eq(real_n & st.is_.gemm), hsel.eq(real_n & is_hash)]
        m.d.comb += [
            self.div_valid.eq(d.valid & real & out_pv),
            self.gemm.valid.eq(d.valid & gemm),
            d.ready.eq(free | pv | score & self.half_free | hsel & self.hash_ready |
                       gemm & self.gemm.ready),
            take.eq(d.valid & d.ready)]
