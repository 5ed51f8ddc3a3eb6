"""Block-level golden model of the hash-cluster unit (HCU), docs/design.md D3 and D4.

What the RTL's output stream carries, token by token: the clustering decision of
:class:`golden.resv.HashClusterer` (one clusterer per layer context), plus the block's own
bookkeeping: the token's index within its frame (``first`` restarts it, wrapping at
``2**token_bits``) and the cluster's member count after the token joined, saturating at
``2**count_bits - 1``. The RTL is compared with this, beat for beat.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from .resv import HashClusterer

__all__ = ["Token", "hcu_reference"]


@dataclass(frozen=True)
class Token:
    """One new-token hash, as the HCU's input beat carries it."""
    hash: int
    layer: int = 0
    step: int = 0
    first: int = 0
    last: int = 0

    def beat(self) -> dict:
        return asdict(self)


def hcu_reference(tokens, cfg, *, prior=(), errors=None) -> list[dict]:
    """One dict per token of ``tokens``, as the HCU's ``o`` beat reads, for the build and ReSV
    setting ``cfg`` (``n_hp``, ``window``, ``th_hd``, ``max_age``, ``cluster_cap``,
    ``count_bits``, ``token_bits``, ``contexts``). ``prior``: tokens the unit took before (its
    state, not compared). A token whose layer is beyond the contexts (code 1) or whose step is older than
    its layer's last (code 2) is refused: no beat, no state change; ``errors``, if given, gets
    ``(code, index in prior + tokens)`` of each."""
    clusterers, counts, out, tok, last = {}, {}, [], -1, {}
    cmax = (1 << cfg.count_bits) - 1
    for k, t in enumerate(list(prior) + list(tokens)):
        code = 1 if t.layer >= cfg.contexts else 2 if t.step < last.get(t.layer, 0) else 0
        if code:
            if errors is not None:
                errors.append((code, k))
            continue
        last[t.layer] = t.step
        hc = clusterers.setdefault(t.layer, HashClusterer(n_hp=cfg.n_hp, th_hd=cfg.th_hd,
                                                          window=cfg.window,
                                                          max_age=cfg.max_age,
                                                          cap=cfg.cluster_cap))
        cid, opened, dist = (int(x[0]) for x in hc.assign([t.hash], t.step))
        c = counts.setdefault(t.layer, {})
        c[cid] = 1 if opened else min(c[cid] + 1, cmax)
        tok = 0 if t.first else (tok + 1) % (1 << cfg.token_bits)
        if k >= len(prior):
            out.append(dict(token=tok, cluster=cid, opened=opened, distance=dist, count=c[cid],
                            layer=t.layer, first=t.first, last=t.last))
    return out
