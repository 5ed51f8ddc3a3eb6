"""Static timing of a routed design from nextpnr's delays (its ``--sdf`` output): every
endpoint's slack at once, where nextpnr's report names one critical path a clock.

Arrival times start at the clock-to-out arcs and run through the routed interconnect and the
cells' combinational arcs, each delay the maximum of its ``min:typ:max`` triple, as nextpnr's
own report reads them (checked against it in ``verif/flow/test_sta.py``: the same worst
slack). An endpoint is a pin with a setup check, or an input of a clocked cell with no arc
through it (setup 0: an ECP5 flip-flop's clock enable and set/reset). One clock, every
path a single cycle: the flow's blocks have no other kind.

:func:`analyse` returns the failing endpoints' count and histogram and the failing paths
grouped by (start family, end family), a family being a register's name up to the suffixes
Yosys and nextpnr add (``block.row_max_0_TRELLIS_FF_Q_3`` -> ``block.row_max``); the
command line prints them and the worst paths (``python -m synth.sta FILE.sdf [--period NS]
[--top N] [--paths K]``).
"""
from __future__ import annotations

import argparse
import collections
import re

__all__ = ["parse", "analyse", "family"]

CLOCK_PINS = frozenset({"CLK", "WCK", "CLKA", "CLKB", "CLK0", "CLK1", "CLK2", "CLK3", "CLKI"})
_SETUP = re.compile(r"\(SETUPHOLD \((?:pos|neg)edge (\S+)\) \((?:pos|neg)edge (\S+)\) (\(\S+\))")
_FAMILY_CUT = re.compile(r"(_TRELLIS_FF_Q|_TRELLIS_COMB|_LUT4|_CCU2C|_PFUMX|_L6MUX21|\$"
                         r"|_MULT18X18D|_DP16KD|_DPR16X4|_TRELLIS_RAM)")


def _delay(tok: str) -> int:
    """The max of a ``(min:typ:max)`` triple (or a lone value), in the file's unit (ps)."""
    return int(tok.strip("()").split(":")[-1])


def parse(lines):
    """The delays of an SDF file (an iterable of its lines): ``(interconnect, arcs, setup,
    types)``: ``(src, dst, delay)`` with pins as ``(instance, pin)``, ``(instance, in, out,
    delay)``, ``{(instance, pin): setup}`` and ``{instance: cell type}``."""
    ic, arcs, setup, types = [], [], {}, {}
    inst = ctype = None
    for line in lines:
        s = line.strip()
        if s.startswith("(INTERCONNECT"):
            t = s.split()
            a, b = t[1].rsplit("/", 1), t[2].rsplit("/", 1)
            ic.append(((a[0], a[1]), (b[0], b[1]), _delay(t[3])))
        elif s.startswith("(CELLTYPE"):
            ctype = s.split('"')[1]
        elif s.startswith("(INSTANCE"):
            inst = s[len("(INSTANCE"):].rstrip(")").strip()
            types[inst] = ctype
        elif s.startswith("(IOPATH"):
            t = s.split()
            if t[1].startswith("("):                 # (IOPATH (posedge CLK) Q ...)
                pin_in, rest = t[2].rstrip(")"), t[3:]
            else:
                pin_in, rest = t[1], t[2:]
            arcs.append((inst, pin_in, rest[0], _delay(rest[1])))
        elif s.startswith("(SETUPHOLD"):
            m = _SETUP.match(s)
            if m:
                k = (inst, m.group(1))
                setup[k] = max(setup.get(k, 0), _delay(m.group(3)))
    return ic, arcs, setup, types


def family(instance: str) -> str:
    """A cell's register family: its name up to Yosys's and nextpnr's suffixes and a trailing
    index."""
    name = instance.replace("\\", "")
    m = _FAMILY_CUT.search(name)
    name = name[:m.start()] if m else name
    return re.sub(r"_\d+$", "", name) or instance


def analyse(lines, period_ns: float) -> dict:
    """Every endpoint's slack at ``period_ns``, from an SDF file's lines. Returns
    ``endpoints``, ``failing``, ``worst_slack_ns``, ``fmax_mhz``, ``histogram`` (failing
    endpoints by 0.5 ns of negative slack, worst last), ``pairs`` (failing (start family, end
    family, worst slack ns, endpoints), worst first), ``loops`` (nodes left untimed in
    combinational loops) and ``paths`` (a function: the worst path to each of the k worst
    pairs' endpoints, as ``(kind, delay ns, arrival ns, instance, pin)`` steps)."""
    ic, arcs, setup, types = parse(lines)
    succ = collections.defaultdict(list)
    indeg = collections.Counter()
    arrival, pred = {}, {}
    through, clocked = set(), set()
    for inst, a, b, d in arcs:
        if a in CLOCK_PINS:
            clocked.add(inst)
            if d > arrival.get((inst, b), -1):
                arrival[(inst, b)] = d
                pred[(inst, b)] = None
        else:
            succ[(inst, a)].append(((inst, b), d, "logic"))
            indeg[(inst, b)] += 1
            through.add((inst, a))
    sinks = set()                                 # the pins a net drives
    for a, b, d in ic:
        if b[1] not in CLOCK_PINS:
            succ[a].append((b, d, "route"))
            indeg[b] += 1
            sinks.add(b)
    nodes = set(succ) | set(indeg) | set(arrival)
    ready = collections.deque(v for v in nodes if indeg[v] == 0)
    done = 0
    while ready:
        u = ready.popleft()
        done += 1
        t = arrival.get(u)
        for v, d, kind in succ.get(u, ()):
            if t is not None and t + d > arrival.get(v, -1):
                arrival[v] = t + d
                pred[v] = (u, d, kind)
            indeg[v] -= 1
            if indeg[v] == 0:
                ready.append(v)
    period = round(period_ns * 1000)
    ends = []
    for v, t in arrival.items():
        inst, pin = v
        if v in setup:
            ends.append((period - setup[v] - t, v))
        elif (v in sinks and inst in clocked and v not in through
              and types.get(inst) != "TRELLIS_IO"):
            ends.append((period - t, v))
    ends.sort()

    def start_of(v):
        steps = []
        while pred.get(v) is not None:
            u, d, kind = pred[v]
            steps.append((u, v, d, kind))
            v = u
        return v, steps[::-1]

    fail = [e for e in ends if e[0] < 0]
    pairs = {}
    for slack, v in fail:
        key = (family(start_of(v)[0][0]), family(v[0]))
        if key not in pairs:
            pairs[key] = [slack, 0, v]
        pairs[key][1] += 1
    ranked = sorted(pairs.items(), key=lambda kv: kv[1][0])
    hist = collections.Counter(int(-s // 500) for s, _ in fail)

    def paths(k):
        out = []
        for (a, b), (slack, _, v) in ranked[:k]:
            st, steps = start_of(v)
            t = arrival[st]
            rows = [("clk-to-q", t / 1000, t / 1000, st[0], st[1])]
            for _, w, d, kind in steps:
                t += d
                rows.append((kind, d / 1000, t / 1000, w[0], w[1]))
            out.append({"start": a, "end": b, "slack_ns": slack / 1000, "steps": rows})
        return out

    worst = ends[0][0] if ends else period
    return {"endpoints": len(ends), "failing": len(fail),
            "worst_slack_ns": worst / 1000,
            "fmax_mhz": 1e6 / (period - worst) if period - worst > 0 else None,
            "histogram": {f"{-(b + 1) * 0.5:.1f}..{-b * 0.5:.1f}": hist[b]
                          for b in sorted(hist)},
            "pairs": [(a, b, s / 1000, c) for (a, b), (s, c, _) in ranked],
            "loops": len(nodes) - done, "paths": paths}


def summary(path, period_ns: float, top: int = 10) -> dict:
    """What the synthesis report keeps of :func:`analyse` on the SDF file at ``path``."""
    with open(path) as f:
        r = analyse(f, period_ns)
    return {"endpoints": r["endpoints"], "failing": r["failing"],
            "worst_slack_ns": round(r["worst_slack_ns"], 3), "histogram": r["histogram"],
            "worst_pairs": [[a, b, round(s, 3), c] for a, b, s, c in r["pairs"][:top]]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sdf")
    ap.add_argument("--period", type=float, default=10.0, help="clock period, ns")
    ap.add_argument("--top", type=int, default=40, help="family pairs to list")
    ap.add_argument("--paths", type=int, default=3, help="worst paths to print")
    args = ap.parse_args(argv)
    with open(args.sdf) as f:
        r = analyse(f, args.period)
    fmax = f"{r['fmax_mhz']:.2f} MHz" if r["fmax_mhz"] else "-"
    print(f"endpoints {r['endpoints']}, failing at {args.period} ns: {r['failing']}, "
          f"worst slack {r['worst_slack_ns']:.3f} ns ({fmax})")
    if r["loops"]:
        print(f"warning: {r['loops']} nodes in combinational loops, not timed")
    for k, v in r["histogram"].items():
        print(f"  slack {k} ns: {v}")
    print(f"{len(r['pairs'])} (start, end) family pairs failing; the worst {args.top}:")
    for a, b, s, c in r["pairs"][:args.top]:
        print(f"  {s:7.3f} ns {c:5d}  {a[-55:]}  ->  {b[-55:]}")
    for p in r["paths"](args.paths):
        print(f"\npath {p['slack_ns']:.3f} ns: {p['start']} -> {p['end']}")
        for kind, d, t, inst, pin in p["steps"]:
            if d > 0.071 or kind == "clk-to-q" or (inst, pin) == p["steps"][-1][3:]:
                print(f"  {kind:8s} {d:6.3f} {t:7.3f}  {inst[-90:]}.{pin}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
