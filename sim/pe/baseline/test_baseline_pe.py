"""cocotb bench of ``baseline_pe`` (plain 8-bit MAC) against ``golden.pe.model``.

    make -C sim/pe/baseline SIM=verilator      # or SIM=icarus
"""

import random

import cocotb
from pe_cocotb import PEHarness, bench_seed
from pe_stimulus import baseline_random_inputs, random_operand
from simlib import seeds_requested

from golden.pe.model import BaselineCtrl, BaselineInputs


@cocotb.test()
async def random_traffic(dut):
    """10,000 cycles per seed of random acc/clear/drain words and extreme operands."""
    h = PEHarness(dut, baseline=True)
    await h.start()
    for s in range(seeds_requested()):
        await h.run(baseline_random_inputs(random.Random(bench_seed(s)), 10_000, h.acc_width))


@cocotb.test()
async def dot_product_and_reset(dut):
    """Dot products drain exactly; a reset mid-accumulation zeroes every register."""
    h = PEHarness(dut, baseline=True)
    await h.start()
    rng = random.Random(bench_seed(1))
    for n in (1, 17, 128):
        a = [random_operand(rng) for _ in range(n)]
        b = [random_operand(rng) for _ in range(n)]
        inputs = [BaselineInputs(a0=x, b=y, ctrl=BaselineCtrl(acc=1, clear=int(i == 0)))
                  for i, (x, y) in enumerate(zip(a, b))]
        inputs.append(BaselineInputs(ctrl=BaselineCtrl(drain=1)))
        assert await h.run(inputs) == [sum(x * y for x, y in zip(a, b))]
    await h.run([BaselineInputs(a0=-128, b=-128, ctrl=BaselineCtrl(acc=1, clear=int(i == 0)))
                 for i in range(5)])
    assert h.read()["r0"] == 5 * 16384
    got = await h.step(BaselineInputs(rst=1, a0=-128, b=-128, ctrl=BaselineCtrl(acc=1)))
    assert not any(got.values()), f"not all outputs reset: {got}"
