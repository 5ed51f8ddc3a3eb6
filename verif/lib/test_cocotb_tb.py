"""The testbench library's cocotb side on a real block (verif/lib/tb_streams.py): sinks and
sources that sleep between events keep the cycle-by-cycle contract."""
from verif.lib.runner import ROOT, failures, run_cocotb
from vrex.config import Config


def test_stream_source_and_sink():
    build = ROOT / "build" / "sim" / "lib" / "streams"
    results = run_cocotb("attn_exp", Config(), test_module="verif.lib.tb_streams",
                         build_dir=build)
    assert not failures(results, build), failures(results, build)
    assert len(results) == 3, results
