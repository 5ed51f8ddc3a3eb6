"""The core's host interface, written once (vrex/regmap.py): the map is consistent, the
checked-in docs table is the generated one, the C header compiles and agrees with Python, and
descriptors round-trip."""
import shutil
import subprocess

import numpy as np
import pytest

from rtl import BLOCKS
from rtl.core import map as core_map
from vrex import regmap
from verif.lib.runner import ROOT
from vrex.config import Config


def test_registers_are_aligned_unique_and_fields_disjoint():
    regs = core_map.register_map()
    offs = [r.offset for r in regs]
    assert len(set(offs)) == len(offs) and all(o % 4 == 0 and o < 4096 for o in offs)
    assert len({r.name for r in regs}) == len(regs)
    for r in regs:
        assert r.access in ("RO", "RW", "WO", "W1C", "W1S")
        used = 0
        for f in r.fields:
            assert 0 <= f.lsb and f.lsb + f.width <= 32, (r.name, f.name)
            assert not used & f.mask, (r.name, f.name)
            used |= f.mask


def test_every_block_counter_has_a_register():
    names = {r.name for r in core_map.register_map()}
    for block in ("hcu", "wtu", "attn", "kvmu", "core"):
        for c in BLOCKS[block].cls.PERF:
            assert f"PERF_{block.upper()}_{c.upper()}" in names


def test_docs_table_is_generated():
    assert (ROOT / "docs" / "registers.md").read_text() == core_map.markdown(), \
        "docs/registers.md is stale: python -m rtl.emit --registers > docs/registers.md"


def test_descriptor_round_trips_and_refuses_bad_fields():
    rng = np.random.default_rng(0)
    for _ in range(50):
        vals = {f: int(rng.integers(0, 1 << min(width, 62))) for _, f, _, width, _ in
                regmap.DESCRIPTOR}
        words = regmap.encode_descriptor(**vals)
        assert len(words) == regmap.DESC_WORDS and all(0 <= w < 1 << 32 for w in words)
        assert regmap.decode_descriptor(words) == vals
    # the fields of a word never overlap
    used = {}
    for w, f, lsb, width, _ in regmap.DESCRIPTOR:
        bits = ((1 << width) - 1) << (lsb + 32 * w)
        assert not used.get("all", 0) & bits, f
        used["all"] = used.get("all", 0) | bits
    vals["layer"] = 256
    with pytest.raises(ValueError, match="descriptor field layer must fit 8 bits, not 256"):
        regmap.encode_descriptor(**vals)
    del vals["layer"]
    with pytest.raises(ValueError, match=r"missing \['layer'\]"):
        regmap.encode_descriptor(**vals)


def test_build_registers():
    v = regmap.build_values(Config())
    assert v["BUILD0"] & 0xFF == 8 and (v["BUILD1"] >> 8) & 0xFF == 10     # n 8, window 1024
    assert v["BUILD2"] == 1 and \
        regmap.build_values(Config(order="select_first"))["BUILD2"] == 0    # the order


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler on this machine")
def test_c_header_compiles_and_agrees(tmp_path):
    (tmp_path / "vrex_regs.h").write_text(core_map.c_header())
    offs = core_map.offsets()
    checks = ["VREX_ID_VALUE", "VREX_TH_R", "VREX_DESC_DATA", "VREX_PERF_ATTN_ROWS",
              "VREX_STATUS_QUEUE_LEVEL_MASK", "VREX_ERR_BUS_READ", "VREX_DESC_BETA_SHIFT_SHIFT"]
    (tmp_path / "t.c").write_text('#include <stdio.h>\n#include "vrex_regs.h"\nint main(void){'
                                  + "".join(f'printf("%u\\n", (unsigned){c});' for c in checks)
                                  + "return 0;}\n")
    subprocess.run(["cc", "-Wall", "-Werror", "-o", "t", "t.c"], cwd=tmp_path, check=True)
    got = [int(x) for x in subprocess.run(["./t"], cwd=tmp_path, capture_output=True,
                                          text=True, check=True).stdout.split()]
    assert got == [regmap.ID, offs["TH_R"], offs["DESC_DATA"], offs["PERF_ATTN_ROWS"],
                   0xFF00, regmap.ERRORS["BUS_READ"][0], 16]
