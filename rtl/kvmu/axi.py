"""An AXI4 master's ports, named as Vivado's and LiteX's flows expect (``m_axi_awaddr``, ...),
and the INCR burst rule every KVMU transfer follows."""
from __future__ import annotations

from amaranth.hdl import Mux, Signal
from amaranth.lib.wiring import In, Out

__all__ = ["axi4_master_members", "BOUNDARY", "burst_beats"]

BOUNDARY = 4096         # an INCR burst never crosses a 4 KB boundary
OKAY = 0


def axi4_master_members(prefix: str, addr_bits: int, data_bits: int, id_bits: int = 1) -> dict:
    """The signature members of an AXI4 master: ``{prefix}_aw*``, ``_w*``, ``_b*``,
    ``_ar*``, ``_r*``. It issues every transfer with ID 0 (so responses come in order) and
    ignores the response IDs."""
    p = prefix
    mem = {}
    for ch in ("aw", "ar"):
        mem.update({f"{p}_{ch}id": Out(id_bits), f"{p}_{ch}addr": Out(addr_bits), f"{p}_{ch}len": Out(8),
                    f"{p}_{ch}size": Out(3), f"{p}_{ch}burst": Out(2),
                    f"{p}_{ch}lock": Out(1), f"{p}_{ch}cache": Out(4), f"{p}_{ch}prot": Out(3),
                    f"{p}_{ch}valid": Out(1), f"{p}_{ch}ready": In(1)})
    mem.update({f"{p}_wdata": Out(data_bits), f"{p}_wstrb": Out(data_bits // 8),
                f"{p}_wlast": Out(1), f"{p}_wvalid": Out(1), f"{p}_wready": In(1),
                f"{p}_bid": In(id_bits), f"{p}_bresp": In(2), f"{p}_bvalid": In(1), f"{p}_bready": Out(1),
                f"{p}_rid": In(id_bits), f"{p}_rdata": In(data_bits), f"{p}_rresp": In(2), f"{p}_rlast": In(1),
                f"{p}_rvalid": In(1), f"{p}_rready": Out(1)})
    return mem


def burst_beats(m, addr, remaining, cap, bus_bytes: int, name: str):
    """Beats of the next INCR burst from byte address ``addr`` with ``remaining`` beats to go:
    the least of ``remaining``, ``cap`` and the beats left before the next 4 KB boundary
    (``addr`` is a multiple of ``bus_bytes``)."""
    lg = bus_bytes.bit_length() - 1
    per_page = BOUNDARY // bus_bytes
    to_edge = Signal(range(per_page + 1), name=f"{name}_to_edge")
    m.d.comb += to_edge.eq(per_page - addr[lg:12])
    a = Signal(max(len(remaining), len(cap), len(to_edge)), name=f"{name}_a")
    out = Signal.like(a, name=f"{name}_beats")
    m.d.comb += [a.eq(Mux(remaining < cap, remaining, cap)),
                 out.eq(Mux(a < to_edge, a, to_edge))]
    return out
