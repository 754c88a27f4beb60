"""cocotb bench of block_softmax (the vector unit's softmax by key blocks, ``docs/numerics.md``
section 15): block rows of S in, uint8 P with the row's rescale factor and weight out.

A synthetic head's scores go in as the engine core walks a head (key blocks outermost, the
query rows of the box inside); every output beat (P, ``tail``, ``last``, ``row``,
``factor``, ``weight``) must equal the one built from ``golden.vector.online_stages``' trace,
each exactly once and in order. Runs: without back-pressure (also the period of block rows),
with random input gaps and output stalls (``KALEIDO_SEEDS`` seeds), one query row's blocks
back to back, a reset in the middle of a run followed by a clean run, and a block row longer
than the buffer (``overflow``).

``make -C sim/vector/block [SIM=icarus]``; ``KALEIDO_MANIFEST`` names the manifest of a
non-default variant.
"""

from __future__ import annotations

import random

import cocotb
import numpy as np
from cocotb.triggers import RisingEdge
from long_head_beats import prob_beats, score_beats
from simlib import (StreamSink, StreamSource, bench_config, idle_and_reset,
                    seeds_requested)

from golden.vector import online_stages, softmax_scale
from kaleido_hw.vector.block_softmax import ROW_OVERHEAD
from kaleido_hw.vector.layouts import block_prob_beat_layout


CFG = bench_config()
L, B, MAX_ROW = CFG.vector_lanes, CFG.vector_score_bits, CFG.vector_max_row
ROWS = CFG.engine_max_tokens
P_LAYOUT = block_prob_beat_layout(CFG)


def head(rng: np.random.Generator, n: int):
    """Scores of ROWS queries against n keys whose logits spread over a few units, a scale
    pair, and key blocks of up to MAX_ROW keys (the last one shorter)."""
    scale = float(np.exp(rng.uniform(np.log(1e-4), np.log(0.5))))
    spread = rng.uniform(0.5, 6.0) / scale
    lim = (1 << (B - 2)) - 1
    s = np.round(rng.normal(rng.uniform(-lim / 4, lim / 4), spread, (ROWS, n)))
    s[:, -max(1, n // 8):] += int(4 / scale)          # late keys raise most rows' maxima
    s = np.clip(s, -lim, lim).astype(np.int64)
    size = int(rng.integers(max(1, MAX_ROW // 4), MAX_ROW + 1))
    blocks = [np.arange(b, min(b + size, n)) for b in range(0, n, size)]
    return s, softmax_scale(scale), blocks


def beats_in(s, blocks, pair, order, rng: random.Random):
    """Input beats of the block rows ``order`` = [(block, row)]; lanes past a row's end carry
    junk (must be ignored)."""
    def junk(k):
        return [rng.randint(-(1 << (B - 1)), (1 << (B - 1)) - 1) for _ in range(k)]
    return score_beats(CFG, s, blocks, *pair, order, fill=junk)


def beats_out(s, blocks, pair, order):
    """The expected output beats, from the golden trace."""
    v = np.zeros((s.shape[1], 1), dtype=np.int8)
    return prob_beats(CFG, online_stages(s, v, *pair, blocks, trace=True)["blocks"], order)


async def reset(dut, clock: bool) -> None:
    """Inputs idle, then a reset (with ``clock``, the clock is started too)."""
    await idle_and_reset(dut, ("s__valid", "p__ready"), clock)


async def run(dut, beats, expected, *, gap=0.0, stall=0.0, seed=0, clock=True):
    """Reset, stream ``beats`` through, check the output beats against ``expected``; return
    the cycle of each output beat. ``clock``: the test's first run starts the clock."""
    rng = random.Random(seed)
    await reset(dut, clock)
    src = StreamSource(dut, "s", gap=gap, rng=random.Random(rng.random()))
    sink = StreamSink(dut, "p", stall=stall, rng=random.Random(rng.random()))
    sink_task = sink.start()
    await src.send(beats)
    for _ in range(500 + 60 * len(expected) * (1 + int(10 * stall))):
        if len(sink.items) >= len(expected):
            break
        await RisingEdge(dut.clk)
    for _ in range(40):             # anything extra would be a duplicate
        await RisingEdge(dut.clk)
    sink_task.cancel()
    assert len(sink.items) == len(expected), (
        f"{len(sink.items)} beats out, {len(expected)} expected")
    for i, (got, want) in enumerate(zip(sink.items, expected)):
        assert int(got) == want, (f"beat {i}: got {P_LAYOUT.from_bits(int(got))}, "
                                  f"want {P_LAYOUT.from_bits(want)}")
    assert int(dut.overflow.value) == 0 and int(dut.weight_overflow.value) == 0
    return sink.cycles_seen


@cocotb.test(timeout_time=5, timeout_unit="ms")
async def test_head_no_backpressure(dut):
    """Key blocks outermost, the box's query rows inside; bit-exact, and block rows of k
    beats leave every k + ROW_OVERHEAD cycles."""
    rng = np.random.default_rng(1)
    s, pair, blocks = head(rng, 2 * MAX_ROW + L + 1)
    full = [b for b in range(len(blocks)) if len(blocks[b]) == len(blocks[0])]
    order = [(b, r) for b in range(len(blocks)) for r in range(ROWS)]
    cycles = await run(dut, beats_in(s, blocks, pair, order, random.Random(2)),
                       beats_out(s, blocks, pair, order))
    k = -(-len(blocks[0]) // L)
    lasts = [cycles[i] for i in range(k - 1, k * ROWS * len(full), k)]
    gaps = set(np.diff(lasts)[2:].tolist())
    dut._log.info(f"{ROWS} rows x {len(blocks)} blocks, {k}-beat block rows: gaps {gaps}")
    assert gaps == {k + ROW_OVERHEAD}, f"block rows leave every {gaps} cycles"


@cocotb.test(timeout_time=40, timeout_unit="ms")
async def test_head_random_backpressure(dut):
    """Random heads, random input gaps and output stalls (four mixes)."""
    for n in range(seeds_requested()):
        seed = f"{cocotb.RANDOM_SEED}-block-{n}"
        rng = np.random.default_rng(abs(hash(seed)) % (1 << 32))
        s, pair, blocks = head(rng, int(rng.integers(1, 3 * MAX_ROW)))
        order = [(b, r) for b in range(len(blocks)) for r in rng.permutation(ROWS)]
        gap, stall = [(0.3, 0.4), (0.0, 0.8), (0.7, 0.0), (0.5, 0.6)][n % 4]
        await run(dut, beats_in(s, blocks, pair, order, random.Random(seed)),
                  beats_out(s, blocks, pair, order), gap=gap, stall=stall, seed=n,
                  clock=n == 0)


@cocotb.test(timeout_time=5, timeout_unit="ms")
async def test_one_row_back_to_back(dut):
    """One query row's blocks one after the other: its state is read after it was written."""
    rng = np.random.default_rng(5)
    s, pair, blocks = head(rng, 3 * L + 2)
    blocks = [np.arange(b, min(b + L, s.shape[1])) for b in range(0, s.shape[1], L)]
    s[0] = np.sort(s[0])                               # every block raises the maximum
    order = [(b, 0) for b in range(len(blocks))]
    await run(dut, beats_in(s, blocks, pair, order, random.Random(6)),
              beats_out(s, blocks, pair, order), gap=0.2, stall=0.2, seed=7)


@cocotb.test(timeout_time=5, timeout_unit="ms")
async def test_reset_mid_run(dut):
    """A reset while block rows are in flight, then a clean run: correct results."""
    rng = np.random.default_rng(9)
    s, pair, blocks = head(rng, 3 * MAX_ROW + 3)
    order = [(b, r) for b in range(len(blocks)) for r in range(ROWS)]
    beats = beats_in(s, blocks, pair, order, random.Random(10))
    expected = beats_out(s, blocks, pair, order)
    await reset(dut, clock=True)
    src = StreamSource(dut, "s", gap=0.1, rng=random.Random(11))
    sink = StreamSink(dut, "p", stall=0.5, rng=random.Random(12))
    tasks = [sink.start(), cocotb.start_soon(src.send(beats))]
    for _ in range(20 * len(beats)):                  # until the first P beats are out
        if sink.items:
            break
        await RisingEdge(dut.clk)
    for _ in range(5):
        await RisingEdge(dut.clk)
    assert 0 < len(sink.items) < len(expected)
    for task in tasks:
        task.cancel()
    await run(dut, beats, expected, gap=0.2, stall=0.3, seed=13, clock=False)


@cocotb.test(timeout_time=5, timeout_unit="ms")
async def test_overflow_block_row(dut):
    """A block row longer than vector_max_row sets ``overflow`` (sticky)."""
    rng = np.random.default_rng(15)
    s, pair, _ = head(rng, MAX_ROW + L)
    blocks = [np.arange(MAX_ROW + L)]
    beats = beats_in(s, blocks, pair, [(0, 0)], random.Random(16))
    await reset(dut, clock=True)
    dut.p__ready.value = 1
    src = StreamSource(dut, "s", rng=random.Random(17))
    await src.send(beats)
    for _ in range(MAX_ROW // L + 40):
        await RisingEdge(dut.clk)
    assert int(dut.overflow.value) == 1 and int(dut.weight_overflow.value) == 0
