"""The registry's rules: every registered block has its folder in each role, its Config
section, and Verilog that emits and lints clean (the layers: test_layers.py)."""
import pytest

from rtl import BLOCKS
from verif.lib.runner import verif_module
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
    tb = verif_module(block, "tb").split(".")[-1]
    assert (ROOT / "verif" / g / f"{tb}.py").exists(), f"verif/{g}/{tb}.py"
    assert g in SECTIONS, f"the Config has no section {g!r}"
    assert (ROOT / "docs" / f"{g}.md").exists(), f"docs/{g}.md: its page"
    cfg = Config()
    assert BLOCKS[block].from_config(cfg) is not None
    cfg.block_registers(block)


@pytest.mark.parametrize("block", BLOCKS)
def test_emits_and_lints_clean(block, tmp_path):
    lint(write_verilog(BLOCKS[block].from_config(Config()), block, tmp_path))


def test_emitted_verilog_is_kept_under_its_build_and_sources(tmp_path, monkeypatch):
    """``write_verilog(key=...)``: a second emission of the same build reads the text
    converted the first time (the component is not even made); another build (key) or
    another state of the sources (``sources_hash``) converts again, and the text is the one
    a plain emission gives."""
    from vrex import emit
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    made = []

    def make(cfg):
        def f():
            made.append(cfg.core_queue_depth)
            return BLOCKS["core_regs"].from_config(cfg)
        return f
    a, b = Config(core_queue_depth=2), Config(core_queue_depth=3)
    plain = write_verilog(BLOCKS["core_regs"].from_config(a), "core_regs",
                          tmp_path / "plain").read_text()
    for k in range(2):
        v = write_verilog(make(a), "core_regs", tmp_path / f"a{k}", key=a.to_json())
        assert v.read_text() == plain
    assert made == [2]
    write_verilog(make(b), "core_regs", tmp_path / "b", key=b.to_json())
    assert made == [2, 3]
    monkeypatch.setattr(emit, "sources_hash", lambda: "another state of the sources")
    write_verilog(make(a), "core_regs", tmp_path / "a2", key=a.to_json())
    assert made == [2, 3, 2]
