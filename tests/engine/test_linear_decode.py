"""The ReusePE's linear mode (docs/linear.md): the per-PE decode table of a window's steps
through the ReusePE's term rules and its reference model, the window units, and the arrays'
functional model against golden.linear."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from window_cases import draw_window_layer

from golden import FULL, HALF, NONE, VideoGrid, linear
from golden.engine.linear import (ABSENT, ANCHOR, DECODE, FOLLOWER1, FOLLOWER2, WORK, decode,
                                  linear_by_decode, linear_units)
from golden.pe.model import Op, ReusePEModel, pe_contributions, step_contributions
from golden.pe.modes import linear_words


CODES = (FULL, HALF, NONE, ABSENT)
COST = {FULL: 0.0, HALF: 0.5, NONE: 1.0, ABSENT: 0.0}


# -- the decode table, exhaustively over the codes of a window -------------------------------

def follower_values(rng, anchor, code, size):
    """Values a follower with ``code`` may hold next to ``anchor`` (the PE relies only on:
    HALF has the anchor's high nibble; FULL multiplies the anchor's value)."""
    if code == HALF:
        return ((anchor >> 4) << 4) + rng.integers(0, 16, size)
    if code in (NONE, FULL):
        return rng.integers(-128, 128, size)
    return np.zeros(size, np.int64)


def same(x, y):
    return np.array_equal(np.broadcast_to(x, np.shape(y)), y)


def effective(anchor, value, code):
    return {FULL: anchor, HALF: value, NONE: value, ABSENT: 0 * value}[code]


@pytest.mark.parametrize("window", [2, 3])
def test_decode_exact_for_every_code_pair(window):
    """For every (c1, c2), A + F1 + F2 through the PE model give R0 = a*b, R1 = f1*b,
    R2 = f2*b with the effective follower values, and each PE spends the minimum number of
    follower steps: ceil(cost(c1) + cost(c2)) (HALF 1/2, NONE 1)."""
    rng = np.random.default_rng(window)
    size = 4096
    c2_codes = CODES if window == 3 else (ABSENT,)
    for c1, c2 in itertools.product(CODES, c2_codes):
        a = rng.integers(-128, 128, size)
        a[:256] = np.arange(-128, 128)                        # every anchor value
        b = rng.integers(-128, 128, size)
        f1 = follower_values(rng, a, c1, size)
        f2 = follower_values(rng, a, c2, size)
        lanes = {ANCHOR: (a, 0), FOLLOWER1: (f1, f2), FOLLOWER2: (f2, 0)}
        regs = [0, 0, 0]
        steps = 0
        for kind in range(window):
            word = decode(kind, c1, c2)
            a0, a1 = lanes[kind]
            contrib, busy = pe_contributions(word, a0, a1, b)
            assert np.all(busy == (word.op != Op.IDLE)), (kind, c1, c2)
            assert bool(WORK[kind, c1, c2]) == (word.op != Op.IDLE)
            regs = [r + c for r, c in zip(regs, contrib)]
            steps += kind > 0 and word.op != Op.IDLE
        assert same(regs[0], a * b), (c1, c2)
        assert same(regs[1], effective(a, f1, c1) * b), (c1, c2)
        assert same(regs[2], effective(a, f2, c2) * b), (c1, c2)
        assert steps == math.ceil(COST[c1] + COST[c2]), (c1, c2)


def test_decode_anchor_matches_uniform_word():
    """The per-PE anchor word equals docs/pe.md's uniform linear-mode anchor word driven with
    the follower codes (the PE's code 3 acts as NONE, like ABSENT)."""
    rng = np.random.default_rng(3)
    a, b = rng.integers(-128, 128, 2048), rng.integers(-128, 128, 2048)
    uniform = linear_words(3).anchor
    for c1, c2 in itertools.product(CODES, CODES):
        mine, _ = pe_contributions(decode(ANCHOR, c1, c2), a, 0, b)
        theirs, _ = step_contributions(uniform, a, 0, b, c1, c2, 2, 2)
        for r in range(3):
            assert np.array_equal(np.broadcast_to(mine[r], a.shape),
                                  np.broadcast_to(theirs[r], a.shape)), (c1, c2, r)


def test_decode_table_matches_function_and_rejects_bad_kind():
    for k, c1, c2 in itertools.product(range(3), range(4), range(4)):
        word = decode(k, c1, c2)
        assert DECODE[0][k, c1, c2] == word.op and DECODE[1][k, c1, c2] == word.split
        assert list(DECODE[2][k, c1, c2]) == list(word.parts)
        assert word.op == Op.IDLE or word.split == 1      # always split on the activation
    with pytest.raises(ValueError, match="kind must be"):
        decode(3, FULL, FULL)


@pytest.mark.parametrize("window", [2, 3])
def test_pe_cycle_model_runs_blocks_and_drains(window):
    """One PE (rows = 2) through ReusePEModel, the RTL's reference: several blocks back to
    back, random codes per channel, the decoded words; R0 drains at step d0, R1 at d1
    (window 3), the last register with the next block's first step (which clears all three),
    bubbles until the last drain wave has the port. Every drained value and every busy flag is as predicted."""
    rng = np.random.default_rng(window)
    rows, n, acc = 2, 5, 24
    pe = ReusePEModel(acc_width=acc)
    last = 3 if window == 3 else 2               # Drain code of the last register
    c2_codes = CODES if window == 3 else (ABSENT,)
    expected, drained = [], []
    for block in range(6):
        c1 = rng.choice(CODES, n)
        c2 = rng.choice(c2_codes, n)
        a = rng.integers(-128, 128, n)
        f1 = np.array([follower_values(rng, a[i:i + 1], c1[i], 1)[0] for i in range(n)])
        f2 = np.array([follower_values(rng, a[i:i + 1], c2[i], 1)[0] for i in range(n)])
        b = rng.integers(-128, 128, n)
        zero = np.zeros(n, int)
        lanes = {ANCHOR: (a, zero), FOLLOWER1: (f1, f2), FOLLOWER2: (f2, zero)}
        steps = [(kind, i) for kind in range(window) for i in range(n)
                 if kind == ANCHOR or WORK[kind, c1[i], c2[i]]]
        nf1 = sum(1 for k, _ in steps if k == FOLLOWER1)
        nf2 = sum(1 for k, _ in steps if k == FOLLOWER2)
        # drain waves hold the column port R steps: R0 once the A steps are done, R1 once
        # F1 is (window 3), the last register with the next block's first step
        d0 = max(n, rows)
        d1 = max(n + nf1, d0 + rows)
        total = max(n + nf1 + nf2, d1 + rows) if window == 3 else max(n + nf1, d0 + rows)
        drains = {d0: 1, d1: 2} if window == 3 else {d0: 1}
        for s in range(total):
            if s < len(steps):
                kind, i = steps[s]
                word = decode(kind, c1[i], c2[i])
                a0, a1, bv = int(lanes[kind][0][i]), int(lanes[kind][1][i]), int(b[i])
            else:
                word, a0, a1, bv = decode(ANCHOR, FULL, FULL).with_(op=Op.IDLE), 0, 0, 0
            if s == 0:
                word = word.with_(clear=0b111, drain=last if block else 0)
            elif s in drains:
                word = word.with_(drain=drains[s])
            out = pe.step(a0=a0, a1=a1, ctrl=word.pack(), b=bv)
            assert out["busy"] == (word.op != Op.IDLE)
            if word.drain:
                drained.append(out["drain_out__data"])
        eff1 = np.array([effective(a[i], f1[i], c1[i]) for i in range(n)])
        eff2 = np.array([effective(a[i], f2[i], c2[i]) for i in range(n)])
        regs = [int(a @ b), int(eff1 @ b), int(eff2 @ b)]
        expected += [regs[0], regs[1]] + ([regs[2]] if window == 3 else [])
    out = pe.step(ctrl=decode(ANCHOR, FULL, FULL).with_(op=Op.IDLE, drain=last).pack())
    drained.append(out["drain_out__data"])
    assert drained == expected


# -- units -----------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 5, 4), (5, 2, 7), (4, 3, 3)])
@pytest.mark.parametrize("window", [2, 3])
def test_units_cover_every_token_once(shape, window):
    grid = VideoGrid(*shape)
    coords = np.indices(shape).reshape(3, -1)
    for axis in range(3):
        m = linear_units(grid, axis, window)
        assert np.array_equal(np.sort(m[m >= 0]), np.arange(grid.n))
        assert np.all(m[:, 0] >= 0) and np.all(np.diff(m[:, 0]) > 0)    # token order
        for j in range(1, window):
            ok = m[:, j] >= 0
            assert np.array_equal(m[ok, j], m[ok, 0] + j * grid.stride(axis))
            # present exactly when the coordinate exists
            want = coords[axis][m[:, 0]] + j < shape[axis]
            assert np.array_equal(ok, want)
        assert np.all(coords[axis][m[:, 0]] % window == 0)


# -- functional model vs golden.linear -------------------------------------------------------

def styled(rng, style, n, c):
    if style == "random":
        return rng.integers(-128, 128, (n, c))
    if style == "smooth":
        base = rng.integers(-100, 100, c)
        return (base + rng.integers(-6, 7, (n, c))).clip(-128, 127)
    if style == "equal":            # every window FULL
        return np.broadcast_to(rng.integers(-128, 128, c), (n, c))
    if style == "alternating":      # every follower NONE (sign flips)
        return np.where(np.arange(n)[:, None] % 2 == 0, 100, -100) + 0 * np.arange(c)
    # nibble edges: values around multiples of 16 (HALF/NONE and FULL thresholds)
    return (16 * rng.integers(-8, 8, (n, c)) + rng.choice([-1, 0, 1, 15], (n, c))).clip(-128, 127)


STYLES = ("random", "smooth", "equal", "alternating", "edges")


@st.composite
def linear_cases(draw):
    grid, cin, directions, window, full_bits, half_bits = draw_window_layer(draw, 4, 3)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = styled(rng, draw(st.sampled_from(STYLES)), grid.n, cin).astype(np.int8)
    w = rng.integers(-128, 128, (cin, draw(st.integers(1, 5)))).astype(np.int8)
    return grid, x, w, directions, window, full_bits, half_bits


@settings(max_examples=60, deadline=None)
@given(linear_cases())
def test_engine_equals_golden_linear(case):
    grid, x, w, directions, window, full_bits, half_bits = case
    y = linear_by_decode(x, w, grid, directions, window, full_bits, half_bits)
    assert np.array_equal(y, linear(x, w, grid, directions, window, full_bits, half_bits))
    dense = linear_by_decode(x, w, grid, directions, window, full_bits, half_bits, reuse=False)
    assert np.array_equal(dense, x.astype(np.int64) @ w.astype(np.int64))


def test_errors_name_the_parameter():
    grid = VideoGrid(2, 2, 2)
    x = np.zeros((8, 4), np.int8)
    w = np.zeros((4, 3), np.int8)
    with pytest.raises(ValueError, match="half_bits must be at least 3"):
        linear_by_decode(x, w, grid, half_bits=2)
    with pytest.raises(ValueError, match="w must have shape"):
        linear_by_decode(x, np.zeros((5, 3), np.int8), grid)
    with pytest.raises(ValueError, match="window"):
        linear_by_decode(x, w, grid, window=4)
    with pytest.raises(ValueError, match="x must"):
        linear_by_decode(x.astype(np.float32), w, grid)


def test_doc_decode_tables_match_decode():
    """The three per-PE tables of docs/linear.md are the ones :func:`decode` implements."""
    import re
    from pathlib import Path

    from golden.pe.model import Part

    text = (Path(__file__).resolve().parents[2] / "docs" / "linear.md").read_text()
    order = (FULL, HALF, NONE, ABSENT)
    letters_mul = {Part.PROD: "P", Part.HIGH: "H", Part.LOW: "L", Part.NONE: "-"}
    letters_low = {Part.LOW: "0", Part.HIGH: "1", Part.NONE: "-"}
    for kind, name in enumerate(("A", "F1", "F2")):
        head = text.index(f"| {name}: c1 \\ c2 |")
        lines = text[head:].splitlines()[2:6]
        for c1, line in zip(order, lines):
            cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")][1:]
            assert len(cells) == 4, line
            for c2, cell in zip(order, cells):
                word = decode(kind, c1, c2)
                if word.op == Op.IDLE:
                    want = "idle"
                elif word.op == Op.MUL:
                    want = "MUL/r " + "".join(letters_mul[p] for p in word.parts)
                else:
                    want = "LOWr " + "".join(letters_low[p] for p in word.parts)
                assert re.sub(r"\s+", " ", cell) == want, (name, c1, c2, cell)
