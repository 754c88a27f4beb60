"""P @ V on the PE arrays (``golden/engine/pv.py``, ``docs/linear.md`` "P @ V on the PE
arrays"): the decode table entry by entry, the functional model against
``golden.vector.attention_int(p, V_eff)`` and ``pv_merged``, and the cycle model against a
reference that walks every block step by step with scalar arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

import golden
from golden.engine import linear as lin
from golden.engine.pv import (B_PACK, B_V0, B_V1, B_V2, OP_IDLE, OP_MUL, OP_PAIR, PV_WORK,
                              PvTiming, decode, pv_acc_width, pv_counters, pv_engine,
                              pv_p_words, pv_v_words)
from golden.numerics import FULL, HALF, NONE
from golden.vector import attention_int, pv_merged
from golden.window import window_effective_operand, window_masks

ABSENT = lin.ABSENT


def _term(op, x_lo, x_hi, b):
    """Scalar (t0 + t1) of the P @ V datapath, written independently of ``pv_terms``."""
    b = int(b)
    if op == OP_IDLE:
        return 0
    if op == OP_MUL:                   # b = 16*(b >> 4) + (b & 15), arithmetic shift
        return x_lo * (b & 15) + 16 * x_hi * (b >> 4)
    assert op == OP_PAIR
    return x_lo * (b & 15) + x_hi * ((b >> 4) & 15)


def _lanes(sel, p):
    return sum(p[j] for j in range(3) if (sel >> j) & 1)


def _column_byte(bsel, v):
    if bsel == B_V0:
        return v[0]
    if bsel == B_V1:
        return v[1]
    if bsel == B_V2:
        return v[2]
    assert bsel == B_PACK
    byte = (v[1] & 15) | ((v[2] & 15) << 4)
    return byte - 256 if byte >= 128 else byte


# -- the decode table ---------------------------------------------------------------------------

def test_work_table_is_the_linear_layers():
    """Each follower step has work exactly where the linear mode's does (the same pairing of
    HALF low nibbles into one step), and each PE spends ceil(cost(c1) + cost(c2)) steps."""
    assert np.array_equal(PV_WORK, lin.WORK)
    cost = {FULL: 0, HALF: 0.5, NONE: 1, ABSENT: 0}
    for c1 in range(4):
        for c2 in range(4):
            assert PV_WORK[0, c1, c2]
            assert PV_WORK[1:, c1, c2].sum() == int(np.ceil(cost[c1] + cost[c2]))


@pytest.mark.parametrize("c1", range(4))
@pytest.mark.parametrize("c2", range(4))
def test_every_entry_is_exact(c1, c2):
    """Over A, F1 and F2, a PE adds exactly sum_j p_j * V_eff[j] for a unit whose followers
    have codes (c1, c2), on random P and V consistent with the codes (mixed FULL / HALF
    entries included: they are exact too)."""
    rng = np.random.default_rng(16 * c1 + c2)
    for _ in range(400):
        p = [int(x) for x in rng.integers(0, 256, 3)]
        v0 = int(rng.integers(-128, 128))
        v, veff = [v0, 0, 0], [v0, 0, 0]
        for j, c in ((1, c1), (2, c2)):
            if c == ABSENT:
                p[j] = 0
                v[j] = veff[j] = 0
            elif c == FULL:
                v[j] = int(rng.integers(-128, 128))   # anything: V_eff is the anchor's
                veff[j] = v0
            elif c == HALF:
                v[j] = veff[j] = (v0 & ~15) | int(rng.integers(0, 16))
            else:
                v[j] = veff[j] = int(rng.integers(-128, 128))
        got = 0
        for kind in range(3):
            w = decode(kind, c1, c2)
            b = _column_byte(w.bsel, v)
            assert -128 <= b <= 127
            got += _term(w.op, _lanes(w.lo_sel, p), _lanes(w.hi_sel, p), b)
        assert got == sum(pj * vj for pj, vj in zip(p, veff))


def test_operand_widths():
    """The pre-added lanes stay within 10 unsigned bits (3 * 255), the largest term's
    magnitude within 128 * 765."""
    for kind in range(3):
        for c1 in range(4):
            for c2 in range(4):
                w = decode(kind, c1, c2)
                assert bin(w.lo_sel).count("1") * 255 < 1 << 10
                assert _term(w.op, 765, 765, -128) >= -128 * 765


# -- data -------------------------------------------------------------------------------------

def _v(rng, n, d, kind):
    if kind == "random":
        return rng.integers(-128, 128, (n, d)).astype(np.int8)
    if kind == "smooth":
        base = rng.integers(-128, 128, (1, d))
        return np.clip(base + rng.integers(-6, 7, (n, d)), -128, 127).astype(np.int8)
    if kind == "nibble":       # same high nibble, random low nibble: HALF everywhere
        base = rng.integers(-8, 8, (1, d)) * 16
        return (base + rng.integers(0, 16, (n, d))).astype(np.int8)
    if kind == "equal":
        return np.full((n, d), rng.integers(-128, 128), np.int8)
    if kind == "alternating":
        return np.where(np.arange(n)[:, None] % 2 == 0, 127, -128).repeat(d, 1).astype(np.int8)
    raise AssertionError(kind)


def _p(rng, q, n, kind):
    if kind == "extreme":
        return rng.choice(np.array([0, 255]), (q, n))
    return rng.integers(0, 256, (q, n))


def _case(seed):
    rng = np.random.default_rng(seed)
    grid = golden.VideoGrid(*(int(x) for x in rng.integers(1, 7, 3)))
    d = int(rng.integers(1, 11))
    q = int(rng.integers(1, 10))
    window = int(rng.integers(2, 4))
    dirs = rng.integers(0, 3, d) if rng.random() < 0.5 else int(rng.integers(0, 3))
    vkind = ["random", "smooth", "nibble", "equal", "alternating"][seed % 5]
    v = _v(rng, grid.n, d, vkind)
    p = _p(rng, q, grid.n, "extreme" if seed % 7 == 0 else "random")
    return grid, d, q, window, dirs, v, p


# -- functional model --------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(60))
def test_engine_is_bit_exact(seed):
    grid, d, q, window, dirs, v, p = _case(seed)
    masks = window_masks(v, grid, dirs, window)
    v_eff = window_effective_operand(v, masks, grid, dirs, window)
    ref = attention_int(p, v_eff)
    got = pv_engine(p, v, grid, dirs, window)
    assert np.array_equal(got, ref)
    assert np.array_equal(got, pv_merged(p, v, grid, dirs, window))
    assert np.array_equal(pv_engine(p, v, grid, dirs, window, reuse=False), attention_int(p, v))


@pytest.mark.parametrize("bits", [(4, 3), (6, 3), (7, 5), (5, 4)])
def test_engine_thresholds(bits):
    rng = np.random.default_rng(sum(bits))
    grid = golden.VideoGrid(6, 3, 4)
    v = _v(rng, grid.n, 6, "smooth")
    p = rng.integers(0, 256, (5, grid.n))
    for window in (2, 3):
        for axis in range(3):
            masks = window_masks(v, grid, axis, window, *bits)
            ref = attention_int(p, window_effective_operand(v, masks, grid, axis, window))
            assert np.array_equal(pv_engine(p, v, grid, axis, window, *bits), ref)


# -- cycle model --------------------------------------------------------------------------------

def _units(grid, axis, window):
    """{unit key: [token or -1] * window} by coordinates, independent of ``linear_units``."""
    units = {}
    length = grid.shape[axis]
    for tok, coord in enumerate(np.indices(grid.shape).reshape(3, -1).T):
        key = list(coord)
        key[axis] = coord[axis] // window
        units.setdefault(tuple(key), [-1] * window)[coord[axis] % window] = tok
    return list(units.values())


def _reference(p, v, grid, dirs, window, rows, cols, arrays, reuse, timing=PvTiming()):
    """Walk every block step by step: O from scalar PE terms, and every counter."""
    q, d = p.shape[0], v.shape[1]
    axes = np.broadcast_to(np.asarray(dirs), (d,))
    masks = window_masks(v, grid, dirs, window) if reuse else np.full(v.shape, NONE, np.uint8)
    o = np.zeros((q, d), np.int64)
    cnt = dict(issued=[0, 0, 0], skipped=[0, 0, 0], bubbles=0, blocks=0, busy=0,
               array_busy=[0] * arrays, array_steps=[0] * arrays, groups=0)
    k = 0
    for axis in range(3):
        chans = [c for c in range(d) if axes[c] == axis]
        if not chans:
            continue
        cnt["groups"] += 1
        units = _units(grid, axis, window)
        for cb in range(0, len(chans), cols):
            block_chans = chans[cb:cb + cols]
            a = k % arrays
            k += 1
            for rb in range(0, q, rows):
                block_rows = range(rb, min(rb + rows, q))
                cnt["blocks"] += 1
                steps = 0
                for members in units:
                    lanes = {i: [int(p[i, t]) if t >= 0 else 0 for t in members] + [0] * (
                        3 - window) for i in block_rows}
                    for kind in range(window):
                        words = {}
                        for c in block_chans:
                            codes = [int(masks[t, c]) if t >= 0 else ABSENT for t in members[1:]]
                            codes += [ABSENT] * (2 - len(codes))
                            vals = [int(v[t, c]) if t >= 0 else 0 for t in members]
                            vals += [0] * (3 - window)
                            words[c] = (decode(kind, *codes), vals)
                        if kind > 0 and all(w.op == OP_IDLE for w, _ in words.values()):
                            cnt["skipped"][kind] += 1
                            continue
                        cnt["issued"][kind] += 1
                        steps += 1
                        for c, (w, vals) in words.items():
                            b = _column_byte(w.bsel, vals)
                            for i in block_rows:
                                o[i, c] += _term(w.op, _lanes(w.lo_sel, lanes[i]),
                                                 _lanes(w.hi_sel, lanes[i]), b)
                                if w.op != OP_IDLE:
                                    cnt["busy"] += 1
                                    cnt["array_busy"][a] += 1
                length = max(steps, rows)
                cnt["bubbles"] += length - steps
                cnt["array_steps"][a] += length
    cycles = timing.load_base + max(cnt["array_steps"]) + 1 + timing.tail_base + rows + cols
    return o, cnt, cycles


def _check_counters(got, cnt, cycles):
    assert got.issued == cnt["issued"]
    assert got.skipped == cnt["skipped"]
    assert got.bubbles == cnt["bubbles"]
    assert got.blocks == cnt["blocks"]
    assert got.groups == cnt["groups"]
    assert got.busy_pe_cycles == cnt["busy"]
    assert got.array_busy == cnt["array_busy"]
    assert got.array_steps == cnt["array_steps"]
    assert got.cycles == cycles


@pytest.mark.parametrize("seed", range(40))
def test_counters_match_the_step_walk(seed):
    grid, d, q, window, dirs, v, p = _case(1000 + seed)
    rng = np.random.default_rng(seed)
    rows, cols, arrays = (int(x) for x in (rng.integers(1, 5), rng.integers(1, 5),
                                           rng.integers(1, 4)))
    reuse = seed % 4 != 3
    o, cnt, cycles = _reference(p, v, grid, dirs, window, rows, cols, arrays, reuse)
    masks = window_masks(v, grid, dirs, window)
    v_eff = window_effective_operand(v, masks, grid, dirs, window) if reuse else v
    assert np.array_equal(o, attention_int(p, v_eff))
    got = pv_counters(p, v, grid, dirs, window, rows, cols, arrays, reuse=reuse)
    _check_counters(got, cnt, cycles)
    assert got.steps == sum(cnt["array_steps"])
    if window == 2:
        assert got.skipped[2] == 0 and got.issued[2] == 0


def test_counters_edges():
    """Single token, a queries count below R, more arrays than column blocks, a group shorter
    than a window, blocks shorter than R (bubbles)."""
    rng = np.random.default_rng(7)
    for shape, d, q, rows, cols, arrays, window in [
            ((1, 1, 1), 1, 1, 4, 4, 3, 2), ((2, 1, 1), 3, 2, 4, 2, 4, 3),
            ((1, 2, 2), 5, 9, 2, 3, 1, 3), ((5, 1, 1), 8, 3, 8, 4, 2, 2)]:
        grid = golden.VideoGrid(*shape)
        v = _v(rng, grid.n, d, "smooth")
        p = rng.integers(0, 256, (q, grid.n))
        for axis in range(3):
            o, cnt, cycles = _reference(p, v, grid, axis, window, rows, cols, arrays, True)
            got = pv_counters(p, v, grid, axis, window, rows, cols, arrays)
            _check_counters(got, cnt, cycles)


def test_dense_counters():
    """Reuse off: every key is one step per block and every PE is busy in each: busy
    PE-cycles = queries * keys * channels, steps = keys per block."""
    rng = np.random.default_rng(3)
    grid = golden.VideoGrid(4, 3, 5)
    v = _v(rng, grid.n, 7, "random")
    p = rng.integers(0, 256, (6, grid.n))
    for window in (2, 3):
        got = pv_counters(p, v, grid, [0, 1, 2, 0, 1, 2, 0], window, 4, 4, reuse=False)
        assert got.busy_pe_cycles == 6 * grid.n * 7
        assert sum(got.issued) == grid.n * got.blocks
        assert got.bubbles == 0


def test_reuse_saves_steps_on_smooth_v():
    rng = np.random.default_rng(5)
    grid = golden.VideoGrid(8, 2, 2)
    v = _v(rng, grid.n, 8, "smooth")
    p = rng.integers(0, 256, (8, grid.n))
    for window in (2, 3):
        dense = pv_counters(p, v, grid, 0, window, 4, 4, reuse=False)
        reuse = pv_counters(p, v, grid, 0, window, 4, 4)
        assert reuse.cycles < dense.cycles
        assert reuse.busy_pe_cycles < dense.busy_pe_cycles


# -- errors and widths ------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, match", [
    (dict(p=np.full((2, 8), 256)), "p values must lie in"),
    (dict(p=np.zeros((2, 7), np.int64)), "p must have one column per key"),
    (dict(p=np.zeros(8, np.int64)), "p must be a 2-D integer array"),
    (dict(p=np.zeros((2, 8))), "p must be a 2-D integer array"),
    (dict(v=np.zeros((8, 3))), "v must be an int8 array"),
    (dict(window=4), "window must be an integer in"),
    (dict(half_bits=2), "half_bits must be at least 3"),
    (dict(rows=0), "rows must be an integer in"),
    (dict(reuse=1), "reuse must be True or False"),
])
def test_errors(kwargs, match):
    args = dict(p=np.zeros((2, 8), np.int64), v=np.zeros((8, 3), np.int8), grid="2x2x2",
                directions=0, window=2, half_bits=3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        pv_counters(**args)
    if "rows" not in kwargs:
        with pytest.raises(ValueError, match=match):
            pv_engine(**args)


def test_decode_refuses_bad_codes():
    with pytest.raises(ValueError, match="kind must be"):
        decode(3, NONE, NONE)
    with pytest.raises(ValueError, match="c2 must be a code"):
        decode(0, NONE, 4)


def test_acc_width():
    assert pv_acc_width(1) == (128 * 255).bit_length() + 1
    assert pv_acc_width(256) == 24
    assert pv_acc_width(257) == 24
    assert pv_acc_width(258) == 25
    # an integer-softmax row: sum(P) <= 255 + keys // 2
    assert pv_acc_width(1024, 255 + 512) == 18


def test_p_and_v_words_pack_blocks_bytewise():
    """The write-stream words of P (R queries per key) and V (C channels per key), in block
    then key order, padding queries and channels 0, V in two's complement."""
    p = np.array([[1, 2], [3, 4], [255, 0]])
    assert pv_p_words(p, 2) == [(0, 0, 1 | 3 << 8), (0, 1, 2 | 4 << 8), (1, 0, 255), (1, 1, 0)]
    v = np.array([[-1, 2, 3], [4, -128, 127]], np.int8)
    assert pv_v_words(v, 2) == [(0, 0, 0xFF | 2 << 8), (0, 1, 4 | 0x80 << 8), (1, 0, 3),
                                (1, 1, 127)]
    with pytest.raises(ValueError, match="rows"):
        pv_p_words(p, 0)
    with pytest.raises(ValueError, match="2-D"):
        pv_v_words(np.zeros(3, np.int8), 2)
