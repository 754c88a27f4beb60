"""Synthetic workloads (golden.workloads): deterministic, correctly shaped, realistic reuse."""

import math

import numpy as np
import pytest

from golden import (GRIDS, PRESETS, ChannelGroups, VideoGrid, code_counts, make_activations,
                    make_qkv, oracle_from_counts, reuse_masks, window_masks)
from golden.workloads import apply_rope, grid_named, latent_field


def test_named_grids():
    assert {k: v.shape for k, v in GRIDS.items() if "-" in k or k == "cogvideox"} == {
        "hunyuanvideo-720p": (33, 45, 80), "hunyuanvideo-480p": (33, 30, 45),
        "wan-480p": (21, 30, 52), "cogvideox": (13, 30, 45)}
    assert GRIDS["hunyuanvideo-720p"].n == 118_800
    assert grid_named("tiny") == VideoGrid(2, 4, 4) and grid_named("3x4x5") == VideoGrid(3, 4, 5)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_shapes_dtypes_and_determinism(preset):
    a = make_qkv(preset, "small", seed=5)
    q, k, v = a
    d = PRESETS[preset].head_dim
    for x in (q, k, v):
        assert x.shape == (256, d) and x.dtype == np.int8
        assert np.abs(x.astype(int)).max() == 127        # symmetric per-tensor quantization
    assert a.scale > 0 and len(a.scales) == 3 and a.grid == VideoGrid(4, 8, 8)
    b = make_qkv(preset, VideoGrid(4, 8, 8), seed=5)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    c = make_qkv(preset, "small", seed=6)
    assert not np.array_equal(a.q, c.q)


def test_static_video_repeats_frames():
    """No motion and no new content: every frame is the same field, so the frames of V (which
    has no RoPE) agree up to one LSB of float32 rounding."""
    w = make_qkv("wan2.1", "4x4x4", seed=1, motion=0.0, noise=0.0, grain=0.0)
    v = w.v.reshape(4, 16, -1)
    assert all(np.abs(v[t].astype(int) - v[0]).max() <= 1 for t in range(4))


def test_motion_moves_content():
    f = latent_field("4x16x32", channels=3, seed=2, motion=2.0, noise=0.0, grain=0.0, smooth=2.0)
    np.testing.assert_allclose(f[1], np.roll(f[0], 2, axis=1), atol=1e-5)
    f = latent_field("4x16x32", channels=3, seed=2, motion=(1.0, 0.0), noise=0.0, grain=0.0)
    np.testing.assert_allclose(f[3], np.roll(f[0], 3, axis=0), atol=1e-5)


def reference_rope(x, grid, preset):
    """Per-token, per-pair rotation, written from the definition."""
    p = PRESETS[preset]
    out = x.astype(np.float64).copy()
    first = 0
    for axis, size in enumerate((p.t, p.h, p.w)):
        for n, pos in enumerate(grid.coords()[:, axis]):
            for i in range(size // 2):
                c1, c2 = ((first + 2 * i, first + 2 * i + 1) if p.pair_layout == "adjacent"
                          else (first + i, first + size // 2 + i))
                ang = pos * p.theta ** (-2 * i / size)
                a, b = x[n, c1], x[n, c2]
                out[n, c1] = a * math.cos(ang) - b * math.sin(ang)
                out[n, c2] = a * math.sin(ang) + b * math.cos(ang)
        first += size
    return out


@pytest.mark.parametrize("preset", ["hunyuanvideo", "opensora-plan-1.3"])
def test_rope_matches_definition(preset):
    grid = VideoGrid(2, 3, 3)
    x = np.random.default_rng(0).standard_normal((grid.n, PRESETS[preset].head_dim))
    np.testing.assert_allclose(apply_rope(x, grid, preset), reference_rope(x, grid, preset),
                               atol=1e-12)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_default_reduction_is_realistic(preset):
    """The default workload's oracle QK^T reduction lies in 30..65% (the pairing caps it at
    75%), and every group finds reuse."""
    w = make_qkv(preset, "8x16x16", seed=0)
    g = ChannelGroups.from_preset(preset)
    cq = code_counts(reuse_masks(w.q, w.grid, g))
    ck = code_counts(reuse_masks(w.k, w.grid, g))
    assert 0.30 <= oracle_from_counts(cq, ck)["reduction"] <= 0.65
    for group in range(3):
        ch = g.channels(group)
        assert oracle_from_counts(cq[:, ch], ck[:, ch])["reduction"] > 0.25


def test_fast_motion_reduces_temporal_reuse():
    """The y-group reuses along t: faster motion leaves less to reuse there."""
    g = ChannelGroups.from_preset("hunyuanvideo")
    ch = g.channels(1)

    def y_reduction(motion):
        w = make_qkv("hunyuanvideo", "8x16x16", seed=0, motion=motion)
        cq = code_counts(reuse_masks(w.q, w.grid, g))[:, ch]
        ck = code_counts(reuse_masks(w.k, w.grid, g))[:, ch]
        return oracle_from_counts(cq, ck)["reduction"]

    slow, fast = y_reduction(0.25), y_reduction(3.0)
    assert slow > fast + 0.1


def test_activations():
    x, s = make_activations("4x8x8", 48, seed=1)
    assert x.shape == (256, 48) and x.dtype == np.int8 and s > 0
    m = window_masks(x, "4x8x8")
    assert 0.1 < (m == 0).mean() < 0.5


@pytest.mark.parametrize("call,message", [
    (lambda: make_qkv("sora", "tiny"), "preset must be one of cogvideox-5b, hunyuanvideo, longcat, opensora-plan-1.3, wan2.1, got 'sora'"),
    (lambda: make_qkv("wan2.1", "huge"), "grid must be TxHxW (e.g. 8x16x16) or one of tiny, small, medium"),
    (lambda: make_qkv("wan2.1", "tiny", noise=1.5), "noise must be a number in [0.0, 1.0], got 1.5"),
    (lambda: make_qkv("wan2.1", "tiny", motion="fast"), "motion must be a number in [-64, 64], got 'fast'"),
    (lambda: make_qkv("wan2.1", "tiny", logit_std=0), "logit_std must be a number in (0.0, 100.0], got 0.0"),
    (lambda: make_qkv("wan2.1", "tiny", seed=-1), "seed must be an integer in [0, 9223372036854775807], got -1"),
    (lambda: make_activations("tiny", 0), "features must be an integer in [1, 65536], got 0"),
])
def test_bad_workload_input(call, message):
    with pytest.raises(ValueError) as err:
        call()
    assert message in str(err.value)
