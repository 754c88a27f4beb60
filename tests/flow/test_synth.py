"""``kaleido-hw synth`` and ``kaleido_hw.flow.stdcell``: parsers of yosys and OpenSTA output (captured
text), netlist naming, the I/O ring, missing tools, and a real standard-cell run on
``baseline_pe``."""

from __future__ import annotations

import json

import pytest
from amaranth.hdl import ClockDomain, Module
from amaranth.lib import data
from amaranth.sim import Simulator

from golden.pe.model import BaselineCtrl
from kaleido_hw.cli import main
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.dispatch.layouts import sched_entry_layout
from kaleido_hw.flow import sram_macros, stdcell, synth
from kaleido_hw.pe.pe import BaselinePE


#: ``stat -liberty`` of a hierarchical map (shortened from kaleido_pe).
HIER_STAT = """
6. Printing statistics.

=== pe ===

   Number of wires:                189
   Number of cells:                  7
     AND2X1                          2
     DFFPOSX1                        3
     pe.acc_unit                     1
     pe.mul_unit                     1

   Area for cell type \\pe.acc_unit is unknown!
   Area for cell type \\pe.mul_unit is unknown!

   Chip area for module '\\pe': 320.000000

=== pe.acc_unit ===

   Number of cells:                  4
     DFFPOSX1                        2
     NAND2X1                         2

   Chip area for module '\\pe.acc_unit': 240.000000

=== pe.mul_unit ===

   Number of cells:                  2
     XOR2X1                          2

   Chip area for module '\\pe.mul_unit': 64.500000

=== design hierarchy ===

   pe                                1
     pe.acc_unit                     1
     pe.mul_unit                     1

   Number of wires:               2707
   Number of cells:                 11

   Chip area for top module '\\pe': 624.500000
"""

#: OpenSTA ``report_checks`` (shortened from baseline_pe): input port -> flip-flop.
TIMING_TO_FLOP = """Startpoint: col__b[0] (input port clocked by clk)
Endpoint: _2255_ (rising edge-triggered flip-flop clocked by clk)
Path Group: clk
Path Type: max

   Delay     Time   Description
-----------------------------------------------------------
   0.000    0.000   clock clk (rise edge)
   0.000    0.000 ^ col__b[0] (in)
   0.070    0.070 v _1550_/Y (NAND3X1)
   0.058    3.489 v _2106_/Y (AOI21X1)
   0.000    3.489 v _2255_/D (DFFPOSX1)
            3.489   data arrival time

  10.000   10.000   clock clk (rise edge)
           10.000 ^ _2255_/CLK (DFFPOSX1)
  -0.161    9.839   library setup time
            9.839   data required time
-----------------------------------------------------------
            9.839   data required time
           -3.489   data arrival time
-----------------------------------------------------------
            6.349   slack (MET)
"""

#: A hierarchical endpoint (the engine): the kind wraps to the next line; output port end.
TIMING_TO_PORT = """Startpoint: array0/pe/_17_ (rising edge-triggered flip-flop clocked by clk)
Endpoint: r0[0]
          (output port clocked by clk)
Path Group: clk
            0.160   data arrival time
   0.000   10.000   output external delay
           10.000   data required time
"""

#: ``report_checks -fields {cap slew}`` (shortened from cluster_scheduler): one register
#: output drives 3,369 inputs unbuffered.
TIMING_HEAVY = """Startpoint: _67484_ (rising edge-triggered flip-flop clocked by clk)
Endpoint: _68515_ (rising edge-triggered flip-flop clocked by clk)
Path Group: clk
Path Type: max

     Cap     Slew    Delay     Time   Description
---------------------------------------------------------------------------
            0.000    0.000    0.000   clock clk (rise edge)
            0.000    0.000    0.000 ^ _67484_/CLK (DFFPOSX1)
  52.874   49.810   46.473   46.473 v _67484_/Q (DFFPOSX1)
   0.013    3.708    8.965   55.438 ^ _49946_/Y (NAND2X1)
   0.009    0.059    0.059   57.289 v _49957_/Y (NOR2X1)
            0.059    0.000   57.289 v _68515_/D (DFFPOSX1)
                             57.289   data arrival time

                             10.000 ^ _68515_/CLK (DFFPOSX1)
                    -0.161    9.839   library setup time
                              9.839   data required time
"""

POWER = """
Group                  Internal  Switching    Leakage      Total
                          Power      Power      Power      Power
----------------------------------------------------------------
Sequential             1.61e-03   3.63e-06   1.09e-08   1.62e-03  46.9%
Combinational          1.20e-03   6.29e-04   5.60e-08   1.83e-03  53.1%
----------------------------------------------------------------
Total                  2.82e-03   6.33e-04   6.70e-08   3.45e-03 100.0%
"""

NETLIST = """module \\top (clk, r0);
  input clk;
  DFFPOSX1 _17_ (
    .CLK(clk),
    .D(_03_),
    .Q(\\acc_unit.r0 [19])
  );
  NAND2X1 _18_ (
    .A(a),
    .B(b),
    .Y(_03_)
  );
  \\top.array0  array0 (
    .clk(clk)
  );
endmodule

module \\top.array0 (clk);
  DFFPOSX1 _05_ (
    .CLK(clk),
    .D(x),
    .Q(busy)
  );
  KSRAM_4x8 mem (
    .RD_CLK(clk)
  );
endmodule
"""

LIBERTY = """library(x) {
  cell (NAND2X1) { area : 24; pin(A) { direction : input; } }
  cell (DFFPOSX1) {
    area : 96;
    ff (DS0000,P0002) { next_state : "D"; clocked_on : "CLK"; }
  }
  cell (LATCH) { latch (P0000,P0001) { data_in : "D"; enable : "CLK"; } }
}
"""


def test_parse_stat_per_module_and_hierarchy_total():
    s = stdcell.parse_stat(HIER_STAT)
    assert list(s) == ["pe", "pe.acc_unit", "pe.mul_unit"]
    assert (s["pe"].cells, s["pe"].area_um2) == (7, 320.0)
    assert s["pe"].types == {"AND2X1": 2, "DFFPOSX1": 3, "pe.acc_unit": 1, "pe.mul_unit": 1}
    assert s["pe.mul_unit"].area_um2 == 64.5
    counts, total = stdcell.parse_hierarchy(HIER_STAT)
    assert counts == {"pe": 1, "pe.acc_unit": 1, "pe.mul_unit": 1} and total == 624.5
    assert stdcell.parse_hierarchy("=== pe ===\n   Number of cells: 1\n") == ({}, None)
    with pytest.raises(ValueError, match="no module statistics"):
        stdcell.parse_stat("nothing here")


def test_parse_timing_gives_the_minimum_period():
    p = stdcell.parse_timing(TIMING_TO_FLOP)
    assert (p.startpoint, p.start_kind) == ("col__b[0]", "input port clocked by clk")
    assert p.endpoint == "_2255_" and "flip-flop" in p.end_kind
    assert (p.arrival_ns, p.required_ns) == (3.489, 9.839)
    assert p.min_period_ns(10.0) == pytest.approx(3.489 + 0.161)       # + setup
    q = stdcell.parse_timing(TIMING_TO_PORT)
    assert q.endpoint == "r0[0]" and q.end_kind == "output port clocked by clk"
    assert q.min_period_ns(10.0) == pytest.approx(0.160)              # output delay 0
    with pytest.raises(ValueError, match="no timing path"):
        stdcell.parse_timing("No paths found.\n")


def test_path_stages_show_an_unbuffered_register():
    p = stdcell.parse_timing(TIMING_HEAVY)
    assert [(st.pin, st.load_pf, st.delay_ns) for st in p.stages] == [
        ("_67484_/Q", 52.874, 46.473), ("_49946_/Y", 0.013, 8.965), ("_49957_/Y", 0.009, 0.059)]
    assert max(st.load_pf for st in p.stages) > stdcell.HIGH_LOAD_PF
    assert p.arrival_ns == 57.289 and p.min_period_ns(10.0) == pytest.approx(57.45)


def test_parse_power_is_the_total_in_watts():
    assert stdcell.parse_power(POWER) == pytest.approx(3.45e-3)
    with pytest.raises(ValueError, match="Total"):
        stdcell.parse_power("")


def test_liberty_cells_and_register_names():
    cells, seq = stdcell.liberty_cells(LIBERTY)
    assert cells == {"NAND2X1", "DFFPOSX1", "LATCH"} and seq == {"DFFPOSX1", "LATCH"}
    index = stdcell.NetlistIndex(NETLIST, cells, seq)
    assert index.describe("top", "_17_") == ("acc_unit.r0[19]", "register")
    assert index.describe("top", "array0/_05_") == ("array0/busy", "register")
    assert index.describe("top", "array0/mem") == ("array0/mem", "KSRAM_4x8")
    assert index.describe("top", "_18_") == ("_18_", None)
    assert index.describe("top", "nowhere/_1_") == ("nowhere/_1_", None)


def test_scripts_carry_the_stated_method():
    ys = stdcell.yosys_script("pe", "pe.v", "cells.lib")
    assert "synth -flatten -top pe" in ys and "dfflibmap -liberty cells.lib" in ys
    assert f"abc -liberty cells.lib -script {stdcell.ABC_SCRIPT}" in ys
    assert "buffer,-N,8;upsize;dnsize" in stdcell.ABC_SCRIPT
    assert "write_json mapped.json" in ys
    assert "-flatten" not in stdcell.yosys_script("pe", "pe.v", "cells.lib", flatten=False)
    fin = stdcell.finish_script("pe", "buffered.json", ["cells.lib"], netlist_file="pe.net.v")
    assert "read_json buffered.json" in fin and "stat -liberty cells.lib" in fin
    assert "write_verilog -noattr -simple-lhs pe.net.v" in fin
    sta = stdcell.sta_script("pe", "pe.net.v", ["cells.lib"])
    assert "create_clock -name clk -period 10 [get_ports clk]" in sta
    assert "set_power_activity -global -activity 0.1 -duty 0.5" in sta


def test_stdcell_available_names_the_missing_package(monkeypatch, tmp_path):
    real_which = stdcell.shutil.which
    monkeypatch.setattr(stdcell.shutil, "which",
                        lambda name: None if name == "sta" else real_which(name))
    monkeypatch.setenv(stdcell.LIBERTY_ENV, str(tmp_path / "none.lib"))
    why = stdcell.stdcell_available()
    assert "opensta" in why and "none.lib" in why and stdcell.LIBERTY_ENV in why
    monkeypatch.delenv(stdcell.LIBERTY_ENV)
    monkeypatch.setattr(stdcell, "DEFAULT_LIBERTY", tmp_path / "osu.lib")
    assert "qflow-tech-osu018" in stdcell.stdcell_available()


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


def test_missing_tools_give_skipped_rows_and_exit_0(monkeypatch, capsys):
    real_which = stdcell.shutil.which
    monkeypatch.setattr(stdcell.shutil, "which",
                        lambda name: None if name in ("sta", "yosys", "nextpnr-ice40")
                        else real_which(name))
    assert main(["synth", "--top", "kaleido_pe", "--top", "baseline_pe"]) == 0
    out = capsys.readouterr().out
    assert "standard cells skipped: yosys not found" in out and "opensta" in out
    assert "kaleido_pe: skipped: yosys not found" in out
    assert "baseline_pe   skipped" in out or "baseline_pe  skipped" in out


def test_unknown_top_is_an_error(capsys):
    assert main(["synth", "--top", "nope"]) == 2
    assert "--top must be one of" in capsys.readouterr().err


def test_report_ratios_and_arrays_worth():
    def res(top, area, ffs, path, power):
        return synth.SynthResult(top, stdcell.StdCellResult(
            top, area_um2=area, cells=10, ffs=ffs, path_ns=path, arrival_ns=path - 0.2,
            startpoint="a (input port)", endpoint="b (register)", fmax_mhz=1000 / path,
            power_mw=power))
    text = synth.format_report([res("pe_array", 1000.0, 100, 5.0, 10.0),
                                res("baseline_array", 500.0, 50, 4.0, 5.0),
                                res("cluster_scheduler", 1500.0, 300, 3.0, 20.0)])
    assert "pe_array / baseline_array: area 2.00x" in text and "path 1.25x" in text
    assert "cluster_scheduler: 1.50 pe_arrays' worth of area, 2.00x its power" in text
    assert "a (input port) -> b (register)" in text


@pytest.mark.skipif(stdcell.stdcell_available() is not None,
                    reason=f"standard-cell flow unavailable: {stdcell.stdcell_available()}")
def test_standard_cells_of_baseline_pe(capsys, tmp_path):
    """The real flow on the smallest top (a few seconds): area, path, its ends, power and the
    per-unit breakdown that sums to the hierarchical total."""
    report = tmp_path / "synth.json"
    assert main(["synth", "--no-ice40", "--top", "baseline_pe", "--json", str(report)]) == 0
    out = capsys.readouterr().out
    assert "baseline_pe" in out and "area by unit" in out
    data = json.loads(report.read_text())
    assert data["method"]["clock_period_ns"] == stdcell.CLOCK_PERIOD_NS
    (r,) = data["tops"]
    s = r["stdcell"]
    assert r["ice40"] is None and not s["notes"], s["notes"]
    # OSU 0.18 um: a few tens of thousands of um2, 68 flip-flops (forwarding 19, R0 24 +
    # drain register 25), a path of a few ns from an operand port into the accumulator.
    assert 10_000 < s["area_um2"] < 100_000 and s["ffs"] == 68
    assert 1.0 < s["arrival_ns"] < s["path_ns"] < 10.0
    assert s["fmax_mhz"] == pytest.approx(1000 / s["path_ns"], abs=0.1)
    assert s["startpoint"].endswith("(input port)") and s["endpoint"].endswith("(register)")
    # R0 (named by its net: the output port r0 is the register itself).
    assert s["endpoint"].split("[")[0] in ("r0", "acc_unit.r0")
    assert 0.1 < s["power_mw"] < 100
    units = {u["path"]: u for u in s["units"]}
    assert set(units) == {"", "acc_unit", "mul_unit"}
    assert sum(u["ffs"] for u in units.values()) == 68
    # The hierarchical map differs a little from the flat one (no cross-module optimization).
    assert sum(u["area_um2"] for u in units.values()) == pytest.approx(s["area_um2"], rel=0.1)


def test_memory_declarations_pick_the_macro_flow():
    """Tops that declare memories go through the SRAM-macro mapping, the others do not."""
    assert stdcell.MEMORY_DECLARATION.search("  reg [32:0] string_queue [63:0];\n")
    assert stdcell.MEMORY_DECLARATION.search("reg \\a.b [7:0];")
    assert not stdcell.MEMORY_DECLARATION.search("  reg [32:0] r0;\n  wire [3:0] w;\n")
    ys = stdcell.map_script("s", "s.v", "cells.lib", flatten=True)
    assert "synth -flatten -top s -run begin:fine" in ys and "memory_map" not in ys
    assert "dump t:$mem_v2" in ys
    assert "memory_map *fifo*" in stdcell.map_script("s", "s.v", "c.lib", register_memories="*fifo*")


@pytest.mark.skipif(stdcell.stdcell_available() is not None,
                    reason=f"standard-cell flow unavailable: {stdcell.stdcell_available()}")
def test_scheduler_memories_are_sram_macros():
    """The ClusterScheduler's three E-entry memories (string queue, two output banks) are
    macros of the stated density; its logic is the rest, a few hundred flip-flops."""
    cfg = KaleidoConfig()
    r = stdcell.synth_stdcell("cluster_scheduler", cfg)
    assert not r.notes, r.notes
    E = cfg.sched_entries
    entry_bits = data.Layout.cast(sched_entry_layout(cfg)).size
    assert r.sram_bits == 3 * E * entry_bits
    assert r.sram_um2 == pytest.approx(r.sram_bits * sram_macros.SRAM_UM2_PER_BIT, rel=1e-6)
    assert r.logic_um2 == pytest.approx(r.area_um2 - r.sram_um2)
    assert r.ffs < 3 * E * entry_bits / 4       # the entries are not flip-flops
    assert 0 < r.path_ns < 20
