"""Host library of the streaming engine core (``kaleido_hw/engine/host.py``): box choice,
serpentine double-buffered order, plan counts, and S assembled from boxes equal to the
whole-grid golden S bit for bit (the reuse counters that differ, and why); linear layers
(Y from Q boxes x weight blocks equal to the whole-grid ``golden.window.linear``), also
with c_in above engine_max_head_dim in slices added up by ``acc`` COMPUTEs."""

from __future__ import annotations

import dataclasses


import numpy as np
import pytest

from golden import ChannelGroups, attention_scores, make_qkv, oracle_ops, reuse_masks
from golden.engine.commands import (KIND_LINEAR, SIDE_K, SIDE_Q, Compute, Config, DecodeError,
                                    Load, Store, Strides, groups_commands)
from golden.engine.model import VARIANTS
from golden.engine.program import (CoreLimits, Memory, ProgramError, box_coords, box_counts,
                                   box_tokens, run_program)
from golden.numerics import VideoGrid, group_channels
from golden.window import linear
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.host import (HeadAddrs, LinearAddrs, assemble_s, choose_box,
                                    command_order, linear_slices, plan_counts, plan_head,
                                    plan_linear, read_s,
                                    read_y, reuse_axes, run_head, run_linear, split_axes,
                                    whole_grid_s, whole_grid_y, write_linear_operands,
                                    write_operands)
from kaleido_hw.engine.host import _linear_groups, linear_counters, window3_box_cost
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
    # A program for more banks than the core has would name banks it rejects.
    for banks in (0, SMALL.core_banks + 1, 1.5):
        with pytest.raises(ValueError, match=r"banks must be in \[1, core_banks\] = \[1, 2\]"):
            plan_head(SMALL, (2, 4, 4), 16, G16, banks=banks)
    assert plan_head(CFG.replace(engine_pe="plain", engine_dispatcher="none"),
                     (2, 4, 4), 16, G16).variant == "dense"


# -- linear layers ----------------------------------------------------------------------------

G3 = ChannelGroups((0, 2, 1, 0, 2, 1, 1, 2, 0, 0, 1, 2), (1, 2, 0))    # 12 channels, t y x


def _xw(grid, c_in, c_out, seed):
    """A random-walk activation (neighbours close: windows reuse) and random weights."""
    rng = np.random.default_rng(seed)
    x = _smooth(rng, VideoGrid(*grid).n, c_in)
    return x, rng.integers(-128, 128, (c_in, c_out)).astype(np.int8)


def test_rectangular_serpentine_order():
    """n_q Q boxes x n_k weight blocks: Q outer, K serpentine, one K load saved per turn."""
    steps = command_order(3, n_k=4)
    assert [(s.qi, s.ki) for s in steps] == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 3), (1, 2),
                                             (1, 1), (1, 0), (2, 0), (2, 1), (2, 2), (2, 3)]
    assert sum(s.load_q for s in steps) == 3 and sum(s.load_k for s in steps) == 12 - 2
    assert command_order(3, n_k=3) == command_order(3)
    assert [s.ki for s in command_order(2, n_k=1)] == [0, 0]
    with pytest.raises(ValueError, match="n_k must be a positive integer, got 0"):
        command_order(3, n_k=0)


@pytest.mark.parametrize("groups", [G16, G3], ids=["G16", "G3"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_linear_from_boxes_equals_whole_grid(groups, variant):
    """An odd grid in padded boxes, c_out not a multiple of box_tokens, channels along all
    three axes: Y equals the whole grid's bit for bit, with and without prefetch (the same
    program memory after both), and reuse changes Y (so the check can fail)."""
    grid, c_out = (3, 5, 7), 37
    assert variant in CoreLimits.from_config(SMALL).variants
    x, w = _xw(grid, groups.head_dim, c_out, seed=5)
    runs = [run_linear(SMALL, x, w, grid, groups, variant=variant, banks=b) for b in (1, 2)]
    plan = runs[1].plan
    assert any(n * b > g for n, b, g in zip(plan.boxes, plan.box, grid))     # padded boxes
    assert plan.n_q > 1 and plan.n_k > 1 and c_out % plan.box_tokens
    want = whole_grid_y(x, w, grid, groups, SMALL.full_bits, SMALL.half_bits, variant)
    for run in runs:
        assert run.y.dtype == np.int64 and np.array_equal(run.y, want)
    assert np.array_equal(runs[0].memory.data, runs[1].memory.data)
    dense = x.astype(np.int64) @ w.astype(np.int64)
    if variant == "dense":
        assert np.array_equal(want, dense)
    else:
        assert np.array_equal(want, linear(x, w, grid, groups.channel_directions(), 2))
        assert not np.array_equal(want, dense)                   # reuse bites


def test_linear_default_groups_reuse_along_t():
    """Without groups every channel is in group t, reused along t (the window rule's
    default): the box may take any extent along y and x, and Y is ``golden.linear``."""
    grid = (4, 3, 5)
    x, w = _xw(grid, 20, 9, seed=2)
    run = run_linear(SMALL, x, w, grid)
    assert run.plan.groups.group_of == (0,) * 20 and run.plan.groups.directions[0] == 0
    assert run.plan.box[0] % 2 == 0 and run.plan.n_k == 1
    assert np.array_equal(run.y, linear(x, w, grid))
    assert np.array_equal(run.y, whole_grid_y(x, w, grid, None, 5, 3, "full"))
    assert not np.array_equal(run.y, x.astype(np.int64) @ w.astype(np.int64))


@pytest.mark.parametrize("sliced", [False, True], ids=["one-slice", "three-slices"])
def test_linear_model_path_equals_fast_path(sliced):
    """Every block through the engine model (``engine=True``) gives the fast path's Y, the
    whole grid's, with the engine's counters per COMPUTE (``acc`` on every slice after a
    block's first); one slice of 16 channels, and 40 channels in three slices."""
    grid = (2, 3, 4)
    base, c_in, groups, seed = (SLICED, 40, GS, 12) if sliced else (SMALL, 16, G16, 9)
    x, w = _xw(grid, c_in, 20, seed=seed)
    cfg = base.replace(rows=2, cols=2, engine_arrays=2)
    fast = run_linear(cfg, x, w, grid, groups)
    run = run_linear(cfg, x, w, grid, groups, engine=True)
    slices = 3 if sliced else 1
    assert run.plan.slices == slices and run.plan.n_q > 1 and run.plan.n_k > 1
    assert np.array_equal(run.y, fast.y)
    assert np.array_equal(run.y, whole_grid_y(x, w, grid, groups, 5, 3, run.plan.variant))
    assert all(b.engine is not None for b in run.result.blocks)
    assert [b.acc for b in run.result.blocks] == \
        ([False] + [True] * (slices - 1)) * len(run.plan.block_steps)
    assert run.result.counters["cycles"] == sum(int(b.engine.cycles) for b in run.result.blocks)


def _prefetch_and_counts(plan, computes, cfg, groups, c_out):
    """Check that every COMPUTE (command indices ``computes``) comes after the LOADs of its
    step and of the next one (prefetch), and that :func:`plan_counts` agrees with a run of
    the plan's layer (``run_linear``: per opcode, loads per side); returns the loads per
    step, the run, the plan's counts and the run's counters."""
    cmds = plan.commands
    loads_of = [int(s.load_q) + int(s.load_k) for s in plan.steps]
    for j, at in enumerate(computes):
        assert sum(isinstance(c, Load) for c in cmds[:at]) == sum(loads_of[:j + 2])
    x, w = _xw(plan.grid.shape, groups.head_dim, c_out, seed=3)
    run = run_linear(cfg, x, w, plan.grid, groups)
    pc, c = plan_counts(run.plan), run.result.counters
    assert pc["per_opcode"] == c["commands"] and pc["loads"] == c["loads"]
    return loads_of, run, pc, c


def test_linear_program():
    """n_q Q box loads in order, the weight blocks' rows LOADs in serpentine order (origin
    0, rows=1), n_q x n_k COMPUTEs of kind linear each stored at its block, the next step's
    load issued before each COMPUTE; the K STRIDES the weight row pitch; counts as run."""
    grid, c_in, c_out = (3, 5, 7), 16, 30
    plan = plan_linear(SMALL, grid, c_in, c_out, G16)
    n, a = plan.box_tokens, plan.addrs
    assert (plan.n_k, plan.w_rows, a.w_stride) == (-(-c_out // n), plan.n_k * n, 16)
    cmds = plan.commands
    assert Strides(SIDE_K, 16, 7 * 16, 5 * 7 * 16) in cmds
    assert Strides(SIDE_Q, *a.strides) in cmds
    loads = [c for c in cmds if isinstance(c, Load)]
    q_loads = [c for c in loads if c.side == SIDE_Q]
    assert [(c.origin, c.rows, c.address) for c in q_loads] == \
        [(plan.origin(i), 0, a.x) for i in range(plan.n_q)]
    serpentine = []
    for qi in range(plan.n_q):
        for ki in (range(plan.n_k) if qi % 2 == 0 else reversed(range(plan.n_k))):
            if not serpentine or serpentine[-1] != ki:
                serpentine.append(ki)
    k_loads = [c for c in loads if c.side == SIDE_K]
    assert [c.address for c in k_loads] == [a.w + ki * n * a.w_stride for ki in serpentine]
    assert all(c.rows == 1 and c.origin == (0, 0, 0) for c in k_loads)
    computes = [i for i, c in enumerate(cmds) if isinstance(c, Compute)]
    stores = [c.address for c in cmds if isinstance(c, Store)]
    assert len(computes) == len(stores) == plan.n_q * plan.n_k
    assert all(cmds[i].kind == KIND_LINEAR for i in computes)
    assert stores == [plan.y_address(s.qi, s.ki) for s in plan.steps]
    loads_of, run, pc, c = _prefetch_and_counts(plan, computes, SMALL, G16, c_out)
    assert pc["bytes_loaded"] == c["bytes_loaded"] == (grid[0] * grid[1] * grid[2]
                                                      + len(serpentine) * n) * c_in
    assert pc["bytes_stored"] == c["bytes_stored"] and pc["blocks"] == c["computes"]
    assert pc["loads_saved"] == plan.n_q - 1


def test_linear_custom_addresses():
    """X with gaps between rows, weight rows 48 bytes apart after Y, an offset base: Y as
    the whole grid's; the rows past c_out are zeros and the bytes between rows untouched."""
    grid, c_out = (2, 3, 5), 10
    x, w = _xw(grid, 12, c_out, seed=6)
    addrs = LinearAddrs(x=4096, w=1 << 16, y=8192, token_stride=32, y_stride=5 * 32 + 16,
                        t_stride=3 * (5 * 32 + 16), w_stride=48)
    plan = plan_linear(SMALL, grid, 12, c_out, G3, addrs=addrs)
    assert plan.memory_size == addrs.w + (plan.w_rows - 1) * 48 + 12   # W is the last region
    assert addrs.y + plan.n_q * plan.n_k * plan.block_pitch <= addrs.w
    mem = Memory(plan.memory_size + 48)
    mem.data[:] = 0x5A
    write_linear_operands(mem, x, w, addrs, grid, rows=plan.w_rows)
    rows = mem.data[addrs.w + np.arange(plan.w_rows)[:, None] * 48 + np.arange(48)]
    assert np.array_equal(rows[:c_out, :12].view(np.int8), w.T)
    assert not rows[c_out:, :12].any() and (rows[:, 12:] == 0x5A).all()
    run_program(plan.commands, mem, plan.limits)
    assert np.array_equal(read_y(mem, plan), whole_grid_y(x, w, grid, G3, 5, 3, "full"))


def test_linear_errors():
    grid = (2, 4, 4)
    x, w = _xw(grid, 16, 8, seed=0)
    p48 = plan_linear(SMALL, grid, 48, 8)         # above engine_max_head_dim: in slices
    assert (p48.slices, p48.head_dim, p48.c_padded) == (2, 32, 64)
    with pytest.raises(ValueError, match=r"c_in 16 does not match the channel groups "
                                         r"'custom' \(12 channels\)"):
        plan_linear(SMALL, grid, 16, 8, G3)
    with pytest.raises(ValueError, match="c_out must be a positive integer, got 0"):
        plan_linear(SMALL, grid, 16, 0)
    with pytest.raises(ValueError, match=r"w must be an int8 array of shape \(c_in, c_out\) "
                                         r"= \(16, c_out\)"):
        run_linear(SMALL, x, w[:15], grid, G16)
    with pytest.raises(ValueError, match=r"w must be an int8 array .* got int16 \(16, 8\)"):
        run_linear(SMALL, x, w.astype(np.int16), grid, G16)
    with pytest.raises(ValueError, match=r"w must be a \(c_in, c_out\) int8 array"):
        run_linear(SMALL, x, w[:, 0], grid, G16)
    with pytest.raises(ValueError, match=r"x must be an int8 array of shape \(32, c_in\)"):
        run_linear(SMALL, x[:-1], w, grid, G16)
    with pytest.raises(ValueError, match=r"cuts reuse windows along \['t'\] .* use even "
                                         r"extents there$"):
        plan_linear(SMALL, (3, 4, 4), 16, 8, box=(1, 4, 4))        # default groups: t only
    with pytest.raises(ValueError, match=r"cuts reuse windows along \['x'\]"):
        plan_linear(SMALL, (1, 2, 6), 8, 8, ChannelGroups.from_sizes(0, 0, 8, (2, 2, 2)),
                    box=(1, 2, 3))
    with pytest.raises(ValueError, match="variant must be one the core runs"):
        plan_linear(SMALL.replace(engine_dispatcher="none"), grid, 16, 8, variant="full")
    addrs = plan_linear(SMALL, grid, 16, 8).addrs
    with pytest.raises(ValueError, match="rows must be at least c_out = 8, got 4"):
        write_linear_operands(Memory(1 << 16), x, w, addrs, grid, rows=4)


# -- linear layers in input-channel slices ----------------------------------------------------

SLICED = SMALL.replace(engine_max_head_dim=16)         # c_in 40: 3 slices of 16, 8 padding
#: 40 channels whose slices of 16 share one map (G16's, channels along t, y and x; the last
#: slice's 8 channels are G16's first 8), directions not the default.
GS = ChannelGroups((G16.group_of * 3)[:40], (1, 2, 0))


def test_linear_slices():
    assert linear_slices(16, 16) == (1, 16) and linear_slices(12, 32) == (1, 12)
    assert linear_slices(40, 16) == (3, 16)          # ceil(40 / 3) = 14 -> 16
    assert linear_slices(33, 32) == (2, 32)          # 17 -> 32: LOAD offsets stay aligned
    assert linear_slices(48, 32) == (2, 32)
    assert linear_slices(80, 40) == (3, 32)          # 2 x 48 > 40: slices of 32 instead
    assert linear_slices(3072, 128) == (24, 128)
    assert linear_slices(600, 128) == (5, 128)
    with pytest.raises(ValueError, match=r"head_dim must be a multiple of 16 in \[16, "
                                         r"engine_max_head_dim\], and engine_max_head_dim = "
                                         r"8 has none"):
        linear_slices(20, 8)
    with pytest.raises(ValueError, match=r"engine_max_head_dim = 8 has none"):
        plan_linear(KaleidoConfig(engine_max_head_dim=8), (1, 2, 2), 20, 4)
    assert plan_linear(KaleidoConfig(engine_max_head_dim=8), (1, 2, 2), 8, 4).slices == 1


@pytest.mark.parametrize("n_q, n_k, n_s", [(3, 2, 3), (2, 3, 2), (1, 1, 4), (3, 1, 2)])
def test_sliced_serpentine_order(n_q, n_k, n_s):
    """Every block of the plain order as n_s consecutive steps, slices forward in even
    blocks and backward in odd ones; an operand (box, slice) is loaded iff the step before
    did not read it (one load saved per block border), never into the bank the step before
    reads. slices=1 is the plain order."""
    assert command_order(n_q, 2, n_k, slices=1) == command_order(n_q, 2, n_k)
    assert all(s.slice == 0 for s in command_order(n_q, 2, n_k))
    plain = command_order(n_q, 2, n_k)
    for banks in (1, 2, 3):
        steps = command_order(n_q, banks, n_k, slices=n_s)
        assert [(s.qi, s.ki) for s in steps] == [(p.qi, p.ki) for p in plain for _ in range(n_s)]
        for b in range(len(plain)):
            sl = [s.slice for s in steps[b * n_s:(b + 1) * n_s]]
            assert sl == (list(range(n_s)) if b % 2 == 0 else list(range(n_s - 1, -1, -1)))
        assert steps[0].load_q and steps[0].load_k
        for prev, s in zip(steps, steps[1:]):
            assert s.load_q == ((s.qi, s.slice) != (prev.qi, prev.slice))
            assert s.load_k == ((s.ki, s.slice) != (prev.ki, prev.slice))
            if banks > 1:
                assert (s.q_bank != prev.q_bank) == s.load_q
                assert (s.k_bank != prev.k_bank) == s.load_k
            assert s.load_q or s.load_k
        loads = sum(s.load_q + s.load_k for s in steps)
        assert loads == 2 * len(steps) - (len(plain) - 1)
    with pytest.raises(ValueError, match="slices must be a positive integer, got 0"):
        command_order(2, slices=0)


@pytest.mark.parametrize("groups, grid", [(None, (9, 2, 3)), (GS, (3, 5, 7))],
                         ids=["all-t", "GS"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_linear_in_slices_equals_whole_grid(groups, grid, variant):
    """c_in = 40 on a core of 16 channels per token: 3 slices of 16 (the last 8 channels
    zero padding), each block 3 COMPUTEs added up. An odd grid in padded boxes, c_out not a
    multiple of box_tokens: Y equals the whole grid's on the 40 channels bit for bit, with
    and without prefetch (the same memory after both), and reuse changes Y."""
    c_in, c_out = 40, 37
    assert variant in CoreLimits.from_config(SLICED).variants
    x, w = _xw(grid, c_in, c_out, seed=8)
    runs = [run_linear(SLICED, x, w, grid, groups, variant=variant, banks=b) for b in (1, 2)]
    plan = runs[1].plan
    assert (plan.slices, plan.head_dim, plan.c_padded) == (3, 16, 48)
    assert plan.addrs.token_stride == plan.addrs.w_stride == 48
    assert any(n * b > g for n, b, g in zip(plan.boxes, plan.box, grid))     # padded boxes
    assert plan.n_q > 1 and plan.n_k > 1 and c_out % plan.box_tokens
    want = whole_grid_y(x, w, grid, groups, SLICED.full_bits, SLICED.half_bits, variant)
    for run in runs:
        assert run.y.dtype == np.int64 and np.array_equal(run.y, want)
        assert run.result.counters["computes"] == 3 * run.result.counters["stores"]
    assert np.array_equal(runs[0].memory.data, runs[1].memory.data)
    dense = x.astype(np.int64) @ w.astype(np.int64)
    if variant == "dense":
        assert np.array_equal(want, dense)
    else:
        dirs = (groups or ChannelGroups((0,) * c_in, (0, 1, 2))).channel_directions()
        assert np.array_equal(want, linear(x, w, grid, dirs, 2))
        assert not np.array_equal(want, dense)                   # reuse bites


def test_linear_program_in_slices():
    """One CONFIG/GROUPS of a slice (16 channels, GS's map); per block its 3 slices' COMPUTEs
    (acc 0, 1, 1), each reading the Q box and the weight rows of its slice (LOAD addresses +
    slice * 16), then one STORE at the block; the next COMPUTE's loads before each COMPUTE;
    counts as run; a plan in one slice is as before (acc 0, a STORE per COMPUTE)."""
    grid, c_in, c_out = (3, 5, 7), 40, 30
    plan = plan_linear(SLICED, grid, c_in, c_out, GS)
    n, a, hd = plan.box_tokens, plan.addrs, plan.head_dim
    cmds = plan.commands
    assert plan.groups is GS and plan.slice_groups.group_of == G16.group_of
    cfg = next(c for c in cmds if isinstance(c, Config))
    assert (cfg.head_dim, (cfg.dir_t, cfg.dir_y, cfg.dir_x)) == (16, (1, 2, 0))
    assert cmds[1:2] == groups_commands(G16.group_of)
    assert Strides(SIDE_K, 48, 7 * 48, 5 * 7 * 48) in cmds and a.token_stride == 48
    banks, computes, blocks, pending = {}, [], [], []
    for i, c in enumerate(cmds):
        if isinstance(c, Load):
            banks[(c.side, c.bank)] = c
        elif isinstance(c, Compute):
            st = plan.steps[len(computes)]
            computes.append(i)
            assert c.kind == KIND_LINEAR and c.acc == int(bool(pending))
            q, k = banks[(SIDE_Q, c.q_bank)], banks[(SIDE_K, c.k_bank)]
            assert (q.origin, q.rows, q.address) == (plan.origin(st.qi), 0, a.x + st.slice * hd)
            assert (k.origin, k.rows) == ((0, 0, 0), 1)
            assert k.address == a.w + st.ki * n * a.w_stride + st.slice * hd
            pending.append(st)
        elif isinstance(c, Store):
            assert len(pending) == 3 and sorted(s.slice for s in pending) == [0, 1, 2]
            assert len({(s.qi, s.ki) for s in pending}) == 1
            assert c.address == plan.y_address(pending[0].qi, pending[0].ki)
            blocks.append((pending[0].qi, pending[0].ki))
            pending = []
    assert not pending and len(computes) == 3 * plan.n_q * plan.n_k
    assert blocks == [(s.qi, s.ki) for s in plan.block_steps]
    assert sorted(blocks) == [(i, j) for i in range(plan.n_q) for j in range(plan.n_k)]
    loads_of, run, pc, c = _prefetch_and_counts(plan, computes, SLICED, GS, c_out)
    assert pc["bytes_loaded"] == c["bytes_loaded"] == hd * (
        sum(int(run.plan.real_tokens(s.qi).sum()) for s in plan.steps if s.load_q)
        + n * sum(s.load_k for s in plan.steps))
    assert pc["bytes_stored"] == c["bytes_stored"] and pc["blocks"] == c["stores"]
    assert pc["loads_saved"] == pc["blocks"] - 1 == 2 * len(computes) - sum(loads_of)
    # One slice: no acc, a STORE after every COMPUTE.
    one = plan_linear(SLICED, grid, 16, c_out, G16)
    assert one.slices == 1 and one.slice_groups is None and len(one.block_steps) == len(one.steps)
    assert all(c.acc == 0 for c in one.commands if isinstance(c, Compute))


def test_linear_in_slices_custom_addresses_zero_padding():
    """Tokens and weight rows 64 bytes apart in memory full of 0x5A: the writes zero the
    padding channels 40..47 the last slice reads, leave 48..63 alone, and Y is exact."""
    grid, c_in, c_out = (2, 3, 5), 40, 10
    x, w = _xw(grid, c_in, c_out, seed=6)
    addrs = LinearAddrs(x=4096, w=1 << 16, y=16384, token_stride=64, y_stride=5 * 64,
                        t_stride=3 * 5 * 64 + 32, w_stride=64)
    plan = plan_linear(SLICED, grid, c_in, c_out, GS, addrs=addrs)
    assert plan.memory_size == addrs.w + (plan.w_rows - 1) * 64 + 48
    mem = Memory(plan.memory_size + 64)
    mem.data[:] = 0x5A
    write_linear_operands(mem, x, w, addrs, grid, rows=plan.w_rows, channels=plan.c_padded)
    rows = mem.data[addrs.w + np.arange(plan.w_rows)[:, None] * 64 + np.arange(64)]
    assert np.array_equal(rows[:c_out, :c_in].view(np.int8), w.T)
    assert not rows[c_out:, :48].any() and not rows[:, c_in:48].any()
    assert (rows[:, 48:] == 0x5A).all()
    toks = addrs.x + np.array([t * addrs.t_stride + y * 5 * 64 + xx * 64 for t in range(2)
                               for y in range(3) for xx in range(5)])
    assert not mem.data[toks[:, None] + np.arange(c_in, 48)].any()
    assert (mem.data[toks[:, None] + np.arange(48, 64)] == 0x5A).all()
    run_program(plan.commands, mem, plan.limits)
    assert np.array_equal(read_y(mem, plan), whole_grid_y(x, w, grid, GS, 5, 3, "full"))
    with pytest.raises(ValueError, match=r"channels must be in \[c_in, min\(token_stride, "
                                         r"w_stride\)\] = \[40, 64\], got 80"):
        write_linear_operands(mem, x, w, addrs, grid, channels=80)
    small = LinearAddrs(x=0, w=4096, y=8192, token_stride=48, y_stride=5 * 48,
                        t_stride=15 * 48, w_stride=40)
    with pytest.raises(ValueError, match="addrs.w_stride must be at least the 48 channels of "
                                         r"a token or weight row \(3 slices of head_dim = 16\), "
                                         "got 40"):
        plan_linear(SLICED, grid, c_in, c_out, GS, addrs=small)


def test_linear_in_slices_group_map_errors():
    """Every slice of head_dim channels must repeat one channel->group map."""
    with pytest.raises(ValueError, match=r"every slice of head_dim = 16 channels must have the "
                                         r"same channel->group map .* slice 1 \(channels "
                                         r"16..31\) differs from slice 0 in 16 channels, first "
                                         r"channel 16 \(group y; channel 0 has group t\); "
                                         r"permute the channels of x"):
        plan_linear(SLICED, (2, 4, 4), 40, 8, ChannelGroups.from_sizes(16, 16, 8))
    last = list(GS.group_of)
    last[37] = 0                                        # G16 has group y at channel 5
    with pytest.raises(ValueError, match=r"slice 2 \(channels 32..39\) differs from slice 0 "
                                         r"in 1 channel, first channel 37 \(group t; channel "
                                         r"5 has group y\)"):
        plan_linear(SLICED, (2, 4, 4), 40, 8, ChannelGroups(last, GS.directions))
    # The same map permuted so every slice repeats it plans (and runs: see above).
    assert plan_linear(SLICED, (2, 4, 4), 40, 8, GS).slices == 3


def test_linear_in_slices_exactness_and_acc_width():
    """c_in = 600 on 128-channel tokens: 5 slices of 128, every result sums 640 channels.
    All in group t: 640 > 511 = group_channels(24) needs acc_width 25, and a program planned
    for 25 fails on a 24-bit core (the interpreter's limit is the same); split over t, y and
    x (215 per group) the reuse build takes it at 24, a plain build (one group) does not."""
    grid, c_in = (1, 2, 2), 600
    assert group_channels(24) == 511 < 640 <= group_channels(25)
    with pytest.raises(ValueError, match=r"c_in = 600 as 5 slices of head_dim = 128 channels "
                                         r"sums 640 channels of group t into every result; "
                                         r"acc_width = 24 sums at most 511 exactly: it needs "
                                         r"acc_width >= 25"):
        plan_linear(CFG, grid, c_in, 4)
    x, w = _xw(grid, c_in, 4, seed=1)
    wide = CFG.replace(acc_width=25)
    run = run_linear(wide, x, w, grid)
    assert run.plan.slices == 5 and run.result.counters["computes"] == 5
    assert np.array_equal(run.y, whole_grid_y(x, w, grid, None, 5, 3, run.plan.variant))
    with pytest.raises(ProgramError, match="error 2 .* channel group t has 512 channels"):
        run_program(run.plan.commands, Memory(run.plan.memory_size), CoreLimits.from_config(CFG))
    mixed = ChannelGroups((ChannelGroups.from_sizes(43, 43, 42).group_of * 5)[:c_in])
    run = run_linear(CFG, x, w, grid, mixed)
    assert np.array_equal(run.y, whole_grid_y(x, w, grid, mixed, 5, 3, run.plan.variant))
    plain = CFG.replace(engine_pe="plain", engine_dispatcher="none")
    with pytest.raises(ValueError, match=r"sums 640 channels of its one channel group \(a plain "
                                         r"build .* needs acc_width >= 25"):
        plan_linear(plain, grid, c_in, 4, mixed)
    assert np.array_equal(run_linear(plain.replace(acc_width=25), x, w, grid, mixed).y,
                          x.astype(np.int64) @ w.astype(np.int64))
    with pytest.raises(ValueError, match=r"sums 140032 channels into every result, which may "
                                         r"overflow its int32 \(at most 131071 channels at any "
                                         r"acc_width\)"):
        plan_linear(CFG.replace(acc_width=48), grid, 140000, 4)


#: A core whose engine also runs linear windows of 3 (``engine_window3``).
W3 = KaleidoConfig(engine_max_tokens=36, engine_max_head_dim=32, engine_dispatcher="scheduler",
                   engine_window3=True)


@pytest.mark.parametrize("box", [None, (3, 3, 3)], ids=["chosen", "given"])
@pytest.mark.parametrize("variant", ["pe", "dense"])
def test_linear_window3_from_boxes_equals_whole_grid(box, variant):
    """``plan_linear(..., window=3)``: every COMPUTE with ``window3``, the variant pe by
    default, boxes that keep the windows of 3 along the reuse axes whole (multiples of 3,
    and no padded last box whose last window holds two real tokens): Y equals the whole
    grid's ``golden.linear`` with windows of 3 bit for bit, on the fast path and through the
    engine model (``window3_counters`` per COMPUTE), and differs from windows of 2. The grid
    7x4x6 in boxes of 3 along every axis: padded last boxes along t and y whose last window
    holds one real token (its anchor, which padding followers do not change)."""
    grid = (7, 4, 6)
    x, w = _xw(grid, G16.head_dim, 45, seed=7)
    runs = [run_linear(W3, x, w, grid, G16, variant=variant, box=box, window=3, engine=e)
            for e in (False, True)]
    plan = runs[0].plan
    assert plan.window == 3 and plan.variant == variant and plan.n_q > 1 and plan.n_k > 1
    assert all(c.window3 == 1 for c in plan.commands if isinstance(c, Compute))
    want = whole_grid_y(x, w, grid, G16, W3.full_bits, W3.half_bits, variant, 3)
    for run in runs:
        assert np.array_equal(run.y, want)
    assert runs[1].result.counters["cycles"] == sum(int(b.engine.cycles)
                                                    for b in runs[1].result.blocks)
    if variant == "pe":
        assert not np.array_equal(want, whole_grid_y(x, w, grid, G16, 5, 3, "pe", 2))
        assert plan_linear(W3, grid, 16, 45, G16, box=box, window=3).variant == "pe"


def test_linear_window3_default_box_has_the_fewest_estimated_cycles():
    """The default window-3 box is the one of least ``window3_box_cost``, not the head rule's
    fewest boxes: on 21 frames the head rule takes 21x1x3 (63 tokens, 9 weight blocks of 512
    features, 6 row blocks of 21 units), the cost picks 48 tokens (11 blocks, 4 row blocks),
    which the layer's exact counters confirm (fewer compute cycles on a small slice of the
    layer's tokens: the grid 21x2x16)."""
    cfg = KaleidoConfig(engine_window3=True)
    grid = (21, 2, 16)
    head_rule = choose_box(grid, _linear_groups(128), 64, windows=[(0, 3)], pairs=False)
    plan = plan_linear(cfg, grid, 128, 512, window=3)
    assert head_rule == (21, 1, 3) and box_tokens(plan.box) == 48 and plan.box[0] == 3
    cost = {b: window3_box_cost(VideoGrid(*grid), b, {0: 1.0}, 512, plan.limits.params)
            for b in (head_rule, plan.box)}
    assert cost[plan.box] < cost[head_rule]
    x, _ = _xw(grid, 128, 1, seed=2)
    cycles = {b: linear_counters(cfg, x, 512, grid, box=b, window=3)["compute"]
              for b in (head_rule, plan.box)}
    assert cycles[plan.box] < cycles[head_rule]


def test_linear_window3_errors():
    """Windows of 3 refused before any command: on a core without ``engine_window3``, with
    the dispatcher's variants, with a box that cuts them (an extent not a multiple of 3, or a
    padded last box ending in a window of two real tokens); and by the core: ``window3``
    outside kind 1 is no command, on a core without it error 11, under a CONFIG with
    schedule error 2."""
    with pytest.raises(ValueError, match="window = 3 needs a core built with engine_window3"):
        plan_linear(SMALL, (3, 2, 2), 16, 8, window=3)
    with pytest.raises(ValueError, match="window must be 2 or 3, got 4"):
        plan_linear(W3, (3, 2, 2), 16, 8, window=4)
    with pytest.raises(ValueError, match="variant must be 'dense' or 'pe' with window = 3"):
        plan_linear(W3, (3, 2, 2), 16, 8, variant="pe-sh", window=3)
    for box in ((2, 2, 2), (3, 2, 2)):       # along t (length 5): 2 is no multiple; 5 % 3 = 2
        with pytest.raises(ValueError, match=r"cuts reuse windows of 3 along \['t'\]"):
            plan_linear(W3, (5, 2, 2), 16, 8, box=box, window=3)
    assert choose_box((5, 2, 2), _linear_groups(16), 36, windows=[(0, 3)], pairs=False) \
        == (5, 2, 2)
    with pytest.raises(DecodeError, match="window3 must be 0 with kind 0"):
        Compute.decode(Compute(0, 0, 1, window3=1).encode() & ~(0xF << 8))
    plan = plan_linear(W3, (3, 2, 2), 16, 8, window=3)
    x, w = _xw((3, 2, 2), 16, 8, seed=1)
    for limits, config_edit, code in ((CoreLimits.from_config(SMALL), {}, 11),
                                      (plan.limits, {"schedule": 1}, 2)):
        cmds = [dataclasses.replace(c, **config_edit) if isinstance(c, Config) else c
                for c in plan.commands]
        memory = Memory(plan.memory_size)
        write_linear_operands(memory, x, w, plan.addrs, plan.grid, plan.w_rows,
                              plan.c_padded)
        with pytest.raises(ProgramError) as err:
            run_program(cmds, memory, limits)
        assert err.value.code == code
