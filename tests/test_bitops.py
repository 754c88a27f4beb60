"""The bit helpers (kaleido_hw.bitops) against Python integers in the Amaranth simulator:
every width class (1, odd, power of two, the engine's 128), zero, all ones, single bits and
random words; the rank select also on words with exactly count - 1, count and count + 1 bits
set (where the taken bits end)."""

from __future__ import annotations

import random

import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from kaleido_hw.bitops import bits_for, lowest_set, popcount, rank_select


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


def _lowest_bits(x: int, count: int) -> tuple[list[int], int]:
    """Python reference of rank_select: peel the lowest set bit count times."""
    idx = []
    for _ in range(count):
        idx.append((x & -x).bit_length() - 1 if x else 0)
        x &= x - 1
    return idx, x


@pytest.mark.parametrize("overflow", [False, True])
@pytest.mark.parametrize("width,count,block", [(1, 1, 8), (5, 3, 8), (16, 16, 4), (37, 5, 8),
                                               (128, 16, 8), (128, 3, 16)])
def test_rank_select(width, count, block, overflow):
    m = Module()
    value = Signal(width)
    out = rank_select(m, value, count, "x", block=block, overflow=overflow)
    indices, rest, taken = out[:3]
    rng = random.Random(width * 100 + count)
    words = _words(width, rng)
    for k in (count - 1, count, count + 1):           # the edge of the taken bits
        if 0 <= k <= width:
            words += [sum(1 << p for p in rng.sample(range(width), k)) for _ in range(20)]

    async def bench(ctx):
        for x in words:
            ctx.set(value, x)
            idx, left = _lowest_bits(x, count)
            assert [ctx.get(i) for i in indices] == idx, hex(x)
            assert ctx.get(rest) == left, hex(x)
            assert ctx.get(taken) == min(bin(x).count("1"), count), hex(x)
            if overflow:
                assert ctx.get(out[3]) == (bin(x).count("1") > count), hex(x)

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
