"""The core's width converter (rtl/core/dma.py: Repack), fast tier: bus words split into the
array's words and gathered back, under every crossing, and its rate: a word a cycle on the
narrow side, no gap between wide words."""
import numpy as np
import pytest
from amaranth.hdl import Signal

from rtl.core.dma import Repack
from verif.lib.amaranth_sim import run_streams
from verif.lib.pauses import CROSSINGS

WIDTHS = [(16, 8), (16, 4), (32, 8), (8, 8), (8, 16), (4, 16)]


class _Clocked(Repack):
    """Repack with a clock domain even when it is a wire (equal widths), for the simulator."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        tick = Signal()
        m.d.sync += tick.eq(~tick)
        return m


def _expected(words, w_in: int, w_out: int) -> list[int]:
    """The same bytes, little end first, as words of ``w_out`` bytes."""
    data = b"".join(int(x).to_bytes(w_in, "little") for x in words)
    return [int.from_bytes(data[j:j + w_out], "little") for j in range(0, len(data), w_out)]


@pytest.mark.parametrize("cross", CROSSINGS)
@pytest.mark.parametrize("w_in, w_out", WIDTHS)
def test_repack_keeps_every_byte_in_order(w_in, w_out, cross):
    rng = np.random.default_rng(w_in * 64 + w_out)
    n_in = 48 * max(1, w_out // w_in)
    words = [int.from_bytes(rng.bytes(w_in), "little") for _ in range(n_in)]
    words[:2] = [0, (1 << 8 * w_in) - 1]                    # all-zero and all-one words
    want = _expected(words, w_in, w_out)
    got, _, _ = run_streams(_Clocked(w_in, w_out), words, len(want), cross=cross, seed=3)
    assert got == want


@pytest.mark.parametrize("w_in, w_out", WIDTHS)
def test_repack_moves_a_narrow_word_a_cycle(w_in, w_out):
    """Every stream valid and every output ready: a split gives an output word every cycle
    (the next bus word is taken as the last part leaves), a gather an output word every
    ``w_out / w_in`` cycles."""
    words = list(range(1, 1 + 32 * max(1, w_out // w_in)))
    want = _expected(words, w_in, w_out)
    _, when, _ = run_streams(_Clocked(w_in, w_out), words, len(want))
    gaps = set(np.diff(when).tolist())
    assert gaps == {max(1, w_out // w_in)}, gaps


def test_repack_widths_must_divide():
    with pytest.raises(ValueError, match="widths 12 and 8 bytes: one must divide the other"):
        Repack(12, 8)
