"""The attention engine's P·V side: the rows' sums (carried between chunks) and the long
dividers that normalise them."""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Module, Mux, Signal, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...lib import KEEP_COPY, copies
from .common import NO_RW_CHECK, EngineShape, StateSignature

__all__ = ["PvStages", "LongDivider", "DIV_BITS"]

DIV_BITS = 2        # quotient bits a divider step makes a cycle (a radix-4 step)


class SumsSignature(wiring.Signature):
    """A P·V row's sums as the stages hand them to the dividers: ``go`` (the handover, in
    n + 1 copies: one a lane, then one for the row's fields), the row's denominator, its
    place (``row``, ``col``, ``last``) and each sum's magnitude and sign."""

    def __init__(self, n: int, den_bits: int, num_bits: int):
        super().__init__({
            "go": Out(n + 1), "den": Out(den_bits), "row": Out(16), "col": Out(16),
            "last": Out(1), "mag": Out(data.ArrayLayout(num_bits, n)), "neg": Out(n)})


def _stage(name, n, width, den_bits, addr_depth):
    return {"valid": Signal(name=f"{name}_valid"),
            "c": [Signal(signed(width), name=f"{name}_c_{t}") for t in range(n)],
            "den": Signal(den_bits, name=f"{name}_den"), "row": Signal(16, name=f"{name}_row"),
            "col": Signal(16, name=f"{name}_col"), "last": Signal(name=f"{name}_last"),
            "addr": Signal(range(addr_depth), name=f"{name}_addr")}


class PvStages(wiring.Component):
    """P·V rows from the array (``beat`` when ``valid``) through three registers: s1 takes
    the row (and reads the row's sums carried from earlier chunks, a memory of n rows by the
    dimension words), s1b takes the memory's word (its output register on the FPGA:
    synth/bram_outreg.py), s2 adds them and keeps the sums' magnitudes and signs. From s2
    the sums go back to the memory (a chunk of the sums' pass that is not the final one) or
    to the dividers (``to_div``, when they are free: ``div_done`` and ``attn_ready`` say when
    they will be). ``room_next``: the array's output sees the room they leave a cycle ahead;
    ``idle``: no row on its way. (The registers also keep the array's drain off the
    dividers' first step.)

    Latency: three cycles from a row's take to the dividers; a row a cycle while they
    absorb, one a division otherwise."""

    def __init__(self, shape: EngineShape, *, cmd_layout, drain_layout):
        self._sh = shape
        super().__init__({
            "st": In(StateSignature(cmd_layout)),
            "beat": In(drain_layout), "valid": In(1),
            "j": In(16), "half": In(1), "grow": In(16),
            "den": In(data.ArrayLayout(data.ArrayLayout(shape.den_bits, shape.n), 2)),
            "div_done": In(1), "attn_ready": In(1),
            "to_div": Out(SumsSignature(shape.n, shape.den_bits, shape.num_bits)),
            "room_next": Out(1), "idle": Out(1),
        })

    def _flags(self, m, s1, s1b, s2, take):
        """The stages' valid flags and the dividers' free flag (free once the row's beat is
        taken, busy from a division's start) from their next values; each stage moves on
        (``go``) when it is valid and the next has room or moves on: s2 into the dividers
        (or, absorbed, out), s1b into s2, s1 into s1b. The three are registers set from the
        stages' next values, n + 1 copies of each (one for the handshakes, one for each
        lane's registers: some eight hundred enables had hung on a chain of three LUTs from
        the stages' flags, for the clock). Returns the copies."""
        st, n = self.st, self._sh.n
        absorb = st.is_.absorb
        # ~busy & ~done, as a register of its own (``busy`` enables some thousand divider
        # registers; the handshakes back to the array see this one)
        div_free = Signal(init=1)
        go_n = {k: Signal(name=f"pv_{k}_go_next") for k in ("s2", "s1b", "s1")}
        go = {k: copies(m, go_n[k], n + 1, f"pv_{k}_go") for k in ("s2", "s1b", "s1")}
        v_next = {k: Signal(name=f"pv_{k}_valid_next") for k in ("s1", "s1b", "s2")}
        free_n = Signal(name="div_free_next")
        s2_go, s1b_go, s1_go = go["s2"][n], go["s1b"][n], go["s1"][n]
        m.d.comb += [
            v_next["s1"].eq(st.start & (take | s1["valid"] & ~s1_go)),
            v_next["s1b"].eq(st.start & (s1_go | s1b["valid"] & ~s1b_go)),
            v_next["s2"].eq(st.start & (s1b_go | s2["valid"] & ~s2_go)),
            free_n.eq(~st.start | Mux(s2_go & ~absorb, 0,
                                      div_free | self.div_done & self.attn_ready)),
            self.room_next.eq(~v_next["s1"] | ~v_next["s1b"] | ~v_next["s2"] | absorb |
                              free_n),
            go_n["s2"].eq(v_next["s2"] & (absorb | free_n)),
            go_n["s1b"].eq(v_next["s1b"] & (~v_next["s2"] | go_n["s2"])),
            go_n["s1"].eq(v_next["s1"] & (~v_next["s1b"] | go_n["s1b"]))]
        m.d.sync += [s1["valid"].eq(v_next["s1"]), s1b["valid"].eq(v_next["s1b"]),
                     s2["valid"].eq(v_next["s2"]), div_free.eq(free_n)]
        return go

    def elaborate(self, platform):
        m = Module()
        sh, st, n, nb = self._sh, self.st, self._sh.n, self._sh.num_bits
        o = self.beat
        m.submodules.pv_sums = sums = memory.Memory(
            shape=data.ArrayLayout(signed(nb), n), depth=n * sh.vc_max, init=[],
            attrs=NO_RW_CHECK)
        sum_wr, sum_rd = sums.write_port(), sums.read_port()
        carry, absorb = st.is_.carry, st.is_.absorb
        s1, s1b, s2 = (_stage("pv_s1", n, sh.acc_bits, sh.den_bits, n * sh.vc_max),
                       _stage("pv_s1b", n, sh.acc_bits, sh.den_bits, n * sh.vc_max),
                       _stage("pv_s2", n, nb, sh.den_bits, n * sh.vc_max))
        # the sums read for s1's row, registered (reset_less: the RAM's output register), and
        # s1's row less one (for the magnitude: -(c + s) = ~(c - 1 + s))
        s1b_sum = [Signal(signed(nb), name=f"pv_s1b_sum_{t}", reset_less=True)
                   for t in range(n)]
        s1b_cm1 = [Signal(signed(sh.acc_bits + 1), name=f"pv_s1b_cm1_{t}") for t in range(n)]
        # s2's magnitudes and signs (the dividers' first remainder had been a negation and
        # an addition behind the sums' addition: for the clock)
        s2_mag = [Signal(nb, name=f"pv_s2_mag_{t}") for t in range(n)]
        s2_neg = [Signal(name=f"pv_s2_neg_{t}") for t in range(n)]
        ready, take = Signal(), Signal()
        go = self._flags(m, s1, s1b, s2, take)
        m.d.comb += [ready.eq(~s1["valid"] | go["s1"][n]), take.eq(self.valid & ready)]
        addr = Cat(o.row, self.j) if n > 1 else self.j
        m.d.comb += [sum_rd.addr.eq(addr), sum_rd.en.eq(take)]
        # s1's data loads whenever s1 is free or leaving, its valid flag with the row's
        # transfer (the data's enables do not wait for the array's handshake: for the clock)
        den = Array(Array(self.den[h][r] for r in range(n)) for h in range(2))
        with m.If(ready):
            m.d.sync += [s1["addr"].eq(addr), s1["den"].eq(den[self.half][o.row]),
                         s1["row"].eq(st.cur.row0 + self.grow),
                         s1["col"].eq(self.j << exact_log2(n)),
                         s1["last"].eq((self.grow == st.m1.m) & (self.j == st.m1.kc)),
                         *(s1["c"][t].eq(o.c[t]) for t in range(n))]
        fields = ("addr", "den", "row", "col", "last")
        with m.If(go["s1"][n]):
            m.d.sync += [s1b[k].eq(s1[k]) for k in fields]
        for t in range(n):
            with m.If(go["s1"][t]):
                m.d.sync += [s1b["c"][t].eq(s1["c"][t]), s1b_cm1[t].eq(s1["c"][t] - 1),
                             s1b_sum[t].eq(sum_rd.data[t])]
        # the sum and its negation side by side (two additions, not an addition and a
        # negation in a row: for the clock), the magnitude chosen by the sum's sign (assigned
        # outside the stage's If, so its handshake does not gate them)
        with m.If(go["s1b"][n]):
            m.d.sync += [s2[k].eq(s1b[k]) for k in fields]
        for t in range(n):
            total = Signal(signed(nb), name=f"pv_s1b_total_{t}")
            less1 = Signal(signed(nb), name=f"pv_s1b_less1_{t}")
            add = Mux(carry, s1b_sum[t], 0)
            m.d.comb += [total.eq(s1b["c"][t] + add), less1.eq(s1b_cm1[t] + add)]
            with m.If(go["s1b"][t]):
                m.d.sync += [s2["c"][t].eq(total), s2_neg[t].eq(total < 0),
                             s2_mag[t].eq(Mux(total < 0, ~less1, total))]
        m.d.comb += [sum_wr.addr.eq(s2["addr"]), sum_wr.en.eq(s2["valid"] & absorb),
                     *(sum_wr.data[t].eq(s2["c"][t]) for t in range(n))]
        m.d.comb += self.idle.eq(~s1["valid"] & ~s1b["valid"] & ~s2["valid"])
        d = self.to_div
        m.d.comb += [d.go.eq(Cat(go["s2"])), d.den.eq(s2["den"]), d.row.eq(s2["row"]),
                     d.col.eq(s2["col"]), d.last.eq(s2["last"]),
                     *(d.mag[t].eq(s2_mag[t]) for t in range(n)),
                     *(d.neg[t].eq(s2_neg[t]) for t in range(n))]
        return m


class LongDivider(wiring.Component):
    """n long dividers side by side, ``DIV_BITS`` quotient bits a cycle: a row's sums
    (``from_stages``) into ``o = round_div(num · 2**out_frac_bits, den)`` on ``attn``.
    ``round_div(a, d) = sign(a) · floor((2|a| + d) / (2d))``: the dividend ``2|a| + d``'s
    bits brought down two at a time into a partial remainder below ``2d``. The quotient fits
    ``8 + out_frac_bits`` bits (a convex combination of int8 values, rounded up to a multiple
    of DIV_BITS), so a row takes ``qb / DIV_BITS`` cycles, then waits on ``attn``'s ready.
    A chunk that absorbs its sums (``st.is_.absorb``) does not divide.

    Latency: ``qb / DIV_BITS`` cycles from the handover to the row's offer."""

    def __init__(self, shape: EngineShape, *, cmd_layout, attn_layout):
        self._sh = shape
        super().__init__({
            "st": In(StateSignature(cmd_layout)),
            "from_stages": In(SumsSignature(shape.n, shape.den_bits, shape.num_bits)),
            "attn": Out(stream.Signature(attn_layout)),
        })

    def elaborate(self, platform):
        m = Module()
        sh, st, n, F = self._sh, self.st, self._sh.n, self._sh.out_frac_bits
        s2, den_bits = self.from_stages, self._sh.den_bits
        absorb = st.is_.absorb
        qb = -(-(8 + F) // DIV_BITS) * DIV_BITS
        r_bits = sh.num_bits + F + 2
        busy, done = Signal(), Signal()
        # busy's copies, one a lane (its steps' enables)
        busy_c = [Signal(name=f"div_busy_{t}", attrs=KEEP_COPY) for t in range(n)]
        count = Signal(range(qb + 1))
        dv = Signal(den_bits + 1)        # the divisor 2d
        dv3 = Signal(den_bits + 3)       # 3 · 2d
        # long division, two quotient bits a step: the partial remainder (below 2d between
        # steps) and, beside it, the dividend's bits still to bring down in the top of a
        # register whose bottom takes the quotient's bits (after qb / 2 steps it is the
        # quotient). The dividend is below 2d · 2**qb (the quotient fits qb bits), so its
        # bits above the low qb are the first partial remainder. The remainder's compares
        # are den_bits + 4 bits wide (the divisor shifted right over the whole dividend had
        # made them qb bits wider: for the clock).
        part = [Signal(den_bits + 1, name=f"div_part_{t}") for t in range(n)]
        quo = [Signal(qb, name=f"div_q_{t}") for t in range(n)]
        neg = [Signal(name=f"div_neg_{t}") for t in range(n)]
        row, col, last = Signal(16), Signal(16), Signal()
        nums = [Signal(r_bits, name=f"div_num_{t}") for t in range(n)]
        m.d.comb += [nums[t].eq((s2.mag[t] << (F + 1)) + s2.den) for t in range(n)]
        with m.If(s2.go[n] & ~absorb):
            m.d.sync += [busy.eq(1), *(b.eq(1) for b in busy_c), count.eq(qb - 1),
                         dv.eq(s2.den << 1),
                         dv3.eq((s2.den << 2) + (s2.den << 1)),
                         row.eq(s2.row), col.eq(s2.col), last.eq(s2.last)]
        for t, num in enumerate(nums):
            with m.If(s2.go[t] & ~absorb):
                m.d.sync += [neg[t].eq(s2.neg[t]), quo[t].eq(num[:qb]),
                             part[t].eq(num[qb:])]
        # the remainder with the next two bits brought down (below 4 · 2d) less 2d, 4d and
        # 6d side by side, the largest that is not negative kept, its multiple the two
        # quotient bits (the compares outside the step's If: a combinational signal assigned
        # under it is gated by ``busy``, which Yosys had put in front of the carry chains)
        for t in range(n):
            r_ = Signal(den_bits + 3, name=f"div_r_{t}")
            m.d.comb += r_.eq(Cat(quo[t][-2:], part[t]))
            diffs = []
            for j, d_ in ((1, dv), (2, dv << 1), (3, dv3)):
                diff = Signal(signed(den_bits + 4), name=f"div_diff_{t}_{j}")
                m.d.comb += diff.eq(r_ - d_)
                diffs.append(diff)
            with m.If(busy_c[t]):
                ge = [~d[-1] for d in diffs]
                m.d.sync += [
                    part[t].eq(Mux(ge[2], diffs[2], Mux(ge[1], diffs[1],
                                                        Mux(ge[0], diffs[0], r_)))),
                    quo[t].eq(Cat(Mux(ge[2], 3, Mux(ge[1], 2, Mux(ge[0], 1, 0)))[:2],
                                  quo[t][:-2]))]
        with m.If(busy):
            m.d.sync += count.eq(count - 2)
            with m.If(count < DIV_BITS):
                m.d.sync += [busy.eq(0), done.eq(1), *(b.eq(0) for b in busy_c)]
        p = self.attn.payload
        m.d.comb += [p.o[t].eq(Mux(neg[t], -quo[t], quo[t])) for t in range(n)]
        m.d.comb += [self.attn.valid.eq(done), p.row.eq(row), p.col.eq(col), p.last.eq(last)]
        with m.If(self.attn.valid & self.attn.ready):
            m.d.sync += done.eq(0)
        with m.If(~st.start):
            m.d.sync += [busy.eq(0), done.eq(0), *(b.eq(0) for b in busy_c)]
        return m
