"""Every build the rules accept emits lint-clean Verilog: builds drawn at random over the
rules' space (``verif.lib.configs``, seeded) emitted as the whole core (every block is inside
it) and linted, and the one-value edges of the space (a single write outstanding, one
context, one bucket, a 1x1 array, one cluster, one hash bit, a window of one lane's width)
emitted block by block. The suite draws a few builds; ``make soak`` many."""
import pytest

from rtl import BLOCKS
from verif.lib.configs import sample_configs
from vrex.config import Config
from vrex.emit import lint, write_verilog

SHORT, LONG = 3, 40

# a build at each one-value edge, and the blocks it shapes
EDGES = {
    "kvmu_one_write": (dict(kvmu_max_writes=1), ["kvmu"]),     # a depth-1 response FIFO
    "one_context": (dict(n_layers=1), ["hcu", "kvmu"]),         # one (layer, group)
    "wtu_one_bucket": (dict(buckets=1), ["wtu"]),
    "attn_n1": (dict(attn_n=1), ["attn", "attn_array"]),
    "one_cluster": (dict(kvmu_clusters=1), ["kvmu"]),
    "hcu_window_is_lanes": (dict(window=16, hcu_lanes=16), ["hcu"]),
    "one_hash_bit": (dict(n_hp=1, th_hd=2), ["attn", "hcu"]),
}


def _core_lints(cfg, out):
    lint(write_verilog(BLOCKS["core"].from_config(cfg), "core", out))


@pytest.mark.parametrize("k", range(SHORT))
def test_sampled_build_lints_clean(k, tmp_path):
    _core_lints(sample_configs(2026, SHORT).configs[k], tmp_path)


@pytest.mark.soak
@pytest.mark.parametrize("k", range(LONG))
def test_sampled_build_lints_clean_soak(k, tmp_path):
    _core_lints(sample_configs(1, LONG).configs[k], tmp_path)


@pytest.mark.parametrize("edge", EDGES)
def test_one_value_edge_lints_clean(edge, tmp_path):
    overrides, blocks = EDGES[edge]
    cfg = Config(**overrides)
    for name in blocks:
        lint(write_verilog(BLOCKS[name].from_config(cfg), name, tmp_path))


def test_the_sample_is_seeded_and_counts_its_refusals():
    a, b = sample_configs(5, 6), sample_configs(5, 6)
    assert len(a.configs) == 6 and a.configs == b.configs
    assert a.refused and all(n > 0 for n in a.refused.values())
    assert sample_configs(6, 6).configs != a.configs
