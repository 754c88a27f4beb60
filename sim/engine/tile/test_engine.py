"""cocotb bench of ``tile_engine`` (``docs/array.md``): S bit-exact against
``golden.attention_scores`` and ``golden.array.schedule.tile_engine``, every counter equal to
``golden.array.schedule.tile_counters``, dense mode equal to ``Q @ K^T``, the S read-out under
random back-pressure, and the error flags.

``make -C sim/engine/tile [SIM=icarus]``. Environment: ``KALEIDO_SEEDS=N`` runs N seeds of the
small-grid test; ``KALEIDO_ENGINE_SET`` picks how much runs: ``full`` (the default: every
data kind in both modes, the hunyuanvideo head), ``standard`` (fewer small-grid runs, the
hunyuanvideo head; ``make test`` on Verilator) or ``quick`` (no hunyuanvideo head; ``make
test`` on Icarus); ``KALEIDO_MANIFEST`` names the manifest of a non-default variant.
"""

from __future__ import annotations

import os
import random
import zlib

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles
from engine_host import EngineHost, counters_as_model, error_names, load_config
from simlib import seeds_requested, start_clock_and_reset

from golden.array.schedule import tile_counters, tile_engine
from golden.numerics import ChannelGroups, VideoGrid, attention_scores
from golden.workloads import make_qkv
from kaleido_hw.engine.tile_engine import ERROR_BITS, check_run, engine_ports


CFG = load_config()
SMALL_GROUPS = ChannelGroups.from_sizes(4, 6, 6)
SMALL_GRIDS = (VideoGrid(2, 4, 4), VideoGrid(3, 5, 4))
SET = os.environ.get("KALEIDO_ENGINE_SET", "full")
if SET not in ("quick", "standard", "full"):
    raise ValueError(f"KALEIDO_ENGINE_SET must be quick, standard or full, got {SET!r}")
#: (grid, data kind, reuse) of the small-grid test: all of them in the full set; otherwise
#: every kind with reuse on 2x4x4, and the odd grid with smooth and random data.
SMALL_RUNS = [(g, kind, reuse) for g in SMALL_GRIDS
              for kind in ("random", "smooth", "equal", "alternating") for reuse in (True, False)]
if SET != "full":
    SMALL_RUNS = [r for r in SMALL_RUNS if (r[0] == SMALL_GRIDS[0] and (r[2] or r[1] == "random"))
                  or (r[0] == SMALL_GRIDS[1] and r[1] in ("random", "smooth"))]


def rng_for(test: str, n: int = 0) -> np.random.Generator:
    return np.random.default_rng([zlib.crc32(test.encode()), n, int(cocotb.RANDOM_SEED)])


def operands(kind: str, grid: VideoGrid, d: int, rng: np.random.Generator):
    """(q, k) int8 of one data kind: random, smooth (random walk along tokens: much reuse),
    equal (every value the same: every follower FULL), alternating (the sign flips between
    neighbours on every axis: every follower NONE)."""
    shape = (grid.n, d)
    if kind == "random":
        return tuple(rng.integers(-128, 128, shape).astype(np.int8) for _ in range(2))
    if kind == "smooth":
        return tuple(np.clip(np.cumsum(rng.integers(-3, 4, shape), 0), -128, 127).astype(np.int8)
                     for _ in range(2))
    if kind == "equal":
        return tuple(np.full(shape, int(rng.integers(-128, 128)), np.int8) for _ in range(2))
    if kind == "alternating":
        parity = (grid.coords().sum(axis=1) % 2).astype(bool)[:, None]
        out = []
        for _ in range(2):
            v = rng.integers(0, 128, shape).astype(np.int8)
            out.append(np.where(parity, v, ~v).astype(np.int8))   # ~v: every bit flipped
        return tuple(out)
    raise ValueError(kind)


async def verify_run(host: EngineHost, q, k, grid, groups, *, reuse: bool, stall: float = 0.0,
                    label: str = ""):
    """One run: S and every counter against the golden model."""
    want_counters = tile_counters(q, k, grid, groups, CFG.rows, CFG.cols, reuse=reuse)
    result = await host.run(q, k, grid, groups, reuse=reuse,
                            max_cycles=want_counters.cycles + 1000)
    assert result["error"] == 0, f"{label}: rejected: {error_names(result['error'])}"
    got_s = await host.read_scores(grid.n, stall=stall, rng=random.Random(label))
    if reuse:
        want_s = attention_scores(q, k, grid, groups)
        assert np.array_equal(want_s, tile_engine(q, k, grid, groups)), "golden models disagree"
    else:
        want_s = q.astype(np.int64) @ k.astype(np.int64).T
    if not np.array_equal(got_s, want_s):
        bad = np.argwhere(got_s != want_s)
        i, j = bad[0]
        raise AssertionError(f"{label}: S differs at {len(bad)} of {grid.n ** 2} entries; first "
                             f"S[{i}][{j}] = {got_s[i, j]}, expected {want_s[i, j]}")
    want = counters_as_model(want_counters)
    assert result["counters"] == want, (
        f"{label}: counters differ:\n  rtl   {result['counters']}\n  model {want}")
    return result["counters"]


@cocotb.test()
async def test_small_grids(dut):
    """Grids 2x4x4 and 3x5x4 (odd: unpaired tokens), d = 16 in groups 4/6/6; random, smooth,
    all-equal and alternating-sign data, reuse and dense; S read out under back-pressure."""
    await start_clock_and_reset(dut)
    host = EngineHost(dut, CFG)
    for seed in range(seeds_requested()):
        for grid, kind, reuse in SMALL_RUNS:
            q, k = operands(kind, grid, 16, rng_for(f"{grid}-{kind}", seed))
            label = f"{grid} {kind} reuse={reuse} seed={seed}"
            stall = 0.3 if kind == "smooth" else 0.0
            cnt = await verify_run(host, q, k, grid, SMALL_GROUPS, reuse=reuse, stall=stall,
                                   label=label)
            dut._log.info(f"{label}: {cnt['cycles']} cycles, {cnt['busy_pe_cycles']} "
                          f"busy PE-cycles")


@cocotb.test()
async def test_directions_and_thresholds(dut):
    """Other reuse directions, a channel map that interleaves the groups, an empty group, and
    other full_bits/half_bits: the configuration ports, not just the defaults."""
    await start_clock_and_reset(dut)
    host = EngineHost(dut, CFG)
    grid = VideoGrid(3, 3, 2)
    rng = rng_for("directions")
    gmap = tuple(int(g) for g in rng.permutation([0] * 5 + [1] * 5 + [2] * 6))
    cases = [
        (ChannelGroups(gmap, (0, 2, 1)), 5, 3),
        (ChannelGroups.from_sizes(0, 8, 8, directions=(1, 1, 0)), 6, 4),
        (ChannelGroups.from_sizes(16, 0, 0, directions=(2, 2, 2)), 4, 3),
    ]
    for groups, full_bits, half_bits in cases:
        q, k = operands("smooth", grid, groups.head_dim, rng)
        want = tile_counters(q, k, grid, groups, CFG.rows, CFG.cols, full_bits, half_bits)
        result = await host.run(q, k, grid, groups, full_bits=full_bits, half_bits=half_bits,
                                max_cycles=want.cycles + 1000)
        assert result["error"] == 0
        got = await host.read_scores(grid.n)
        assert np.array_equal(got, attention_scores(q, k, grid, groups, full_bits, half_bits)), (
            f"S differs for {groups.name} {groups.directions} {full_bits}/{half_bits}")
        assert result["counters"] == counters_as_model(want)


@cocotb.test(skip=SET == "quick")
async def test_hunyuanvideo_head(dut):
    """A hunyuanvideo head (d = 128, groups 16/56/56) on a 2x4x8 grid, synthetic workload
    data, with reuse and dense; the cycles of both runs give the speedup."""
    await start_clock_and_reset(dut)
    host = EngineHost(dut, CFG)
    grid = VideoGrid(2, 4, 8)
    groups = ChannelGroups.from_preset("hunyuanvideo")
    q, k, _ = make_qkv("hunyuanvideo", grid, seed=int(cocotb.RANDOM_SEED) % 1000)
    reuse = await verify_run(host, q, k, grid, groups, reuse=True, stall=0.2, label="hunyuan")
    dense = await verify_run(host, q, k, grid, groups, reuse=False, label="hunyuan dense")
    dut._log.info(f"hunyuanvideo 2x4x8: dense {dense['cycles']} / reuse {reuse['cycles']} cycles "
                  f"= {dense['cycles'] / reuse['cycles']:.3f}x; busy PE-cycles "
                  f"{reuse['busy_pe_cycles']} / {dense['busy_pe_cycles']}")


@cocotb.test()
async def test_rejected_configurations(dut):
    """Every error bit: the engine finishes at once with the bit set, and the next valid run
    is unaffected. The Python check rejects the same jobs before simulation."""
    await start_clock_and_reset(dut)
    host = EngineHost(dut, CFG)
    grid, groups = VideoGrid(2, 4, 4), SMALL_GROUPS
    good = engine_ports(CFG, grid, groups)
    n_max = CFG.engine_max_tokens
    bad = {
        "grid": [{"cfg__t": 0}, {"cfg__t": 2, "cfg__h": 8, "cfg__w": n_max // 8}],
        "head_dim": [{"cfg__head_dim": 0}],
        "group_map": [{"cfg__group_map": good["cfg__group_map"] | 3 << 10}],
        "bits": [{"cfg__full_bits": 3, "cfg__half_bits": 3}, {"cfg__half_bits": 2},
                 {"cfg__full_bits": 5, "cfg__half_bits": 5}],
        "directions": [{"cfg__directions": 3 << 2}],
    }
    for name, variants in bad.items():
        bit = [n for n, _ in ERROR_BITS].index(name)
        for change in variants:
            host.configure({**good, **change})
            result = await host.start(max_cycles=10)
            assert result["busy"] == 0 and result["error"] == 1 << bit, (
                f"{change}: error mask {result['error']:#x}, expected bit {bit} ({name})")
    try:
        check_run(CFG, VideoGrid(1, 1, n_max + 1), groups)
    except ValueError as e:
        assert "engine_max_tokens" in str(e)
    else:
        raise AssertionError("check_run accepted a grid larger than engine_max_tokens")
    rng = rng_for("after-errors")
    q, k = operands("random", grid, 16, rng)
    await ClockCycles(dut.clk, 3)
    await verify_run(host, q, k, grid, groups, reuse=True, label="after errors")
