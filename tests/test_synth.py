"""``kaleido-hw synth``: parsers of the yosys output, the I/O ring, missing tools, a real run."""

from __future__ import annotations

import json
import shutil

import pytest
from amaranth.hdl import ClockDomain, Module
from amaranth.sim import Simulator

from golden.pe_model import BaselineCtrl
from kaleido_hw import synth
from kaleido_hw.cli import main
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.pe import BaselinePE

STAT = """
3. Printing statistics.

=== top ===

   Number of wires:                 10
   Number of cells:                 12
     $_AND_                          5
     $_SDFF_PP0_                     4
     $_XOR_                          2
     \\top.sub                        1

   Estimated number of transistors:         54+

=== top.sub ===

   Number of cells:                  3
     $_NOT_                          3

   Estimated number of transistors:          6

=== design hierarchy ===

   top                               1
     top.sub                         1

   Number of cells:                 15
"""


def test_parse_stat_reads_each_module_not_the_summary():
    s = synth.parse_stat(STAT)
    assert sorted(s) == ["top", "top.sub"]
    assert (s["top"]["cells"], s["top"]["ffs"], s["top"]["logic_transistors"]) == (12, 4, 54)
    assert (s["top.sub"]["cells"], s["top.sub"]["ffs"], s["top.sub"]["logic_transistors"]) == (3, 0, 6)
    with pytest.raises(ValueError, match="no module statistics"):
        synth.parse_stat("nothing here")


def test_parse_ltp_and_ice40_stat():
    assert synth.parse_ltp("Longest topological path in pe (length=52):\n  1: x\n") == 52
    with pytest.raises(ValueError):
        synth.parse_ltp("")
    text = ("=== pe ===\n\n   Number of cells:   9\n     SB_CARRY   2\n     SB_DFFSR   3\n"
            "     SB_DFF   1\n     SB_LUT4   3\n")
    assert synth.parse_ice40_stat(text) == (3, 4, 2)


def test_io_ring_feeds_every_input_and_returns_every_output():
    """Shift a0=3, b=-5, ctrl=acc|clear into a wrapped BaselinePE, step it, load the outputs
    and shift them out: r0 must read -15."""
    pe = BaselinePE(KaleidoConfig())
    ring = synth.IORing(pe)
    top = Module()
    top.domains.sync = ClockDomain("sync")
    top.submodules.ring = ring
    ins = [(p, v.as_value() if hasattr(v, "as_value") else v)
           for p, m, v in pe.signature.flatten(pe) if m.flow.name == "In"]
    outs = [(p, v) for p, m, v in pe.signature.flatten(pe) if m.flow.name == "Out"]
    values = {("row", "a0"): 3, ("col", "b"): -5 & 0xFF,
              ("row", "ctrl"): BaselineCtrl(acc=1, clear=1).pack()}
    word = 0
    offset = 0
    for path, v in ins:
        word |= values.get(tuple(path), 0) << offset
        offset += len(v)
    n_in = offset
    n_out = sum(len(v.as_value() if hasattr(v, "as_value") else v) for _, v in outs)
    got = {}

    async def bench(ctx):
        for i in reversed(range(n_in)):          # the first bit shifted in ends at the top
            ctx.set(ring.sin, (word >> i) & 1)
            await ctx.tick()
        ctx.set(ring.sin, 0)
        await ctx.tick()                          # the PE takes its inputs: r0 <= 3 * -5
        ctx.set(ring.load, 1)
        await ctx.tick()
        ctx.set(ring.load, 0)
        bits = 0
        for i in range(n_out):
            bits |= ctx.get(ring.sout) << i
            await ctx.tick()
        off = 0
        for path, v in outs:
            w = len(v.as_value() if hasattr(v, "as_value") else v)
            got["__".join(path)] = (bits >> off) & ((1 << w) - 1)
            off += w

    sim = Simulator(top)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert got["r0"] == (-15) & 0xFFFFFF
    assert got["row_out__a0"] == 3 and got["col_out__b"] == (-5 & 0xFF)


def test_missing_yosys_gives_skipped_rows_and_exit_0(monkeypatch, capsys):
    real_which = shutil.which
    monkeypatch.setattr(synth.shutil, "which",
                        lambda name: None if name in ("yosys", "nextpnr-ice40") else real_which(name))
    assert main(["synth", "--top", "kaleido_pe", "--top", "baseline_pe"]) == 0
    out = capsys.readouterr().out
    assert "kaleido_pe: skipped: yosys not found" in out
    assert "baseline_pe: skipped: yosys not found" in out


def test_unknown_top_is_an_error(capsys):
    assert main(["synth", "--top", "nope"]) == 2
    assert "--top must be one of" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("yosys") is None, reason="yosys not installed")
def test_generic_synthesis_of_both_pes(capsys, tmp_path):
    """The real yosys flow (generic gates only; the iCE40 runs belong to 'make synth')."""
    report = tmp_path / "synth.json"
    assert main(["synth", "--no-ice40", "--top", "kaleido_pe", "--top", "baseline_pe",
                 "--json", str(report)]) == 0
    out = capsys.readouterr().out
    assert "kaleido_pe / baseline_pe: cells" in out
    results = {r["top"]: r for r in json.loads(report.read_text())}
    reuse, base = results["kaleido_pe"], results["baseline_pe"]
    for r in (reuse, base):
        assert r["cells"] > 100 and r["longest_path"] > 10 and r["transistors"] > 1000
        assert r["ice40_luts"] is None and not r["notes"]
    # Flip-flops: the forwarding registers, the drain register, R0 (and R1/R2), busy.
    assert reuse["ffs"] == 49 + 12 + 25 + 3 * 24 + 1
    assert {u["module"] for u in reuse["units"]} >= {"mul_unit", "gate_unit", "acc_unit"}
    assert reuse["transistors"] > base["transistors"]
