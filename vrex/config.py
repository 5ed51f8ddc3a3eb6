"""One frozen configuration object for a V-Rex build.

The same :class:`Config` feeds the golden model, the RTL generators, the testbenches and the
reports. It holds the model geometry, the ReSV hyperparameters with every option that
``docs/design.md`` (D1-D12) leaves open, the integer formats of the hardware-exact mode
(``docs/numerics.md``), and the hardware sizes. Every field is checked at construction; the
message names the field and the bad value. Derived values are properties, computed once here.

Two named presets fix the hash choice of D1: ``paper`` (post-RoPE keys, raw, Th_hd = 7, no age
limit) and ``tuned`` (pre-RoPE keys centred on the running mean, Th_hd = 9, age limit 8 steps).

The fields fall into named sections (:data:`SECTIONS`: geometry, resv, formats, kv_layout, hcu,
wtu); the JSON form nests them so that a report says which build it measured section by
section. A block's parameters and run-time register values come from here
(:meth:`Config.block_params`, :meth:`Config.block_registers`), and the configuration refuses
what a block refuses, through the block's rules in :mod:`vrex.rules`, with the same message
under the configuration's field name.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, fields

from . import rules

__all__ = ["Config", "ConfigError", "PRESETS", "SECTIONS", "ctx_image_bytes", "unsigned_fixed"]



def ctx_image_bytes(window: int, word_bytes: int, bus_bytes: int) -> int:
    """Bytes of one saved cluster window: its header and ``window`` entries, a context word
    of ``word_bytes`` each, in whole words of the bus (or of a context word, if wider)."""
    step = max(word_bytes, bus_bytes)
    return -(-(1 + window) * word_bytes // step) * step

class ConfigError(rules.ParameterError):
    """A configuration field holds a value that no build accepts."""


def unsigned_fixed(x: float, frac_bits: int) -> int:
    """``x`` as an unsigned fixed-point register value with ``frac_bits`` fractional bits,
    rounded to nearest, halves up: ``floor(x · 2**frac_bits + 0.5)``. The one rounding rule
    from a real-valued setting (Th_r, the exp unit's β) to a register."""
    return int(math.floor(x * (1 << frac_bits) + 0.5))


_CHOICES = {
    "hash_input": ("post_rope", "pre_rope"),   # D1: which keys are hashed
    "hash_scope": ("concat", "per_head"),      # D1: one hash over all KV heads, or one per head
    "weight_mode": ("exp", "relu"),            # D7: exp((s - max)·α), or raw scores clipped at 0
    "wicsum": ("exact", "bucket"),             # D8: sorted WiCSum, or the WTU's bucketed walk
    "scope": ("kv_head", "layer"),             # D9: one union per KV head, or one per layer
    "timing": ("same_layer", "prev_layer"),    # D11: own selection, or the previous layer's
    # docs/design.md: score before the step's own tokens join the HC table, or after (the
    # representative keys include them; past counts still weight the scores); the core runs
    # either (its sequencer's order)
    "order": ("select_first", "cluster_first"),
    "numerics": ("float", "int"),              # float reference, or the hardware-exact mode
}


def _is_pow2(x: int) -> bool:
    return isinstance(x, int) and x > 0 and (x & (x - 1)) == 0


@dataclass(frozen=True)
class Config:
    """A complete, validated description of one build and one ReSV setting.

    Geometry
        ``n_layers`` layers, ``n_q_heads`` query heads sharing ``n_kv_heads`` KV heads (GQA),
        ``head_dim`` values per head.
    ReSV (docs/design.md)
        ``n_hp`` hash bits; ``th_hd`` Hamming join threshold (join if distance < th_hd);
        ``window`` W most recently opened clusters compared; ``max_age`` A in steps (``None`` =
        unlimited); ``th_r`` WiCSum ratio; ``buckets`` B of the bucketed walk; ``n_sink`` pinned
        prompt tokens (``None`` = all of step 0); ``hash_input``, ``centre``, ``hash_scope``,
        ``weight_mode``, ``wicsum``, ``scope``, ``timing`` the options of D1, D7, D8, D9, D11;
        ``order`` scoring before or after the step's own tokens join the HC table (§2; the
        core's sequencer runs the heads or the hash groups first);
        ``cluster_cap`` a token whose nearest cluster already has that many members opens
        a cluster instead (``None``: no cap; the HCU's ``cluster_cap`` register);
        ``dense_layers`` the model's first that many layers are dense (D14: no prediction,
        every past token attended; the host sets the descriptor's ``dense`` flag for them);
        ``numerics`` float reference or hardware-exact integers; ``hp_seed`` the hyperplane seed.
    Integer formats (docs/numerics.md)
        ``exp_frac_bits`` fractional bits of the exponent fed to the exp table (table size
        2**exp_frac_bits); ``weight_bits`` width of an unsigned weight, 1.0 = 2**(weight_bits-1);
        ``th_r_frac_bits`` fractional bits of the Th_r register; ``count_bits`` width of a
        cluster member count; ``out_frac_bits`` fractional bits of the attention output;
        ``step_bits`` width of a step number (cluster ages are taken modulo 2**step_bits);
        ``token_bits`` width of a token index within a step; ``cluster_id_bits`` width of a
        cluster id; ``counter_bits`` width of every performance counter.
    KV layout (D12)
        ``block_tokens`` tokens per block per KV head; ``near_blocks`` near-tier capacity in
        blocks (all layers and heads together).
    HCU
        ``hcu_lanes`` XOR-popcount lanes; ``hcu_contexts`` cluster windows held on chip
        (``None`` = one per layer and hash group; fewer: the core saves and restores them
        through memory at ``CTX_BASE``).
    WTU
        ``wtu_lanes`` lanes; ``wtu_row_entries`` on-chip score-memory depth in entries;
        ``wtu_pass_buckets`` buckets the walk sums in one pass over a row (a power of two;
        the block gets ``min(wtu_pass_buckets, buckets)``).
    Attention engine
        ``attn_n`` cells per side of the systolic array (and lanes of its exp unit);
        ``attn_k_max`` the longest reduction its accumulators hold; ``attn_acc_bits``
        accumulator (and GEMM output) width; ``attn_k_buf`` the longest operand row its
        buffers hold; ``attn_b_rows`` the rows of the B operand held (hyperplanes, keys).
    KV memory manager (docs/kvmu.md)
        ``kvmu_clusters`` cluster-table entries per layer and hash group (cluster ids below
        it); ``kvmu_blocks`` block-table entries (logical blocks of a stream); ``kvmu_bus_bytes``
        the AXI4 data width in bytes (8 or 16); ``kvmu_max_burst`` beats of the longest burst;
        ``kvmu_max_reads``, ``kvmu_max_writes`` bursts outstanding; ``kvmu_addr_bits`` the
        AXI address width; ``kvmu_token_bits`` width of a stream token index;
        ``kvmu_version_bits`` width of a command version.
    Core
        ``core_queue_depth`` descriptors the host can queue; ``core_dma_depth`` beats the
        read DMA buffers (a burst is issued only with room for it); ``core_max_tokens`` the
        longest step (the HCU's assignments of a step wait in a buffer of this many).
    """

    # geometry
    n_layers: int = 3
    n_q_heads: int = 9
    n_kv_heads: int = 3
    head_dim: int = 64
    # ReSV
    preset: str = "paper"
    n_hp: int = 32
    th_hd: int = 7
    window: int = 1024
    max_age: int | None = None
    th_r: float = 0.3
    buckets: int = 16
    n_sink: int | None = None
    hash_input: str = "post_rope"
    centre: bool = False
    hash_scope: str = "concat"
    weight_mode: str = "exp"
    wicsum: str = "bucket"
    scope: str = "kv_head"
    timing: str = "same_layer"
    order: str = "cluster_first"
    cluster_cap: int | None = None
    dense_layers: int = 0
    numerics: str = "int"
    hp_seed: int = 0x5EED
    # integer formats
    exp_frac_bits: int = 8
    weight_bits: int = 16
    th_r_frac_bits: int = 16
    count_bits: int = 16
    out_frac_bits: int = 8
    step_bits: int = 16
    token_bits: int = 16
    cluster_id_bits: int = 32
    counter_bits: int = 32
    # KV layout
    block_tokens: int = 16
    near_blocks: int = 4096
    # HCU
    hcu_lanes: int = 16
    hcu_contexts: int | None = None
    # WTU
    wtu_lanes: int = 16
    wtu_row_entries: int = 4096
    wtu_pass_buckets: int = 4
    # attention engine
    attn_n: int = 8
    attn_k_max: int = 4096
    attn_acc_bits: int = 32
    attn_k_buf: int = 256
    attn_b_rows: int = 256
    # KV memory manager
    kvmu_clusters: int = 1024
    kvmu_blocks: int = 2048
    kvmu_bus_bytes: int = 16
    kvmu_max_burst: int = 256
    kvmu_max_reads: int = 8
    kvmu_max_writes: int = 8
    kvmu_addr_bits: int = 40
    kvmu_token_bits: int = 20
    kvmu_version_bits: int = 16
    # core
    core_queue_depth: int = 4
    core_dma_depth: int = 64
    core_max_tokens: int = 1024

    def __post_init__(self):
        def need(cond, name, what):
            if not cond:
                raise ConfigError(f"{name} must be {what}, not {getattr(self, name)!r}")

        try:
            rules.positive_int("n_hp", self.n_hp)
            if self.n_hp > 64:
                raise ConfigError(f"n_hp must be at most 64, not {self.n_hp!r}")
        except rules.ParameterError as e:
            raise ConfigError(str(e)) from None
        for name in ("n_layers", "n_q_heads", "n_kv_heads", "head_dim", "window",
                     "block_tokens", "near_blocks", "wtu_row_entries"):
            v = getattr(self, name)
            need(isinstance(v, int) and not isinstance(v, bool) and v > 0, name,
                 "a positive integer")
        if self.n_q_heads % self.n_kv_heads:
            raise ConfigError(f"n_q_heads must be a multiple of n_kv_heads ({self.n_kv_heads}), "
                              f"not {self.n_q_heads!r}")
        need(isinstance(self.th_hd, int) and 0 <= self.th_hd <= self.n_hp + 1, "th_hd",
             f"an integer from 0 to n_hp + 1 ({self.n_hp + 1})")
        need(self.max_age is None or (isinstance(self.max_age, int) and self.max_age >= 0),
             "max_age", "None (unlimited) or a non-negative integer")
        need(isinstance(self.th_r, (int, float)) and 0.0 <= self.th_r <= 1.0
             and not isinstance(self.th_r, bool), "th_r", "a number from 0 to 1")
        need(_is_pow2(self.buckets), "buckets", "a positive power of two")
        need(self.n_sink is None or (isinstance(self.n_sink, int) and self.n_sink >= 0),
             "n_sink", "None (all of step 0) or a non-negative integer")
        for name, choices in _CHOICES.items():
            need(getattr(self, name) in choices, name, "one of " + ", ".join(map(repr, choices)))
        need(isinstance(self.centre, bool), "centre", "True or False")
        need(self.preset in PRESETS or self.preset == "custom", "preset",
             "one of " + ", ".join(map(repr, [*PRESETS, "custom"])))
        need(isinstance(self.hp_seed, int) and 0 <= self.hp_seed < 2**64, "hp_seed",
             "an integer from 0 to 2**64 - 1")
        need(isinstance(self.exp_frac_bits, int) and 1 <= self.exp_frac_bits <= 12,
             "exp_frac_bits", "an integer from 1 to 12")
        need(isinstance(self.weight_bits, int) and 4 <= self.weight_bits <= 24, "weight_bits",
             "an integer from 4 to 24")
        need(isinstance(self.th_r_frac_bits, int) and 4 <= self.th_r_frac_bits <= 24,
             "th_r_frac_bits", "an integer from 4 to 24")
        need(isinstance(self.count_bits, int) and 1 <= self.count_bits <= 32, "count_bits",
             "an integer from 1 to 32")
        # (the core's register field holds 16 bits)
        cap_max = (1 << min(self.count_bits, 16)) - 1
        need(self.cluster_cap is None or (isinstance(self.cluster_cap, int) and not isinstance(
            self.cluster_cap, bool) and 1 <= self.cluster_cap <= cap_max),
             "cluster_cap", f"None (no cap) or an integer from 1 to {cap_max}")
        need(isinstance(self.dense_layers, int) and not isinstance(self.dense_layers, bool)
             and self.dense_layers >= 0, "dense_layers",
             "a count of the model's first layers, 0 or more")
        windows = self.n_layers * self.hash_groups
        need(self.hcu_contexts is None or (isinstance(self.hcu_contexts, int)
                                           and 0 < self.hcu_contexts <= windows),
             "hcu_contexts", f"None (one per layer and hash group) or an integer from 1 to "
             f"n_layers · hash_groups ({windows})")
        need(isinstance(self.out_frac_bits, int) and 0 <= self.out_frac_bits <= 16,
             "out_frac_bits", "an integer from 0 to 16")
        # what the blocks refuse, refused here with the blocks' own rules and messages
        try:
            rules.hcu_rules(**self.block_params("hcu"), names=_HCU_NAMES)
            rules.wtu_rules(**self.block_params("wtu"), names=_WTU_NAMES)
            rules.array_rules(**self.block_params("attn_array"), names=_ARRAY_NAMES)
            rules.exp_rules(**self.block_params("attn_exp"), names=_EXP_NAMES)
            rules.engine_rules(**self.block_params("attn"), names=_ENGINE_NAMES)
            kv = self.block_params("kvmu")
            del kv["id_bits"]
            rules.kvmu_rules(**kv, names=_KVMU_NAMES)
        except rules.ParameterError as e:
            raise ConfigError(str(e)) from None

    # --- derived values -------------------------------------------------------------------
    @property
    def group_size(self) -> int:
        """Query heads per KV head (GQA)."""
        return self.n_q_heads // self.n_kv_heads

    @property
    def hash_dim(self) -> int:
        """Values one hash projects: all KV heads concatenated (D1) or one head."""
        return self.n_kv_heads * self.head_dim if self.hash_scope == "concat" else self.head_dim

    @property
    def hash_groups(self) -> int:
        """Independent HC tables per layer: one (concat) or one per KV head."""
        return 1 if self.hash_scope == "concat" else self.n_kv_heads

    @property
    def th_r_fixed(self) -> int:
        """Th_r as the unsigned register value (:func:`unsigned_fixed`)."""
        return unsigned_fixed(self.th_r, self.th_r_frac_bits)

    @property
    def contexts(self) -> int:
        """Cluster windows (one per layer and hash group) the HCU holds on chip; the core
        moves the others through memory (``ctx_image_bytes`` each)."""
        return self.windows if self.hcu_contexts is None else self.hcu_contexts

    @property
    def windows(self) -> int:
        """Cluster windows of the model: one per layer and hash group."""
        return self.n_layers * self.hash_groups

    @property
    def weight_one(self) -> int:
        """The integer weight that stands for 1.0."""
        return 1 << (self.weight_bits - 1)

    @property
    def projection_bits(self) -> int:
        """Signed width of one hash projection: int8·int8 summed over hash_dim, less its bias."""
        return 16 + math.ceil(math.log2(self.hash_dim)) + 1

    @property
    def score_bits(self) -> int:
        """Signed width of a score q·k̄ of int8 vectors over head_dim."""
        return 16 + math.ceil(math.log2(self.head_dim))

    @property
    def wtu_sum_bits(self) -> int:
        """Unsigned width of Σ weight·count over a full score memory."""
        return self.weight_bits + self.count_bits + math.ceil(math.log2(self.wtu_row_entries))

    @property
    def heads_per_group(self) -> int:
        """KV heads sharing one hash group's clusters (and one logical KV block)."""
        return self.n_kv_heads // self.hash_groups

    @property
    def near_slots(self) -> int:
        """Logical blocks (one per head of a hash group) the near tier holds."""
        return self.near_blocks // self.heads_per_group

    @property
    def kv_block_bytes(self) -> int:
        return self.block_tokens * 2 * self.head_dim

    @property
    def far_base(self) -> int:
        """The far tier's default base: the first 4 KB-aligned power of two past the near
        tier's window."""
        return 1 << max(12, (self.near_blocks * self.kv_block_bytes - 1).bit_length())

    @property
    def hc_base(self) -> int:
        """The HC table's default base: the first 4 KB boundary past the far tier's window
        (``kvmu_blocks`` logical blocks)."""
        far = self.kvmu_blocks * self.heads_per_group * self.kv_block_bytes
        return self.far_base + -(-far // 4096) * 4096

    @property
    def hc_bytes(self) -> int:
        """The HC table's bytes: ``head_dim`` int32 sums per cluster and head."""
        return (self.n_layers * self.hash_groups * self.kvmu_clusters * self.heads_per_group
                * self.head_dim * 4)

    @property
    def ctx_base(self) -> int:
        """The saved cluster windows' default base: the first 4 KB boundary past the HC
        table."""
        return self.hc_base + -(-self.hc_bytes // 4096) * 4096

    @property
    def ctx_word_bytes(self) -> int:
        """Bytes a word of a saved cluster window takes in memory: the HCU's context word
        (an entry, or the header) in the least power of two of bytes that holds it."""
        bits = max(self.n_hp + self.step_bits + self.count_bits,
                   self.cluster_id_bits + self.step_bits)
        return 1 << (-(-bits // 8) - 1).bit_length()

    @property
    def ctx_image_bytes(self) -> int:
        """Bytes of one saved cluster window (:func:`ctx_image_bytes`): the stride of the
        area at ``CTX_BASE``."""
        return ctx_image_bytes(self.window, self.ctx_word_bytes, self.kvmu_bus_bytes)

    @property
    def hcu_window_bytes(self) -> int:
        return self.window * self.n_hp // 8

    # --- what the blocks are built with ---------------------------------------------------
    def block_params(self, block: str) -> dict:
        """The constructor parameters of ``block`` (a name of ``rtl.BLOCKS``) for this build."""
        if block == "hcu":
            return dict(n_hp=self.n_hp, lanes=self.hcu_lanes, window=self.window,
                        layers=self.contexts, count_bits=self.count_bits,
                        step_bits=self.step_bits, id_bits=self.cluster_id_bits,
                        token_bits=self.token_bits, counter_bits=self.counter_bits)
        if block == "wtu":
            return dict(lanes=self.wtu_lanes, buckets=self.buckets,
                        pass_buckets=min(self.wtu_pass_buckets, self.buckets),
                        row_entries=self.wtu_row_entries, score_bits=self.score_bits,
                        weight_bits=self.weight_bits, count_bits=self.count_bits,
                        th_r_frac_bits=self.th_r_frac_bits, counter_bits=self.counter_bits)
        if block == "attn":
            return dict(n=self.attn_n, k_max=self.attn_k_max, acc_bits=self.attn_acc_bits,
                        k_buf=self.attn_k_buf, b_rows=self.attn_b_rows, n_hp=self.n_hp,
                        layers=self.contexts, step_bits=self.step_bits,
                        wtu_lanes=self.wtu_lanes, score_bits=self.score_bits,
                        weight_bits=self.weight_bits, count_bits=self.count_bits,
                        exp_frac_bits=self.exp_frac_bits, out_frac_bits=self.out_frac_bits,
                        counter_bits=self.counter_bits)
        if block == "attn_array":
            return dict(n=self.attn_n, k_max=self.attn_k_max, acc_bits=self.attn_acc_bits,
                        a_bits=8, counter_bits=self.counter_bits)
        if block == "attn_exp":
            return dict(lanes=self.attn_n, frac_bits=self.exp_frac_bits,
                        weight_bits=self.weight_bits, x_bits=self.score_bits + 1)
        if block == "kvmu":
            return dict(layers=self.n_layers, groups=self.hash_groups,
                        heads_per_group=self.heads_per_group, head_dim=self.head_dim,
                        block_tokens=self.block_tokens, clusters=self.kvmu_clusters,
                        blocks=self.kvmu_blocks, near_slots=self.near_slots,
                        bus_bytes=self.kvmu_bus_bytes, max_burst=self.kvmu_max_burst,
                        max_reads=self.kvmu_max_reads, max_writes=self.kvmu_max_writes,
                        addr_bits=self.kvmu_addr_bits, token_bits=self.kvmu_token_bits,
                        id_bits=self.cluster_id_bits, version_bits=self.kvmu_version_bits,
                        step_bits=self.step_bits, count_bits=self.count_bits,
                        counter_bits=self.counter_bits)
        if block == "core_regs":
            from vrex.regmap import build_values
            t, d = 1, self.head_dim
            return dict(layers=self.n_layers, step_bits=self.step_bits,
                        bus_bytes=self.kvmu_bus_bytes,
                        buffer_bytes={"q_addr": self.n_q_heads * t * d,
                                      "k_addr": self.n_kv_heads * t * d,
                                      "k_hash_addr": self.n_kv_heads * t * d,
                                      "v_addr": self.n_kv_heads * t * d,
                                      "o_addr": self.n_q_heads * t * d * 2},
                        hp_bytes=self.hash_groups * self.n_hp * self.hash_dim,
                        queue_depth=self.core_queue_depth, build=build_values(self))
        raise ConfigError(f"no block named {block!r}")

    def block_registers(self, block: str) -> dict:
        """The run-time register values of ``block`` for this ReSV setting (port -> int)."""
        if block == "hcu":
            return {"th_hd": self.th_hd, "max_age": self.max_age or 0,
                    "age_limit": int(self.max_age is not None),
                    "cluster_cap": self.cluster_cap or 0}
        if block == "wtu":
            return {"th_r": self.th_r_fixed}
        if block in ("attn", "attn_array", "attn_exp"):
            return {}          # the exp unit's β comes per layer from the quantisation scales
        if block == "kvmu":
            return {"near_base": 0, "far_base": self.far_base, "hc_base": self.hc_base,
                    "near_slots": self.near_slots, "far_slots": self.kvmu_blocks,
                    "max_burst": self.kvmu_max_burst}
        if block in ("core_regs", "core"):
            return {}          # the host writes them over AXI4-Lite
        raise ConfigError(f"no block named {block!r}")

    # --- presets and transport ------------------------------------------------------------
    @classmethod
    def from_preset(cls, name: str, **overrides) -> "Config":
        """The named preset of D1 (``paper`` or ``tuned``), with any field overridden."""
        if name not in PRESETS:
            raise ConfigError(f"preset must be one of {', '.join(map(repr, PRESETS))}, "
                              f"not {name!r}")
        return cls(**{**PRESETS[name], "preset": name, **overrides})

    def replace(self, **changes) -> "Config":
        """A copy with fields changed. Changing a hash field of a preset makes it ``custom``."""
        if self.preset != "custom" and "preset" not in changes:
            if any(k in PRESETS[self.preset] and changes[k] != PRESETS[self.preset][k]
                   for k in changes):
                changes["preset"] = "custom"
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """Every field, nested by section: ``{section: {field: value}}``."""
        return {sec: {name: getattr(self, name) for name in names}
                for sec, names in SECTIONS.items()}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def digest(self) -> str:
        """A short content hash of every field: which build a report measured."""
        import hashlib
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:12]

    @classmethod
    def from_dict(cls, d: dict) -> "Config":
        """From the nested form of :meth:`to_dict`, or from a flat ``{field: value}``."""
        flat = {}
        for key, value in d.items():
            if key in SECTIONS and isinstance(value, dict):
                unknown = sorted(set(value) - set(SECTIONS[key]))
                if unknown:
                    raise ConfigError(f"unknown configuration field(s) in {key}: "
                                      f"{', '.join(unknown)}")
                flat.update(value)
            else:
                flat[key] = value
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(flat) - known)
        if unknown:
            raise ConfigError(f"unknown configuration field(s): {', '.join(unknown)}")
        return cls(**flat)

    @classmethod
    def from_json(cls, text: str) -> "Config":
        return cls.from_dict(json.loads(text))


PRESETS: dict[str, dict] = {
    # The paper's setting: post-RoPE keys, raw, Th_hd = 7, no age limit.
    "paper": dict(hash_input="post_rope", centre=False, th_hd=7, max_age=None),
    # Same-patch keys of consecutive frames stay close only before RoPE and once centred.
    "tuned": dict(hash_input="pre_rope", centre=True, th_hd=9, max_age=8),
}

# The named sections of the one configuration; every field is in exactly one.
SECTIONS: dict[str, tuple[str, ...]] = {
    "geometry": ("n_layers", "n_q_heads", "n_kv_heads", "head_dim"),
    "resv": ("preset", "n_hp", "th_hd", "window", "max_age", "th_r", "buckets", "n_sink",
             "hash_input", "centre", "hash_scope", "weight_mode", "wicsum", "scope", "timing",
             "order", "cluster_cap", "dense_layers", "numerics", "hp_seed"),
    "formats": ("exp_frac_bits", "weight_bits", "th_r_frac_bits", "count_bits",
                "out_frac_bits", "step_bits", "token_bits", "cluster_id_bits",
                "counter_bits"),
    "kv_layout": ("block_tokens", "near_blocks"),
    "hcu": ("hcu_lanes", "hcu_contexts"),
    "wtu": ("wtu_lanes", "wtu_row_entries", "wtu_pass_buckets"),
    "attn": ("attn_n", "attn_k_max", "attn_acc_bits", "attn_k_buf", "attn_b_rows"),
    "kvmu": ("kvmu_clusters", "kvmu_blocks", "kvmu_bus_bytes", "kvmu_max_burst",
             "kvmu_max_reads", "kvmu_max_writes", "kvmu_addr_bits", "kvmu_token_bits",
             "kvmu_version_bits"),
    "core": ("core_queue_depth", "core_dma_depth", "core_max_tokens"),
}

# a block's parameter name -> the configuration field it comes from, where they differ
_HCU_NAMES = {"lanes": "hcu_lanes", "layers": "hcu_contexts", "id_bits": "cluster_id_bits"}
_WTU_NAMES = {"lanes": "wtu_lanes", "row_entries": "wtu_row_entries",
              "pass_buckets": "wtu_pass_buckets",
              "score_bits": "score_bits (from head_dim)"}
_ARRAY_NAMES = {"n": "attn_n", "k_max": "attn_k_max", "acc_bits": "attn_acc_bits"}
_ENGINE_NAMES = {**_ARRAY_NAMES, "k_buf": "attn_k_buf", "b_rows": "attn_b_rows",
                 "layers": "hcu_contexts", "score_bits": "score_bits (from head_dim)"}
_KVMU_NAMES = {"layers": "n_layers", "groups": "hash_groups (from hash_scope)",
               "heads_per_group": "n_kv_heads / hash_groups", "clusters": "kvmu_clusters",
               "blocks": "kvmu_blocks", "near_slots": "near_blocks / heads_per_group",
               "bus_bytes": "kvmu_bus_bytes", "max_burst": "kvmu_max_burst",
               "max_reads": "kvmu_max_reads", "max_writes": "kvmu_max_writes",
               "addr_bits": "kvmu_addr_bits", "token_bits": "kvmu_token_bits",
               "version_bits": "kvmu_version_bits"}
_EXP_NAMES = {"lanes": "attn_n", "frac_bits": "exp_frac_bits",
              "x_bits": "score_bits + 1 (from head_dim)"}
