"""Attention-engine benchmark under Verilator (``make bench``): commands with every operand
stream valid and every output ready; cycles from the engine's own transfers, never wall
time; every output still compared with the golden model. Writes ``BENCH_OUT`` (JSON, with
the Config it measured); :func:`summary` makes the lines ``make bench`` prints.
"""
from __future__ import annotations

import json
import os

import numpy as np

from golden.numerics import ExpUnit
from verif.attn.model import (attend_chunked_command, attend_command, empty_ports, gemm_command, random_int8,
                              score_command, trace_attend_commands, trace_hash_commands,
                              trace_score_commands)
from verif.attn.tb import EngineTB
from verif.lib.cocotb_tb import LONG_LIMIT_MS, test


async def _measure(tb, ports, want_gemm, want_hash, macs: int, want_score=(),
                   want_attn=()) -> dict:
    await tb.reset()
    t0 = len(tb.source["cmd"].stamps)
    perf = await tb.run(ports, want_gemm, want_hash, want_score, want_attn)
    sink = tb.sink["o_gemm" if want_gemm else "o_hash" if want_hash else
                   "o_score" if want_score else "o_attn"]
    cycles = sink.stamps[-1] - tb.source["cmd"].stamps[t0] + 1
    n = tb.model.n
    return {"cycles": int(cycles), "useful_macs": int(macs),
            "mac_utilisation": macs / (n * n * cycles), "array_beats": perf["beats"],
            "feed_stalled": perf["feed_stalled"], "out_stalled": perf["out_stalled"]}


@test(limit_ms=LONG_LIMIT_MS)
async def bench(dut):
    tb = EngineTB(dut)
    await tb.start()
    n = tb.model.n
    rng = np.random.default_rng(1)
    report = {"config": tb.cfg.to_dict(), "n": n, "gemm": {}}
    for m, k, l in ((256, 256, 256), (256, 64, 256), (64, 192, 32)):
        if k > tb.model.k_buf or l > tb.model.b_rows:
            continue
        ports = empty_ports()
        want = gemm_command(ports, random_int8(rng, (m, k)), random_int8(rng, (l, k)), n)
        r = await _measure(tb, ports, want, [], m * k * l)
        r["model_cycles"] = tb.model.command_cycles(m, k, l) + 1
        report["gemm"][f"{m}x{k}x{l}"] = r
    # hashing a frame: the bundled trace's step 5, every layer context, paper preset
    for preset in ("paper", "tuned"):
        ports, want, tokens, run_cfg = trace_hash_commands(preset, tb.cfg, steps=[5])
        hd = run_cfg.hash_dim
        r = await _measure(tb, ports, [], want, len(tokens) * hd * run_cfg.n_hp)
        r["tokens"] = len(tokens)
        r["cycles_per_token"] = r["cycles"] / len(tokens)
        report[f"hash_{preset}"] = r
    # cluster scoring: one KV head's query rows against its candidates, then the real trace
    report["score"] = {}
    unit = ExpUnit.for_config(3e-3, tb.cfg)
    k = min(64, tb.model.score_k_max)
    for m, l in ((64, 256), (228, 64), (228, 32)):
        if l > tb.model.b_rows:
            continue
        ports = empty_ports()
        want = score_command(ports, random_int8(rng, (m, k)), random_int8(rng, (l, k)),
                             rng.integers(1, 50, l), unit, tb.cfg)
        r = await _measure(tb, ports, [], [], m * k * l, want)
        r["cycles_per_row"] = r["cycles"] / m
        r["cycles_per_candidate"] = r["cycles"] / l
        report["score"][f"{m}x{k}x{l}"] = r
    for preset in ("paper", "tuned"):
        ports, want, heads, _ = trace_score_commands(preset, tb.cfg, n_groups=8)
        rows = sum(len(h) for h in heads)
        pairs = sum(len(h) * len(h[0].score) for h in heads)
        k = ports["cmd"][0]["k"]
        r = await _measure(tb, ports, [], [], pairs * k, want)
        r.update(commands=len(heads), rows=rows, row_candidates=pairs,
                 cycles_per_row=r["cycles"] / rows,
                 cycles_per_row_candidate=r["cycles"] / pairs,
                 candidates_mean=pairs / rows)
        report[f"score_{preset}"] = r
    # light attention: rows over l tokens (Q·Kᵀ and P·V both count: 2·m·d·l MACs)
    report["attend"] = {}
    d = min(64, tb.model.score_k_max)
    for m, l, c in ((64, 256, 0), (228, 256, 76), (64, 128, 0), (64, 64, 0), (8, 256, 0)):
        if l > tb.model.b_rows:
            continue
        ports = empty_ports()
        want = attend_command(ports, random_int8(rng, (m, d)), random_int8(rng, (l, d)),
                              random_int8(rng, (l, d)), c, unit, tb.cfg)
        r = await _measure(tb, ports, [], [], 2 * m * d * l, (), want)
        r["cycles_per_row"] = r["cycles"] / m
        r["causal"] = c
        report["attend"][f"{m}x{d}x{l}" + (f"_causal{c}" if c else "")] = r
    for preset in ("paper", "tuned"):
        ports, want, picks = trace_attend_commands(preset, tb.cfg, n_groups=6)
        cmds = ports["cmd"]
        macs = sum(2 * c["m"] * c["k"] * c["l"] for c in cmds)
        r = await _measure(tb, ports, [], [], macs, (), want)
        rows = sum(c["m"] for c in cmds)
        r.update(commands=len(cmds), rows=rows, cycles_per_row=r["cycles"] / rows,
                 tokens_mean=sum(c["m"] * c["l"] for c in cmds) / rows)
        report[f"attend_{preset}"] = r
    # light attention over sets longer than B: chunked commands of b_rows tokens (per row
    # tile a maximum's pass and a sums' pass, each chunk's K/V loaded again every time)
    from golden.attn import chunk_lengths
    report["attend_long"] = {}
    B = tb.model.b_rows
    for m, l, c in ((64, 2 * B, 0), (8, 4 * B, 0), (228, 2 * B, 76)):
        ports = empty_ports()
        want = attend_chunked_command(ports, random_int8(rng, (m, d)),
                                      random_int8(rng, (l, d)), random_int8(rng, (l, d)), c,
                                      unit, tb.cfg, chunk_lengths(l, B))
        r = await _measure(tb, ports, [], [], 2 * m * d * l, (), want)
        r.update(cycles_per_row=r["cycles"] / m, causal=c, commands=len(ports["cmd"]))
        report["attend_long"][f"{m}x{d}x{l}" + (f"_causal{c}" if c else "")] = r
    for preset in ("paper", "tuned"):
        ports, want, picks = trace_attend_commands(preset, tb.cfg, n_groups=2, long=True)
        rows = sum(c["m"] for c in ports["cmd"] if c["part"] == 2 and c["first"])
        tokens = [int(p[5].sum()) for p in picks]
        macs = sum(2 * c["m"] * c["k"] * c["l"] for c in ports["cmd"] if c["part"] == 2)
        r = await _measure(tb, ports, [], [], macs, (), want)
        r.update(commands=len(ports["cmd"]), rows=rows, cycles_per_row=r["cycles"] / rows,
                 tokens=tokens)
        report[f"attend_long_{preset}"] = r
    out = os.environ.get("BENCH_OUT")
    if out:
        with open(out, "w") as f:
            json.dump(report, f, indent=1)


def summary(r: dict) -> list[str]:
    lines = [f"engine, {r['n']}x{r['n']} array: GEMM "
             + ", ".join(f"{k} {100 * x['mac_utilisation']:.1f}% MAC utilisation "
                         f"({x['cycles']} cycles)" for k, x in r["gemm"].items())]
    h = {p: r[f"hash_{p}"] for p in ("paper", "tuned")}
    lines.append(f"hashing a frame of the bundled trace: {h['paper']['tokens']} token-layers, "
                 f"{h['paper']['cycles_per_token']:.1f} (paper) / "
                 f"{h['tuned']['cycles_per_token']:.1f} (tuned) cycles each, operand loads "
                 f"included")
    for key, what, mean, unit in (("score", "cluster scoring", "candidates_mean",
                                   "candidates"),
                                  ("attend", "light attention", "tokens_mean", "tokens")):
        lines.append(f"{what} (rows x d x {unit}): "
                     + ", ".join(f"{k} {x['cycles_per_row']:.1f} cycles/row "
                                 f"({100 * x['mac_utilisation']:.1f}% MAC)"
                                 for k, x in r[key].items()))
        lines.append(f"{what} on the bundled trace's groups: "
                     + ", ".join(f"{p} {x['cycles_per_row']:.1f} cycles/row "
                                 f"({x[mean]:.0f} {unit}, "
                                 f"{100 * x['mac_utilisation']:.1f}% MAC)"
                                 for p, x in ((p, r[f"{key}_{p}"]) for p in ("paper", "tuned"))))
    if "attend_long" in r:
        lines.append("light attention over sets longer than B (chunked): "
                     + ", ".join(f"{k} {x['cycles_per_row']:.1f} cycles/row "
                                 f"({100 * x['mac_utilisation']:.1f}% MAC)"
                                 for k, x in r["attend_long"].items())
                     + "; the bundled trace's longest sets: "
                     + ", ".join(f"{p} {x['cycles_per_row']:.1f} cycles/row "
                                 f"({'/'.join(map(str, x['tokens']))} tokens, "
                                 f"{100 * x['mac_utilisation']:.1f}% MAC)"
                                 for p, x in ((p, r[f"attend_long_{p}"])
                                              for p in ("paper", "tuned"))))
    return lines
