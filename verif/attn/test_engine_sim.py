"""The attention engine, fast tier: commands in the Amaranth simulator against the golden
models (GEMM rows, hash words in the HCU's input format, refused commands)."""
import numpy as np
import pytest

from golden.numerics import hyperplanes
from rtl import AttentionEngine
from verif.lib.amaranth_sim import run_ports
from verif.lib.pauses import CROSSINGS
from verif.lib.scoreboard import compare
from vrex.config import Config
from vrex.rules import ParameterError

from .model import bad_command, empty_ports, gemm_command, hash_command, random_int8


def run(cfg, ports, want_gemm, want_hash, *, cross="none", seed=0):
    dut = AttentionEngine.from_config(cfg)
    sinks = {"o_gemm": len(want_gemm), "o_hash": len(want_hash)}
    got, when, perf = run_ports(dut, ports, sinks, cross=cross, seed=seed,
                                read={"error": dut.error, "error_code": dut.error_code},
                                max_cycles=400_000)
    compare(got["o_gemm"], want_gemm, what="gemm beat")
    compare(got["o_hash"], want_hash, what="hash beat")
    return got, when, perf


def small(n=4, **kw) -> Config:
    return Config(attn_n=n, attn_k_buf=64, attn_b_rows=32, n_hp=16, **kw)


@pytest.mark.parametrize("cross", CROSSINGS)
@pytest.mark.parametrize("n", [4, 8])
def test_gemm_commands(n, cross):
    """GEMMs of sizes that are not multiples of n, back to back, one of them k < n."""
    cfg = small(n)
    rng = np.random.default_rng(n + list(CROSSINGS).index(cross))
    ports, want = empty_ports(), []
    for m, k, l in ((2 * n + 1, 13, n + 3), (3, 2, 5), (n, 64, 32)):
        want += gemm_command(ports, random_int8(rng, (m, k)), random_int8(rng, (l, k)), n)
    _, _, perf = run(cfg, ports, want, [], cross=cross, seed=3)
    assert perf["commands"] == 3 and perf["refused"] == 0 and perf["error"] == 0


@pytest.mark.parametrize("cross", ["none", "both", "periodic"])
def test_hash_commands(cross):
    """Hash words with and without a centring bias, several steps, in the HCU's format."""
    cfg = small(4, n_layers=2)
    rng = np.random.default_rng(7)
    ports, want = empty_ports(), []
    hp = hyperplanes(1, 0, 0, 16, 40)
    for step, bias in ((1, None), (2, rng.integers(-3000, 3000, 16)), (3, np.zeros(16))):
        keys = random_int8(rng, (9 + step, 40))
        want += hash_command(ports, keys, hp, bias, 4, layer=step % 2, step=step)
    _, _, perf = run(cfg, ports, [], want, cross=cross, seed=5)
    assert perf["commands"] == 3 and perf["error"] == 0


def test_refused_commands_are_dropped_and_the_next_runs():
    cfg = small(4)
    rng = np.random.default_rng(2)
    ports, want = empty_ports(), []
    bad_command(ports, 0, 3, 0, 4, 4)            # k = 0
    bad_command(ports, 0, 2, 65, 4, 4)           # k > k_buf: its 17-beat rows are dropped
    bad_command(ports, 0, 2, 8, 33, 4)           # l > b_rows
    bad_command(ports, 3, 2, 8, 4, 4)            # unknown kind
    bad_command(ports, 1, 2, 8, 12, 4)           # a hash of 12 bits, not n_hp = 16
    want += gemm_command(ports, random_int8(rng, (5, 7)), random_int8(rng, (6, 7)), 4)
    _, _, perf = run(cfg, ports, want, [], cross="both")
    assert perf["refused"] == 5 and perf["commands"] == 6
    assert perf["error"] == 1 and perf["error_code"] == 3      # the last refusal's code


def test_command_cycles():
    """Every stream valid and every output ready: a command takes command_cycles."""
    cfg = small(4)
    dut = AttentionEngine.from_config(cfg)
    rng = np.random.default_rng(4)
    for m, k, l in ((8, 16, 8), (13, 20, 9), (4, 3, 4)):
        ports = empty_ports()
        want = gemm_command(ports, random_int8(rng, (m, k)), random_int8(rng, (l, k)), 4)
        _, when, perf = run(cfg, ports, want, [])
        assert when["o_gemm"][-1] == dut.command_cycles(m, k, l), (m, k, l)


@pytest.mark.parametrize("kw, msg", [
    (dict(k_buf=30), "k_buf must be a multiple of n (8), not 30"),
    (dict(b_rows=12), "b_rows must be a multiple of n (8), not 12"),
    (dict(k_buf=8192), "k_buf must be at most k_max (4096), not 8192"),
    (dict(n_hp=512), "n_hp must be at most b_rows (256), not 512"),
])
def test_engine_bad_parameters(kw, msg):
    with pytest.raises(ParameterError) as e:
        AttentionEngine(**{**Config().block_params("attn"), **kw})
    assert str(e.value) == msg
