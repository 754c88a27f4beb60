"""MergeMatcher: configuration checks, golden-model invariants against an independent
reference (an explicit pending buffer), and the Amaranth RTL against the golden model."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golden.dispatch.model import (SEL_BYTE_A, SEL_BYTE_B, SEL_NIB_A, SEL_NIB_AB, SEL_NIB_B,
                                   SEL_NONE, MatcherParams, match, matcher_slot_cycles,
                                   slot_select, work_units)
from kaleido_hw.config import ConfigError, KaleidoConfig
from kaleido_hw.dispatch.layouts import Sel
from kaleido_hw.dispatch.matcher import MergeMatcher


sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sim"))
from dispatch_codec import DispatchCodec  # noqa: E402
from stream_harness import run_stream  # noqa: E402


# -- configuration ------------------------------------------------------------------------------

@pytest.mark.parametrize("changes, match_", [
    (dict(matcher_lookahead=0), r"matcher_lookahead must be in \[1, 16\], got 0"),
    (dict(matcher_channels=0), r"matcher_channels must be in \[1, 64\]"),
    (dict(matcher_channels=12), r"sched_pattern_width must be a multiple of the matcher's "
                                r"channel batch matcher_channels \(12\), got 16"),
    (dict(cols=0), r"cols must be in \[1, 16\]"),
])
def test_bad_matcher_config_is_rejected(changes, match_):
    with pytest.raises(ConfigError, match=match_):
        KaleidoConfig(**changes)


def test_sel_encoding_matches_golden():
    assert [s.value for s in Sel] == [SEL_NONE, SEL_BYTE_A, SEL_BYTE_B, SEL_NIB_A, SEL_NIB_B,
                                      SEL_NIB_AB]
    assert slot_select([0, 2, 0, 1, 0, 1], [0, 0, 2, 0, 1, 1]).tolist() == list(range(6))
    with pytest.raises(ValueError, match="more than 2 work units"):
        slot_select([2], [1])


def test_work_units_reject_reserved_code():
    assert work_units([0, 1, 2]).tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match=r"0 \(FULL\), 1 \(HALF\) or 2 \(NONE\)"):
        work_units([3])


def test_codes_shape_is_checked():
    with pytest.raises(ValueError, match=r"codes must have shape \(B, 4, 16\)"):
        match(np.zeros((2, 16, 4), dtype=np.uint8))


# -- golden model -------------------------------------------------------------------------------

def reference_match(codes, L):
    """Independent restatement: a pending buffer holding up to L non-empty channels in
    order; the oldest pairs with the first compatible one in the buffer, else goes alone."""
    w = np.minimum(codes, 2)
    queue = [m for m in range(w.shape[1]) if w[:, m].any()]
    buffer, slots = [], []
    while queue or buffer:
        while queue and len(buffer) < L:
            buffer.append(queue.pop(0))
        a = buffer.pop(0)
        b = next((x for x in buffer if np.all(w[:, a] + w[:, x] <= 2)), None)
        if b is not None:
            buffer.remove(b)
        slots.append((a, -1 if b is None else b))
    return slots


@settings(max_examples=80, deadline=None)
@given(c=st.integers(1, 6), m=st.integers(1, 20), lookahead=st.integers(1, 10),
       nb=st.integers(1, 4), seed=st.integers(0, 2**32 - 1),
       weights=st.sampled_from([(1, 1, 1), (6, 3, 1), (2, 5, 1), (1, 1, 4), (9, 0, 1)]))
def test_match_matches_reference_and_invariants(c, m, lookahead, nb, seed, weights):
    rng = np.random.default_rng(seed)
    p = np.array(weights, float) / sum(weights)
    codes = rng.choice(3, size=(nb, c, m), p=p).astype(np.uint8)
    r = match(codes, MatcherParams(cols=c, channels=m, lookahead=lookahead))
    w = np.minimum(codes, 2)
    covered = np.zeros_like(w, dtype=np.int64)
    for n in range(nb):
        sl = r.batch == n
        assert list(zip(r.a[sl].tolist(), r.b[sl].tolist())) == reference_match(codes[n], lookahead)
        assert r.slots[n] == sl.sum()
        if sl.any():
            assert r.first[sl].tolist() == [True] + [False] * (sl.sum() - 1)
            assert r.last[sl].tolist() == [False] * (sl.sum() - 1) + [True]
    for n, a, b, sel in zip(r.batch, r.a, r.b, r.sel):
        assert w[n][:, a].any() and (b < 0 or w[n][:, b].any())     # no all-FULL channel
        wb = w[n][:, b] if b >= 0 else np.zeros(c, w.dtype)
        assert np.all(w[n][:, a] + wb <= 2)                         # a port carries 2 units
        assert np.array_equal(sel, slot_select(w[n][:, a], wb))
        covered[n][:, a] += w[n][:, a] > 0
        if b >= 0:
            covered[n][:, b] += w[n][:, b] > 0
    assert np.array_equal(covered, (w > 0).astype(np.int64))         # each unit exactly once
    if lookahead == 1:
        assert not r.merged.any()


def test_slot_cycle_model_against_a_loop():
    rng = np.random.default_rng(0)
    slots = rng.integers(0, 5, size=40)
    offer = np.cumsum(rng.integers(0, 6, size=40))
    acc, cyc = matcher_slot_cycles(offer, slots)
    busy, expect_acc, expect_cyc = -10**9, [], []
    for o, s in zip(offer, slots):
        a = max(o, busy)
        expect_acc.append(a)
        expect_cyc += [a + 1 + j for j in range(s)]
        busy = a + max(s, 1)
    assert acc.tolist() == expect_acc and cyc.tolist() == expect_cyc


# -- RTL in the Amaranth simulator ---------------------------------------------------------------

VARIANT = KaleidoConfig(cols=3, matcher_channels=6, sched_pattern_width=12, matcher_lookahead=2,
                        token_id_width=5)


def _batches(cfg, nb, rng):
    p = MatcherParams.from_config(cfg)
    probs = rng.dirichlet([1, 1, 1], size=nb)
    codes = np.stack([rng.choice(3, size=(p.cols, p.channels), p=pr) for pr in probs])
    codes[2] = 0                                   # batches without work
    codes[3] = 0
    codes[5] = 1                                   # all HALF: merges in pairs
    codes = codes.astype(np.uint8)
    ids = rng.integers(0, 1 << cfg.token_id_width, size=(nb, p.cols))
    return p, codes, ids


def held_input_cycles(offer, slots):
    """Cycles of a ``held_input`` matcher without output stalls: a batch starts at
    ``max(offer, free)``, issues its slots in the cycles after and is taken with its last one
    (at once without work); the matcher is free again in the cycle after it is taken."""
    free, taken, cycles = 0, [], []
    for o, n in zip(offer, slots):
        start = max(int(o), free)
        cycles += [start + 1 + j for j in range(n)]
        taken.append(start + n)
        free = start + n + 1
    return taken, cycles


@pytest.mark.parametrize("held", [False, True], ids=["registered", "held"])
@pytest.mark.parametrize("cfg", [KaleidoConfig(), VARIANT], ids=["default", "c3m6l2"])
@pytest.mark.parametrize("gap, stall", [(0.0, 0.0), (0.4, 0.0), (0.3, 0.5)])
def test_rtl_matches_golden(cfg, gap, stall, held):
    rng = np.random.default_rng(11)
    p, codes, ids = _batches(cfg, 16, rng)
    codec = DispatchCodec(cfg)
    g = match(codes, p)
    expected = [(a, b, mg, s, tuple(int(t) for t in ids[n]), f, l)
                for (n, a, b, mg, s, f, l) in g.as_tuples()]
    run = run_stream(MergeMatcher(cfg, held_input=held),
                     [codec.matcher_in(ids[n], codes[n]) for n in range(16)],
                     len(expected), gap=gap, stall=stall, seed=5)
    assert [codec.matcher_slot(v) for v in run.out_items] == expected
    if stall == 0.0:
        if held:
            acc, cyc = held_input_cycles(run.offer_cycles, g.slots)
        else:
            acc, cyc = (x.tolist() for x in matcher_slot_cycles(run.offer_cycles, g.slots))
        assert run.in_cycles == acc
        assert run.out_cycles == cyc


@pytest.mark.parametrize("lookahead", [1, 2, 3, 4])
def test_rtl_lookahead_window_boundary(lookahead):
    """Channels 0..L-1 all need column 0; channel L fits with channel 0 but is outside its
    window. The RTL must agree with the golden model of its own L and differ from L+1."""
    cfg = KaleidoConfig(matcher_lookahead=lookahead)
    p = MatcherParams.from_config(cfg)
    codes = np.zeros((1, 4, 16), dtype=np.uint8)
    codes[0, 0, :lookahead] = 2
    codes[0, 1, lookahead] = 1
    codec = DispatchCodec(cfg)
    run = run_stream(MergeMatcher(cfg), [codec.matcher_in([1, 2, 3, 4], codes[0])],
                     int(match(codes, p).slots.sum()))
    got = [codec.matcher_slot(v)[:3] for v in run.out_items]
    own = [(a, b, mg) for (_, a, b, mg, *_rest) in match(codes, p).as_tuples()]
    wider = MatcherParams(lookahead=lookahead + 1)
    other = [(a, b, mg) for (_, a, b, mg, *_rest) in match(codes, wider).as_tuples()]
    assert got == own and got != other
