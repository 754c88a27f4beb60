"""The bit helpers (kaleido_hw.bitops) against Python integers in the Amaranth simulator:
every width class (1, odd, power of two, the engine's 128), zero, all ones, single bits and
random words."""

from __future__ import annotations

import random

import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from kaleido_hw.bitops import bits_for, lowest_set, popcount


def _words(width: int, rng: random.Random) -> list[int]:
    return ([0, (1 << width) - 1] + [1 << k for k in range(width)]
            + [rng.getrandbits(width) for _ in range(100)])


@pytest.mark.parametrize("width", [1, 2, 3, 5, 16, 128])
def test_lowest_set_and_popcount(width):
    m = Module()
    value = Signal(width)
    idx, any_ = lowest_set(m, value, "x")
    count = Signal(bits_for(width))
    m.d.comb += count.eq(popcount(value))
    words = _words(width, random.Random(width))

    async def bench(ctx):
        for x in words:
            ctx.set(value, x)
            lowest = (x & -x).bit_length() - 1 if x else 0
            assert (ctx.get(idx), ctx.get(any_), ctx.get(count)) == \
                (lowest, int(x != 0), bin(x).count("1")), hex(x)

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
