"""One bus transfer of a stream answered with an error: which operation of a stream to fail
for each kind of fault (the suite's Amaranth tier and the cocotb testbench both use it)."""
from __future__ import annotations

from .model import first_op

__all__ = ["FAILS", "with_fault"]

def _first_store(cfg, regs, ops, rows, *, offload: bool):
    """The index of the first store (past a third of ``ops``) that moves a block (or, without
    ``offload``, that moves none)."""
    def want(rp, op):
        if op[0] != "store":
            return False
        g = rp.mem.open.get(op[1:4][:2] + (op[3],))
        full = g is None or len(rp.mem.blocks[g].tokens) == rp.geo.block_tokens or \
            rp.mem.blocks[g].far_slot is not None
        moves = full and len(rp.mem.near) == rp.geo.near_slots
        return moves == offload
    return first_op(cfg, regs, ops, rows, want)


def _first_hc_read(cfg, regs, ops, rows):
    """The first store whose cluster already has members (its sums are read)."""
    def want(rp, op):
        rec = rp.hc.get(op[1:4]) if op[0] == "store" else None
        return rec is not None and rec.count > 0 and not rec.poisoned
    return first_op(cfg, regs, ops, rows, want)


def _first_long_list(cfg, regs, ops, rows):
    """The first keyed candidate list (past a third of ``ops``) of three or more candidates."""
    def want(rp, op):
        if op[0] != "cand" or isinstance(op[-1], dict):
            return False
        past = [c for c in range(rp.n_clusters.get(op[1:3], 0))
                if (r := rp.hc.get((*op[1:3], c))) and not r.poisoned and r.past(op[4]) > 0]
        return len(past) >= 3
    return first_op(cfg, regs, ops, rows, want)


FAILS = ["write", "offload_read", "offload_write", "read", "hc_read", "hc_write", "cand_read"]


def with_fault(cfg, regs, ops, rows, fail, resp):
    """``ops`` with one transfer of the named kind answering ``resp``."""
    ops = list(ops)
    if fail == "read":
        k = next(i for i, op in enumerate(ops)
                 if op[0] == "fetch" and len(op[4]) > 1 and i > len(ops) // 3)
        ops[k] = (*ops[k][:6], dict(fail="read", beat=3, resp=resp))
    elif fail == "cand_read":
        # a beat of the second candidate's sums, its reads overlapping the first's division
        k = _first_long_list(cfg, regs, ops, rows)
        hbeats = 4 * cfg.head_dim // cfg.kvmu_bus_bytes
        ops[k] = (*ops[k], dict(fail="cand_read", beat=hbeats + hbeats // 2, resp=resp))
    else:
        k = (_first_hc_read(cfg, regs, ops, rows) if fail == "hc_read" else
             _first_store(cfg, regs, ops, rows, offload=fail.startswith("offload")))
        ops[k] = (*ops[k], dict(fail=fail, resp=resp))
    return ops
