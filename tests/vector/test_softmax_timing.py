"""The vector unit's timing in Amaranth's simulator against the row-stream model that the
head-level cycle model (``golden.engine.head``) builds on: a lone row's latency exactly, the
period of a stream of equal rows within ``row_period``, and P bit-exact on the way."""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.hdl import Const

from golden.engine.head import RECIPROCAL_CYCLES, ROW_LATENCY_BASE, row_period
from golden.vector import softmax_int
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.vector.layouts import prob_beat_layout, score_beat_layout
from kaleido_hw.vector.softmax_unit import SoftmaxUnit
from tests.stream_harness import run_stream

MULT, SHIFT = 40_000, 30


def _stream(cfg: KaleidoConfig, rows):
    """Run ``rows`` (int arrays of a multiple of ``vector_lanes`` scores) back to back without
    gaps or back-pressure; return (P per row, first input cycle, last output cycle per row)."""
    L = cfg.vector_lanes
    s_layout, p_layout = score_beat_layout(cfg), prob_beat_layout(cfg)
    beats = []
    for row in rows:
        k = len(row) // L
        for b in range(k):
            beats.append(Const.cast(s_layout.const({
                "scores": [int(x) for x in row[b * L:(b + 1) * L]], "tail": L - 1,
                "last": int(b == k - 1), "mult": MULT, "shift": SHIFT})).value)
    run = run_stream(SoftmaxUnit(cfg), beats, len(beats), ports=("s", "p"))
    out = [p_layout.from_bits(w) for w in run.out_items]
    got, ends, at = [], [], 0
    for row in rows:
        k = len(row) // L
        got.append([int(o.p[i]) for o in out[at:at + k] for i in range(L)])
        assert int(out[at + k - 1].last) == 1
        ends.append(run.out_cycles[at + k - 1])
        at += k
    return got, run.in_cycles[0], ends


@pytest.mark.parametrize("beats", [1, 4, 16])
def test_lone_row_latency(beats):
    cfg = KaleidoConfig(vector_lanes=4, vector_max_row=64, vector_row_buffers=2)
    row = np.random.default_rng(beats).integers(-3000, 3000, beats * 4)
    got, first_in, ends = _stream(cfg, [row])
    assert got[0] == softmax_int(row.astype(np.int64), MULT, SHIFT).tolist()
    assert ends[0] - first_in == 3 * beats + ROW_LATENCY_BASE


@pytest.mark.parametrize("beats, buffers", [(1, 2), (4, 2), (16, 2), (16, 5), (2, 5)])
def test_row_stream_period(beats, buffers):
    cfg = KaleidoConfig(vector_lanes=4, vector_max_row=64, vector_row_buffers=buffers)
    rng = np.random.default_rng(beats * 10 + buffers)
    rows = [rng.integers(-3000, 3000, beats * 4) for _ in range(2 * buffers + 6)]
    got, _, ends = _stream(cfg, rows)
    for row, p in zip(rows, got):
        assert p == softmax_int(row.astype(np.int64), MULT, SHIFT).tolist()
    steady = ends[buffers + 1:]
    period = (steady[-1] - steady[0]) / (len(steady) - 1)
    assert max(beats, RECIPROCAL_CYCLES) <= period <= row_period(beats, buffers)
