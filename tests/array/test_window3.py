"""Windows of 3 on the tile passes (``golden.array.window3``): the register plan computes the
window rule's linear layer exactly, and its step counts agree with an independent count and,
for windows of 2, with the engine's exact model."""

import itertools

import numpy as np
import pytest

from golden.array.schedule import ABSENT, Op, Sel, decode
from golden.array.window3 import (DECODE3, REGISTER_TILE3, WORK3, decode3, window3_engine,
                                  window3_issued)
from golden.engine.linear import linear_plans
from golden.engine.model import EngineParams, engine_counters
from golden.numerics import FULL, HALF, NONE, ChannelGroups
from golden.window import linear


def _activation(rng, grid, channels, spread):
    """Tokens near a per-channel value, a third of them far off, so that windows along
    every axis are FULL, HALF and NONE."""
    n = int(np.prod(grid))
    base = rng.integers(-100, 100, (1, channels))
    jump = rng.integers(-128, 128, (n, channels)) * (rng.random((n, channels)) < 0.3)
    return np.clip(base + jump + rng.integers(-spread, spread + 1, (n, channels)), -128, 127
                   ).astype(np.int8)


@pytest.mark.parametrize("grid", [(3, 4, 5), (4, 3, 7), (2, 5, 3), (1, 1, 4), (7, 1, 1)])
def test_window3_engine_is_the_window_rule(grid):
    """Bit-exact against ``golden.linear(..., window=3)`` with channels along every axis, edge
    windows of one and two tokens, every threshold pair the PE allows, and without reuse."""
    rng = np.random.default_rng(sum(grid))
    x = _activation(rng, grid, 24, 6)
    w = rng.integers(-128, 128, (24, 7)).astype(np.int8)
    dirs = rng.integers(0, 3, 24)
    codes = set()
    for full_bits, half_bits in ((5, 3), (6, 4), (7, 3), (4, 3)):
        got = window3_engine(x, w, grid, dirs, full_bits, half_bits)
        assert np.array_equal(got, linear(x, w, grid, dirs, 3, full_bits, half_bits))
        for pl in linear_plans(x, grid, dirs, 3, full_bits, half_bits, with_values=False):
            codes |= set(np.unique(pl.codes).tolist())
    assert np.array_equal(window3_engine(x, w, grid, dirs, reuse=False),
                          x.astype(np.int64) @ w.astype(np.int64))
    if max(grid) >= 3:
        assert {FULL, HALF, NONE} <= codes        # the data exercised every code


def test_decode3_entries():
    """Pass 0 hands each follower its share, passes 1 and 2 are the attention's pass 2 on an
    ABSENT column with follower 2's and follower 1's code; pass 3 does not exist."""
    share = {FULL: Sel.PROD, HALF: Sel.HIGH, NONE: Sel.NONE, ABSENT: Sel.NONE}
    for c1, c2 in itertools.product(range(4), repeat=2):
        u = decode3(0, c1, c2)
        assert (u.op, u.sel) == (Op.MUL, (Sel.PROD, share[c2], share[c1]))
        assert decode3(1, c1, c2) == decode(2, c2, ABSENT)
        assert decode3(2, c1, c2) == decode(2, c1, ABSENT)
        # A follower works in its own pass exactly when pass 0 did not hand it everything.
        assert WORK3[1, c1, c2] == (c2 in (HALF, NONE))
        assert WORK3[2, c1, c2] == (c1 in (HALF, NONE))
    assert DECODE3[0].shape == (3, 4, 4)
    # Each member's output is in exactly one register at each pass's end, and the register
    # moves are the attention passes' (pass 1: R0 <- R1, pass 2: R0 <- R2).
    assert REGISTER_TILE3[1][0] == REGISTER_TILE3[0][1]
    assert REGISTER_TILE3[2][0] == REGISTER_TILE3[1][2] == REGISTER_TILE3[0][2]
    with pytest.raises(ValueError, match="no pass 3"):
        decode3(3, NONE, NONE)


def _brute_issued(x, grid, c_out, window, rows, cols, width, reuse):
    """Issued steps quad by quad, PE by PE, from the decode tables."""
    plans = linear_plans(x, grid, 0, window, reuse=reuse, with_values=False)
    k_units = c_out if window == 3 else -(-c_out // 2)
    n_passes = 3 if window == 3 else 4
    issued = np.zeros(n_passes, np.int64)
    for pl in plans:
        U, n = pl.members.shape[0], pl.channels.size
        for r0, j0, c0 in itertools.product(range(0, U, rows), range(0, k_units, cols),
                                            range(0, n, width)):
            for p, c in itertools.product(range(n_passes), range(c0, min(c0 + width, n))):
                busy = False
                for u, j in itertools.product(range(r0, min(r0 + rows, U)),
                                              range(j0, min(j0 + cols, k_units))):
                    c1, c2 = int(pl.c1[u, c]), int(pl.c2[u, c])
                    if window == 3:
                        busy |= bool(WORK3[p, c1, c2])
                    else:
                        kc = NONE if 2 * j + 1 < c_out else ABSENT
                        busy |= decode(p, c1, kc).op != Op.IDLE
                issued[p] += busy
    return issued


@pytest.mark.parametrize("window", [2, 3])
def test_window3_issued_counts_every_quad(window):
    rng = np.random.default_rng(window)
    grid = (5, 3, 4)
    x = _activation(rng, grid, 20, 5)
    for c_out, reuse in ((9, True), (8, False)):
        got = window3_issued(x, grid, c_out, 0, window, rows=2, cols=3, width=7, reuse=reuse)
        assert np.array_equal(got.issued, _brute_issued(x, grid, c_out, window, 2, 3, 7, reuse))
        assert got.steps >= got.issued.sum() and got.outputs == 60 * c_out


def test_window2_issued_is_the_engine_model():
    """Windows of 2 as the engine model counts a linear block on one array (variant pe, K
    followers all present: the weight rows paired along an even axis)."""
    rng = np.random.default_rng(5)
    grid = (4, 2, 6)
    x = _activation(rng, grid, 40, 4)
    wt = rng.integers(-128, 128, (48, 40)).astype(np.int8)
    groups = ChannelGroups((0,) * 40, (0, 1, 2))
    params = EngineParams(rows=4, cols=4, arrays=1, width=16)
    model = engine_counters(x, wt, grid, groups, params, "pe", linear=True)
    got = window3_issued(x, grid, 48, 0, 2, rows=4, cols=4, width=16)
    assert np.array_equal(got.issued, model.issued.sum(axis=0))
    assert got.steps == int(model.issued.sum() + model.bubbles.sum())
