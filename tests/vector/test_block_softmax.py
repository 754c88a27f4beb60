"""The block softmax unit (``BlockSoftmaxUnit``, ``docs/numerics.md`` section 15) in
Amaranth's simulator: every output beat (P, row, rescale factor, weight) bit-exact to
``golden.vector.online_stages``' trace, under random input gaps and output back-pressure, for
blocks of several query rows, one row's blocks back to back, short last beats and the
smallest buffer counts; the output period of a stream of block rows; the overflow flag."""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.hdl import Value
from amaranth.sim import Simulator

from golden.vector import online_stages, softmax_scale
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.vector.block_softmax import ROW_OVERHEAD, BlockSoftmaxUnit
from kaleido_hw.vector.layouts import block_prob_beat_layout
from long_head_beats import prob_beats, score_beats
from tests.stream_harness import run_stream

SMALL = KaleidoConfig(vector_lanes=4, vector_max_row=16, vector_row_buffers=2,
                      engine_max_tokens=6)
ODD = KaleidoConfig(vector_lanes=5, vector_max_row=20, vector_score_bits=32,
                    vector_row_buffers=3, engine_max_tokens=5)


def _head(rng, rows: int, n: int, scale: float):
    """Scores whose logits spread over a few units, so that rescales are neither 1 nor 0."""
    spread = rng.uniform(0.5, 6.0) / scale
    s = np.round(rng.normal(rng.uniform(-1e5, 1e5), spread, (rows, n))).astype(np.int64)
    return np.clip(s, -2 ** 23, 2 ** 23 - 1)


def _expected(cfg, s, blocks, mult, shift, order):
    """Output beats from the golden trace (V plays no part in P)."""
    v = np.zeros((s.shape[1], 1), dtype=np.int8)
    return prob_beats(cfg, online_stages(s, v, mult, shift, blocks, trace=True)["blocks"], order)


def _check(cfg, s, blocks, mult, shift, order, gap, stall, seed):
    beats = score_beats(cfg, s, blocks, mult, shift, order)
    want = _expected(cfg, s, blocks, mult, shift, order)
    dut = BlockSoftmaxUnit(cfg)
    run = run_stream(dut, beats, len(want), gap=gap, stall=stall, seed=seed, ports=("s", "p"))
    assert len(run.out_items) == len(want)            # nothing lost, nothing extra
    layout = block_prob_beat_layout(cfg)
    for i, (got, exp) in enumerate(zip(run.out_items, want)):
        assert got == exp, (f"beat {i}: got {layout.from_bits(got)}, "
                            f"want {layout.from_bits(exp)}")
    return run


@pytest.mark.parametrize("cfg, seed", [(SMALL, 0), (SMALL, 1), (ODD, 2)])
def test_blocks_of_query_rows(cfg, seed):
    """Blocks outermost, the rows of a query box inside, as the engine core walks a head."""
    rng = np.random.default_rng(seed)
    rows = cfg.engine_max_tokens
    n = int(rng.integers(30, 50))
    scale = float(np.exp(rng.uniform(np.log(1e-4), np.log(0.5))))
    mult, shift = softmax_scale(scale)
    s = _head(rng, rows, n, scale)
    s[:, -3:] = np.clip(s[:, -3:] + int(4 / scale), None, 2 ** 23 - 1)   # raised maxima
    sizes = []
    while sum(sizes) < n:                             # 1..vector_max_row keys per block
        sizes.append(int(min(rng.integers(1, cfg.vector_max_row + 1), n - sum(sizes))))
    blocks = np.split(rng.permutation(n), np.cumsum(sizes)[:-1])
    order = [(b, r) for b in range(len(blocks)) for r in rng.permutation(rows)]
    _check(cfg, s, blocks, mult, shift, order, gap=0.3, stall=0.4, seed=seed)


def test_one_rows_blocks_back_to_back():
    """The same query row in consecutive block rows: its state is written before it is read
    again (a stale read would rescale from the old maximum)."""
    rng = np.random.default_rng(7)
    mult, shift = softmax_scale(0.01)
    s = _head(rng, 2, 40, 0.01)
    s[0] = np.sort(s[0])                              # every block raises the maximum
    blocks = [np.arange(b, b + 5) for b in range(0, 40, 5)]
    order = [(b, 0) for b in range(8)] + [(b, 1) for b in range(8)]
    _check(SMALL, s, blocks, mult, shift, order, gap=0.0, stall=0.0, seed=0)
    _check(SMALL, s, blocks, mult, shift, order, gap=0.5, stall=0.5, seed=1)


def test_default_build_exact():
    cfg = KaleidoConfig()
    rng = np.random.default_rng(11)
    mult, shift = softmax_scale(1 / np.sqrt(128) * 0.05)
    s = _head(rng, 4, 200, 0.05 / np.sqrt(128))
    blocks = [np.arange(0, 64), np.arange(64, 128), np.arange(128, 200)]
    order = [(b, r) for b in range(3) for r in range(4)]
    _check(cfg, s, blocks, mult, shift, order, gap=0.2, stall=0.3, seed=3)


@pytest.mark.parametrize("beats", [1, 4])
def test_output_period(beats):
    """Without gaps or back-pressure, block rows of k beats leave every k + ROW_OVERHEAD
    cycles."""
    cfg = SMALL
    rng = np.random.default_rng(beats)
    mult, shift = softmax_scale(0.02)
    n = beats * cfg.vector_lanes * 6
    s = _head(rng, cfg.engine_max_tokens, n, 0.02)
    size = beats * cfg.vector_lanes
    blocks = [np.arange(b, b + size) for b in range(0, n, size)]
    order = [(b, r) for b in range(len(blocks)) for r in range(cfg.engine_max_tokens)]
    run = _check(cfg, s, blocks, mult, shift, order, gap=0.0, stall=0.0, seed=0)
    lasts = [c for i, c in enumerate(run.out_cycles) if i % beats == beats - 1]
    assert set(np.diff(lasts)[2:].tolist()) == {beats + ROW_OVERHEAD}


def test_overflow_is_sticky_and_the_rest_runs():
    cfg = SMALL
    mult, shift = softmax_scale(0.01)
    beats = score_beats(cfg, np.array([[1, 2, 3, 4] * 5]), [np.arange(20)], mult, shift,
                        [(0, 0)])                      # 20 > 16 scores
    dut = BlockSoftmaxUnit(cfg)
    run = run_stream(dut, beats, 4, ports=("s", "p"))
    out = [block_prob_beat_layout(cfg).from_bits(w) for w in run.out_items]
    assert len(out) == 4 and int(out[-1].last) == 1 and int(out[-1].weight) > 0
    flags = {}                                        # the flags, on a fresh unit

    async def bench(ctx):
        for beat in beats:
            ctx.set(dut.s.valid, 1)
            ctx.set(Value.cast(dut.s.payload), beat)
            ctx.set(dut.p.ready, 1)
            await ctx.tick().until(dut.s.ready)
        ctx.set(dut.s.valid, 0)
        await ctx.tick().repeat(30)
        flags["overflow"] = ctx.get(dut.overflow)
        flags["weight"] = ctx.get(dut.weight_overflow)

    dut = BlockSoftmaxUnit(cfg)
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert flags == {"overflow": 1, "weight": 0}
