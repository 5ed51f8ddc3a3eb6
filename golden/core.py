"""Golden model of the core's front end: which descriptors it refuses, and with which error
code (vrex/regmap.py's ``ERRORS``; DESIGN.md §2, issue 10's bad-input list).

A descriptor (``vrex.regmap.decode_descriptor``) names one layer of one step and the memory
it reads and writes. The core checks it before running it, in this order, and refuses it with
the first failing check's code: a zero step length; a layer the build has no layer for; an
address not aligned to the bus width; a buffer that does not lie wholly inside the I/O window
(``IO_BASE``, ``IO_SIZE``); a version older than the last accepted one of its layer (versions
are 16-bit and compared without wrap-around: the host resets the core before they wrap).
"""
from __future__ import annotations

from vrex.regmap import ERRORS

__all__ = ["buffer_bytes", "check_descriptor"]


def buffer_bytes(desc: dict, cfg) -> dict:
    """The bytes each buffer of a descriptor spans: ``name -> (address, bytes)``; the sink
    buffers only when ``n_sink`` is not 0."""
    t, d = desc["step_len"], cfg.head_dim
    return {"q_addr": (desc["q_addr"], cfg.n_q_heads * t * d),
            "k_addr": (desc["k_addr"], cfg.n_kv_heads * t * d),
            "k_hash_addr": (desc["k_hash_addr"], cfg.n_kv_heads * t * d),
            "v_addr": (desc["v_addr"], cfg.n_kv_heads * t * d),
            "hp_addr": (desc["hp_addr"], cfg.hash_groups * cfg.n_hp * cfg.hash_dim),
            "o_addr": (desc["o_addr"], cfg.n_q_heads * t * d * 2),
            **({"sink_k_addr": (desc["sink_k_addr"], cfg.n_kv_heads * desc["n_sink"] * d),
                "sink_v_addr": (desc["sink_v_addr"], cfg.n_kv_heads * desc["n_sink"] * d)}
               if desc.get("n_sink", 0) else {})}


def check_descriptor(desc: dict, cfg, *, io_base: int, io_size: int, bus_bytes: int,
                     last_version: dict) -> tuple[str, int]:
    """``(error name, code)`` of a descriptor, ``("NONE", 0)`` if the core accepts it.
    ``last_version``: layer -> the version of the layer's last accepted descriptor (the
    caller updates it on acceptance)."""
    def err(name):
        return name, ERRORS[name][0]
    if desc["step_len"] == 0:
        return err("DESC_ZERO_LENGTH")
    if desc["layer"] >= cfg.n_layers:
        return err("DESC_UNKNOWN_LAYER")
    bufs = buffer_bytes(desc, cfg)
    if any(addr % bus_bytes for addr, _ in bufs.values()):
        return err("DESC_MISALIGNED")
    if any(addr < io_base or addr + n > io_base + io_size for addr, n in bufs.values()):
        return err("DESC_OUT_OF_WINDOW")
    if desc["version"] < last_version.get(desc["layer"], 0):
        return err("DESC_VERSION_BACKWARDS")
    return err("NONE")
