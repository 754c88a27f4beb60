"""cocotb bench of ``plain_engine`` (``docs/engine.md``, "Plain build"): the KaleidoEngine on
BaselinePE arrays, dense only. Every run checks S = Q @ K^T bit for bit (read out under
random back-pressure) and every engine and per-array counter against
``golden.engine.model.engine_counters`` (variant dense) on the same configuration; the rejected
starts check the error bits, ``reuse`` (a start with ``cfg__reuse`` = 1) included, and that
the host check ``check_engine_run`` refuses every reuse variant before simulation.

``make -C sim/engine/plain [SIM=icarus]`` runs on the default plain_engine (generated into ``sim_build/rtl``); the pytest
wrappers (``tests/engine/test_plain_engine_sim.py``) run it on small generated variants
(``KALEIDO_MANIFEST`` names the variant's manifest). ``KALEIDO_SEEDS=N`` runs N seeds;
``KALEIDO_ENGINE_SET``: ``quick`` (make test: one even and one odd grid, the error bits),
``standard`` (every small-grid run once), ``full`` (the default: every run, and the
hunyuanvideo head when the build holds d = 128 and 64 tokens).
"""

from __future__ import annotations

import os
import random
import zlib

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles
from plain_engine_host import PlainEngineHost, error_names, load_plain_config, model_counters
from simlib import seeds_requested, start_clock_and_reset

from golden.numerics import ChannelGroups, VideoGrid
from golden.workloads import make_qkv
from kaleido_hw.engine.kaleido_engine import ERROR_BITS, VARIANTS, check_engine_run, engine_ports


CFG = load_plain_config()
SET = os.environ.get("KALEIDO_ENGINE_SET", "full")
if SET not in ("quick", "standard", "full"):
    raise ValueError(f"KALEIDO_ENGINE_SET must be quick, standard or full, got {SET!r}")
D = 16
GROUPS = ChannelGroups.from_sizes(4, 6, 6)
#: (grid, channel groups, data kind) of the small-grid test: an even and two odd grids
#: (unpaired tokens along every axis), other directions, an interleaved channel map and an
#: empty group.
_rng = np.random.default_rng(12)
_GMAP = tuple(int(g) for g in _rng.permutation([0] * 5 + [1] * 5 + [2] * 6))
RUNS = [
    (VideoGrid(2, 4, 4), GROUPS, "random"),
    (VideoGrid(3, 5, 3), GROUPS, "smooth"),
    (VideoGrid(3, 3, 2), ChannelGroups(_GMAP, (0, 2, 1)), "alternating"),
    (VideoGrid(1, 5, 5), ChannelGroups.from_sizes(0, 8, 8, directions=(1, 1, 0)), "random"),
    (VideoGrid(2, 4, 4), ChannelGroups.from_sizes(16, 0, 0, directions=(2, 2, 2)), "equal"),
]
if SET == "quick":
    RUNS = RUNS[:2]
elif SET == "standard":
    RUNS = RUNS[:4]
RUNS = [r for r in RUNS if r[0].n <= CFG.engine_max_tokens and r[1].head_dim <= CFG.engine_max_head_dim]


def rng_for(test: str, n: int = 0) -> np.random.Generator:
    return np.random.default_rng([zlib.crc32(test.encode()), n, int(cocotb.RANDOM_SEED)])


def operands(kind: str, grid: VideoGrid, d: int, rng: np.random.Generator):
    """(q, k) int8: random, smooth (a random walk along tokens), equal (one value), or
    alternating (the sign flips between neighbours)."""
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


async def verify_run(host: PlainEngineHost, q, k, grid, groups, *, stall: float = 0.0,
                     label: str = "") -> dict:
    """One dense run: S bit-exact against Q @ K^T and every counter equal to the model."""
    want = model_counters(CFG, q, k, grid, groups)
    result = await host.run(q, k, grid, groups, max_cycles=want["cycles"] + 1000)
    assert result["error"] == 0, f"{label}: rejected: {error_names(result['error'])}"
    got_s = await host.read_scores(grid.n, stall=stall, rng=random.Random(label))
    want_s = q.astype(np.int64) @ k.astype(np.int64).T
    if not np.array_equal(got_s, want_s):
        bad = np.argwhere(got_s != want_s)
        i, j = bad[0]
        raise AssertionError(f"{label}: S differs at {len(bad)} of {grid.n ** 2} entries; first "
                             f"S[{i}][{j}] = {got_s[i, j]}, expected {want_s[i, j]}")
    got = result["counters"]
    diff = {name: (got[name], want[name]) for name in want if got[name] != want[name]}
    assert not diff, f"{label}: counters (rtl, model) differ: {diff}"
    return got


@cocotb.test()
async def test_small_grids(dut):
    """Dense runs on even and odd grids, other directions, an interleaved channel map and an
    empty group (d = 16): S and every counter; S read out under back-pressure."""
    await start_clock_and_reset(dut)
    host = PlainEngineHost(dut, CFG)
    for seed in range(seeds_requested()):
        for grid, groups, kind in RUNS:
            q, k = operands(kind, grid, groups.head_dim, rng_for(f"{grid}-{kind}", seed))
            label = f"{grid} {kind} {groups.directions} seed={seed}"
            cnt = await verify_run(host, q, k, grid, groups,
                                   stall=0.3 if kind == "smooth" else 0.0, label=label)
            busy = sum(cnt[f"a{a}__busy_pe_cycles"] for a in range(CFG.engine_arrays))
            dut._log.info(f"{label}: {cnt['cycles']} cycles, {cnt['chunks']} chunks, "
                          f"{busy} busy PE-cycles (= N^2 d = {grid.n ** 2 * groups.head_dim})")
            assert busy == grid.n ** 2 * groups.head_dim


@cocotb.test()
async def test_rejected_configurations(dut):
    """Every error bit a plain engine can raise, ``reuse`` included: the engine finishes at
    once with the bit set, and the next dense run is unaffected. ``check_engine_run`` refuses
    every reuse variant before simulation."""
    await start_clock_and_reset(dut)
    host = PlainEngineHost(dut, CFG)
    grid, groups = VideoGrid(2, 4, 4), GROUPS
    good = engine_ports(CFG, grid, groups, variant="dense")
    names = [n for n, _ in ERROR_BITS]
    bit = {n: 1 << names.index(n) for n in names}
    bad = [
        ({"cfg__reuse": 1}, bit["reuse"]),
        ({"cfg__reuse": 1, "cfg__schedule": 1}, bit["reuse"] | bit["dispatcher"]),
        ({"cfg__reuse": 1, "cfg__match": 1}, bit["reuse"] | bit["dispatcher"]),
        ({"cfg__t": 0}, bit["grid"]),
        ({"cfg__t": 2, "cfg__h": 8, "cfg__w": CFG.engine_max_tokens // 8}, bit["grid"]),
        ({"cfg__head_dim": 0}, bit["head_dim"]),
        ({"cfg__group_map": good["cfg__group_map"] | 3 << 10}, bit["group_map"]),
        ({"cfg__half_bits": 2}, bit["bits"]),
        ({"cfg__directions": 3 << 2}, bit["directions"]),
    ]
    for change, mask in bad:
        host.configure({**good, **change})
        result = await host.start(max_cycles=10)
        assert result["busy"] == 0 and result["error"] == mask, (
            f"{change}: error mask {result['error']:#x} ({error_names(result['error'])}), "
            f"expected {mask:#x} ({error_names(mask)})")
    for variant in VARIANTS:
        if variant == "dense":
            continue
        try:
            check_engine_run(CFG, grid, groups, variant=variant)
        except ValueError as e:
            assert "plain engine" in str(e), str(e)
        else:
            raise AssertionError(f"check_engine_run accepted variant {variant} on a plain engine")
    q, k = operands("random", grid, D, rng_for("after-errors"))
    await ClockCycles(dut.clk, 3)
    await verify_run(host, q, k, grid, groups, label="after errors")


@cocotb.test(skip=SET != "full" or CFG.engine_max_head_dim < 128 or CFG.engine_max_tokens < 64)
async def test_hunyuanvideo_head(dut):
    """A hunyuanvideo head (d = 128, all channels one group along x: 32 chunks of the plain
    build's 4 channels on 4x4 arrays) on a 2x4x8 grid, synthetic workload data: the dense
    cycles of the plain engine (needs engine_max_head_dim >= 128 and 64 tokens, e.g. the
    default plain_engine)."""
    await start_clock_and_reset(dut)
    host = PlainEngineHost(dut, CFG)
    grid = VideoGrid(2, 4, 8)
    groups = ChannelGroups.from_preset("hunyuanvideo")
    seed = int(cocotb.RANDOM_SEED) % 1000
    q, k, _ = make_qkv("hunyuanvideo", grid, seed=seed)
    got = await verify_run(host, q, k, grid, groups, stall=0.2, label="hunyuan dense")
    busy = sum(got[f"a{a}__busy_pe_cycles"] for a in range(CFG.engine_arrays))
    util = busy / (CFG.engine_arrays * CFG.rows * CFG.cols * got["cycles"])
    dut._log.info(f"hunyuanvideo 2x4x8 (make_qkv seed {seed}) on {CFG.engine_arrays} plain "
                  f"arrays: {got['cycles']} cycles, PE utilization {util:.1%}")
