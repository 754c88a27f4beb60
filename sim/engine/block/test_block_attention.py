"""cocotb bench of block_attention (``kaleido_hw/engine/block_attention.py``): the blocks of a
head, as the interpreter's COMPUTE kind 2 runs them, one run each: V of the key box written
through ``v_in``, ``start`` with ``first`` / ``last``, the block's rows of S streamed in;
after a query box's last block every ``out`` beat must equal the box's O from the
interpreter (``golden.engine.program``, section 15 of ``docs/numerics.md``), each exactly
once; P @ V's counters but its cycles equal the block's ``pv_counters``; no error bit.

Runs: without back-pressure; with random gaps on S and stalls on O (``KALEIDO_SEEDS``
seeds); a reset in the middle of a block followed by a clean head. The head: a grid of
two query boxes of three key blocks with padding keys (boxes of ``engine_max_tokens`` tokens
at the variant's size), V reused along x.

``make -C sim/engine/block [SIM=icarus]`` builds the default configuration on demand
(four 4 x 4 arrays, 64-token boxes; slow); ``KALEIDO_MANIFEST`` names the manifest of a
smaller variant (``tests/engine/test_block_attention_sim.py``).
"""

from __future__ import annotations

import random

import cocotb
from block_attention_data import attention_blocks, run_settings
from cocotb.triggers import RisingEdge
from simlib import StreamSink, idle_and_reset, bench_config, seeds_requested

from golden import ChannelGroups
from kaleido_hw.engine.pv_engine import COUNTERS
from kaleido_hw.vector.layouts import output_beat_layout


CFG = bench_config()
OUT_LAYOUT = output_beat_layout(CFG)


def head(seed: int = 0):
    """The interpreter's head and its blocks: 16 channels in three groups (or the
    build's head_dim if smaller), a grid of two query boxes of three key boxes along x
    with padding."""
    d = min(16, CFG.engine_max_head_dim)
    groups = ChannelGroups.from_sizes(d - 2 * (d // 3), d // 3, d // 3)
    n = CFG.engine_max_tokens
    grid = (1, 2, -(-5 * n // 4))              # boxes of 1 x 2 x (n/2): 3 along x, padded
    return attention_blocks(CFG, grid, groups, seed, box=(1, 2, n // 2), v_dir=2)


async def reset(dut, clock: bool) -> None:
    await idle_and_reset(dut, ("s__valid", "v_in__valid", "start", "out__ready"), clock)


async def run_block(dut, case, rng: random.Random, gap: float, stop=None) -> None:
    """V, start, S with random gaps; wait for done (``stop``: give up after that many S
    beats, for the reset test)."""
    dut.v_in__valid.value = 1
    for word in case.v_words:
        dut.v_in__payload.value = word
        await RisingEdge(dut.clk)
        while not int(dut.v_in__ready.value):
            await RisingEdge(dut.clk)
    dut.v_in__valid.value = 0
    dut.first.value, dut.last.value, dut.start.value = int(case.first), int(case.last), 1
    await RisingEdge(dut.clk)
    dut.start.value = 0
    k, on, cycles = 0, False, 0
    while True:
        if not on and k < len(case.s_beats) and rng.random() >= gap:
            on = True
            dut.s__payload.value = case.s_beats[k]
        dut.s__valid.value = int(on)
        await RisingEdge(dut.clk)
        if on and int(dut.s__ready.value):
            k += 1
            on = False
            if stop is not None and k >= stop:
                dut.s__valid.value = 0
                return
        cycles += 1
        assert cycles < 400_000, f"hang: {k}/{len(case.s_beats)} S beats in"
        if k == len(case.s_beats) and int(dut.done.value):
            break
    dut.s__valid.value = 0


async def run(dut, run_, cases, *, gap=0.0, stall=0.0, seed=0, clock=True):
    rng = random.Random(seed)
    await reset(dut, clock)
    for name, value in run_settings(run_).items():
        getattr(dut, f"cfg__{name}").value = value
    sink = StreamSink(dut, "out", stall=stall, rng=random.Random(rng.random()))
    task = sink.start()
    for i, case in enumerate(cases):
        before = len(sink.items)
        await run_block(dut, case, rng, gap)
        got = [int(x) for x in sink.items[before:]]
        assert len(got) == len(case.out_beats), f"block {i}: {len(got)} out beats"
        for j, (g, e) in enumerate(zip(got, case.out_beats)):
            assert g == e, (f"block {i} beat {j}: got {OUT_LAYOUT.from_bits(g)}, "
                            f"want {OUT_LAYOUT.from_bits(e)}")
        for field in ("p", "softmax", "pv", "weight"):
            assert int(getattr(dut, f"error__{field}").value) == 0, f"block {i}: {field}"
        want = case.pv
        cnt = {n: int(getattr(dut, f"cnt__pv__{n}").value) for n in COUNTERS}
        assert cnt["busy_pe_cycles"] == want.busy_pe_cycles, f"block {i}"
        assert [cnt["issued_a"], cnt["issued_f1"], cnt["issued_f2"]] == list(want.issued)
        assert (cnt["bubbles"], cnt["blocks"], cnt["steps"]) == \
            (want.bubbles, want.blocks, want.steps)
        assert cnt["cycles"] >= want.cycles
    for _ in range(40):             # anything extra would be a duplicate
        await RisingEdge(dut.clk)
    task.cancel()
    assert len(sink.items) == sum(len(c.out_beats) for c in cases)


@cocotb.test(timeout_time=200, timeout_unit="ms")
async def test_head_no_backpressure(dut):
    """Every block of the head, no gaps, no stalls."""
    await run(dut, *head(1))


@cocotb.test(timeout_time=2000, timeout_unit="ms")
async def test_head_random_backpressure(dut):
    """Random gaps on S and stalls on O (a mix per seed)."""
    for n in range(seeds_requested()):
        gap, stall = [(0.3, 0.4), (0.0, 0.8), (0.7, 0.0), (0.5, 0.6)][n % 4]
        await run(dut, *head(2 + n), gap=gap, stall=stall, seed=n, clock=n == 0)


@cocotb.test(timeout_time=400, timeout_unit="ms")
async def test_reset_mid_block(dut):
    """A reset while a block's S streams in and P @ V runs, then a clean head."""
    run_, cases = head(3)
    await reset(dut, clock=True)
    for name, value in run_settings(run_).items():
        getattr(dut, f"cfg__{name}").value = value
    dut.out__ready.value = 1
    await run_block(dut, cases[0], random.Random(1), 0.2, stop=len(cases[0].s_beats) // 2)
    for _ in range(7):
        await RisingEdge(dut.clk)
    await run(dut, run_, cases, gap=0.2, stall=0.3, seed=5, clock=False)
