"""The core's register file, fast tier: every register's reset value, access type and byte
strobes, the descriptor checks in golden.core's order, the queue and its overflow, the first
error and the interrupt, soft reset, the bus rules (unaligned addresses, partial and
dropped descriptor words); under every crossing, for several builds."""
import pytest

from verif.lib.pauses import CROSSINGS
from vrex.config import Config

from .model import scenario
from .sim import run_regs

POINTS = {"default": Config(), "q1_l2_bus8": Config(core_queue_depth=1, n_layers=2,
                                                    kvmu_bus_bytes=8, step_bits=8),
          "q8_tuned": Config.from_preset("tuned", core_queue_depth=8, hash_scope="per_head")}


@pytest.mark.parametrize("cross", CROSSINGS)
@pytest.mark.parametrize("point", POINTS)
def test_host_session(point, cross):
    log = run_regs(POINTS[point], scenario(POINTS[point], seed=3), cross=cross, seed=5)
    assert any(a[0] == "pop" and got for a, got in log)


def test_bad_queue_depth():
    from rtl import CoreRegisters
    params = {**Config().block_params("core_regs"), "perf": ()}
    with pytest.raises(ValueError, match="queue_depth must be an integer from 1 to 64"):
        CoreRegisters(**{**params, "queue_depth": 0})


# --- the whole core, end to end (small streams: the simulator runs about 700 core cycles a
# second; the Verilog tier runs the longer streams and the bundled trace) -------------------

TINY = dict(n_layers=1, n_q_heads=2, n_kv_heads=1, head_dim=16, n_frames=2,
            tokens_per_frame=4, prefix_tokens=4, header_tokens=1, question_tokens=2)


def tiny_config(preset, **kw):
    geo = {k: TINY[k] for k in ("n_layers", "n_q_heads", "n_kv_heads", "head_dim")}
    return Config.from_preset(preset, **{**geo, **dict(
        kvmu_clusters=16, kvmu_blocks=32, near_blocks=4, attn_b_rows=32, core_max_tokens=16,
        wtu_row_entries=32, window=16, hcu_lanes=4), **kw})


@pytest.mark.parametrize("preset, bus, n, latency, pauses, cap, order", [
    ("paper", 16, 8, 0, 0.0, 2, "select_first"),    # the HCU's cluster-size cap (TH_HD)
    # (tuned, select first, a hostile bus: the Verilog tier's synth_tuned_bus8_n4_w3_b32
    # point in make test; this run in make soak)
    pytest.param("tuned", 8, 4, 7, 0.3, None, "select_first", marks=pytest.mark.soak),
    ("paper", 16, 8, 3, 0.3, None, "cluster_first"),  # (Th_r 0.5: where the order tells)
    # (tuned, cluster first, under latency and pauses: the Verilog tier's bundled-trace point
    # in make test; this run in make soak)
    pytest.param("tuned", 8, 4, 7, 0.3, None, "cluster_first", marks=pytest.mark.soak),
])
def test_core_end_to_end(preset, bus, n, latency, pauses, cap, order):
    """A tiny stream (prompt, two frames, a question): every hash, cluster, selection,
    fetched token and output row equals golden.core.run_stream; no error. Both orders: the
    cluster-first one (the step's tokens hashed and stored before its heads score) changes
    what the stream scores."""
    from golden.core import run_stream
    from .e2e import compare_run, plan_stream, synthetic_stream
    from .sim_core import run_core
    tr, qt = synthetic_stream(4, **TINY)
    cfg = tiny_config(preset, kvmu_bus_bytes=bus, attn_n=n, cluster_cap=cap, order=order,
                      **({"th_r": 0.5} if order == "cluster_first" else {}))
    if cap:                                 # the cap changes the stream's clusters
        def clusters(c):
            return [ls.clusters.tolist() for ls in run_stream(tr, qt, c, outputs=False)]
        assert clusters(cfg) != clusters(cfg.replace(cluster_cap=None))
    if order == "cluster_first":
        assert _scored(run_stream(tr, qt, cfg, outputs=False)) != \
            _scored(run_stream(tr, qt, cfg.replace(order="select_first"), outputs=False))
    plan = plan_stream(tr, qt, cfg)
    obs, info = run_core(plan, latency=latency, bus_pauses=pauses, host_cross="both",
                         seed=3, max_cycles=200_000)
    assert not compare_run(plan, obs), compare_run(plan, obs)
    assert info["error"] & 0xFF == 0, hex(info["error"])
    assert info["perf"]["core_descriptors"] == len(plan.descriptors)


@pytest.mark.parametrize("order, latency, pauses", [
    ("select_first", 3, 0.3),        # the dense layer's counts lists taken ahead
    pytest.param("cluster_first", 5, 0.3, marks=pytest.mark.soak),
])
def test_core_dense_layer(order, latency, pauses):
    """D14: two layers, the first dense (``dense_layers`` 1: its descriptors' ``dense``
    flag), the second predicted, interleaved: a dense head scores nothing and attends
    every past token (its last step's 18 in chunks, B 16), where the predicted run of the
    same layer selects fewer; every hash, cluster, selection (none for a dense head),
    fetched token and output row equals golden.core.run_stream; no error."""
    from golden.core import run_stream
    from .e2e import compare_run, plan_stream, synthetic_stream
    from .sim_core import run_core
    tr, qt = synthetic_stream(4, **{**TINY, "n_layers": 2})
    cfg = tiny_config("paper", n_layers=2, n_hp=16, th_hd=3, attn_b_rows=16,
                      wtu_row_entries=16, dense_layers=1, order=order)
    dense = run_stream(tr, qt, cfg, outputs=False)
    sparse = run_stream(tr, qt, cfg.replace(dense_layers=0), outputs=False)
    for d, s in zip(dense, sparse):
        assert d.dense == (d.layer == 0)
        for hd, hs in zip(d.heads, s.heads):
            assert hd.fetched == list(range(d.n_sink, d.token0)) if d.dense else \
                hd.fetched == hs.fetched
    assert _scored(dense) != _scored(sparse)
    assert any(h.attended > 16 for d in dense if d.dense for h in d.heads)
    plan = plan_stream(tr, qt, cfg)
    assert [d["dense"] for d in plan.descriptors] == [int(g.layer == 0) for g in plan.golden]
    obs, info = run_core(plan, latency=latency, bus_pauses=pauses, host_cross="both",
                         seed=5, max_cycles=300_000)
    assert not compare_run(plan, obs), compare_run(plan, obs)
    assert info["error"] & 0xFF == 0, hex(info["error"])


def _scored(steps) -> list:
    """What a stream's heads score and select: per descriptor and head, the candidates,
    their counts and the selection."""
    return [(h.clusters, h.counts, h.selected) for ls in steps for h in ls.heads]


# make soak: in make test the Verilog tier's synth_tuned_bus8_n4_w3_b32 point attends
# predicted sets in chunks under a hostile bus, and test_core_dense_layer a dense one here
@pytest.mark.soak
@pytest.mark.parametrize("preset, n, latency, pauses", [
    ("paper", 8, 0, 0.0), ("tuned", 4, 5, 0.3)])
def test_core_long_sets_in_chunks(preset, n, latency, pauses):
    """Attended sets longer than attn_b_rows (16 here; the stream's last steps attend to 16
    and 18 tokens): the engine's chunked two-pass attention, per row tile, every chunk's
    tokens fetched again; every hash, cluster, selection, fetched token and output row
    equals golden.core.run_stream; no error."""
    from .e2e import compare_run, plan_stream, synthetic_stream
    from .sim_core import run_core
    tr, qt = synthetic_stream(4, **TINY)
    cfg = tiny_config(preset, n_hp=16, attn_b_rows=16, wtu_row_entries=16, attn_n=n)
    plan = plan_stream(tr, qt, cfg)
    assert any(h.attended > 16 for g in plan.golden for h in g.heads)
    obs, info = run_core(plan, latency=latency, bus_pauses=pauses, host_cross="both",
                         seed=4, max_cycles=300_000)
    assert not compare_run(plan, obs), compare_run(plan, obs)
    assert info["error"] & 0xFF == 0, hex(info["error"])


def test_core_limit_is_reported_and_the_stream_goes_on():
    """A set whose last chunk (the sinks and the step's own tokens) does not fit
    attn_b_rows (8 here: 4 sinks and a frame of 6): CORE_LIMIT with the descriptor's version,
    that head's attention skipped, every descriptor completed, every hash and cluster still
    the golden model's and every token stored."""
    from vrex import regmap
    from .e2e import compare_run, plan_stream, synthetic_stream
    from .sim_core import run_core
    tr, qt = synthetic_stream(4, **TINY)
    cfg = tiny_config("paper", n_hp=8, attn_b_rows=8, wtu_row_entries=16)
    plan = plan_stream(tr, qt, cfg)
    over = [k for k, g in enumerate(plan.golden) if g.n_sink + g.step_len > 8]
    assert over, "the stream must overflow B somewhere"
    obs, info = run_core(plan, max_cycles=200_000)
    assert info["error"] & 0xFF == regmap.ERRORS["CORE_LIMIT"][0]
    assert info["error"] >> 16 == plan.descriptors[over[0]]["version"]
    assert obs.done == len(plan.descriptors)
    bad = [b for b in compare_run(plan, obs, limit=1000)
           if b.startswith(("hash", "cluster"))]
    assert not bad, bad
    stored = sum(g.hashes.size for g in plan.golden)
    assert info["perf"]["kvmu_stored_tokens"] == stored


def test_core_step_over_max_tokens_is_refused_and_no_list_runs_ahead_for_it():
    """Two layers, the question (7 tokens) over core_max_tokens (6): both its descriptors
    refused with CORE_LIMIT (the first's version), nothing of them hashed, selected, fetched
    or stored, every descriptor completed; the steps before bit-exact. Queued as a whole
    (in the select-first order, which takes lists ahead), every descriptor behind one of
    another layer has its first counts list taken ahead (PERF_CORE_AHEAD), the refused
    question's first descriptor none (it never reaches its counts)."""
    import dataclasses
    from golden.cycles import lists_ahead
    from vrex import regmap
    from .e2e import compare_run, plan_stream, synthetic_stream
    from .sim_core import run_core
    tr, qt = synthetic_stream(4, **dict(TINY, n_layers=2, question_tokens=7))
    cfg = tiny_config("paper", n_layers=2, core_max_tokens=6, order="select_first")
    plan = plan_stream(tr, qt, cfg)
    over = [k for k, g in enumerate(plan.golden) if g.step_len > 6]
    assert over == [6, 7], over
    obs, info = run_core(plan, max_cycles=300_000)
    assert info["error"] & 0xFF == regmap.ERRORS["CORE_LIMIT"][0]
    assert info["error"] >> 16 == plan.descriptors[6]["version"]
    assert obs.done == len(plan.descriptors)
    ran = dataclasses.replace(plan, golden=plan.golden[:6], descriptors=plan.descriptors[:6])
    obs.o_rows = obs.o_rows[:6]
    assert not compare_run(ran, obs), compare_run(ran, obs)
    ahead = lists_ahead(plan.golden, 6, cfg.order)
    assert ahead == [False] + [True] * 5 + [False, False]
    assert info["perf"]["core_ahead"] == sum(ahead)
    assert info["perf"]["kvmu_stored_tokens"] == sum(g.hashes.size for g in plan.golden[:6])


@pytest.mark.parametrize("latency, pauses", [pytest.param(0, 0.0, marks=pytest.mark.soak),
                                             (3, 0.3)])
def test_core_step_going_backwards_is_refused_and_the_stream_goes_on(latency, pauses):
    """A descriptor whose step is older than its layer's last (its version not older): refused
    with DESC_BAD_STEP and its version, nothing of it hashed, stored or
    written; the next descriptors (the same layer's among them) run bit-exact and complete."""
    from vrex import regmap
    from .e2e import compare_run, plan_stream, synthetic_stream
    from .sim_core import run_core
    tr, qt = synthetic_stream(4, **TINY)
    cfg = tiny_config("paper")
    plan = plan_stream(tr, qt, cfg)
    ds = plan.descriptors
    k = next(i for i, d in enumerate(ds) if d["step"] >= 3)
    layer = ds[k]["layer"]
    first = next(d for d in ds if d["layer"] == layer and d["step"] >= 1)   # past the sinks
    last = [d for d in ds[:k] if d["layer"] == layer][-1]
    assert first["step"] < last["step"]
    bad = dict(first, version=last["version"])           # only its step is older
    obs, info = run_core(plan, latency=latency, bus_pauses=pauses, seed=2,
                         max_cycles=200_000, refused={k: bad})
    assert info["error"] & 0xFF == regmap.ERRORS["DESC_BAD_STEP"][0], hex(info["error"])
    assert info["error"] >> 16 == bad["version"]
    assert obs.done == len(ds)
    assert not compare_run(plan, obs), compare_run(plan, obs)
    assert info["perf"]["kvmu_stored_tokens"] == sum(g.hashes.size for g in plan.golden)


@pytest.mark.parametrize("register, value", [("MAX_BURST", 0), ("NEAR_BASE_LO", 0x800)])
def test_core_kvmu_register_error_is_kv_refused_and_every_descriptor_ends(register, value):
    """A KVMU register out of range (MAX_BURST 0; NEAR_BASE not 4 KB aligned): the KVMU
    refuses every command, the core reports KV_REFUSED with the interrupt, nothing is
    stored and every descriptor still completes (none waits for a store or a fetch the KVMU
    refused)."""
    import dataclasses
    from vrex import regmap
    from .e2e import plan_stream, synthetic_stream
    from .sim_core import run_core
    tr, qt = synthetic_stream(4, **TINY)
    plan = plan_stream(tr, qt, tiny_config("paper"))
    off = {r.name: r.offset for r in regmap.REGISTERS}[register]
    regs = [(o, value if o == off else v) for o, v in plan.registers]
    assert regs != plan.registers
    obs, info = run_core(dataclasses.replace(plan, registers=regs), max_cycles=200_000)
    assert info["error"] & 0xFF == regmap.ERRORS["KV_REFUSED"][0], hex(info["error"] or 0)
    assert obs.done == len(plan.descriptors)
    assert info["irq"] == 1
    assert info["perf"]["kvmu_stored_tokens"] == 0


def test_core_sums_write_error_is_kv_cluster_lost_and_the_kv_stays():
    """An error answer on the first write of a cluster's sums to the HC table (the KVMU's
    update as a token is stored): the cluster is poisoned, the core reports
    KV_CLUSTER_LOST with the interrupt and the table's address, every descriptor completes
    and every token is still stored (only the sums are lost)."""
    from vrex import regmap
    from .e2e import plan_stream, synthetic_stream
    from .sim_core import run_core
    tr, qt = synthetic_stream(4, **TINY)
    cfg = tiny_config("paper")
    plan = plan_stream(tr, qt, cfg)
    hc = cfg.block_registers("kvmu")["hc_base"]
    obs, info = run_core(plan, latency=2, bus_pauses=0.2, seed=4, max_cycles=200_000,
                         faults={("write", hc): 2})
    assert info["error"] & 0xFF == regmap.ERRORS["KV_CLUSTER_LOST"][0], hex(info["error"])
    assert info["error_addr"] == hc, hex(info["error_addr"])
    assert obs.done == len(plan.descriptors)
    assert info["irq"] == 1
    assert info["perf"]["kvmu_stored_tokens"] == sum(g.hashes.size for g in plan.golden)


def test_core_kv_table_full_is_reported_and_every_descriptor_ends():
    """A stream larger than the KVMU's block table (2 blocks of 4 tokens): KV_TABLE_FULL
    with the interrupt, the tokens that fit stored, every descriptor completes."""
    from vrex import regmap
    from .e2e import plan_stream, synthetic_stream
    from .sim_core import run_core
    tr, qt = synthetic_stream(4, **TINY)
    cfg = tiny_config("paper", kvmu_blocks=2, near_blocks=1, block_tokens=4)
    plan = plan_stream(tr, qt, cfg)
    total = sum(g.hashes.size for g in plan.golden)
    assert total > 2 * 4
    obs, info = run_core(plan, max_cycles=200_000)
    assert info["error"] & 0xFF == regmap.ERRORS["KV_TABLE_FULL"][0], hex(info["error"] or 0)
    assert obs.done == len(plan.descriptors)
    assert info["irq"] == 1
    assert 0 < info["perf"]["kvmu_stored_tokens"] < total


def test_core_hcu_refusal_ends_the_group_and_the_stream_goes_on():
    """A saved cluster window comes back from memory with a later last step than it had (the
    memory kept wrong bytes): the HCU refuses that layer's next tokens. Each refused token
    counts as done, the group's tokens are not stored and the descriptor ends with
    DRE_REFUSED; every descriptor completes (none waits for an assignment that will not
    come), the other layer's windows and outputs stay the golden model's."""
    import dataclasses
    from vrex import regmap
    from .e2e import compare_run, plan_stream, synthetic_stream
    from .sim_core import run_core
    geo = {**TINY, "n_layers": 2}
    tr, qt = synthetic_stream(5, **geo)
    cfg = tiny_config("paper", n_layers=2, hcu_contexts=1, kvmu_blocks=64)
    plan = plan_stream(tr, qt, cfg)
    ds = plan.descriptors
    assert [(d["step"], d["layer"]) for d in ds[:5]] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0)]
    # window 0 (layer 0) is saved by (step 1, layer 1) and loaded again by (step 2, layer 0)
    top = (1 << cfg.step_bits) - 1

    def later_step(raw):
        head = int.from_bytes(raw, "little") | top << cfg.cluster_id_bits
        return head.to_bytes(len(raw), "little")
    obs, info = run_core(plan, seed=3, max_cycles=60_000,
                         tamper={cfg.ctx_base: later_step})
    assert info["error"] & 0xFF == regmap.ERRORS["DRE_REFUSED"][0], hex(info["error"])
    assert obs.done == len(ds)
    lost = sum(g.hashes.size for g, d in zip(plan.golden, ds) if d["layer"] == 0 and
               d["step"] >= 2)
    assert lost and info["perf"]["hcu_refused"] == lost
    assert info["perf"]["kvmu_stored_tokens"] == sum(g.hashes.size for g in plan.golden) - lost
    keep = [k for k, d in enumerate(ds) if d["layer"] == 1 or d["step"] <= 2]
    ran = dataclasses.replace(plan, golden=[plan.golden[k] for k in keep],
                              descriptors=[ds[k] for k in keep])
    obs.o_rows = [obs.o_rows[k] for k in keep]
    assert not compare_run(ran, obs, taps=False), compare_run(ran, obs, taps=False)


@pytest.mark.parametrize("b_rows, answers, latency, pauses", [
    # a whole set's fetch; a later step fetches the block again (make soak: the last case
    # fails whole sets' fetches too)
    pytest.param(32, [2], 0, 0.0, marks=pytest.mark.soak),
    # the chunked set's maximum's pass (make soak; the sums' pass below)
    pytest.param(16, [0, 2], 5, 0.3, marks=pytest.mark.soak),
    (16, [0, 0, 3], 3, 0.2),    # its sums' pass, DECERR
    (32, [2, 2], 2, 0.2),       # two fetches fail: the second after the KVMU's error is up
])
def test_core_fetch_read_error(b_rows, answers, latency, pauses):
    """An error answer on a fetched KV block's read (the first block stored, the n-th time
    it is read): the KVMU drops the fetch's other beats, the core pads the engine's B with
    zeros up to the command's tokens so nothing waits for ever; BUS_READ with the
    descriptor's version and the block's address; every descriptor completes; every hash,
    cluster and selection, every other head's fetch and output row, and every later fetch of
    the block (the stored KV unchanged) equal the golden model. Each failed fetch is one
    error (``core_errors``): the KVMU's first, then (its error sticky) the fetch's end beat."""
    from vrex import regmap
    from .e2e import compare_run, failed_fetches, plan_stream, synthetic_stream
    from .sim_core import run_core
    tr, qt = synthetic_stream(4, **TINY)
    cfg = tiny_config("paper", n_hp=16, attn_b_rows=b_rows, wtu_row_entries=16)
    plan = plan_stream(tr, qt, cfg)
    near = cfg.block_registers("kvmu")["near_base"]
    obs, info = run_core(plan, latency=latency, bus_pauses=pauses, seed=6,
                         max_cycles=200_000, faults={("read", near): list(answers)})
    assert info["error"] & 0xFF == regmap.ERRORS["BUS_READ"][0], hex(info["error"])
    assert info["error_addr"] == near, hex(info["error_addr"])
    assert obs.done == len(plan.descriptors)
    failures = sum(1 for a in answers if a)
    assert info["perf"]["core_errors"] == failures, info["perf"]["core_errors"]
    k = [d["version"] for d in plan.descriptors].index(info["error"] >> 16)
    where = f"step {plan.golden[k].step} layer {plan.golden[k].layer} "
    # the differences: only the failed fetches' tokens and their descriptors' output rows
    hit, others = failed_fetches(compare_run(plan, obs, limit=1000))
    assert not others, others
    assert where in hit and len(hit) == failures, hit
    chunked = plan.golden[k].heads[0].attended > b_rows
    assert chunked == (b_rows == 16)


@pytest.mark.parametrize("layers, kv_heads, contexts, bus, n_hp, latency, pauses", [
    # two layers' windows through one context (make soak; the next point does the same on
    # an 8-byte bus, also in make soak: the Verilog tier's
    # synth_tuned_bus8_n4_w3_b32 point moves windows through an 8-byte bus in make test)
    pytest.param(2, 1, 1, 16, 32, 0, 0.0, marks=pytest.mark.soak),
    pytest.param(2, 1, 1, 8, 64, 3, 0.0, marks=pytest.mark.soak),  # 16-byte words, 8-byte bus
    # per-head hash groups: four windows on three contexts (the Verilog tier's
    # synth_tuned_bus8_n4_w3_b32 point runs such a build in make test; this run in make soak)
    pytest.param(2, 2, 3, 8, 32, 5, 0.3, marks=pytest.mark.soak),
])
def test_core_windows_through_memory(layers, kv_heads, contexts, bus, n_hp, latency, pauses):
    """A build holding fewer cluster windows than the model has: every hash, cluster,
    selection, fetched token and output row still equals golden.core.run_stream; the
    windows were swapped (the counter) and the images are in the CTX_BASE area."""
    from .e2e import compare_run, compare_windows, plan_stream, synthetic_stream
    from .sim_core import run_core
    geo = {**TINY, "n_layers": layers, "n_kv_heads": kv_heads, "n_q_heads": 2 * kv_heads}
    tr, qt = synthetic_stream(5, **geo)
    cfg = tiny_config("tuned", n_layers=layers, n_kv_heads=kv_heads, n_q_heads=2 * kv_heads,
                      hash_scope="per_head" if kv_heads > 1 else "concat",
                      hcu_contexts=contexts, kvmu_bus_bytes=bus, kvmu_blocks=128, n_hp=n_hp,
                      attn_b_rows=max(32, n_hp))
    assert cfg.contexts < cfg.windows
    plan = plan_stream(tr, qt, cfg)
    obs, info = run_core(plan, latency=latency, bus_pauses=pauses, seed=7,
                         max_cycles=400_000)
    assert not compare_run(plan, obs), compare_run(plan, obs)
    assert info["error"] & 0xFF == 0, hex(info["error"])
    assert info["perf"]["core_descriptors"] == len(plan.descriptors)
    assert info["perf"]["core_swap"] > 0
    checked, bad = compare_windows(plan, info["mem"].read_bytes)
    assert checked and not bad, (checked, bad)


@pytest.mark.parametrize("hpg", [1, 3, 4, 7])
def test_blocks_per_group_follows_the_register(hpg):
    """NEAR_BLOCKS and FAR_BLOCKS count KV blocks; the KVMU takes logical blocks of a hash
    group (``blocks // hpg``): a shift, or a divider a bit a cycle that follows each write
    within 33 cycles."""
    from amaranth.hdl import Module, Signal
    from amaranth.sim import Simulator
    from rtl.core.core import VrexCore
    m = Module()
    blocks = Signal(32)
    out = VrexCore._per_group(m, blocks, hpg, "slots")
    m.d.sync += Signal(name="tick").eq(1)       # a clock domain also for the shift
    sim = Simulator(m)
    sim.add_clock(1e-6)
    seen = []

    async def bench(ctx):
        for v in (0, 1, 2, 3, 4095, 4096, 123457, (1 << 32) - 1, 17):
            ctx.set(blocks, v)
            await ctx.tick().repeat(34)
            seen.append((v, ctx.get(out)))
    sim.add_testbench(bench)
    sim.run()
    assert all(got == v // hpg for v, got in seen), seen
