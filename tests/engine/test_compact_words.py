"""The sequencer's compaction network (:func:`kaleido_hw.engine.array_sequencer.compact_words`)
against a byte pick per output, on random chunks: byte j = byte ``chan[j]`` of the word for
the chunk's channels, byte 0 past its size."""

from __future__ import annotations

import random

import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from kaleido_hw.bitops import bits_for
from kaleido_hw.engine.array_sequencer import compact_words


@pytest.mark.parametrize("D, W", [pytest.param(128, 16, marks=pytest.mark.full_set),
                                  (16, 4), pytest.param(48, 16, marks=pytest.mark.full_set),
                                  (20, 8)])
def test_compact_words(D, W):
    m = Module()
    a, b = Signal(8 * D), Signal(8 * D)
    qa, qb = Signal(8 * W), Signal(8 * W)
    chan = [Signal(bits_for(D - 1), name=f"chan{j}") for j in range(W)]
    ok = Signal(W)
    compact_words(m, [(a, qa), (b, qb)], chan, ok, D)
    rng = random.Random(D * 100 + W)
    cases = []
    for _ in range(300):
        size = rng.choice([W, W, rng.randint(0, W)])
        chans = sorted(rng.sample(range(D), size)) + [0] * (W - size)
        cases.append((size, chans, rng.getrandbits(8 * D), rng.getrandbits(8 * D)))

    async def bench(ctx):
        for size, chans, x, y in cases:
            for j in range(W):
                ctx.set(chan[j], chans[j])
            ctx.set(ok, (1 << size) - 1)
            ctx.set(a, x)
            ctx.set(b, y)
            for word, out in ((x, qa), (y, qb)):
                want = 0
                for j in range(W):
                    want |= ((word >> (8 * chans[j])) & 0xFF) << (8 * j)
                assert ctx.get(out) == want, (size, chans)

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
