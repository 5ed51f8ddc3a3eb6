"""Parameter rules, written once: the checks a block's constructor makes and the checks the
configuration makes of the same values, with the same exact messages.

Each rule takes the name the caller knows the value by (a block says ``lanes``, the
configuration ``hcu_lanes``), so one rule serves both and the message names the right thing.
"""
from __future__ import annotations

__all__ = ["ParameterError", "ParameterTypeError", "positive_int", "power_of_two",
           "int_range", "multiple_of", "at_least", "hcu_rules", "wtu_rules"]


class ParameterError(ValueError):
    """A parameter holds a value that no build accepts."""


class ParameterTypeError(ParameterError, TypeError):
    """A parameter is not of the kind a build takes (an integer where one is needed)."""


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def positive_int(name: str, v) -> None:
    if not _is_int(v) or v <= 0:
        raise ParameterTypeError(f"{name} must be a positive integer, not {v!r}")


def power_of_two(name: str, v) -> None:
    if not _is_int(v) or v <= 0 or v & (v - 1):
        raise ParameterError(f"{name} must be a positive power of two, not {v!r}")


def int_range(name: str, v, lo: int, hi: int) -> None:
    if not _is_int(v) or not lo <= v <= hi:
        raise ParameterError(f"{name} must be an integer from {lo} to {hi}, not {v!r}")


def multiple_of(name: str, v, other_name: str, other: int) -> None:
    if v % other:
        raise ParameterError(f"{name} must be a multiple of {other_name} ({other}), not {v!r}")


def at_least(name: str, v, other_name: str, other: int) -> None:
    if v < other:
        raise ParameterError(f"{name} must be at least {other_name} ({other}), not {v!r}")


def _namer(names: dict | None):
    names = names or {}
    return lambda key: names.get(key, key)


def hcu_rules(*, n_hp, lanes, window, layers, count_bits, step_bits, id_bits, token_bits,
              counter_bits, names: dict | None = None) -> None:
    """What the hash-cluster unit accepts (``rtl.dre.hcu.HashClusterUnit``)."""
    n = _namer(names)
    for key, v in (("n_hp", n_hp), ("layers", layers), ("count_bits", count_bits),
                   ("step_bits", step_bits), ("id_bits", id_bits), ("token_bits", token_bits),
                   ("counter_bits", counter_bits)):
        positive_int(n(key), v)
    if n_hp > 64:
        raise ParameterError(f"{n('n_hp')} must be at most 64, not {n_hp!r}")
    power_of_two(n("lanes"), lanes)
    power_of_two(n("window"), window)
    at_least(n("window"), window, n("lanes"), lanes)
    wlog = window.bit_length() - 1
    if id_bits <= wlog:
        raise ParameterError(f"{n('id_bits')} must exceed log2({n('window')}) ({wlog}), "
                             f"not {id_bits!r}")


def wtu_rules(*, lanes, buckets, pass_buckets, row_entries, score_bits, weight_bits,
              count_bits, th_r_frac_bits, counter_bits, names: dict | None = None) -> None:
    """What the WiCSum threshold unit accepts (``rtl.dre.wtu.WicsumThresholdUnit``)."""
    n = _namer(names)
    for key, v in (("row_entries", row_entries), ("score_bits", score_bits),
                   ("weight_bits", weight_bits), ("count_bits", count_bits),
                   ("th_r_frac_bits", th_r_frac_bits), ("counter_bits", counter_bits)):
        positive_int(n(key), v)
    power_of_two(n("lanes"), lanes)
    power_of_two(n("buckets"), buckets)
    power_of_two(n("pass_buckets"), pass_buckets)
    if pass_buckets > buckets:
        raise ParameterError(f"{n('pass_buckets')} must be at most {n('buckets')} "
                             f"({buckets}), not {pass_buckets!r}")
    multiple_of(n("row_entries"), row_entries, n("lanes"), lanes)
    if score_bits < 2:
        raise ParameterError(f"{n('score_bits')} must be at least 2, not {score_bits!r}")


def exp_rules(*, lanes, frac_bits, weight_bits, x_bits, names: dict | None = None) -> None:
    """What the exponential unit accepts (``rtl.attn.exp.ExpUnit``)."""
    n = _namer(names)
    positive_int(n("lanes"), lanes)
    int_range(n("frac_bits"), frac_bits, 1, 12)
    int_range(n("weight_bits"), weight_bits, 4, 24)
    int_range(n("x_bits"), x_bits, 2, 40)


def array_rules(*, n, k_max, acc_bits, a_bits, counter_bits, valid_copies=0,
                names: dict | None = None) -> None:
    """What the systolic array accepts (``rtl.attn.array.SystolicArray``)."""
    nm = _namer(names)
    power_of_two(nm("n"), n)
    if n > 64:
        raise ParameterError(f"{nm('n')} must be at most 64, not {n!r}")
    positive_int(nm("k_max"), k_max)
    positive_int(nm("counter_bits"), counter_bits)
    int_range(nm("a_bits"), a_bits, 8, 18)
    int_range(nm("valid_copies"), valid_copies, 0, 64)
    need = 16 + max(1, (k_max - 1).bit_length())
    if not isinstance(acc_bits, int) or acc_bits < need:
        raise ParameterError(f"{nm('acc_bits')} must be at least {need} for k_max {k_max} "
                             f"(int8 products summed), not {acc_bits!r}")


def engine_rules(*, n, k_max, acc_bits, k_buf, b_rows, n_hp, layers, step_bits, wtu_lanes,
                 score_bits, weight_bits, count_bits, exp_frac_bits, out_frac_bits,
                 counter_bits, names: dict | None = None) -> None:
    """What the attention engine accepts (``rtl.attn.engine.AttentionEngine``)."""
    nm = _namer(names)
    array_rules(n=n, k_max=k_max, acc_bits=acc_bits, a_bits=8, counter_bits=counter_bits,
                names=names)
    for key, v in (("k_buf", k_buf), ("b_rows", b_rows), ("n_hp", n_hp), ("layers", layers),
                   ("step_bits", step_bits)):
        positive_int(nm(key), v)
    multiple_of(nm("k_buf"), k_buf, nm("n"), n)
    multiple_of(nm("b_rows"), b_rows, nm("n"), n)
    if k_buf > k_max:
        raise ParameterError(f"{nm('k_buf')} must be at most {nm('k_max')} ({k_max}), "
                             f"not {k_buf!r}")
    if n_hp > b_rows:
        raise ParameterError(f"{nm('n_hp')} must be at most {nm('b_rows')} ({b_rows}), "
                             f"not {n_hp!r}")
    power_of_two(nm("wtu_lanes"), wtu_lanes)
    positive_int(nm("count_bits"), count_bits)
    if not _is_int(score_bits) or not 17 <= score_bits <= acc_bits:
        raise ParameterError(f"{nm('score_bits')} must be an integer from 17 to "
                             f"{nm('acc_bits')} ({acc_bits}), not {score_bits!r}")
    int_range(nm("out_frac_bits"), out_frac_bits, 0, 16)
    # P·V: weights up to 2**(weight_bits - 1) times int8 values, summed over b_rows tokens
    need = weight_bits + 8 + max(1, (b_rows - 1).bit_length())
    if acc_bits < need:
        raise ParameterError(f"{nm('acc_bits')} must be at least {need} for P·V over "
                             f"{nm('b_rows')} ({b_rows}) tokens of {nm('weight_bits')} "
                             f"({weight_bits})-bit weights, not {acc_bits!r}")
    exp_rules(lanes=n, frac_bits=exp_frac_bits, weight_bits=weight_bits, x_bits=score_bits + 1,
              names={"lanes": nm("n"), "frac_bits": nm("exp_frac_bits"),
                     "weight_bits": nm("weight_bits"), "x_bits": nm("score_bits") + " + 1"})


def kvmu_rules(*, layers, groups, heads_per_group, head_dim, block_tokens, clusters, blocks,
               near_slots, bus_bytes, max_burst, max_reads, max_writes, addr_bits,
               token_bits, version_bits, step_bits, count_bits, counter_bits,
               names: dict | None = None) -> None:
    """What the KV memory manager accepts (``rtl.kvmu.kvmu.KvMemoryManager``)."""
    n = _namer(names)
    for key, v in (("layers", layers), ("groups", groups),
                   ("heads_per_group", heads_per_group), ("blocks", blocks),
                   ("near_slots", near_slots), ("token_bits", token_bits),
                   ("version_bits", version_bits), ("step_bits", step_bits),
                   ("count_bits", count_bits), ("counter_bits", counter_bits)):
        positive_int(n(key), v)
    power_of_two(n("head_dim"), head_dim)
    power_of_two(n("block_tokens"), block_tokens)
    power_of_two(n("clusters"), clusters)
    if bus_bytes not in (8, 16):
        raise ParameterError(f"{n('bus_bytes')} must be 8 or 16 (a 64- or 128-bit AXI4 bus), "
                             f"not {bus_bytes!r}")
    if 2 * head_dim < bus_bytes:
        raise ParameterError(f"{n('head_dim')} must be at least {bus_bytes // 2} (a token's K "
                             f"and V rows fill whole {bus_bytes}-byte beats), not {head_dim!r}")
    int_range(n("max_burst"), max_burst, 1, 256)
    int_range(n("max_reads"), max_reads, 1, 64)
    int_range(n("max_writes"), max_writes, 1, 64)
    int_range(n("addr_bits"), addr_bits, 16, 64)
    block_bytes = block_tokens * 2 * head_dim
    window = max(block_bytes, 4096) * heads_per_group * max(near_slots, blocks)
    if window > 1 << addr_bits:
        raise ParameterError(f"{n('addr_bits')} ({addr_bits}) cannot address "
                             f"{max(near_slots, blocks)} blocks of {heads_per_group} x "
                             f"{block_bytes} bytes")
