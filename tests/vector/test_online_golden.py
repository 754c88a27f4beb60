"""Attention by key blocks with a running maximum (``docs/numerics.md`` section 15,
``golden.vector.online``): bit-exact against a scalar reference written from the contract's
text, the rescale and clamp edge cases, the block partitions, V reuse inside blocks, the
quality against float64 as the head grows, and the errors of bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

import golden
from golden.vector import online as on
from golden.vector.attention import _owner
from golden.vector.softmax import softmax_scale
from golden.window import window_masks
from golden.workloads import make_qkv


def _exp(y):
    whole, frac = y // 256, y % 256
    return math.floor(32768 * 2.0 ** (-frac / 256) + 0.5) >> whole if whole < 16 else 0


def scalar_online(row, v, mult, shift, blocks, block_max=False):
    """One query row, one key at a time, plain Python ints, the contract's steps spelt out
    (``block_max``: P to each block's own maximum, scaled into O and L by G with 8 more
    fractional bits, R from 2**48)."""
    y = lambda d: (d * mult + (1 << (shift - 1))) >> shift   # noqa: E731
    d = len(v[0])
    top, acc, weight = None, [0] * d, 0
    for keys in blocks:
        new_top = max(row[j] for j in keys) if top is None else max([top] + [row[j] for j in keys])
        if top is not None:
            f = _exp(y(new_top - top))
            acc = [(a * f + 2 ** 14) >> 15 for a in acc]
            weight = (weight * f + 2 ** 14) >> 15
        top = new_top
        ref = max(row[j] for j in keys) if block_max else top
        gain = _exp(y(top - ref))
        psum, part = 0, [0] * d
        for j in keys:
            p = (_exp(y(ref - row[j])) * 255 + 2 ** 14) >> 15
            psum += p
            part = [x + p * int(v[j][c]) for c, x in enumerate(part)]
        if block_max:
            weight += (psum * gain + 2 ** 6) >> 7
            acc = [a + ((x * gain + 2 ** 6) >> 7) for a, x in zip(acc, part)]
        else:
            weight += psum
            acc = [a + x for a, x in zip(acc, part)]
    norm = 48 if block_max else 40
    recip = 2 ** norm // weight
    out = [min(max((a * recip + 2 ** (norm - 9)) >> (norm - 8), -2 ** 15), 2 ** 15 - 1)
           for a in acc]
    return out, acc, weight


@pytest.mark.parametrize("seed", range(5))
def test_bit_exact_random_rows_and_blocks(seed):
    rng = np.random.default_rng(seed)
    for _ in range(6):
        n, d, rows = int(rng.integers(1, 90)), int(rng.integers(1, 5)), int(rng.integers(1, 4))
        scale = float(np.exp(rng.uniform(np.log(1e-4), np.log(2.0))))
        mult, shift = softmax_scale(scale)
        # Logits spread over a few units: rescale factors between 0 and 2**15.
        spread = rng.uniform(0.1, 8.0) / scale
        s = np.clip(np.round(rng.normal(rng.uniform(-1e6, 1e6), spread, (rows, n))),
                    -2 ** 31, 2 ** 31 - 1).astype(np.int64)
        s[0] = np.sort(s[0])                  # with contiguous blocks every block rescales
        v = rng.integers(-128, 128, size=(n, d))
        if rng.random() < 0.5:
            blocks = int(rng.integers(1, n + 1))
            parts = [list(range(b, min(b + blocks, n))) for b in range(0, n, blocks)]
        else:
            perm = rng.permutation(n)
            cuts = np.sort(rng.choice(np.arange(1, n), size=min(n - 1, int(rng.integers(0, 6))),
                                      replace=False)) if n > 1 else []
            parts = [list(p) for p in np.split(perm, cuts)]
            blocks = [np.asarray(p) for p in parts]
        for block_max in (False, True):
            ref = "block" if block_max else "running"
            got = on.attention_online(s, v, mult, shift, blocks, p_reference=ref)
            st = on.online_stages(s, v, mult, shift, blocks, p_reference=ref)
            assert got.dtype == np.int16 and got.shape == (rows, d)
            for r in range(rows):
                out, acc, weight = scalar_online(s[r].tolist(), v.tolist(), mult, shift, parts,
                                                 block_max)
                assert got[r].tolist() == out and st["acc"][r].tolist() == acc
                assert st["weight"][r] == weight


def test_one_block_is_the_row_relative_to_its_maximum():
    rng = np.random.default_rng(3)
    s = rng.integers(-4000, 4000, size=(5, 40))
    v = rng.integers(-128, 128, size=(40, 3))
    mult, shift = softmax_scale(0.002)
    st = on.online_stages(s, v, mult, shift, 40)
    assert np.all(st["rescales"] == 0)
    e = golden.vector.softmax_stages(s, mult, shift)["e"]
    p = (e * 255 + 2 ** 14) >> 15
    assert np.array_equal(st["weight"], p.sum(axis=1))
    assert np.array_equal(st["acc"], p @ v)


def test_block_reference_with_one_block_is_the_running_one():
    """One block: its maximum is the row's, G = 2**15, and the 8 extra bits of O, L and R's
    numerator cancel."""
    rng = np.random.default_rng(4)
    s = rng.integers(-4000, 4000, size=(5, 40))
    v = rng.integers(-128, 128, size=(40, 3))
    mult, shift = softmax_scale(0.002)
    run = on.online_stages(s, v, mult, shift, 40)
    blk = on.online_stages(s, v, mult, shift, 40, p_reference="block")
    assert np.array_equal(blk["acc"], run["acc"] << 8)
    assert np.array_equal(blk["weight"], run["weight"] << 8)
    assert np.array_equal(blk["out"], run["out"])
    with pytest.raises(ValueError, match="p_reference must be one of running, block"):
        on.online_stages(s, v, mult, shift, 40, p_reference="row")


def test_blocks_after_the_maximum_commute():
    """A block that does not raise the maximum rescales by exactly 2**15 (no change), so once
    the block holding every row's maximum ran, the rest may run in any order."""
    rng = np.random.default_rng(5)
    s = rng.integers(-3000, 3000, size=(4, 48))
    s[:, :8] += 10_000                     # every row's maximum in the first block
    v = rng.integers(-128, 128, size=(48, 5))
    mult, shift = softmax_scale(0.004)
    first = [np.arange(8)]
    rest = [np.arange(b, b + 8) for b in range(8, 48, 8)]
    ref = on.attention_online(s, v, mult, shift, first + rest)
    for k in range(3):
        order = [rest[i] for i in np.random.default_rng(k).permutation(len(rest))]
        assert np.array_equal(on.attention_online(s, v, mult, shift, first + order), ref)
    # Rising maxima rescale: the same blocks in reverse give another (close) result.
    rev = on.online_stages(s, v, mult, shift, (first + rest)[::-1])
    assert np.all(rev["rescales"] >= 1)
    assert np.max(np.abs(rev["out"] - ref)) <= 8


def test_uniform_row_is_the_mean_of_v():
    v = np.arange(-128, 128, 2).reshape(-1, 1)            # 128 keys, mean -1
    s = np.full((1, v.shape[0]), 77)
    mult, shift = softmax_scale(0.01)
    for blocks in (1, 7, 128):
        st = on.online_stages(s, v, mult, shift, blocks)
        assert st["weight"][0] == 255 * 128 and st["out"][0, 0] == -256


def test_rescale_rounding_is_clamped():
    """Rescales round O and L separately, so the final mean may leave [-128, 127] by a
    fraction: block 1 (V = -128, P = 255) is rescaled by F = 64 (y = 2304 with the identity
    scale pair): L = (255*64 + 2**14) >> 15 = 0 and O = -64; block 2 adds -128 * 255 and 255,
    a mean of -128.25, clamped to -2**15."""
    mult, shift = 1 << 15, 15                              # y = d
    s = np.array([[0, 2304]])
    v = np.array([[-128], [-128]])
    st = on.online_stages(s, v, mult, shift, 1, trace=True)
    assert st["blocks"][1]["factor"][0] == 64
    assert st["acc"][0, 0] == -64 - 128 * 255 and st["weight"][0] == 255
    assert (st["acc"][0, 0] * st["recip"][0] + 2 ** 31) >> 32 < on.OUT_MIN
    assert st["out"][0, 0] == on.OUT_MIN
    v = np.array([[127], [127]])
    st = on.online_stages(s, v, mult, shift, 1)
    assert on.OUT_MAX > st["out"][0, 0] > 127 * 256 - 1


def test_extreme_scores_and_shapes():
    mult, shift = softmax_scale(80.0)                      # everything but the maximum is 0
    s = np.array([[-2 ** 31, 2 ** 31 - 1, 0, 2 ** 31 - 1]])
    v = np.array([[1], [-7], [100], [5]])
    st = on.online_stages(s, v, mult, shift, 1)
    assert st["weight"][0] == 510 and st["out"][0, 0] == -256   # (-7 + 5) / 2
    one = on.attention_online(s[0], v, mult, shift, 2)       # a single row (n,)
    assert one.shape == (1,) and one[0] == -256


def test_box_blocks_and_block_reuse():
    grid = golden.VideoGrid(4, 6, 10)
    parts = on.box_blocks(grid, (2, 4, 4))
    assert len(parts) == 2 * 2 * 3 and sorted(np.concatenate(parts).tolist()) == list(range(240))
    assert parts[0].tolist()[:5] == [0, 1, 2, 3, 10] and len(parts[2]) == 2 * 4 * 2
    w = make_qkv("hunyuanvideo", "4x8x8", seed=1)
    kw = dict(full_bits=5, half_bits=3)
    oracle = golden.vector.pv_ops(w.v, w.grid, 1)["reduction"]
    even = on._block_v_reduction(w.v, w.grid, on.box_blocks(w.grid, (2, 2, 16)), "t", 2,
                                 **kw)
    rows = on._block_v_reduction(w.v, w.grid, on.contiguous_blocks(w.grid.n, 64), "t", 2, **kw)
    assert even == pytest.approx(oracle) and rows < 0.5 * oracle


def test_v_reuse_merges_inside_a_block():
    """Per block, adding a FULL follower's P into its anchor's (when both are in the block)
    and multiplying V gives the block's P @ V_eff: the hardware's merged form."""
    w = make_qkv("wan2.1", "4x8x8", seed=2)
    mult, shift = softmax_scale(w.scale)
    masks = window_masks(w.v, w.grid, "t", 2, 5, 3)
    v_eff = golden.window_effective_operand(w.v, masks, w.grid, "t", 2)
    s = golden.exact_matmul(w.q[:16], w.k.T)
    parts = on.box_blocks(w.grid, (2, 2, 16))
    st = on.online_stages(s, v_eff, mult, shift, parts, trace=True)
    own = _owner(w.grid, masks, "t", 2)
    for step in st["blocks"]:
        keys, p = step["keys"], step["p"]
        where = {int(k): i for i, k in enumerate(keys)}
        for c in range(0, w.v.shape[1], 17):
            merged = np.zeros_like(p)
            for i, key in enumerate(keys):
                merged[:, where.get(int(own[key, c]), i)] += p[:, i]
            assert np.array_equal(merged @ w.v[keys, c].astype(np.int64),
                                  step["partial"][:, c])
    assert on.block_max_partial(on.BLOCK_MAX) < 2 ** 23


def test_quality_holds_as_the_head_grows():
    """Section 14 loses most of P to rounding on 1,024 keys; section 15 stays at the float
    reuse path."""
    w = make_qkv("hunyuanvideo", "4x16x16", seed=0)
    r = on.online_attention_quality(w.q, w.k, w.v, w.grid,
                                    golden.ChannelGroups.from_preset("hunyuanvideo"), w.scale,
                                    queries=64)
    assert r["queries"] == 64 and r["blocks"] == 16
    assert abs(r["online"]["psnr"] - r["float_reuse"]["psnr"]) < 0.5
    assert r["online"]["psnr"] > r["row_softmax"]["psnr"] + 10
    assert r["online_exact"]["psnr"] > 60 and r["p_zero"] > 0.8 > 0.3 > r["p_zero_online"]
    assert r["v_reduction_blocks"] == pytest.approx(r["v_reduction"]) and r["v_reduction"] > 0.3


@pytest.mark.parametrize("blocks, message", [
    (0, "block must be an integer in"),
    (True, "blocks must be a block length"),
    ("64", "blocks must be a block length"),
    ([], "blocks must be a block length"),
    ([np.arange(3), np.arange(3, 5)], "cover every key 0..5 exactly once; key 5 appears 0"),
    ([np.arange(4), np.arange(3, 6)], "key 3 appears 2 times"),
    ([np.arange(6), np.array([], dtype=int)], r"blocks\[1\] must be a non-empty 1-D"),
    ([np.arange(5), np.array([6])], r"blocks\[1\] must hold key indices in \[0, 5\]"),
    ([np.arange(6.0)], r"blocks\[0\] must be a non-empty 1-D integer array"),
])
def test_bad_blocks(blocks, message):
    mult, shift = softmax_scale(0.01)
    with pytest.raises(ValueError, match=message):
        on.attention_online(np.zeros((2, 6), dtype=np.int64), np.zeros((6, 2), dtype=np.int8),
                            mult, shift, blocks)


def test_bad_operands():
    mult, shift = softmax_scale(0.01)
    s = np.zeros((2, 6), dtype=np.int64)
    with pytest.raises(ValueError, match=r"v must have shape \(keys, channels\) with keys = 6"):
        on.attention_online(s, np.zeros((5, 2), dtype=np.int8), mult, shift, 2)
    with pytest.raises(ValueError, match="v values must lie in"):
        on.attention_online(s, np.full((6, 2), 200), mult, shift, 2)
    with pytest.raises(ValueError, match="mult must be an integer in"):
        on.attention_online(s, np.zeros((6, 2), dtype=np.int8), 7, shift, 2)
    with pytest.raises(ValueError, match=r"box must be \(bt, by, bx\)"):
        on.box_blocks("2x2x2", (2, 2))
