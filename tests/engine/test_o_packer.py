"""``OPacker`` in the Amaranth simulator: O's row beats (``vector_lanes`` int16 channels, the
chunks past head_dim zero) -> 64-bit memory beats of O as ``rows x head_dim`` int16 without
gaps, exactly (rows straddling beats, a zero-padded last beat, chunks past head_dim dropped),
several Os back to back, random gaps and back-pressure, and four values per cycle."""

from __future__ import annotations

import numpy as np
import pytest

from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.o_packer import OPacker, o_beats
from stream_harness import pack, run_stream


def o_row_beats(o, lanes, max_dim, layout):
    """BlockAttention's out beats of O (rows x channels): per row ceil(max_dim / lanes)
    chunks, channels past O's zero."""
    rows, ch = o.shape
    chunks = -(-max_dim // lanes)
    padded = np.zeros((rows, chunks * lanes), np.int64)
    padded[:, :ch] = o
    beats = []
    for r in range(rows):
        for c in range(chunks):
            values = [int(v) & 0xFFFF for v in padded[r, c * lanes:(c + 1) * lanes]]
            beats.append(pack(layout, values=sum(v << (16 * j) for j, v in enumerate(values)),
                              row=r, chunk=c, last=int(c == chunks - 1)))
    return beats


def memory_beats(o):
    """O row-major as int16, four per 64-bit beat, the last beat zero-padded."""
    flat = [int(v) & 0xFFFF for v in o.reshape(-1)]
    flat += [0] * (-len(flat) % 4)
    return [sum(flat[i + j] << (16 * j) for j in range(4)) for i in range(0, len(flat), 4)]


@pytest.mark.parametrize("lanes,max_dim,rows,channels", [
    (16, 32, 5, 32), (16, 32, 3, 7), (16, 48, 4, 20), (4, 16, 6, 13), (8, 8, 2, 1),
    (5, 24, 3, 11)])
def test_o_beats_are_memory_beats(lanes, max_dim, rows, channels):
    config = KaleidoConfig(vector_lanes=lanes, vector_max_row=lanes * 16,
                           engine_max_head_dim=max_dim, engine_max_tokens=8)
    rng = np.random.default_rng(lanes * 100 + channels)
    dut = OPacker(config)
    layout = dut.i.payload.shape()
    os_ = [rng.integers(-1 << 15, 1 << 15, (rows, channels)) for _ in range(3)]
    inputs = [b for o in os_ for b in o_row_beats(o, lanes, max_dim, layout)]
    want = [b for o in os_ for b in memory_beats(o)]
    assert len(want) == 3 * o_beats(rows, channels)
    run = run_stream(dut, inputs, len(want), gap=0.3, stall=0.4, seed=channels,
                     cfg={"rows": rows, "channels": channels})
    assert run.out_items == want


def test_four_values_a_cycle():
    """Without gaps or back-pressure a row of 64 channels in beats of 16 leaves in 16 cycles
    (plus the pipeline's two)."""
    config = KaleidoConfig(vector_lanes=16, engine_max_head_dim=64, engine_max_tokens=8)
    dut = OPacker(config)
    o = np.arange(8 * 64).reshape(8, 64) - 200
    inputs = o_row_beats(o, 16, 64, dut.i.payload.shape())
    run = run_stream(dut, inputs, 128, cfg={"rows": 8, "channels": 64})
    assert run.out_items == memory_beats(o)
    assert run.out_cycles[-1] - run.out_cycles[0] == 127
