"""Quality figures (docs/numerics.md, "Quality"): float64 attention output, exact vs reused,
and the two skip baselines at the same saving ratio."""

import math

import numpy as np
import pytest

from golden import (FULL, HALF, NONE, ChannelGroups, VideoGrid, attention_output,
                    attention_quality, compare, effective_operand, make_qkv, oracle_ops,
                    reuse_masks, skip_operand)


def naive_attention(q, k, v, scale):
    s = q.astype(np.float64) @ k.astype(np.float64).T * scale
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ v.astype(np.float64)


def test_compare_metrics():
    ref = np.array([[1.0, -2.0], [0.5, 4.0]])
    same = compare(ref, ref)
    assert same == {"mse": 0.0, "psnr": math.inf, "cosine": 1.0}
    out = ref + np.array([[0.0, 0.0], [0.0, 2.0]])
    r = compare(ref, out)
    assert r["mse"] == 1.0
    assert r["psnr"] == pytest.approx(10 * math.log10(16.0))
    assert r["cosine"] == pytest.approx(np.dot(ref.ravel(), out.ravel())
                                        / np.linalg.norm(ref) / np.linalg.norm(out))


def test_skip_operand():
    x = np.array([[-128, -1, 37, 100]], dtype=np.int8)
    m = np.array([[FULL, HALF, HALF, NONE]], dtype=np.uint8)
    assert skip_operand(x, m, 3).tolist() == [[0, 15, 5, 100]]   # low 4 bits: -1 -> 15, 37 -> 5
    assert skip_operand(x, m, 5).tolist() == [[0, 3, 1, 100]]


def test_attention_output_matches_naive():
    rng = np.random.default_rng(0)
    q, k, v = (rng.integers(-128, 128, size=(20, 8)).astype(np.int8) for _ in range(3))
    np.testing.assert_allclose(attention_output(q, k, v, 1e-3), naive_attention(q, k, v, 1e-3),
                               rtol=1e-12, atol=1e-9)
    rows = np.array([3, 17])
    np.testing.assert_array_equal(attention_output(q, k, v, 1e-3, rows),
                                  attention_output(q, k, v, 1e-3)[rows])


@pytest.fixture(scope="module")
def workload():
    return make_qkv("hunyuanvideo", "4x8x8", seed=3)


def test_lossless_thresholds_give_exact_output(workload):
    """full_bits = 7 reuses only equal values: the reuse path is the exact path, while the
    skip baselines still lose accuracy at the same saving."""
    w = workload
    r = attention_quality(w.q, w.k, w.v, w.grid, "hunyuanvideo", w.scale, full_bits=7)
    assert r["reuse"]["mse"] == 0.0 and r["reuse"]["psnr"] == math.inf
    assert r["saving"] > 0.1
    assert r["skip_smallest"]["mse"] > 0 and r["skip_masks"]["mse"] > 0
    assert r["mse_ratio"]["skip_masks"] == math.inf


def test_reuse_path_matches_direct_computation(workload):
    w = workload
    groups = ChannelGroups.from_preset("hunyuanvideo")
    r = attention_quality(w.q, w.k, w.v, w.grid, groups, w.scale)
    mq, mk = reuse_masks(w.q, w.grid, groups), reuse_masks(w.k, w.grid, groups)
    assert r["saving"] == oracle_ops(mq, mk)["reduction"]
    exact = naive_attention(w.q, w.k, w.v, w.scale)
    reused = naive_attention(effective_operand(w.q, mq, w.grid, groups),
                             effective_operand(w.k, mk, w.grid, groups), w.v, w.scale)
    want = compare(exact, reused)
    assert r["reuse"]["mse"] == pytest.approx(want["mse"], rel=1e-9)
    assert r["reuse"]["cosine"] == pytest.approx(want["cosine"], rel=1e-12)
    skipped = naive_attention(skip_operand(w.q, mq), skip_operand(w.k, mk), w.v, w.scale)
    assert r["skip_masks"]["mse"] == pytest.approx(compare(exact, skipped)["mse"], rel=1e-9)
    assert r["mse_ratio"]["skip_masks"] == pytest.approx(
        r["skip_masks"]["mse"] / r["reuse"]["mse"])


def test_skip_smallest_drops_the_smallest_scores():
    # A small head whose rows have no ties in |S|, so "the smallest" is one set.
    for seed in range(50):
        w = make_qkv("cogvideox-5b", "2x2x4", seed=seed, logit_std=4.0)
        s = w.q.astype(np.float64) @ w.k.astype(np.float64).T
        if all(np.unique(np.abs(row)).size == row.size for row in s):
            break
    else:
        pytest.fail("no tie-free workload found")
    n = w.grid.n
    r = attention_quality(w.q, w.k, w.v, w.grid, "cogvideox-5b", w.scale)
    skipped = int(round(r["saving"] * n))
    assert 0 < skipped < n
    logits = s * w.scale
    for i in range(n):
        logits[i, np.argsort(np.abs(s[i]))[:skipped]] = -np.inf
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    out = (p / p.sum(axis=1, keepdims=True)) @ w.v.astype(np.float64)
    exact = naive_attention(w.q, w.k, w.v, w.scale)
    assert r["skip_smallest"]["mse"] == pytest.approx(compare(exact, out)["mse"], rel=1e-9)


def test_reuse_beats_both_skip_baselines_on_default_workload():
    """The paper's Fig. 9 claim on the default synthetic workload, with and without V reuse."""
    w = make_qkv("wan2.1", "8x16x16", seed=0)
    for reuse_v in (False, True):
        r = attention_quality(w.q, w.k, w.v, w.grid, "wan2.1", w.scale, reuse_v=reuse_v,
                              queries=512)
        assert r["queries"] == 512
        assert r["mse_ratio"]["skip_smallest"] > 2 and r["mse_ratio"]["skip_masks"] > 5
        assert r["reuse"]["cosine"] > 0.99
        assert (r["v_reduction"] > 0.2) == reuse_v


def test_query_subset_evaluates_those_rows(workload):
    w = workload
    full = attention_quality(w.q, w.k, w.v, w.grid, "hunyuanvideo", w.scale)
    sub = attention_quality(w.q, w.k, w.v, w.grid, "hunyuanvideo", w.scale, queries=w.grid.n)
    assert sub == full
    part = attention_quality(w.q, w.k, w.v, w.grid, "hunyuanvideo", w.scale, queries=16)
    assert part["queries"] == 16 and part["saving"] == full["saving"]


@pytest.mark.parametrize("kwargs,message", [
    ({"scale": 0.0}, "scale must be a positive finite number, got 0.0"),
    ({"scale": float("nan")}, "scale must be a positive finite number"),
    ({"window": 5}, "window must be an integer in [2, 3], got 5"),
    ({"queries": 0}, "queries must be an integer in [1, 256]"),
    ({"full_bits": 9}, "full_bits must be an integer in [1, 7], got 9"),
])
def test_bad_quality_input(workload, kwargs, message):
    w = workload
    args = {"scale": w.scale, **kwargs}
    with pytest.raises(ValueError, match=None) as err:
        attention_quality(w.q, w.k, w.v, w.grid, "hunyuanvideo", **args)
    assert message in str(err.value)


def test_bad_v_shape(workload):
    w = workload
    with pytest.raises(ValueError, match=r"v must have shape \(N, d\) = \(256, d\) for grid 4x8x8"):
        attention_quality(w.q, w.k, w.v[:-1], w.grid, "hunyuanvideo", w.scale)
    with pytest.raises(ValueError, match="v values must lie in"):
        attention_quality(w.q, w.k, w.v.astype(int) * 4, w.grid, "hunyuanvideo", w.scale)


def test_grid_mismatch_names_q(workload):
    w = workload
    with pytest.raises(ValueError, match="q must have shape"):
        attention_quality(w.q, w.k, w.v, VideoGrid(4, 8, 4), "hunyuanvideo", w.scale)
