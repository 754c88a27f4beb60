"""``O = P_q @ V_eff`` in integers, its merged V-reuse form, and the quality of the integer
attention pipeline (``docs/numerics.md`` section 14)."""

from __future__ import annotations

import numpy as np
import pytest

import golden
from golden.vector import attention_int, integer_attention_quality, pv_merged, pv_ops


def test_attention_int_is_exact():
    rng = np.random.default_rng(0)
    p = rng.integers(0, 256, size=(9, 300))
    v = rng.integers(-128, 128, size=(300, 5))
    assert np.array_equal(attention_int(p, v), p.astype(np.int64) @ v.astype(np.int64))


@pytest.mark.parametrize("window, directions", [(2, 0), (3, 2), (2, (0, 1, 2, 0))])
def test_merged_equals_p_times_v_eff(window, directions):
    qkv = golden.make_qkv("cogvideox-5b", "4x6x6", seed=1)
    grid = qkv.grid
    v = qkv[2][:, :4]
    rng = np.random.default_rng(2)
    p = rng.integers(0, 256, size=(5, grid.n))
    masks = golden.window_masks(v, grid, directions, window)
    v_eff = golden.window_effective_operand(v, masks, grid, directions, window)
    assert (masks == golden.FULL).any()
    assert np.array_equal(pv_merged(p, v, grid, directions, window), attention_int(p, v_eff))
    ops = pv_ops(v, grid, 5, directions, window)
    assert 0 < ops["reduction"] < 1


def test_errors():
    with pytest.raises(ValueError, match=r"p values must lie in \[0, 255\]"):
        attention_int([[256]], [[1]])
    with pytest.raises(ValueError, match=r"v must have shape \(keys, channels\) with keys = 2"):
        attention_int([[1, 2]], [[1]])
    with pytest.raises(ValueError, match=r"p must be a 2-D integer array"):
        attention_int([1.0], [[1]])


@pytest.mark.parametrize("reuse_v", [False, True])
def test_quality_of_integer_pipeline(reuse_v):
    qkv = golden.make_qkv("hunyuanvideo", "2x4x8", seed=0)
    q, k, v = qkv
    r = integer_attention_quality(q, k, v, qkv.grid, golden.ChannelGroups.from_preset(
        "hunyuanvideo"), qkv.scale, reuse_v=reuse_v)
    assert r["merged_equal"]
    assert (r["v_reduction"] > 0) == reuse_v
    for key in ("int_exact", "int_reuse", "float_reuse", "int_vs_float_reuse"):
        assert r[key]["cosine"] > 0.99, (key, r[key])
    assert r["int_exact"]["psnr"] > 30


@pytest.mark.parametrize("reuse_v", [False, True])
def test_float_reuse_path_is_golden_quality(reuse_v):
    """The float reuse column is exactly what golden.attention_quality reports as reuse."""
    qkv = golden.make_qkv("wan2.1", "2x4x8", seed=3)
    q, k, v = qkv
    groups = golden.ChannelGroups.from_preset("wan2.1")
    ours = integer_attention_quality(q, k, v, qkv.grid, groups, qkv.scale, reuse_v=reuse_v)
    theirs = golden.attention_quality(q, k, v, qkv.grid, groups, qkv.scale, reuse_v=reuse_v)
    assert ours["float_reuse"]["mse"] == pytest.approx(theirs["reuse"]["mse"], rel=1e-9)
    assert ours["float_reuse"]["cosine"] == pytest.approx(theirs["reuse"]["cosine"], rel=1e-12)
    assert ours["v_reduction"] == theirs["v_reduction"]
