"""``kaleido-hw synth --engine``: parsers, block attribution, the SRAM macro model, the
dispatcher share and plain-engine ratios, the cache, and one real (tiny) engine run whose
breakdown must sum to yosys' total and whose memories must be exactly what the configuration
implies."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from kaleido_hw.cli import main
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.flow import engine_area as ea
from kaleido_hw.flow import sram_macros as sm
from kaleido_hw.flow import stdcell
from kaleido_hw.flow.dedup import instance_modules
from kaleido_hw.flow.generate import emit_verilog


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
    parameter \RD_CLK_ENABLE 2'11
    parameter \RD_PORTS 2
    parameter \SIZE 8
    parameter \WIDTH 64
    parameter \WR_PORTS 1
    connect \RD_ARST 2'00
  end
module \top.acc
  cell $mem_v2 \plane0_bank0
    parameter \ABITS 6
    parameter \RD_CLK_ENABLE 1'1
    parameter \RD_PORTS 1
    parameter \SIZE 64
    parameter \WIDTH 24
    parameter \WR_PORTS 1
  end
"""

Q_SHAPE = sm.MemoryShape(8, 64, 3, 2, 1)
ACC_SHAPE = sm.MemoryShape(64, 24, 6, 1, 1)
Q_AREA = sm.macro_area_um2(Q_SHAPE)
ACC_AREA = sm.macro_area_um2(ACC_SHAPE)

#: ``stat -liberty`` with both libraries: the top holds a macro, a submodule and flip-flops.
STAT = f"""
=== top ===
   Number of cells:                 12
     AND2X1                          5
     DFFPOSX1                        4
     {sm.macro_name(Q_SHAPE)}        1
     top.acc                         1
   Area for cell type \\top.acc is unknown!
   Chip area for module '\\top': {500 + Q_AREA:.6f}

=== top.acc ===
   Number of cells:                  4
     INVX1                           3
     {sm.macro_name(ACC_SHAPE)}      1
   Chip area for module '\\top.acc': {48 + ACC_AREA:.6f}

=== design hierarchy ===
   top                               1
     top.acc                         1
   Number of cells:                 14
   Chip area for top module '\\top': {548 + Q_AREA + ACC_AREA:.6f}
"""

CELLS = frozenset({"AND2X1", "DFFPOSX1", "INVX1"})
SEQ = frozenset({"DFFPOSX1"})


def test_parse_memories():
    got = sm.parse_memories(DUMP, "top")
    assert [(m.path, m.name, m.shape) for m in got] == [("", "q_mem0", Q_SHAPE),
                                                         ("acc", "plane0_bank0", ACC_SHAPE)]
    async_dump = DUMP.replace("RD_CLK_ENABLE 2'11", "RD_CLK_ENABLE 2'10")
    assert not sm.parse_memories(async_dump, "top")[0].shape.sync_read


def test_sram_density_comes_from_the_published_macros():
    # GF180MCU x8 macros: 431.86 um wide, +36 um of height per 64 words of 8 bits.
    assert sm.SRAM_UM2_PER_BIT == pytest.approx(431.86 * 36 / 512)
    assert sm.SRAM_UM2_PER_BIT == pytest.approx(30.365, abs=1e-3)
    assert sm.ARRAY_EFFICIENCY == pytest.approx(13.5 / 30.365, abs=1e-4)
    # Each read port is a copy of the array.
    assert Q_AREA == pytest.approx(2 * 8 * 64 * sm.SRAM_UM2_PER_BIT, abs=1e-3)
    assert sm.macro_name(ACC_SHAPE) == "KSRAM_64x24_a6_r1w1"


def test_fill_sums_blocks_and_sram_and_rejects_a_missed_module():
    r = ea.EngineArea(1, "none", {}, top="top")
    ea._fill(r, STAT, sm.parse_memories(DUMP, "top"), CELLS, SEQ)
    assert [(m.path, m.block, m.cells, m.ffs, m.area_um2) for m in r.modules] == [
        ("", "control", 9, 4, pytest.approx(500)), ("acc", "buffer logic", 3, 0, pytest.approx(48))]
    assert r.sram_area_um2 == pytest.approx(Q_AREA + ACC_AREA)
    assert r.area_um2 == pytest.approx(r.total_area_um2)
    assert r.memory_bits()["operands"] == 512 and r.memory_bits()["accumulation planes"] == 1536
    rows = r.blocks(sram=True)
    assert list(rows) == ["control", "buffer logic", "SRAM: operands", "SRAM: accumulation planes"]
    assert sum(v["area_um2"] for v in rows.values()) == pytest.approx(r.area_um2)
    missed = STAT.split("=== top.acc ===")[0] + "=== design hierarchy ===" + \
        STAT.split("=== design hierarchy ===")[1]
    with pytest.raises(ValueError, match="blocks \\+ SRAM sum to"):
        ea._fill(ea.EngineArea(1, "none", {}, top="top"), missed, sm.parse_memories(DUMP, "top"), CELLS, SEQ)


def _stat(modules: dict, instances: dict, macros: dict) -> str:
    """``stat -liberty`` text of a design: {module: {cell type: count}} (library cells of
    CELLS_AREA and macros), {module: [child modules, once per instance]}."""
    area = {**CELLS_AREA, **macros}
    own = {m: sum(k * area[t] for t, k in types.items()) for m, types in modules.items()}

    def whole(m):
        return own[m] + sum(whole(c) for c in instances.get(m, []))

    out = []
    for m, types in modules.items():
        kids = instances.get(m, [])
        lines = [f"     {t} {k}" for t, k in types.items()]
        lines += [f"     {c} {kids.count(c)}" for c in dict.fromkeys(kids)]
        out.append(f"=== {m} ===\n   Number of cells: {sum(types.values()) + len(kids)}\n"
                   + "\n".join(lines) + f"\n   Chip area for module '\\{m}': {own[m]:.6f}\n")
    out.append(f"=== design hierarchy ===\n   top 1\n   Chip area for top module '\\top': "
               f"{whole('top'):.6f}\n")
    return "\n".join(out)


CELLS_AREA = {"AND2X1": 16.0, "DFFPOSX1": 80.0, "INVX1": 8.0}


def test_shared_modules_are_counted_once_per_instance():
    """Modules shared by several instances give the same figures as one copy per instance:
    one ModuleArea and one MemoryBits per instance path, summing to yosys' total."""
    sched_shape = sm.MemoryShape(8, 9, 3, 1, 1)
    sched = sm.macro_name(sched_shape)
    macros = {sm.macro_name(Q_SHAPE): Q_AREA, sm.macro_name(ACC_SHAPE): ACC_AREA,
              sched: sm.macro_area_um2(sched_shape)}
    mods = {"top": {"AND2X1": 5, "DFFPOSX1": 4, sm.macro_name(Q_SHAPE): 1},
            "top.array0": {"AND2X1": 2, "DFFPOSX1": 1},
            "top.q_order": {"INVX1": 1}, "top.k_order": {"INVX1": 2},
            "top.k_order.sched": {"DFFPOSX1": 2, sched: 1},
            "top.acc": {"INVX1": 3, sm.macro_name(ACC_SHAPE): 1}}
    kids = {"top": ["top.array0", "top.array0", "top.q_order", "top.k_order", "top.acc"],
            "top.q_order": ["top.k_order.sched"], "top.k_order": ["top.k_order.sched"]}
    paths = {"": "top", "array0": "top.array0", "array1": "top.array0", "q_order": "top.q_order",
             "q_order.sched": "top.k_order.sched", "k_order": "top.k_order",
             "k_order.sched": "top.k_order.sched", "acc": "top.acc"}
    dump = DUMP + "module \\top.k_order.sched\n  cell $mem_v2 \\banks\n" + "".join(
        f"    parameter \\{k} {v}\n" for k, v in
        {"ABITS": 3, "RD_PORTS": 1, "SIZE": 8, "WIDTH": 9, "WR_PORTS": 1}.items()) + "  end\n"
    shared = ea.EngineArea(2, "full", {}, top="top")
    ea._fill(shared, _stat(mods, kids, macros), sm.parse_memories(dump, "top"), CELLS, SEQ,
             paths)
    # The same design with one module per instance, named by its path.
    copies = {("top." + p if p else "top"): mods[m] for p, m in paths.items()}
    copy_kids = {"top": ["top.array0", "top.array1", "top.q_order", "top.k_order", "top.acc"],
                 "top.q_order": ["top.q_order.sched"], "top.k_order": ["top.k_order.sched"]}
    copy_dump = dump + dump[dump.index("module \\top.k_order.sched"):].replace(
        "k_order", "q_order")
    unshared = ea.EngineArea(2, "full", {}, top="top")
    ea._fill(unshared, _stat(copies, copy_kids, macros), sm.parse_memories(copy_dump, "top"),
             CELLS, SEQ)
    assert [m.path for m in shared.modules] == list(paths)
    key = lambda m: m.path      # noqa: E731
    assert sorted(shared.modules, key=key) == sorted(unshared.modules, key=key)
    assert sorted(shared.memories, key=key) == sorted(unshared.memories, key=key)
    assert shared.blocks(per_array=True, sram=True) == unshared.blocks(per_array=True, sram=True)
    assert shared.total_area_um2 == pytest.approx(unshared.total_area_um2)
    assert shared.area_um2 == pytest.approx(shared.total_area_um2)
    assert shared.ffs == 4 + 1 + 1 + 2 + 2 and shared.memory_bits()["scheduler batches"] == 144
    # A module that no instance path reaches is an error, not a silent omission.
    with pytest.raises(ValueError, match="no instance path"):
        ea._fill(ea.EngineArea(2, "full", {}, top="top"), _stat(mods, kids, macros),
                 sm.parse_memories(dump, "top"), CELLS, SEQ,
                 {p: m for p, m in paths.items() if "array" not in p})


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
    assert ea.memory_kind("acc.reorder", "lane1") == "S reorder buffer"
    with pytest.raises(ValueError, match="no known kind"):
        ea.memory_kind("seq0", "slots")


@pytest.mark.parametrize("engine_pe", ["reuse", pytest.param("reuse-pv",
                                                               marks=pytest.mark.full_set)])
def test_core_attribution(engine_pe):
    """``--engine-top kaleido_core``: every module of a small core with the attention path
    belongs to a block (the engine's below ``ctrl.engine``, the core's arrays with the P @ V
    mode as arrays), each attention unit is found, and its memories have kinds."""
    cfg = KaleidoConfig(rows=2, cols=2, engine_arrays=2, engine_max_tokens=16,
                        engine_max_head_dim=16, vector_lanes=4, vector_max_row=16,
                        core_attention=True, engine_pe=engine_pe)
    text = emit_verilog(ea._component(cfg, ea.CORE_TOP), ea.CORE_TOP, share=True)
    blocks = {ea.block_of(path) for path in instance_modules(text, ea.CORE_TOP)}
    assert {"array 0", "array 1", "sequencer 0", "dispatcher: SlotUnits", "control",
            "buffer logic", "core: controller", "core: DMA", "attention: S row packer",
            "attention: softmax unit", "attention: P transposer", "attention: output unit",
            "attention: P @ V sequencers and buffer", "attention: FIFOs and control",
            "attention: O packer"} <= blocks
    assert ("attention: P @ V arrays" in blocks) == (engine_pe == "reuse")
    assert blocks <= set(ea.BLOCKS) | {"array 0", "array 1", "sequencer 0", "sequencer 1"}
    assert ea.block_of("ctrl.engine") == "control" and ea.block_of("ctrl") == "core: controller"
    with pytest.raises(ValueError, match="core breakdown"):
        ea.block_of("ctrl.mystery")
    assert ea.memory_kind("ctrl.engine", "q_mem1") == "operands"
    assert ea.memory_kind("ctrl.engine.acc", "plane0_bank3") == "accumulation planes"
    assert ea.memory_kind("ctrl.block.pv", "pmem") == "P @ V: P memory"
    assert ea.memory_kind("ctrl.block.pv", "vmem2") == "P @ V: V banks"
    assert ea.memory_kind("ctrl.block.pv.obuf", "obank7") == "P @ V: output banks"
    assert ea.memory_kind("ctrl.block.output", "acc") == "attention: O accumulators"
    assert ea.memory_kind("ctrl.block.softmax", "state_mem") == \
        "attention: softmax buffers and FIFOs"
    assert ea.memory_kind("dma.r_final", "storage") == "DMA FIFOs"
    assert set(ea.MEMORY_KINDS) >= {ea.memory_kind("ctrl.block", "x"),
                                    ea.memory_kind("dma", "x")}



def test_macro_clocks_are_joined_only_when_equal():
    net = ".RD_CLK({ clk, clk, clk }),\n.WR_CLK(clk),\n.RD_CLK({ clk, clk2 })"
    assert sm.join_macro_clocks(net) == ".RD_CLK(clk),\n.WR_CLK(clk),\n.RD_CLK({ clk, clk2 })"


def test_macro_script_retypes_each_memory_once():
    mems = sm.parse_memories(DUMP, "top")
    ys = sm.macro_script(mems, "top", "cells.lib", "sram.lib")
    assert f"chtype -set {sm.macro_name(Q_SHAPE)} top/q_mem0" in ys
    assert f"chtype -set {sm.macro_name(ACC_SHAPE)} top.acc/plane0_bank0" in ys
    assert "-unset RD_CLK_ENABLE" in ys and "write_json macros.json" in ys
    finish = stdcell.finish_script("top", "buffered.json", ["cells.lib", "sram.lib"],
                                   netlist_file="top.net.v")
    assert "stat -liberty cells.lib -liberty sram.lib" in finish
    assert "read_liberty -lib sram.lib" in finish and "write_verilog" in finish


@pytest.mark.skipif(shutil.which("sta") is None, reason="OpenSTA not installed ('opensta')")
def test_macro_liberty_reads_in_opensta(tmp_path):
    (tmp_path / "m.lib").write_text(sm.macro_liberty([Q_SHAPE, ACC_SHAPE,
                                                      sm.MemoryShape(4, 2, 2, 1, 1, False)]))
    (tmp_path / "t.tcl").write_text("read_liberty m.lib\n")
    r = subprocess.run(["sta", "-no_splash", "-exit", "t.tcl"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "Error" not in r.stdout + r.stderr, r.stdout + r.stderr


def _area(arrays, variant, blocks, sram=0.0):
    r = ea.EngineArea(arrays, variant, {})
    r.modules = [ea.ModuleArea(p, ea.block_of(p), 1, 0, float(a)) for p, a in blocks]
    if sram:
        r.memories = [ea.MemoryBits("acc", "plane0_bank0", "accumulation planes", 8, 4, 1, sram)]
    return r


NONE_BLOCKS = [("", 100), ("array0", 400), ("seq0", 300), ("acc", 200)]
FULL_BLOCKS = [("", 120), ("array0", 500), ("seq0", 330), ("acc", 210), ("seq0.slots", 90),
               ("q_order", 60), ("k_order.sched", 40), ("q_pre_codes", 50)]


def test_dispatcher_share_from_a_none_full_pair():
    none, full = _area(1, "none", NONE_BLOCKS, 100), _area(1, "full", FULL_BLOCKS, 150)
    d = ea.dispatcher_share(full, none)
    assert d["logic"] == 1400 and d["total"] == 1550 and d["dispatcher_modules"] == 240
    assert d["merged_cell_overhead"] == 100 and d["merged_cell_overhead_pct_of_arrays"] == 25
    assert d["modules_with_cells"] == 340 and d["delta"] == 400 and d["sram_delta"] == 50
    assert d["delta_pct"] == pytest.approx(100 * 400 / 1400)
    assert (d["sequencers_delta"], d["control_delta"], d["buffer_delta"]) == (30, 20, 10)
    assert "dispatcher share, P = 1" in ea.format_engine_report([none, full])
    # Against the PE arrays (the paper's measure): the modules, the dispatcher's own memories
    # and the operand copy's read ports past the first (the pre-pass's); the other memories
    # and a one-port operand copy are not the dispatcher's.
    full.memories += [ea.MemoryBits("", "q_mem0", "operands", 8, 4, 3, 60.0),
                      ea.MemoryBits("", "k_mem0", "operands", 8, 4, 1, 20.0),
                      ea.MemoryBits("q_order", "order", "order memories", 4, 4, 1, 7.0),
                      ea.MemoryBits("q_order.sched", "banks", "scheduler batches", 4, 4, 1, 5.0),
                      ea.MemoryBits("seq0.slots", "sel_store", "slot stores", 4, 4, 1, 3.0)]
    d = ea.dispatcher_share(full, none)
    assert (d["dispatcher_sram"], d["prepass_ports"]) == (15.0, 40.0)
    assert d["of_arrays_pct"] == pytest.approx(100 * (240 + 15 + 40) / 500)
    assert "of the PE arrays" in ea.format_engine_report([none, full])


def test_ratios_to_the_plain_engine():
    plain = _area(4, "plain", [("", 100), ("array0", 300)], 100)
    full = _area(4, "full", FULL_BLOCKS, 100)
    full.fmax_mhz, plain.fmax_mhz = 100.0, 125.0
    ratios = ea.plain_ratios([plain, full, _area(1, "none", NONE_BLOCKS)])
    assert list(ratios) == ["P=4 full"]
    assert ratios["P=4 full"]["area"] == pytest.approx(1500 / 500)
    assert ratios["P=4 full"]["fmax"] == pytest.approx(0.8)
    assert "P=4 full: area 3.00x" in ea.format_engine_report([plain, full])


def test_builds_and_variants():
    assert ea.default_builds((1, 4), ("none", "full")) == [(1, "none"), (1, "full"),
                                                           (4, "none"), (4, "full")]
    with pytest.raises(ValueError, match="engine variant must be one of plain, none"):
        ea.default_builds((1,), ("fast",))
    assert ea.variant_config(ea.AREA_CONFIG, 2, "matcher").engine_dispatcher == "matcher"
    if not ea.plain_available(ea.AREA_CONFIG):
        with pytest.raises(ValueError, match="engine_pe"):
            ea.variant_config(ea.AREA_CONFIG, 1, "plain")
        (r,) = ea.run_builds(ea.AREA_CONFIG, [(1, "plain")])
        assert not r.ok and r.top == "plain_engine" and "skipped" in r.notes[0]
    else:
        cfg = ea.variant_config(ea.AREA_CONFIG, 1, "plain")
        assert (cfg.engine_pe, cfg.engine_dispatcher) == ("plain", "none")


def test_expected_memory_bits_follow_the_configuration():
    cfg = ea.AREA_CONFIG.replace(engine_arrays=4)
    bits = ea.expected_memory_bits(cfg)
    assert bits["operands"] == 2 * 4 * 16 * 8 * 32
    # A plane per group (the K order natural: sched_sides "q"); 16 tokens in 16 banks: one
    # column block (KB = 2 words) per Q token.
    assert bits["accumulation planes"] == 3 * 16 * (16 * 2) * 24
    # Both sides ordered: a plane per chunk, 32 channels in W = 16 chunks: at most 4 (e.g.
    # groups of 1, 1 and 30 channels); and the K OrderUnit's order, key and inverse memories.
    qk = ea.expected_memory_bits(cfg.replace(sched_sides="qk"))
    assert qk["accumulation planes"] == 4 * 16 * (16 * 2) * 24
    # Per ordered side: two order banks and the key memory of 16 keys (a 4-bit token and a
    # follower bit); the K side's inverse orders hold 4-bit positions.
    assert qk["order memories"] == 2 * (3 * 16 * 5) + 4 * 16 * 4
    assert bits["order memories"] == 3 * 16 * 5
    assert qk["scheduler batches"] == 2 * bits["scheduler batches"]
    # The scheduler's string queue (E = 64 entries of a 5-bit id and a 16-bit pattern) and
    # its two output banks of ids only.
    assert bits["scheduler batches"] == 64 * (5 + 16) + 2 * 64 * 5
    # The read-out's reorder buffer: two row pairs of 16 tokens, 32-bit values.
    assert bits["S reorder buffer"] == 2 * 2 * 16 * 32
    # Per array a SlotUnit's store: one bank of W = 16 slots of the four columns' 3-bit
    # selects.
    assert bits["slot stores"] == 4 * 16 * 3 * 4
    assert ea.expected_memory_bits(cfg.replace(engine_dispatcher="none"))["order memories"] == 0


def test_cache_round_trip_and_staleness(tmp_path, monkeypatch):
    monkeypatch.setattr(ea, "_yosys_version", lambda: "Yosys test")
    monkeypatch.setattr(ea.shutil, "which", lambda name: "/usr/bin/" + name)
    r = _area(1, "full", [("", 10), ("q_order", 5)], 32)
    path = tmp_path / "engine_area.json"
    ea.save_cache([r], TINY, path)
    got, why = ea.load_cache(TINY, path)
    assert why == "" and got[0].area_um2 == 47 and got[0].memory_bits()["accumulation planes"] == 32
    got, why = ea.load_cache(TINY.replace(rows=2), path)
    assert got is None and "no build of this configuration" in why
    # Builds of another configuration are kept beside, and each is replaced by its own.
    ea.save_cache([_area(4, "full", [("", 20)], 64)], TINY.replace(rows=2), path)
    ea.save_cache([_area(1, "none", [("", 30)], 32)], TINY, path)
    assert ea.load_cache(TINY.replace(rows=2), path)[0][0].area_um2 == 84
    assert ea.load_cache(TINY, path)[0][0].variant == "none"
    monkeypatch.setattr(ea, "_yosys_version", lambda: "Yosys other")
    got, why = ea.load_cache(TINY, path)
    assert got is None and "stale" in why
    got, why = ea.load_cache(TINY, tmp_path / "none.json")
    assert got is None and "kaleido-hw synth --engine" in why


def test_bad_engine_options_are_errors(capsys):
    assert main(["synth", "--engine", "--engine-arrays", "0,4"]) == 2
    assert "--engine-arrays must be" in capsys.readouterr().err
    assert main(["synth", "--engine", "--engine-variants", "none,fast"]) == 2
    assert "--engine-variants must be a comma-separated list of plain, none" in \
        capsys.readouterr().err
    assert main(["synth", "--engine", "--engine-shape", "2by2"]) == 2
    assert "--engine-shape must be RxC" in capsys.readouterr().err
    assert main(["synth", "--engine", "--engine-shape", "3x3"]) == 2     # 64 PEs
    assert "not a whole number of at most 64 3x3 arrays" in capsys.readouterr().err
    assert main(["synth", "--engine", "--engine-shape", "0x2"]) == 2
    assert "rows" in capsys.readouterr().err
    assert main(["synth", "--engine-shape", "2x2", "--no-ice40"]) == 2
    assert "--engine-shape only apply with --engine" in capsys.readouterr().err
    assert main(["synth", "--engine", "--engine-chunk-width", "6", "--engine-variants",
                 "full"]) == 2
    assert "--engine-chunk-width 6: sched_pattern_width must be a multiple of 4" in \
        capsys.readouterr().err
    assert main(["synth", "--engine", "--engine-chunk-width", "8"]) == 2   # plain by default
    assert "a plain build takes its own chunk width (plain_chunk_width: 4 channels" in \
        capsys.readouterr().err
    assert main(["synth", "--engine-chunk-width", "8", "--no-ice40"]) == 2
    assert "--engine-chunk-width only apply with --engine" in capsys.readouterr().err


def test_chunk_width_option_builds_the_comparison_configuration_with_other_chunks():
    from kaleido_hw.flow.synth import _chunked
    cfg = _chunked(ea.AREA_CONFIG, 8, ["none", "full"])
    assert (cfg.sched_pattern_width, cfg.matcher_channels) == (8, 8)
    assert cfg.replace(sched_pattern_width=16, matcher_channels=16) == ea.AREA_CONFIG
    assert _chunked(ea.AREA_CONFIG.replace(matcher_channels=4), 24, ["full"]).matcher_channels \
        == 4
    # A plain build's chunks are its own, whatever the base says.
    assert ea.variant_config(cfg, 4, "plain").sched_pattern_width == 4


@pytest.mark.skipif(stdcell.stdcell_available() is not None,
                    reason=f"standard-cell flow unavailable: {stdcell.stdcell_available()}")
def test_tiny_engine_synthesis():
    """The real flow on TINY (about 30 s): every block present, blocks + SRAM = yosys' total,
    memories as configured and priced by the density, a timed path and a power figure."""
    r = ea.synth_engine(TINY)
    assert r.ok and not r.notes, r.notes
    # Identical modules were mapped once (share=True), yet every instance has its row: the
    # paths are the unshared Verilog's modules, one each.
    from kaleido_hw.flow.generate import emit_verilog
    unshared = emit_verilog(ea._component(TINY, "kaleido_engine"), "kaleido_engine")
    assert [m.path for m in r.modules] == list(instance_modules(unshared, "kaleido_engine"))
    blocks = r.blocks()
    assert list(blocks) == list(ea.ENGINE_BLOCKS)
    assert all(v["area_um2"] > 0 for v in blocks.values())
    assert sum(v["area_um2"] for v in r.blocks(sram=True).values()) == \
        pytest.approx(r.total_area_um2, rel=1e-9)
    assert r.memory_bits() == ea.expected_memory_bits(TINY)
    for m in r.memories:
        assert m.area_um2 == pytest.approx(m.bits * m.read_ports * sm.SRAM_UM2_PER_BIT, abs=1e-3)
    # Every array copy of Q and K and every accumulation bank stayed a memory.
    assert sum(m.kind == "accumulation planes" for m in r.memories) == 3   # planes x P*C
    assert {(m.path, m.name) for m in r.memories if m.kind == "S reorder buffer"} == {
        ("acc.reorder", "lane0"), ("acc.reorder", "lane1")}
    assert {(m.path, m.name) for m in r.memories if m.kind == "operands"} == {
        ("", "q_mem0"), ("", "k_mem0")}
    # The scheduler's pre-pass snoops array 0's loads (K is not ordered): the sequencer's
    # read port is the only one of each copy (a port is a copy in SRAM).
    ports = {m.name: m.read_ports for m in r.memories if m.kind == "operands"}
    assert ports == {"q_mem0": 1, "k_mem0": 1}
    assert ea.dispatcher_share(r)["prepass_ports"] == 0
    assert 1.0 < r.path_ns < 50 and r.fmax_mhz == pytest.approx(1000 / r.path_ns, abs=0.1)
    assert r.startpoint and r.endpoint and r.power_mw > 0


def test_report_area_section_reads_the_cache(tmp_path, monkeypatch):
    """The report's area section shows the cached builds, and says why when there are none."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kaleido_hw.reports import report
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(ea, "_yosys_version", lambda: "Yosys test")
    monkeypatch.setattr(ea.shutil, "which", lambda name: "/usr/bin/" + name)
    r = report.Result("area")
    report._engine_area(r, plt)
    assert "Whole-engine breakdown at 16 tokens, 32 channels not included: no build" in \
        r.notes[0] and "at 64 tokens, 128 channels not included" in r.notes[1] and not r.figures
    cfg = ea.AREA_CONFIG.to_dict()
    none = _area(1, "none", NONE_BLOCKS, 100)
    full = _area(1, "full", [("", 120), ("array0", 500), ("seq0", 330), ("acc", 210),
                             ("seq0.slots", 90), ("q_order", 100), ("q_pre_codes", 50)], 100)
    for b in (none, full):
        b.config = cfg
    ea.save_cache([none, full], ea.AREA_CONFIG)
    r = report.Result("area")
    report._engine_area(r, plt)
    assert "| dispatcher: SlotUnits | 0 | 90 |" in r.table
    assert "| SRAM: accumulation planes | 100 | 100 |" in r.table
    assert "full - none 28.6% of the full engine's logic" in r.table
    assert r.summary["engine"]["P=1 full"]["area_um2"] == 1500
    assert {"top": "engine P=1 full: whole engine", "cells": 7, "flipflops": 0,
            "area_um2": 1500.0, "sram_area_um2": 100.0, "sram_bits": 32, "path_ns": None,
            "fmax_mhz": None, "power_mw": None} in r.rows
    assert "-engine" in r.figures and "-engine-default" not in r.figures
    # The default build, when cached, gets its own table, rows and figure.
    default = _area(4, "full", FULL_BLOCKS, 400)
    default.config = KaleidoConfig().to_dict()
    ea.save_cache([default], KaleidoConfig())
    r = report.Result("area")
    report._engine_area(r, plt)
    assert "Whole engine at 64 tokens, 128 channels" in r.table
    assert r.summary["engine_default"]["P=4 full"]["area_um2"] == 1800
    assert any(row["top"] == "engine (defaults) P=4 full: whole engine" for row in r.rows)
    assert {"-engine", "-engine-default"} <= set(r.figures)
    plt.close("all")


def test_engine_command_prints_saves_and_caches(tmp_path, monkeypatch, capsys):
    """``kaleido-hw synth --engine`` (mapping replaced by fixed figures): the builds per P in
    order, the report text, the cache and the JSON."""
    calls = []

    def fake(cfg, *, variant=None, top=None, **kw):
        calls.append((cfg.engine_arrays, variant, cfg.engine_max_head_dim) + ((top,) if top else ()))
        blocks = list(NONE_BLOCKS)
        if variant == "full":
            blocks += [("seq0.slots", 90), ("q_order", 100)]
        r = _area(cfg.engine_arrays, variant, blocks)
        r.config = cfg.to_dict()
        return r

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(ea, "synth_engine", fake)
    monkeypatch.setattr(ea, "_yosys_version", lambda: "Yosys test")
    assert main(["synth", "--engine", "--engine-arrays", "2", "--engine-variants", "none,full",
                 "--json", "e.json"]) == 0
    out = capsys.readouterr().out
    assert calls == [(2, "none", 32), (2, "full", 32)]
    assert "dispatcher share, P = 2" in out and "saved to build/engine_area.json" in out
    assert (tmp_path / "e.json").exists()
    monkeypatch.setattr(ea.shutil, "which", lambda name: "/usr/bin/" + name)
    got, why = ea.load_cache()
    assert why == "" and [(b.arrays, b.variant) for b in got] == [(2, "none"), (2, "full")]
    # --engine-default: the defaults' own build (P = 4, full, 128 channels), cached beside.
    calls.clear()
    assert main(["synth", "--engine", "--engine-default"]) == 0
    assert calls == [(4, "full", 128)]
    got, why = ea.load_cache(KaleidoConfig())
    assert why == "" and [(b.arrays, b.variant) for b in got] == [(4, "full")]
    assert len(ea.load_cache()[0]) == 2
    # --engine-top kaleido_core: the core of the defaults, cached beside the default
    # engine's build of the same configuration (the entry's key names the top).
    calls.clear()
    assert main(["synth", "--engine", "--engine-default", "--engine-top", "kaleido_core"]) == 0
    assert calls == [(4, "full", 128, "kaleido_core")]
    assert "synthesizing kaleido_core, P = 4" in capsys.readouterr().out
    got, why = ea.load_cache(KaleidoConfig(), top="kaleido_core")
    assert why == "" and [(b.arrays, b.variant) for b in got] == [(4, "full")]
    assert len(ea.load_cache(KaleidoConfig())[0]) == 1
    with pytest.raises(SystemExit):             # argparse: "invalid choice"
        main(["synth", "--engine", "--engine-top", "kaleido_engine"])
    assert "--engine-top: invalid choice" in capsys.readouterr().err
    # --engine-shape 2x2: the comparison configuration's 64 PEs as 16 arrays of 2x2, cached
    # under that shape beside the others.
    calls.clear()
    assert main(["synth", "--engine", "--engine-shape", "2x2", "--engine-variants", "full"]) == 0
    assert calls == [(16, "full", 32)]
    got, why = ea.load_cache(ea.AREA_CONFIG.replace(rows=2, cols=2))
    assert why == "" and [(b.arrays, b.variant, b.config["rows"]) for b in got] == \
        [(16, "full", 2)]
    assert len(ea.load_cache()[0]) == 2
