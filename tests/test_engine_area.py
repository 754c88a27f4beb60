"""``kaleido-hw synth --engine``: parsers, block attribution, the dispatcher share, the cache,
and one real (tiny) engine synthesis whose breakdown must sum to yosys' total and whose
memories must be exactly what the configuration implies."""

from __future__ import annotations

import shutil

import pytest

from kaleido_hw import engine_area as ea
from kaleido_hw.cli import main
from kaleido_hw.config import KaleidoConfig

#: The smallest engine with every block (P = 1, 1 x 1 PEs, 4 tokens, 8 channels, W = 4).
TINY = KaleidoConfig(engine_arrays=1, engine_dispatcher="full", rows=1, cols=1,
                     engine_max_tokens=4, engine_max_head_dim=8, sched_pattern_width=4,
                     sched_entries=4, sched_clusters=2, matcher_channels=4)

DUMP = r"""
module \top
  attribute \src "x"
  cell $mem_v2 \q_mem0
    parameter \ABITS 3
    parameter \INIT 512'0000
    parameter \SIZE 8
    parameter \WIDTH 64
    connect \RD_ARST 3'000
  end
module \top.acc
  cell $mem_v2 \plane0_bank0
    parameter \SIZE 64
    parameter \WIDTH 24
  end
"""

STAT = """
=== top ===
   Number of cells:                 12
     $_AND_                          5
     $_SDFF_PP0_                     4
     $mem_v2                         1
     top.acc                         1
   Estimated number of transistors:         54+

=== top.acc ===
   Number of cells:                  4
     $_NOT_                          3
     $mem_v2                         1
   Estimated number of transistors:          6+

=== design hierarchy ===
   top                               1
     top.acc                         1
   Number of cells:                 14
   Estimated number of transistors:         60+
"""


def test_parse_memories_and_totals():
    assert ea.parse_memories(DUMP, "top") == [("", "q_mem0", 64, 8), ("acc", "plane0_bank0", 24, 64)]
    assert ea.parse_hierarchy_total(STAT) == (14, 60)
    with pytest.raises(ValueError, match="design hierarchy"):
        ea.parse_hierarchy_total("=== top ===\n")


def test_fill_sums_modules_and_rejects_a_missed_module():
    r = ea.EngineArea(1, "none", {})
    ea._fill(r, STAT, DUMP, "top")
    assert [(m.path, m.block, m.cells, m.ffs) for m in r.modules] == [
        ("", "control", 9, 4), ("acc", "buffer logic", 3, 0)]
    assert r.transistors == 60 + ea.FF_TRANSISTORS * 4
    assert r.memory_bits()["operands"] == 512 and r.memory_bits()["accumulation planes"] == 1536
    r = ea.EngineArea(1, "none", {})
    with pytest.raises(ValueError, match="sum to 54, yosys' total is 60"):
        missed = STAT.split("=== top.acc ===")[0] + "=== design hierarchy ===" + \
            STAT.split("=== design hierarchy ===")[1]
        ea._fill(r, missed, DUMP, "top")


def test_block_and_memory_attribution():
    assert ea.block_of("") == "control"
    assert ea.block_of("array3.pe_0_1.decoder.table") == "array 3"
    assert ea.block_of("seq2.q_codes") == "sequencer 2"
    assert ea.block_of("seq2.slots.matcher") == "dispatcher: SlotUnits"
    assert ea.block_of("k_order.sched") == "dispatcher: OrderUnits"
    assert ea.block_of("q_pre_codes") == "dispatcher: pre-pass codes"
    assert ea.block_of("acc") == "buffer logic"
    with pytest.raises(ValueError, match="no block"):
        ea.block_of("mystery")
    assert ea.memory_kind("", "k_mem3") == "operands"
    assert ea.memory_kind("k_order", "inverse") == "order memories"
    assert ea.memory_kind("q_order.sched", "banks") == "scheduler batches"
    assert ea.memory_kind("acc", "plane9_bank15") == "accumulation planes"
    with pytest.raises(ValueError, match="no known kind"):
        ea.memory_kind("seq0", "slots")


def test_strip_memory_inits_keeps_everything_else():
    v = ("  reg [7:0] m [1:0];\n  initial begin\n    m[0] = 8'h00;\n    m[1] = 8'h00;\n  end\n"
         "  initial begin\n    x = 1;\n  end\n")
    assert ea.strip_memory_inits(v) == "  reg [7:0] m [1:0];\n  initial begin\n    x = 1;\n  end\n"


def _area(arrays, disp, blocks):
    r = ea.EngineArea(arrays, disp, {})
    r.modules = [ea.ModuleArea(p, ea.block_of(p), 1, 0, t) for p, t in blocks]
    return r


def test_dispatcher_share_from_a_none_full_pair():
    none = _area(1, "none", [("", 100), ("array0", 400), ("seq0", 300), ("acc", 200)])
    full = _area(1, "full", [("", 120), ("array0", 500), ("seq0", 330), ("acc", 210),
                             ("seq0.slots", 90), ("q_order", 60), ("k_order.sched", 40),
                             ("q_pre_codes", 50)])
    d = ea.dispatcher_share(full, none)
    assert d["total"] == 1400 and d["dispatcher_modules"] == 240
    assert d["merged_cell_overhead"] == 100 and d["merged_cell_overhead_pct_of_arrays"] == 25
    assert d["modules_with_cells"] == 340 and d["delta"] == 400
    assert d["delta_pct"] == pytest.approx(100 * 400 / 1400)
    assert (d["sequencers_delta"], d["control_delta"], d["buffer_delta"]) == (30, 20, 10)
    assert "dispatcher share, P = 1" in ea.format_engine_report([none, full])


def test_expected_memory_bits_follow_the_configuration():
    cfg = ea.AREA_CONFIG.replace(engine_arrays=4)
    bits = ea.expected_memory_bits(cfg)
    assert bits["operands"] == 2 * 4 * 16 * 8 * 32
    # 32 channels in W = 16 chunks: at most 4 planes (e.g. groups of 1, 1 and 30 channels);
    # 16 tokens in 16 banks: one column block (KB = 2 words) per Q token.
    assert bits["accumulation planes"] == 4 * 16 * (16 * 2) * 24
    assert ea.expected_memory_bits(cfg.replace(engine_dispatcher="none"))["order memories"] == 0


def test_cache_round_trip_and_staleness(tmp_path, monkeypatch):
    monkeypatch.setattr(ea, "_yosys_version", lambda: "Yosys test")
    monkeypatch.setattr(ea.shutil, "which", lambda name: "/usr/bin/" + name)
    r = _area(1, "full", [("", 10), ("q_order", 5)])
    r.memories = [ea.MemoryBits("", "q_mem0", "operands", 8, 4)]
    path = tmp_path / "engine_area.json"
    ea.save_cache([r], TINY, path)
    got, why = ea.load_cache(TINY, path)
    assert why == "" and got[0].transistors == 15 and got[0].memory_bits()["operands"] == 32
    got, why = ea.load_cache(TINY.replace(rows=2), path)
    assert got is None and "stale" in why
    got, why = ea.load_cache(TINY, tmp_path / "none.json")
    assert got is None and "kaleido-hw synth --engine" in why


def test_bad_engine_arrays_is_an_error(capsys):
    assert main(["synth", "--engine", "--engine-arrays", "0,4"]) == 2
    assert "--engine-arrays must be" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("yosys") is None, reason="yosys not installed")
def test_tiny_engine_synthesis():
    """The real flow on TINY: every block present, sums exact, memories as configured."""
    r = ea.synth_engine(TINY)
    assert r.ok and not r.notes, r.notes
    blocks = r.blocks()
    assert list(blocks) == list(ea.BLOCKS)
    assert all(v["transistors"] > 0 for v in blocks.values())
    assert sum(v["transistors"] for v in blocks.values()) == r.transistors
    assert r.transistors - ea.FF_TRANSISTORS * r.ffs == r.total_transistors
    assert r.memory_bits() == ea.expected_memory_bits(TINY)
    # Every array copy of Q and K and every accumulation bank stayed a memory.
    assert sum(m.kind == "accumulation planes" for m in r.memories) == 4   # planes x P*C
    assert {(m.path, m.name) for m in r.memories if m.kind == "operands"} == {
        ("", "q_mem0"), ("", "k_mem0")}


def test_report_area_section_reads_the_cache(tmp_path, monkeypatch):
    """The report's area section shows the cached builds, and says why when there are none."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kaleido_hw import report

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(ea, "_yosys_version", lambda: "Yosys test")
    monkeypatch.setattr(ea.shutil, "which", lambda name: "/usr/bin/" + name)
    r = report.Result("area")
    report._engine_area(r, plt)
    assert "Whole-engine breakdown not included: no build" in r.notes[0] and not r.figures
    cfg = ea.AREA_CONFIG.to_dict()
    none = _area(1, "none", [("", 100), ("array0", 400), ("seq0", 300), ("acc", 200)])
    full = _area(1, "full", [("", 120), ("array0", 500), ("seq0", 330), ("acc", 210),
                             ("seq0.slots", 90), ("q_order", 100), ("q_pre_codes", 50)])
    for b in (none, full):
        b.config = cfg
    ea.save_cache([none, full], ea.AREA_CONFIG)
    r = report.Result("area")
    report._engine_area(r, plt)
    assert "| dispatcher: SlotUnits | 0 | 90 |" in r.table
    assert "full - none 28.6% of the full engine" in r.table
    assert r.summary["engine"]["P=1 full"]["transistors"] == 1400
    assert {"top": "engine P=1 full: whole engine", "cells": 7, "flipflops": 0,
            "transistors": 1400, "sram_bits": 0} in r.rows
    assert "-engine" in r.figures
    plt.close("all")


def test_engine_command_prints_saves_and_caches(tmp_path, monkeypatch, capsys):
    """``kaleido-hw synth --engine`` (synthesis replaced by fixed figures): one none and one
    full build per P, the report text, the cache and the JSON."""
    calls = []

    def fake(cfg, **kw):
        calls.append((cfg.engine_arrays, cfg.engine_dispatcher, cfg.engine_max_head_dim))
        blocks = [("", 100), ("array0", 400), ("seq0", 300), ("acc", 200)]
        if cfg.engine_dispatcher == "full":
            blocks += [("seq0.slots", 90), ("q_order", 100)]
        r = _area(cfg.engine_arrays, cfg.engine_dispatcher, blocks)
        r.config = cfg.to_dict()
        return r

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(ea, "synth_engine", fake)
    monkeypatch.setattr(ea, "_yosys_version", lambda: "Yosys test")
    assert main(["synth", "--engine", "--engine-arrays", "2", "--json", "e.json"]) == 0
    out = capsys.readouterr().out
    assert calls == [(2, "none", 32), (2, "full", 32)]
    assert "dispatcher share, P = 2" in out and "saved to build/engine_area.json" in out
    assert (tmp_path / "e.json").exists()
    monkeypatch.setattr(ea.shutil, "which", lambda name: "/usr/bin/" + name)
    got, why = ea.load_cache()
    assert why == "" and [(b.arrays, b.dispatcher) for b in got] == [(2, "none"), (2, "full")]
