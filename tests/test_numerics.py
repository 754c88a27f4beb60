"""The numerics contract (docs/numerics.md): masks, effective operand, exact scores, oracle
accounting, presets and input checks, against plain loop references."""

import itertools

import numpy as np
import pytest
import reference_loops as ref
from hypothesis import given, settings
from hypothesis import strategies as st

import golden
from golden import (FULL, HALF, NONE, PRESETS, ChannelGroups, VideoGrid, anchor_index,
                    attention_scores, code_counts, effective_operand, exact_matmul, follower_mask,
                    oracle_cap, oracle_ops, quantize, reuse_masks)


FAST = settings(max_examples=40, deadline=None)


def correlated_int8(rng, n, d, spread=6):
    """int8 values where neighbours often agree in their top bits: a few wide channels and
    many narrow ones, so every code occurs."""
    wide = rng.integers(-128, 128, size=(n, d))
    narrow = rng.integers(-spread, spread + 1, size=(n, d)) + rng.integers(-100, 100, size=d)
    pick = rng.random(d) < 0.25
    return np.where(pick, wide, narrow).clip(-128, 127).astype(np.int8)


@st.composite
def cases(draw, max_dim=4, max_d=10):
    grid = VideoGrid(*(draw(st.integers(1, max_dim)) for _ in range(3)))
    d = draw(st.integers(1, max_d))
    group_of = tuple(draw(st.lists(st.integers(0, 2), min_size=d, max_size=d)))
    directions = tuple(draw(st.lists(st.integers(0, 2), min_size=3, max_size=3)))
    full_bits = draw(st.integers(1, 7))
    half_bits = draw(st.integers(0, full_bits - 1))
    seed = draw(st.integers(0, 2**32 - 1))
    spread = draw(st.sampled_from([1, 4, 16, 127]))
    x = correlated_int8(np.random.default_rng(seed), grid.n, d, spread)
    return grid, ChannelGroups(group_of, directions), full_bits, half_bits, x


# -- presets and groups --------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_sum_to_head_dim(name):
    p = PRESETS[name]
    assert p.t + p.h + p.w == p.head_dim
    g = ChannelGroups.from_preset(name)
    assert g.head_dim == p.head_dim and g.sizes == (p.t, p.h, p.w)
    assert all(s % 2 == 0 for s in g.sizes), "RoPE rotates channel pairs"


def test_preset_table():
    table = {n: (p.head_dim, p.t, p.h, p.w, p.theta, p.pair_layout) for n, p in PRESETS.items()}
    assert table == {
        "hunyuanvideo": (128, 16, 56, 56, 256.0, "adjacent"),
        "wan2.1": (128, 44, 42, 42, 10000.0, "adjacent"),
        "longcat": (128, 44, 42, 42, 10000.0, "adjacent"),
        "cogvideox-5b": (64, 16, 24, 24, 10000.0, "adjacent"),
        "opensora-plan-1.3": (96, 32, 32, 32, 10000.0, "split"),
    }


def test_default_directions_and_flattening():
    g = ChannelGroups.from_preset("hunyuanvideo")
    assert g.directions == (golden.AXIS_X, golden.AXIS_T, golden.AXIS_Y)
    grid = VideoGrid(2, 3, 4)
    c = grid.coords()
    assert (c[:, 0] * 3 + c[:, 1]) .tolist() == (np.arange(24) // 4).tolist()
    assert ((c[:, 0] * 3 + c[:, 1]) * 4 + c[:, 2]).tolist() == list(range(24))


# -- pairing -------------------------------------------------------------------------------------

@given(st.integers(1, 5), st.integers(1, 5), st.integers(1, 5), st.integers(0, 2))
@FAST
def test_anchor_index_matches_reference(t, h, w, axis):
    grid = VideoGrid(t, h, w)
    expect = [ref.pair_anchor(grid, n, axis) for n in range(grid.n)]
    got = anchor_index(grid, axis)
    assert got.tolist() == [-1 if a is None else a for a in expect]


def test_odd_axis_leaves_last_token_unpaired():
    grid = VideoGrid(1, 1, 5)
    assert anchor_index(grid, 2).tolist() == [-1, 0, -1, 2, -1]


# -- masks ---------------------------------------------------------------------------------------

ALL_DIRECTION_MAPS = list(itertools.product(range(3), repeat=3))


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_masks_match_loop_for_every_direction_map(name):
    """Every assignment of axes to the three groups (27, incl. the 6 permutations), on a grid
    with an odd axis so unpaired tokens occur."""
    grid = VideoGrid(3, 2, 4)
    rng = np.random.default_rng(len(name))
    seen = set()
    for directions in ALL_DIRECTION_MAPS:
        groups = ChannelGroups.from_preset(name, directions)
        x = correlated_int8(rng, grid.n, groups.head_dim)
        got = reuse_masks(x, grid, groups)
        want = ref.masks(x, grid, groups.group_of, directions)
        np.testing.assert_array_equal(got, want, err_msg=f"directions {directions}")
        seen |= set(np.unique(got).tolist())
    assert seen == {FULL, HALF, NONE}


@given(cases())
@FAST
def test_masks_match_loop_property(case):
    grid, groups, fb, hb, x = case
    got = reuse_masks(x, grid, groups, fb, hb)
    assert got.dtype == np.uint8 and got.shape == x.shape
    np.testing.assert_array_equal(got, ref.masks(x, grid, groups.group_of, groups.directions, fb, hb))
    # only followers carry FULL or HALF
    assert not ((got != NONE) & ~follower_mask(grid, groups)).any()


def test_masks_of_q_and_k_are_independent():
    grid, groups = VideoGrid(2, 2, 2), ChannelGroups.from_sizes(2, 2, 2)
    rng = np.random.default_rng(1)
    q = correlated_int8(rng, grid.n, 6)
    k = correlated_int8(rng, grid.n, 6)
    assert not np.array_equal(reuse_masks(q, grid, groups), reuse_masks(k, grid, groups))
    s = attention_scores(q, k, grid, groups)
    qe = effective_operand(q, reuse_masks(q, grid, groups), grid, groups)
    ke = effective_operand(k, reuse_masks(k, grid, groups), grid, groups)
    np.testing.assert_array_equal(s, qe.astype(np.int64) @ ke.astype(np.int64).T)


def _all_pairs():
    """Every (anchor, follower) int8 pair as one token pair on a 1x1x2 grid, 65536 channels."""
    a, b = np.meshgrid(np.arange(-128, 128), np.arange(-128, 128), indexing="ij")
    x = np.stack([a.ravel(), b.ravel()]).astype(np.int8)
    groups = ChannelGroups.from_sizes(0, 0, x.shape[1], directions=(2, 2, 2))
    return x, VideoGrid(1, 1, 2), groups


@pytest.mark.parametrize("full_bits,half_bits", [(5, 3), (7, 3), (4, 0), (6, 5), (1, 0)])
def test_full_moves_at_most_lsb_bound_and_half_is_lossless(full_bits, half_bits):
    x, grid, groups = _all_pairs()
    m = reuse_masks(x, grid, groups, full_bits, half_bits)[1]
    a, b = x[0].astype(np.int64), x[1].astype(np.int64)
    full, half = m == FULL, m == HALF
    # FULL: the follower's value moves by less than one step of the compared bits.
    assert np.abs(a - b)[full].max() == 2 ** (7 - full_bits) - 1
    if (full_bits, half_bits) == (5, 3):
        assert np.abs(a - b)[full].max() == 3      # the contract's "at most 3 LSB"
    # HALF: high part equal, so anchor's high partial product + own low product is exact.
    s = 7 - half_bits
    hi_a, lo_b = (a >> s) << s, b & ((1 << s) - 1)
    assert half.any() and (hi_a[half] + lo_b[half] == b[half]).all()
    for p in (-128, -77, -1, 0, 1, 93, 127):
        assert ((hi_a * p + lo_b * p)[half] == (b * p)[half]).all()
    eff = effective_operand(x, np.stack([np.full_like(m, NONE), m]), grid, groups)
    np.testing.assert_array_equal(eff[1][half | (m == NONE)], x[1][half | (m == NONE)])
    np.testing.assert_array_equal(eff[1][full], x[0][full])
    # the decision is exactly "top 1+bits bits equal"
    np.testing.assert_array_equal(full, (a >> (7 - full_bits)) == (b >> (7 - full_bits)))


def test_lossless_thresholds_give_exact_scores():
    """full_bits = 7 reuses only identical values, so S equals the exact Q @ K.T."""
    grid = VideoGrid(3, 4, 4)
    groups = ChannelGroups.from_preset("cogvideox-5b")
    rng = np.random.default_rng(7)
    q, k = (correlated_int8(rng, grid.n, 64, 1) for _ in range(2))
    s = attention_scores(q, k, grid, groups, full_bits=7, half_bits=3)
    np.testing.assert_array_equal(s, q.astype(np.int64) @ k.astype(np.int64).T)
    assert (reuse_masks(q, grid, groups, 7, 3) == FULL).any()


@given(cases(max_dim=3, max_d=6))
@FAST
def test_effective_operand_and_scores_match_loop(case):
    grid, groups, fb, hb, x = case
    m = reuse_masks(x, grid, groups, fb, hb)
    want = ref.effective(x, m, grid, groups.group_of, groups.directions)
    eff = effective_operand(x, m, grid, groups)
    assert eff.dtype == np.int8
    np.testing.assert_array_equal(eff, want)
    k = np.flipud(x).copy()
    mk = reuse_masks(k, grid, groups, fb, hb)
    k_want = ref.effective(k, mk, grid, groups.group_of, groups.directions)
    np.testing.assert_array_equal(attention_scores(x, k, grid, groups, fb, hb), want @ k_want.T)


def test_scores_exact_at_extremes():
    grid, groups = VideoGrid(1, 2, 2), ChannelGroups.from_preset("hunyuanvideo")
    q = np.full((4, 128), -128, dtype=np.int8)
    k = np.full((4, 128), -128, dtype=np.int8)
    k[1] = 127
    s = attention_scores(q, k, grid, groups)
    assert s.dtype == np.int64 and s[0, 0] == 128 * 16384
    np.testing.assert_array_equal(s, q.astype(np.int64) @ k.astype(np.int64).T)


@pytest.mark.parametrize("inner,lo,hi", [(1024, -128, 128), (1025, -128, 128), (64, -2**20, 2**20),
                                         (8, -2**40, 2**40)])
def test_exact_matmul_matches_int64(inner, lo, hi):
    rng = np.random.default_rng(inner)
    a = rng.integers(lo, hi, size=(33, inner))
    b = rng.integers(lo, hi, size=(inner, 17))
    a[0], b[:, 0] = lo, lo        # the largest product magnitude in every column
    got = exact_matmul(a, b)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, a @ b)


# -- oracle accounting ---------------------------------------------------------------------------

@given(st.integers(1, 6), st.integers(1, 6), st.integers(1, 5), st.integers(0, 2**32 - 1))
@FAST
def test_oracle_matches_brute_force(nq, nk, d, seed):
    rng = np.random.default_rng(seed)
    mq = rng.integers(0, 3, size=(nq, d)).astype(np.uint8)
    mk = rng.integers(0, 3, size=(nk, d)).astype(np.uint8)
    ops = oracle_ops(mq, mk)
    halves = ref.oracle_cost(mq, mk)
    assert ops["dense"] == nq * nk * d
    assert 2 * ops["cost"] == halves
    assert ops["full"] + ops["half"] + ops["none"] == ops["dense"]
    assert ops["none"] + ops["half"] / 2 == ops["cost"]
    assert ops["reduction"] == pytest.approx(1 - halves / 2 / (nq * nk * d))


def test_oracle_on_real_masks_matches_broadcast_brute_force():
    grid, groups = VideoGrid(2, 4, 4), ChannelGroups.from_preset("cogvideox-5b")
    rng = np.random.default_rng(3)
    mq = reuse_masks(correlated_int8(rng, grid.n, 64), grid, groups)
    mk = reuse_masks(correlated_int8(rng, grid.n, 64), grid, groups)
    a, b = mq[:, None, :], mk[None, :, :]
    cost = np.where((a == FULL) | (b == FULL), 0.0, np.where((a == HALF) | (b == HALF), 0.5, 1.0))
    assert oracle_ops(mq, mk)["cost"] == cost.sum()
    np.testing.assert_array_equal(code_counts(mq).sum(axis=0), np.full(64, grid.n))


@pytest.mark.parametrize("shape,cap", [((2, 4, 4), 0.75), ((4, 2, 6), 0.75), ((3, 3, 3), None)])
def test_pairing_caps_reduction(shape, cap):
    """All-identical Q and K make every follower FULL: the reduction reaches the cap, 75% on
    even grids, less when an axis is odd."""
    grid = VideoGrid(*shape)
    groups = ChannelGroups.from_preset("wan2.1")
    x = np.full((grid.n, 128), 17, dtype=np.int8)
    m = reuse_masks(x, grid, groups)
    ops = oracle_ops(m, m)
    assert ops["reduction"] == pytest.approx(oracle_cap(grid, groups))
    if cap is not None:
        assert ops["reduction"] == cap == oracle_cap(grid, groups)
    else:
        # one follower in three tokens per line: (2/3)**2 of the products remain
        assert ops["reduction"] == pytest.approx(5 / 9)


# -- quantization --------------------------------------------------------------------------------

def test_quantize():
    x = np.array([-2.0, -1.0, 0.0, 0.5, 1.0])
    q, s = quantize(x)
    assert s == 2.0 / 127 and q.dtype == np.int8
    assert q.tolist() == [-127, -64, 0, 32, 64]      # round half to even: 31.75 -> 32, 63.5 -> 64
    q0, s0 = quantize(np.zeros(3))
    assert s0 == 1.0 and not q0.any()


# -- input checks --------------------------------------------------------------------------------

G = VideoGrid(2, 2, 2)
GR = ChannelGroups.from_preset("cogvideox-5b")
OK = np.zeros((8, 64), dtype=np.int8)
BAD_INPUTS = [
    (lambda: reuse_masks(np.zeros((8, 63), np.int8), G, GR), "x must have shape (N, 64) = (8, 64) for grid 2x2x2 and head_dim 64, got (8, 63)"),
    (lambda: reuse_masks(np.zeros((9, 64), np.int8), G, GR), "x must have shape (N, 64) = (8, 64)"),
    (lambda: reuse_masks(np.zeros(512, np.int8), G, GR), "x must have shape"),
    (lambda: reuse_masks(OK.astype(float), G, GR), "x must be an int8 array (or integers in [-128, 127]), got dtype float64"),
    (lambda: reuse_masks(OK.astype(int) + 128, G, GR), "x values must lie in [-128, 127] (int8), got values in [128, 128]"),
    (lambda: reuse_masks(OK, G, GR, full_bits=8), "full_bits must be an integer in [1, 7], got 8"),
    (lambda: reuse_masks(OK, G, GR, full_bits=0, half_bits=0), "full_bits must be an integer in [1, 7], got 0"),
    (lambda: reuse_masks(OK, G, GR, full_bits=5, half_bits=5), "half_bits must be an integer in [0, 4] (below full_bits = 5), got 5"),
    (lambda: reuse_masks(OK, G, GR, half_bits=-1), "half_bits must be an integer in [0, 4]"),
    (lambda: reuse_masks(OK, G, GR, full_bits=True), "full_bits must be an integer in [1, 7], got True"),
    (lambda: reuse_masks(OK, "2x2", GR), "grid must be TxHxW with three positive integers (e.g. 8x16x16), got '2x2'"),
    (lambda: reuse_masks(OK, G, "cogvideo"), "preset must be one of cogvideox-5b, hunyuanvideo, longcat, opensora-plan-1.3, wan2.1, got 'cogvideo'"),
    (lambda: VideoGrid(0, 2, 2), "grid t must be a positive integer, got 0"),
    (lambda: ChannelGroups((0, 1, 3)), "channel-to-group map values must be 0 (t), 1 (y) or 2 (x), got [3]"),
    (lambda: ChannelGroups((0, 1), directions=(0, 1)), "directions must be three axes"),
    (lambda: effective_operand(OK, np.full((8, 64), 3), G, GR), "masks codes must be 0 (FULL), 1 (HALF) or 2 (NONE), got values in [3, 3]"),
    (lambda: effective_operand(OK, np.zeros((8, 64), np.uint8), G, GR), "masks may mark FULL or HALF only on followers"),
    (lambda: effective_operand(OK, np.full((8, 32), 2, np.uint8), G, GR), "masks must have shape (N, 64) = (8, 64)"),
    (lambda: oracle_ops(np.full((4, 3), 2), np.full((4, 2), 2)), "mask_q and mask_k must have the same number of channels, got 3 and 2"),
    (lambda: oracle_ops(np.full((4, 3), 2.0), np.full((4, 3), 2)), "mask_q must be an integer array of codes"),
    (lambda: attention_scores(OK, OK[:, :32], G, GR), "k must have shape (N, 64) = (8, 64)"),
    (lambda: anchor_index(G, 3), "axis must be an integer in [0, 2] (0 t, 1 y, 2 x), got 3"),
]


@pytest.mark.parametrize("call,message", BAD_INPUTS, ids=range(len(BAD_INPUTS)))
def test_bad_input_has_clear_one_line_error(call, message):
    with pytest.raises(ValueError) as err:
        call()
    text = str(err.value)
    assert message in text and "\n" not in text


@pytest.mark.parametrize("a,b,code", [(37, 38, FULL), (37, 42, HALF), (37, 53, NONE),
                                      (-1, 0, NONE), (-4, -1, FULL), (-16, -1, HALF),
                                      (127, 124, FULL), (-128, -125, FULL)])
def test_worked_examples_of_the_docs(a, b, code):
    x = np.array([[a], [b]], dtype=np.int8)
    groups = ChannelGroups.from_sizes(1, 0, 0, directions=(0, 0, 0))
    assert reuse_masks(x, VideoGrid(2, 1, 1), groups).tolist() == [[NONE], [code]]
