"""cocotb bench of block_output (the output side of attention by key blocks,
``docs/numerics.md`` section 15): partial ``P @ V`` beats with their rows' rescale factors
in, finish requests in, normalised int16 rows out.

A synthetic head's partials go in block by block (the query rows of the box in a random
order per block), each row's finish request once its last partial is in; every output beat
must equal the one built from ``golden.vector.online_stages`` (``out``), each exactly once,
rows in the order they were finished. Runs: without back-pressure, with random gaps on both
inputs and output stalls (``KALEIDO_SEEDS`` seeds), two heads back to back on the same rows,
a reset while partials and a finish are in flight followed by a clean run, and a bad weight
(sticky ``bad_weight``, the row still comes out: no hang).

``make -C sim/vector/output [SIM=icarus]``; ``KALEIDO_MANIFEST`` names the manifest of a
non-default variant.
"""

from __future__ import annotations

import random

import cocotb
import numpy as np
from cocotb.triggers import RisingEdge
from long_head_beats import finish_requests, output_beats, partial_beats
from simlib import StreamSink, bench_config, idle_and_reset, seeds_requested

from golden.vector import online_stages, softmax_scale
from kaleido_hw.vector.layouts import output_beat_layout


CFG = bench_config()
L, D, ROWS = CFG.vector_lanes, CFG.engine_max_head_dim, CFG.engine_max_tokens
CHUNKS = -(-D // L)
OUT_LAYOUT = output_beat_layout(CFG)


def head(rng: np.random.Generator, n: int, block: int):
    """A head of ROWS queries and n keys: its partial beats (each with the row it finishes,
    or None), finish requests and expected output beats per row."""
    scale = float(np.exp(rng.uniform(np.log(1e-4), np.log(0.5))))
    mult, shift = softmax_scale(scale)
    spread = rng.uniform(0.5, 6.0) / scale
    s = np.round(rng.normal(rng.uniform(-1e5, 1e5), spread, (ROWS, n))).astype(np.int64)
    s[:, -max(1, n // 6):] += int(3 / scale)
    v = rng.integers(-128, 128, size=(n, D))
    st = online_stages(s, v, mult, shift, block, trace=True)
    order = [rng.permutation(ROWS) for _ in st["blocks"]]
    return (partial_beats(CFG, st["blocks"], lambda b: order[b]),
            finish_requests(CFG, st["weight"]), output_beats(CFG, st["out"]))


async def reset(dut, clock: bool) -> None:
    """Inputs idle, then a reset (with ``clock``, the clock is started too)."""
    await idle_and_reset(dut, ("o__valid", "fin__valid", "out__ready"), clock)


async def drive(dut, beats, fins, rng: random.Random, gap: float, stop=None):
    """Offer the partial beats (random gaps) and each row's finish request once its last
    beat was taken; ``stop``: give up after that many cycles."""
    k, pending, cycle = 0, [], 0
    o_on = f_on = False
    while k < len(beats) or pending or f_on:
        if not o_on and k < len(beats) and rng.random() >= gap:
            o_on = True
            dut.o__payload.value = beats[k][0]
        if not f_on and pending and rng.random() >= gap:
            f_on = True
            dut.fin__payload.value = fins[pending[0]]
        dut.o__valid.value = int(o_on)
        dut.fin__valid.value = int(f_on)
        await RisingEdge(dut.clk)
        if o_on and int(dut.o__ready.value):
            if beats[k][1] is not None:
                pending.append(beats[k][1])
            k += 1
            o_on = False
        if f_on and int(dut.fin__ready.value):
            pending.pop(0)
            f_on = False
        cycle += 1
        if stop is not None and cycle >= stop:
            return
    dut.o__valid.value = 0
    dut.fin__valid.value = 0


async def run(dut, heads, *, gap=0.0, stall=0.0, seed=0, clock=True, bad=False):
    """Reset, then the heads one after the other; check every output beat."""
    rng = random.Random(seed)
    await reset(dut, clock)
    sink = StreamSink(dut, "out", stall=stall, rng=random.Random(rng.random()))
    task = sink.start()
    for beats, fins, want in heads:
        before = len(sink.items)
        await drive(dut, beats, fins, rng, gap)
        order = [b[1] for b in beats if b[1] is not None]
        expect = [w for r in order for w in want[r]]
        for _ in range(200 + 60 * len(expect) * (1 + int(10 * stall))):
            if len(sink.items) - before >= len(expect):
                break
            await RisingEdge(dut.clk)
        got = [int(x) for x in sink.items[before:]]
        assert len(got) == len(expect), f"{len(got)} output beats, {len(expect)} expected"
        for i, (g, e) in enumerate(zip(got, expect)):
            assert g == e, (f"beat {i}: got {OUT_LAYOUT.from_bits(g)}, "
                            f"want {OUT_LAYOUT.from_bits(e)}")
    for _ in range(40):             # anything extra would be a duplicate
        await RisingEdge(dut.clk)
    task.cancel()
    assert len(sink.items) == sum(len(w) for _, _, ws in heads for w in ws.values())
    assert int(dut.bad_weight.value) == int(bad)


@cocotb.test(timeout_time=5, timeout_unit="ms")
async def test_head_no_backpressure(dut):
    """One head, no gaps, no stalls."""
    await run(dut, [head(np.random.default_rng(1), 3 * ROWS + 5, 2 * ROWS // 3 + 1)])


@cocotb.test(timeout_time=40, timeout_unit="ms")
async def test_heads_random_backpressure(dut):
    """Two heads back to back on the same rows per seed (the second head's first blocks must
    not add onto the first's O), random gaps and stalls (four mixes)."""
    for n in range(seeds_requested()):
        seed = f"{cocotb.RANDOM_SEED}-output-{n}"
        rng = np.random.default_rng(abs(hash(seed)) % (1 << 32))
        heads = [head(rng, int(rng.integers(1, 4 * ROWS)), int(rng.integers(1, 2 * ROWS)))
                 for _ in range(2)]
        gap, stall = [(0.3, 0.4), (0.0, 0.8), (0.7, 0.0), (0.5, 0.6)][n % 4]
        await run(dut, heads, gap=gap, stall=stall, seed=n, clock=n == 0)


@cocotb.test(timeout_time=5, timeout_unit="ms")
async def test_reset_mid_run(dut):
    """A reset while partials and finish requests are in flight, then a clean run."""
    rng = np.random.default_rng(9)
    beats, fins, want = head(rng, 2 * ROWS, ROWS)
    await reset(dut, clock=True)
    sink = StreamSink(dut, "out", stall=0.5, rng=random.Random(3))
    task = sink.start()
    await drive(dut, beats, fins, random.Random(4), 0.1, stop=len(beats) + 10)
    task.cancel()
    await run(dut, [(beats, fins, want)], gap=0.2, stall=0.3, seed=5, clock=False)


@cocotb.test(timeout_time=5, timeout_unit="ms")
async def test_bad_weight(dut):
    """A finish request with a weight below 255: ``bad_weight`` goes high and stays, the
    row's beats still come out (their values are meaningless), nothing hangs."""
    await reset(dut, clock=True)
    dut.out__ready.value = 1
    dut.fin__payload.value = finish_requests(CFG, [0])[0]
    dut.fin__valid.value = 1
    await RisingEdge(dut.clk)
    while not int(dut.fin__ready.value):
        await RisingEdge(dut.clk)
    dut.fin__valid.value = 0
    seen = 0
    for _ in range(100):
        await RisingEdge(dut.clk)
        seen += int(dut.out__valid.value)
    assert seen == CHUNKS and int(dut.bad_weight.value) == 1
