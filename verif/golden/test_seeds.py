"""Comparisons over hyperplane seeds (golden.seeds, the golden job's seed_spread): a win
counts only where the spreads do not overlap; the job reports every matched and
count-matched comparison over its seeds; the CLI takes --seeds."""
import pytest

from golden.cli import main
from golden.seeds import over_seeds, spread, verdict


def test_verdicts_need_spreads_apart():
    r = spread([0.10, 0.12, 0.11])
    assert (r["mean"], r["min"], r["max"]) == (pytest.approx(0.11), 0.10, 0.12)
    assert verdict(r, spread([0.13, 0.20])) == "win"
    assert verdict(r, spread([0.05, 0.09])) == "loss"
    assert verdict(r, spread([0.119, 0.3])) == "overlap"
    assert verdict(r, spread([0.2, None])) is None
    got = over_seeds([{"resv": 0.1, "a": 0.2}, {"resv": 0.12, "a": 0.11}])
    assert got["a"]["verdict"] == "overlap" and "verdict" not in got["resv"]


def test_job_reports_every_comparison_over_its_seeds(tmp_path):
    from golden.job import BASELINES, run_job
    from golden.trace import synthetic_trace
    tr = synthetic_trace(seed=7, n_frames=5, n_layers=3)
    sm = run_job(tr, None, progress=False, figures=False, seeds=2,
                 sweeps={m: [0.05, 0.3, 0.9] for m in ("resv", "resv_tuned", "resv_sf",
                                                      "resv_tuned_sf", "resv_noclust")}
                 | {m: [0.02, 0.3, 0.8] for m in BASELINES})
    sp = sm["seed_spread"]
    assert sp["seeds"] == 2
    for st in ("frame", "text"):
        for preset in ("resv", "resv_tuned"):
            row = sp["matched"][st][preset]
            assert len(row["resv"]["values"]) == 2
            assert set(BASELINES) <= set(row)
        cnt = sp["count"][st]
        assert set(cnt) == {"resv", "resv_cap", "resv_spread", "tokens", "quest", "infinigen",
                            "rekv"}
        assert all(len(v["values"]) == 2 for v in cnt.values() if v["mean"] is not None)
    with pytest.raises(ValueError, match="seeds must be at least 1"):
        run_job(tr, None, progress=False, figures=False, seeds=0)


def test_cli_rejects_no_seeds(capsys):
    with pytest.raises(SystemExit):
        main(["--seeds", "0"])
    assert "--seeds must be at least 1" in capsys.readouterr().err
