"""A sweep file: which Config fields take which values, over which traces.

The file is YAML (``sweep/bundled.yaml`` is the shipped one)::

    name: bundled                    # the output folder's name (default: the file's stem)
    traces: [data/carphone_cut.npz]  # every point runs on each trace
    base: {preset: paper}            # fields every point starts from
    grid:                            # the product of every field's values
      th_r: [0.1, 0.3, 0.5]
      buckets: [8, 16]
    sample:                          # and/or a sample, crossed with the grid
      kind: lhs                      # lhs (Latin hypercube) or random
      points: 12
      seed: 1
      fields:
        th_hd: {range: [5, 11]}      # integers: whole values; floats: 4 decimals
        window: [256, 1024]          # a list: one of its values
    area: [hcu, wtu]                 # blocks synthesised per point (default: AREA_BLOCKS)
    latency: 40                      # the memory's round trip at the point's own build
    paper_cache: 10240               # the cache size of the paper's setting reported
    default: true                    # add the default build where no point is it

Every error names the file and the line: an unknown key or field, a field the trace fixes
(the geometry), a value no build accepts on its own (the configuration's rule and message),
a trace that is not there. A *combination* of values that the rules refuse is not an error
of the file: that point is reported as refused, with the rule's message (:mod:`.run`).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np
import yaml

from vrex.config import Config, ConfigError

__all__ = ["Sweep", "SweepError", "load_sweep", "AREA_BLOCKS", "GEOMETRY"]

# blocks synthesised per point unless the file says otherwise: every block but the core's own
# logic (its FPGA mapping takes about 13 minutes a build) and the engine's two parts, which
# the engine holds (``attn`` counts them)
AREA_BLOCKS = ("hcu", "wtu", "attn", "kvmu", "core_regs")
GEOMETRY = ("n_layers", "n_q_heads", "n_kv_heads", "head_dim")
_KEYS = ("name", "traces", "base", "grid", "sample", "area", "latency", "paper_cache",
         "default")
_SAMPLE_KEYS = ("kind", "points", "seed", "fields")
_FIELDS = {f.name for f in fields(Config)}


class SweepError(ValueError):
    """A sweep file that cannot run; the message names the file and the line."""


@dataclass
class Sweep:
    """A loaded sweep: ``points`` holds each point's fields (before the trace's geometry)."""
    name: str
    path: Path
    traces: list[Path]
    points: list[dict]
    varied: list[str]                   # the fields that take more than one value
    area: tuple[str, ...] = AREA_BLOCKS
    latency: int = 40
    paper_cache: int = 10240
    base: dict = field(default_factory=dict)
    default: bool = True                # the default build is added where no point is it


def _lines(node, path=(), out=None) -> dict:
    """``{key path: line (1-based)}`` of every node of a composed YAML document."""
    out = {} if out is None else out
    out[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            _lines(v, path + (k.value,), out)
            out[path + (k.value,)] = k.start_mark.line + 1         # the key's line
            out[path + (k.value, "<value>")] = v.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            _lines(v, path + (i,), out)
    return out


def load_sweep(path, root=None) -> Sweep:
    """Read and check the sweep file ``path``; traces are looked for under ``root`` (default:
    the working folder), then beside the file."""
    path = Path(path)
    if not path.exists():
        raise SweepError(f"{path}: no such sweep file")
    text = path.read_text()
    try:
        doc = yaml.safe_load(text)
        lines = _lines(yaml.compose(text)) if doc is not None else {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        raise SweepError(f"{path}{where}: not valid YAML: {getattr(e, 'problem', e)}") from None

    def fail(keys, msg):
        line = next((lines[k] for k in (tuple(keys), tuple(keys)[:-1], ()) if k in lines), 1)
        raise SweepError(f"{path}:{line}: {msg}")

    if not isinstance(doc, dict):
        fail((), "a sweep file is a mapping (name, traces, base, grid, sample, ...)")
    for k in doc:
        if k not in _KEYS:
            fail((k,), f"unknown key {k!r} (known: {', '.join(_KEYS)})")
    if "grid" not in doc and "sample" not in doc:
        fail((), "a sweep needs a grid, a sample or both")
    traces = _traces(doc, path, Path(root or "."), fail)
    from golden.trace import load_trace
    geo = load_trace(traces[0]).geometry()
    base = doc.get("base") or {}
    if not isinstance(base, dict):
        fail(("base",), "base is a mapping of configuration fields")
    try:                        # the base's fields together (a window fits its lanes, ...)
        point_config(base, geo)
    except (ConfigError, TypeError) as e:
        for k, v in base.items():       # a value no build accepts names its own line
            _check_field(k, v, {}, geo, ("base", k), fail)
        fail(("base",), f"base: {e}")
    grid = doc.get("grid") or {}
    if not isinstance(grid, dict):
        fail(("grid",), "grid is a mapping of a field to its list of values")
    for k, vs in grid.items():
        if not isinstance(vs, list) or not vs:
            fail(("grid", k), f"grid field {k!r} needs a non-empty list of values")
        for i, v in enumerate(vs):
            _check_field(k, v, base, geo, ("grid", k, i), fail)
    combos = [dict(zip(grid, vs)) for vs in itertools.product(*grid.values())]
    sampled = _sample(doc.get("sample"), base, geo, fail) if "sample" in doc else [{}]
    points = [{**base, **g, **s} for g in combos for s in sampled]
    varied = [k for k in dict.fromkeys([*grid, *(sampled[0] if sampled else {})])
              if len({repr(p.get(k)) for p in points}) > 1]
    area = doc.get("area", list(AREA_BLOCKS))
    from rtl import BLOCKS
    if not isinstance(area, list):
        fail(("area",), "area is a list of block names")
    for i, b in enumerate(area):
        if b not in BLOCKS or b == "core":
            fail(("area", i), f"no block {b!r} to synthesise (one of: "
                 f"{', '.join(n for n in BLOCKS if n != 'core')})")
    ints = {}
    for k, default in (("latency", 40), ("paper_cache", 10240)):
        v = doc.get(k, default)
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            fail((k,), f"{k} must be a positive integer, not {v!r}")
        ints[k] = v
    default = doc.get("default", True)
    if not isinstance(default, bool):
        fail(("default",), f"default must be true or false, not {default!r}")
    name = doc.get("name", path.stem)
    if not isinstance(name, str) or not name or "/" in name:
        fail(("name",), f"name must be a folder name, not {name!r}")
    return Sweep(name=name, path=path, traces=traces, points=points, varied=varied,
                 area=tuple(area), base=base, default=default, **ints)


def _traces(doc, path, root, fail) -> list[Path]:
    traces = doc.get("traces")
    if not isinstance(traces, list) or not traces:
        fail(("traces",), "traces is a non-empty list of trace files (.npz)")
    out = []
    for i, t in enumerate(traces):
        cands = [root / str(t), path.parent / str(t)]
        got = next((c for c in cands if c.is_file()), None)
        if got is None:
            fail(("traces", i), f"trace {t!r} not found (looked in {root} and {path.parent})")
        out.append(got)
    return out


def _check_field(k, v, base, geo, keys, fail) -> None:
    """A field's value on its own: the field exists, is not fixed by the trace, and some
    build accepts the value (checked on the base point with only this field changed)."""
    if k not in _FIELDS:
        fail(keys, f"unknown configuration field {k!r}")
    if k in GEOMETRY:
        fail(keys, f"{k} comes from the trace; it cannot be swept")
    try:
        point_config({**base, k: v}, geo)
    except (ConfigError, TypeError) as e:
        fail(keys + ("<value>",) if len(keys) == 2 else keys, f"{k} = {v!r}: {e}")


def point_config(fields_: dict, geo: dict) -> Config:
    """The configuration of a point: its preset (default ``paper``) with its fields, at the
    trace's geometry."""
    f = dict(fields_)
    return Config.from_preset(f.pop("preset", "paper"), **geo, **f)


def _sample(s, base, geo, fail) -> list[dict]:
    if not isinstance(s, dict):
        fail(("sample",), "sample is a mapping (kind, points, seed, fields)")
    for k in s:
        if k not in _SAMPLE_KEYS:
            fail(("sample", k), f"unknown sample key {k!r} (known: {', '.join(_SAMPLE_KEYS)})")
    kind, n, seed = s.get("kind", "lhs"), s.get("points"), s.get("seed", 0)
    if kind not in ("lhs", "random"):
        fail(("sample", "kind"), f"sample kind must be 'lhs' or 'random', not {kind!r}")
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        fail(("sample", "points"), f"sample points must be a positive integer, not {n!r}")
    fs = s.get("fields")
    if not isinstance(fs, dict) or not fs:
        fail(("sample", "fields"), "sample fields is a mapping of a field to a range or list")
    rng = np.random.default_rng(seed)
    cols = {}
    for k, spec in fs.items():
        keys = ("sample", "fields", k)
        # the unit interval's sample of this field: stratified (lhs) or not
        u = ((rng.permutation(n) + rng.random(n)) / n) if kind == "lhs" else rng.random(n)
        if isinstance(spec, list) and spec:
            vals = [spec[min(int(x * len(spec)), len(spec) - 1)] for x in u]
        elif isinstance(spec, dict) and set(spec) == {"range"} and \
                isinstance(spec["range"], list) and len(spec["range"]) == 2:
            lo, hi = spec["range"]
            if isinstance(lo, int) and isinstance(hi, int) and lo <= hi:
                vals = [min(hi, lo + int(x * (hi - lo + 1))) for x in u]
            elif all(isinstance(x, (int, float)) for x in (lo, hi)) and lo <= hi:
                vals = [round(lo + x * (hi - lo), 4) for x in u]
            else:
                fail(keys, f"range of {k!r} must be [low, high], numbers, low <= high")
        else:
            fail(keys, f"sample field {k!r} needs a list of values or {{range: [low, high]}}")
        for v in dict.fromkeys(vals):
            _check_field(k, v, base, geo, keys, fail)
        cols[k] = vals
    return [{k: cols[k][i] for k in cols} for i in range(n)]
