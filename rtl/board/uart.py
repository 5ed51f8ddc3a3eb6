"""A UART: 8 data bits, no parity, one stop bit (8N1), ``divisor`` clock cycles a bit; bytes
in and out as streams."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.cdc import FFSynchronizer
from amaranth.lib.wiring import In, Out

from vrex.rules import ParameterError

__all__ = ["UartRx", "UartTx", "uart_rules"]


def uart_rules(divisor) -> None:
    if not isinstance(divisor, int) or divisor < 4:
        raise ParameterError(f"divisor (clock cycles a bit) must be an int of at least 4, "
                             f"not {divisor!r}")


class UartRx(wiring.Component):
    """The receiver: ``rx`` (the line, idle high, through two synchronising flip-flops),
    each byte on ``o`` (a byte that finds ``o`` still full is dropped and counted in
    ``overruns``); a byte whose stop bit is low is dropped and raises ``frame_error`` for a
    cycle. A start bit is a low sampled in the middle of its bit time."""

    def __init__(self, divisor: int):
        uart_rules(divisor)
        self.divisor = divisor
        super().__init__({"rx": In(1, init=1), "o": Out(stream.Signature(8)),
                          "frame_error": Out(1), "overruns": Out(8)})

    def elaborate(self, platform):
        m, d = Module(), self.divisor
        line = Signal(init=1)
        m.submodules.sync = FFSynchronizer(self.rx, line, init=1)
        timer = Signal(range(d))
        bit = Signal(range(10))
        shift = Signal(8)
        with m.If(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        m.d.sync += self.frame_error.eq(0)
        with m.FSM(name="rx_fsm"):
            with m.State("IDLE"):
                with m.If(~line):
                    m.d.sync += [timer.eq(d // 2 - 1), bit.eq(0)]
                    m.next = "BITS"
            with m.State("BITS"):
                with m.If(timer != 0):
                    m.d.sync += timer.eq(timer - 1)
                with m.Else():
                    m.d.sync += [timer.eq(d - 1), bit.eq(bit + 1)]
                    with m.If(bit == 0):                  # the start bit's middle
                        with m.If(line):
                            m.next = "IDLE"               # a glitch, not a start bit
                    with m.Elif(bit < 9):
                        m.d.sync += shift.eq(Cat(shift[1:], line))
                    with m.Else():                        # the stop bit's middle
                        with m.If(~line):
                            m.d.sync += self.frame_error.eq(1)
                        with m.Elif(self.o.valid & ~self.o.ready):
                            m.d.sync += self.overruns.eq(self.overruns + 1)
                        with m.Else():
                            m.d.sync += [self.o.payload.eq(shift), self.o.valid.eq(1)]
                        m.next = "IDLE"
        return m


class UartTx(wiring.Component):
    """The transmitter: each byte taken from ``i`` goes out on ``tx`` (idle high) as a
    start bit, eight data bits (least significant first) and a stop bit."""

    def __init__(self, divisor: int):
        uart_rules(divisor)
        self.divisor = divisor
        super().__init__({"i": In(stream.Signature(8)), "tx": Out(1, init=1)})

    def elaborate(self, platform):
        m, d = Module(), self.divisor
        timer = Signal(range(d))
        bits = Signal(10, init=0x3FF)
        left = Signal(range(11))
        m.d.comb += self.i.ready.eq(left == 0)
        m.d.sync += self.tx.eq(bits[0])
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [bits.eq(Cat(0, self.i.payload, 1)), left.eq(10), timer.eq(d - 1)]
        with m.Elif(left != 0):
            with m.If(timer != 0):
                m.d.sync += timer.eq(timer - 1)
            with m.Else():
                m.d.sync += [bits.eq(Cat(bits[1:], 1)), left.eq(left - 1), timer.eq(d - 1)]
        return m
