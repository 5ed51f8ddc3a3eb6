"""Seeded random build configurations over the space the rules accept: each sampled
:class:`vrex.config.Config` either passes every rule (the Config's own checks, which run the
blocks' rules, and the core's ``core_rules``) or is counted as refused with the rule's message.
A sampled value is taken from a short list per field: the boundaries the rules name (1, the
smallest widths, a power of two at each end) and the defaults between them."""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from vrex.config import Config
from vrex.rules import ParameterError

__all__ = ["CHOICES", "Sample", "sample_configs"]

# Per field, the values a sample draws from; the head geometry is drawn as one choice
# (n_q_heads, n_kv_heads, head_dim) so that the heads divide
CHOICES = {
    "heads": [(9, 3, 64), (4, 1, 32), (8, 2, 16), (2, 2, 64), (1, 1, 8)],
    "n_layers": [1, 2, 3],
    "hash_scope": ["concat", "per_head"],
    "n_hp": [1, 8, 16, 32, 64],
    "window": [16, 64, 1024],
    "buckets": [1, 4, 16],
    "block_tokens": [1, 8, 16],
    "count_bits": [8, 16],
    "step_bits": [4, 16],
    "token_bits": [8, 16],
    "counter_bits": [8, 32],
    "weight_bits": [8, 16],
    "out_frac_bits": [0, 8],
    "hcu_lanes": [1, 4, 16],
    "hcu_contexts": [None, 1, 2],
    "wtu_lanes": [1, 4, 16],
    "wtu_row_entries": [16, 256, 4096],
    "wtu_pass_buckets": [1, 2, 4],
    "attn_n": [1, 2, 4, 8],
    "attn_k_buf": [64, 256],
    "attn_b_rows": [8, 64, 256],
    "attn_acc_bits": [32, 40],
    "kvmu_clusters": [1, 64, 1024],
    "kvmu_blocks": [16, 2048],
    "near_blocks": [16, 4096],
    "kvmu_bus_bytes": [8, 16],
    "kvmu_max_burst": [1, 16, 256],
    "kvmu_max_reads": [1, 2, 8],
    "kvmu_max_writes": [1, 2, 8],
    "kvmu_version_bits": [4, 16],
    "core_queue_depth": [1, 4],
    "core_dma_depth": [16, 64],
    "core_max_tokens": [16, 1024],
}


@dataclass
class Sample:
    """The accepted Configs and, per refusing rule's message, how many draws it refused."""
    configs: list = field(default_factory=list)
    refused: dict = field(default_factory=dict)


def _draw(rng: random.Random) -> dict:
    kw = {k: rng.choice(v) for k, v in CHOICES.items() if k != "heads"}
    kw["n_q_heads"], kw["n_kv_heads"], kw["head_dim"] = rng.choice(CHOICES["heads"])
    kw["th_hd"] = min(7, kw["n_hp"] + 1)            # the rule: at most n_hp + 1
    return kw


def sample_configs(seed: int, count: int, *, tries: int = 5000) -> Sample:
    """``count`` Configs the rules accept, drawn with ``seed`` (the same every run), and
    the refusals met on the way (at most ``tries`` draws)."""
    from rtl.core.core import core_rules
    rng = random.Random(seed)
    out = Sample()
    for _ in range(tries):
        if len(out.configs) == count:
            break
        kw = _draw(rng)
        try:
            cfg = Config(**kw)
            core_rules(cfg)
        except ParameterError as e:
            out.refused[str(e)] = out.refused.get(str(e), 0) + 1
            continue
        out.configs.append(cfg)
    return out
