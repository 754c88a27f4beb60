"""cocotb bench of ``linear_engine`` (``docs/linear.md``, "RTL"): Y bit-exact against
``golden.linear`` (dense: ``X @ W``) and every counter equal to
``golden.engine.linear.linear_counters`` (cycles included), windows 2 and 3, reuse and dense,
per-channel directions, odd grids, adversarial data, Y read under random back-pressure, and
the error flags.

``make -C sim/engine/linear [SIM=icarus]``. Environment: ``KALEIDO_SEEDS=N`` runs N seeds;
``KALEIDO_LINEAR_SET`` is ``quick`` (``make test``: four layers) or ``full`` (the default:
every data kind with both windows in both modes); ``KALEIDO_MANIFEST`` names the manifest of
a non-default build.
"""

from __future__ import annotations

import os
import random
import zlib

import cocotb
import numpy as np
from linear_engine_host import LinearHost, error_names, load_config
from simlib import seeds_requested, start_clock_and_reset

from golden.engine.linear import linear_counters
from golden.numerics import VideoGrid
from golden.window import linear
from kaleido_hw.engine.linear_engine import ERROR_BITS, counters_from_model, linear_ports


CFG = load_config()
SET = os.environ.get("KALEIDO_LINEAR_SET", "full")
if SET not in ("quick", "full"):
    raise ValueError(f"KALEIDO_LINEAR_SET must be quick or full, got {SET!r}")
KINDS = ("smooth", "random", "equal", "alternating", "nibble")
#: (data kind, window, reuse) of the layer test.
RUNS = [(k, win, r) for k in KINDS for win in (2, 3) for r in (True, False)]
if SET == "quick":
    RUNS = [("smooth", 2, True), ("smooth", 3, False), ("nibble", 3, True),
            ("alternating", 2, True)]


def rng_for(test: str, n: int = 0) -> np.random.Generator:
    """A generator seeded by the test name, the seed index and cocotb's seed."""
    return np.random.default_rng([zlib.crc32(test.encode()), n, int(cocotb.RANDOM_SEED)])


def grid_for() -> VideoGrid:
    """An odd grid (trailing incomplete windows on every axis) that fits the build."""
    for grid in (VideoGrid(3, 3, 5), VideoGrid(3, 3, 3), VideoGrid(1, 3, 3)):
        if grid.n <= CFG.engine_max_tokens:
            return grid
    return VideoGrid(1, 1, 2)


def activation(kind: str, grid: VideoGrid, c_in: int, rng: np.random.Generator) -> np.ndarray:
    """(N, C_in) int8 of one data kind: smooth (random walk over tokens: much reuse), random,
    equal (one value: every follower FULL), alternating (sign flips between neighbours on
    every axis: every follower NONE), nibble (values at the FULL/HALF boundaries: nibble
    edges and extremes, with small jitter)."""
    shape = (grid.n, c_in)
    if kind == "smooth":
        return np.clip(np.cumsum(rng.integers(-3, 4, shape), 0) + rng.integers(-60, 60, c_in),
                       -128, 127).astype(np.int8)
    if kind == "random":
        return rng.integers(-128, 128, shape).astype(np.int8)
    if kind == "equal":
        return np.full(shape, int(rng.integers(-128, 128)), np.int8)
    if kind == "alternating":
        parity = (grid.coords().sum(axis=1) % 2).astype(bool)[:, None]
        v = rng.integers(0, 128, shape).astype(np.int8)
        return np.where(parity, v, ~v).astype(np.int8)
    if kind == "nibble":
        base = rng.choice(np.array([-128, -113, -17, -16, -9, -8, -1, 0, 7, 8, 15, 16, 112,
                                    127]), size=(1, c_in))
        jitter = np.where(rng.random(shape) < 0.4, 0, rng.integers(-9, 10, shape))
        return np.clip(base + jitter, -128, 127).astype(np.int8)
    raise ValueError(kind)


async def verify_layer(host: LinearHost, x, w, grid, directions, window, *, reuse: bool,
                       stall: float = 0.0, label: str = "") -> dict:
    """One layer: Y and every counter against the golden model."""
    model = linear_counters(x, w, grid, directions, window, CFG.rows, CFG.cols,
                            CFG.engine_arrays, reuse=reuse)
    result = await host.run(x, w, grid, directions, window, reuse=reuse,
                            max_cycles=model.cycles + 1000)
    assert result["error"] == 0, f"{label}: rejected: {error_names(result['error'])}"
    got = await host.read_y(grid.n, w.shape[1], stall=stall, rng=random.Random(label))
    want = (linear(x, w, grid, directions, window) if reuse
            else x.astype(np.int64) @ w.astype(np.int64))
    if not np.array_equal(got, want):
        bad = np.argwhere(got != want)
        i, f = bad[0]
        raise AssertionError(f"{label}: Y differs at {len(bad)} of {got.size} entries; first "
                             f"Y[{i}][{f}] = {got[i, f]}, expected {want[i, f]}")
    want_cnt = counters_from_model(model)
    assert result["counters"] == want_cnt, (
        f"{label}: counters differ:\n  rtl   {result['counters']}\n  model {want_cnt}")
    return result["counters"]


@cocotb.test()
async def test_layers(dut):
    """Odd grid, the widest layer the build holds (C_out not always a multiple of C), random
    per-channel directions; each data kind with windows 2 and 3, reuse and dense; Y read
    under back-pressure."""
    await start_clock_and_reset(dut)
    host = LinearHost(dut, CFG)
    grid = grid_for()
    for seed in range(seeds_requested()):
        for n, (kind, window, reuse) in enumerate(RUNS):
            rng = rng_for(f"{kind}-{window}", seed)
            c_in = CFG.linear_max_in - (n % 3)
            # every other layer: 1.5 column blocks fewer (an odd count; idle arrays at P = 4)
            c_out = max(1, CFG.linear_max_out - (n % 2) * (CFG.cols + CFG.cols // 2))
            x = activation(kind, grid, c_in, rng)
            w = rng.integers(-128, 128, (c_in, c_out)).astype(np.int8)
            dirs = rng.integers(0, 3, c_in) if n % 2 else 0
            label = f"{grid} {kind} window={window} reuse={reuse} seed={seed}"
            cnt = await verify_layer(host, x, w, grid, dirs, window, reuse=reuse,
                                     stall=0.3 if n % 2 == 0 else 0.0, label=label)
            dut._log.info(f"{label}: {cnt['cycles']} cycles, {cnt['busy_pe_cycles']} busy "
                          f"PE-cycles, F1 {cnt['issued1']} issued / {cnt['skipped1']} skipped")


@cocotb.test()
async def test_error_flags(dut):
    """Each unrunnable configuration sets its own error bit at once (done without busy);
    a good run afterwards is still exact."""
    await start_clock_and_reset(dut)
    host = LinearHost(dut, CFG)
    grid = grid_for()
    c_in, c_out = min(8, CFG.linear_max_in), min(4, CFG.linear_max_out)
    good = linear_ports(CFG, grid, c_in, c_out, 0, 2)
    bad = {
        "grid": {"cfg__h": 0},
        "c_in": {"cfg__c_in": CFG.linear_max_in + 1},
        "c_out": {"cfg__c_out": 0},
        "directions": {"cfg__directions": 3 << 2},
        "window": {"cfg__window": 0},
        "bits": {"cfg__half_bits": 5, "cfg__full_bits": 5},
    }
    names = [b[0] for b in ERROR_BITS]
    for key, change in bad.items():
        host.configure({**good, **change})
        result = await host.start()
        assert result["error"] == 1 << names.index(key), \
            f"{key}: error {error_names(result['error'])}"
        assert result["busy"] == 0
    rng = rng_for("after-errors")
    x = activation("smooth", grid, c_in, rng)
    w = rng.integers(-128, 128, (c_in, c_out)).astype(np.int8)
    await verify_layer(host, x, w, grid, 0, 2, reuse=True, label="after errors")
