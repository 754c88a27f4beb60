"""ClusterScheduler: configuration checks, golden-model invariants against an independent
reference, and the Amaranth RTL against the golden model (entries and cycles)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golden.dispatch.model import (SchedulerParams, draw_pivot_offsets, lfsr_advance, lfsr_step,
                                   patterns_from_codes, popcount, schedule,
                                   scheduler_output_cycles)
from kaleido_hw.config import ConfigError, KaleidoConfig
from kaleido_hw.dispatch.scheduler import ClusterScheduler


sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sim"))
from dispatch_codec import DispatchCodec  # noqa: E402
from stream_harness import run_stream  # noqa: E402


# -- configuration ------------------------------------------------------------------------------

@pytest.mark.parametrize("changes, match", [
    (dict(sched_clusters=5), r"sched_clusters must divide sched_entries \(64\), got 5"),
    (dict(sched_clusters=1), r"sched_clusters must be in \[2, 16\]"),
    (dict(sched_entries=2), r"sched_entries must be in \[4, 256\]"),
    (dict(sched_pattern_width=20), r"sched_pattern_width must be a multiple of the matcher's "
                                   r"channel batch matcher_channels \(16\), got 20"),
    (dict(sched_pattern_width=6, matcher_channels=2), r"sched_pattern_width must be a multiple of 4"),
    (dict(sched_lfsr_seed=0), r"sched_lfsr_seed must be in \[1, 65535\]"),
    (dict(token_id_width=0), r"token_id_width must be in \[1, 32\]"),
])
def test_bad_scheduler_config_is_rejected(changes, match):
    with pytest.raises(ConfigError, match=match):
        KaleidoConfig(**changes)


def test_generate_rejects_bad_config_before_writing(tmp_path):
    from kaleido_hw.cli import main
    cfg = tmp_path / "bad.toml"
    cfg.write_text("sched_entries = 64\nsched_clusters = 6\n")
    out = tmp_path / "out"
    assert main(["generate", "--config", str(cfg), "--out", str(out),
                 "--top", "cluster_scheduler"]) == 2
    assert not out.exists()


# -- golden model -------------------------------------------------------------------------------

def test_lfsr_is_maximal_and_matches_its_definition():
    s, n = 0xACE1, 0
    while True:
        nxt = lfsr_step(s)
        fb = ((s >> 0) ^ (s >> 2) ^ (s >> 3) ^ (s >> 5)) & 1
        assert nxt == (s >> 1) | (fb << 15)
        s, n = nxt, n + 1
        if s == 0xACE1:
            break
    assert n == 65535


def test_pivot_draws_stream_across_calls():
    offs, state = draw_pivot_offsets(0x1234, 4, 16, batches=5)
    assert offs.min() >= 0 and offs.max() < 16
    first, mid = draw_pivot_offsets(0x1234, 4, 16, batches=2)
    rest, end = draw_pivot_offsets(mid, 4, 16, batches=3)
    assert np.array_equal(np.vstack([first, rest]), offs) and end == state
    # Offset k of a batch is (16-step word * Q) >> 16.
    s = 0x1234
    for k in range(4):
        s = lfsr_advance(s, 16)
        assert offs[0, k] == (s * 16) >> 16


def reference_schedule(pats, E, K, seed):
    """Independent restatement of the rule: each arrival takes its clusters in order of
    (distance, index) and joins the first that is not full."""
    Q = E // K
    offs, _ = draw_pivot_offsets(seed, K, Q, len(pats) // E)
    clusters = []
    for b in range(len(pats) // E):
        batch = [int(p) for p in pats[b * E:(b + 1) * E]]
        pivots = [batch[k * Q + int(offs[b, k])] for k in range(K)]
        sizes = [0] * K
        for p in batch:
            prefs = sorted(range(K), key=lambda k: (bin(p ^ pivots[k]).count("1"), k))
            k = next(k for k in prefs if sizes[k] < Q)
            sizes[k] += 1
            clusters.append(k)
    return np.array(clusters)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), k=st.sampled_from([2, 3, 4, 8]), q=st.integers(1, 12),
       w=st.integers(1, 24), seed=st.integers(1, 0xFFFF), nb=st.integers(1, 3))
def test_schedule_matches_reference_and_invariants(data, k, q, w, seed, nb):
    E = k * q
    p = SchedulerParams(entries=E, pattern_width=w, clusters=k, seed=seed)
    bias = data.draw(st.sampled_from([0.5, 0.1, 0.9]))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    bits = rng.random((nb * E, w)) < bias
    pats = (bits * (1 << np.arange(w))).sum(axis=1)
    r = schedule(pats, p)
    assert np.array_equal(r.cluster.ravel(), reference_schedule(pats, E, k, seed))
    for b in range(nb):
        assert np.array_equal(np.sort(r.order[b]), np.arange(E))       # a permutation
        assert np.array_equal(np.bincount(r.cluster[b], minlength=k), [q] * k)
        assert np.array_equal(r.cluster[b][r.order[b]], r.out_cluster[b])
        # Within a queue, arrival order is kept.
        for c in range(k):
            assert np.all(np.diff(r.order[b][c * q:(c + 1) * q]) > 0)
        # Each pivot lands in its own stratum.
        assert np.array_equal(r.pivots[b] // q, np.arange(k))


def test_patterns_from_codes_bit_order():
    codes = np.zeros((2, 32), dtype=np.uint8)
    codes[0, 0] = 1          # channel 0 HALF -> bit 0 of pattern 0
    codes[0, 17] = 2         # channel 17 NONE -> bit 1 of pattern 1
    codes[1, 15] = 1
    assert patterns_from_codes(codes, 16).tolist() == [[1, 2], [1 << 15, 0]]
    assert popcount(np.array([0, 1, 0xFFFF, 2**63 + 1], dtype=np.uint64)).tolist() == [0, 1, 16, 2]


def test_output_cycle_model_rejects_impossible_input_timing():
    p = SchedulerParams()
    assert scheduler_output_cycles([63, 127], p)[1, 0] == 127 + 64 + 5
    with pytest.raises(ValueError, match="at least entries per batch"):
        scheduler_output_cycles([63, 100], p)


# -- RTL in the Amaranth simulator ---------------------------------------------------------------

VARIANT = KaleidoConfig(sched_entries=24, sched_clusters=3, sched_pattern_width=12,
                        matcher_channels=6, token_id_width=10, sched_lfsr_seed=0x1234)


def _stream(cfg, nb, rng):
    p = SchedulerParams.from_config(cfg)
    ids = rng.choice(1 << cfg.token_id_width, size=nb * p.entries, replace=False)
    pats = rng.integers(0, 1 << p.pattern_width, size=nb * p.entries)
    pats[:p.entries] = pats[0]                 # one all-equal batch: every tie and spill
    return p, ids, pats


@pytest.mark.parametrize("cfg", [KaleidoConfig(), VARIANT], ids=["default", "24x12x3"])
@pytest.mark.parametrize("gap, stall", [(0.0, 0.0), (0.3, 0.0), (0.3, 0.6), (0.0, 0.9)])
def test_rtl_matches_golden(cfg, gap, stall):
    rng = np.random.default_rng(7)
    p, ids, pats = _stream(cfg, 4, rng)
    codec = DispatchCodec(cfg)
    golden = schedule(pats, p)
    expected = golden.output(ids, pats)
    run = run_stream(ClusterScheduler(cfg), [codec.sched_in(a, b) for a, b in zip(ids, pats)],
                     len(expected), gap=gap, stall=stall, seed=3, settle=2 * p.entries + 8)
    got = [codec.sched_out(v) for v in run.out_items]
    assert got == expected
    if stall == 0.0:
        last = np.array(run.in_cycles).reshape(-1, p.entries)[:, -1]
        assert run.out_cycles == scheduler_output_cycles(last, p).ravel().tolist()
    if gap == 0.0 and stall == 0.0:
        assert run.in_cycles == list(range(len(ids)))     # never refused, one per cycle
        assert run.out_cycles[-1] - run.out_cycles[0] == len(ids) - 1
    if stall >= 0.9:
        # Heavy back-pressure fills both output banks: the assign stage stalls and the
        # input is refused for a while (the stall path is exercised, nothing is lost).
        assert max(np.diff(run.in_cycles)) > 1


def test_ids_only_output_banks():
    """``out_patterns=False`` (the OrderUnit's build): the same ids, clusters, flags and
    cycles, the pattern 0, under gaps and back-pressure."""
    cfg = KaleidoConfig()
    p, ids, pats = _stream(cfg, 3, np.random.default_rng(11))
    codec = DispatchCodec(cfg)
    expected = [(a, 0, c, d) for a, _, c, d in schedule(pats, p).output(ids, pats)]
    for gap, stall in [(0.0, 0.0), (0.3, 0.6)]:
        run = run_stream(ClusterScheduler(cfg, out_patterns=False),
                         [codec.sched_in(a, b) for a, b in zip(ids, pats)], len(expected),
                         gap=gap, stall=stall, seed=5, settle=2 * p.entries + 8)
        assert [codec.sched_out(v) for v in run.out_items] == expected
        if stall == 0.0:
            last = np.array(run.in_cycles).reshape(-1, p.entries)[:, -1]
            assert run.out_cycles == scheduler_output_cycles(last, p).ravel().tolist()


def test_all_equal_batch_fills_clusters_in_index_order():
    """The all-equal batch of the RTL test ties everywhere: ties go to the lower index, so
    the queues fill 0, 1, 2, 3 in arrival order (a wrong tie rule would show here)."""
    cfg = KaleidoConfig()
    p, ids, pats = _stream(cfg, 1, np.random.default_rng(1))
    r = schedule(pats, p)
    # All-equal: cluster 0 fills first, then 1, 2, 3 in arrival order.
    assert r.cluster[0].tolist() == sorted(r.cluster[0].tolist())
    assert r.cluster[0][0] == 0 and r.cluster[0][-1] == p.clusters - 1
