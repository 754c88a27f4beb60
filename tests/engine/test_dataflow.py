"""The dataflow study's cycle models (``golden/engine/dataflow.py``, ``docs/dataflow.md``).

- the steps model without changes is ``engine_counters`` (pe, pe-sh) counter for counter;
- the fast per-quad greedy matcher is ``golden.dispatch.model.match``; per-row FIFOs of depth
  1 (or a feed of one step per cycle) are the step-synchronous array;
- every matcher candidate's slot sequences respect the port rule, cover each channel with work
  once, and give S bit-exact (``golden.attention_scores``);
- no candidate beats the ceiling on small random heads; the ceiling's work is the engine's.
"""

from __future__ import annotations

import zlib
from dataclasses import replace

import numpy as np
import pytest

from golden import ChannelGroups, attention_scores, make_qkv
from golden.dispatch.model import MatcherParams, match
from golden.engine.dataflow import (CANDIDATES, Candidate, Head, _fifo_steps, candidate_scores,
                                    ceiling, dataflow_counters, greedy_slots, load_npz_head,
                                    run_candidate, study)
from golden.engine.model import EngineParams, engine_counters
from token_data import smooth_tokens


def _head(name):
    if name == "hunyuanvideo":
        q, k, _ = make_qkv("hunyuanvideo", (2, 4, 8), seed=3)
        return (2, 4, 8), ChannelGroups.from_preset("hunyuanvideo"), q, k
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    g = {"3x5x4": (3, 5, 4), "2x6x5": (2, 6, 5), "4x4x4": (4, 4, 4)}[name]
    n = g[0] * g[1] * g[2]
    return g, ChannelGroups.from_sizes(4, 6, 6), smooth_tokens(rng, n, 16), smooth_tokens(rng, n, 16)


HEADS = ("3x5x4", "2x6x5", "4x4x4", "hunyuanvideo")
PARAMS = (EngineParams(), EngineParams(rows=2, cols=2, arrays=3, width=8, entries=8, clusters=2),
          EngineParams(rows=4, cols=2, arrays=2, width=12, entries=16))
MATCHERS = ("m3q", "m13", "m123", "m123-L16", "m123-2x2")


@pytest.mark.parametrize("name", HEADS)
@pytest.mark.parametrize("params", PARAMS, ids=("4x4p4", "2x2p3", "4x2p2"))
@pytest.mark.parametrize("sched,variant", ((False, "pe"), (True, "pe-sh")))
def test_steps_baseline_is_engine_counters(name, params, sched, variant):
    g, groups, q, k = _head(name)
    ref = engine_counters(q, k, g, groups, params, variant)
    base = Candidate("base", "steps", "", "", scheduled=sched)
    got = dataflow_counters(q, k, g, groups, base, params)
    assert got.cycles == ref.cycles
    assert got.busy == ref.busy_pe_cycles.sum()
    assert got.issued.tolist() == ref.issued.sum(axis=0).tolist()
    assert got.chunk_cycles.tolist() == ref.chunk_cycles.tolist()
    # Per-row FIFOs of depth 1, or fed one step per cycle, change nothing.
    for depth, feed in ((1, 4), (4, 1)):
        c = dataflow_counters(q, k, g, groups, replace(base, fifo_depth=depth, feed=feed), params)
        assert c.cycles == ref.cycles
    # A matcher with lookahead 1 never merges: the baseline again.
    c = dataflow_counters(q, k, g, groups, replace(base, match_passes=(1, 2, 3), lookahead=1),
                          params)
    assert (c.cycles, c.merged, c.busy) == (ref.cycles, 0, ref.busy_pe_cycles.sum())


@pytest.mark.parametrize("width,lookahead", ((4, 4), (2, 2), (3, 16), (1, 3), (8, 4)))
def test_greedy_slots_is_the_matcher(width, lookahead):
    rng = np.random.default_rng(width * 100 + lookahead)
    need = rng.choice(3, size=(300, width, 12), p=(0.5, 0.3, 0.2))
    need[:5] = 0                                   # batches without work
    ref = match(need, MatcherParams(width, 12, lookahead))
    got = greedy_slots(need, lookahead)
    assert got.slots.tolist() == ref.slots.tolist()
    assert got.batch.tolist() == ref.batch.tolist()
    assert got.a.tolist() == ref.a.tolist()
    assert got.b.tolist() == ref.b.tolist()


def test_fifo_unbounded_is_the_busiest_row():
    rng = np.random.default_rng(5)
    busy = rng.random((200, 4, 16)) < 0.4
    # Deep FIFOs and a feed as wide as the pass: each row only pays for its own work.
    assert (_fifo_steps(busy, 16, 16) == busy.sum(axis=2).max(axis=1)).all()
    # Never faster than the busiest row, never slower than the step-synchronous array.
    for depth, feed in ((2, 2), (4, 2), (8, 4)):
        t = _fifo_steps(busy, depth, feed)
        assert (t >= busy.sum(axis=2).max(axis=1)).all()
        assert (t <= busy.any(axis=1).sum(axis=1)).all()


@pytest.mark.parametrize("name", HEADS)
def test_matcher_with_fifos(name):
    """Per-row FIFOs on the matcher's slots: depth 1 is the matcher alone; deeper FIFOs only
    remove cycles; the busy count is the matcher's."""
    g, groups, q, k = _head(name)
    m123 = dataflow_counters(q, k, g, groups, CANDIDATES["m123"])
    one = dataflow_counters(q, k, g, groups, replace(CANDIDATES["m123-fifo4"], fifo_depth=1))
    assert (one.cycles, one.busy, one.merged) == (m123.cycles, m123.busy, m123.merged)
    for name in ("m123-fifo4", "m123-fifo8"):
        c = dataflow_counters(q, k, g, groups, CANDIDATES[name])
        assert c.cycles <= m123.cycles and c.busy == m123.busy


@pytest.mark.parametrize("name", HEADS)
@pytest.mark.parametrize("cand", MATCHERS + ("rowfifo4", "m123-fifo4"))
def test_candidate_scores_exact(name, cand):
    g, groups, q, k = _head(name)
    s = candidate_scores(q, k, g, groups, CANDIDATES[cand], EngineParams(width=8, entries=8))
    assert np.array_equal(s, attention_scores(q, k, g, groups))


@pytest.mark.parametrize("name", HEADS)
@pytest.mark.parametrize("cand", MATCHERS)
def test_matcher_counts_match_its_slots(name, cand):
    """The vectorized count merges exactly the pairs the slot sequences carry. (Both sides
    ordered, whose pre-passes have their own ports: the matcher shortens the chunks, and
    the orders must not change with it, as a snooping pre-pass's fallbacks could.)"""
    g, groups, q, k = _head(name)
    c = CANDIDATES[cand]
    base = EngineParams(sched_sides="qk")
    ref = dataflow_counters(q, k, g, groups, replace(c, match_passes=()), base)
    got = dataflow_counters(q, k, g, groups, c, base)
    assert got.merged > 0
    assert got.issued.sum() + got.merged == ref.issued.sum()
    assert got.busy <= ref.busy


def _ceilings(head, cand):
    p = cand.params()
    q, k = (head.k, head.q) if cand.transposed else (head.q, head.k)
    sched = cand.scheduled if cand.kind == "steps" else cand.variant in ("pe-sh", "full")
    return ceiling(q, k, head.grid, head.groups, p, scheduled=sched)


@pytest.mark.parametrize("seed", range(4))
def test_no_candidate_beats_the_ceiling(seed):
    rng = np.random.default_rng(seed)
    g = (2, 4, 8) if seed % 2 else (3, 5, 4)
    n = g[0] * g[1] * g[2]
    x = smooth_tokens(rng, n, 64)
    head = Head("random", "cogvideox-5b", "test", g, x, smooth_tokens(rng, n, 64))
    for name, cand in CANDIDATES.items():
        if name == "dense":
            continue
        cycles, busy, pes = run_candidate(head, cand)
        ce = _ceilings(head, cand)
        assert ce.free <= ce.quad_pair <= ce.quad_one and ce.quad_pair <= ce.passes
        assert cycles >= ce.quad_pair, name
        if cand.kind == "steps" or cand.variant != "dense":
            assert cycles >= ce.passes, name           # they all keep the pass structure
        merging = cand.kind == "steps" and cand.match_passes or cand.variant in ("pe-m", "full")
        if not merging:
            assert cycles >= ce.quad_one, name
            assert busy == ce.busy_one
            assert busy / (pes * (cycles - ce.overhead)) <= ce.utilization("quad_one") + 1e-12
        else:
            assert ce.busy_pair <= busy <= ce.busy_one


def test_ceiling_work_is_the_engine_work():
    g, groups, q, k = _head("hunyuanvideo")
    ce = ceiling(q, k, g, groups, EngineParams(), scheduled=False)
    pe = engine_counters(q, k, g, groups, EngineParams(), "pe")
    assert ce.busy_one == pe.busy_pe_cycles.sum()
    assert ce.quad_one <= pe.cycles


def test_study_rows_and_npz(tmp_path):
    g, groups, q, k = _head("hunyuanvideo")
    path = tmp_path / "head.npz"
    np.savez(path, q=q, k=k, grid=np.array(g), preset="hunyuanvideo")
    head = load_npz_head(path)
    assert head.grid.shape == g and head.preset == "hunyuanvideo"
    rows = study([head], ("dense", "pe", "full", "m123"))
    by = {r["candidate"]: r for r in rows}
    assert by["dense"]["speedup"] == 1.0 and by["pe"]["over_pe"] == 1.0
    assert by["full"]["gap_closed"] == 0.0
    assert by["ceiling"]["gap_closed"] == pytest.approx(1.0)
    assert by["ceiling"]["cycles"] <= by["m123"]["cycles"]
    np.savez(tmp_path / "bad.npz", q=q, k=k)
    with pytest.raises(ValueError, match="grid and preset"):
        load_npz_head(tmp_path / "bad.npz")


def test_pair_check_rejects_port_overflow():
    """The S check is not vacuous: two channels whose column needs exceed a byte are refused."""
    from golden.engine.dataflow import _check_pair
    from golden.numerics import HALF, NONE
    qc = np.full((2, 2), NONE, np.uint8)
    kc = np.array([[NONE, HALF], [HALF, HALF]], np.uint8)          # column 0 needs a byte at A
    with pytest.raises(AssertionError, match="overflow"):
        _check_pair(3, qc, kc, 0, 1, "col")
    _check_pair(3, qc, kc[1:], 0, 1, "col")                          # two nibbles fit
    with pytest.raises(AssertionError, match="overflow"):
        _check_pair(2, np.full((1, 2), HALF, np.uint8), np.full((1, 2), HALF, np.uint8), 0, 1, "row")
