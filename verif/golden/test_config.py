import json

import pytest

from rtl import BLOCKS
from vrex.config import PRESETS, SECTIONS, Config, ConfigError, unsigned_fixed
from vrex.rules import ParameterError


def test_presets_carry_d1():
    p, t = Config.from_preset("paper"), Config.from_preset("tuned")
    assert (p.hash_input, p.centre, p.th_hd, p.max_age) == ("post_rope", False, 7, None)
    assert (t.hash_input, t.centre, t.th_hd, t.max_age) == ("pre_rope", True, 9, 8)
    assert p.preset == "paper" and t.preset == "tuned"
    assert Config() == p                    # the defaults are the paper preset


def test_derived_values():
    c = Config(n_kv_heads=8, n_q_heads=32, head_dim=128)
    assert c.group_size == 4
    assert c.hash_dim == 1024 and c.hash_groups == 1
    assert c.replace(hash_scope="per_head").hash_dim == 128
    assert c.th_r_fixed == round(0.3 * 65536)
    assert c.weight_one == 32768
    assert c.hcu_window_bytes == 4096        # the paper's 4 KB cluster-hash memory
    assert c.n_hp / 8 / c.hash_dim <= 0.005  # 32 bits is <= 0.5% of the key (D1)


def test_json_round_trip():
    for name in PRESETS:
        c = Config.from_preset(name, th_r=0.25, n_sink=4)
        assert Config.from_json(c.to_json()) == c
        assert json.loads(c.to_json())["resv"]["preset"] == name


def test_replace_marks_custom():
    c = Config.from_preset("tuned")
    assert c.replace(th_r=0.5).preset == "tuned"        # not a hash field of the preset
    assert c.replace(th_hd=5).preset == "custom"


def test_frozen():
    with pytest.raises(Exception):
        Config().th_r = 0.5


@pytest.mark.parametrize("kw, msg", [
    (dict(n_layers=0), "n_layers must be a positive integer, not 0"),
    (dict(head_dim=-3), "head_dim must be a positive integer, not -3"),
    (dict(n_q_heads=10, n_kv_heads=3), "n_q_heads must be a multiple of n_kv_heads (3), not 10"),
    (dict(th_hd=40), "th_hd must be an integer from 0 to n_hp + 1 (33), not 40"),
    (dict(max_age=-1), "max_age must be None (unlimited) or a non-negative integer, not -1"),
    (dict(th_r=1.5), "th_r must be a number from 0 to 1, not 1.5"),
    (dict(buckets=12), "buckets must be a positive power of two, not 12"),
    (dict(n_sink=-2), "n_sink must be None (all of step 0) or a non-negative integer, not -2"),
    (dict(hash_input="rope"), "hash_input must be one of 'post_rope', 'pre_rope', not 'rope'"),
    (dict(wicsum="sorted"), "wicsum must be one of 'exact', 'bucket', not 'sorted'"),
    (dict(timing="early"), "timing must be one of 'same_layer', 'prev_layer', not 'early'"),
    (dict(centre=1), "centre must be True or False, not 1"),
    (dict(hcu_lanes=12), "hcu_lanes must be a positive power of two, not 12"),
    (dict(window=1000), "window must be a positive power of two, not 1000"),
    (dict(window=48, hcu_lanes=16), "window must be a positive power of two, not 48"),
    (dict(window=8), "window must be at least hcu_lanes (16), not 8"),
    (dict(n_hp=0), "n_hp must be a positive integer, not 0"),
    (dict(n_hp=65), "n_hp must be at most 64, not 65"),
    (dict(wtu_lanes=12), "wtu_lanes must be a positive power of two, not 12"),
    (dict(wtu_row_entries=100), "wtu_row_entries must be a multiple of wtu_lanes (16), not 100"),
    (dict(wtu_pass_buckets=6), "wtu_pass_buckets must be a positive power of two, not 6"),
    (dict(cluster_id_bits=10), "cluster_id_bits must exceed log2(window) (10), not 10"),
    (dict(hcu_contexts=4), "hcu_contexts must be None (one per layer and hash group) or an "
                           "integer from 1 to n_layers · hash_groups (3), not 4"),
    (dict(counter_bits=0), "counter_bits must be a positive integer, not 0"),
    (dict(preset="fast"), "preset must be one of 'paper', 'tuned', 'custom', not 'fast'"),
])
def test_bad_fields(kw, msg):
    with pytest.raises(ConfigError) as e:
        Config(**kw)
    assert str(e.value) == msg


def test_bad_preset_and_unknown_field():
    with pytest.raises(ConfigError, match="preset must be one of 'paper', 'tuned', not 'x'"):
        Config.from_preset("x")
    with pytest.raises(ConfigError, match="unknown configuration field.*: lanes"):
        Config.from_dict({"lanes": 4})


def test_sections_cover_every_field_once():
    from dataclasses import fields
    named = [f for sec in SECTIONS.values() for f in sec]
    assert sorted(named) == sorted(f.name for f in fields(Config))
    d = Config().to_dict()
    assert set(d) == set(SECTIONS) and d["hcu"] == {"hcu_lanes": 16, "hcu_contexts": None}


def test_flat_and_nested_json():
    c = Config.from_preset("tuned", wtu_lanes=8)
    flat = {k: v for sec in c.to_dict().values() for k, v in sec.items()}
    assert Config.from_dict(flat) == Config.from_dict(c.to_dict()) == c
    with pytest.raises(ConfigError, match="unknown configuration field.* in hcu: lanes"):
        Config.from_dict({"hcu": {"lanes": 4}})


@pytest.mark.parametrize("x, frac, want", [
    (0.3, 16, 19661), (0.5, 1, 1), (0.25, 1, 1), (0.75, 1, 2), (1.0, 16, 65536), (0.0, 8, 0),
    (2.5 / 256, 8, 3), (3.5 / 256, 8, 4)])           # halves round up, never to even
def test_unsigned_fixed_rounds_half_up(x, frac, want):
    assert unsigned_fixed(x, frac) == want


def test_th_r_register_is_the_one_rounding():
    for th in (0.0, 0.1, 0.3, 0.5, 0.95, 1.0):
        c = Config(th_r=th)
        assert c.th_r_fixed == unsigned_fixed(th, c.th_r_frac_bits)
        assert c.block_registers("wtu") == {"th_r": c.th_r_fixed}


def test_registers_from_presets():
    assert Config.from_preset("paper").block_registers("hcu") == dict(
        th_hd=7, max_age=0, age_limit=0, cluster_cap=0)
    assert Config.from_preset("tuned", cluster_cap=8).block_registers("hcu") == dict(
        th_hd=9, max_age=8, age_limit=1, cluster_cap=8)


@pytest.mark.parametrize("cap, ok", [(None, True), (1, True), (65535, True), (0, False),
                                     (65536, False), (True, False), (2.0, False)])
def test_cluster_cap_values(cap, ok):
    """1 to 2**16 - 1 (the core's register field), within the count width; None: no cap."""
    if ok:
        assert Config(cluster_cap=cap).cluster_cap == cap
    else:
        with pytest.raises(ConfigError, match="cluster_cap must be None \\(no cap\\) or an "
                                              "integer from 1 to 65535"):
            Config(cluster_cap=cap)
    with pytest.raises(ConfigError, match="integer from 1 to 15, not 16"):
        Config(count_bits=4, cluster_cap=16)


@pytest.mark.parametrize("block", BLOCKS)
def test_every_block_builds_from_the_config(block):
    # one HCU context for two layers (the core moves the windows through memory)
    cfg = Config(n_layers=2, hcu_contexts=1, wtu_row_entries=256)
    b = BLOCKS[block].from_config(cfg)
    assert set(cfg.block_registers(block)) <= {n for n, *_ in b.signature.members.flatten()
                                               } | set(b.signature.members)
    with pytest.raises(ConfigError, match="no block named 'nope'"):
        cfg.block_params("nope")


def test_config_errors_are_parameter_errors():
    with pytest.raises(ParameterError):
        Config(hcu_lanes=3)


def test_core_refuses_a_build_it_cannot_run():
    from rtl import VrexCore
    with pytest.raises(ParameterError, match="head_dim .* must be a multiple of kvmu_bus_bytes"):
        VrexCore(Config(n_layers=1, head_dim=8))
