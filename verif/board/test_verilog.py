"""The board's design, Verilog tier: the core of the board's build with the on-chip memory
and the serial bridge (``rtl.board``), emitted, linted and run under cocotb + Verilator with
cocotbext-uart as the host's port and the host driver a board's host runs (verif/board/tb.py):
line faults, then the board's crop of the bundled trace bit-exact with the golden model. The
line runs at a quarter of the clock (the board's own rate is its Board's baud): a byte is 40
cycles, and a descriptor's buffers and output rows about 19 KB on the line. ``make test``
runs the crop's first three steps, four tokens of each, under ``tuned`` (its selections
start at the third step: 23 clusters); ``make soak`` the whole crop under both presets."""
import pytest

from verif.lib.runner import ROOT, failures, run_cocotb

DIVISOR, TIMEOUT = 4, 640


def board_point(preset="paper"):
    """The board's build and its design for the simulation: the line at DIVISOR cycles a
    bit, the bridge's timeout TIMEOUT cycles."""
    from rtl.board.top import board_system
    from vrex.boards import BOARDS, board_config
    board = BOARDS["ulx3s"]
    cfg = board_config(board, preset)
    return cfg, (lambda: board_system(cfg, board, divisor=DIVISOR, timeout=TIMEOUT))


def _run(env):
    cfg, make = board_point()
    build = ROOT / "build" / "sim" / "board" / "ulx3s"
    results = run_cocotb("board", cfg, test_module="verif.board.tb", build_dir=build,
                         make=make, make_key=f"ulx3s/{DIVISOR}/{TIMEOUT}",
                         extra_env={"VREX_DIVISOR": str(DIVISOR),
                                    "VREX_TIMEOUT": str(TIMEOUT), **env})
    if msg := failures(results, build):
        pytest.fail(msg, pytrace=False)


def test_board_ram_verilog():
    """The on-chip memory alone (4 KB, a 16-byte bus) under cocotbext-axi's master."""
    from rtl.board.ram import BoardRam
    from vrex.config import Config
    build = ROOT / "build" / "sim" / "board_ram" / "4k"
    results = run_cocotb("board_ram", Config(), test_module="verif.board.tb_ram",
                         build_dir=build, make_key="4k/16",
                         make=lambda: BoardRam(size=4096, bus_bytes=16, addr_bits=16))
    if msg := failures(results, build):
        pytest.fail(msg, pytrace=False)


def test_board_verilog():
    _run({"VREX_PRESETS": "tuned", "VREX_STEPS": "3", "VREX_TOKENS": "4"})


@pytest.mark.soak
def test_board_verilog_whole_crop():
    _run({"VREX_PRESETS": "paper,tuned"})
