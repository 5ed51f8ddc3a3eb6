"""The board's build, without a simulator: the PLL's dividers, the board's Config and its
parameter checks, the crop of the bundled trace laid out in the board's memory a descriptor
at a time, the board top under the board's platform (its pins and clock constraints)."""
import pytest

from golden.layout import board_trace
from rtl.board.top import pll_dividers
from vrex.boards import BOARDS, board_config
from vrex.rules import ParameterError


@pytest.mark.parametrize("fin, fout", [(25, 100), (25, 50), (25, 75), (12, 48)])
def test_pll_dividers(fin, fout):
    d = pll_dividers(fin, fout)
    assert fin * d["CLKFB_DIV"] / d["CLKI_DIV"] == fout
    assert 400 <= fout * d["CLKOP_DIV"] <= 800


def test_pll_refuses_what_it_cannot_make():
    with pytest.raises(ParameterError, match="no ECP5 PLL setting"):
        pll_dividers(25, 1000)


def test_bad_board_parameters_fail_at_construction():
    from rtl.board.bridge import SerialBridge
    from rtl.board.ram import BoardRam
    from rtl.board.uart import UartRx
    with pytest.raises(ParameterError, match="divisor"):
        UartRx(3)
    with pytest.raises(ParameterError, match="multiple of bus_bytes"):
        BoardRam(size=100, bus_bytes=16, addr_bits=16)
    with pytest.raises(ParameterError, match="fit the 8-bit address"):
        BoardRam(size=4096, bus_bytes=16, addr_bits=8)
    with pytest.raises(ParameterError, match="timeout"):
        SerialBridge(mem_size=4096, addr_bits=16, timeout=1)


@pytest.mark.parametrize("preset", ["paper", "tuned"])
def test_the_crop_fits_the_board(bundled, preset):
    """The crop under each preset: every area of the memory map and every descriptor's
    buffers inside the board's memory, the KV areas apart from the I/O window, the KVMU's
    tables holding the crop's clusters and blocks, and its heads selecting clusters (the
    stream exercises prediction, not only attention)."""
    from golden.trace import quantise
    from golden.layout import compact_layout, plan_stream
    board = BOARDS["ulx3s"]
    cfg = board_config(board, preset)
    crop = board_trace(bundled, board)
    lay = compact_layout(cfg, far_slots=board.far_slots)
    plan = plan_stream(crop, quantise(crop), cfg, layout=lay, per_descriptor=True,
                       fill_o=False)
    assert plan.io_base >= lay["end"] and plan.io_base + plan.io_size <= board.mem_bytes
    for image in [plan.image, *plan.desc_images]:
        for addr, raw in image.items():
            assert plan.io_base <= addr and addr + len(raw) <= plan.io_base + plan.io_size
    for d in plan.descriptors:
        end = d["o_addr"] + cfg.n_q_heads * d["step_len"] * cfg.head_dim * 2
        assert end <= plan.io_base + plan.io_size
    opened = max(int(g.clusters.max()) + 1 for g in plan.golden if g.clusters.size)
    assert opened <= cfg.kvmu_clusters
    # every token stored: the near ring moves its oldest block (sealed, partly filled) to
    # the far tier, which must hold every move (golden.kvmu.KvMemory at the board's sizes)
    from golden.kvmu import KvGeometry, KvMemory
    mem = KvMemory(KvGeometry(block_tokens=cfg.block_tokens, head_dim=cfg.head_dim,
                              heads_per_group=cfg.heads_per_group, near_blocks=cfg.near_blocks,
                              far_blocks=board.far_slots, max_blocks=cfg.kvmu_blocks))
    for g in plan.golden:
        for grp in range(g.clusters.shape[0]):
            for t, c in enumerate(g.clusters[grp].tolist()):
                assert mem.store(g.step, g.layer, grp, g.token0 + t, c)[0] is not None, \
                    f"step {g.step} layer {g.layer}: the KV tiers are full"
    assert sum(len(h.selected) for g in plan.golden for h in g.heads) > 0
    assert max(h.attended for g in plan.golden for h in g.heads) <= cfg.attn_b_rows


@pytest.mark.soak
def test_board_top_under_the_platform(tmp_path):
    """The board top elaborates on amaranth-boards' ULX3S 85F platform: the UART's and the
    LEDs' pins and the oscillator's clock in the constraints, the PLL and the global reset
    in the design (make soak; make fpga builds it whole)."""
    from synth.fpga import prepare
    prepare("ulx3s", "paper", tmp_path)
    lpf = (tmp_path / "ulx3s.lpf").read_text()
    for pin in ("G2", "M1", "L4", "B2", "H3"):
        assert f'SITE "{pin}"' in lpf
    assert "FREQUENCY PORT" in lpf and "25000000" in lpf
    il = (tmp_path / "ulx3s.il").read_text()
    assert "EHXPLLL" in il and "DCCA" in il
