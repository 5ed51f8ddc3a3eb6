"""The layers of the house, one way: every import of every module of ``vrex``, ``rtl``,
``golden``, ``synth``, ``sweep`` and ``verif`` (at the top of a file or inside a function) is read from
its source and checked against the layer order; the graph of the project's own modules has no
cycle; no module that is not a test imports a test module."""
import ast
import sys
from pathlib import Path

from verif.lib.traces import ROOT

PACKAGES = ("vrex", "rtl", "golden", "synth", "sweep", "verif")
# a package may import the packages of lower layers only: vrex is the neutral base (the
# configuration, the register map, emission, the figures); the hardware and the golden model
# stand on it side by side; the tool flows on the hardware; the design-space sweeps on the
# golden model and the flows; verification on everything
LAYER = {"vrex": 0, "rtl": 1, "golden": 1, "synth": 2, "sweep": 3, "verif": 4}
# outside packages a layer keeps out of (the golden model is NumPy; the hardware is Amaranth;
# the base elaborates nothing but in emission, lazily)
FOREIGN = {"vrex": {"cocotb", "cocotbext", "pytest"},
           "rtl": {"cocotb", "cocotbext", "numpy", "pytest"},
           "golden": {"amaranth", "cocotb", "cocotbext", "pytest"},
           "synth": {"cocotb", "cocotbext", "pytest"},
           "sweep": {"cocotb", "cocotbext", "pytest"}}


def modules() -> dict[str, Path]:
    """Module name -> file, for every module of the project's packages."""
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: dict) -> set[str]:
    """Every module ``name`` (at ``path``) imports: the project's modules by name (``from p
    import x`` is ``p.x`` when that is a module, else ``p``), outside packages by their top
    name."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.add(sub if sub in known else base)
    return {m if m.split(".")[0] in PACKAGES else m.split(".")[0] for m in out}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {n: imports(n, p, known) for n, p in known.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in g:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def is_test(name: str) -> bool:
    return name.rpartition(".")[2].startswith(("test_", "conftest"))


def test_every_import_runs_down_the_layers():
    bad = []
    for mod, deps in graph().items():
        pkg = mod.split(".")[0]
        for dep in deps:
            top = dep.split(".")[0]
            if top in LAYER and top != pkg and LAYER[top] >= LAYER[pkg]:
                bad.append(f"{mod} imports {dep} ({top} is not below {pkg})")
            if top in FOREIGN.get(pkg, ()):
                bad.append(f"{mod} imports {top}")
    assert not bad, "\n".join(sorted(bad))


def test_no_import_cycle():
    found = cycles(graph())
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_no_module_imports_a_test():
    bad = [f"{m} imports {d}" for m, deps in graph().items() if not is_test(m)
           for d in deps if d.split(".")[0] in LAYER and is_test(d)]
    assert not bad, "\n".join(bad)


def test_the_checks_see_a_cycle_and_a_wrong_way_import():
    """The walk itself: a made-up graph with a cycle and an upward import is caught."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    known = modules()
    assert "rtl.core.map" in known and "vrex.regmap" in known
    deps = imports("rtl.core.map", known["rtl.core.map"], known)
    assert {"vrex.regmap", "rtl.attn.engine"} <= deps and "vrex" not in deps


# RTL files allowed past these limits (none: every block is built from components); a file
# put here must need it
UNSPLIT: set = set()
MAX_FILE, MAX_FUNCTION = 600, 120


def test_rtl_is_small_parts():
    """No RTL file over 600 lines, no function over 120, no namespace of loose signals
    (``SimpleNamespace``), outside :data:`UNSPLIT`; every file of UNSPLIT still needs it."""
    bad, needed = [], set()
    for path in sorted((ROOT / "rtl").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        text = path.read_text()
        found = []
        if len(text.splitlines()) > MAX_FILE:
            found.append(f"{rel}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION:
                    found.append(f"{rel}: {node.name} is {n} lines")
        if "SimpleNamespace" in text:
            found.append(f"{rel}: SimpleNamespace")
        if rel not in UNSPLIT:
            bad += found
        elif found:
            needed.add(rel)
    assert not bad, "\n".join(bad)
    assert needed == UNSPLIT, f"split already, take off UNSPLIT: {sorted(UNSPLIT - needed)}"
