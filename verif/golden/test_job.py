import json
import subprocess
import sys

import numpy as np
import pytest

from golden.job import METHODS, format_table, run_job
from golden.trace import synthetic_trace

from verif.lib.traces import ROOT

SMALL_SWEEPS = {"resv": [0.1, 0.9], "resv_tuned": [0.1], "resv_noclust": [0.1],
                "oracle_topk": [0.1, 0.9], "quest": [0.2], "infinigen": [0.2], "rekv": [0.2],
                "window": [0.1, 0.9]}


def _check_summary(sm, n_layers, n_kv):
    for m in METHODS:
        r = sm[m]
        for key in ("retrieval_ratio", "mass_recall", "output_cosine"):
            assert set(r[key]) >= {"frame", "text"}
            for st in ("frame", "text"):
                assert r[key][st] is None or -1.0 <= r[key][st] <= 1.0 + 1e-9
        assert len(r["per_layer_ratio"]) == n_layers and len(r["per_head_ratio"]) == n_kv
        assert {"bytes_near", "bytes_far", "bursts_near", "bursts_far"} <= set(r["fetch"])
    for m in ("resv", "resv_tuned"):
        c = sm[m]["clusters"]
        assert c["count"] > 0 and c["mean_tokens"] >= 1 and 0 < c["table_share"] < 1
        assert sm[m]["int_attention_cosine"] > 0.99
    assert 0 <= sm["int_float_agreement"] <= 1
    # the bucketed walk exits no earlier than exact WiCSum at the same Th_r
    for m in ("resv", "resv_tuned"):
        w = sm[m]["wicsum_ratio"]
        for st in ("frame", "text"):
            if w["bucket"][st] is not None:
                assert w["bucket"][st] == pytest.approx(sm[m]["retrieval_ratio"][st])
                assert w["bucket"][st] >= w["exact_int"][st] - 1e-12
    full = sm["full"]
    assert full["retrieval_ratio"]["frame"] == 1.0
    assert full["mass_recall"]["frame"] == pytest.approx(1.0)
    assert full["output_cosine"]["frame"] == pytest.approx(1.0)
    assert set(sm["pareto"]) == set(METHODS) | {"resv_float", "resv_tuned_float"}
    # other hyperplane seeds: three values of every headline figure, a Jaccard in [0, 1]
    for m in ("resv", "resv_tuned"):
        sd = sm["seeds"][m]
        assert len(sd["hp_seeds"]) == 3 and len(sd["retrieval_ratio"]["frame"]) == 3
        assert 0 <= sd["seed_jaccard"] <= 1
        assert sd["retrieval_ratio"]["frame"][0] == sm[m]["retrieval_ratio"]["frame"]
    # a method's curve: the larger the budget, the more it fetches
    for m in ("oracle_topk", "window", "resv"):
        r = [p["retrieval_ratio"] for p in sm["pareto"][m]]
        assert r == sorted(r)
    for m, pts in sm["pareto"].items():
        for p in pts:
            for st in ("frame", "text"):
                assert {"retrieval_ratio", "output_rel_l2", "output_cosine", "mass_recall",
                        "keys_per_row", "key_share", "without_layer0", "per_layer"} <= set(p[st])
                assert len(p[st]["per_layer"]["output_rel_l2"]) == n_layers
    # prediction cost: the oracle scores every past key, ReSV far fewer, window none
    pr = {m: sm[m]["prediction"]["key_share"]["frame"] for m in METHODS}
    assert pr["oracle_topk"] == pytest.approx(1.0) and pr["window"] == 0
    assert 0 < pr["resv"] < 1 and 0 < pr["quest"] < 1
    # the matched-ratio table: each baseline interpolated at ReSV's own ratio
    for st, by in sm["matched"].items():
        for preset, row in by.items():
            r0 = row["resv"]["retrieval_ratio"]
            for b, p in row.items():
                assert p is None or p["retrieval_ratio"] == r0
    # and without layer 0: ReSV's own point is its pareto point's without_layer0 figures
    if n_layers > 1:
        for st, by in sm["matched_without_layer0"].items():
            for preset, row in by.items():
                own = next(p[st]["without_layer0"] for p in sm["pareto"][preset]
                           if p["th_r"] == 0.3)
                assert row["resv"] == own
                for b, p in row.items():
                    assert p is None or p["retrieval_ratio"] == own["retrieval_ratio"]


def test_job_on_synthetic(tmp_path):
    tr = synthetic_trace(seed=31, n_frames=6, n_layers=3)
    sm = run_job(tr, tmp_path, progress=False, sweeps=SMALL_SWEEPS)
    _check_summary(sm, tr.n_layers, tr.n_kv_heads)
    assert json.loads((tmp_path / "summary.json").read_text())["trace"] == tr.name
    for fig in ("retrieval.png", "pareto.png"):
        assert (tmp_path / fig).read_bytes()[:4] == b"\x89PNG"
    assert "resv_tuned" in format_table(sm)
    # every reference option switched beside the reference (the trace holds layers 0 to 2)
    opts = sm["baseline_options"]
    assert set(opts["quest"]) == {"reference", "sparse_first_layers"}
    assert set(opts["infinigen"]) == {"reference", "sparse_first_layers", "no_skew",
                                      "per_step_dims", "adaptive_alpha"}
    fx = sm["factorial"]   # every predictor under every policy, every figure per stage
    assert set(fx) == {"resv", "resv_cap", "resv_spread", "tokens", "quest", "infinigen",
                       "rekv"}
    for p, by in fx.items():
        assert set(by) == {"fraction", "count", "wicsum"}
        assert set(by["count"]["frame"]) == {"retrieval_ratio", "output_rel_l2", "mass_recall",
                                             "output_cosine", "key_share",
                                             "output_rel_l2_range"}
        lo, hi = by["count"]["frame"]["output_rel_l2_range"]     # over the seeds
        assert lo <= by["count"]["frame"]["output_rel_l2"] <= hi
    q = opts["quest"]      # the first two of three layers dense: more attended
    assert (q["reference"]["frame"]["retrieval_ratio"] >
            q["sparse_first_layers"]["frame"]["retrieval_ratio"])


def test_job_dense_layers_for_every_method():
    """D14 in the comparison: ``dense_layers`` 1 makes the model's layer 0 dense for every
    method (ratio 1 there, nothing predicted), the other layers' figures unchanged."""
    tr = synthetic_trace(seed=31, n_frames=4, n_layers=2)
    sweeps = {m: v[:1] for m, v in SMALL_SWEEPS.items()}
    runs = {d: run_job(tr, progress=False, figures=False, sweeps=sweeps, seeds=1,
                       dense_layers=d) for d in (0, 1)}
    assert runs[1]["dense_layers"] == 1 and runs[0]["dense_layers"] == 0
    for m in METHODS:
        ratio = runs[1][m]["per_layer_ratio"]
        assert ratio[0] == pytest.approx(1.0), m
        assert ratio[1] == pytest.approx(runs[0][m]["per_layer_ratio"][1]), m
    for m in ("resv", "resv_noclust", "window", "oracle_topk", "rekv"):
        assert runs[0][m]["per_layer_ratio"][0] < 0.95, m


def test_job_on_bundled_trace(bundled, tmp_path):
    # short sweeps that still span ReSV's ratios (the full ones are make golden's)
    sweeps = {m: [0.1, 0.3, 0.9] if m.startswith("resv") else [0.1, 0.6] for m in METHODS}
    sm = run_job(bundled, tmp_path, progress=False, figures=False, sweeps=sweeps)
    _check_summary(sm, 3, 3)
    # ReSV fetches less than everything and keeps most of the attention mass
    for m in ("resv", "resv_tuned"):
        assert sm[m]["retrieval_ratio"]["frame"] < 0.8
        assert sm[m]["mass_recall"]["frame"] > 0.9
    # the near tier holds half of the stream: fetching everything must reach the far tier
    assert sm["near_blocks"] > 0 and sm["full"]["fetch"]["bytes_far"] > 0
    # layers 4, 16, 29: no dense layer, the other options switched
    assert "sparse_first_layers" not in sm["baseline_options"]["infinigen"]
    assert set(sm["baseline_options"]["quest"]) == {"reference"}
    # without layer 0 (these short sweeps): ReSV without clusters reaches ReSV's ratio in the
    # frame stage, the oracle in the text stage, and both lose less than ReSV there
    for st, ref in (("frame", "resv_noclust"), ("text", "oracle_topk")):
        for preset, row in sm["matched_without_layer0"][st].items():
            assert row[ref] is not None, (st, preset)
            assert row[ref]["output_rel_l2"] < row["resv"]["output_rel_l2"], (st, preset)


def test_cli_rejects_a_bad_trace(tmp_path):
    p = subprocess.run([sys.executable, "-m", "golden.cli", "--trace", str(tmp_path / "x.npz")],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 2 and "no trace file at" in p.stderr
