"""The core's descriptor checks (golden/core.py): every refusal with its code, in order."""
import pytest

from golden.core import buffer_bytes, check_descriptor
from vrex.config import Config
from vrex.regmap import DESCRIPTOR, decode_descriptor, encode_descriptor

CFG = Config()
IO = dict(io_base=0x1000_0000, io_size=0x100_0000, bus_bytes=16)


def good(**changes):
    d = {f: 0 for _, f, _, _, _ in DESCRIPTOR}
    d.update(version=3, layer=1, step_len=76, step=2, beta_m=40000, beta_shift=9)
    base = IO["io_base"]
    for k, name in enumerate(("q_addr", "k_addr", "k_hash_addr", "v_addr", "hp_addr",
                              "o_addr")):
        d[name] = base + k * 0x10_0000
    d.update(changes)
    return decode_descriptor(encode_descriptor(**d))


@pytest.mark.parametrize("changes, last, want", [
    ({}, {1: 3}, "NONE"),
    ({"step_len": 0}, {}, "DESC_ZERO_LENGTH"),
    ({"layer": CFG.n_layers}, {}, "DESC_UNKNOWN_LAYER"),
    ({"v_addr": IO["io_base"] + 8}, {}, "DESC_MISALIGNED"),
    ({"q_addr": IO["io_base"] - 16}, {}, "DESC_OUT_OF_WINDOW"),
    ({"o_addr": IO["io_base"] + IO["io_size"] - 16}, {}, "DESC_OUT_OF_WINDOW"),
    ({"version": 2}, {1: 3}, "DESC_VERSION_BACKWARDS"),
    ({"sink_k_addr": 3}, {}, "NONE"),                    # no sinks: sink buffers unchecked
    ({"n_sink": 24, "sink_k_addr": IO["io_base"] + 8,
      "sink_v_addr": IO["io_base"]}, {}, "DESC_MISALIGNED"),
    ({"n_sink": 24, "sink_k_addr": IO["io_base"],
      "sink_v_addr": IO["io_base"] + IO["io_size"] - 3 * 24 * 64 + 16}, {},
     "DESC_OUT_OF_WINDOW"),
    ({"n_sink": 24, "sink_k_addr": IO["io_base"],
      "sink_v_addr": IO["io_base"] + IO["io_size"] - 3 * 24 * 64}, {}, "NONE"),
    ({"version": 2}, {0: 9}, "NONE"),                    # another layer's version
    ({"step_len": 0, "layer": 99, "version": 0}, {1: 3}, "DESC_ZERO_LENGTH"),   # first wins
])
def test_descriptor_checks(changes, last, want):
    name, code = check_descriptor(good(**changes), CFG, last_version=last, **IO)
    assert name == want and (code == 0) == (want == "NONE")


@pytest.mark.parametrize("step, last, step_bits, want", [
    (2, {1: 2}, 16, "NONE"),                     # the same step again (a text step's turn)
    (2, {1: 3}, 16, "DESC_BAD_STEP"),            # backwards
    (2, {0: 9}, 16, "NONE"),                     # another layer's step
    (15, {}, 4, "NONE"), (16, {}, 4, "DESC_BAD_STEP"),      # the build's step width
    (0xFFFF, {1: 0xFFFE}, 16, "NONE"),
])
def test_descriptor_step_checks(step, last, step_bits, want):
    import dataclasses
    cfg = dataclasses.replace(CFG, step_bits=step_bits)
    name, _ = check_descriptor(good(step=step), cfg, last_version={}, last_step=last, **IO)
    assert name == want


def test_a_bad_version_is_reported_before_a_bad_step():
    name, _ = check_descriptor(good(version=1, step=1), CFG, last_version={1: 3},
                               last_step={1: 3}, **IO)
    assert name == "DESC_VERSION_BACKWARDS"


def test_buffer_sizes():
    b = buffer_bytes(good(), CFG)
    assert b["q_addr"][1] == 9 * 76 * 64 and b["o_addr"][1] == 2 * 9 * 76 * 64
    assert b["hp_addr"][1] == CFG.hash_groups * CFG.n_hp * CFG.hash_dim
