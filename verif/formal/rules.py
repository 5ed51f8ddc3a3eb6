"""The protocol rules as Amaranth properties: the stream rule, an AXI4 master's and an AXI4-Lite
slave's. Each rule is written once from the side that must keep it: what the block under
proof drives is asserted, what its neighbour drives is assumed (the same rule), so the proof
holds for every neighbour that keeps the protocol and for no other.

The properties read the cycle before through :meth:`Props.past` (registers outside every
reset) and start on the cycle after reset's (:attr:`Props.live`); rules that compare two
cycles start one later (:attr:`Props.held`)."""
from __future__ import annotations

from amaranth.hdl import Assert, Assume, Cat, Const, Cover, Module, Mux, ResetSignal, Signal, Value

__all__ = ["Props", "stream_rule", "axi_master_rules", "axil_slave_rules", "OKAY", "SLVERR"]

OKAY, SLVERR = 0, 2
INCR = 1


class Props:
    """The properties of one harness, in module ``m``: reset is high on the first cycle only
    (assumed), :attr:`live` is high from the second, :attr:`held` from the third."""

    def __init__(self, m: Module):
        self.m = m
        # the past registers in a module of their own: taken on every cycle, whatever
        # condition of ``m`` a rule asks for them in
        self._pm = m.submodules.f_past = Module()
        first = Signal(init=1, reset_less=True, name="f_first")
        second = Signal(init=1, reset_less=True, name="f_second")
        m.d.sync += [first.eq(0), second.eq(first)]
        m.d.comb += Assume(ResetSignal("sync") == first, "reset on the first cycle only")
        self.live, self.held = ~first, ~first & ~second
        self.asserts = self.assumes = 0

    def past(self, v, name: str) -> Signal:
        """``v`` one cycle ago."""
        v = Value.cast(v)
        p = Signal(v.shape(), reset_less=True, name=f"f_past_{name}")
        self._pm.d.sync += p.eq(v)
        return p

    def check(self, mine: bool, cond, msg: str):
        """Assert ``cond`` (``mine``: the block under proof keeps the rule) or assume it."""
        self.asserts += mine
        self.assumes += not mine
        self.m.d.comb += (Assert if mine else Assume)(cond, msg)

    def cover(self, cond, msg: str):
        """An event the proof's depth must reach (``mode cover`` finds the cycle)."""
        self.m.d.comb += Cover(self.live & cond, msg)

    def hold(self, mine: bool, valid, ready, payload, name: str):
        """Valid stays up until ready takes it, its payload unchanged meanwhile."""
        pv, pr = self.past(valid, f"{name}_v"), self.past(ready, f"{name}_r")
        pp = self.past(payload, f"{name}_p")
        with self.m.If(self.held & pv & ~pr):
            self.check(mine, valid, f"{name}: valid dropped before ready")
            self.check(mine, Value.cast(payload) == pp, f"{name}: payload changed while waiting")


def stream_rule(props: Props, port, mine: bool, name: str):
    """The stream rule on ``port`` (an ``amaranth.lib.stream`` interface): valid is held until
    ready and the payload stable meanwhile. ``mine``: the block under proof sends on it."""
    props.hold(mine, port.valid, port.ready, port.payload, name)
    if mine:
        props.cover(port.valid & port.ready, f"{name}: a transfer")


def _fifo(m: Module, depth: int, width: int, name: str):
    """A queue of ``depth`` entries for the checker (push, pop, head, level)."""
    buf = [Signal(width, name=f"{name}_q{i}") for i in range(depth)]
    level = Signal(range(depth + 2), name=f"{name}_level")
    push, pop, data = Signal(name=f"{name}_push"), Signal(name=f"{name}_pop"), Signal(width)
    head = buf[0]
    nxt = [Signal(width) for _ in range(depth)]
    for i in range(depth):
        m.d.comb += nxt[i].eq(buf[i + 1] if i + 1 < depth else 0)
    after_pop = Signal(range(depth + 2))
    m.d.comb += after_pop.eq(level - pop)
    for i in range(depth):
        with m.If(push & (after_pop == i)):
            m.d.sync += buf[i].eq(data)
        with m.Elif(pop):
            m.d.sync += buf[i].eq(nxt[i])
    m.d.sync += level.eq(level + push - pop)
    return push, pop, data, head, level


def axi_master_rules(props: Props, get, *, bus_bytes: int, reads: tuple, writes: tuple,
                     max_len: int, name: str = "m_axi"):
    """The AXI4 rules a master keeps, asserted, and its slave's, assumed, on the channels
    ``get(field)`` returns (``awvalid``, ...). Master: each request channel held with its
    payload stable until ready; INCR bursts of the bus's width, aligned, of at most
    ``max_len`` beats, never across a 4 KB boundary; W beats only for an address already
    sent (or sent in the same cycle), WLAST on the burst's last beat and only there; at most
    ``reads[i]`` read and ``writes[i]`` write bursts of ID ``i`` in flight. A master of one
    half (``reads`` or ``writes`` empty) has only that half's channels. Slave: responses held until
    ready, each one for a request in flight of its ID, RLAST on a burst's last beat, B only
    after the burst's last W beat."""
    m = props.m
    lg = bus_bytes.bit_length() - 1
    half = {"aw": writes, "w": writes, "b": writes, "ar": reads, "r": reads}
    addr_fields = ("id", "addr", "len", "size", "burst", "lock", "cache", "prot")
    for ch, pay in (("aw", addr_fields), ("ar", addr_fields), ("w", ("data", "strb", "last"))):
        if half[ch]:
            props.hold(True, get(f"{ch}valid"), get(f"{ch}ready"),
                       Cat(*(get(f"{ch}{f}") for f in pay)), f"{name}_{ch}")
    if writes:
        props.hold(False, get("bvalid"), get("bready"), Cat(get("bid"), get("bresp")),
                   f"{name}_b")
    if reads:
        props.hold(False, get("rvalid"), get("rready"),
                   Cat(get("rid"), get("rdata"), get("rresp"), get("rlast")), f"{name}_r")
    for ch in ("aw", "ar"):
        if not half[ch]:
            continue
        addr, ln = get(f"{ch}addr"), get(f"{ch}len")
        with m.If(props.live & get(f"{ch}valid")):
            props.check(True, get(f"{ch}burst") == INCR, f"{name}_{ch}: INCR bursts only")
            props.check(True, get(f"{ch}size") == lg, f"{name}_{ch}: the bus's own width")
            props.check(True, addr[:lg] == 0, f"{name}_{ch}: address aligned to the beat")
            props.check(True, ln < max_len, f"{name}_{ch}: at most {max_len} beats")
            props.check(True, addr[lg:12] + ln < (4096 >> lg),
                        f"{name}_{ch}: the burst stays inside its 4 KB page")
    with m.If(props.live):
        for ch in ("ar", "aw", "r", "b"):
            if half[ch]:
                with m.If(get(f"{ch}valid")):
                    props.check(ch in ("ar", "aw"), get(f"{ch}id") < len(half[ch]),
                                f"{name}_{ch}: a known ID")
    if reads:
        _reads(props, get, reads, name)
    if writes:
        _writes(props, get, writes, name)


def _reads(props: Props, get, limits: tuple, name: str):
    """Reads in flight per ID (a queue of their lengths) and the beat count of the oldest."""
    m = props.m
    ar_go = get("arvalid") & get("arready")
    r_go = get("rvalid") & get("rready")
    for i, outstanding in enumerate(limits):
        push, pop, data, head, level = _fifo(m, max(1, outstanding), 8, f"{name}_rq{i}")
        beat = Signal(8, name=f"{name}_rbeat{i}")
        mine = get("rid") == i
        m.d.comb += [push.eq(ar_go & (get("arid") == i)), data.eq(get("arlen")),
                     pop.eq(r_go & mine & get("rlast"))]
        with m.If(r_go & mine):
            m.d.sync += beat.eq(Mux(get("rlast"), 0, beat + 1))
        props.check(True, level <= outstanding, f"{name}: more than {outstanding} reads of "
                                                f"ID {i} in flight")
        if outstanding:
            props.cover(r_go & mine & get("rlast") & (head > 0), f"{name}_r: a burst of ID {i} "
                                                                 f"read")
        with m.If(props.live & get("rvalid") & mine):
            props.check(False, level > 0, f"{name}_r: a read response without its request")
            props.check(False, get("rlast") == (beat == head),
                        f"{name}_r: RLAST on the burst's last beat")


def _writes(props: Props, get, limits: tuple, name: str):
    """Writes: AW lengths queued in order (W follows AW order), the W beat count of the
    burst in progress, and per ID the bursts whose last W beat went (owed a B)."""
    m = props.m
    aw_go = get("awvalid") & get("awready")
    w_go = get("wvalid") & get("wready")
    id_bits = max(1, (len(limits) - 1).bit_length())
    push, pop, data, head, level = _fifo(m, sum(limits) + 1, 8 + id_bits, f"{name}_wq")
    beat = Signal(8, name=f"{name}_wbeat")
    m.d.comb += [push.eq(aw_go), data.eq(Cat(get("awlen"), get("awid")))]
    # the burst the W channel is on: the queue's head, or the address of this very cycle
    cur = Signal(8 + id_bits, name=f"{name}_wcur")
    m.d.comb += cur.eq(Mux(level == 0, Cat(get("awlen"), get("awid")), head))
    have = (level > 0) | aw_go
    m.d.comb += pop.eq(w_go & get("wlast"))
    with m.If(w_go):
        m.d.sync += beat.eq(Mux(get("wlast"), 0, beat + 1))
    with m.If(props.live & get("wvalid")):
        props.check(True, have, f"{name}_w: a W beat before its burst's address")
        props.check(True, get("wlast") == (beat == cur[:8]),
                    f"{name}_w: WLAST on the burst's last beat, and only there")
    props.cover(w_go & get("wlast") & (cur[:8] > 0), f"{name}_w: a burst of several beats")
    done_id = cur[8:]
    b_go = get("bvalid") & get("bready")
    for i, outstanding in enumerate(limits):
        owed = Signal(range(outstanding + 2), name=f"{name}_bowed{i}")
        flight = Signal(range(outstanding + 3), name=f"{name}_wflight{i}")
        inc = w_go & get("wlast") & (done_id == i)
        dec = b_go & (get("bid") == i)
        m.d.sync += [owed.eq(owed + inc - dec),
                     flight.eq(flight + (aw_go & (get("awid") == i)) - dec)]
        props.check(True, flight <= outstanding,
                    f"{name}: more than {outstanding} writes of ID {i} in flight")
        if outstanding:
            props.cover(b_go & (get("bid") == i), f"{name}_b: a burst of ID {i} written")
        with m.If(props.live & get("bvalid") & (get("bid") == i)):
            props.check(False, owed > 0, f"{name}_b: a write response before its last W beat")


def axil_slave_rules(props: Props, get, *, readable, writable, strobe_all, wait: int = 8,
                     name: str = "s_axil"):
    """The AXI4-Lite rules a slave keeps, asserted, and its master's, assumed: requests held
    until ready (assumed); one write and one read in flight at most, each answered once,
    within ``wait`` cycles of its request, the response held until ready; the code OKAY or
    SLVERR as the register map says: a read of an offset in ``readable`` and a write to one
    in ``writable`` answer OKAY, every other SLVERR, and a write to an offset in
    ``strobe_all`` without all four strobes SLVERR."""
    m = props.m
    props.hold(False, get("awvalid"), get("awready"), Cat(get("awaddr"), get("awprot")),
               f"{name}_aw")
    props.hold(False, get("wvalid"), get("wready"), Cat(get("wdata"), get("wstrb")),
               f"{name}_w")
    props.hold(False, get("arvalid"), get("arready"), Cat(get("araddr"), get("arprot")),
               f"{name}_ar")
    props.hold(True, get("bvalid"), get("bready"), get("bresp"), f"{name}_b")
    props.hold(True, get("rvalid"), get("rready"), Cat(get("rdata"), get("rresp")),
               f"{name}_r")
    word = lambda a: a[2:12]
    inside = lambda a, offs: Cat(Const(0, 1), *(word(a) == (o >> 2) for o in offs)).any()
    # writes: the address and strobes of the one in flight, its answer's code
    aw_go, w_go = get("awvalid") & get("awready"), get("wvalid") & get("wready")
    b_go = get("bvalid") & get("bready")
    have_aw, have_w = Signal(name=f"{name}_have_aw"), Signal(name=f"{name}_have_w")
    addr, strb = Signal(12, name=f"{name}_waddr"), Signal(4, name=f"{name}_wstrb")
    with m.If(aw_go):
        m.d.sync += [have_aw.eq(1), addr.eq(get("awaddr"))]
    with m.If(w_go):
        m.d.sync += [have_w.eq(1), strb.eq(get("wstrb"))]
    with m.If(b_go):
        m.d.sync += [have_aw.eq(0), have_w.eq(0)]
    with m.If(props.live):
        props.check(True, ~(aw_go & have_aw), f"{name}_aw: a second write taken in flight")
        props.check(True, ~(w_go & have_w), f"{name}_w: a second data word taken in flight")
    want = Mux(inside(addr, writable) & ~(inside(addr, strobe_all) & (strb != 0xF)),
                OKAY, SLVERR)
    with m.If(props.live & get("bvalid")):
        props.check(True, have_aw & have_w, f"{name}_b: a response without its write")
        props.check(True, get("bresp") == want, f"{name}_b: the register map's code")
    _answered(props, have_aw & have_w & ~get("bvalid"), wait, f"{name}_b")
    props.cover(b_go & (get("bresp") == SLVERR), f"{name}_b: a write refused")
    props.cover(b_go & (get("bresp") == OKAY), f"{name}_b: a write taken")
    # reads
    ar_go, r_go = get("arvalid") & get("arready"), get("rvalid") & get("rready")
    have_ar, raddr = Signal(name=f"{name}_have_ar"), Signal(12, name=f"{name}_raddr")
    with m.If(ar_go):
        m.d.sync += [have_ar.eq(1), raddr.eq(get("araddr"))]
    with m.Elif(r_go):
        m.d.sync += have_ar.eq(0)
    with m.If(props.live):
        props.check(True, ~(ar_go & have_ar), f"{name}_ar: a second read taken in flight")
    with m.If(props.live & get("rvalid")):
        props.check(True, have_ar, f"{name}_r: a response without its read")
        props.check(True, get("rresp") == Mux(inside(raddr, readable), OKAY, SLVERR),
                    f"{name}_r: the register map's code")
    _answered(props, have_ar & ~get("rvalid"), wait, f"{name}_r")
    props.cover(r_go & (get("rresp") == OKAY), f"{name}_r: a read")


def _answered(props: Props, waiting, wait: int, name: str):
    """A request taken whole is answered within ``wait`` cycles."""
    m = props.m
    n = Signal(range(wait + 2), name=f"{name}_waited")
    m.d.sync += n.eq(Mux(waiting, n + 1, 0))
    with m.If(props.live):
        props.check(True, n <= wait, f"{name}: no answer within {wait} cycles")
