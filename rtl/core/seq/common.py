"""What the sequencer's parts share: the read DMA's destinations and the engine's B sources,
the layouts of a descriptor, of a read-DMA program, of the phase controller's walk over heads
and groups and of the requests phases make, and the signature every phase controller presents
to the phase controller above it (``rtl.core.seq.top`` joins them)."""
from __future__ import annotations

from amaranth.hdl import Cat
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from vrex import regmap

from ...attn.engine import SPAN_BITS

__all__ = ["A", "B", "KV", "SUM", "DOT", "CTX", "SRC_DMA", "SRC_CAND", "SRC_KV", "SRC_PAD",
           "ERR", "descriptor_layout", "descriptor_fields", "program_layout", "walk_layout",
           "requests_layout", "bsrc_layout", "PhaseSignature", "Tap", "tap", "offer",
           "shape_of"]

# read DMA destinations: the engine's A and B, the KVMU's store data, the centring sums, the
# centring dot products, a saved cluster window on its way into the HCU
A, B, KV, SUM, DOT, CTX = 0, 1, 2, 3, 4, 5
# where the engine's B operand comes from
SRC_DMA, SRC_CAND, SRC_KV, SRC_PAD = 0, 1, 2, 3

ERR = {name: code for name, (code, _) in regmap.ERRORS.items()}


def shape_of(component, port: str):
    """The payload shape of a stream port of ``component``."""
    return component.signature.members[port].signature.members["payload"].shape


def descriptor_layout() -> data.StructLayout:
    """A descriptor's fields (``vrex.regmap.DESCRIPTOR``), each as wide as the map says."""
    return data.StructLayout({name: width for _, name, _, width, _ in regmap.DESCRIPTOR})


def descriptor_fields(words):
    """The fields of a descriptor's words (``DESC_WORDS`` of 32 bits), by name."""
    f = {}
    for word, name, lsb, width, _ in regmap.DESCRIPTOR:
        lo = Cat(*[words[word + i] for i in range((lsb + width + 31) // 32)])
        f[name] = lo[lsb:lsb + width]
    return f


def program_layout(addr_bits: int) -> data.StructLayout:
    """A read-DMA program: a two-level loop of jobs (``n_out`` rows from ``b0`` ``s_out``
    apart, ``n_in`` jobs of ``beats`` a row ``s_in`` apart), in pairs from ``b0`` and ``b1``
    (K then V) when ``pair``, to ``dest``."""
    return data.StructLayout({"b0": addr_bits, "b1": addr_bits, "beats": 16, "n_out": 16,
                              "n_in": 8, "s_out": addr_bits, "s_in": addr_bits, "pair": 1,
                              "dest": 3})


def walk_layout(addr_bits: int) -> data.StructLayout:
    """Where the phase controller stands in a descriptor: the sink tokens attended, the step's
    own tokens that are sinks (``skip``) and those hashed (``nh``), a KV head's query rows,
    the KV head (``head``; its hash group ``gi`` and place in it ``gj``), the hash group
    (``grp``), and the addresses the phases read from (``ptr``)."""
    ptr = data.StructLayout({k: addr_bits for k in ("q", "k", "v", "o", "sk", "sv", "kh",
                                                    "kg", "vg", "hp")})
    return data.StructLayout({"sinks": 16, "skip": 16, "nh": 16, "rows": 24, "head": 8,
                              "grp": 8, "gi": 8, "gj": 8, "ptr": ptr})


def requests_layout() -> data.StructLayout:
    """A phase's requests to registers the phase controller keeps: the phase counter
    (``phase``, when ``set_phase``: 1 predict, 2 attend, 3 hash, 4 store, 5 swap) and an
    error raised (``err_code`` non-zero, with ``err_addr``)."""
    return data.StructLayout({"set_phase": 1, "phase": 3, "err_code": 8, "err_addr": 64})


def bsrc_layout(kv_lg: int) -> data.StructLayout:
    """A request to the engine's B source (:class:`~.jobs.BSource`): ``set`` it to ``src``;
    ``load`` the fetched beats still due (``left``); a fetch's end beat (``fetch_end``)."""
    return data.StructLayout({"set": 1, "src": 2, "load": 1, "left": SPAN_BITS + kv_lg,
                              "fetch_end": 1})


class PhaseSignature(wiring.Signature):
    """A phase controller's port to the phase controller above it. ``go`` starts it from
    IDLE (at ``entry``, for a phase with several first states); ``done`` says it leaves (to
    ``exit``, for a phase with several next states): the controller above starts the next
    phase in that cycle, so a phase's last state and the next one's first are one cycle
    apart, as in one state machine. The shared resources: read-DMA programs (``prog``),
    engine commands (``ecmd``) and column vectors (``bias``), KVMU commands (``kcmd``), the
    B source (``bsrc``) and the controller's registers (``req``); a phase drives them only
    in its own states (0 otherwise), so the controller above ORs them."""

    def __init__(self, *, prog, ecmd, bias, kcmd, kv_lg):
        super().__init__({
            "go": In(1), "entry": In(2), "done": Out(1), "exit": Out(2),
            "prog": Out(stream.Signature(prog)), "ecmd": Out(stream.Signature(ecmd)),
            "bias": Out(stream.Signature(bias)), "kcmd": Out(stream.Signature(kcmd)),
            "bsrc": Out(bsrc_layout(kv_lg)), "req": Out(requests_layout()),
        })


class Tap(wiring.Signature):
    """A stream seen from the side: its handshake and payload, for a part that neither
    drives nor takes it."""

    def __init__(self, payload):
        super().__init__({"valid": Out(1), "ready": Out(1), "payload": Out(payload)})


def tap(m, port, stream_):
    """Drive an ``In(Tap(...))`` port from a stream's signals."""
    m.d.comb += [port.valid.eq(stream_.valid), port.ready.eq(stream_.ready),
                 port.payload.eq(stream_.payload)]


def offer(m, port, /, **fields):
    """Offer a beat on ``port`` (an out stream) with ``fields`` (the others 0)."""
    m.d.comb += port.valid.eq(1)
    for key, v in fields.items():
        m.d.comb += getattr(port.payload, key).eq(v)
