"""Linear blocks with windows of 3 on the KaleidoEngine (``engine_window3``; ``docs/engine.md``,
"Linear windows of 3"): the RTL against ``golden.linear(..., window=3)`` bit for bit and
against the cycle model ``golden.engine.window3.window3_counters`` counter for counter, the
run-time and build-time rejections, and the Verilog under ``verilator --lint-only -Wall``."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from amaranth.sim import Simulator
from host_harness import configure_and_start, wait_done
from test_kaleido_engine import run_engine

from golden.array.window3 import window3_issued
from golden.engine.linear import linear_units
from golden.engine.model import EngineParams
from golden.engine.window3 import window3_block, window3_counters
from golden.numerics import FULL, HALF, NONE, ChannelGroups, VideoGrid
from golden.window import linear, window_masks
from kaleido_hw.config import ConfigError, KaleidoConfig
from kaleido_hw.engine.kaleido_engine import (ERROR_BITS, KaleidoEngine, engine_ports,
                                              model_counters)
from kaleido_hw.flow.lint import lint_component


def _config(rows=2, cols=2, arrays=2, dispatcher="none", pe="reuse") -> KaleidoConfig:
    return KaleidoConfig(rows=rows, cols=cols, engine_arrays=arrays, engine_max_tokens=64,
                         engine_max_head_dim=16, sched_pattern_width=4, matcher_channels=4,
                         sched_entries=4, engine_dispatcher=dispatcher, engine_pe=pe,
                         engine_window3=True)


def _operands(grid, seed):
    """A smooth activation (windows of every code) and random weight rows, 16 channels."""
    rng = np.random.default_rng(seed)
    x = np.cumsum(rng.integers(-2, 3, (grid.n, 16)), axis=0).clip(-128, 127).astype(np.int8)
    k = rng.integers(-128, 128, (grid.n, 16)).astype(np.int8)
    return x, k


GROUPS = ChannelGroups.from_sizes(5, 6, 5, directions=(1, 0, 2))

#: (R, C, P, dispatcher, grid, variant); the first in make test (the default dispatcher:
#: MergedCell arrays, the matcher and scheduler built and off).
CASES = {
    "pe-2x2x2-full": ((2, 2, 2, "full"), (4, 2, 3), "pe"),
    "pe-2x2x2-none": ((2, 2, 2, "none"), (5, 3, 2), "pe"),
    "dense-2x2x2-none": ((2, 2, 2, "none"), (5, 3, 2), "dense"),
    "pe-4x2x3-scheduler": ((4, 2, 3, "scheduler"), (7, 3, 2), "pe"),
    # the arrays with the P @ V mode (engine_pe = "reuse-pv"), with and without the matcher
    "pe-2x2x2-full-pv": ((2, 2, 2, "full", "reuse-pv"), (4, 2, 3), "pe"),
    "pe-2x2x2-none-pv": ((2, 2, 2, "none", "reuse-pv"), (4, 2, 3), "pe"),
}


@pytest.mark.parametrize("case", [pytest.param(c, marks=() if c == "pe-2x2x2-full"
                                               else pytest.mark.full_set) for c in CASES])
def test_window3_blocks(case):
    """A window-3 linear block (K = weight rows) on an odd grid whose three direction groups
    have complete windows, windows cut short by the grid's edge (the second follower
    ABSENT) and chunks narrower than the loader's 3M reads (pass 0 padded): S bit-exact
    (``golden.linear`` with windows of 3, ``x @ w`` dense) and read out under
    back-pressure, every counter equal to ``window3_counters``. The windows of 2 would give
    another S, and each follower takes every code somewhere."""
    build, shape, variant = CASES[case]
    cfg = _config(*build)
    grid = VideoGrid(*shape)
    x, k = _operands(grid, 21)
    axes = np.asarray(GROUPS.directions)[np.asarray(GROUPS.group_of)]
    want = linear(x, k.T, grid, axes, 3)
    assert not np.array_equal(want, linear(x, k.T, grid, axes, 2))
    masks = window_masks(x, grid, axes, 3)
    assert {FULL, HALF, NONE} <= set(np.unique(masks).tolist())
    if variant == "dense":
        want = x.astype(np.int64) @ k.T.astype(np.int64)
    ports = engine_ports(cfg, grid, GROUPS, variant=variant, linear=True, window3=True)
    out = run_engine(cfg, x, k, grid, GROUPS, variant, stall_every=3, ports=ports)
    assert out["error"] == 0
    assert np.array_equal(out["S"], want)
    model = model_counters(cfg, x, k, grid, GROUPS, variant, linear=True, window3=True)
    assert out["counters"] == model, f"\n rtl   {out['counters']}\n model {model}"


def test_window3_rejected_with_the_dispatcher():
    """A window-3 block runs in natural order without pass 3: ``cfg__window3`` with
    ``cfg__schedule`` is rejected at start (error bit ``dispatcher``), and without
    ``cfg__linear`` it is a plain S block (no error); the host helpers refuse it before any
    simulation."""
    cfg = _config(dispatcher="scheduler")
    grid = VideoGrid(3, 2, 2)
    bit = {name: 1 << i for i, (name, _) in enumerate(ERROR_BITS)}
    ports = engine_ports(cfg, grid, GROUPS, variant="pe-sh", linear=True)
    dut = KaleidoEngine(cfg)
    errors = []

    async def bench(ctx):
        for window3, linear_bit in ((1, 1), (1, 0)):
            await configure_and_start(ctx, dut, {**ports, "cfg__window3": window3,
                                                 "cfg__linear": linear_bit})
            await wait_done(ctx, dut, 20_000)
            errors.append(ctx.get(dut.error))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert errors == [bit["dispatcher"], 0]
    with pytest.raises(ValueError, match="variant must be 'dense' or 'pe'"):
        engine_ports(cfg, grid, GROUPS, variant="pe-sh", linear=True, window3=True)
    with pytest.raises(ValueError, match="linear=True"):
        engine_ports(cfg, grid, GROUPS, variant="pe", window3=True)
    with pytest.raises(ValueError, match="engine_window3"):
        engine_ports(KaleidoConfig(), grid, GROUPS, variant="pe", linear=True, window3=True)


@pytest.mark.parametrize("kwargs, message", [
    ({"engine_pe": "plain", "engine_dispatcher": "none"}, "engine_window3 needs engine_pe"),
    ({"engine_dispatcher": "none", "rows": 2, "cols": 4}, "engine_window3 needs cols <= rows"),
    ({"engine_dispatcher": "none", "engine_window3": 1}, "engine_window3 must be true or false"),
])
def test_window3_build_errors(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        KaleidoConfig(**{"engine_window3": True, **kwargs})


def test_window3_model():
    """The functional model is ``golden.linear`` with windows of 3; the cycle model's
    counters add up (steps = issued + bubbles, pass 0 every chunk channel of every quad,
    no pass 3, busy PE-cycles within the steps' PEs) and it refuses the dispatcher's
    variants."""
    grid = VideoGrid(4, 5, 3)
    x, k = _operands(grid, 5)
    axes = np.asarray(GROUPS.directions)[np.asarray(GROUPS.group_of)]
    assert np.array_equal(window3_block(x, k, grid, GROUPS), linear(x, k.T, grid, axes, 3))
    params = EngineParams(arrays=3, rows=4, cols=4, width=8)
    c = window3_counters(x, k, grid, GROUPS, params)
    steps = c.issued.sum(axis=1) + c.bubbles
    assert (c.issued[:, 3] == 0).all() and (c.skipped[:, 3] == 0).all()
    # every chunk (one per group here) runs every row block of its group's window units
    # against the 15 column blocks of the 60 weight rows; pass 0 issues all its channels
    row_blocks = [-(-linear_units(grid, d, 3).shape[0] // 4) for d in GROUPS.directions]
    assert c.quads.sum() == 15 * sum(row_blocks)
    assert c.issued[:, 0].sum() == 15 * sum(n * rb for n, rb in zip((5, 6, 5), row_blocks))
    assert (c.busy_pe_cycles <= steps * 16).all() and (c.idle >= 0).all()
    assert (c.skipped[:, 1:3] + c.issued[:, 1:3]).sum() == 2 * c.issued[:, 0].sum()
    # the per-quad step count of the report's model (golden.array.window3.window3_issued)
    one = ChannelGroups.from_sizes(16, 0, 0, directions=(1, 0, 2))
    c1 = window3_counters(x, k, grid, one, params)
    issued = window3_issued(x, grid, grid.n, 1, 3, 4, 4, 8)
    assert (c1.issued.sum(axis=1) + c1.bubbles).sum() == issued.steps
    assert np.array_equal(c1.issued.sum(axis=0)[:3], issued.issued)
    dense = window3_counters(x, k, grid, GROUPS, params, "dense")
    assert dense.issued[:, 1:3].sum() > c.issued[:, 1:3].sum()
    assert dense.cycles > c.cycles
    with pytest.raises(ValueError, match="variant must be one of dense, pe"):
        window3_counters(x, k, grid, GROUPS, params, "full")


@pytest.mark.skipif(shutil.which("verilator") is None, reason="verilator not on PATH: make install")
def test_lint_clean(tmp_path):
    """A window-3 build (2 arrays of 2 x 2, the default dispatcher: MergedCell arrays)
    under ``verilator --lint-only -Wall``."""
    problems = lint_component(KaleidoEngine(_config(dispatcher="full")), "kaleido_engine",
                              tmp_path)
    assert not problems, "\n".join(problems)
