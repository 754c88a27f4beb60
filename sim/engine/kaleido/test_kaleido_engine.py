"""cocotb bench of ``kaleido_engine`` (``docs/engine.md``): S bit-exact against
``golden.attention_scores`` (variant pe) and ``Q @ K^T`` (dense), every engine and per-array
counter equal to ``golden.engine.model.engine_counters``, the S read-out under random
back-pressure, and the error flags (including the dispatcher variants this RTL does not
build). The dispatcher variants pe-sh (scheduler), pe-m (matcher) and full run when the
engine is built with them (``engine_dispatcher``; "full", the default, builds both).

``make -C sim/engine/kaleido [SIM=icarus]`` runs on the default kaleido_engine (generated into ``sim_build/rtl``); the pytest
wrappers (``tests/engine/test_kaleido_engine_sim.py``) run it on small generated variants
(``KALEIDO_MANIFEST`` names the variant's manifest). ``KALEIDO_SEEDS=N`` runs N seeds;
``KALEIDO_ENGINE_SET=quick`` keeps only the 2x4x4 runs of the small-grid test (Icarus in
``make test``), ``full`` (the default) runs them all; ``stall`` / ``stall-quick`` run the
dispatcher variants on small grids for builds with stall injection (``engine_stall_seed``:
work counters exact, time only longer). Every dispatcher run also checks the scheduler's
orders and the matcher's slots through the probe wires (``golden.engine.trace``).
"""

from __future__ import annotations

import os
import random
import zlib

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles
from kaleido_engine_host import (DispatchMonitor, KaleidoEngineHost, error_names, load_config,
                                 model_counters)
from simlib import seeds_requested, start_clock_and_reset

from golden.engine.model import EngineParams
from golden.engine.trace import check_counters, check_trace, expected_trace, observed_fallbacks
from golden.numerics import ChannelGroups, VideoGrid, attention_scores
from golden.workloads import make_qkv
from kaleido_hw.engine.kaleido_engine import (ERROR_BITS, built_variants, check_engine_run,
                                              engine_ports)


CFG = load_config()
SMALL_GROUPS = ChannelGroups.from_sizes(4, 6, 6)
SMALL_GRIDS = (VideoGrid(2, 4, 4), VideoGrid(3, 5, 4))
#: (grid, data kind, variant) of the small-grid test.
SMALL_RUNS = [(SMALL_GRIDS[0], "random", "pe"), (SMALL_GRIDS[0], "smooth", "pe"),
              (SMALL_GRIDS[0], "random", "dense"), (SMALL_GRIDS[1], "smooth", "pe"),
              (SMALL_GRIDS[1], "equal", "pe"), (SMALL_GRIDS[1], "alternating", "dense"),
              (SMALL_GRIDS[0], "smooth", "pe-m"), (SMALL_GRIDS[1], "smooth", "pe-m"),
              (SMALL_GRIDS[1], "random", "pe-m"), (SMALL_GRIDS[0], "smooth", "full"),
              (SMALL_GRIDS[1], "smooth", "pe-sh"), (SMALL_GRIDS[1], "random", "full")]
BUILT = built_variants(CFG)
SMALL_RUNS = [r for r in SMALL_RUNS if r[2] in BUILT]
SET = os.environ.get("KALEIDO_ENGINE_SET", "full")
if SET not in ("quick", "standard", "full", "stall", "stall-quick"):
    raise ValueError(f"KALEIDO_ENGINE_SET must be quick, standard, full, stall or stall-quick, "
                     f"got {SET!r}")
#: Stall injection in this build (``engine_stall_seed``): work counters exact, time longer.
INJECTED = bool(CFG.engine_stall_seed)
if SET in ("stall", "stall-quick"):
    # Builds with few tokens (stall injection): the dispatcher variants on a 2x2x4 grid and
    # an odd 3x3x3 grid, 16 channels in groups 4/6/6; stall-quick (make test) the first.
    SMALL_RUNS = [r for r in ((VideoGrid(2, 2, 4), "smooth", "full"),
                              (VideoGrid(3, 3, 3), "random", "pe-m"),
                              (VideoGrid(3, 3, 3), "smooth", "pe-sh"),
                              (VideoGrid(3, 3, 3), "smooth", "full")) if r[2] in BUILT]
    SMALL_RUNS = SMALL_RUNS[:1] if SET == "stall-quick" else SMALL_RUNS
if SET == "standard":
    # make test: every variant and both grids once, the odd 3x5x4 grid for the dispatcher.
    SMALL_RUNS = [r for r in SMALL_RUNS if r in (
        (SMALL_GRIDS[0], "random", "dense"), (SMALL_GRIDS[1], "equal", "pe"),
        (SMALL_GRIDS[1], "random", "pe-m"), (SMALL_GRIDS[1], "smooth", "pe-sh"),
        (SMALL_GRIDS[1], "random", "full"))]
if SET == "quick":
    SMALL_RUNS = [r for r in SMALL_RUNS if r[0] == SMALL_GRIDS[0]]


def rng_for(test: str, n: int = 0) -> np.random.Generator:
    return np.random.default_rng([zlib.crc32(test.encode()), n, int(cocotb.RANDOM_SEED)])


def operands(kind: str, grid: VideoGrid, d: int, rng: np.random.Generator):
    """(q, k) int8: random, smooth (random walk along tokens: much reuse), equal (every
    follower FULL), alternating (the sign flips between neighbours: every follower NONE)."""
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
            out.append(np.where(parity, v, ~v).astype(np.int8))
        return tuple(out)
    raise ValueError(kind)


async def verify_run(host: KaleidoEngineHost, q, k, grid, groups, *, variant: str,
                     full_bits: int = 5, half_bits: int = 3, stall: float = 0.0,
                     label: str = "") -> dict:
    """One run: S and every counter against the golden models; with a dispatcher variant
    also the scheduler's orders and the matcher's slots (``golden.engine.trace``: each
    order a permutation of the chunk's units, each channel with work in exactly one slot,
    only compatible pairs merged, all equal to the golden model). Under stall injection
    the work counters are exact and the time only longer (``check_counters``)."""
    want = model_counters(CFG, q, k, grid, groups, variant, full_bits, half_bits)
    sched, match = variant in ("pe-sh", "full"), variant in ("pe-m", "full")
    monitor = (DispatchMonitor(host.dut, CFG, orders=sched, slots=match).start()
               if sched or match else None)
    budget = want["cycles"] * (6 if INJECTED else 1) + 1000
    result = await host.run(q, k, grid, groups, variant=variant, full_bits=full_bits,
                            half_bits=half_bits, max_cycles=budget)
    if monitor is not None:
        monitor.stop()
    assert result["error"] == 0, f"{label}: rejected: {error_names(result['error'])}"
    got_s = await host.read_scores(grid.n, stall=stall, rng=random.Random(label))
    if variant == "dense":
        want_s = q.astype(np.int64) @ k.astype(np.int64).T
    else:
        want_s = attention_scores(q, k, grid, groups, full_bits, half_bits)
    if not np.array_equal(got_s, want_s):
        bad = np.argwhere(got_s != want_s)
        i, j = bad[0]
        raise AssertionError(f"{label}: S differs at {len(bad)} of {grid.n ** 2} entries; first "
                             f"S[{i}][{j}] = {got_s[i, j]}, expected {want_s[i, j]}")
    # Under stall injection the chunks that fall back follow the run's own timing.
    natural = observed_fallbacks(monitor.orders) if INJECTED and monitor is not None else None
    if natural is not None:
        want = model_counters(CFG, q, k, grid, groups, variant, full_bits, half_bits,
                              natural=natural)
    check_counters(result["counters"], want, CFG.engine_arrays, INJECTED, label)
    if monitor is not None:
        expected = expected_trace(q, k, grid, groups, EngineParams.from_config(CFG), variant,
                                  full_bits, half_bits, natural=natural)
        seen = check_trace(expected, monitor.orders, monitor.slots, label)
        host.dut._log.info(f"{label}: dispatcher invariants hold on {seen['orders']} orders, "
                           f"{seen['blocks']} column blocks, {seen['slots']} slots")
    return result["counters"]


@cocotb.test()
async def test_small_grids(dut):
    """Grids 2x4x4 and 3x5x4 (odd: unpaired tokens), d = 16 in groups 4/6/6; random, smooth,
    all-equal and alternating-sign data; pe and dense; S read out under back-pressure."""
    await start_clock_and_reset(dut)
    host = KaleidoEngineHost(dut, CFG)
    for seed in range(seeds_requested()):
        for grid, kind, variant in SMALL_RUNS:
            q, k = operands(kind, grid, 16, rng_for(f"{grid}-{kind}", seed))
            label = f"{grid} {kind} {variant} seed={seed}"
            cnt = await verify_run(host, q, k, grid, SMALL_GROUPS, variant=variant,
                                   stall=0.3 if kind == "smooth" else 0.0, label=label)
            dut._log.info(f"{label}: {cnt['cycles']} cycles, {cnt['chunks']} chunks")


@cocotb.test(skip=SET.startswith("stall"))
async def test_directions_and_thresholds(dut):
    """Other reuse directions, a channel map that interleaves the groups, an empty group, and
    other full_bits/half_bits."""
    await start_clock_and_reset(dut)
    host = KaleidoEngineHost(dut, CFG)
    grid = VideoGrid(3, 3, 2)
    rng = rng_for("directions")
    gmap = tuple(int(g) for g in rng.permutation([0] * 5 + [1] * 5 + [2] * 6))
    cases = [
        (ChannelGroups(gmap, (0, 2, 1)), 5, 3),
        (ChannelGroups.from_sizes(0, 8, 8, directions=(1, 1, 0)), 6, 4),
        (ChannelGroups.from_sizes(16, 0, 0, directions=(2, 2, 2)), 4, 3),
    ]
    for n, (groups, full_bits, half_bits) in enumerate(cases):
        q, k = operands("smooth", grid, groups.head_dim, rng)
        for variant in ("pe", "pe-sh", "pe-m", "full") if n == 0 else ("pe",):
            if variant not in BUILT:
                continue
            await verify_run(host, q, k, grid, groups, variant=variant, full_bits=full_bits,
                             half_bits=half_bits,
                             label=f"{variant} {groups.directions} {full_bits}/{half_bits}")


@cocotb.test(skip=SET == "quick" or SET.startswith("stall") or CFG.engine_max_head_dim < 128
             or CFG.engine_max_tokens < 64)
async def test_hunyuanvideo_head(dut):
    """A hunyuanvideo head (d = 128, groups 16/56/56: 9 chunks) on a 2x4x8 grid, synthetic
    workload data, pe and dense; the cycles of both give the speedup (needs an engine with
    engine_max_head_dim >= 128 and 64 tokens, e.g. the default kaleido_engine)."""
    await start_clock_and_reset(dut)
    host = KaleidoEngineHost(dut, CFG)
    grid = VideoGrid(2, 4, 8)
    groups = ChannelGroups.from_preset("hunyuanvideo")
    seed = int(cocotb.RANDOM_SEED) % 1000
    q, k, _ = make_qkv("hunyuanvideo", grid, seed=seed)
    reuse = await verify_run(host, q, k, grid, groups, variant="pe", stall=0.2, label="hunyuan")
    dense = await verify_run(host, q, k, grid, groups, variant="dense", label="hunyuan dense")
    for variant in ("pe-sh", "pe-m", "full"):
        if variant not in BUILT:
            continue
        got = await verify_run(host, q, k, grid, groups, variant=variant,
                               label=f"hunyuan {variant}")
        merged = sum(got[f"a{a}__merged"] for a in range(CFG.engine_arrays))
        busy = sum(got[f"a{a}__busy_pe_cycles"] for a in range(CFG.engine_arrays))
        util = busy / (CFG.engine_arrays * CFG.rows * CFG.cols * got["cycles"])
        dut._log.info(f"hunyuanvideo {variant}: {got['cycles']} cycles = "
                      f"{dense['cycles'] / got['cycles']:.3f}x over dense, {merged} merged "
                      f"slots, PE utilization {util:.1%}")
    busy = sum(reuse[f"a{a}__busy_pe_cycles"] for a in range(CFG.engine_arrays))
    util = busy / (CFG.engine_arrays * CFG.rows * CFG.cols * reuse["cycles"])
    dut._log.info(f"hunyuanvideo 2x4x8 (make_qkv seed {seed}) on {CFG.engine_arrays} arrays: dense {dense['cycles']} / "
                  f"pe {reuse['cycles']} cycles = {dense['cycles'] / reuse['cycles']:.3f}x; "
                  f"PE utilization (pe) {util:.1%}")


@cocotb.test(skip=SET.startswith("stall"))
async def test_rejected_configurations(dut):
    """Every error bit: the engine finishes at once with the bit set, and the next valid run
    is unaffected. The Python check rejects the same jobs before simulation."""
    await start_clock_and_reset(dut)
    host = KaleidoEngineHost(dut, CFG)
    grid, groups = VideoGrid(2, 4, 4), SMALL_GROUPS
    good = engine_ports(CFG, grid, groups)
    n_max = CFG.engine_max_tokens
    bad = {
        "grid": [{"cfg__t": 0}, {"cfg__t": 2, "cfg__h": 8, "cfg__w": n_max // 8}],
        "head_dim": [{"cfg__head_dim": 0}],
        "group_map": [{"cfg__group_map": good["cfg__group_map"] | 3 << 10}],
        "bits": [{"cfg__full_bits": 3, "cfg__half_bits": 3}, {"cfg__half_bits": 2}],
        "directions": [{"cfg__directions": 3 << 2}],
        "dispatcher": (([] if "pe-sh" in BUILT else [{"cfg__schedule": 1}])
                       + ([] if "pe-m" in BUILT else [{"cfg__match": 1}])),
    }
    for name, variants in bad.items():
        bit = [n for n, _ in ERROR_BITS].index(name)
        for change in variants:
            host.configure({**good, **change})
            result = await host.start(max_cycles=10)
            assert result["busy"] == 0 and result["error"] == 1 << bit, (
                f"{change}: error mask {result['error']:#x}, expected bit {bit} ({name})")
    for variant in ("pe-sh", "pe-m", "full"):
        if variant in BUILT:
            continue
        try:
            check_engine_run(CFG, grid, groups, variant=variant)
        except ValueError as e:
            assert "dispatcher hardware" in str(e)
        else:
            raise AssertionError(f"check_engine_run accepted variant {variant}")
    rng = rng_for("after-errors")
    q, k = operands("random", grid, 16, rng)
    await ClockCycles(dut.clk, 3)
    await verify_run(host, q, k, grid, groups, variant="pe", label="after errors")
