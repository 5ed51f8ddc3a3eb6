"""The core's benchmark under Verilator (``make bench``, ``make demo``): the bundled trace end
to end (its first ``VREX_STEPS`` steps, 4 by default: the prompt and three frames; ``make
soak`` runs the whole trace), under both presets, cycles never wall time.

The host writes one descriptor at a time and reads the core's counters after each, so every
descriptor's cycles split into its phases (prediction: candidate lists, scoring, selection;
attention: the fetch, the attended set's rows and the output; hashing; storing). Each
descriptor's output rows are compared with ``golden.core.run_stream`` (PASS/FAIL per step and
layer); the stream monitors are off for speed (the test suite runs them). The memory answers
every read ``VREX_BENCH_LATENCY`` cycles (0 by default) after its address, without pauses. A
build whose ``attn_b_rows`` cannot hold the trace's longest attended set is benchmarked with
``attn_b_rows`` 1024 (``verif.bench`` says so in the report). Writes ``BENCH_OUT`` (JSON) and
``core.png`` beside it: cycles per descriptor against the tokens cached, per phase.

Then (unless ``VREX_QUEUED=0``, as the cycle model's runs set) each stream again from a soft
reset, queued as a host that keeps the queue full would: in the select-first order the
descriptors overlap (a descriptor's first counts list is taken while the one before attends,
docs/core.md; the cluster-first order takes none ahead), so
only the whole stream's cycles and the lists taken ahead (``core_ahead``) are reported,
against the one-at-a-time run's, the outputs compared again.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from cocotb.triggers import ClockCycles

from verif.core.tb import OFF, CoreTB, _descriptor_ok, preset_plans, trace_plans
from verif.lib.cocotb_tb import LONG_LIMIT_MS, test
from verif.lib.runner import tb_config
from vrex import regmap

PHASES = ("core_predict", "core_attend", "core_hash", "core_swap", "core_store")


def stream_plans(cfg, spec: dict | None = None):
    """The streams a run measures, ``[(name, StreamPlan)]``: ``spec``, or ``VREX_MEASURE``
    (JSON), names them, else the bundled trace's first ``VREX_STEPS`` steps under both
    presets.
    ``{"trace": path or "bundled", "layers": [...], "steps": n, "presets": [...]}`` cuts a
    real trace to the build's layers; ``{"synthetic": {synthetic_trace's arguments},
    "presets": [...]}`` makes a seeded synthetic stream of the build's geometry."""
    from golden.trace import cut_trace, load_trace, quantise, synthetic_trace
    if spec is None:
        spec = json.loads(os.environ.get("VREX_MEASURE") or "{}")
    if not spec:
        return trace_plans(cfg)
    if "synthetic" in spec:
        tr = synthetic_trace(n_layers=cfg.n_layers, n_q_heads=cfg.n_q_heads,
                             n_kv_heads=cfg.n_kv_heads, head_dim=cfg.head_dim,
                             **spec["synthetic"])
    else:
        from verif.lib.traces import BUNDLED
        tr = load_trace(BUNDLED if spec["trace"] == "bundled" else spec["trace"])
        steps = min(spec.get("steps") or tr.n_steps, tr.n_steps)
        layers = spec.get("layers", range(len(tr.layers)))
        tr = cut_trace(tr, range(steps), layers, f"{tr.name}_cut")
    return preset_plans(tr, quantise(tr), cfg, spec.get("presets", ["paper", "tuned"]),
                        spec.get("steps"))


def golden_features(ls, moves=(), b_rows=None) -> dict:
    """A descriptor's row: where it is in the stream and the sizes the cycle model reads."""
    from golden.cycles import descriptor_sizes
    return {"step": ls.step, "layer": ls.layer, "cached": ls.token0,
            **descriptor_sizes(ls, moves, b_rows),
            "attended": [h.attended for h in ls.heads],
            "candidates": [len(h.clusters) for h in ls.heads]}


async def measure(dut, tb, cfg, plans) -> dict:
    """Each plan's descriptors one at a time, the core's counters read around each: a row
    per descriptor (its golden features, its cycles per phase, PASS/FAIL of its output)."""
    from golden.core import window_moves
    from golden.cycles import moved_blocks, opened_tokens
    from verif.core.tb import soft_reset
    report = {}
    for k, (preset, plan) in enumerate(plans):
        moves = window_moves(plan.golden, plan.cfg)
        if k:
            await soft_reset(tb)
        for addr, raw in plan.image.items():
            tb.ram.write(addr, raw)
        for off, value in plan.registers:
            await tb.write(off, value)
        rows = []
        opened = opened_tokens(plan.golden)
        moved = moved_blocks(plan.golden, plan.cfg)
        done0 = await tb.read(OFF["DESC_DONE"])
        for i, desc in enumerate(plan.descriptors):
            before = await tb.counters()
            c0 = tb.cycle
            for w in regmap.encode_descriptor(**desc):
                await tb.write(OFF["DESC_DATA"], w)
            while await tb.read(OFF["DESC_DONE"]) < done0 + i + 1:
                await ClockCycles(dut.clk, 50)
            after = await tb.counters()
            tb.obs.o_rows.append(plan.o_rows(lambda a, n: bytes(tb.ram.read(a, n)), i))
            rows.append({**golden_features(plan.golden[i], moves[i], plan.cfg.attn_b_rows),
                         "opened": opened[i], "moved": list(moved[i]),
                         "cycles": after["core_busy"] - before["core_busy"],
                         "host_cycles": tb.cycle - c0,
                         **{p[5:]: after[p] - before[p] for p in PHASES},
                         "ok": _descriptor_ok(plan, tb.obs, i)})
        err = await tb.read(OFF["ERROR_CODE"])
        report[preset] = {"rows": rows, "error_code": err,
                          "pass": all(r["ok"] for r in rows) and err & 0xFF == 0,
                          "cycles": sum(r["cycles"] for r in rows)}
        tb.obs.o_rows = []
    return report


async def measure_queued(dut, tb, plans, serial: dict) -> dict:
    """Each plan again from a soft reset, its descriptors written as the queue takes them:
    the stream's busy cycles and lists taken ahead, against ``serial`` (:func:`measure`)."""
    from golden.cycles import lists_ahead
    from verif.core.tb import soft_reset
    out = {}
    for preset, plan in plans:
        await soft_reset(tb)
        tb.obs.o_rows = []                      # run_plan appends the plan's rows
        err = await tb.run_plan(plan)
        perf = await tb.counters()
        ok = all(_descriptor_ok(plan, tb.obs, i) for i in range(len(plan.descriptors)))
        one = serial[preset]["cycles"]
        out[preset] = {"cycles": perf["core_busy"], "one_at_a_time": one,
                       "saved": one - perf["core_busy"],
                       "saved_pct": 100.0 * (one - perf["core_busy"]) / max(one, 1),
                       "ahead": perf["core_ahead"],
                       "ahead_possible": sum(lists_ahead(plan.golden, plan.cfg.core_max_tokens,
                                                          plan.cfg.order)),
                       "error_code": err, "pass": ok and err & 0xFF == 0}
    return out


@test(limit_ms=LONG_LIMIT_MS)
async def bench_trace(dut):
    cfg = tb_config()
    os.environ["VREX_TAPS"] = "0"
    os.environ.setdefault("VREX_STEPS", "4")
    lat = int(os.environ.get("VREX_BENCH_LATENCY", 0))
    tb = CoreTB(dut, latency=(lat, lat) if lat else (0, 0), seed=1)
    await tb.start()
    report = {"config": cfg.to_dict(), "latency": lat,
              "stream": json.loads(os.environ.get("VREX_MEASURE") or "{}") or "bundled",
              "presets": await measure(dut, tb, cfg, plans := stream_plans(cfg))}
    if os.environ.get("VREX_QUEUED", "1") != "0":
        report["queued"] = await measure_queued(dut, tb, plans, report["presets"])
    out = Path(os.environ["BENCH_OUT"])
    out.write_text(json.dumps(report, indent=1))
    if os.environ.get("VREX_FIGURE", "1") != "0":
        _figure(report, out.with_suffix(".png"))
    assert all(p["pass"] for p in report["presets"].values()), \
        "the core's output differs from the golden model (see the report's rows)"
    assert all(q["pass"] for q in report.get("queued", {}).values()), \
        "queued, the core's output differs from the golden model"


def _figure(report, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(report["presets"]), figsize=(6 * len(report["presets"]), 4),
                             squeeze=False)
    for ax, (preset, p) in zip(axes[0], report["presets"].items()):
        rows = [r for r in p["rows"] if r["layer"] == 0]
        x = [r["cached"] for r in rows]
        bottom = [0] * len(rows)
        for ph in PHASES:
            y = [r[ph[5:]] for r in rows]
            ax.bar(x, y, bottom=bottom, width=30, label=ph[5:])
            bottom = [b + v for b, v in zip(bottom, y)]
        ax.set_xlabel("tokens cached before the step")
        ax.set_ylabel("cycles (layer 0 descriptor)")
        ax.set_title(f"bundled trace, {preset}: cycles per phase")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def summary(report: dict) -> list[str]:
    out = []
    for preset, p in report["presets"].items():
        rows = p["rows"]
        tot = {ph[5:]: sum(r[ph[5:]] for r in rows) for ph in PHASES}
        all_c = sum(tot.values()) or 1
        out.append(f"{'PASS' if p['pass'] else 'FAIL'} {preset}: {len(rows)} descriptors "
                   f"(steps x layers) bit-exact, {p['cycles']} cycles; "
                   + ", ".join(f"{k} {100 * v / all_c:.1f}%" for k, v in tot.items()))
        steps = sorted({r["step"] for r in rows})
        line = " ".join(f"s{s}:" + "".join("P" if r["ok"] else "F" for r in rows
                                          if r["step"] == s) for s in steps)
        out.append(f"  per step (a letter per layer): {line}")
        if q := report.get("queued", {}).get(preset):
            out.append(f"  queued: {q['cycles']} cycles, {q['saved']} ({q['saved_pct']:.2f}%) "
                       f"fewer than one at a time; {q['ahead']} of {q['ahead_possible']} "
                       f"descriptors' first counts lists taken ahead "
                       f"({'PASS' if q['pass'] else 'FAIL'})")
    return out
