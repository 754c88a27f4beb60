"""The head-level cycle model (``golden.engine.head``): the vector unit's row stream, the
row-block pipeline of S, softmax and P @ V on shared arrays, and a whole small head against
the stage models it combines."""

from __future__ import annotations

import numpy as np
import pytest

from golden import ChannelGroups, attention_scores
from golden.engine.head import (RECIPROCAL_CYCLES, ROW_HOLD_BASE, ROW_LATENCY_BASE, head_cycles,
                                pipeline_cycles, softmax_cycles)
from golden.engine.model import EngineParams, engine_counters
from golden.engine.pv import pv_counters
from golden.vector import softmax_int, softmax_scale
from golden.workloads import make_qkv


def test_softmax_cycles_follow_the_row_bound():
    # 256 scores on 16 lanes: 16 beats, one beat per cycle at 5 buffers (3*16+28 = 76 < 80)
    assert softmax_cycles(10, 256, 16, 5) == 9 * 16 + 3 * 16 + ROW_LATENCY_BASE
    # short rows: the reciprocal's 14 cycles per row
    assert softmax_cycles(4, 16, 16, 5) == 3 * RECIPROCAL_CYCLES + 3 + ROW_LATENCY_BASE
    # few buffers: (3k + 28) / NB per row
    assert softmax_cycles(3, 64, 16, 2) == 2 * (3 * 4 + ROW_HOLD_BASE) // 2 + 3 * 4 + ROW_LATENCY_BASE
    assert softmax_cycles(0, 64) == 0
    with pytest.raises(ValueError, match="lanes must be an integer"):
        softmax_cycles(1, 16, 0)


def test_pipeline_hides_a_fast_vector_unit_and_shows_a_slow_one():
    # one block: nothing overlaps
    assert pipeline_cycles(100, 30, 50, 1) == 180
    # a vector unit faster than S per block is hidden entirely
    assert pipeline_cycles(800, 80, 400, 8) == 1200
    # a vector unit slower than the arrays: the arrays wait for it
    slow = pipeline_cycles(80, 800, 40, 8)
    assert slow > 80 + 40 and slow >= 800
    with pytest.raises(ValueError, match="blocks must be an integer"):
        pipeline_cycles(1, 1, 1, 0)


@pytest.mark.parametrize("variant, v_reuse", [("dense", False), ("full", True), ("pe", True)])
def test_head_cycles_combine_the_stage_models(variant, v_reuse):
    qkv = make_qkv("hunyuanvideo", "2x4x8", seed=1)
    q, k, v = qkv
    groups = ChannelGroups.from_preset("hunyuanvideo")
    s = (q.astype(np.int64) @ k.astype(np.int64).T if variant == "dense"
         else attention_scores(q, k, qkv.grid, groups))
    p = softmax_int(s, *softmax_scale(qkv.scale))
    params = EngineParams(arrays=2)
    c = head_cycles(q, k, v, p, qkv.grid, groups, params, variant, v_reuse, block_rows=16)
    assert c.s == engine_counters(q, k, qkv.grid, groups, params, variant).cycles
    assert c.pv == pv_counters(p, v, qkv.grid, 0, 2, 4, 4, 2, reuse=v_reuse).cycles
    assert c.softmax == softmax_cycles(64, 64)
    assert c.row_blocks == 4
    assert c.total == pipeline_cycles(c.s, c.softmax, c.pv, 4) >= c.s + c.pv
    assert c.as_dict()["exposed_softmax"] == c.total - c.s - c.pv
