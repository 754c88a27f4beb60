"""The tile-quad schedule (golden/array/schedule.py): exact S, and counters equal to a plain loop."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golden.array.schedule import (ABSENT, REGISTER_TILE, Op, Sel, Split, decode, tile_counters,
                                   tile_engine, units)
from golden.numerics import (FULL, HALF, NONE, ChannelGroups, VideoGrid, attention_scores,
                             reuse_masks)


def _follower_value(rng, a, code):
    """A follower value whose code relative to anchor ``a`` (full_bits 5, half_bits 3) is ``code``."""
    while True:
        b = int(rng.integers(-128, 128))
        x = (a ^ b) & 0xFF
        c = FULL if x < 4 else (HALF if x < 16 else NONE)
        if c == code:
            return b


def _apply(u, x, y):
    """Per-register contribution of micro-op ``u`` on row value x, column value y."""
    if u.op == Op.MUL:
        prod = x * y
        high = 16 * x * (y >> 4) if u.split == Split.COL else 16 * (x >> 4) * y
        main, low = prod, prod - high
    else:
        main = {Op.IDLE: 0, Op.LOW_COL: x * (y & 15), Op.LOW_ROW: (x & 15) * y}[u.op]
        high = low = 0
    return [{Sel.NONE: 0, Sel.PROD: main, Sel.HIGH: high, Sel.LOWPART: low}[s] for s in u.sel]


@pytest.mark.parametrize("qc,kc", list(itertools.product((FULL, HALF, NONE, ABSENT), repeat=2)))
def test_decode_table_builds_every_tile_exactly(qc, kc):
    """For one PE and one channel, the four passes deliver exactly a*b, a*b'', a''*b, a''*b''."""
    rng = np.random.default_rng(qc * 4 + kc)
    for _ in range(300):
        a, b = (int(v) for v in rng.integers(-128, 128, 2))
        a1 = a if qc == ABSENT else _follower_value(rng, a, qc)
        b1 = b if kc == ABSENT else _follower_value(rng, b, kc)
        a_eff = a if qc == FULL else a1
        b_eff = b if kc == FULL else b1
        tiles = [0, 0, 0, 0]
        rows = (a, a, a_eff, a_eff)
        cols = (b, b_eff, b, b_eff)
        for p in range(4):
            contrib = _apply(decode(p, qc, kc), rows[p], cols[p])
            for r, tile in enumerate(REGISTER_TILE[p]):
                if tile is None:
                    assert contrib[r] == 0
                else:
                    tiles[tile] += contrib[r]
        want = [a * b, a * b_eff, a_eff * b, a_eff * b_eff]
        if qc == ABSENT:
            want[2] = want[3] = tiles[2] = tiles[3] = 0
        if kc == ABSENT:
            want[1] = want[3] = tiles[1] = tiles[3] = 0
        assert tiles == want


def test_dense_decode_is_four_plain_products():
    for p in range(4):
        u = decode(p, NONE, NONE)
        assert u.op == Op.MUL and u.sel[0] == Sel.PROD and u.sel[1:] == (Sel.NONE, Sel.NONE)


def test_units_pair_along_the_axis_and_keep_unpaired_tokens():
    grid = VideoGrid(3, 5, 4)
    for axis in range(3):
        anchors, followers = units(grid, axis)
        coords = grid.coords()
        assert np.all(coords[anchors, axis] % 2 == 0)
        paired = followers >= 0
        assert np.all(followers[paired] - anchors[paired] == grid.stride(axis))
        covered = np.concatenate([anchors, followers[paired]])
        assert sorted(covered) == list(range(grid.n))
        assert np.all(np.diff(anchors) > 0)


GRIDS = [VideoGrid(2, 4, 4), VideoGrid(3, 5, 4), VideoGrid(1, 3, 3), VideoGrid(2, 2, 3)]


@settings(max_examples=25, deadline=None)
@given(grid=st.sampled_from(GRIDS),
       sizes=st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(1, 5)),
       directions=st.permutations((0, 1, 2)),
       smooth=st.booleans(), seed=st.integers(0, 2**31))
def test_tile_engine_equals_attention_scores(grid, sizes, directions, smooth, seed):
    groups = ChannelGroups.from_sizes(*sizes, directions=tuple(directions))
    rng = np.random.default_rng(seed)
    shape = (grid.n, groups.head_dim)
    if smooth:
        q = np.clip(np.cumsum(rng.integers(-3, 4, shape), 0), -128, 127).astype(np.int8)
        k = np.clip(np.cumsum(rng.integers(-3, 4, shape), 0), -128, 127).astype(np.int8)
    else:
        q = rng.integers(-128, 128, shape).astype(np.int8)
        k = rng.integers(-128, 128, shape).astype(np.int8)
    assert np.array_equal(tile_engine(q, k, grid, groups), attention_scores(q, k, grid, groups))
    dense = q.astype(np.int64) @ k.astype(np.int64).T
    assert np.array_equal(tile_engine(q, k, grid, groups, reuse=False), dense)


def test_tile_engine_on_extreme_values():
    grid, groups = VideoGrid(2, 4, 4), ChannelGroups.from_sizes(4, 6, 6)
    for qv, kv in ((-128, -128), (-128, 127), (127, 127)):
        q = np.full((grid.n, 16), qv, np.int8)
        k = np.full((grid.n, 16), kv, np.int8)
        assert np.array_equal(tile_engine(q, k, grid, groups), attention_scores(q, k, grid, groups))


def _loop_counters(q, k, grid, groups, rows, cols):
    """Plain per-quad, per-channel, per-PE reference of the counters' data-dependent part."""
    mq, mk = reuse_masks(q, grid, groups), reuse_masks(k, grid, groups)
    busy, issued = 0, [0, 0, 0, 0]
    for g in range(3):
        ch = groups.channels(g)
        if ch.size == 0:
            continue
        anchors, followers = units(grid, groups.directions[g])

        def code(m, u, c):
            return ABSENT if followers[u] < 0 else int(m[followers[u], c])

        U = anchors.size
        for r0 in range(0, U, rows):
            for c0 in range(0, U, cols):
                for p in range(4):
                    for c in ch:
                        n = sum(decode(p, code(mq, i, c), code(mk, j, c)).op != Op.IDLE
                                for i in range(r0, min(r0 + rows, U))
                                for j in range(c0, min(c0 + cols, U)))
                        busy += n
                        issued[p] += n > 0
    return busy, issued


@pytest.mark.parametrize("grid,rows,cols", [(VideoGrid(2, 4, 4), 4, 4), (VideoGrid(3, 5, 4), 4, 4),
                                            (VideoGrid(3, 5, 4), 2, 3)])
def test_counters_equal_a_plain_loop(grid, rows, cols):
    groups = ChannelGroups.from_sizes(4, 6, 6)
    rng = np.random.default_rng(7)
    shape = (grid.n, 16)
    q = np.clip(np.cumsum(rng.integers(-4, 5, shape), 0), -128, 127).astype(np.int8)
    k = np.clip(np.cumsum(rng.integers(-4, 5, shape), 0), -128, 127).astype(np.int8)
    c = tile_counters(q, k, grid, groups, rows, cols)
    busy, issued = _loop_counters(q, k, grid, groups, rows, cols)
    assert c.busy_pe_cycles == busy
    assert c.issued == issued


def test_dense_counters_are_every_product_once():
    grid, groups = VideoGrid(3, 5, 4), ChannelGroups.from_preset("cogvideox-5b")
    rng = np.random.default_rng(1)
    q = rng.integers(-128, 128, (grid.n, 64)).astype(np.int8)
    c = tile_counters(q, q, grid, groups, reuse=False)
    assert c.busy_pe_cycles == grid.n ** 2 * 64
    # Odd sizes leave unpaired units, whose follower tiles are skipped; even sizes skip nothing.
    assert c.skipped[0] == 0 and c.skipped[3] > 0
    even = VideoGrid(2, 4, 4)
    q = rng.integers(-128, 128, (even.n, 64)).astype(np.int8)
    assert tile_counters(q, q, even, groups, reuse=False).skipped == [0, 0, 0, 0]
