"""The V-Rex core's host interface, written once: the AXI4-Lite register map, the error codes
and the descriptor format. The docs table (docs/registers.md), the C header for host
software (``make verilog`` writes build/verilog/vrex_regs.h) and the constants the
testbenches and the golden model use all come from this module (neutral: it imports no
model and no hardware; the performance counters of the blocks a core holds are passed in as
``{block: counter names}``, and ``rtl.core.map`` passes the core's);
``verif/flow/test_regmap.py`` checks that the checked-in docs table is the generated one and
that the header compiles.

Registers are 32 bits at 4-byte-aligned byte offsets in a 4 KB window. Access: ``RO`` read
only, ``RW`` read/write, ``WO`` write only, ``W1C`` write one to clear, ``W1S`` write one to
start (reads 0). A command is one descriptor = one layer of one step (docs/design.md), written
as ``DESC_WORDS`` words to ``DESC_DATA`` in order; the last word queues it. The bus rules are
``BUS_RULES``.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Field", "Register", "REGISTERS", "ERRORS", "BUS_RULES", "DESCRIPTOR", "DESC_WORDS",
           "ID", "VERSION", "PERF_BASE", "build_values", "offsets", "perf_registers",
           "register_map", "encode_descriptor", "decode_descriptor", "c_header", "markdown"]

ID = 0x56524558                 # "VREX"
VERSION = (0, 4, 0)             # of this register map: major, minor, patch
PERF_BASE = 0x100


@dataclass(frozen=True)
class Field:
    name: str
    lsb: int
    width: int
    doc: str

    @property
    def mask(self) -> int:
        return ((1 << self.width) - 1) << self.lsb


@dataclass(frozen=True)
class Register:
    name: str
    offset: int
    access: str
    doc: str
    fields: tuple = ()
    reset: int = 0


def _f(name, lsb, width, doc):
    return Field(name, lsb, width, doc)


# the interrupt causes, one bit each in IRQ_ENABLE and IRQ_STATUS
IRQ_FIELDS = (_f("done", 0, 1, "a descriptor completed"),
              _f("error", 1, 1, "an error was recorded"),
              _f("space", 2, 1, "the queue has room again"))

REGISTERS = (
    Register("ID", 0x000, "RO", "identification: 0x56524558 (\"VREX\")", reset=ID),
    Register("VERSION", 0x004, "RO", "register-map version", (
        _f("patch", 0, 16, "patch"), _f("minor", 16, 8, "minor"), _f("major", 24, 8, "major")),
        reset=VERSION[0] << 24 | VERSION[1] << 16 | VERSION[2]),
    Register("BUILD0", 0x008, "RO", "the build's geometry (reset: the build's values)", (
        _f("attn_n", 0, 8, "systolic array side"), _f("hcu_lanes", 8, 8, "HCU lanes"),
        _f("wtu_lanes", 16, 8, "WTU lanes"), _f("contexts", 24, 8, "HCU layer contexts"))),
    Register("BUILD1", 0x00C, "RO", "the build's ReSV sizes (reset: the build's values)", (
        _f("n_hp", 0, 8, "hash bits"), _f("window_log2", 8, 8, "log2 of the cluster window"),
        _f("buckets", 16, 8, "WiCSum buckets"), _f("block_tokens", 24, 8, "tokens a KV block"))),
    Register("CTRL", 0x010, "RW", "control", (
        _f("enable", 0, 1, "take descriptors from the queue"),
        _f("soft_reset", 1, 1, "W1S: return every block to idle (outstanding bursts finish "
                               "first), empty the queue, clear the error and the layers' last "
                               "versions: a new stream; registers keep their values"),
        _f("centre", 2, 1, "hash centred on the layer's running mean hash-input key (D1, "
                           "the tuned preset)"))),
    Register("STATUS", 0x014, "RO", "status", (
        _f("busy", 0, 1, "a descriptor is running"), _f("queue_empty", 1, 1, "no descriptor "
                                                                              "queued"),
        _f("queue_full", 2, 1, "the queue takes no descriptor"),
        _f("error", 3, 1, "ERROR_CODE holds an error"),
        _f("queue_level", 8, 8, "descriptors queued"))),
    Register("ERROR_CODE", 0x018, "W1C", "the first error since the last clear (write 1 to "
                                         "bit 0 to clear)", (
        _f("code", 0, 8, "an ERRORS code (0: none)"),
        _f("version", 16, 16, "the version of the descriptor it ended"))),
    Register("ERROR_ADDR_LO", 0x01C, "RO", "bus address of a bus error, bits 31:0"),
    Register("ERROR_ADDR_HI", 0x020, "RO", "bus address of a bus error, bits 63:32"),
    Register("IRQ_ENABLE", 0x024, "RW", "interrupt enables", IRQ_FIELDS),
    Register("IRQ_STATUS", 0x028, "W1C", "interrupt causes (the irq output is the OR of "
                                         "IRQ_STATUS & IRQ_ENABLE)", IRQ_FIELDS),
    Register("TH_HD", 0x030, "RW", "HCU: join when the Hamming distance is below (and the "
                                   "cluster has fewer than cluster_cap members)", (
        _f("th_hd", 0, 8, "threshold"),
        _f("cluster_cap", 16, 16, "members a cluster takes at most (0: no cap)"))),
    Register("AGE", 0x034, "RW", "HCU: cluster age limit", (
        _f("max_age", 0, 16, "steps a cluster stays eligible"),
        _f("age_limit", 16, 1, "apply max_age"))),
    Register("TH_R", 0x038, "RW", "WTU: the WiCSum ratio Th_r in u1.16", (
        _f("th_r", 0, 17, "Th_r · 65536 (halves up)"),)),
    Register("NEAR_BASE_LO", 0x040, "RW", "near tier (device DRAM) base, bits 31:0"),
    Register("NEAR_BASE_HI", 0x044, "RW", "near tier base, bits 63:32"),
    Register("NEAR_BLOCKS", 0x048, "RW", "near tier capacity in KV blocks"),
    Register("FAR_BASE_LO", 0x04C, "RW", "far tier (host memory) base, bits 31:0"),
    Register("FAR_BASE_HI", 0x050, "RW", "far tier base, bits 63:32"),
    Register("FAR_BLOCKS", 0x054, "RW", "far tier capacity in KV blocks"),
    Register("MAX_BURST", 0x058, "RW", "AXI4 read and write bursts at most this many beats "
                                       "(1 to 256)", reset=256),
    Register("DESC_DATA", 0x060, "WO", "descriptor words, in order; the last one queues it"),
    Register("DESC_DONE", 0x064, "RO", "descriptors completed since reset"),
    Register("DESC_VERSION", 0x068, "RO", "version of the last completed descriptor"),
    Register("IO_BASE_LO", 0x070, "RW", "the window holding Q, K, V, hyperplanes and O, "
                                        "base bits 31:0"),
    Register("IO_BASE_HI", 0x074, "RW", "that window's base, bits 63:32"),
    Register("IO_SIZE", 0x078, "RW", "that window's size in bytes"),
    Register("HC_BASE_LO", 0x080, "RW", "the HC table's sums (per cluster and head, int32), "
                                        "base bits 31:0; 4 KB aligned"),
    Register("HC_BASE_HI", 0x084, "RW", "that table's base, bits 63:32"),
    Register("CTX_BASE_LO", 0x088, "RW", "the HCU's saved cluster windows (one image per "
                                         "layer and hash group, build's ctx_image_bytes "
                                         "each), base bits 31:0; bus aligned; used when "
                                         "the build holds fewer windows than the model"),
    Register("CTX_BASE_HI", 0x08C, "RW", "that area's base, bits 63:32"),
    Register("BUILD2", 0x090, "RO", "the build's options (reset: the build's values)", (
        _f("cluster_first", 0, 1, "1: a step's tokens are hashed and stored before its heads "
                                  "score (`Config.order` cluster_first), 0: select first"),)),
)

# error codes (ERROR_CODE.code)
ERRORS = {
    "NONE": (0, "no error"),
    "DESC_ZERO_LENGTH": (1, "a descriptor with step length 0"),
    "DESC_MISALIGNED": (2, "an address not aligned to the bus width"),
    "DESC_OUT_OF_WINDOW": (3, "an address outside the memory windows"),
    "DESC_UNKNOWN_LAYER": (4, "a layer the build has no hyperplanes or context for"),
    "DESC_VERSION_BACKWARDS": (5, "a version older than the layer's last"),
    "QUEUE_OVERFLOW": (6, "a descriptor word written while the queue was full: the word and "
                          "the rest of its descriptor are dropped"),
    "BUS_READ": (7, "SLVERR or DECERR on a read (ERROR_ADDR holds the address)"),
    "BUS_WRITE": (8, "SLVERR or DECERR on a write (ERROR_ADDR holds the address)"),
    "ENGINE_REFUSED": (9, "the attention engine refused a command the descriptor implied"),
    "KV_TABLE_FULL": (10, "the KVMU's block table (kvmu_blocks) or far tier (FAR_BLOCKS) is "
                          "full: a token was not stored"),
    "KV_CLUSTER_LOST": (11, "an update of a cluster's sums failed: the cluster is no longer a "
                            "candidate (its KV stays stored)"),
    "CORE_LIMIT": (12, "a step over a buffer of the build: more candidates than attn_b_rows or "
                       "wtu_row_entries, an attended set that cannot be chunked (the sinks "
                       "and the step's tokens over attn_b_rows, a selected cluster over "
                       "attn_b_rows, 65536 tokens or more), or a step over core_max_tokens "
                       "(that head's output is not written)"),
    "KV_STALE": (13, "a fetch was dropped as stale (a newer version of its layer came)"),
    "KV_REFUSED": (14, "the KVMU refused a command or its registers (memory windows, "
                       "capacities, MAX_BURST out of range)"),
    "DRE_REFUSED": (15, "the HCU or the WTU refused its input (a layer beyond the contexts, "
                        "a step going backwards, a row over wtu_row_entries): the group's "
                        "tokens are not stored"),
    "DESC_BAD_STEP": (16, "a step older than the last accepted one of its layer, or one of "
                          "2**step_bits or more (the build's step width)"),
    "DESC_PARTIAL_WRITE": (17, "a DESC_DATA write without all four byte strobes (answered "
                               "SLVERR): the word and the rest of its descriptor are dropped"),
}

# how the AXI4-Lite slave answers, for the docs and the header's readers
BUS_RULES = (
    "An access decodes address bits 11:2; bits 1:0 are ignored (a read returns the whole "
    "word, a write changes the bytes its WSTRB selects).",
    "A write to an unmapped or read-only offset, or a read of an unmapped one, answers SLVERR "
    "and changes nothing; every other access answers OKAY.",
    "A descriptor is its DESC_WORDS words to DESC_DATA in order, counted whatever happens to "
    "them: a word dropped (the queue full, or a write without all four strobes) drops its "
    "descriptor whole, and the next descriptor's words land in their slots.",
)

# the descriptor, word by word: (word, field, lsb, width, meaning)
DESCRIPTOR = (
    (0, "version", 0, 16, "command version (D12: a newer one makes older fetches stale)"),
    (0, "layer", 16, 8, "LLM layer"),
    (0, "kind", 24, 1, "0 frame step, 1 text step"),
    (0, "dense", 25, 1, "1: a dense layer (D14): no prediction, every past token attended"),
    (1, "step_len", 0, 16, "tokens in the step (> 0)"),
    (1, "step", 16, 16, "step index"),
    (2, "q_addr", 0, 64, "int8 Q of the step's query heads"),
    (4, "k_addr", 0, 64, "int8 K, post-RoPE"),
    (6, "k_hash_addr", 0, 64, "int8 hash-input keys (pre-RoPE for `tuned`)"),
    (8, "v_addr", 0, 64, "int8 V"),
    (10, "hp_addr", 0, 64, "int8 hyperplanes of the layer"),
    (12, "o_addr", 0, 64, "16-bit output O"),
    (14, "beta_m", 0, 16, "exp unit mantissa of α·log2 e (docs/numerics.md §7)"),
    (14, "beta_shift", 16, 6, "beta_s - exp_frac_bits"),
    (15, "n_sink", 0, 16, "pinned prompt tokens (D10): the stream's first n_sink tokens, "
                          "attended by every step, never clustered, stored or fetched"),
    (16, "token0", 0, 32, "the stream position of the step's first token"),
    (17, "sink_k_addr", 0, 64, "int8 K of the sink tokens, [kv heads, n_sink, head_dim] "
                               "(unused when n_sink is 0)"),
    (19, "sink_v_addr", 0, 64, "int8 V of the sink tokens, the same shape"),
)
DESC_WORDS = 21


def build_values(cfg) -> dict:
    """BUILD0, BUILD1 and BUILD2 of the build made from ``cfg``."""
    regs = {r.name: r for r in REGISTERS}
    vals = {"attn_n": cfg.attn_n, "hcu_lanes": cfg.hcu_lanes, "wtu_lanes": cfg.wtu_lanes,
            "contexts": cfg.contexts, "n_hp": cfg.n_hp,
            "window_log2": cfg.window.bit_length() - 1, "buckets": cfg.buckets,
            "block_tokens": cfg.block_tokens,
            "cluster_first": int(cfg.order == "cluster_first")}
    out = {}
    for name in ("BUILD0", "BUILD1", "BUILD2"):
        v = 0
        for f in regs[name].fields:
            if not 0 <= vals[f.name] < 1 << f.width:
                raise ValueError(f"{name}.{f.name} cannot hold {vals[f.name]}")
            v |= vals[f.name] << f.lsb
        out[name] = v
    return out


def offsets(counters: dict) -> dict:
    """Register name -> byte offset, for testbenches."""
    return {r.name: r.offset for r in register_map(counters)}


def perf_registers(counters: dict) -> list[Register]:
    """Every block's performance counters, read only, from PERF_BASE: ``counters`` maps a
    block's name to its counters' names (its ``PERF``), in the map's order."""
    regs, off = [], PERF_BASE
    for name, names in counters.items():
        for counter in names:
            regs.append(Register(f"PERF_{name.upper()}_{counter.upper()}", off, "RO",
                                 f"{name}: {counter}"))
            off += 4
    return regs


def register_map(counters: dict) -> list[Register]:
    """The whole map: :data:`REGISTERS` and the counters of :func:`perf_registers`."""
    return list(REGISTERS) + perf_registers(counters)


def encode_descriptor(**values) -> list[int]:
    """The ``DESC_WORDS`` words of a descriptor; every field of :data:`DESCRIPTOR` named,
    each within its width."""
    words = [0] * DESC_WORDS
    names = {f for _, f, _, _, _ in DESCRIPTOR}
    if set(values) != names:
        missing, extra = names - set(values), set(values) - names
        raise ValueError(f"descriptor fields: missing {sorted(missing)}, unknown "
                         f"{sorted(extra)}")
    for w, f, lsb, width, _ in DESCRIPTOR:
        v = values[f]
        if not (isinstance(v, int) and 0 <= v < 1 << width):
            raise ValueError(f"descriptor field {f} must fit {width} bits, not {v!r}")
        v <<= lsb
        for k in range(-(-(lsb + width) // 32)):
            words[w + k] |= (v >> 32 * k) & 0xFFFF_FFFF
    return words


def decode_descriptor(words) -> dict:
    if len(words) != DESC_WORDS:
        raise ValueError(f"a descriptor is {DESC_WORDS} words, not {len(words)}")
    out = {}
    for w, f, lsb, width, _ in DESCRIPTOR:
        v = 0
        for k in range(-(-(lsb + width) // 32)):
            v |= words[w + k] << 32 * k
        out[f] = (v >> lsb) & ((1 << width) - 1)
    return out


def c_header(counters: dict) -> str:
    """``vrex_regs.h``: offsets, field shifts and masks, error codes, descriptor layout."""
    lines = ["/* V-Rex core register map, generated by vrex/regmap.py: do not edit. */",
             "#ifndef VREX_REGS_H", "#define VREX_REGS_H", "",
             f"#define VREX_ID_VALUE 0x{ID:08X}u",
             f"#define VREX_REGMAP_VERSION 0x{REGISTERS[1].reset:08X}u",
             f"#define VREX_DESC_WORDS {DESC_WORDS}u", ""]
    for r in register_map(counters):
        lines.append(f"#define VREX_{r.name} 0x{r.offset:03X}u  /* {r.access}: "
                     f"{r.doc.replace('*/', '')} */")
        for f in r.fields:
            lines += [f"#define VREX_{r.name}_{f.name.upper()}_SHIFT {f.lsb}u",
                      f"#define VREX_{r.name}_{f.name.upper()}_MASK 0x{f.mask:08X}u"]
    lines.append("")
    for name, (code, doc) in ERRORS.items():
        lines.append(f"#define VREX_ERR_{name} {code}u  /* {doc} */")
    lines.append("")
    for w, f, lsb, width, doc in DESCRIPTOR:
        lines += [f"#define VREX_DESC_{f.upper()}_WORD {w}u  /* {doc} */",
                  f"#define VREX_DESC_{f.upper()}_SHIFT {lsb}u",
                  f"#define VREX_DESC_{f.upper()}_BITS {width}u"]
    lines += ["", "#endif /* VREX_REGS_H */", ""]
    return "\n".join(lines)


def markdown(counters: dict) -> str:
    """docs/registers.md."""
    out = ["# The V-Rex core's registers and descriptor", "",
           "Generated from `vrex/regmap.py` and the blocks' counters"
           " (`python -m rtl.emit --registers > docs/registers.md`);"
           " the C header for host software is `build/verilog/vrex_regs.h` (`make verilog`). "
           "The core (`rtl/core/`, [core.md](core.md)) implements it.",
           "", "## Registers (AXI4-Lite, 32-bit, byte offsets)", "",
           *[f"- {rule}" for rule in BUS_RULES], "",
           "| offset | name | access | reset | fields / meaning |", "|---|---|---|---|---|"]
    for r in register_map(counters):
        fields = "; ".join(f"[{f.lsb + f.width - 1}:{f.lsb}] `{f.name}` {f.doc}"
                           for f in r.fields)
        out.append(f"| 0x{r.offset:03X} | `{r.name}` | {r.access} | 0x{r.reset:X} | "
                   f"{r.doc}{': ' + fields if fields else ''} |")
    out += ["", "## Error codes (`ERROR_CODE.code`)", "", "| code | name | meaning |",
            "|---|---|---|"]
    out += [f"| {c} | `{n}` | {d} |" for n, (c, d) in ERRORS.items()]
    out += ["", f"## Descriptor ({DESC_WORDS} words to `DESC_DATA`)", "",
            "| word | bits | field | meaning |", "|---|---|---|---|"]
    for w, f, lsb, width, doc in DESCRIPTOR:
        span = f"{w}" if lsb + width <= 32 else f"{w}-{w + (lsb + width - 1) // 32}"
        bits = f"[{lsb + width - 1}:{lsb}]"
        out.append(f"| {span} | {bits} | `{f}` | {doc} |")
    return "\n".join(out) + "\n"

