"""The integer softmax of ``golden.vector`` (``docs/numerics.md`` section 14): bit-exact
against a scalar reference written separately from the contract's text, edge rows,
properties (order, sum, distance to the float softmax) and the errors of bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

import golden
from golden.vector import softmax as sm
from golden.vector.softmax import (MAX_ROW, scale_of, softmax_int, softmax_scale,
                                   softmax_stages)


def scalar_softmax(row, mult, shift):
    """One element at a time, plain Python ints, the contract's steps spelt out."""
    top = max(row)
    exps = []
    for s in row:
        d = top - s
        y = (d * mult + (1 << (shift - 1))) >> shift        # exponent, 8 fractional bits
        whole, frac = y // 256, y % 256
        entry = math.floor(32768 * 2.0 ** (-frac / 256) + 0.5)
        exps.append(entry >> whole if whole < 16 else 0)
    total = sum(exps)
    recip = (255 * 2 ** 32) // total
    return [(e * recip + 2 ** 31) // 2 ** 32 for e in exps]


def test_exp_table():
    assert sm.EXP_LUT[0] == 32768 and sm.EXP_LUT.shape == (256,)
    assert np.all(np.diff(sm.EXP_LUT) < 0) and sm.EXP_LUT[-1] > 16384


@pytest.mark.parametrize("seed", range(6))
def test_bit_exact_random_rows(seed):
    rng = np.random.default_rng(seed)
    for _ in range(20):
        n = int(rng.integers(1, 300))
        scale = float(np.exp(rng.uniform(np.log(1e-5), np.log(4.0))))
        mult, shift = softmax_scale(scale)
        spread = rng.uniform(0.1, 8.0) / scale
        row = np.clip(np.round(rng.normal(rng.uniform(-1e6, 1e6), spread, n)),
                      -2 ** 31, 2 ** 31 - 1).astype(np.int64)
        assert softmax_int(row, mult, shift).tolist() == scalar_softmax(row.tolist(), mult, shift)


def test_rows_at_once_equal_one_by_one():
    rng = np.random.default_rng(9)
    s = rng.integers(-5000, 5000, size=(7, 33))
    mult, shift = softmax_scale(0.003)
    whole = softmax_int(s, mult, shift)
    assert whole.dtype == np.uint8 and whole.shape == s.shape
    for r in range(7):
        assert whole[r].tolist() == softmax_int(s[r], mult, shift).tolist()


EDGE_ROWS = {
    "all equal": [1234] * 16,
    "all equal, odd length": [-7] * 37,
    "length 1": [42],
    "length 1, most negative": [-2 ** 31],
    "very negative": [0] + [-2 ** 31] * 9,
    "widest range": [2 ** 31 - 1, -2 ** 31, 0],
    "two maxima": [5, 5, -100000],
}


@pytest.mark.parametrize("name", EDGE_ROWS)
@pytest.mark.parametrize("scale", [1e-4, 0.01, 1.0, 40.0])
def test_edge_rows(name, scale):
    row = EDGE_ROWS[name]
    mult, shift = softmax_scale(scale)
    p = softmax_int(row, mult, shift).tolist()
    assert p == scalar_softmax(row, mult, shift)
    if name.startswith("all equal"):
        assert len(set(p)) == 1 and p[0] == round(255 / len(row))
    if name.startswith("length 1"):
        assert p == [255]                       # the maximum alone is exactly 1.0
    if name == "very negative":
        assert p == [255] + [0] * 9


def test_longest_row():
    rng = np.random.default_rng(3)
    row = rng.integers(-40000, 40000, size=MAX_ROW)
    mult, shift = softmax_scale(2e-4)
    st = softmax_stages(row, mult, shift)
    assert st["sum"] <= MAX_ROW * 32768
    assert st["p"].tolist() == scalar_softmax(row.tolist(), mult, shift)


@pytest.mark.parametrize("seed", range(4))
def test_order_sum_and_float_distance(seed):
    rng = np.random.default_rng(100 + seed)
    n = 257
    scale = 0.02
    row = rng.integers(-800, 800, size=n)
    p = softmax_int(row, *softmax_scale(scale)).astype(np.int64)
    order = np.argsort(row, kind="stable")
    assert np.all(np.diff(p[order]) >= 0), "a larger score must never get a smaller P"
    # Each P is within 1/2 (plus 2**-17) of 255 * E / sum, and those add up to 255.
    assert abs(int(p.sum()) - 255) <= n // 2 + 1
    exact = np.exp((row - row.max()) * scale)
    exact = 255 * exact / exact.sum()
    assert np.max(np.abs(p - exact)) <= 1.0


def test_scale_pair():
    for scale in (1e-6, 0.00137, 0.088, 1.0, 30.0):
        mult, shift = softmax_scale(scale)
        assert 2 ** 15 <= mult < 2 ** 16 and 1 <= shift <= 47
        assert abs(scale_of(mult, shift) / scale - 1) < 2 ** -16


@pytest.mark.parametrize("bad, match", [
    (lambda: softmax_int([], 40000, 10), r"s must have a row length in \[1, 1048576\], got 0"),
    (lambda: softmax_int(np.zeros((2, 0), dtype=np.int32), 40000, 10), r"row length"),
    (lambda: softmax_int([1.5, 2.0], 40000, 10), r"s must be an integer array"),
    (lambda: softmax_int([2 ** 31], 40000, 10), r"s values must lie in \[-2147483648, 2147483647\]"),
    (lambda: softmax_int(np.zeros((2, 2, 2), dtype=np.int32), 40000, 10), r"s must be one row"),
    (lambda: softmax_int([1], 100, 10), r"mult must be an integer in \[32768, 65535\]"),
    (lambda: softmax_int([1], 40000, 0), r"shift must be an integer in \[1, 47\]"),
    (lambda: softmax_int([1], 40000, 48), r"shift must be an integer in \[1, 47\]"),
    (lambda: softmax_scale(0.0), r"scale must be a positive finite number"),
    (lambda: softmax_scale(float("nan")), r"scale must be a positive finite number"),
    (lambda: softmax_scale(100.0), r"scale must lie in \[.*\] \(a shift in \[1, 47\]"),
    (lambda: softmax_scale(1e-13), r"scale must lie in"),
])
def test_errors(bad, match):
    with pytest.raises(ValueError, match=match):
        bad()


def test_exported():
    assert golden.softmax_int is softmax_int and golden.softmax_scale is softmax_scale
