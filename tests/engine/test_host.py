"""Host library of the streaming engine core (``kaleido_hw/engine/host.py``): box choice,
serpentine double-buffered order, plan counts, and S assembled from boxes equal to the
whole-grid golden S bit for bit (the reuse counters that differ, and why)."""

from __future__ import annotations


import numpy as np
import pytest

from golden import ChannelGroups, attention_scores, make_qkv, oracle_ops, reuse_masks
from golden.engine.commands import Compute, Load
from golden.engine.program import Memory, box_coords, run_program
from golden.numerics import VideoGrid
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.host import (HeadAddrs, assemble_s, box_counts, choose_box,
                                    command_order, plan_counts, plan_head, read_s, reuse_axes,
                                    run_head, split_axes, whole_grid_s, write_operands)
from token_data import smooth_tokens as _smooth


CFG = KaleidoConfig()
SMALL = KaleidoConfig(engine_max_tokens=16, engine_max_head_dim=32)
G16 = ChannelGroups.from_sizes(4, 6, 6)


def _qk(grid, d, seed):
    rng = np.random.default_rng(seed)
    n = VideoGrid(*grid).n
    return _smooth(rng, n, d), _smooth(rng, n, d)


# -- box choice -------------------------------------------------------------------------------

@pytest.mark.parametrize("grid, groups, limit, want", [
    ((4, 16, 16), "hunyuanvideo", 64, (2, 2, 16)),     # all axes reused: even t and y
    ((3, 5, 7), "hunyuanvideo", 64, (3, 5, 4)),        # odd axes kept whole where they fit
    ((2, 4, 8), "hunyuanvideo", 64, (2, 4, 8)),        # the whole grid fits: one box
    ((1, 9, 9), "hunyuanvideo", 16, (1, 4, 4)),        # 9 = 8 + 1: even extents, padded
    ((1, 9, 9), "hunyuanvideo", 18, (1, 2, 9)),        # x whole (odd), y even
    ((5, 3, 3), ChannelGroups.from_sizes(0, 8, 0), 16, (5, 1, 3)),   # only t reused
])
def test_choose_box(grid, groups, limit, want):
    box = choose_box(grid, groups, limit)
    assert box == want
    assert int(np.prod(box)) <= limit and not split_axes(grid, groups, box)


def test_choose_box_minimizes_boxes_then_padding():
    """Against a brute force over every box within the limit that keeps the pairs."""
    for grid in [(3, 6, 10), (2, 7, 9), (6, 6, 6), (1, 1, 13)]:
        for limit in (8, 16, 24, 64):
            box = choose_box(grid, "wan2.1", limit)
            nb = lambda b: int(np.prod(box_counts(grid, b)))       # noqa: E731
            key = lambda b: (nb(b), nb(b) * int(np.prod(b)))        # noqa: E731
            best = min(key((t, h, w)) for t in range(1, grid[0] + 1)
                       for h in range(1, grid[1] + 1) for w in range(1, grid[2] + 1)
                       if t * h * w <= limit and not split_axes(grid, "wan2.1", (t, h, w)))
            assert key(box) == best and int(np.prod(box)) <= limit


def test_choose_box_errors():
    with pytest.raises(ValueError, match=r"no box of at most max_tokens = 4 tokens .* at least "
                                         r"2x2x2 = 8 tokens"):
        choose_box((4, 4, 4), "hunyuanvideo", 4)
    with pytest.raises(ValueError, match="max_tokens must be a positive integer"):
        choose_box((4, 4, 4), "hunyuanvideo", 0)
    assert reuse_axes(ChannelGroups.from_sizes(0, 4, 4)) == (0, 1)
    assert split_axes((4, 6, 8), "hunyuanvideo", (1, 3, 8)) == (0, 1)
    assert split_axes((1, 3, 8), "hunyuanvideo", (1, 3, 8)) == ()


# -- command order ----------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_serpentine_double_buffered_order(n):
    steps = command_order(n)
    assert sorted((s.qi, s.ki) for s in steps) == [(i, j) for i in range(n) for j in range(n)]
    assert [s.qi for s in steps] == [i for i in range(n) for _ in range(n)]   # Q outer
    for i in range(n):
        row = [s.ki for s in steps if s.qi == i]
        assert row == (list(range(n)) if i % 2 == 0 else list(range(n - 1, -1, -1)))
    # One Q load per Q box; K reloaded except at every row turn.
    assert sum(s.load_q for s in steps) == n
    assert sum(s.load_k for s in steps) == n * n - (n - 1)
    for prev, s in zip(steps, steps[1:]):
        assert s.load_k == (s.ki != prev.ki) and s.load_q == (s.qi != prev.qi)
        # A new box never goes into the bank the previous step reads (it can load meanwhile).
        if s.load_q:
            assert s.q_bank != prev.q_bank
        else:
            assert s.q_bank == prev.q_bank
        if s.load_k:
            assert s.k_bank != prev.k_bank
        else:
            assert s.k_bank == prev.k_bank
    with pytest.raises(ValueError, match="n_boxes must be a positive integer"):
        command_order(0)


def test_program_prefetches_the_next_box_before_the_compute():
    plan = plan_head(SMALL, (2, 4, 8), 16, G16)
    cmds = plan.commands
    assert plan.n_boxes > 2
    computes = [i for i, c in enumerate(cmds) if isinstance(c, Compute)]
    loads_of = [int(s.load_q) + int(s.load_k) for s in plan.steps]
    for j, at in enumerate(computes):
        # Before COMPUTE j: the loads of steps 0 .. j+1 (step j+1's box loads meanwhile).
        issued = sum(isinstance(c, Load) for c in cmds[:at])
        assert issued == sum(loads_of[:j + 2])


# -- S equality -------------------------------------------------------------------------------

@pytest.mark.parametrize("cfg, grid, groups, variant", [
    (SMALL, (2, 4, 8), G16, None),                     # divisible, full variant
    (SMALL, (3, 5, 7), G16, "pe"),                     # odd, non-divisible: padding
    (SMALL, (1, 7, 3), ChannelGroups.from_sizes(4, 6, 6, directions=(2, 2, 1)), "full"),
    (SMALL, (5, 2, 3), ChannelGroups((0, 2, 1, 0, 2, 1, 1, 2), (1, 0, 2)), "pe-sh"),
    (SMALL, (3, 3, 5), G16, "dense"),
    (KaleidoConfig(engine_max_tokens=24), (2, 6, 6), "cogvideox-5b", "pe-m"),
])
def test_s_from_boxes_equals_whole_grid(cfg, grid, groups, variant):
    g = ChannelGroups.from_preset(groups) if isinstance(groups, str) else groups
    q, k = _qk(grid, g.head_dim, seed=sum(grid))
    run = run_head(cfg, q, k, grid, g, variant=variant)
    want = whole_grid_s(q, k, grid, g, cfg.full_bits, cfg.half_bits, run.plan.variant)
    assert run.plan.n_boxes > 1
    assert np.array_equal(run.s, want)
    assert np.array_equal(assemble_s(run.result), want)
    if run.plan.variant != "dense":
        assert not np.array_equal(want, q.astype(np.int64) @ k.astype(np.int64).T)  # reuse bites


def test_engine_model_path_equals_whole_grid():
    """Every block through golden.engine.model (orders, decode table, matcher, planes)."""
    grid = (3, 4, 5)
    q, k = _qk(grid, 16, seed=11)
    cfg = SMALL.replace(rows=2, cols=2, engine_arrays=2)
    run = run_head(cfg, q, k, grid, G16, engine=True)
    assert np.array_equal(run.s, attention_scores(q, k, grid, G16))
    assert all(b.engine is not None for b in run.result.blocks)
    assert run.result.counters["cycles"] == sum(int(b.engine.cycles) for b in run.result.blocks)


def test_reuse_counters_versus_the_whole_grid():
    """On grid tokens the per-box codes are the grid's, so the real-token oracle counts
    summed over blocks equal the whole grid's; the products the engine runs include the
    padding ((boxes x box_tokens)^2 d), and so do ``full``/``half``/``none``."""
    grid = (3, 5, 7)
    q, k = _qk(grid, 16, seed=4)
    run = run_head(SMALL, q, k, grid, G16)
    c = run.result.counters
    whole = oracle_ops(reuse_masks(q, grid, G16), reuse_masks(k, grid, G16))
    for key in ("full", "half", "none", "cost"):
        assert c["real_" + key] == whole[key]
    assert c["real_products"] == whole["dense"]
    padded = run.plan.n_boxes * run.plan.box_tokens
    assert c["products"] == padded ** 2 * 16 > whole["dense"]
    assert c["full"] + c["half"] + c["none"] == c["products"]


def test_boxes_that_cut_pairs_lose_reuse_across_borders():
    """A box with an odd extent along a reuse axis (allowed only with split_pairs) pairs
    tokens box by box: a grid pair straddling a border is not reused, so S is the per-box
    S, not the whole grid's, and the real-token FULL count drops."""
    grid, g = (1, 2, 6), ChannelGroups.from_sizes(0, 0, 8, directions=(2, 2, 2))   # x only
    rng = np.random.default_rng(0)
    base = rng.integers(-60, 60, (1, 8))
    q = np.repeat(base, 12, axis=0).astype(np.int8)          # every neighbour FULL
    k = (q + rng.integers(0, 2, q.shape)).astype(np.int8)
    with pytest.raises(ValueError, match=r"cuts reuse pairs along \['x'\]"):
        plan_head(SMALL, grid, 8, g, box=(1, 2, 3))
    run = run_head(SMALL, q, k, grid, g, box=(1, 2, 3), split_pairs=True)
    whole = attention_scores(q, k, grid, g)
    assert not np.array_equal(run.s, whole)
    # Per box: x 0..2 pairs (0, 1), x 3..5 pairs (3, 4); x 2 and 5 unpaired.
    want = np.zeros_like(whole)
    for qo in (0, 3):
        for ko in (0, 3):
            qi = np.ravel_multi_index(box_coords((0, 0, qo), (1, 2, 3)).T, grid)
            ki = np.ravel_multi_index(box_coords((0, 0, ko), (1, 2, 3)).T, grid)
            want[np.ix_(qi, ki)] = attention_scores(q[qi], k[ki], (1, 2, 3), g)
    assert np.array_equal(run.s, want)
    whole_full = oracle_ops(reuse_masks(q, grid, g), reuse_masks(k, grid, g))["full"]
    assert run.result.counters["real_full"] < whole_full


def test_hunyuanvideo_head_4x16x16():
    """The 1,024-token head of the RTL run through the host library and the interpreter
    (its speed is a benchmark's business, not a test's: no time limit here)."""
    grid = (4, 16, 16)
    qkv = make_qkv("hunyuanvideo", grid, seed=0)
    run = run_head(CFG, qkv.q, qkv.k, grid)
    assert run.plan.box == (2, 2, 16) and run.plan.n_boxes == 16
    assert np.array_equal(run.s, attention_scores(qkv.q, qkv.k, grid, "hunyuanvideo"))


# -- plan counts, addresses, errors -----------------------------------------------------------

@pytest.mark.parametrize("grid", [(2, 4, 8), (3, 5, 7), (1, 1, 1)])
def test_plan_counts_match_the_interpreter(grid):
    q, k = _qk(grid, 16, seed=1)
    run = run_head(SMALL, q, k, grid, G16)
    pc, c = plan_counts(run.plan), run.result.counters
    assert pc["per_opcode"] == c["commands"] and pc["commands"] == sum(c["commands"].values())
    assert pc["loads"] == c["loads"]
    assert pc["bytes_loaded"] == c["bytes_loaded"] and pc["bytes_stored"] == c["bytes_stored"]
    assert pc["blocks"] == c["computes"] == c["stores"] == run.plan.n_boxes ** 2
    assert pc["bytes_moved"] == c["bytes_loaded"] + c["bytes_stored"]
    nb = run.plan.n_boxes
    assert pc["loads_saved"] == nb - 1


def test_custom_addresses_and_strides():
    grid = (2, 3, 5)
    q, k = _qk(grid, 16, seed=7)
    # Interleaved Q and K tokens (one 64-byte row per token: Q at +0, K at +32), offset base.
    addrs = HeadAddrs(q=4096, k=4096 + 32, s=65536, token_stride=64, y_stride=5 * 64 + 16,
                      t_stride=3 * (5 * 64 + 16) + 48)
    plan = plan_head(SMALL, grid, 16, G16, addrs=addrs)
    mem = Memory(plan.memory_size)
    write_operands(mem, q, k, addrs, grid)
    res = run_program(plan.commands, mem, plan.limits)
    assert np.array_equal(read_s(mem, plan), attention_scores(q, k, grid, G16))
    assert np.array_equal(assemble_s(res), read_s(mem, plan))
    with pytest.raises(ValueError, match=r"q must be an int8 array of shape \(30, d\)"):
        write_operands(mem, q.astype(np.int16), k, addrs, grid)


def test_plan_errors():
    with pytest.raises(ValueError, match="head_dim 16 does not match the channel groups "
                                         "'hunyuanvideo'"):
        plan_head(CFG, (2, 4, 4), 16)
    with pytest.raises(ValueError, match=r"variant must be one the core runs \(dense, pe\)"):
        plan_head(CFG.replace(engine_dispatcher="none"), (2, 4, 4), 16, G16, variant="full")
    with pytest.raises(ValueError, match="variant must be one of dense"):
        plan_head(CFG, (2, 4, 4), 16, G16, variant="fast")
    with pytest.raises(ValueError, match="head_dim must be at most engine_max_head_dim = 32"):
        plan_head(SMALL, (2, 4, 4), 64, "cogvideox-5b")
    with pytest.raises(ValueError, match="has 32 tokens; engine_max_tokens is 16"):
        plan_head(SMALL, (2, 4, 4), 16, G16, box=(2, 4, 4))
    assert plan_head(CFG.replace(engine_pe="plain", engine_dispatcher="none"),
                     (2, 4, 4), 16, G16).variant == "dense"
