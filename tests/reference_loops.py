"""Plain per-element loop references of the numerics contract (docs/numerics.md).

Deliberately written differently from the vectorized golden model: Python ints, coordinates
instead of strides, arithmetic shifts of signed values instead of XOR of bytes. Slow; only for
small grids in tests.
"""

from __future__ import annotations

import numpy as np


FULL, HALF, NONE = 0, 1, 2


def coords(grid):
    return [(t, y, x) for t in range(grid.t) for y in range(grid.h) for x in range(grid.w)]


def token(grid, t, y, x):
    return (t * grid.h + y) * grid.w + x


def pair_anchor(grid, n, axis):
    """Anchor token of token n along axis, or None (n is an anchor or unpaired)."""
    c = list(coords(grid)[n])
    if c[axis] % 2 == 1:          # odd coordinate: its predecessor is even and has a successor
        c[axis] -= 1
        return token(grid, *c)
    return None


def top_equal(a: int, b: int, bits: int) -> bool:
    """Top 1 + bits bits of two int8 values equal: compare arithmetic right shifts."""
    return (a >> (7 - bits)) == (b >> (7 - bits))


def masks(x, grid, group_of, directions, full_bits=5, half_bits=3):
    n_tok, d = x.shape
    out = np.full((n_tok, d), NONE, dtype=np.uint8)
    for n in range(n_tok):
        for c in range(d):
            anchor = pair_anchor(grid, n, directions[group_of[c]])
            if anchor is None:
                continue
            a, b = int(x[anchor, c]), int(x[n, c])
            if top_equal(a, b, full_bits):
                out[n, c] = FULL
            elif top_equal(a, b, half_bits):
                out[n, c] = HALF
    return out


def effective(x, m, grid, group_of, directions):
    out = np.array(x, dtype=np.int64)
    for n in range(x.shape[0]):
        for c in range(x.shape[1]):
            if m[n, c] == FULL:
                out[n, c] = int(x[pair_anchor(grid, n, directions[group_of[c]]), c])
    return out


def oracle_cost(mq, mk):
    """Sum over every (i, j, c) of the product's cost, in halves (an exact integer)."""
    halves = 0
    for i in range(mq.shape[0]):
        for j in range(mk.shape[0]):
            for c in range(mq.shape[1]):
                a, b = int(mq[i, c]), int(mk[j, c])
                if a == FULL or b == FULL:
                    continue
                halves += 1 if (a == HALF or b == HALF) else 2
    return halves


def window_anchor(grid, n, axis, window):
    c = list(coords(grid)[n])
    length = (grid.t, grid.h, grid.w)[axis]
    start = c[axis] - c[axis] % window
    if start + window > length or c[axis] == start:   # incomplete window, or the anchor
        return None
    c[axis] = start
    return token(grid, *c)


def window_masks(x, grid, directions, window=2, full_bits=5, half_bits=3):
    n_tok, d = x.shape
    theta1 = 2 ** (7 - full_bits)
    out = np.full((n_tok, d), NONE, dtype=np.uint8)
    for n in range(n_tok):
        for c in range(d):
            axis = directions[c]
            anchor = window_anchor(grid, n, axis, window)
            if anchor is None:
                continue
            members = [anchor]
            cc = list(coords(grid)[anchor])
            for j in range(1, window):
                cc[axis] += 1
                members.append(token(grid, *cc))
            vals = [int(x[m, c]) for m in members]
            # population variance < theta1^2, times window^2, in integers
            s1, s2 = sum(vals), sum(v * v for v in vals)
            if window * s2 - s1 * s1 < (window * theta1) ** 2:
                out[n, c] = FULL
            elif top_equal(int(x[anchor, c]), int(x[n, c]), half_bits):
                out[n, c] = HALF
    return out


def window_effective(x, m, grid, directions, window):
    out = np.array(x, dtype=np.int64)
    for n in range(x.shape[0]):
        for c in range(x.shape[1]):
            if m[n, c] == FULL:
                out[n, c] = int(x[window_anchor(grid, n, directions[c], window), c])
    return out
