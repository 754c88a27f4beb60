"""The activation-side window rule of linear layers and V (docs/numerics.md, "Window rule")."""

import numpy as np
import pytest
import reference_loops as ref
from hypothesis import given, settings
from hypothesis import strategies as st
from window_cases import draw_window_layer

from golden import (FULL, HALF, NONE, VideoGrid, linear, linear_ops, window_anchor_index,
                    window_effective_operand, window_masks)


FAST = settings(max_examples=40, deadline=None)


def smooth_int8(rng, n, c, spread):
    base = rng.integers(-100, 100, size=c)
    return (base + rng.integers(-spread, spread + 1, size=(n, c))).clip(-128, 127).astype(np.int8)


@st.composite
def cases(draw):
    grid, c, directions, window, full_bits, half_bits = draw_window_layer(draw)
    spread = draw(st.sampled_from([1, 3, 8, 40]))
    x = smooth_int8(np.random.default_rng(draw(st.integers(0, 2**32 - 1))), grid.n, c, spread)
    return grid, x, directions, window, full_bits, half_bits


def per_channel(directions, c):
    return [directions] * c if isinstance(directions, int) else list(directions)


@given(cases())
@FAST
def test_window_masks_match_loop(case):
    grid, x, directions, window, fb, hb = case
    dirs = per_channel(directions, x.shape[1])
    got = window_masks(x, grid, directions, window, fb, hb)
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, ref.window_masks(x, grid, dirs, window, fb, hb))
    eff = window_effective_operand(x, got, grid, directions, window)
    np.testing.assert_array_equal(eff, ref.window_effective(x, got, grid, dirs, window))


@given(st.integers(1, 7), st.integers(1, 7), st.integers(0, 2), st.integers(2, 3))
@FAST
def test_window_anchor_index(t, w, axis, window):
    grid = VideoGrid(t, 2, w)
    want = [ref.window_anchor(grid, n, axis, window) for n in range(grid.n)]
    assert window_anchor_index(grid, axis, window).tolist() == [-1 if a is None else a
                                                                for a in want]


def test_incomplete_trailing_window_computes():
    grid = VideoGrid(5, 1, 1)
    x = np.zeros((5, 1), dtype=np.int8)
    assert window_masks(x, grid, 0, window=2)[:, 0].tolist() == [NONE, FULL, NONE, FULL, NONE]
    assert window_masks(x, grid, 0, window=3)[:, 0].tolist() == [NONE, FULL, FULL, NONE, NONE]


@pytest.mark.parametrize("full_bits", [3, 5, 7])
def test_integer_variance_test_equals_population_std(full_bits):
    """w*sum(a^2) - sum(a)^2 < (w*theta1)^2  <=>  std(a) < theta1, for every int8 pair and a
    sample of triples."""
    theta1 = 2 ** (7 - full_bits)
    a, b = np.meshgrid(np.arange(-128, 128), np.arange(-128, 128), indexing="ij")
    x = np.stack([a.ravel(), b.ravel()]).astype(np.int8)
    m = window_masks(x, VideoGrid(2, 1, 1), 0, 2, full_bits, 0)[1]
    std = np.std(x.astype(np.float64), axis=0)
    np.testing.assert_array_equal(m == FULL, std < theta1)
    # at the default thresholds a FULL pair differs by at most 2*theta1 - 1 = 7
    assert np.abs(a.ravel() - b.ravel())[m == FULL].max() == 2 * theta1 - 1
    rng = np.random.default_rng(full_bits)
    x3 = smooth_int8(rng, 3, 20000, 2 * theta1)
    m3 = window_masks(x3, VideoGrid(3, 1, 1), 0, 3, full_bits, 0)
    var = np.var(x3.astype(np.float64), axis=0)
    clear = np.abs(var - theta1 ** 2) > 1e-9
    np.testing.assert_array_equal((m3[1] == FULL)[clear], (var < theta1 ** 2)[clear])
    np.testing.assert_array_equal(m3[1] == FULL, m3[2] == FULL)   # the window decides as one


def test_half_is_lossless_for_the_follower():
    grid = VideoGrid(2, 1, 1)
    a, b = np.meshgrid(np.arange(-128, 128), np.arange(-128, 128), indexing="ij")
    x = np.stack([a.ravel(), b.ravel()]).astype(np.int8)
    m = window_masks(x, grid, 0, 2, 5, 3)[1]
    half = m == HALF
    assert half.any()
    assert ((a.ravel() >> 4) == (b.ravel() >> 4))[half].all()
    eff = window_effective_operand(x, np.stack([np.full_like(m, NONE), m]), grid, 0, 2)
    np.testing.assert_array_equal(eff[1][half], x[1][half])


@given(cases(), st.integers(1, 5))
@FAST
def test_linear_equals_effective_times_weights(case, cout):
    grid, x, directions, window, fb, hb = case
    rng = np.random.default_rng(cout)
    w = rng.integers(-128, 128, size=(x.shape[1], cout)).astype(np.int8)
    y = linear(x, w, grid, directions, window, fb, hb)
    m = ref.window_masks(x, grid, per_channel(directions, x.shape[1]), window, fb, hb)
    x_eff = ref.window_effective(x, m, grid, per_channel(directions, x.shape[1]), window)
    assert y.dtype == np.int64
    np.testing.assert_array_equal(y, x_eff @ w.astype(np.int64))


@pytest.mark.parametrize("window", [2, 3])
def test_constant_windows_are_all_full_and_exact(window):
    """Windows whose values are equal: every follower FULL, the product still exact, and the
    saving is (window - 1) / window of the products."""
    grid = VideoGrid(2 * 3, 3, 2)
    rng = np.random.default_rng(window)
    base = rng.integers(-128, 128, size=(grid.t // window + 1, grid.h * grid.w, 10))
    x = np.repeat(base, window, axis=0)[:grid.t].reshape(grid.n, 10).astype(np.int8)
    w = rng.integers(-128, 128, size=(10, 7)).astype(np.int8)
    m = window_masks(x, grid, 0, window)
    assert ((m == FULL) == (window_anchor_index(grid, 0, window) >= 0)[:, None]).all()
    np.testing.assert_array_equal(linear(x, w, grid, 0, window),
                                  x.astype(np.int64) @ w.astype(np.int64))
    assert linear_ops(m, 7)["reduction"] == pytest.approx((window - 1) / window)


def test_full_moves_follower_by_less_than_two_theta():
    grid = VideoGrid(2, 1, 1)
    a, b = np.meshgrid(np.arange(-128, 128), np.arange(-128, 128), indexing="ij")
    x = np.stack([a.ravel(), b.ravel()]).astype(np.int8)
    for full_bits in range(1, 8):
        m = window_masks(x, grid, 0, 2, full_bits, 0)
        eff = window_effective_operand(x, m, grid, 0, 2).astype(np.int64)
        assert np.abs(eff - x).max() == 2 * 2 ** (7 - full_bits) - 1


def test_linear_ops_brute_force():
    rng = np.random.default_rng(2)
    m = rng.integers(0, 3, size=(9, 5)).astype(np.uint8)
    ops = linear_ops(m, 4)
    cost = sum(0 if c == FULL else 0.5 if c == HALF else 1 for c in m.ravel()) * 4
    assert ops["dense"] == 9 * 5 * 4 and ops["cost"] == cost
    assert ops["reduction"] == pytest.approx(1 - cost / 180)


BAD = [
    (lambda: window_masks(np.zeros((8, 3), np.int8), VideoGrid(2, 2, 2), 0, window=4), "window must be an integer in [2, 3], got 4"),
    (lambda: window_masks(np.zeros((8, 3), np.int8), VideoGrid(2, 2, 2), 0, window=1), "window must be an integer in [2, 3], got 1"),
    (lambda: window_masks(np.zeros((8, 3), np.int8), VideoGrid(2, 2, 2), 3), "directions values must be 0 (t), 1 (y) or 2 (x), got [3]"),
    (lambda: window_masks(np.zeros((8, 3), np.int8), VideoGrid(2, 2, 2), [0, 1]), "directions must be a single axis or one per channel (3), got shape (2,)"),
    (lambda: window_masks(np.zeros((8, 3), np.int8), VideoGrid(2, 2, 2), "z"), "directions must be 0 (t), 1 (y) or 2 (x) (or 't', 'y', 'x'), got 'z'"),
    (lambda: window_masks(np.zeros((7, 3), np.int8), VideoGrid(2, 2, 2)), "x must have shape (N, d) = (8, d) for grid 2x2x2, got (7, 3)"),
    (lambda: window_masks(np.zeros((8, 3), np.int8), VideoGrid(2, 2, 2), 0, 2, 5, 6), "half_bits must be an integer in [0, 4] (below full_bits = 5), got 6"),
    (lambda: linear(np.zeros((8, 3), np.int8), np.zeros((4, 2), np.int8), VideoGrid(2, 2, 2)), "w must have shape (C_in, C_out) with C_in = 3 (the channels of x), got (4, 2)"),
    (lambda: linear(np.zeros((8, 3), np.int8), np.full((3, 2), 300), VideoGrid(2, 2, 2)), "w values must lie in [-128, 127] (int8), got values in [300, 300]"),
    (lambda: window_effective_operand(np.zeros((8, 1), np.int8), np.zeros((8, 1), np.uint8), VideoGrid(2, 2, 2)), "masks may mark FULL or HALF only on window followers"),
    (lambda: linear_ops(np.zeros((2, 2), np.uint8), 0), "out_features must be an integer in [1, 1073741824], got 0"),
]


@pytest.mark.parametrize("call,message", BAD, ids=range(len(BAD)))
def test_bad_input_has_clear_one_line_error(call, message):
    with pytest.raises(ValueError) as err:
        call()
    assert message in str(err.value) and "\n" not in str(err.value)
