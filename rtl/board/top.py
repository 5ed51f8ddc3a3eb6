"""The board top: the board's oscillator through the ECP5 PLL to the core's clock, a reset
held until the PLL locks, the board system (core, on-chip memory, serial bridge) on the
USB serial port's pins and the LEDs. Built on ``amaranth-boards``' platform of the board
(``synth.fpga``, ``make fpga``)."""
from __future__ import annotations

from amaranth.hdl import (ClockDomain, ClockSignal, Elaboratable, Instance, Module,
                          ResetSignal, Signal)

from vrex.rules import ParameterError

from .system import BoardSystem

__all__ = ["BoardTop", "pll_dividers", "board_system"]


def pll_dividers(fin_mhz: float, fout_mhz: float) -> dict:
    """The EHXPLLL's dividers for ``fout`` from ``fin`` with the feedback from CLKOP:
    ``fout = fin · CLKFB_DIV / CLKI_DIV`` and a VCO of ``fout · CLKOP_DIV`` within the
    ECP5's 400-800 MHz (the smallest input divider that makes ``fout`` exactly)."""
    for clki in range(1, 129):
        fb = fout_mhz * clki / fin_mhz
        if abs(fb - round(fb)) > 1e-9 or not 1 <= round(fb) <= 80:
            continue
        for op in range(1, 129):
            if 400 <= fout_mhz * op <= 800:
                return {"CLKI_DIV": clki, "CLKFB_DIV": round(fb), "CLKOP_DIV": op,
                        "CLKOP_CPHASE": op // 2 - 1 if op > 1 else 0}
    raise ParameterError(f"no ECP5 PLL setting makes {fout_mhz} MHz from {fin_mhz} MHz")


def board_system(cfg, board, *, divisor: int | None = None, timeout: int | None = None):
    """The core of ``cfg`` with the board's memory and serial bridge (``divisor`` and
    ``timeout`` in cycles: the board's own by default; a simulation's faster line)."""
    from rtl import VrexCore
    return BoardSystem(VrexCore(cfg), mem_size=board.mem_bytes,
                       bus_bytes=cfg.kvmu_bus_bytes, addr_bits=cfg.kvmu_addr_bits,
                       divisor=divisor or board.divisor,
                       timeout=timeout or board.timeout_cycles)


class BoardTop(Elaboratable):
    """The design a board's bitstream holds: ``board`` a :class:`vrex.boards.Board`, ``cfg``
    its build."""

    def __init__(self, cfg, board):
        self.cfg, self.board = cfg, board
        self.pll = pll_dividers(board.clk_in_mhz, board.clk_mhz)
        self.system = board_system(cfg, board)

    def elaborate(self, platform):
        m = Module()
        clk_in = platform.request(platform.default_clk)
        m.domains.sync = ClockDomain("sync")
        locked, clk = Signal(), Signal()
        m.submodules.pll = Instance(
            "EHXPLLL",
            p_PLLRST_ENA="DISABLED", p_INTFB_WAKE="DISABLED", p_STDBY_ENABLE="DISABLED",
            p_DPHASE_SOURCE="DISABLED", p_OUTDIVIDER_MUXA="DIVA", p_CLKOP_ENABLE="ENABLED",
            p_CLKOP_FPHASE=0, p_FEEDBK_PATH="CLKOP",
            **{f"p_{k}": v for k, v in self.pll.items()},
            i_CLKI=clk_in.i, i_CLKFB=clk, o_CLKOP=clk, o_LOCK=locked,
            i_RST=0, i_STDBY=0, i_PHASESEL0=0, i_PHASESEL1=0, i_PHASEDIR=0, i_PHASESTEP=0,
            i_PHASELOADREG=0, i_PLLWAKESYNC=0, i_ENCLKOP=0)
        # the reset: held while the PLL is unlocked, released on the core's clock
        hold = Signal(2, init=3)
        m.domains.por = ClockDomain("por", reset_less=True)
        m.d.comb += [ClockSignal("por").eq(clk), ClockSignal("sync").eq(clk)]
        m.d.por += hold.eq(hold << 1 | ~locked)
        # on a global (a DCCA, always enabled): it reaches nearly every flip-flop of the
        # core (synth/global_reset.py says why)
        rst = Signal()
        m.submodules.rst_global = Instance("DCCA", i_CLKI=hold[1], i_CE=1, o_CLKO=rst)
        m.d.comb += ResetSignal("sync").eq(rst)
        platform.add_clock_constraint(clk, self.board.clk_mhz * 1e6)
        m.submodules.system = sys_ = self.system
        uart = platform.request("uart", 0)
        m.d.comb += [sys_.rx.eq(uart.rx.i), uart.tx.o.eq(sys_.tx)]
        for i in range(8):
            m.d.comb += platform.request("led", i).o.eq(sys_.leds[i])
        return m
