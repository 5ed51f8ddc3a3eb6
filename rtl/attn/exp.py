"""The fixed-point exponential unit of docs/numerics.md §7, bit-exact with
``golden.numerics.ExpUnit``."""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from vrex.rules import exp_rules

__all__ = ["ExpUnit"]


class ExpUnit(wiring.Component):
    """``lanes`` weights ``exp((s - max)·α)`` a beat, for score differences ``x <= 0``.

    Per lane, as ``golden.numerics.ExpUnit``: ``prod = x · beta_m``; ``n = -(prod >>
    beta_shift)`` (arithmetic shift, ``beta_shift = beta_s - frac_bits``); ``ip = n >>
    frac_bits``; the weight is ``table[n mod 2**frac_bits] >> ip``, or 0 once ``ip >=
    weight_bits``. ``table[f] = round(2**(weight_bits-1) · 2**(-f / 2**frac_bits))`` is a ROM of
    ``2**frac_bits`` entries per lane. A beat's ``tag`` (any layout, or none) travels with it.

    Timing: a fully pipelined stream, one beat a cycle; :attr:`latency` cycles from a beat's
    transfer on ``i`` to its offer on ``o``; back-pressure on ``o`` stalls every stage.

    Parameters (keyword-only, all required; ``from_config``; ``vrex.rules.exp_rules``)
        ``lanes`` weights a beat; ``frac_bits`` table index bits (table of 2**frac_bits);
        ``weight_bits`` weight width (1.0 = 2**(weight_bits-1)); ``x_bits`` signed width of x.
    Attributes
        ``i`` (in stream: ``x[lanes]`` signed, ``tag``); ``o`` (out stream: ``w[lanes]``,
        ``tag``); ``beta_m`` (16 bits) and ``beta_shift`` (6 bits) run-time registers, held
        steady while beats are in flight.
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
        return 5

    @property
    def table(self) -> list[int]:
        """The ROM, as the golden model defines it (round half up)."""
        one = 1 << (self._weight_bits - 1)
        size = 1 << self._frac_bits
        return [int((one * 2.0 ** (-f / size)) + 0.5) for f in range(size)]

    def elaborate(self, platform):
        m = Module()
        N, F, Wb = self._lanes, self._frac_bits, self._weight_bits
        prod_bits = self._x_bits + 17
        has_tag = "tag" in dict(self.in_layout.members)

        # every stage advances when the output is free or taken
        advance = Signal()
        valid = [Signal(name=f"s{k}_valid") for k in range(5)]
        m.d.comb += [advance.eq(~valid[4] | self.o.ready),
                     self.i.ready.eq(advance),
                     self.o.valid.eq(valid[4])]
        with m.If(advance):
            m.d.sync += [valid[0].eq(self.i.valid)] + [
                valid[k].eq(valid[k - 1]) for k in range(1, 5)]
        if has_tag:
            tags = [Signal(self.in_layout.members["tag"], name=f"s{k}_tag") for k in range(5)]
            with m.If(advance):
                m.d.sync += [tags[0].eq(self.i.payload.tag)] + [
                    tags[k].eq(tags[k - 1]) for k in range(1, 5)]
            m.d.comb += self.o.payload.tag.eq(tags[4])

        rom = memory.Memory(shape=Wb, depth=1 << F, init=self.table)
        m.submodules.rom = rom
        for j in range(N):
            # s0: x as it arrives (in the engine it comes straight from the score memory
            # less the row's maximum: with the multiplier in one cycle it limited the clock)
            s0_x = Signal(signed(self._x_bits), name=f"s0_x_{j}")
            s1_prod = Signal(signed(prod_bits), name=f"s1_prod_{j}")
            s2_n = Signal(prod_bits, name=f"s2_n_{j}")
            s3_ip = Signal(prod_bits - F, name=f"s3_ip_{j}")
            s4_w = Signal(Wb, name=f"s4_w_{j}")
            rd = rom.read_port()              # one ROM port per lane (a LUT ROM on FPGAs)
            shifted = Signal(signed(prod_bits), name=f"s1_shift_{j}")
            m.d.comb += [shifted.eq(s1_prod >> self.beta_shift),
                         rd.addr.eq(s2_n[:F]), rd.en.eq(advance)]
            with m.If(advance):
                m.d.sync += [s0_x.eq(self.i.payload.x[j]), s1_prod.eq(s0_x * self.beta_m),
                             s2_n.eq(-shifted),
                             s3_ip.eq(s2_n[F:])]
                m.d.sync += s4_w.eq(Mux(s3_ip >= Wb, 0, rd.data >> s3_ip[:max(1, (Wb - 1).bit_length())]))
            m.d.comb += self.o.payload.w[j].eq(s4_w)
        return m
