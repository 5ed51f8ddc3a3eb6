"""``python -m golden.batch``: the cycle model's paper setting at batch 1, 4, 8 and 16.

Several video streams served at once (the paper's batch): a batch step runs one frame of
every stream through the LLM. The LLM's weights are streamed from LPDDR5 once a step for all
streams, its projections' MACs grow with the streams' tokens; each stream's retrieval and
attention (its KV heads, ``batch`` times as many on the 8 cores), hashes, stores, HCU window
moves, bytes over the shared LPDDR5 and SSD reads are its own
(``golden.cycles.paper_setting(batch=)``). Reported per cache size and batch: the step's
latency (a frame of every stream), frames per second per stream and over all streams, and
the prediction's share of the attention. The core serves one stream today, so the streams'
terms are the single-stream model's, summed: not yet checked against RTL runs of several
streams. Writes ``build/bench/batch.json``."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .cycles import load_fit, paper_setting

__all__ = ["BATCHES", "batch_table", "main"]

BATCHES = (1, 4, 8, 16)


def batch_table(coef: dict, batches=BATCHES, caches=(1024, 5120, 10240, 20480, 40960),
                **over) -> dict:
    """``{"assumptions": ..., "rows": [...]}``: a row per (batch, cache size)."""
    rows, assumptions = [], None
    for b in batches:
        rep = paper_setting(coef, caches, batch=b, **over)
        assumptions = rep["assumptions"]
        for fr in rep["frames"]:
            rows.append({"batch": b, "cache_tokens": fr["cache_tokens"],
                         "step_ms": round(fr["frame_ms"], 3), "fps": round(fr["fps"], 3),
                         "fps_all_streams": round(fr["fps_all_streams"], 2),
                         "prediction_share_of_attention":
                             round(fr["prediction_share_of_attention"], 4),
                         "other_ms": round(fr["other_ms_per_frame"], 3),
                         "core_ms": round(fr["core_ms_per_frame"], 3)})
    return {"assumptions": assumptions, "batches": list(batches), "rows": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="golden.batch", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="build/bench/batch.json")
    a = ap.parse_args(argv)
    res = batch_table(load_fit())
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1))
    for r in res["rows"]:
        print(f"batch {r['batch']:2d}  cache {r['cache_tokens']:6d}  step {r['step_ms']:7.1f} ms"
              f"  {r['fps']:5.2f} fps a stream  {r['fps_all_streams']:6.1f} fps in all")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
