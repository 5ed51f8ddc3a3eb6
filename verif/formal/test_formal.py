"""make test's share of the formal proofs (``make formal`` runs them deeper, with covers and
k-induction): every block's bounded proof at its quick depth, and the rules themselves shown
to fail on parts that break them, each with the property it names."""
import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import Out

from rtl.kvmu.axi import axi4_master_members

from .__main__ import run_job
from .harness import harness
from .plan import TARGETS, formal_config
from .sby import prove

QUICK = [t for t in TARGETS if t.quick]


@pytest.mark.parametrize("target", QUICK, ids=[t.block for t in QUICK])
def test_bounded_proof(target):
    r = run_job((target.block, "bmc", target.quick, target.script))
    assert r["status"] == "PASS", f"{target.block}: {r['status']}\n{r['detail']}"
    assert r["asserts"] > 0


@pytest.mark.parametrize("bus", [8, 16])
@pytest.mark.parametrize("mover", ["dma_reader", "image_writer"])
def test_movers_bursts_stay_in_their_page_at_every_bus_width(mover, bus):
    """The bus movers' bursts (``rtl.kvmu.axi.burst_beats``, which the KVMU shares) against
    the AXI rules at both bus widths, from any aligned job address: a 4 KB cut one beat late
    fails here, naming the page rule."""
    from .plan import PARTS
    cfg = formal_config(kvmu_bus_bytes=bus, head_dim=16)
    h = harness(mover, cfg, dut=PARTS[mover](cfg))
    r = prove(f"{mover}_bus{bus}", h.top, h.ports, depth=8)
    assert r.status == "PASS", r.detail


class _Source(wiring.Component):
    """A stream source counting up; ``bug``: it withdraws a beat the sink did not take
    after one cycle of waiting."""

    def __init__(self, bug: bool):
        self._bug = bug
        super().__init__({"o": Out(stream.Signature(8))})

    def elaborate(self, platform):
        m = Module()
        n, waited = Signal(8), Signal()
        m.d.comb += [self.o.payload.eq(n), self.o.valid.eq(~(waited & self._bug))]
        m.d.sync += waited.eq(self.o.valid & ~self.o.ready)
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += n.eq(n + 1)
        return m


@pytest.mark.parametrize("bug", [False, True])
def test_stream_rule_catches_a_withdrawn_beat(bug):
    h = harness("toy", formal_config(), dut=_Source(bug))
    r = prove(f"toy_stream_{int(bug)}", h.top, h.ports, depth=6)
    if bug:
        assert r.status == "FAIL" and "o: valid dropped before ready" in r.detail, r.detail
    else:
        assert r.status == "PASS", r.detail


class _Writer(wiring.Component):
    """Writes two-beat bursts to 0x100 over and over; ``bug`` names what it gets wrong."""

    def __init__(self, bug: str | None):
        self._bug = bug
        super().__init__(axi4_master_members("m_axi", 16, 64))

    def elaborate(self, platform):
        m = Module()
        s = lambda n: getattr(self, f"m_axi_{n}")
        phase, beat = Signal(2), Signal()
        m.d.comb += [getattr(self, n).eq(0) for n, mem in self.signature.members.items()
                     if mem.flow == Out]
        addr = 0xFF8 if self._bug == "4k" else 0x100
        m.d.comb += [s("awaddr").eq(addr), s("awlen").eq(1), s("awsize").eq(3),
                     s("awburst").eq(1), s("awvalid").eq(phase == 0),
                     s("wdata").eq(beat), s("wstrb").eq(0xFF), s("wvalid").eq(phase == 1),
                     s("wlast").eq(~beat if self._bug == "wlast" else beat),
                     s("bready").eq(1), s("rready").eq(1), s("arsize").eq(3),
                     s("arburst").eq(1)]
        with m.If((phase == 0) & s("awready")):
            m.d.sync += phase.eq(1)
        with m.If((phase == 1) & s("wready")):
            m.d.sync += beat.eq(~beat)
            with m.If(beat):
                m.d.sync += phase.eq(2)
        with m.If((phase == 2) & s("bvalid")):
            m.d.sync += phase.eq(0)
        if self._bug == "flight":
            # the next burst's address before the last one's response
            with m.If((phase == 1) & s("wready") & beat):
                m.d.sync += phase.eq(0)
        return m


@pytest.mark.parametrize("bug, message", [
    (None, None), ("wlast", "m_axi_w: WLAST on the burst's last beat, and only there"),
    ("4k", "m_axi_aw: the burst stays inside its 4 KB page"),
    ("flight", "m_axi: more than 2 writes of ID 0 in flight")])
def test_axi_rules_catch_a_broken_master(bug, message):
    h = harness("kvmu", formal_config(), dut=_Writer(bug))
    r = prove(f"toy_axi_{bug}", h.top, h.ports, depth=14)
    if bug:
        assert r.status == "FAIL" and message in r.detail, r.detail
    else:
        assert r.status == "PASS", r.detail


def test_axil_rules_catch_a_slave_answering_okay_to_everything(monkeypatch):
    """The register file with its SLVERR turned into OKAY fails the register map's codes."""
    import rtl.core.regs
    from rtl import BLOCKS
    monkeypatch.setattr(rtl.core.regs, "_SLVERR", 0)
    cfg = formal_config()
    h = harness("core_regs", cfg, dut=BLOCKS["core_regs"].from_config(cfg))
    r = prove("toy_axil_lax", h.top, h.ports, depth=6)
    assert r.status == "FAIL" and "the register map's code" in r.detail, r.detail
