"""The recipe of docs/adding-a-block.md, followed: a copy of the house gets a small block
(``popc``, counting the set bits of each word: ``verif/flow/recipe/``) by the recipe's steps
(its Config section, rules, golden model, RTL, registry entry, verification folder, docs
page), and the registry's test and both tiers of the new block pass in the copy. When the
code moves under the recipe (an anchor below is gone), this fails: update the recipe and
this test together."""
import os
import shutil
import subprocess
import sys

from verif.lib.pauses import CROSSINGS
from verif.lib.traces import ROOT

RECIPE = ROOT / "verif" / "flow" / "recipe"
HOUSE = ("vrex", "rtl", "golden", "verif", "synth", "docs", "pyproject.toml")

# step 1: the configuration (vrex/config.py) and the rules (vrex/rules.py)
FIELDS = "    # popc\n    popc_width: int = 32\n\n"
PARAMS = ('        if block == "popc":\n'
          '            return dict(width=self.popc_width, counter_bits=self.counter_bits)\n')
REGISTERS = '        if block == "popc":\n            return {}\n'
CHECK = '            rules.popc_rules(**self.block_params("popc"), names=_POPC_NAMES)\n'
NAMES = '_POPC_NAMES = {"width": "popc_width"}\n'
RULES = '''

def popc_rules(*, width, counter_bits, names: dict | None = None) -> None:
    """PopCount: a word of 1 to 64 bits."""
    n = _namer(names)
    int_range(n("width"), width, 1, 64)
    positive_int(n("counter_bits"), counter_bits)
'''
# step 4: the registry (rtl/__init__.py)
IMPORT = "from .popc.popc import PopCount\n"
ENTRY = '    "popc": Block(PopCount, "popc", Synthesis(minutes=0.1)),\n'


def _insert(path, text: str, *, before: str, nth: int = 1):
    """``text`` put before the ``nth`` occurrence of ``before`` in ``path``."""
    s = path.read_text()
    at = -1
    for _ in range(nth):
        at = s.find(before, at + 1)
        assert at >= 0, (f"the recipe's anchor {before!r} is gone from {path.name}: update "
                         f"docs/adding-a-block.md and verif/flow/test_recipe.py")
    path.write_text(s[:at] + text + s[at:])


def _append_to_dict(path, opener: str, line: str):
    """``line`` as the last item of the dict literal that ``opener`` opens in ``path``."""
    s = path.read_text()
    start = s.find(opener)
    assert start >= 0, (f"the recipe's anchor {opener!r} is gone from {path.name}: update "
                        f"docs/adding-a-block.md and verif/flow/test_recipe.py")
    end = s.index("\n}\n", start) + 1
    path.write_text(s[:end] + line + s[end:])


def follow_recipe(house):
    """The recipe's steps, in the copy ``house``."""
    cfg = house / "vrex" / "config.py"
    _insert(cfg, FIELDS, before="    def __post_init__(self):")
    _append_to_dict(cfg, "SECTIONS: dict[str, tuple[str, ...]] = {",
                    '    "popc": ("popc_width",),\n')
    _insert(cfg, CHECK, before="        except rules.ParameterError as e:\n"
                               "            raise ConfigError(str(e)) from None\n\n"
                               "    # --- derived values")
    _insert(cfg, PARAMS, before='        raise ConfigError(f"no block named {block!r}")')
    _insert(cfg, REGISTERS, before='        raise ConfigError(f"no block named {block!r}")',
            nth=2)
    cfg.write_text(cfg.read_text() + "\n" + NAMES)
    rules = house / "vrex" / "rules.py"
    rules.write_text(rules.read_text() + RULES)
    for tmpl in RECIPE.rglob("*.in"):                       # steps 2, 3, 5, 6: new files
        dest = house / tmpl.relative_to(RECIPE).with_suffix("")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(tmpl.read_text())
    reg = house / "rtl" / "__init__.py"
    _insert(reg, IMPORT, before="\n__all__ = [")
    _append_to_dict(reg, "BLOCKS = {", ENTRY)


def test_a_block_added_by_the_recipe():
    house = ROOT / "build" / "recipe"
    shutil.rmtree(house, ignore_errors=True)
    for part in HOUSE:
        if (ROOT / part).is_file():
            shutil.copy(ROOT / part, house / part)
            continue
        shutil.copytree(ROOT / part, house / part,
                        ignore=shutil.ignore_patterns("__pycache__", "recipe", "*.pyc"))
    follow_recipe(house)
    env = {**os.environ, "PYTHONPATH": str(house)}
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-p", "no:xdist",
         "verif/popc", "verif/flow/test_registry.py", "verif/flow/test_layers.py",
         "-k", "popc or layers or import"],
        cwd=house, env=env, capture_output=True, text=True)
    tail = (r.stdout + r.stderr)[-3000:]
    assert r.returncode == 0, f"the recipe's block fails in {house}:\n{tail}"
    # both tiers (three widths under every crossing; two build points), the registry's checks
    # of the new block and the layers' ran
    passed = {ln.split()[1] for ln in r.stdout.splitlines() if ln.startswith("PASSED ")}
    want = {f"verif/popc/test_sim.py::test_counts[{w}-{c}]" for w in (1, 7, 32)
            for c in CROSSINGS}
    want |= {f"verif/popc/test_verilog.py::test_popc_verilog[{p}]" for p in ("default", "w5")}
    want |= {f"verif/flow/test_registry.py::test_{t}[popc]"
             for t in ("block_has_every_role", "emits_and_lints_clean")}
    assert want <= passed, f"not run or not passed: {sorted(want - passed)}\n{tail}"
    assert sum(t.startswith("verif/flow/test_layers.py") for t in passed) >= 3
