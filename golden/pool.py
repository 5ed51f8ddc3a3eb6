"""Independent pieces of the golden job on several cores.

:func:`map_forked` runs ``fn`` over ``items`` in ``jobs`` forked worker processes, each with
one BLAS thread (two processes of one thread beat one process of two on the job's mix of
small matrix products and Python loops). ``fn`` and the data it reads are inherited through
the fork, never pickled: closures over the trace and the masks work; only the results travel
back. ``jobs=1`` runs in this process, unchanged.
"""

from __future__ import annotations

import multiprocessing as mp

from vrex.toolchain import default_jobs

__all__ = ["map_forked", "default_jobs"]

_FN = None


def _init():
    from threadpoolctl import threadpool_limits
    threadpool_limits(1)


def _call(i_item):
    i, item = i_item
    return i, _FN(item)


def map_forked(fn, items, jobs: int = 1, done=None) -> list:
    """``[fn(x) for x in items]``, in ``jobs`` forked processes when ``jobs > 1`` (Linux);
    ``done(k, n)`` is called as results arrive."""
    global _FN
    items = list(items)
    if jobs <= 1 or len(items) <= 1 or "fork" not in mp.get_all_start_methods():
        out = []
        for k, x in enumerate(items):
            out.append(fn(x))
            if done:
                done(k + 1, len(items))
        return out
    _FN = fn
    try:
        out = [None] * len(items)
        with mp.get_context("fork").Pool(min(jobs, len(items)), initializer=_init) as pool:
            for k, (i, r) in enumerate(pool.imap_unordered(_call, enumerate(items))):
                out[i] = r
                if done:
                    done(k + 1, len(items))
        return out
    finally:
        _FN = None
