"""Parameter checks shared by the blocks: eager, with exact messages."""

__all__ = ["check_pos_int", "check_pow2"]


def check_pos_int(name, v):
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
        raise TypeError(f"{name} must be a positive integer, not {v!r}")


def check_pow2(name, v):
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0 or v & (v - 1):
        raise ValueError(f"{name} must be a positive power of two, not {v!r}")
