"""The cycle model's parts (golden/cycles.py): the solver, the engine formula it reuses, the
features' structure and the paper-setting evaluation's arithmetic. Its accuracy against the
RTL is ``make cycles``' (fit and held-out runs) and test_verilog's core check."""
import itertools
from types import SimpleNamespace

import numpy as np
import pytest

from golden import cycles
from rtl.attn.engine import AttentionEngine
from vrex.config import Config


@pytest.mark.parametrize("seed", range(6))
def test_nnls_is_the_best_non_negative_solution(seed):
    """Against every active set by brute force: no non-negative x fits better."""
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((12, 4))
    b = rng.standard_normal(12) + A @ rng.uniform(-1, 1, 4)
    x = cycles.nnls(A, b)
    assert (x >= 0).all()
    best = np.inf
    for k in range(5):
        for cols in itertools.combinations(range(4), k):
            z = np.zeros(4)
            if cols:
                z[list(cols)] = np.linalg.lstsq(A[:, cols], b, rcond=None)[0]
            if (z >= 0).all():
                best = min(best, np.sum((A @ z - b) ** 2))
    assert np.sum((A @ x - b) ** 2) <= best + 1e-9


def test_nnls_recovers_exact_coefficients():
    rng = np.random.default_rng(1)
    A = rng.uniform(0, 10, (30, 5))
    want = np.array([0.0, 1.5, 0.0, 3.0, 0.25])
    assert np.allclose(cycles.nnls(A, A @ want), want, atol=1e-9)


@pytest.mark.parametrize("n", [4, 8, 16])
@pytest.mark.parametrize("m, k, l", [(1, 64, 1), (9, 64, 77), (231, 64, 100), (8, 16, 3),
                                     (17, 100, 40)])
def test_score_cycles_is_the_engines_formula(n, m, k, l):
    eng = AttentionEngine.from_config(Config(attn_n=n))
    assert cycles.score_cycles(n, m, k, l) == eng.command_cycles(m, k, l)


def _row(t, attended, cand=0, sel=0, hashed=None, opened=0):
    return {"tokens": t, "sinks": 0, "hashed": t if hashed is None else hashed,
            "opened": opened,
            "heads": [{"cand": cand, "sel": sel, "fetched": 0, "attended": attended}] * 3}


def test_store_reads_sums_only_for_tokens_that_join_a_cluster():
    """A stored token's cluster record (every head's sums) is read in one round trip, unless
    the token opens its cluster."""
    g = cycles._geometry(Config())
    trips = lambda opened: cycles.features(_row(8, 40, opened=opened), g, 50,
                                           False)["store"]["token_trips"]
    tg = 8 * g["G"]
    assert trips(0) == tg * 50
    assert trips(3) == (tg - 3) * 50 and trips(tg) == 0


def test_opened_tokens_counts_first_members_per_layer_and_group():
    S = SimpleNamespace
    steps = [S(layer=0, clusters=np.array([[0, 1, 1]])),     # 0 and 1 open
             S(layer=1, clusters=np.array([[0, 0]])),        # another layer's 0
             S(layer=0, clusters=np.array([[1, 2, 2]])),     # 2 opens
             S(layer=0, clusters=np.array([[0], [0]]))]      # group 1's 0 opens
    assert cycles.opened_tokens(steps) == [2, 1, 1, 1]


def test_lists_ahead_need_another_layer_and_both_steps_run():
    S = SimpleNamespace
    steps = [S(layer=lay, step_len=t) for lay, t in ((0, 4), (1, 4), (0, 9), (1, 4), (1, 4),
                                                     (0, 8))]
    # the first has none before it; (0, 9) is over the 8 tokens (refused before its counts),
    # so neither it nor the one behind it has a list ahead; (1, 4) behind (1, 4) is the same
    # layer (its stores change the table)
    assert cycles.lists_ahead(steps, 8) == [False, True, False, False, False, True]


def test_features_grow_with_their_sizes():
    g = cycles._geometry(Config())
    small = cycles.features(_row(8, 40, cand=10, sel=2), g, 0, False)
    big = cycles.features(_row(8, 400, cand=100, sel=20), g, 0, False)
    for ph, term in (("attend", "qk"), ("attend", "pv"), ("attend", "kv_load"),
                     ("attend", "fetch"), ("predict", "cand"), ("predict", "score")):
        assert big[ph][term] > small[ph][term], (ph, term)
    slow = cycles.features(_row(8, 40, cand=10, sel=2), g, 50, True)
    # the key stream: 16 sum beats a candidate at the default build bound B's load (kc = 8
    # beats a candidate); at 200 cycles of latency the 8 reads in flight bound it
    rows = 3 * 8
    base = cycles.score_cycles(g["n"], rows, g["d"], 10)
    assert small["predict"]["score"] == 3 * (base + 10 * (16 - 8))
    far = cycles.features(_row(8, 40, cand=10, sel=2), g, 200, False)
    assert far["predict"]["score"] == 3 * (base + 10 * ((200 + 16) / 8 - 8))
    assert slow["predict"]["list_trips"] == 3 * 50 and slow["store"]["token_trips"] > 0
    assert small["hash"]["centre_sums"] == 0 and slow["hash"]["centre_sums"] > 0
    # no candidates: nothing scored, nothing selected
    none = cycles.features(_row(8, 8), g, 0, False)
    assert none["predict"]["score"] == none["predict"]["select"] == 0


def test_paper_setting_arithmetic():
    coef = {ph: {t: 1.0 for t in terms} for ph, terms in
            cycles.features(_row(10, 100, 10, 3), cycles._geometry(Config()), 0,
                            False).items()}
    rep = cycles.paper_setting(coef, caches=(1024, 4096))
    a, b = rep["frames"]
    assert a["fps"] == pytest.approx(1e3 / a["frame_ms"])
    assert b["frame_ms"] > a["frame_ms"] and b["fetched"] > a["fetched"]
    assert rep["assumptions"]["n"] == 64 and rep["assumptions"]["clock_mhz"] == 800


def test_paper_setting_in_batches():
    """Batch 1 is the single stream; a batch of 4 shares the weights (the LLM's other work
    stays the weights' stream: its MACs, 4 frames of 10 tokens, are far below it), has four
    times the heads on each core and four times the hashes, stores and bytes, and gives 4
    frames a step (``golden.batch``)."""
    from golden.batch import batch_table
    coef = cycles.load_fit()
    one = cycles.paper_setting(coef, caches=(1024, 40960))["frames"]
    b1 = cycles.paper_setting(coef, caches=(1024, 40960), batch=1)["frames"]
    b4 = cycles.paper_setting(coef, caches=(1024, 40960), batch=4)["frames"]
    assert one == b1
    P = cycles.PAPER
    params = (P["hidden"] * (P["n_q_heads"] + 2 * P["n_kv_heads"]) * P["head_dim"]
              + P["n_q_heads"] * P["head_dim"] * P["hidden"] + 3 * P["hidden"] * P["ffn"])
    weights_ms = P["n_layers"] * params * P["weight_bytes"] / P["shared_bus"] \
        / (P["clock_mhz"] * 1e3)
    for x1, x4 in zip(b1, b4):
        assert x1["other_ms_per_frame"] == x4["other_ms_per_frame"] == pytest.approx(weights_ms)
        # (four heads a core: the later heads' counts lists hide behind the attention)
        assert 3.5 * x1["core_ms_per_frame"] < x4["core_ms_per_frame"] \
            <= 4 * x1["core_ms_per_frame"]
        assert x4["fps_all_streams"] == pytest.approx(4 * x4["fps"])
        assert x1["frame_ms"] < x4["frame_ms"] < 4 * x1["frame_ms"]
    rows = batch_table(coef, batches=(1, 8), caches=(1024,))["rows"]
    assert [r["batch"] for r in rows] == [1, 8] and rows[1]["fps_all_streams"] > 7 * rows[0]["fps"]


def test_chunked_heads_have_their_own_terms():
    """A head whose set is longer than B: per row tile a maximum's and a sums' pass, a
    command per chunk (the fetched ones and the sinks and own tokens); its terms and not the
    whole set's."""
    g = cycles._geometry(Config())                  # n 8, d 64, 16-byte bus, G_q 3
    row = _row(76, 328, cand=30, sel=14)
    row["sinks"] = 24
    row["heads"] = [dict(row["heads"][0], chunks=[228])] + row["heads"][1:]
    f = cycles.features(row, g, 10, False)["attend"]
    whole = cycles.features(_row(76, 328, cand=30, sel=14), g, 10, False)["attend"]
    mt = -(-3 * 76 // 8)
    assert f["chunk_cmd"] == 2 * mt * 2 and f["chunk_trips"] == 10 * f["chunk_cmd"]
    # per row tile (28 of 8 rows, one of 4) and chunk, the maximum's and the sums' commands
    per_tile = lambda m: sum(cycles.part_cycles(8, 64, m, lc, 1) +
                             cycles.part_cycles(8, 64, m, lc, 2) for lc in (228, 100))
    assert f["chunk_engine"] == 28 * per_tile(8) + per_tile(4)
    assert f["chunk_fetch"] == 2 * mt * 14
    # the other two heads are whole: two thirds of the whole-set terms
    assert f["qk"] == pytest.approx(whole["qk"] * 2 / 3) and f["head"] == 3


def test_descriptor_sizes_chunk_what_b_cannot_hold():
    from golden.core import HeadResult, LayerStep, fetch_chunks
    h = HeadResult(clusters=[1, 2, 3, 4], counts=[100, 90, 80, 70], selected=[0, 2, 3],
                   fetched=list(range(250)), attended=290, o=np.zeros((1, 1)))
    ls = LayerStep(step=1, layer=0, token0=300, step_len=16, n_sink=24, hashed=0, beta_m=1,
                   beta_shift=0, heads=[h], hashes=np.zeros((1, 16)), clusters=np.zeros((1, 16)))
    assert cycles.descriptor_sizes(ls, b_rows=512)["heads"][0]["chunks"] == []
    assert cycles.descriptor_sizes(ls, b_rows=256)["heads"][0]["chunks"] == [250]
    assert cycles.descriptor_sizes(ls, b_rows=200)["heads"][0]["chunks"] == [180, 70] \
        == fetch_chunks([100, 80, 70], 200)


def test_paper_setting_chunks_sets_longer_than_b():
    coef = {ph: {t: 1.0 for t in terms} for ph, terms in
            cycles.features(_row(10, 100, 10, 3), cycles._geometry(Config()), 0,
                            False).items()}
    short, long_ = cycles.paper_setting(coef, caches=(1024, 40960))["frames"]
    assert short["attended"] <= 1024 and short["chunks"] == 0
    assert long_["attended"] > 1024 and long_["chunks"] == -(-long_["fetched"] // 1024) + 1


def test_moved_blocks_counts_the_near_rings_moves_and_their_tokens():
    S = SimpleNamespace
    cfg = S(block_tokens=2, head_dim=4, heads_per_group=1, near_blocks=2)
    steps = [S(step=0, layer=0, token0=0, clusters=np.array([[0, 0, 1]])),  # two blocks
             S(step=1, layer=0, token0=3, clusters=np.array([[0, 2]])),  # 0's full: both move
             S(step=1, layer=1, token0=3, clusters=np.array([[0]]))]     # a third moves
    assert cycles.moved_blocks(steps, cfg) == [(0, 0), (2, 3), (1, 1)]
    g = cycles._geometry(Config())
    st = cycles.features(dict(_row(8, 40), moved=(2, 3)), g, 50, False)["store"]
    assert st["moves"] == 2 * g["hpg"]
    assert st["token_trips"] == (8 * g["G"] + 2 * g["hpg"]) * 50
