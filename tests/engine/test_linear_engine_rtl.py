"""The LinearEngine RTL (``kaleido_hw/engine/linear_engine.py``, ``docs/linear.md`` "RTL") in Amaranth
simulation: its decoder and window-code unit against the golden tables, and whole runs with
Y bit-exact against ``golden.linear`` (dense: ``X @ W``) and every counter equal to
``golden.engine.linear.linear_counters`` (cycles included), Y read under random back-pressure.
About 45 s."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from amaranth.sim import Simulator
from linear_rtl_harness import Job, run_jobs

from golden.engine.linear import DECODE, linear_counters
from golden.numerics import VideoGrid
from golden.window import linear, window_masks
from kaleido_hw.array.linear_cell import LinearDecoder
from kaleido_hw.config import ConfigError, KaleidoConfig
from kaleido_hw.engine.linear_engine import (ERROR_BITS, check_linear_run, counters_from_model,
                                             linear_ports)
from kaleido_hw.engine.linear_layouts import LinearGeometry
from kaleido_hw.engine.window_code_unit import WindowCodeUnit


def _simulate(dut, bench):
    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()


def test_decoder_is_the_golden_table():
    """Every (kind, c1, c2) decodes to golden DECODE's op/split/parts when the step issues and
    both units are real, and to idle otherwise; drain and clear pass through."""
    dut = LinearDecoder()
    op_t, split_t, part_t = DECODE

    async def bench(ctx):
        for kind, c1, c2, issue, rv, cv in itertools.product(range(3), range(4), range(4),
                                                             (0, 1), (0, 1), (0, 1)):
            ctx.set(dut.mode.kind, kind)
            ctx.set(dut.mode.issue, issue)
            ctx.set(dut.mode.drain, (kind + c1) % 4)
            ctx.set(dut.mode.clear, c2 & 1)
            ctx.set(dut.rvalid, rv)
            ctx.set(dut.cvalid, cv)
            ctx.set(dut.c1, c1)
            ctx.set(dut.c2, c2)
            await ctx.delay(1e-9)
            on = issue and rv and cv
            got = (ctx.get(dut.ctrl.op.as_value()), ctx.get(dut.ctrl.split.as_value()),
                   *(ctx.get(dut.ctrl.part[r].as_value()) for r in range(3)))
            want = ((int(op_t[kind, c1, c2]), int(split_t[kind, c1, c2]),
                     *(int(part_t[kind, c1, c2, r]) for r in range(3))) if on
                    else (0, 0, 0, 0, 0))
            assert got == want, (kind, c1, c2, issue, rv, cv)
            assert ctx.get(dut.ctrl.drain.as_value()) == (kind + c1) % 4
            assert ctx.get(dut.ctrl.clear) == (0b111 if c2 & 1 else 0)
            assert ctx.get(dut.ctrl.move.as_value()) == 0

    _simulate(dut, bench)


def _edge_values(rng, shape):
    """int8 values around the FULL/HALF boundaries: nibble edges, extremes, near-equal."""
    base = rng.choice(np.array([-128, -127, -112, -17, -16, -9, -8, -1, 0, 1, 7, 8, 15, 16,
                                31, 32, 112, 126, 127]), size=shape[:-1] + (1,))
    jitter = rng.integers(-20, 21, size=shape)
    jitter[rng.random(shape) < 0.3] = 0
    return np.clip(base + jitter, -128, 127).astype(np.int8)


def test_window_code_unit_is_the_window_rule():
    """Codes and F1/F2 work of random and edge windows equal golden.window_masks (complete
    windows), NONE/ABSENT for incomplete ones, NONE with reuse off; every threshold pair."""
    lanes = 8
    dut = WindowCodeUnit(lanes)
    rng = np.random.default_rng(7)
    from golden.engine.linear import WORK

    async def bench(ctx):
        checked = 0
        for window, (fb, hb), trial in itertools.product((2, 3), [(4, 3), (5, 3), (7, 6)],
                                                         range(12)):
            vals = (_edge_values(rng, (window, lanes)) if trial % 2
                    else rng.integers(-128, 128, (window, lanes)).astype(np.int8))
            if trial % 3 == 0:
                vals[1:] = np.clip(vals[0].astype(int) + rng.integers(-9, 10, (window - 1, lanes)),
                                   -128, 127)
            for present, reuse in (((1, 1), 1), ((1, 0), 1), ((1, 1), 0)):
                if window == 2 and present[1] == 0:
                    continue
                words = [int.from_bytes(v.astype(np.int8).tobytes(), "little") for v in vals]
                ctx.set(dut.m0, words[0])
                ctx.set(dut.m1, words[1])
                ctx.set(dut.m2, words[2] if window == 3 else 0x55 * (2 ** (8 * lanes) // 255))
                ctx.set(dut.present1, present[0])
                ctx.set(dut.present2, present[1] if window == 3 else 0)
                ctx.set(dut.w3, window == 3)
                ctx.set(dut.reuse, reuse)
                ctx.set(dut.full_limit, (window << (7 - fb)) ** 2)
                ctx.set(dut.half_mask, (0xFF << (7 - hb)) & 0xFF)
                await ctx.delay(1e-9)
                c1w, c2w = ctx.get(dut.c1), ctx.get(dut.c2)
                got1 = [(c1w >> (2 * c)) & 3 for c in range(lanes)]
                got2 = [(c2w >> (2 * c)) & 3 for c in range(lanes)]
                complete = present[1] if window == 3 else present[0]
                if complete and reuse:
                    masks = window_masks(vals, VideoGrid(window, 1, 1), 0, window, fb, hb)
                    want1 = list(masks[1])
                    want2 = list(masks[2]) if window == 3 else [3] * lanes
                else:
                    want1 = [2] * lanes
                    want2 = [2 if window == 3 and present[1] else 3] * lanes
                assert got1 == [int(v) for v in want1], (window, fb, hb, vals)
                assert got2 == [int(v) for v in want2], (window, fb, hb, vals)
                for kind, port in ((1, dut.work1), (2, dut.work2)):
                    bits = ctx.get(port)
                    assert [(bits >> c) & 1 for c in range(lanes)] == \
                        [int(WORK[kind, a, b]) for a, b in zip(want1, want2)]
                checked += 1
        assert checked > 100

    _simulate(dut, bench)


def _smooth(rng, n, c, step=3):
    return np.clip(np.cumsum(rng.integers(-step, step + 1, (n, c)), 0)
                   + rng.integers(-60, 60, c), -128, 127).astype(np.int8)


def _check(outs, jobs, cfg):
    rows, cols, arrays = cfg.rows, cfg.cols, cfg.engine_arrays
    for out, job in zip(outs, jobs):
        assert out["error"] == 0
        x, w = job.x, job.w
        want = (linear(x, w, job.grid, job.directions, job.window, job.full_bits, job.half_bits)
                if job.reuse else x.astype(np.int64) @ w.astype(np.int64))
        assert np.array_equal(out["Y"], want)
        model = linear_counters(x, w, job.grid, job.directions, job.window, rows, cols, arrays,
                                job.full_bits, job.half_bits, job.reuse)
        assert out["counters"] == counters_from_model(model)


def test_runs_bit_and_cycle_exact():
    """Back-to-back runs on three 2 x 4 arrays (column block cb on array cb mod 3: 4 column
    blocks split 2/1/1, 2 blocks leave array 2 idle, 1 block two arrays): odd grids
    (trailing incomplete windows on every axis), windows 2 and 3, reuse and dense, per-channel
    directions (three groups, barriers), C_out not a multiple of C, a group smaller than R
    (bubbles), adversarial data (all equal, alternating sign, nibble edges, random), Y read
    under random back-pressure; every counter, per-array ones included."""
    rows, cols = 2, 4
    cfg = KaleidoConfig(engine_max_tokens=32, linear_max_in=16, linear_max_out=16,
                        rows=rows, cols=cols, engine_arrays=3)
    rng = np.random.default_rng(11)
    g335 = VideoGrid(3, 3, 3)
    g252 = VideoGrid(5, 2, 3)
    mixed = [0, 1, 2, 0, 1, 2, 0, 0, 2, 1, 0]
    xs = _smooth(rng, g335.n, 11)
    w11 = rng.integers(-128, 128, (11, 6)).astype(np.int8)
    alt = np.where((np.arange(g252.n)[:, None] + np.arange(9)) % 2, 127, -128).astype(np.int8)
    jobs = [
        Job(xs, w11, g335, mixed, 2, ready_prob=0.5),
        Job(xs, w11, g335, mixed, 3, reuse=False, ready_prob=0.7),
        Job(xs, w11, g335, mixed, 3, 4, 3, ready_prob=0.6),
        Job(np.full((g252.n, 9), -77, np.int8), rng.integers(-128, 128, (9, 16)).astype(np.int8),
            g252, 0, 3),
        Job(alt, np.full((9, 5), -128, np.int8), g252, 2, 2),
        Job(_edge_values(rng, (g252.n, 16)), rng.integers(-128, 128, (16, 7)).astype(np.int8),
            g252, rng.integers(0, 3, 16), 3, 6, 4, ready_prob=0.4),
        Job(_smooth(rng, g252.n, 1, 1), rng.integers(-128, 128, (1, 3)).astype(np.int8),
            g252, 1, 2),
    ]
    _check(run_jobs(cfg, jobs, seed=1), jobs, cfg)


@pytest.mark.parametrize("arrays", [1, 2])
def test_other_array_shape_and_rejections(arrays):
    """3 x 2 arrays (rows not a power of two), one or two of them (3 column blocks: 2/1),
    with window 3 along y and x; rejected configurations set their error bits (one each) and
    the next run is still exact."""
    rows, cols = 3, 2
    cfg = KaleidoConfig(engine_max_tokens=32, linear_max_in=8, linear_max_out=8,
                        rows=rows, cols=cols, engine_arrays=arrays)
    rng = np.random.default_rng(5)
    grid = VideoGrid(2, 4, 4)
    x = _smooth(rng, grid.n, 8, 2)
    w = rng.integers(-128, 128, (8, 5)).astype(np.int8)
    good = linear_ports(cfg, grid, 8, 5, 1, 3)
    bad = {
        "grid": {"cfg__t": 0},
        "c_in": {"cfg__c_in": 9},
        "c_out": {"cfg__c_out": 0},
        "directions": {"cfg__directions": 3 << 6},
        "window": {"cfg__window": 1},
        "bits": {"cfg__full_bits": 3},
    }
    names = [b[0] for b in ERROR_BITS]
    jobs = [Job(x, w, grid, 1, 3, ready_prob=0.5)]
    for key, change in bad.items():
        jobs.append(Job(x, w, grid, 1, 3, ports={**good, **change}))
    jobs.append(Job(x, w, grid, [1, 2] * 4, 3, reuse=True, ready_prob=0.8))
    outs = run_jobs(cfg, jobs, seed=2)
    for out, key in zip(outs[1:-1], bad):
        assert out["error"] == 1 << names.index(key), key
    _check([outs[0], outs[-1]], [jobs[0], jobs[-1]], cfg)


def test_group_size_error_bit():
    """A direction group larger than acc_width sums exactly is refused by check_linear_run
    (the RTL's group_size bit compares with the same limit; a build large enough to reach
    it, 256 input channels, is too slow to simulate here)."""
    cfg = KaleidoConfig(engine_max_tokens=8, linear_max_in=256, linear_max_out=8, rows=1,
                        cols=1, acc_width=23)
    with pytest.raises(ValueError, match="group t has 256 channels"):
        check_linear_run(cfg, "1x1x2", 256, 1)
    assert LinearGeometry.from_config(cfg).max_group_channels == 255


def test_python_check_names_the_parameter():
    """check_linear_run / linear_ports refuse what the hardware cannot run, naming the key."""
    cfg = KaleidoConfig(engine_max_tokens=16, linear_max_in=8, linear_max_out=8)
    for kwargs, match in [
        (dict(grid="3x3x2", c_in=8, c_out=8), "engine_max_tokens"),
        (dict(grid="2x2x2", c_in=9, c_out=8), "linear_max_in"),
        (dict(grid="2x2x2", c_in=8, c_out=0), "linear_max_out"),
        (dict(grid="2x2x2", c_in=8, c_out=8, window=4), "window"),
        (dict(grid="2x2x2", c_in=8, c_out=8, full_bits=3, half_bits=2), "full_bits"),
        (dict(grid="2x2x2", c_in=8, c_out=8, directions=[0] * 7), "directions"),
    ]:
        with pytest.raises(ValueError, match=match):
            linear_ports(cfg, **kwargs)
    with pytest.raises(ConfigError, match="linear_max_in"):
        KaleidoConfig(linear_max_in=12)
    with pytest.raises(ConfigError, match="linear_max_out"):
        KaleidoConfig(linear_max_out=512)
    with pytest.raises(ConfigError, match="cols must be a power of two"):
        LinearGeometry.from_config(KaleidoConfig(cols=3))
