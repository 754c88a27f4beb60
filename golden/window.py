"""The activation-side reuse rule of linear layers (``Y = X @ W``) and of V in ``P @ V``
(``docs/numerics.md``, "Window rule").

Only the activation has spatio-temporal correlation, so only it is reused, and a window of
``w`` consecutive tokens (instead of a pair) is tested at once. Along each input channel's
direction the tokens are cut into aligned windows ``[k*w, k*w + w)``; a trailing incomplete
window is not a window (its tokens compute). The window's first token is the anchor; its
followers are

* FULL when the window's population standard deviation is below ``theta1 = 2**(7 - full_bits)``,
  decided exactly in integers: ``w*sum(a*a) - sum(a)**2 < (w*theta1)**2``;
* otherwise HALF when the top ``1 + half_bits`` bits equal the anchor's (the high nibble at the
  default ``half_bits = 3``);
* otherwise NONE.

A FULL follower multiplies its anchor's value; HALF is exact, as for attention.
"""

from __future__ import annotations

import numpy as np

from golden.checks import (as_codes, as_int8, check_axes, check_bits, check_int, check_tokens,
                           check_window)
from golden.numerics import AXIS_T, FULL, NONE, _axis_channels, as_grid, exact_matmul


__all__ = ["window_anchor_index", "window_masks", "window_effective_operand", "window_operand",
           "linear", "linear_ops"]


def _window_slices(axis: int, length: int, window: int, offset: int, channels):
    """Index tuple selecting, along ``axis``, token ``offset`` of every complete window."""
    count = length // window
    if count == 0:
        return None
    index = [slice(None)] * 3 + [channels]
    index[axis] = slice(offset, count * window, window)
    return tuple(index)


def window_anchor_index(grid, axis: int, window: int = 2) -> np.ndarray:
    """(N,) int64: each token's window anchor along ``axis``, or -1 for anchors and for tokens
    outside a complete window."""
    grid = as_grid(grid)
    axis = check_int("axis", axis, 0, 2, " (0 t, 1 y, 2 x)")
    window = check_window(window)
    out = np.full(grid.shape, -1, dtype=np.int64)
    idx = np.arange(grid.n, dtype=np.int64).reshape(grid.shape)
    anchors = _window_slices(axis, grid.shape[axis], window, 0, slice(None))
    if anchors is not None:
        for j in range(1, window):
            out[_window_slices(axis, grid.shape[axis], window, j, slice(None))[:3]] = \
                idx[anchors[:3]]
    return out.ravel()


def _check_activation(x, grid):
    x = as_int8(x, "x")
    check_tokens(x, "x", grid.n, str(grid))
    return np.ascontiguousarray(x).reshape(grid.shape + (x.shape[1],))


def window_masks(x, grid, directions=AXIS_T, window: int = 2, full_bits: int = 5,
                 half_bits: int = 3) -> np.ndarray:
    """(N, C) uint8 reuse codes of an activation under the window rule.

    ``directions`` is one axis (0 t, 1 y, 2 x, or 't'/'y'/'x') for every input channel, or
    one per channel; the default reuses every channel along t.
    """
    grid = as_grid(grid)
    window = check_window(window)
    full_bits, half_bits = check_bits(full_bits, half_bits)
    x4 = _check_activation(x, grid)
    axes = check_axes(directions, x4.shape[-1])
    theta1 = 1 << (7 - full_bits)
    limit = (window * theta1) ** 2
    half_limit = np.uint8(1 << (7 - half_bits))
    masks = np.full(x4.shape, NONE, dtype=np.uint8)
    for axis, chans in _axis_channels(axes):
        length = grid.shape[axis]
        members = [_window_slices(axis, length, window, j, chans) for j in range(window)]
        if members[0] is None:
            continue
        values = [x4[m] for m in members]
        wide = [v.astype(np.int32) for v in values]
        total = sum(wide)
        squares = sum(v * v for v in wide)
        full = window * squares - total * total < limit
        anchor = values[0].view(np.uint8)
        for j in range(1, window):
            half = (anchor ^ values[j].view(np.uint8)) < half_limit
            # FULL -> 0, HALF -> 1, NONE -> 2
            masks[members[j]] = np.where(full, FULL, 2 - half.view(np.uint8))
    return masks.reshape(grid.n, -1)


def window_effective_operand(x, masks, grid, directions=AXIS_T, window: int = 2) -> np.ndarray:
    """(N, C) int8 activation as multiplied: FULL followers take their window anchor's value."""
    grid = as_grid(grid)
    window = check_window(window)
    x4 = _check_activation(x, grid)
    axes = check_axes(directions, x4.shape[-1])
    m = as_codes(masks)
    check_tokens(m, "masks", grid.n, str(grid), x4.shape[-1], "channels")
    m4 = np.ascontiguousarray(m).reshape(x4.shape)
    followers = np.zeros(x4.shape, dtype=bool)
    out = x4.copy()
    for axis, chans in _axis_channels(axes):
        anchors = _window_slices(axis, grid.shape[axis], window, 0, chans)
        if anchors is None:
            continue
        for j in range(1, window):
            member = _window_slices(axis, grid.shape[axis], window, j, chans)
            followers[member] = True
            out[member] = np.where(m4[member] == FULL, x4[anchors], x4[member])
    stray = (m4 != NONE) & ~followers
    if stray.any():
        n, c = (int(i) for i in np.argwhere(stray.reshape(grid.n, -1))[0])
        raise ValueError(
            f"masks may mark FULL or HALF only on window followers (anchors and tokens outside "
            f"a complete window are NONE = 2), got code {int(m[n, c])} at token {n} channel {c}")
    return out.reshape(grid.n, -1)


def linear(x, w, grid, directions=AXIS_T, window: int = 2, full_bits: int = 5,
           half_bits: int = 3) -> np.ndarray:
    """(N, C_out) int64 ``X_eff @ W``: the reuse-accelerated linear layer, bit-exact.

    ``x`` is the (N, C_in) int8 activation on ``grid``, ``w`` the (C_in, C_out) int8 weight
    (never reused).
    """
    grid = as_grid(grid)
    x4 = _check_activation(x, grid)
    wm = as_int8(w, "w")
    if wm.ndim != 2 or wm.shape[0] != x4.shape[-1] or wm.shape[1] < 1:
        raise ValueError(f"w must have shape (C_in, C_out) with C_in = {x4.shape[-1]} "
                         f"(the channels of x), got {tuple(wm.shape)}")
    x_eff = window_operand(x4.reshape(grid.n, -1), grid, directions, window, full_bits,
                           half_bits)
    return exact_matmul(x_eff, wm)


def window_operand(x, grid, directions=AXIS_T, window: int = 2, full_bits: int = 5,
                   half_bits: int = 3) -> np.ndarray:
    """(N, C) int8 ``x`` as the reuse hardware multiplies it: its window codes
    (:func:`window_masks`) applied (:func:`window_effective_operand`)."""
    masks = window_masks(x, grid, directions, window, full_bits, half_bits)
    return window_effective_operand(x, masks, grid, directions, window)


def linear_ops(masks, out_features: int) -> dict:
    """Oracle op accounting of ``X_eff @ W``: every product with a FULL activation costs 0,
    with a HALF one 1/2, else 1 (weights are dense). Same keys as
    :func:`golden.oracle_ops`: ``dense``, ``cost``, ``reduction``, ``full``, ``half``, ``none``.
    """
    m = as_codes(masks)
    out_features = check_int("out_features", out_features, 1, 1 << 30)
    full = int(np.count_nonzero(m == FULL)) * out_features
    none = int(np.count_nonzero(m == NONE)) * out_features
    dense = m.size * out_features
    half = dense - full - none
    cost = none + half / 2
    return {"dense": dense, "cost": cost, "reduction": 1.0 - cost / dense if dense else 0.0,
            "full": full, "half": half, "none": none}
