"""The board's design without its pins and clock: the core, the on-chip memory on its AXI4
master, and the serial bridge (UART, frames) to the core's registers and that memory. The
board top (:mod:`rtl.board.top`) adds the PLL, the reset and the pins; the board-top
simulation runs this under Verilator with the host driver on its serial line."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from vrex.rules import ParameterError

from .bridge import SerialBridge
from .ram import BoardRam
from .uart import UartRx, UartTx

__all__ = ["BoardSystem", "join_axil", "join_axi"]


def join_axil(m, master, slave, mprefix="m_axil", sprefix="s_axil"):
    """Connect an AXI4-Lite master's ``{mprefix}_*`` to a slave's ``{sprefix}_*`` by name
    (the core's flat, Vivado-style port names)."""
    _join(m, master, slave, mprefix, sprefix)


def join_axi(m, master, slave, mprefix="m_axi", sprefix="s_axi"):
    """Connect an AXI4 master's ``{mprefix}_*`` to a slave's ``{sprefix}_*`` by name."""
    _join(m, master, slave, mprefix, sprefix)


def _join(m, master, slave, mp, sp):
    smembers = slave.signature.members
    for name, member in master.signature.members.items():
        if not name.startswith(mp + "_"):
            continue
        other = sp + name[len(mp):]
        if other not in smembers:
            continue                        # a signal the slave does not have (lock, ...)
        a, b = getattr(master, name), getattr(slave, other)
        if member.flow == Out:
            m.d.comb += b.eq(a)
        else:
            m.d.comb += a.eq(b)


class BoardSystem(wiring.Component):
    """``target``: the core (or any component with ``s_axil_*``, and ``m_axi_*`` and
    ``irq`` if it has them); ``mem_size`` bytes of on-chip memory at address 0 of the
    core's master; a UART of ``divisor`` clock cycles a bit on ``rx``/``tx``; the bridge's
    ``timeout`` in cycles. ``leds``: 0 the interrupt, 1 the core's ``error`` (ERROR_CODE
    holds an error), 2 a serial frame was answered with an error since reset, 3 the
    UART saw a framing error or an overrun, 4-7 the frames answered (a heartbeat)."""

    def __init__(self, target, *, mem_size: int, bus_bytes: int, addr_bits: int,
                 divisor: int, timeout: int):
        if not hasattr(target, "s_axil_awaddr"):
            raise ParameterError("the board's target must have an AXI4-Lite slave (s_axil_*)")
        self.target = target
        self.uart_rx, self.uart_tx = UartRx(divisor), UartTx(divisor)
        self.bridge = SerialBridge(mem_size=mem_size, addr_bits=addr_bits, timeout=timeout)
        self.ram = BoardRam(size=mem_size, bus_bytes=bus_bytes, addr_bits=addr_bits)
        super().__init__({"rx": In(1, init=1), "tx": Out(1, init=1), "leds": Out(8)})

    def elaborate(self, platform):
        m = Module()
        t = self.target
        for name in ("target", "uart_rx", "uart_tx", "bridge", "ram"):
            m.submodules[name] = getattr(self, name)
        m.d.comb += [self.uart_rx.rx.eq(self.rx), self.tx.eq(self.uart_tx.tx)]
        wiring.connect(m, self.uart_rx.o, self.bridge.rx)
        wiring.connect(m, self.bridge.tx, self.uart_tx.i)
        wiring.connect(m, self.bridge.mem, self.ram.port)
        join_axil(m, self.bridge, t)
        if hasattr(t, "m_axi_awaddr"):
            join_axi(m, t, self.ram)
        uart_fault, frame_err = Signal(), Signal()
        m.d.sync += [uart_fault.eq(uart_fault | self.uart_rx.frame_error |
                                   (self.uart_rx.overruns != 0)),
                     frame_err.eq(frame_err | (self.bridge.errors != 0))]
        irq, error = (getattr(t, n) if hasattr(t, n) else 0 for n in ("irq", "error"))
        m.d.comb += self.leds.eq(Cat(irq, error, frame_err, uart_fault,
                                     self.bridge.frames[:4]))
        return m
