"""HCU, fast tier: the Amaranth simulator against the golden block model."""
import numpy as np
import pytest

from rtl import HashClusterUnit
from verif.lib.amaranth_sim import run_streams, stream_through
from verif.lib.pauses import CROSSINGS
from verif.lib.scoreboard import compare
from vrex.config import Config
from vrex.rules import ParameterError

from .model import Token, expected, frames, layered_stream, structured_hashes, swap_plan


def run(cfg, tokens, *, cross="none", seed=0, window_init=None):
    """Drive ``tokens`` into the HCU built and set from ``cfg`` under a crossing; compare every
    beat and the counters with the golden model. Returns beats, output cycles, counters.
    ``window_init``: the window memory's power-up words (default zero)."""
    dut = HashClusterUnit.from_config(cfg)
    if window_init is not None:
        dut.window_init = window_init
    regs = [(getattr(dut, k), v) for k, v in cfg.block_registers("hcu").items()]
    got, when, perf = run_streams(dut, [t.beat() for t in tokens], len(tokens), regs=regs,
                                  cross=cross, seed=seed, max_cycles=200 * (len(tokens) + 10) *
                                  max(1, dut.window // dut.lanes))
    want = expected(tokens, cfg)
    compare(got, want, what="token")
    assert perf["opened"] == sum(w["opened"] for w in want)
    assert perf["joined"] == len(want) - perf["opened"]
    return got, when, perf


def point(**kw) -> Config:
    """A build of one layer context with the given fields."""
    return Config(n_layers=1, **kw)


SWEEP = {"h16-l4-w16": point(n_hp=16, hcu_lanes=4, window=16),
         "h32-l4-w64": point(n_hp=32, hcu_lanes=4, window=64),
         "h32-l16-w64": point(n_hp=32, hcu_lanes=16, window=64),
         "h64-l8-w32": point(n_hp=64, hcu_lanes=8, window=32),
         "h8-l1-w4": point(n_hp=8, hcu_lanes=1, window=4),
         "h32-l16-w16": point(n_hp=32, hcu_lanes=16, window=16)}


@pytest.mark.parametrize("cross", CROSSINGS)
@pytest.mark.parametrize("name", SWEEP)
def test_random_streams(name, cross):
    cfg = SWEEP[name]
    cfg = cfg.replace(th_hd=cfg.n_hp // 4, max_age=3)
    rng = np.random.default_rng(cfg.window + cfg.n_hp + list(CROSSINGS).index(cross))
    n = 3 * cfg.window + 20                    # enough to wrap the window
    hashes = structured_hashes(rng, n, cfg.n_hp, flips=cfg.n_hp // 4)
    steps = np.sort(rng.integers(0, 12, n))
    run(cfg, frames(hashes, steps), cross=cross, seed=7)


@pytest.mark.parametrize("cap", [1, 2, 5])
@pytest.mark.parametrize("name", ["h16-l4-w16", "h32-l16-w64", "h8-l1-w4"])
def test_cluster_cap(name, cap):
    """``cluster_cap`` set: a token whose nearest cluster is full opens one. Structured hashes
    (clusters that would grow past the cap) under back-pressure and idle cycles, beat for
    beat with the golden model; the cap changes the clustering there, and no cluster grows
    past it."""
    cfg = SWEEP[name].replace(th_hd=SWEEP[name].n_hp // 4, max_age=None, cluster_cap=cap)
    rng = np.random.default_rng(cfg.window + cap)
    n = 2 * cfg.window + 30
    toks = frames(structured_hashes(rng, n, cfg.n_hp, flips=cfg.n_hp // 8),
                  np.sort(rng.integers(0, 6, n)))
    assert expected(toks, cfg) != expected(toks, cfg.replace(cluster_cap=None))
    got, _, _ = run(cfg, toks, cross="both", seed=cap)
    assert max(int(g["count"]) for g in got) == cap


def test_cluster_cap_by_hand():
    """Cap 2, five equal hashes: tokens 1-2 fill cluster 0, token 3 opens cluster 1 (its
    nearest, cluster 0, is full), token 4 joins cluster 1 (a tie at distance 0: the most
    recent), token 5 opens cluster 2; a sixth hash 1 bit away joins cluster 2."""
    cfg = point(n_hp=8, hcu_lanes=2, window=4, th_hd=2, cluster_cap=2)
    toks = [Token(0x3C, first=1), *[Token(0x3C)] * 4, Token(0x3D, last=1)]
    got, _, perf = run(cfg, toks)
    assert [(g["cluster"], g["opened"], g["distance"], g["count"]) for g in got] == [
        (0, 1, 9, 1), (0, 0, 0, 2), (1, 1, 0, 1), (1, 0, 0, 2), (2, 1, 0, 1), (2, 0, 1, 2)]
    assert perf["opened"] == 3


@pytest.mark.parametrize("name", ["h16-l4-w16", "h8-l1-w4", "h32-l16-w16"])
def test_unwritten_window_slots_do_not_matter(name):
    """The window memory powered up with random words (what a 4-state simulator sees as X):
    every beat still equals the golden model's, from the first token on and while the
    window fills."""
    cfg = SWEEP[name].replace(th_hd=SWEEP[name].n_hp // 4, max_age=3)
    rng = np.random.default_rng(11)
    dut = HashClusterUnit.from_config(cfg)
    fields = dict(dut.entry_layout.members)
    # random hashes and counts, opening steps among the stream's (so stale slots look young)
    init = [[{"hash": int(rng.integers(0, 1 << int(fields["hash"]))),
              "step": int(rng.integers(0, 6)), "count": int(rng.integers(0, 9))}
             for _ in range(dut.lanes)] for _ in range(max(2, cfg.window // cfg.hcu_lanes))]
    n = 2 * cfg.window + 5
    hashes = structured_hashes(rng, n, cfg.n_hp, flips=cfg.n_hp // 4)
    run(cfg, frames(hashes, np.sort(rng.integers(0, 6, n))), cross="both", seed=3,
        window_init=init)


@pytest.mark.parametrize("cross", ["none", "both"])
def test_bad_tokens_are_refused(cross):
    """A layer beyond the contexts (code 1) and a step older than the layer's last (code 2)
    are dropped (no beat, no state change) and counted; the first error's code is kept; the
    tokens around them cluster as the golden model says."""
    from golden.hcu import hcu_reference
    cfg = Config(n_layers=3, n_hp=16, hcu_lanes=4, window=16, th_hd=5, max_age=4)
    rng = np.random.default_rng(5)
    hs = structured_hashes(rng, 40, 16, flips=3)
    toks = [Token(int(h), k % 3, 2 + k // 8, 0, 0) for k, h in enumerate(hs)]
    toks[5] = Token(int(hs[5]), 3, 2, 0, 0)            # layer 3 of 3 contexts: code 1
    toks[17] = Token(int(hs[17]), 1, 1, 0, 0)           # step 1 after step 3: code 2
    toks[30] = Token(int(hs[30]), 3, 9, 0, 0)
    errors = []
    want = [dict(w, opened=int(w["opened"])) for w in hcu_reference(toks, cfg, errors=errors)]
    assert [c for c, _ in errors] == [1, 2, 1] and len(want) == 37
    dut = HashClusterUnit.from_config(cfg)
    regs = [(getattr(dut, k), v) for k, v in cfg.block_registers("hcu").items()]
    got, _, info = run_streams(dut, [t.beat() for t in toks], len(want), regs=regs,
                               cross=cross, seed=2, max_cycles=50_000,
                               read={"error": dut.error, "error_code": dut.error_code})
    compare(got, want, what="token")
    assert (info["error"], info["error_code"], info["refused"]) == (1, 1, 3)


@pytest.mark.parametrize("max_age", [None, 0, 2])
def test_directed_cases(max_age):
    cfg = point(n_hp=8, hcu_lanes=4, window=8, th_hd=3, max_age=max_age)
    toks = [Token(0x00, step=0, first=1), Token(0x00, step=0), Token(0x00, step=0),    # equal
            Token(0x03, step=1, first=1),            # distance Th_hd - 1 (th 3): joins
            Token(0x07, step=1),                      # distance Th_hd: opens
            Token(0xFF, step=2, first=1), Token(0xF0, step=2), Token(0x0F, step=2),
            Token(0x3C, step=3, first=1),             # ties between clusters
            Token(0x00, step=5, first=1),             # clusters aged out at A = 2
            ] + [Token(1 << (i % 8) | 0x80 * (i % 2), step=6, first=int(i == 0))
                 for i in range(12)]                  # all different: the window wraps
    run(cfg, toks)


def test_ages_exactly_at_limit():
    cfg = point(n_hp=8, hcu_lanes=2, window=4, th_hd=3, max_age=5)
    toks = [Token(0x00, step=0, first=1), Token(0x01, step=4, first=1),
            Token(0x01, step=10, first=1), Token(0x01, step=15, first=1)]
    got, _, _ = run(cfg, toks)
    assert [g["opened"] for g in got] == [1, 0, 1, 0]


def test_count_saturates():
    cfg = point(n_hp=8, hcu_lanes=2, window=4, count_bits=2, th_hd=2)
    got, _, _ = run(cfg, [Token(0x11, first=int(i == 0)) for i in range(6)])
    assert [g["count"] for g in got] == [1, 2, 3, 3, 3, 3]


def test_layer_contexts_are_separate():
    cfg = Config(n_layers=3, n_hp=16, hcu_lanes=4, window=16, th_hd=4)
    rng = np.random.default_rng(3)
    hashes = structured_hashes(rng, 150, 16, flips=5)
    layers = [(i // 10) % 3 for i in range(150)]      # switches every 10 tokens, mid-step
    steps = [i // 30 for i in range(150)]
    run(cfg, frames(hashes, steps, layers), cross="both")


def test_throughput_full_window():
    """With the window full and o always ready, a token takes cycles_per_token(W) cycles."""
    cfg = point(n_hp=32, hcu_lanes=4, window=32, th_hd=2)
    dut = HashClusterUnit.from_config(cfg)
    rng = np.random.default_rng(5)
    hashes = [int(x) for x in rng.integers(0, 2**32, 80, dtype=np.uint64)]
    got, when, perf = run(cfg, frames(hashes, [0] * 80))
    gaps = np.diff(when)
    assert (gaps[40:] == dut.cycles_per_token(32)).all()
    assert (gaps[:3] == [dut.cycles_per_token(1), dut.cycles_per_token(2),
                         dut.cycles_per_token(3)]).all()
    assert perf["stalled"] == 0
    assert perf["comparisons"] == sum(min(k, 32) for k in range(80))


def params(**kw) -> dict:
    return {**Config().block_params("hcu"), **kw}


@pytest.mark.parametrize("kw, err, msg", [
    (dict(lanes=12), ValueError, "lanes must be a positive power of two, not 12"),
    (dict(window=100), ValueError, "window must be a positive power of two, not 100"),
    (dict(window=8, lanes=16), ValueError, "window must be at least lanes (16), not 8"),
    (dict(n_hp=65), ValueError, "n_hp must be at most 64, not 65"),
    (dict(n_hp=0), TypeError, "n_hp must be a positive integer, not 0"),
    (dict(layers=2.0), TypeError, "layers must be a positive integer, not 2.0"),
    (dict(id_bits=10), ValueError, "id_bits must exceed log2(window) (10), not 10"),
])
def test_bad_parameters(kw, err, msg):
    with pytest.raises(err) as e:
        HashClusterUnit(**params(**kw))
    assert str(e.value) == msg
    assert isinstance(e.value, ParameterError)


def test_parameters_are_required():
    with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'lanes'"):
        HashClusterUnit(**{k: v for k, v in params().items() if k != "lanes"})


def test_properties():
    dut = HashClusterUnit.from_config(Config(n_layers=2, n_hp=16, hcu_lanes=8, window=64))
    assert (dut.n_hp, dut.lanes, dut.window, dut.layers) == (16, 8, 64, 2)
    # (hash and step padded to whole 9-bit bytes, 36 bits; the count likewise, 18)
    assert dut.memory_bits == 2 * 64 * (36 + 18)
    assert dut.cycles_per_token(0) == 1 + dut.latency
    assert dut.cycles_per_token(64) == 8 + dut.latency
    with pytest.raises(AttributeError):
        dut.lanes = 4


# --- layer contexts saved and restored (more layers than contexts) ----------------------------

def run_swapped(cfg, contexts, tokens, *, seed=0, pause=0.3, bad=()):
    """The HCU built with ``contexts`` layer contexts runs a stream of ``cfg.n_layers`` layers
    as a core would (:func:`verif.hcu.model.swap_plan`: a slot's window saved and the next
    layer's loaded, or the slot flushed, at every layer switch), every stream paused at
    random. Every beat must equal the golden model's with all layers on chip, and every saved
    header its layer's clusters opened and last step. ``bad``: context commands naming a slot
    beyond the contexts, sent first (each refused: an empty image out, or its image
    consumed). Returns the images' sizes in words and the counters."""
    from amaranth.sim import Simulator

    from verif.lib.counters import read_sim
    from verif.lib.payload import pack, unpack
    dut = HashClusterUnit.from_config(cfg.replace(hcu_contexts=contexts))
    regs = [(getattr(dut, k), v) for k, v in cfg.block_registers("hcu").items()]
    want = expected(tokens, cfg)
    got, sizes, perf = [], [], {}
    rng = np.random.default_rng(seed)
    hdr, W = dut.header_layout, dut.window
    op = {"save": dut.SAVE, "load": dut.LOAD, "flush": dut.FLUSH}

    def paused():
        return rng.random() < pause

    async def command(ctx, code, slot):
        ctx.set(dut.i_ctx.payload.as_value(), pack(dut.ctx_layout, {"op": code, "layer": slot}))
        ctx.set(dut.i_ctx.valid, 1)
        await ctx.tick().until(dut.i_ctx.ready)
        ctx.set(dut.i_ctx.valid, 0)

    async def receive(ctx):
        words, n = [], None
        while n is None or len(words) < n:
            ready = not paused()
            ctx.set(dut.o_ctx.ready, ready)
            if ready and ctx.get(dut.o_ctx.valid):
                words.append(ctx.get(dut.o_ctx.payload))
                if n is None:
                    n = 1 + min(W, unpack(hdr, words[0])["n_open"])
            await ctx.tick()
        ctx.set(dut.o_ctx.ready, 0)
        return words

    async def send(ctx, words):
        for w in words:
            while paused():
                ctx.set(dut.i_ctxd.valid, 0)
                await ctx.tick()
            ctx.set(dut.i_ctxd.payload, w)
            ctx.set(dut.i_ctxd.valid, 1)
            await ctx.tick().until(dut.i_ctxd.ready)
        ctx.set(dut.i_ctxd.valid, 0)

    async def bench(ctx):
        for sig, v in regs:
            ctx.set(sig, v)
        for code, slot in bad:
            await command(ctx, code, slot)
            if code == dut.SAVE:
                assert await receive(ctx) == [0], "a refused SAVE sends one zero header"
            elif code == dut.LOAD:
                await send(ctx, [pack(hdr, {"n_open": 3, "last_step": 9}), 1, 2, 3])
        images, opened, last, layer_of = {}, {}, {}, {}
        for kind, slot, arg in swap_plan(tokens, contexts):
            if kind == "tokens":
                beats = await stream_through(ctx, dut.i, dut.o, [t.beat() for t in arg],
                                             len(arg), src_paused=paused, snk_paused=paused)
                layer = layer_of[slot]
                got.extend(dict(b, layer=layer) for b in beats)
                opened[layer] = opened.get(layer, 0) + sum(b["opened"] for b in beats)
                last[layer] = arg[-1].step
                continue
            await command(ctx, op[kind], slot)
            if kind == "save":
                img = images[arg] = await receive(ctx)
                h = unpack(hdr, img[0])
                assert (h["n_open"], h["last_step"]) == (opened.get(arg, 0), last.get(arg, 0)), \
                    f"layer {arg}'s saved header {h}"
                sizes.append(len(img))
            else:
                if kind == "load":
                    await send(ctx, images[arg])
                layer_of[slot] = arg
        for _ in range(4):
            await ctx.tick()
        perf.update(read_sim(ctx, dut))
        perf["error_code"] = ctx.get(dut.error_code)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    compare(got, want, what="token")
    return sizes, perf


@pytest.mark.parametrize("name, contexts", [("h16-l4-w16", 2), ("h8-l1-w4", 1),
                                            ("h32-l16-w16", 3), ("h32-l4-w64", 2)])
def test_layers_beyond_contexts(name, contexts):
    """Five layers on 1 to 3 contexts: every layer switch saves a slot's window and loads
    (or flushes) the next layer's; the clusters equal the golden model's with every layer on
    chip. The windows wrap, so images are full."""
    cfg = SWEEP[name].replace(n_layers=5)
    cfg = cfg.replace(th_hd=cfg.n_hp // 4, max_age=4)
    toks = layered_stream(cfg, 6 * cfg.window + 40, seed=cfg.window + contexts)
    sizes, perf = run_swapped(cfg, contexts, toks, seed=contexts)
    assert max(sizes) == 1 + cfg.window, "no image was full"
    assert perf["error_code"] == 0


def test_context_commands_refused():
    """A context command naming a slot beyond the contexts: error 3, counted; a SAVE sends an
    empty image, a LOAD consumes its image and changes nothing; the stream then runs exactly."""
    cfg = SWEEP["h16-l4-w16"].replace(n_layers=3, th_hd=4)
    toks = layered_stream(cfg, 80, seed=4)
    dut = HashClusterUnit.from_config(cfg.replace(hcu_contexts=3))
    _, perf = run_swapped(cfg, 3, toks, bad=[(dut.SAVE, 3), (dut.LOAD, 3), (dut.FLUSH, 3)])
    assert perf["error_code"] == 3 and perf["refused"] == 3


def test_registers_taken_per_run():
    """th_hd and max_age are taken with a run's first token: changed (4 -> 1, no age limit ->
    0) while run A's two tokens are still in the unit (``o`` held), they apply from run B on.
    Hand-computed: A's second token joins at distance 3 (< 4; it would open at 1); B's first
    opens (cluster 0 is a step old, over age 0), its second opens (distance 6), its third
    joins (distance 0)."""
    from amaranth.sim import Simulator

    cfg = point(n_hp=8, hcu_lanes=2, window=4, th_hd=4, max_age=None)
    dut = HashClusterUnit.from_config(cfg)
    a = [Token(0x00, step=0, first=1), Token(0x07, step=0, last=1)]       # distance 3
    b = [Token(0x07, step=1, first=1), Token(0x70, step=1), Token(0x70, step=1, last=1)]
    after = cfg.replace(th_hd=1, max_age=0)
    none = cfg.n_hp + 1                     # the distance reported when nothing was eligible
    want = [dict(token=k, cluster=c, opened=o, distance=d, count=n, layer=0, first=t.first,
                 last=t.last)
            for (k, c, o, d, n), t in zip([(0, 0, 1, none, 1), (1, 0, 0, 3, 2),
                                           (0, 1, 1, none, 1), (1, 2, 1, 6, 1),
                                           (2, 2, 0, 0, 2)], a + b)]
    assert expected(a, cfg) == want[:2] and expected(a, after)[1]["opened"] == 1
    got, sent = [], [0]

    def taken(ctx, k):                       # o held low until both of A's tokens are in
        sent[0] = k
        if k == len(a):
            for name, v in after.block_registers("hcu").items():
                ctx.set(getattr(dut, name), v)

    async def bench(ctx):
        for k, v in cfg.block_registers("hcu").items():
            ctx.set(getattr(dut, k), v)
        got.extend(await stream_through(ctx, dut.i, dut.o, [t.beat() for t in a + b],
                                        len(want), snk_paused=lambda: sent[0] < len(a),
                                        on_taken=taken))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    compare(got, want, what="token")
