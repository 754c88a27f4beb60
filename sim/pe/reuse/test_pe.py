"""cocotb bench of ``kaleido_pe`` (ReusePE) against ``golden.pe.model``, every output and
register every cycle.

    make -C sim/pe/reuse SIM=verilator      # or SIM=icarus; KALEIDO_SEEDS=N for N random segments

Random traffic (>= 10,000 cycles per seed: every op, split, part, clear, move and drain
encoding, extreme operands, interleaved with directed tile quads and linear windows that
switch passes back to back), a directed test per paper mode (schedule-level words with
follower codes, resolved per PE as the arrays' decoders do; drained tile values equal exact
dot products), and a reset in the middle of an accumulation.
"""

import random

import cocotb
from pe_cocotb import PEHarness, bench_seed
from pe_stimulus import (QUAD_VARIANTS, CodedStep, dense_stimulus, linear_stimulus, quad_stimulus,
                         random_inputs, resolve)
from simlib import seeds_requested

from golden.pe.model import Code, Op, PEInputs
from golden.pe.modes import quad_passes


RANDOM_CYCLES = 10_000


@cocotb.test()
async def random_traffic(dut):
    """>= 10,000 cycles per seed of random legal words and directed segments."""
    h = PEHarness(dut)
    await h.start()
    for s in range(seeds_requested()):
        rng = random.Random(bench_seed(s))
        inputs = random_inputs(rng, RANDOM_CYCLES, h.acc_width)
        await h.run(inputs)
        ops = {x.ctrl.op for x in inputs}
        moves = {x.ctrl.move for x in inputs}
        assert len(ops) == 4 and len(moves) == 4, "the stimulus must cover every op and move"
    dut._log.info("random_traffic: %d cycles equal to the model", h.cycle)


@cocotb.test()
async def mode0_tile0(dut):
    """Mode 0: R0 = A.a, R1/R2 = what tiles 1/2 reuse (FULL: whole product, HALF: high part)."""
    h = PEHarness(dut)
    await h.start()
    rng = random.Random(bench_seed(100))
    word = quad_passes()[0].word
    d = 32
    A = [rng.choice((-128, 127, rng.randint(-128, 127))) for _ in range(d)]
    a = [rng.choice((-128, 127, rng.randint(-128, 127))) for _ in range(d)]
    q = [rng.randrange(3) for _ in range(d)]
    k = [rng.randrange(3) for _ in range(d)]
    inputs = [CodedStep(a0=x, b=y, qc0=qc, kc0=kc, ctrl=word.with_(clear=0b111) if i == 0 else word)
              for i, (x, y, qc, kc) in enumerate(zip(A, a, q, k))]
    await h.run(resolve(inputs))
    r1 = sum(x * y if kc == Code.FULL else 16 * x * (y >> 4) if kc == Code.HALF else 0
             for x, y, kc in zip(A, a, k))
    r2 = sum(x * y if qc == Code.FULL else 16 * (x >> 4) * y
             if (qc == Code.HALF and kc != Code.HALF) else 0 for x, y, qc, kc in zip(A, a, q, k))
    got = h.read()
    assert (got["r0"], got["r1"], got["r2"]) == (sum(x * y for x, y in zip(A, a)), r1, r2)


@cocotb.test()
async def modes_0_1_3_quads(dut):
    """Modes 0, 1, 3: whole tile quads (every order/split variant) back to back, exact."""
    h = PEHarness(dut)
    await h.start()
    rng = random.Random(bench_seed(200))
    for n, variant in enumerate(QUAD_VARIANTS * 2):
        inputs, expected = quad_stimulus(rng, 16, *variant, skip_idle=n % 2 == 1,
                                         weights=((1, 1, 1), (3, 3, 1))[n % 2])
        assert await h.run(resolve(inputs)) == expected, variant


@cocotb.test()
async def mode2_low_pair(dut):
    """Mode 2 (and Mode 3 with HALF columns): merged HALF channels in LOW_PAIR steps, exact."""
    h = PEHarness(dut)
    await h.start()
    rng = random.Random(bench_seed(300))
    pairs = 0
    for order in ("t1-first", "t2-first") * 4:
        inputs, expected = quad_stimulus(rng, 24, order, skip_idle=True, pair=True,
                                         weights=(1, 4, 1))
        pairs += sum(1 for x in inputs if x.ctrl.op == Op.LOW_PAIR)
        assert await h.run(resolve(inputs)) == expected, order
    assert pairs >= 20


@cocotb.test()
async def linear_and_dense_modes(dut):
    """Linear-layer windows of 2 and 3 tokens (R0 anchor, R1/R2 followers) and reuse off."""
    h = PEHarness(dut)
    await h.start()
    rng = random.Random(bench_seed(400))
    for window in (2, 3, 2, 3):
        inputs, expected = linear_stimulus(rng, 32, window, weights=(1, 3, 1))
        assert await h.run(resolve(inputs)) == expected, window
    inputs, expected = dense_stimulus(rng, 64)
    assert await h.run(resolve(inputs)) == expected


@cocotb.test()
async def reset_mid_accumulation(dut):
    """A reset while R0-R2 hold partial sums returns every register and output to 0."""
    h = PEHarness(dut)
    await h.start()
    rng = random.Random(bench_seed(500))
    inputs, expected = quad_stimulus(rng, 16, weights=(1, 1, 3))
    inputs = resolve(inputs)
    cut = len(inputs) // 2
    await h.run(inputs[:cut])
    before = h.read()
    assert before["r0"] and before["r1"] and before["r2"], "registers should hold partial sums"
    got = await h.step(PEInputs(rst=1, a0=-128, b=-128, ctrl=inputs[cut].ctrl, drain_valid=1))
    assert not any(got.values()), f"not all outputs reset: {got}"
    inputs, expected = quad_stimulus(rng, 16)   # and it computes correctly afterwards
    assert await h.run(resolve(inputs)) == expected
