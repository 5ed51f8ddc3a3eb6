"""The house rules: every registered block has its folder in each role, its Config section,
and Verilog that emits and lints clean; the hardware imports no tooling, the configuration
no model."""
import ast
from pathlib import Path

import pytest

from rtl import BLOCKS
from verif.lib.traces import ROOT
from vrex.config import SECTIONS, Config
from vrex.emit import lint, write_verilog


@pytest.mark.parametrize("block", BLOCKS)
def test_block_has_every_role(block):
    """Adding a block is one folder per role plus one registry line (docs/adding-a-block.md)."""
    b = BLOCKS[block]
    g = b.group
    assert (ROOT / "golden" / f"{g}.py").exists(), f"golden/{g}.py: its block model"
    for f in ("__init__.py", "model.py", "test_sim.py", "test_verilog.py"):
        assert (ROOT / "verif" / g / f).exists(), f"verif/{g}/{f}"
    tb = b.verif_module(block, "tb").split(".")[-1]
    assert (ROOT / "verif" / g / f"{tb}.py").exists(), f"verif/{g}/{tb}.py"
    assert g in SECTIONS, f"the Config has no section {g!r}"
    assert (ROOT / "docs" / f"{g}.md").exists(), f"docs/{g}.md: its page"
    cfg = Config()
    assert BLOCKS[block].from_config(cfg) is not None
    cfg.block_registers(block)


@pytest.mark.parametrize("block", BLOCKS)
def test_emits_and_lints_clean(block, tmp_path):
    lint(write_verilog(BLOCKS[block].from_config(Config()), block, tmp_path))


def _imports(path: Path) -> set:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package, forbidden", [
    ("rtl", {"verif", "golden", "synth"}),       # hardware only
    ("golden", {"rtl", "verif", "synth", "amaranth", "cocotb"}),
    ("synth", {"verif", "golden"}),
])
def test_layering(package, forbidden):
    for path in (ROOT / package).rglob("*.py"):
        bad = _imports(path) & forbidden
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_vrex_is_neutral():
    """The configuration and the rules import no model and no hardware (emission elaborates
    the registry's blocks, lazily, and is the one exception)."""
    for name in ("config.py", "rules.py", "toolchain.py"):
        bad = _imports(ROOT / "vrex" / name) & {"golden", "rtl", "verif", "synth", "amaranth"}
        assert not bad, f"vrex/{name} imports {sorted(bad)}"
