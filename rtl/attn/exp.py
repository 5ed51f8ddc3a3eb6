"""The fixed-point exponential unit of docs/numerics.md §7, bit-exact with
``golden.numerics.ExpUnit``."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from vrex.rules import exp_rules

from ..lib import copies, head_queue

__all__ = ["ExpUnit"]


class ExpUnit(wiring.Component):
    """``lanes`` weights ``exp((s - max)·α)`` a beat, for score differences ``x <= 0``.

    Per lane, as ``golden.numerics.ExpUnit``: ``prod = x · beta_m``; ``n = -(prod >>
    beta_shift)`` (arithmetic shift, ``beta_shift = beta_s - frac_bits``); ``ip = n >>
    frac_bits``; the weight is ``table[n mod 2**frac_bits] >> ip``, or 0 once ``ip >=
    weight_bits``. ``table[f] = round(2**(weight_bits-1) · 2**(-f / 2**frac_bits))`` is a ROM of
    ``2**frac_bits`` entries per lane. A beat's ``tag`` (any layout, or none) travels with it.

    Timing: a fully pipelined stream, one beat a cycle; :attr:`latency` cycles from a beat's
    transfer on ``i`` to its offer on ``o``. Back-pressure on ``o`` does not stall the
    pipeline: every beat goes into a queue of :attr:`QUEUE` + 1 beats whose head ``o``
    offers, and ``i`` is refused only when the beats in flight could fill it (never while
    ``o`` is ready).

    Parameters (keyword-only, all required; ``from_config``; ``vrex.rules.exp_rules``)
        ``lanes`` weights a beat; ``frac_bits`` table index bits (table of 2**frac_bits);
        ``weight_bits`` weight width (1.0 = 2**(weight_bits-1)); ``x_bits`` signed width of x.
    Attributes
        ``i`` (in stream: ``x[lanes]`` signed, ``tag``); ``o`` (out stream: ``w[lanes]``,
        ``tag``); ``beta_m`` (16 bits) and ``beta_shift`` (6 bits) run-time registers, held
        steady while beats are in flight and set no later than the first beat's transfer
        (the unit registers them).
    """

    def __init__(self, *, lanes: int, frac_bits: int, weight_bits: int, x_bits: int,
                 tag_layout=None):
        exp_rules(lanes=lanes, frac_bits=frac_bits, weight_bits=weight_bits, x_bits=x_bits)
        self._lanes, self._frac_bits = lanes, frac_bits
        self._weight_bits, self._x_bits = weight_bits, x_bits
        tag = {} if tag_layout is None else {"tag": tag_layout}
        self.in_layout = data.StructLayout({"x": data.ArrayLayout(signed(x_bits), lanes), **tag})
        self.out_layout = data.StructLayout({"w": data.ArrayLayout(weight_bits, lanes), **tag})
        super().__init__({
            "i": In(stream.Signature(self.in_layout)),
            "o": Out(stream.Signature(self.out_layout)),
            "beta_m": In(16),
            "beta_shift": In(6),
        })

    @classmethod
    def from_config(cls, cfg, **kw) -> "ExpUnit":
        return cls(**cfg.block_params("attn_exp"), **kw)

    lanes = property(lambda self: self._lanes)
    frac_bits = property(lambda self: self._frac_bits)

    @property
    def latency(self) -> int:
        """Cycles from a beat's transfer on ``i`` to its offer on ``o`` (``o`` ready)."""
        return 7

    @property
    def table(self) -> list[int]:
        """The ROM, as the golden model defines it (round half up)."""
        one = 1 << (self._weight_bits - 1)
        size = 1 << self._frac_bits
        return [int((one * 2.0 ** (-f / size)) + 0.5) for f in range(size)]

    QUEUE = 8           # beats the output queue holds beside its head while ``o`` is blocked

    def elaborate(self, platform):
        m = Module()
        N, F, Wb = self._lanes, self._frac_bits, self._weight_bits
        prod_bits = self._x_bits + 17
        has_tag = "tag" in dict(self.in_layout.members)
        Q = self.QUEUE

        # Stages s0-s5 never stall (no enable on their registers: a stall signal from ``o``
        # had reached thousands of enables in the engine). A beat leaving s5 goes into a
        # queue of Q + 1 beats whose head ``o`` offers; the input is ready while the beats
        # taken and not yet delivered (``held``, a counter) leave a place for every one of
        # them in the queue, so nothing is ever dropped. Unblocked, at most 7 beats are
        # held (s0-s5 and the queue's head), so the input is never refused: one beat a
        # cycle at latency 7.
        S = 6                                   # stages s0 .. s5
        valid = [Signal(name=f"s{k}_valid") for k in range(S)]
        take, give = Signal(), Signal()
        held = Signal(range(Q + 3))
        held_next = Signal(range(Q + 3))
        # the input's ready a register, set from the count's next value (the compare had sat
        # between the count and the engine's score reader, whose issue moves a dozen
        # counters: for the clock; cycle for cycle the same)
        ready = Signal(init=1, name="i_ready")
        m.d.comb += [held_next.eq(held + take - give), self.i.ready.eq(ready),
                     take.eq(self.i.valid & ready)]
        m.d.sync += [valid[0].eq(take)] + [valid[k].eq(valid[k - 1]) for k in range(1, S)]
        m.d.sync += [held.eq(held_next), ready.eq(held_next <= Q)]
        beat = Signal(self.out_layout)          # the beat leaving s5, into the queue
        if has_tag:
            tags = [Signal(self.in_layout.members["tag"], name=f"s{k}_tag", reset_less=True)
                    for k in range(S)]
            m.d.sync += [tags[0].eq(self.i.payload.tag)] + [
                tags[k].eq(tags[k - 1]) for k in range(1, S)]
            m.d.comb += beat.tag.eq(tags[S - 1])

        rom = memory.Memory(shape=Wb, depth=1 << F, init=self.table)
        m.submodules.rom = rom
        # x · beta_m as two products of at most 18 x 18 bits (a DSP block's), x's low
        # LO bits (unsigned) and its high bits (signed), each into its own register (a
        # DSP's output register), added a stage later: the whole product in one cycle, its
        # two multipliers and their sum's carry chain, had limited the clock
        LO = 17 if self._x_bits > 18 else 0
        # beta_m and beta_shift in registers of the unit's own (they come from the engine's
        # command register, across the chip; for the clock): a beat's product reads beta_m
        # a cycle after its transfer, so a beta set with the first beat is in time
        # both in a copy a lane (one beta_shift register had been routed 4.5 ns to its
        # lanes' shifts, one beta_m register 6.1 ns to a lane's multiplier: for the clock)
        beta_ms = copies(m, self.beta_m, N, "beta_m_r")
        beta_shifts = copies(m, self.beta_shift, N, "beta_shift_r")
        for j in range(N):
            beta_m, beta_shift = beta_ms[j], beta_shifts[j]
            # s0: x as it arrives (in the engine it comes straight from the score memory
            # less the row's maximum: with the multiplier in one cycle it limited the clock)
            s0_x = Signal(signed(self._x_bits), name=f"s0_x_{j}", reset_less=True)
            s1_hi = Signal(signed(prod_bits - LO), name=f"s1_hi_{j}", reset_less=True)
            s2_prod = Signal(signed(prod_bits), name=f"s2_prod_{j}", reset_less=True)
            # the shift by beta_shift over two stages: s3 by its multiple of 8 (beta_shift's
            # high bits: an 8-way choice a bit), s4 by the rest (its low bits, 8-way); the
            # 64-way shift of the whole product in one cycle, from a register every lane's
            # 41 bits read, had limited the clock in the engine
            s3_c = Signal(signed(prod_bits), name=f"s3_c_{j}", reset_less=True)
            # s4 keeps the shifted product and n's low bits (n = -shifted: its low bits
            # need only the shifted product's, a short carry chain; the whole negation
            # waits for s5, for the clock)
            s4_v = Signal(signed(prod_bits), name=f"s4_v_{j}", reset_less=True)
            s4_lo = Signal(F, name=f"s4_lo_{j}", reset_less=True)
            # s5: whether the weight is 0 (ip >= weight_bits, that is -v >= weight_bits·2**F
            # for v <= 0: a compare on v itself, no negation in front of it) and the shift,
            # ip's low bits (a negation of v's low bits alone), not the whole ip (its compare
            # had sat between the stage and the queue: for the clock)
            sh_bits = max(1, (Wb - 1).bit_length())
            s5_zero = Signal(name=f"s5_zero_{j}", reset_less=True)
            s5_sh = Signal(sh_bits, name=f"s5_sh_{j}", reset_less=True)
            rd = rom.read_port()              # one ROM port per lane (a LUT ROM on FPGAs)
            shifted = Signal(signed(prod_bits), name=f"s3_shift_{j}")
            m.d.comb += [shifted.eq(s3_c >> beta_shift[:3]), rd.addr.eq(s4_lo)]
            m.d.sync += [s0_x.eq(self.i.payload.x[j]),
                         s1_hi.eq(s0_x[LO:].as_signed() * beta_m)]
            if LO:
                s1_lo = Signal(LO + 16, name=f"s1_lo_{j}", reset_less=True)
                m.d.sync += [s1_lo.eq(s0_x[:LO] * beta_m),
                             s2_prod.eq((s1_hi << LO) + s1_lo)]
            else:
                m.d.sync += s2_prod.eq(s1_hi)
            m.d.sync += [s3_c.eq(s2_prod >> Cat(Const(0, 3), beta_shift[3:])),
                         s4_v.eq(shifted), s4_lo.eq(-shifted[:F]),
                         s5_zero.eq(s4_v <= -(Wb << F)),
                         s5_sh.eq((-s4_v[:F + sh_bits])[F:F + sh_bits])]
            m.d.comb += beat.w[j].eq(Mux(s5_zero, 0, rd.data >> s5_sh))

        # the queue (first in, first out): every beat leaving s5 goes in, and ``o`` offers its
        # head, the beat straight from the queue's RAM and ``valid`` from a registered flag,
        # so ``o.ready`` reaches the queue's read pointer and counters alone (an output
        # register in front of it, loaded under ``o.ready``, had been the engine's
        # widest enable after the array's); the queue's write takes that register's cycle,
        # and the queue one place more for it
        has, head, get = head_queue(m, "queue", self.out_layout, Q + 1, put=valid[S - 1],
                                    data=beat, ready=self.o.ready)
        m.d.comb += [give.eq(get), self.o.valid.eq(has), self.o.payload.eq(head)]
        return m
