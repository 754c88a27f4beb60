"""The golden PE model (golden/pe/model.py) and its operating points (golden/pe/modes.py):
the terms are exact products, vector and scalar evaluation agree, every quad schedule and the
linear mode are exact for any data consistent with its codes, LOW_PAIR merging is exact
where ``pairable`` says so."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import golden.pe.model as gm
from golden.pe.modes import QUAD_ORDERS, linear_words, paired, quad_passes


SPLITS = list(gm.Split)
ALL_SELS = [gm.Sel(p, r, c) for p in gm.Part for r in gm.RowCond for c in gm.ColCond]


def test_mul_terms_are_the_exact_product_for_every_operand_pair():
    a, b = np.meshgrid(np.arange(-128, 128), np.arange(-128, 128))
    a, b = a.ravel(), b.ravel()
    for split_col in (True, False):
        t0, t1 = gm.terms(np.full(a.shape, gm.Op.MUL), np.full(a.shape, split_col), a, 0, b)
        assert np.array_equal(t0 + t1, a * b)
        y, x = (b, a) if split_col else (a, b)
        assert np.array_equal(t1, 16 * x * (y >> 4)) and np.array_equal(t0, x * (y & 15))


def test_lane_terms():
    a0, a1, b = np.array([-128, 127, -1]), np.array([5, -128, 127]), np.array([-128, 127, -2])
    op = np.full(3, gm.Op.LOW)
    assert [t.tolist() for t in gm.terms(op, True, a0, a1, b)] == \
        [(a0 * (b & 15)).tolist(), (a1 * (b & 15)).tolist()]
    assert [t.tolist() for t in gm.terms(op, False, a0, a1, b)] == \
        [((a0 & 15) * b).tolist(), ((a1 & 15) * b).tolist()]
    t0, t1 = gm.terms(np.full(3, gm.Op.LOW_PAIR), False, a0, a1, b)
    assert t0.tolist() == (a0 * (b & 15)).tolist() and t1.tolist() == (a1 * ((b >> 4) & 15)).tolist()
    assert gm.terms(gm.Op.IDLE, True, 100, 100, 100) == (0, 0)


def test_vectorized_and_scalar_evaluation_agree():
    """The cycle model evaluates with Python ints; sequencers use arrays: same answers."""
    rng = np.random.default_rng(0)
    n = 4000
    ops = rng.integers(0, 4, n)
    codes = [rng.integers(0, 4, n) for _ in range(4)]
    a0, a1, b = (rng.integers(-128, 128, n) for _ in range(3))
    for split in SPLITS:
        sc = gm.effective_split_col(split, codes[0], codes[2])
        t = gm.terms(ops, sc, a0, a1, b)
        for sel in ALL_SELS[::3]:
            g = gm.gates(sel, ops, sc, *codes)
            for i in range(0, n, 97):
                s_sc = gm.effective_split_col(split, int(codes[0][i]), int(codes[2][i]))
                assert s_sc == sc[i]
                ts = gm.terms(int(ops[i]), s_sc, int(a0[i]), int(a1[i]), int(b[i]))
                gs = gm.gates(sel, int(ops[i]), s_sc, *(int(c[i]) for c in codes))
                assert ts == (t[0][i], t[1][i]) and gs == (g[0][i], g[1][i])


def test_gate_rules_by_hand():
    """A few gate decisions spelled out (docs/pe.md section 2.2)."""
    F, H, N = gm.Code.FULL, gm.Code.HALF, gm.Code.NONE
    share_col = gm.Sel(gm.Part.PROD, col=gm.ColCond.SHARE)
    rest_row = gm.Sel(gm.Part.PROD, row=gm.RowCond.REST)
    mul = gm.Op.MUL
    assert gm.gates(share_col, mul, True, N, N, F, N) == (True, True)     # FULL: both parts
    assert gm.gates(share_col, mul, True, N, N, H, N) == (False, True)    # HALF, COL: HIGH
    assert gm.gates(share_col, mul, False, N, N, H, N) == (False, False)  # HALF, ROW split
    assert gm.gates(rest_row, mul, False, H, N, N, N) == (True, False)    # rest: LOW only
    assert gm.gates(rest_row, mul, True, H, N, N, N) == (True, True)      # wrong side: all
    # LOW_PAIR: lane j uses qc_j / kc_j; SHARE1 always qc1.
    assert gm.gates(gm.Sel(gm.Part.PROD, col=gm.ColCond.REST), gm.Op.LOW_PAIR, False,
                    N, N, F, H) == (False, True)
    assert gm.gates(gm.Sel(gm.Part.PROD, row=gm.RowCond.SHARE1), mul, True, N, F, N, N) == \
        (True, True)
    assert gm.gates(gm.Sel(gm.Part.PROD), gm.Op.IDLE, True, N, N, N, N) == (False, False)
    assert gm.gates(gm.Sel(gm.Part.HIGH, col=gm.ColCond.NEVER), mul, True, N, N, N, N) == \
        (False, False)


def test_resolve_is_exact_for_every_selector_and_code():
    """A schedule word resolved for one PE's codes (what the arrays' decoders do) adds
    exactly what the word with the codes adds: 4,000 random words (every selector, op and
    split, each register its own selector) under random codes, including the spare 3."""
    rng = np.random.default_rng(1)
    a0, a1, b = (rng.integers(-128, 128, 64) for _ in range(3))
    seen = set()
    for _ in range(4000):
        sels = [ALL_SELS[i] for i in rng.integers(0, len(ALL_SELS), 3)]
        word = gm.Ctrl(op=gm.Op(rng.integers(4)), split=SPLITS[rng.integers(4)], sel0=sels[0],
                       sel1=sels[1], sel2=sels[2])
        codes = [int(c) for c in rng.integers(0, 4, 4)]
        want, busy = gm.step_contributions(word, a0, a1, b, *codes)
        got, got_busy = gm.pe_contributions(word.resolve(*codes), a0, a1, b)
        for g, w in zip(got, want):
            assert np.array_equal(np.broadcast_to(g, a0.shape), np.broadcast_to(w, a0.shape))
        assert np.all(got_busy == busy)
        seen.update(sels)
    assert len(seen) == len(ALL_SELS)


def _step(m, word, qc0=gm.Code.NONE, qc1=gm.Code.NONE, kc0=gm.Code.NONE, kc1=gm.Code.NONE, **kw):
    """One model cycle of a schedule word, resolved for the codes as a decoder would."""
    return m.step(ctrl=word.resolve(qc0, qc1, kc0, kc1), **kw)


def _follower(anchor, codes, lows, others):
    return np.where(codes == gm.Code.FULL, anchor,
                    np.where(codes == gm.Code.HALF, (anchor >> 4) * 16 + lows, others))


int8s = st.integers(-128, 127)


@st.composite
def quad_data(draw):
    d = draw(st.integers(1, 12))
    vec = lambda elems: np.array(draw(st.lists(elems, min_size=d, max_size=d)), dtype=np.int64)
    A, a, Fo, fo = (vec(int8s) for _ in range(4))
    q, k = vec(st.integers(0, 2)), vec(st.integers(0, 2))
    F = _follower(A, q, vec(st.integers(0, 15)), Fo)
    f = _follower(a, k, vec(st.integers(0, 15)), fo)
    return A, a, F, f, q, k


def _run_quad(passes, A, a, F, f, q, k):
    m = gm.ReusePEModel(24)
    drained = []
    for n, p in enumerate(passes):
        rows, cols = (A if p.rows == "anchor" else F), (a if p.cols == "anchor" else f)
        for c in range(len(A)):
            word = p.first_word(drain_previous=n > 0) if c == 0 else p.word
            out = _step(m, word, int(q[c]), gm.Code.FULL, int(k[c]), gm.Code.FULL,
                        a0=int(rows[c]), b=int(cols[c]), a1=-128)
            if out["drain_out__valid"]:
                drained.append(out["drain_out__data"])
    drained.append(m.r[0])
    return dict(zip([p.tile for p in passes], drained))


@settings(max_examples=60, deadline=None)
@given(quad_data(), st.sampled_from(QUAD_ORDERS), st.sampled_from(SPLITS),
       st.sampled_from(["direct", "rotate"]))
def test_every_quad_schedule_is_exact(data, order, split, moves):
    if moves == "rotate" and order != "t1-first":
        return
    A, a, F, f, q, k = data
    got = _run_quad(quad_passes(order, split, moves), A, a, F, f, q, k)
    assert got == {0: int(A @ a), 1: int(A @ f), 2: int(F @ a), 3: int(F @ f)}


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([p.word for o in QUAD_ORDERS for p in quad_passes(o)]),
       st.lists(st.tuples(int8s, int8s, st.integers(0, 2), st.integers(0, 2)),
                min_size=2, max_size=2))
def test_pairing_where_pairable_equals_two_mul_steps(word, chans):
    """One LOW_PAIR step adds exactly what the two MUL steps it replaces add."""
    N = gm.Code.NONE
    if not all(gm.pairable(word, q, N, k, N) for _, _, q, k in chans):
        return
    (x0, c0, q0, k0), (x1, c1, q1, k1) = chans
    single = [gm.step_contributions(word, x, 0, c, q, N, k, N)[0] for x, c, q, k in chans]
    b = (c0 & 15) | ((c1 & 15) << 4)
    b -= 256 if b & 0x80 else 0
    merged, _ = gm.step_contributions(paired(word), x0, x1, b, q0, q1, k0, k1)
    assert merged == [s0 + s1 for s0, s1 in zip(*single)]


def test_pairable_cases_exist():
    """Where the reference schedule can merge channels (so the test above is not vacuous)."""
    F, H, N = gm.Code.FULL, gm.Code.HALF, gm.Code.NONE
    t0, t1, t2, t3 = quad_passes()
    ok = lambda p, q, k: bool(gm.pairable(p.word, q, N, k, N))
    assert {(q, k) for q in (F, H, N) for k in (F, H, N) if ok(t1, q, k)} == \
        {(H, H), (N, H), (N, F)}
    assert {(q, k) for q in (F, H, N) for k in (F, H, N) if ok(t3, q, k)} == \
        {(F, F), (F, H), (F, N), (H, F), (N, F), (H, H), (N, H)}
    assert not ok(t0, H, H)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 3), st.data())
def test_linear_mode_is_exact(window, data):
    d = data.draw(st.integers(1, 10))
    vec = lambda e: np.array(data.draw(st.lists(e, min_size=d, max_size=d)), dtype=np.int64)
    x, w = vec(int8s), vec(int8s)
    codes = [vec(st.integers(0, 2)) for _ in range(window - 1)]
    fol = [_follower(x, c, vec(st.integers(0, 15)), vec(int8s)) for c in codes]
    words = linear_words(window)
    m = gm.ReusePEModel(24)
    qc1 = codes[1] if window == 3 else np.full(d, gm.Code.NONE)
    for c in range(d):
        word = words.anchor.with_(clear=0b111) if c == 0 else words.anchor
        _step(m, word, int(codes[0][c]), int(qc1[c]), a0=int(x[c]), b=int(w[c]))
    for c in range(d):
        cs = [int(cc[c]) for cc in codes]
        if window == 3 and cs == [gm.Code.HALF, gm.Code.HALF]:
            _step(m, words.both_half, cs[0], cs[1], a0=int(fol[0][c]), a1=int(fol[1][c]),
                  b=int(w[c]))
            continue
        for i, word in enumerate((words.follower1, words.follower2)[:window - 1]):
            if cs[i] != gm.Code.FULL:
                _step(m, word, cs[i], a0=int(fol[i][c]), b=int(w[c]))
    assert m.r[:window] == [int(x @ w)] + [int(fv @ w) for fv in fol]


def test_moves_clear_drain_and_wrap():
    m = gm.ReusePEModel(8)
    def put(k):   # a0*b into R_k only
        parts = [gm.Part.NONE] * 3
        parts[k] = gm.Part.PROD
        return gm.PECtrl(op=gm.Op.MUL, split=gm.Split.COL, parts=tuple(parts))
    for k, v in enumerate((1, 2, 3)):
        m.step(a0=v, b=1, ctrl=put(k))
    assert m.r == [1, 2, 3]
    out = m.step(ctrl=gm.PECtrl(move=gm.Move.ROTATE, drain=gm.Drain.R2))
    assert m.r == [2, 3, 0] and (out["drain_out__valid"], out["drain_out__data"]) == (1, 3)
    m.step(ctrl=gm.PECtrl(move=gm.Move.R1_TO_R0, clear=0b100))
    assert m.r == [3, 0, 0]
    m.step(ctrl=gm.PECtrl(move=gm.Move.R2_TO_R0, clear=0b001))   # clear applies after move
    assert m.r == [0, 0, 0]
    m.step(a0=127, b=127, ctrl=put(0))                           # 16129 wraps in 8 bits
    assert m.r[0] == ((16129 + 128) % 256) - 128
    out = m.step(drain_valid=1, drain_data=-7)
    assert (out["drain_out__valid"], out["drain_out__data"], out["busy"]) == (1, -7, 0)
    # IDLE takes nothing whatever the parts say.
    out = m.step(a0=5, b=5, ctrl=gm.PECtrl(op=gm.Op.IDLE, parts=(gm.Part.PROD,) * 3))
    assert m.r[1:] == [0, 0] and out["busy"] == 0


def test_baseline_model():
    m = gm.BaselinePEModel(24)
    m.step(a0=-128, b=-128, ctrl=gm.BaselineCtrl(acc=1, clear=1))
    out = m.step(a0=3, b=4, ctrl=gm.BaselineCtrl(acc=1, drain=1))
    assert (m.r0, out["drain_out__data"], out["busy"]) == (16384 + 12, 16384, 1)
    assert m.step(rst=1, a0=1, b=1, ctrl=gm.BaselineCtrl(acc=1))["r0"] == 0


def test_bad_inputs_are_rejected():
    with pytest.raises(ValueError, match="acc_width must be an integer >= 2"):
        gm.ReusePEModel(1)
    with pytest.raises(ValueError, match="control field clear must be in"):
        gm.Ctrl(clear=9).pack()
    with pytest.raises(ValueError, match="needs a MUL word"):
        gm.pairable(gm.Ctrl(op=gm.Op.LOW), 0, 0, 0, 0)
    with pytest.raises(ValueError, match="order must be one of"):
        quad_passes("t3-first")
    with pytest.raises(ValueError, match="moves='rotate' needs"):
        quad_passes("t2-first", moves="rotate")
    with pytest.raises(ValueError, match="window must be 2 or 3"):
        linear_words(4)


def test_codes_match_the_numerics_contract():
    from golden import numerics
    for name in ("FULL", "HALF", "NONE"):
        if hasattr(numerics, name):
            assert getattr(numerics, name) == gm.Code[name]
