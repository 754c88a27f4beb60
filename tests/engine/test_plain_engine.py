"""Amaranth-simulator tests of the plain build of the KaleidoEngine (``engine_pe = "plain"``,
``docs/engine.md``, "Plain build"): whole dense runs on P = 1, 2 and 3 BaselineArrays with S
bit-exact against ``q @ k.T`` and every engine and per-array counter equal to
``golden.engine.model.engine_counters`` (variant dense); the same counters as the ReusePE engine's
dense run; no reuse-only block in the elaborated design; the ``reuse`` error bit and the host
check. The cocotb bench (``tests/engine/test_plain_engine_sim.py``) runs the generated Verilog."""

from __future__ import annotations

import gc
import warnings

import numpy as np
import pytest
from amaranth.back import rtlil
from amaranth.hdl import Fragment, UnusedElaboratable
from test_kaleido_engine import run_engine, smooth

from golden.engine.model import EngineParams, EngineTiming, chunks, engine_counters, plain_walk
from golden.numerics import ChannelGroups, VideoGrid
from kaleido_hw.config import ConfigError, KaleidoConfig
from kaleido_hw.engine.kaleido_engine import (ERROR_BITS, VARIANTS, KaleidoEngine, PlainEngine,
                                              built_variants, check_engine_run, engine_ports,
                                              model_counters, plain_chunk_width,
                                              plain_config)
from kaleido_hw.engine.array_sequencer import ArraySequencer
from kaleido_hw.engine.engine_layouts import KaleidoGeometry
from kaleido_hw.flow.engine_area import expected_memory_bits
from kaleido_hw.flow.generate import TOPS, build_top


def _small(arrays: int, **changes) -> KaleidoConfig:
    values = dict(rows=2, cols=2, engine_arrays=arrays, engine_max_tokens=16,
                  engine_max_head_dim=16, sched_pattern_width=4, matcher_channels=4,
                  sched_entries=4)
    return plain_config(KaleidoConfig(**{**values, **changes}))


def _exact(q, k):
    return q.astype(np.int64) @ k.astype(np.int64).T


@pytest.mark.parametrize("arrays", [1, 3])
def test_dense_runs_match_the_cycle_model(arrays):
    """P arrays of 2 x 2 BaselinePEs, chunks of 4 (groups 3/5/4: 1 + 2 + 1 chunks), an odd
    2x3x2 grid with other directions, random data: S bit-exact (read out under
    back-pressure) and every counter equal to the dense cycle model. P = 3: 6 banks per
    plane, not a power of two."""
    cfg = _small(arrays)
    grid, groups = VideoGrid(2, 3, 2), ChannelGroups.from_sizes(3, 5, 4, directions=(2, 1, 0))
    rng = np.random.default_rng(40 + arrays)
    q, k = (rng.integers(-128, 128, (grid.n, 12)).astype(np.int8) for _ in range(2))
    out = run_engine(cfg, q, k, grid, groups, "dense", stall_every=3)
    assert out["error"] == 0
    assert np.array_equal(out["S"], _exact(q, k))
    want = model_counters(cfg, q, k, grid, groups, "dense")
    assert out["counters"] == want, f"\n rtl   {out['counters']}\n model {want}"
    busy = sum(want[f"a{a}__busy_pe_cycles"] for a in range(arrays))
    assert busy == grid.n ** 2 * 12           # every product exactly once


def test_idle_arrays_empty_group_interleaved_map():
    """P = 2 with more arrays than column blocks (a 1x1x3 grid walked along x is two units,
    one column block: array 1 never works), an empty group and an interleaved channel map:
    S and every counter."""
    cfg = _small(2, engine_max_head_dim=8)
    grid = VideoGrid(1, 1, 3)
    groups = ChannelGroups((2, 0, 2, 0, 0, 2, 2, 2), (0, 1, 1))
    q, k = smooth(grid, 8, np.random.default_rng(8))
    out = run_engine(cfg, q, k, grid, groups, "dense")
    assert np.array_equal(out["S"], _exact(q, k))
    want = model_counters(cfg, q, k, grid, groups, "dense")
    assert out["counters"] == want
    assert want["a1__quads"] == 0 < want["a0__quads"]


def test_counters_equal_the_reuse_engines_dense_run_along_x():
    """The counters mean the same on BaselinePEs: a plain engine and a ReusePE engine (no
    dispatcher) give identical S and identical counters, busy PE-cycles included, for the same
    dense run walked along x (a BaselinePE is busy when it accumulates; a ReusePE when a
    register takes a term: on the dense schedule the same PE-cycles). The plain engine walks
    along x whatever the directions say: on a 3x2x2 grid the t-walk of group 0 pads a unit
    per (y, x), which it does not."""
    reuse_cfg = KaleidoConfig(rows=2, cols=2, engine_arrays=2, engine_max_tokens=16,
                              engine_max_head_dim=8, sched_pattern_width=4, matcher_channels=4,
                              engine_dispatcher="none")
    grid, groups = VideoGrid(3, 2, 2), ChannelGroups.from_sizes(2, 3, 3, directions=(0, 2, 2))
    q, k = smooth(grid, 8, np.random.default_rng(5))
    plain = run_engine(plain_config(reuse_cfg), q, k, grid, groups, "dense")
    along_x = run_engine(reuse_cfg, q, k, grid, plain_walk(groups), "dense")
    along_t = run_engine(reuse_cfg, q, k, grid, groups, "dense")
    assert np.array_equal(plain["S"], _exact(q, k))
    assert np.array_equal(along_x["S"], plain["S"]) and np.array_equal(along_t["S"], plain["S"])
    assert plain["counters"] == along_x["counters"]
    assert plain["counters"]["cycles"] < along_t["counters"]["cycles"]


@pytest.mark.parametrize("rows, cols, width", [(1, 1, 4), (2, 2, 4), (4, 4, 4), (2, 8, 8),
                                               (8, 8, 8), (16, 16, 16)])
def test_plain_chunk_width(rows, cols, width):
    """A plain build takes the narrowest chunk that keeps its arrays busy: at least R channels
    (a pass lasts R steps) and four passes covering a quad's swap gap, 2 max(R, C) + 1
    cycles; plain_config applies it whatever the configuration's own width."""
    assert plain_chunk_width(rows, cols) == width
    cfg = plain_config(KaleidoConfig(rows=rows, cols=cols, sched_pattern_width=32,
                                     matcher_channels=16))
    assert (cfg.sched_pattern_width, cfg.matcher_channels) == (width, width)
    assert KaleidoGeometry.from_config(cfg).chunk_width == width


@pytest.mark.parametrize("rows, cols, arrays, grid", [(4, 4, 2, "2x4x8"), (2, 2, 3, "2x4x4"),
                                                      (8, 8, 1, "2x8x8"), (2, 8, 2, "2x4x8")])
def test_plain_chunk_width_costs_only_the_chunk_overhead(rows, cols, arrays, grid):
    """On a grid whose units all have followers, the plain chunk width costs the dense
    schedule exactly one quad gap and one barrier per extra chunk against chunks of 32
    channels (no pass or swap floor is hit), and a narrower chunk, where the configuration
    allows one, costs more than that (the width is the narrowest without floors)."""
    grid = VideoGrid.parse(grid)
    groups = plain_walk(ChannelGroups.from_sizes(16, 24, 24))
    rng = np.random.default_rng(rows * 10 + cols)
    q, k = (rng.integers(-128, 128, (grid.n, 64)).astype(np.int8) for _ in range(2))
    base = plain_config(KaleidoConfig(rows=rows, cols=cols, engine_arrays=arrays,
                                      engine_max_head_dim=64, engine_max_tokens=128))
    timing = EngineTiming()
    per_chunk = timing.gap(rows, cols) + timing.barrier

    def cycles(width):
        cfg = base.replace(sched_pattern_width=width, matcher_channels=width)
        return (engine_counters(q, k, grid, groups, EngineParams.from_config(cfg),
                                "dense").cycles, len(chunks(groups, width)))

    width = base.sched_pattern_width
    (narrow, n_narrow), (wide, n_wide) = cycles(width), cycles(32)
    assert narrow - wide == (n_narrow - n_wide) * per_chunk
    if width > 4:
        (narrower, n_narrower) = cycles(width - 4)
        assert narrower - wide > (n_narrower - n_wide) * per_chunk


@pytest.mark.parametrize("rows, cols, grid", [(4, 4, "1x4x8"), (4, 4, "1x5x5"), (4, 2, "1x5x5"),
                                              (2, 4, "1x4x8")])
def test_operands_fetched_just_in_time(rows, cols, grid):
    """With C <= R the plain sequencer keeps one operand slot and fetches the next quad's
    words into it as each register's last use passes (``ArraySequencer._fetch``); with C > R
    (2 x 4) it keeps the double-buffered slot. The fetch windows are tightest when a pass
    lasts only R steps: 14 channels in chunks of 4 end with a chunk of 2; on 1x4x8 every unit
    has a follower and every array changes column block, on 1x5x5 units without follower
    leave passes without work. S bit-exact and every counter equal to the model (which has
    one timing for both slots), on two arrays."""
    cfg = _small(2, rows=rows, cols=cols, engine_max_tokens=32)
    assert cfg.sched_pattern_width == 4
    grid, groups = VideoGrid.parse(grid), ChannelGroups.from_sizes(14, 0, 0)
    rng = np.random.default_rng(rows * 10 + cols)
    q, k = (rng.integers(-128, 128, (grid.n, 14)).astype(np.int8) for _ in range(2))
    out = run_engine(cfg, q, k, grid, groups, "dense")
    assert out["error"] == 0
    assert np.array_equal(out["S"], _exact(q, k))
    assert out["counters"] == model_counters(cfg, q, k, grid, groups, "dense")
    rtl = rtlil.convert(ArraySequencer(cfg), name="seq", emit_src=False)
    fetching = cols <= rows
    assert ("ld_qa0" in rtl, "q_fetch_on" in rtl) == (not fetching, fetching)
    assert "cp_qa0" in rtl


def test_one_accumulation_plane():
    """A plain build has one accumulation plane, whatever the groups; the reuse build one
    per group (three here), so the plain engine's accumulation SRAM is a third of it."""
    base = KaleidoConfig(rows=2, cols=2, engine_arrays=2, engine_max_tokens=16,
                         engine_max_head_dim=16, sched_pattern_width=4, matcher_channels=4,
                         sched_entries=4)
    assert KaleidoGeometry.from_config(plain_config(base)).planes == 1
    assert KaleidoGeometry.from_config(base.replace(engine_dispatcher="none")).planes == 3
    plain = expected_memory_bits(plain_config(base))["accumulation planes"]
    reuse = expected_memory_bits(base.replace(engine_dispatcher="none"))["accumulation planes"]
    assert 3 * plain == reuse


def _classes(elaboratable) -> set[str]:
    """Class names of every elaboratable in the design below ``elaboratable``."""
    frag = Fragment.get(elaboratable, None)
    names, todo = set(), [frag]
    while todo:
        f = todo.pop()
        origins = getattr(f, "origins", None) or ()
        names.update(type(o).__name__ for o in origins)
        todo.extend(sub for sub, *_ in f.subfragments)
    return names


def test_no_reuse_hardware_in_the_plain_build():
    """The plain build instantiates BaselinePEs and no CodeUnit, ReusePE, decoder of the reuse
    table or dispatcher block; the reuse build (the control) does."""
    base = KaleidoConfig(rows=2, cols=2, engine_arrays=1, engine_max_tokens=16,
                         engine_max_head_dim=8, sched_pattern_width=4, matcher_channels=4,
                         sched_entries=4)
    plain = _classes(PlainEngine(base))
    reuse = _classes(KaleidoEngine(base.replace(engine_dispatcher="none")))
    reuse_only = {"CodeUnit", "ReusePE", "TileCell", "TileDecoder", "MergedCell", "OrderUnit",
                  "SlotUnit", "ClusterScheduler", "MergeMatcher", "PEArray"}
    assert {"BaselinePE", "BaselineArray", "ArraySequencer", "EngineBuffer"} <= plain
    assert not plain & reuse_only, sorted(plain & reuse_only)
    assert {"CodeUnit", "ReusePE", "TileCell"} <= reuse


def test_plain_chunks_are_slices():
    """A plain chunk is W consecutive channels (``plain_walk``: one group), so its sequencer
    slices the chunk out of a token word; the reuse sequencer gathers the chunk's channels
    through the compaction network (``compact_words``), which the plain one does not have."""
    base = KaleidoConfig(rows=2, cols=2, engine_arrays=1, engine_max_tokens=16,
                         engine_max_head_dim=32, sched_pattern_width=8, matcher_channels=8,
                         sched_entries=4)
    groups = plain_walk(ChannelGroups.from_sizes(5, 14, 13))
    assert set(groups.group_of) == {0} and groups.directions == (2, 2, 2)

    def names(config):
        return rtlil.convert(ArraySequencer(config), name="seq", emit_src=False)

    assert "pack_s0" not in names(plain_config(base))
    assert "pack_s0" in names(base.replace(engine_dispatcher="none"))


def test_reuse_is_rejected_with_its_error_bit():
    """A start with reuse sets bit ``reuse`` (and ``dispatcher`` when a dispatcher block is
    asked for too); without reuse the dispatcher bits are ignored and the run is exact."""
    cfg = _small(1, engine_max_head_dim=8)
    grid, groups = VideoGrid(1, 2, 2), ChannelGroups.from_sizes(2, 3, 3)
    q, k = smooth(grid, 8, np.random.default_rng(3))
    good = engine_ports(cfg, grid, groups, variant="dense")
    names = [n for n, _ in ERROR_BITS]
    assert names[-1] == "reuse" and len(names) == 8
    bit = {n: 1 << names.index(n) for n in names}
    for change, mask in [({"cfg__reuse": 1}, bit["reuse"]),
                         ({"cfg__reuse": 1, "cfg__match": 1}, bit["reuse"] | bit["dispatcher"]),
                         ({"cfg__t": 0, "cfg__reuse": 1}, bit["reuse"] | bit["grid"])]:
        out = run_engine(cfg, q, k, grid, groups, ports={**good, **change})
        assert out["error"] == mask, (change, out["error"])
    out = run_engine(cfg, q, k, grid, groups, "dense",
                     ports={**good, "cfg__schedule": 1, "cfg__match": 1})
    assert out["error"] == 0 and np.array_equal(out["S"], _exact(q, k))


def test_host_check_and_build_options():
    """``check_engine_run`` refuses every reuse variant on a plain engine with a message that
    says why; ``built_variants`` is dense only; PlainEngine makes any configuration plain;
    KaleidoEngine refuses a plain configuration with a dispatcher before building."""
    cfg = _small(2)
    grid, groups = VideoGrid(1, 2, 2), ChannelGroups.from_sizes(2, 3, 3)
    assert built_variants(cfg) == ("dense",)
    check_engine_run(cfg, grid, groups, variant="dense")
    for variant in VARIANTS:
        if variant != "dense":
            with pytest.raises(ValueError, match=f"variant '{variant}' needs reuse, which a "
                                                 f"plain engine does not have"):
                engine_ports(cfg, grid, groups, variant=variant)
    full = KaleidoConfig(engine_dispatcher="full", engine_max_head_dim=8, engine_max_tokens=16)
    with warnings.catch_warnings():
        # Components built only to look at their configuration are never elaborated.
        warnings.simplefilter("ignore", UnusedElaboratable)
        dut = PlainEngine(full)
        assert dut.config.engine_pe == "plain" and dut.config.engine_dispatcher == "none"
        with pytest.raises(ConfigError,
                           match="engine_pe = 'plain' needs engine_dispatcher = 'none'"):
            KaleidoEngine(full.replace(engine_pe="plain"))
        top = next(t for t in TOPS if t.module == "plain_engine")
        assert isinstance(build_top(top, full), PlainEngine)
        del dut
        gc.collect()
