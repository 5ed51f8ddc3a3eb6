"""make coverage's reading of Verilator's coverage database, where a line sits, the merge of
build points, waivers and functional events (its short share in make test: a real coverage
build of the smallest block, the exp unit, at its default point)."""
from __future__ import annotations

from verif.coverage import dat
from verif.coverage.__main__ import block_report
from verif.coverage.context import context
from verif.coverage.events import EVENTS, functional
from verif.coverage.waivers import waived
from verif.lib.runner import ROOT, failures, run_cocotb
from vrex.config import Config

VERILOG = """module m(input clk, input [1:0] s, input a, output reg y);
  always @* begin
    if (\\$auto$x ) begin end
    y = 1'h0;
    casez (s)
      2'h0:
          y = a;
      2'h1:
        begin
          if (a) begin
            y = 1'h1;
          end
        end
    endcase
  end
endmodule
""".splitlines()


def _line(l, count, o="case", f="m.v", page="v_line/m"):
    return (f"C '\x01f\x02{f}\x01l\x02{l}\x01n\x023\x01t\x02line\x01page\x02{page}"
            f"\x01o\x02{o}\x01h\x02m' {count}\n")


def test_context_names_the_process_and_its_arms():
    assert context(VERILOG, 7) == "y: s = 2'h0"
    assert context(VERILOG, 11) == "y: s = 2'h1 / if (a)"


def test_read_decodes_escapes_and_points_merge_across_builds(tmp_path):
    for name, hit in (("p0", 0), ("p1", 3)):
        d = tmp_path / "blk" / name
        d.mkdir(parents=True)
        (d / "m.v").write_text("\n".join(VERILOG) + "\n")
        (d / "coverage.dat").write_text(
            "# SystemC::Coverage-3\n" + _line(7, 5) + _line(11, hit, o="if")
            + "C '\x01f\x02m.v\x01l\x021\x01t\x02toggle\x01page\x02v_toggle/m"
              "\x01o\x02cur__02estep[0]\x01h\x02m' 1\n")
    pts = dat.read(tmp_path / "blk" / "p0" / "coverage.dat")
    assert [p.kind for p in pts] == ["line", "line", "toggle"]
    assert pts[2].comment == "cur.step[0]" and pts[1].line == 11
    row = block_report("blk", sorted((tmp_path / "blk").iterdir()))
    # line 11 is missed at p0 and reached at p1: the block reached both of its lines
    assert row["line"] == dict(total=2, hit=2, percent=100.0) and not row["missed"]
    assert row["builds"]["p0"]["line"] == dict(total=2, hit=1)
    (tmp_path / "blk" / "p1" / "coverage.dat").write_text(_line(7, 1) + _line(11, 0, o="if"))
    row = block_report("blk", sorted((tmp_path / "blk").iterdir()))
    assert row["line"]["percent"] == 50.0 and row["unexplained"] == 1 and not row["pass"]
    assert row["missed"][0]["where"] == "y: s = 2'h1 / if (a)"


def test_waivers_and_events_are_well_formed(tmp_path):
    assert waived("no_such_block", "anything") is None
    names = [e.sample for e in EVENTS.values() if e.sample]
    assert "error:BUS_WRITE" in names and "error:NONE" not in names
    (tmp_path / "events_tests.txt").write_text("error:BUS_WRITE\nwtu:visited=3\n")
    got = functional(tmp_path)
    assert got["error BUS_WRITE"]["hits"] == ["tests"]
    assert got["error BUS_READ"]["hits"] == [] and not got["error BUS_READ"]["unreachable"]
    assert got["error KV_STALE"]["unreachable"]       # explained, not reached


def test_samples_of_page_cuts_and_hcu_decisions(tmp_path, monkeypatch):
    """The samplers read what the bus and the HCU did: a burst cut at a 4 KB edge with the
    next starting there (not one that starts on the edge, nor one with nothing after it);
    a join among two clusters at the same distance; a window that wrapped."""
    from types import SimpleNamespace as NS
    from verif.hcu.tb import samples
    from verif.lib.fcov import record_page_cuts
    out = tmp_path / "events_t.txt"
    monkeypatch.setenv("VREX_FCOV", str(out))
    record_page_cuts([(0x1000, 4096), (0x2000, 64)], [(0x0F00, 256)])
    assert not out.exists()
    record_page_cuts([(0x0F00, 256), (0x1000, 256)], [])
    assert out.read_text().splitlines() == ["axi:4 KB cut"]
    tok = lambda h: NS(hash=h, layer=0, step=0)
    beat = lambda o, d: {"opened": o, "distance": d}
    cfg = NS(window=2, max_age=None)
    samples([tok(0b00), tok(0b11), tok(0b01)], [beat(1, 0), beat(1, 0), beat(0, 1)], cfg)
    assert "hcu:tie" in out.read_text() and "window wrap" not in out.read_text()
    samples([tok(1), tok(2), tok(4)], [beat(1, 0)] * 3, cfg)
    assert "hcu:window wrap" in out.read_text()


def test_a_coverage_build_counts_lines_and_toggles():
    """The exp unit built with line and toggle counters: its tests reach lines and bits, and
    some bits never toggle (the report is not all ones)."""
    build = ROOT / "build" / "coverage_test" / "attn_exp"
    res = run_cocotb("attn_exp", Config(), test_module="verif.attn.tb_exp", build_dir=build,
                     coverage=True, toggles=True)
    assert not failures(res, build), failures(res, build)
    row = block_report("attn_exp", [build])
    assert row["line"]["total"] > 20 and row["line"]["hit"] > row["line"]["total"] // 2
    assert 0 < row["toggle"]["hit"] < row["toggle"]["total"]
