"""The command-stream interpreter (``golden/engine/program.py``): what a program computes
(each block = the box pair's ``Q_eff K_eff^T`` with the box's own reuse codes, equal to the
engine model's S), what it stores, its counters, and every error code raised."""

from __future__ import annotations

import numpy as np
import pytest

from golden import ChannelGroups, attention_scores, make_qkv
from golden.engine.commands import (ERROR_CODES, SIDE_K, SIDE_Q, SIDE_V, Attention, Compute,
                                    Config, Fence,
                                    Groups, Load, Store, Strides, groups_commands)
from golden.engine.model import VARIANTS, EngineParams, engine_counters, plain_walk
from golden.engine.program import (CoreLimits, Memory, ProgramError, box_coords, run_program,
                                   variant_of)
from golden.numerics import VideoGrid, oracle_ops, reuse_masks
from golden.window import linear
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.kaleido_engine import built_variants
from token_data import smooth_tokens as _smooth


GROUPS = ChannelGroups.from_sizes(4, 6, 6)      # d = 16, default directions
D = GROUPS.head_dim


def _setup(grid, box, reuse=1, sched=0, match=0, groups=GROUPS, seed=0):
    """Memory with Q at 0 and K after it (16-byte tokens), and the preamble of a program."""
    grid = VideoGrid(*grid)
    rng = np.random.default_rng(seed)
    q, k = _smooth(rng, grid.n, groups.head_dim), _smooth(rng, grid.n, groups.head_dim)
    ts = 16 * -(-groups.head_dim // 16)
    strides = (ts, grid.w * ts, grid.h * grid.w * ts)
    mem = Memory(2 * grid.n * ts + 64 * 1024)
    kaddr = grid.n * ts
    mem.write_tensor(0, q, grid, strides)
    mem.write_tensor(kaddr, k, grid, strides)
    pre = [Config(*box, groups.head_dim, *groups.directions, 5, 3, reuse, sched, match,
                  *grid.shape)]
    pre += groups_commands(groups.group_of)
    pre += [Strides(SIDE_Q, *strides), Strides(SIDE_K, *strides)]
    return mem, q, k, kaddr, pre


def _box_eff_s(q, k, grid, groups, qo, ko, box):
    """Reference block: each box cut out of the grid (zeros past the edge) as a grid of its
    own, its S by ``golden.attention_scores``."""
    grid = VideoGrid(*grid)
    xs = []
    for x, o in ((q, qo), (k, ko)):
        c = box_coords(o, box)
        real = (c < np.asarray(grid.shape)).all(axis=1)
        b = np.zeros((c.shape[0], x.shape[1]), np.int8)
        b[real] = x[np.ravel_multi_index(c[real].T, grid.shape)]
        xs.append(b)
    return attention_scores(xs[0], xs[1], VideoGrid(*box), groups)


def test_linear_blocks_are_golden_linear():
    """COMPUTE kind 1: the Q bank a box of the activation X, the K bank box_tokens weight
    rows from a ``rows`` LOAD (every row read, no padding): each stored block is the box's
    rows of the whole grid's ``golden.linear`` (windows of 2 along each channel's group
    direction; the box's even extents never cut a window) on the block's features, the same
    through the engine model (with its counters); the same banks computed as S give another
    block (the rules differ), and the dense variant gives X @ W."""
    grid, box = (3, 5, 4), (2, 4, 2)
    mem, x, _, kaddr, pre = _setup(grid, box)
    n, c_out = 16, 21
    rng = np.random.default_rng(3)
    w = rng.integers(-128, 128, (D, c_out)).astype(np.int8)
    rows = np.zeros((2 * n, D), np.int8)
    rows[:c_out] = w.T
    waddr = 40 << 10
    mem.write(waddr, rows)
    want = linear(x, w, grid, GROUPS.channel_directions(), 2)
    gshape = np.asarray(grid)
    for variant, flags in (("pe", (1, 0, 0)), ("dense", (0, 0, 0))):
        cfg = [Config(*box, D, *GROUPS.directions, 5, 3, *flags, *grid)] + pre[1:]
        prog = cfg + [Load(SIDE_Q, 0, 2, 0, 2, 0)]
        for kb in range(2):
            prog += [Load(SIDE_K, kb, 0, 0, 0, waddr + kb * n * D, rows=1),
                     Compute(0, kb, 1), Store(8192 + kb * 1024)]
        results = [run_program(prog, mem, engine=engine) for engine in (False, True)]
        c = box_coords((2, 0, 2), box)
        real = (c < gshape).all(axis=1)
        tok = np.ravel_multi_index(c[real].T, grid)
        ref = want if variant == "pe" else x.astype(np.int64) @ w.astype(np.int64)
        for kb in range(2):
            blk = mem.read(8192 + kb * 1024, n * n, np.int32).reshape(n, n)
            feats = np.arange(kb * n, min((kb + 1) * n, c_out))
            assert np.array_equal(blk[np.ix_(real, feats - kb * n)], ref[np.ix_(tok, feats)])
            assert not blk[:, feats.size:].any()    # zero rows (padding rows may reuse)
            for r in results:
                assert np.array_equal(r.blocks[kb].s, blk) and r.blocks[kb].k_origin is None
        eng = results[1].blocks[0].engine
        model = engine_counters(_box(x, grid, (2, 0, 2), box), rows[:n], VideoGrid(*box),
                                GROUPS, EngineParams(), variant, linear=True)
        assert eng.cycles == model.cycles
        assert np.array_equal(eng.busy_pe_cycles, model.busy_pe_cycles)
        assert results[0].counters["bytes_loaded"] == (int(real.sum()) + 2 * n) * D
        if variant == "pe":
            s_blk = run_program(prog[:-2] + [Compute(0, 1, 0)], mem).blocks[-1].s
            assert not np.array_equal(s_blk, results[0].blocks[-1].s)


def _box(x, grid, origin, box):
    """The box of ``x`` at ``origin`` (zeros past the grid's edge), box-local order."""
    c = box_coords(origin, box)
    real = (c < np.asarray(grid)).all(axis=1)
    out = np.zeros((c.shape[0], x.shape[1]), np.int8)
    out[real] = x[np.ravel_multi_index(c[real].T, grid)]
    return out


def test_memory_round_trip_and_range():
    m = Memory(64)
    m.write(16, np.arange(4, dtype=np.int32) - 2)
    assert m.read(16, 4, np.int32).tolist() == [-2, -1, 0, 1]
    assert m.data[16:20].tolist() == [0xFE, 0xFF, 0xFF, 0xFF]      # little-endian
    with pytest.raises(ValueError, match=r"bytes \[60, 68\) lie outside the memory \[0, 64\)"):
        m.write(60, np.zeros(2, np.int32))
    with pytest.raises(ValueError, match="tensor must be an int8 array"):
        m.write_tensor(0, np.zeros((4, 2), np.int16), (1, 2, 2), (16, 32, 64))


def test_one_box_pair_with_padding_is_the_box_grids_S():
    grid, box = (3, 5, 3), (2, 4, 2)
    mem, q, k, kaddr, pre = _setup(grid, box)
    qo, ko = (2, 4, 2), (0, 4, 0)          # both at the far edges: mostly padding
    prog = pre + [Load(SIDE_Q, 1, *qo, 0), Load(SIDE_K, 0, *ko, kaddr), Compute(1, 0),
                  Store(4096), Fence()]
    r = run_program(prog, mem)
    want = _box_eff_s(q, k, grid, GROUPS, qo, ko, box)
    (blk,) = r.blocks
    assert np.array_equal(blk.s, want)
    assert np.array_equal(mem.read(4096, 256, np.int32).reshape(16, 16), want)
    assert (blk.q_origin, blk.k_origin, blk.address, blk.index) == (qo, ko, 4096, len(pre) + 2)
    # Real tokens: Q box 1 x 1 x 1, K box 2 x 1 x 2 (t 0..1, y 4, x 0..1).
    c = r.counters
    assert c["bytes_loaded"] == (1 + 4) * D and c["bytes_stored"] == 256 * 4
    assert c["products"] == 16 * 16 * D and c["real_products"] == 1 * 4 * D
    assert c["commands"] == {"CONFIG": 1, "GROUPS": 1, "STRIDES": 2, "LOAD": 2, "COMPUTE": 1,
                             "STORE": 1, "FENCE": 1}
    assert c["loads"] == {"Q": 1, "K": 1, "V": 0}


@pytest.mark.parametrize("variant", VARIANTS)
def test_engine_model_gives_the_same_blocks(variant):
    """``engine=True`` runs golden.engine.model on every box pair: the same S (the engine
    computes Q_eff K_eff^T of its grid) plus its cycle counters."""
    reuse = int(variant != "dense")
    sched = int(variant in ("pe-sh", "full"))
    match = int(variant in ("pe-m", "full"))
    grid, box = (2, 3, 5), (2, 2, 4)
    mem, q, k, kaddr, pre = _setup(grid, box, reuse, sched, match, seed=3)
    prog = pre + [Load(SIDE_Q, 0, 0, 2, 0, 0), Load(SIDE_K, 1, 0, 0, 4, kaddr), Compute(0, 1),
                  Store(8192), Load(SIDE_K, 0, 0, 2, 4, kaddr), Compute(0, 0), Store(12288)]
    params = EngineParams(rows=2, cols=2, arrays=2, width=4, entries=8)
    lim = CoreLimits(64, 32, params=params)
    fast = run_program(prog, mem, lim)
    slow = run_program(prog, mem, lim, engine=True)
    for a, b in zip(fast.blocks, slow.blocks):
        assert np.array_equal(a.s, b.s)
        assert b.engine is not None and b.engine.cycles > 0
    assert slow.counters["cycles"] == sum(b.engine.cycles for b in slow.blocks)
    if variant == "dense":
        qb = np.zeros((16, D), np.int8)
        c = box_coords((0, 2, 0), box)
        real = (c < np.asarray(grid)).all(axis=1)
        qb[real] = q[np.ravel_multi_index(c[real].T, grid)]
        kb = np.zeros((16, D), np.int8)
        c = box_coords((0, 0, 4), box)
        real = (c < np.asarray(grid)).all(axis=1)
        kb[real] = k[np.ravel_multi_index(c[real].T, grid)]
        assert np.array_equal(fast.blocks[0].s, qb.astype(np.int64) @ kb.astype(np.int64).T)
    else:
        want = _box_eff_s(q, k, grid, GROUPS, (0, 2, 0), (0, 0, 4), box)
        assert np.array_equal(fast.blocks[0].s, want)


def test_reuse_counts_per_block_are_the_box_masks_oracle():
    grid, box = (2, 4, 4), (2, 2, 4)
    mem, q, k, kaddr, pre = _setup(grid, box, seed=5)
    prog = pre + [Load(SIDE_Q, 0, 0, 2, 0, 0), Load(SIDE_K, 0, 0, 0, 0, kaddr), Compute(0, 0),
                  Store(8192)]
    r = run_program(prog, mem)
    qb = q[np.ravel_multi_index(box_coords((0, 2, 0), box).T, grid)]
    kb = k[np.ravel_multi_index(box_coords((0, 0, 0), box).T, grid)]
    want = oracle_ops(reuse_masks(qb, box, GROUPS), reuse_masks(kb, box, GROUPS))
    assert r.blocks[0].reuse == want == r.blocks[0].reuse_real     # no padding here
    assert want["full"] > 0 and want["half"] > 0


def test_core_limits_follow_the_config():
    for kw in ({}, {"engine_dispatcher": "none"}, {"engine_dispatcher": "scheduler"},
               {"engine_dispatcher": "matcher"}, {"engine_pe": "plain", "engine_dispatcher": "none"}):
        cfg = KaleidoConfig(**kw)
        lim = CoreLimits.from_config(cfg)
        assert lim.variants == built_variants(cfg)
        assert (lim.max_box_tokens, lim.max_head_dim, lim.banks) == (64, 128, 2)
        assert lim.params == EngineParams.from_config(cfg)
        assert lim.plain == (cfg.engine_pe == "plain")
    with pytest.raises(ValueError, match="variants must be a non-empty subset"):
        CoreLimits(variants=("fast",))
    assert variant_of(0, 1, 1) == "dense" and variant_of(1, 1, 0) == "pe-sh"


def test_plain_core_counts_the_x_walk():
    """A plain core's counters are those of its engine's walk along x
    (``golden.engine.model.plain_walk``): on a box with an odd t extent the y group's t-walk
    of a reuse core pads a unit per (y, x), the plain walk does not; S is the same."""
    grid = box = (3, 2, 4)
    mem, q, k, kaddr, pre = _setup(grid, box, reuse=0, seed=4)
    prog = pre + [Load(SIDE_Q, 0, 0, 0, 0, 0), Load(SIDE_K, 0, 0, 0, 0, kaddr), Compute(0, 0),
                  Store(8192)]
    params = EngineParams(rows=2, cols=2, arrays=2, width=4, entries=8)
    plain = run_program(prog, mem, CoreLimits(64, 32, variants=("dense",), params=params,
                                              plain=True), engine=True)
    reuse = run_program(prog, mem, CoreLimits(64, 32, params=params), engine=True)
    assert np.array_equal(plain.blocks[0].s, q.astype(np.int64) @ k.astype(np.int64).T)
    assert np.array_equal(plain.blocks[0].s, reuse.blocks[0].s)
    want = engine_counters(q, k, box, plain_walk(GROUPS), params, "dense")
    assert plain.blocks[0].engine.cycles == want.cycles < reuse.blocks[0].engine.cycles


# -- every error code -------------------------------------------------------------------------

GRID, BOX = (2, 3, 4), (2, 2, 2)


def _error_programs():
    """code -> list of (program builder, message fragment); the builder gets
    (pre, kaddr) and returns the program; the failing command is the last one."""
    cfg = lambda **kw: Config(**{**dict(  # noqa: E731
        box_t=2, box_h=2, box_w=2, head_dim=D, dir_t=2, dir_y=0, dir_x=1, full_bits=5,
        half_bits=3, reuse=1, schedule=0, match=0, grid_t=2, grid_h=3, grid_w=4), **kw})
    ld_q = Load(SIDE_Q, 0, 0, 0, 0, 0)
    return {
        1: [(lambda pre, ka: pre + [0], "opcode 0 is not a command"),
            (lambda pre, ka: pre + [Fence().encode() | 1 << 100], "reserved bit"),
            (lambda pre, ka: pre + [Groups(0, (0,) * 49)], "GROUPS.count"),
            (lambda pre, ka: pre + [Load(SIDE_Q, 0, 0, 0, 0, 0).encode() | 3 << 4],
             "side must be 0"),
            (lambda pre, ka: pre + [Compute(0, 0).encode() | 1 << 16],
             "v_bank, first and last must be 0 with kind 0")],
        2: [(lambda pre, ka: [cfg(box_t=0)], "box_t must be at least 1"),
            (lambda pre, ka: [cfg(grid_h=0)], "grid_h must be at least 1"),
            (lambda pre, ka: [cfg(box_t=4, box_h=4, box_w=8)],
             "128 tokens; the core holds at most max_box_tokens = 64"),
            (lambda pre, ka: [cfg(head_dim=200)], r"head_dim must be in \[1, 128\]"),
            (lambda pre, ka: [cfg(dir_y=3)], "dir_y must be 0"),
            (lambda pre, ka: [cfg(half_bits=2)], r"half_bits must be in \[3, 4\]"),
            (lambda pre, ka: [cfg(full_bits=3, half_bits=3)], r"half_bits must be in \[3, 2\]"),
            (lambda pre, ka: [cfg(full_bits=0)], r"full_bits must be in \[1, 7\]"),
            (lambda pre, ka: pre + [Groups(10, (0,) * 8)], "names channels 10..17; head_dim is 16"),
            (lambda pre, ka: pre + [Groups(0, (0, 3))], "channel 1 has group 3")],
        3: [(lambda pre, ka: [Load(SIDE_Q, 0, 0, 0, 0, 0)], "LOAD before CONFIG"),
            (lambda pre, ka: [Groups(0, (0,))], "GROUPS before CONFIG"),
            (lambda pre, ka: [Strides(0, 16, 64, 192)], "STRIDES before CONFIG"),
            (lambda pre, ka: [Store(0)], "STORE before CONFIG"),
            (lambda pre, ka: [Compute(0, 0)], "COMPUTE before CONFIG"),
            (lambda pre, ka: pre[:1] + [ld_q], "LOAD of side Q before its STRIDES"),
            (lambda pre, ka: pre[:1] + pre[2:] + [ld_q, Load(SIDE_K, 0, 0, 0, 0, ka),
                                                  Compute(0, 0)],
             "before every channel has a group")],
        4: [(lambda pre, ka: pre + [Load(SIDE_Q, 2, 0, 0, 0, 0)], r"LOAD bank must be in \[0, 1\]"),
            (lambda pre, ka: pre + [ld_q, Load(SIDE_K, 0, 0, 0, 0, ka), Compute(0, 3)],
             r"COMPUTE k_bank bank must be in \[0, 1\]")],
        5: [(lambda pre, ka: pre + [ld_q, Compute(0, 0)], "k_bank 0 holds no K box"),
            (lambda pre, ka: pre + [ld_q, Load(SIDE_K, 0, 0, 0, 0, ka), Compute(1, 0)],
             "q_bank 1 holds no Q box"),
            (lambda pre, ka: pre + [ld_q, Load(SIDE_K, 0, 0, 0, 0, ka)] + pre + [Compute(0, 0)],
             "q_bank 0 holds no Q box since CONFIG")],
        6: [(lambda pre, ka: pre + [Load(SIDE_Q, 0, 0, 0, 0, 8)], "LOAD address must be a multiple of 16"),
            (lambda pre, ka: pre + [Strides(SIDE_Q, 24, 96, 288)], "token_stride must be a multiple of 16"),
            (lambda pre, ka: pre + [ld_q, Load(SIDE_K, 0, 0, 0, 0, ka), Compute(0, 0),
                                    Store(4)], "STORE address must be a multiple of 16")],
        7: [(lambda pre, ka: pre + [Store(1024)], "STORE without an unstored COMPUTE result"),
            (lambda pre, ka: pre + [ld_q, Load(SIDE_K, 0, 0, 0, 0, ka), Compute(0, 0),
                                    Store(1024), Store(2048)], "STORE without")],
        8: [(lambda pre, ka: pre + [Strides(SIDE_K, 0, 0, 0)],
             "K token_stride must be at least head_dim = 16"),
            (lambda pre, ka: pre + [Strides(SIDE_Q, 16, 48, 1000 * 16)],
             r"y_stride must be at least grid_w \* token_stride = 4 \* 16 = 64"),
            (lambda pre, ka: pre + [Strides(SIDE_Q, 16, 64, 128)],
             r"t_stride must be at least grid_h \* y_stride = 3 \* 64 = 192")],
        9: [(lambda pre, ka: pre + [Load(SIDE_Q, 0, 0, 1, 0, 0)], "origin_h must be a multiple of box_h = 2"),
            (lambda pre, ka: pre + [Load(SIDE_Q, 0, 0, 0, 4, 0)], "below grid_w = 4, got 4"),
            (lambda pre, ka: pre + [Load(SIDE_K, 0, 0, 0, 2, ka, rows=1)],
             r"a rows LOAD takes no origin .* got \(0, 0, 2\)")],
        10: [(lambda pre, ka: pre + [ld_q, Load(SIDE_K, 0, 0, 0, 0, ka), Compute(0, 0),
                                     Compute(0, 0)], "COMPUTE while the result"),
             (lambda pre, ka: pre + [ld_q, Load(SIDE_K, 0, 0, 0, 0, ka), Compute(0, 0)] + pre[:1],
              "CONFIG while the result")],
        11: [(lambda pre, ka: pre + [ld_q, Load(SIDE_K, 0, 0, 0, 0, ka), Compute(0, 0, 2)],
              r"COMPUTE kind 2 \(PV\) needs the attention path"),
             (lambda pre, ka: pre + [Attention(0xB8AA, 13)], "ATTENTION needs the attention"),
             (lambda pre, ka: [Attention(0xB8AA, 13)], "ATTENTION needs the attention"),
             (lambda pre, ka: pre + [Strides(SIDE_V, 16, 64, 192)],
              "STRIDES of side V needs the attention path"),
             (lambda pre, ka: pre + [Load(SIDE_V, 0, 0, 0, 0, ka)],
              "LOAD of side V needs the attention path")],
        12: [(lambda pre, ka: pre + [Load(SIDE_Q, 0, 0, 0, 0, 1 << 20)], "reads up to byte"),
             (lambda pre, ka: pre + [Load(SIDE_K, 1, 0, 0, 0, 1 << 20, rows=1)],
              "LOAD of the K .* rows at 1048576 reads up to byte"),
             (lambda pre, ka: pre + [ld_q, Load(SIDE_K, 0, 0, 0, 0, ka), Compute(0, 0),
                                     Store(1 << 20)], "ends past the memory")],
    }


CASES = [(code, i) for code, items in _error_programs().items() for i in range(len(items))]


def test_every_error_code_is_exercised():
    assert sorted(_error_programs()) == sorted(ERROR_CODES)


@pytest.mark.parametrize("code, i", CASES)
def test_error_codes(code, i):
    mem, q, k, kaddr, pre = _setup(GRID, BOX)
    build, match = _error_programs()[code][i]
    prog = build(pre, kaddr)
    lim = CoreLimits(64, 128, variants=("dense", "pe"))
    with pytest.raises(ProgramError, match=match) as e:
        run_program(prog, mem, lim)
    assert e.value.code == code
    assert e.value.index == len(prog) - 1           # the failing command is the last one
    assert f"error {code} ({ERROR_CODES[code][0]})" in str(e.value)


def test_dispatcher_bits_need_a_built_dispatcher():
    mem, q, k, kaddr, pre = _setup(GRID, BOX, reuse=1, sched=1, match=1)
    with pytest.raises(ProgramError, match="selects variant 'full'; this core runs dense, pe") as e:
        run_program(pre, mem, CoreLimits(variants=("dense", "pe")))
    assert e.value.code == 2 and e.value.index == 0
    # Without reuse the dispatcher bits are ignored (dense), as on the engine.
    mem, q, k, kaddr, pre = _setup(GRID, BOX, reuse=0, sched=1, match=1)
    run_program(pre, mem, CoreLimits(variants=("dense",)))


def test_stores_before_an_error_stay_in_memory():
    mem, q, k, kaddr, pre = _setup(GRID, BOX)
    prog = pre + [Load(SIDE_Q, 0, 0, 0, 0, 0), Load(SIDE_K, 0, 0, 0, 0, kaddr), Compute(0, 0),
                  Store(4096), Store(8192)]
    with pytest.raises(ProgramError):
        run_program(prog, mem)
    want = _box_eff_s(q, k, GRID, GROUPS, (0, 0, 0), (0, 0, 0), BOX)
    assert np.array_equal(mem.read(4096, 64, np.int32).reshape(8, 8), want)
    assert not mem.read(8192, 64, np.int32).any()


def test_words_and_dataclasses_run_alike():
    mem, q, k, kaddr, pre = _setup(GRID, BOX, seed=9)
    prog = pre + [Load(SIDE_Q, 1, 0, 2, 2, 0), Load(SIDE_K, 1, 0, 0, 2, kaddr), Compute(1, 1),
                  Store(4096)]
    a = run_program(prog, mem)
    b = run_program([c.encode() for c in prog], mem)
    assert np.array_equal(a.blocks[0].s, b.blocks[0].s) and a.counters == b.counters
    with pytest.raises(ValueError, match="memory must be a golden.engine.program.Memory"):
        run_program(prog, bytearray(10))
    with pytest.raises(ValueError, match="ran no CONFIG"):
        run_program([Fence()], mem).grid


def test_preset_head_blocks_match_hunyuanvideo_boxes():
    grid, box = (2, 4, 8), (2, 4, 4)
    qkv = make_qkv("hunyuanvideo", grid, seed=2)
    g = ChannelGroups.from_preset("hunyuanvideo")
    mem = Memory(1 << 16)
    strides = (128, 8 * 128, 32 * 128)
    mem.write_tensor(0, qkv.q, VideoGrid(*grid), strides)
    mem.write_tensor(8192, qkv.k, VideoGrid(*grid), strides)
    prog = [Config(*box, 128, *g.directions, 5, 3, 1, 1, 1, *grid)] + groups_commands(
        g.group_of) + [Strides(0, *strides), Strides(1, *strides),
                       Load(0, 0, 0, 0, 4, 0), Load(1, 1, 0, 0, 0, 8192), Compute(0, 1),
                       Store(16384)]
    r = run_program(prog, mem)
    want = _box_eff_s(qkv.q, qkv.k, grid, g, (0, 0, 4), (0, 0, 0), box)
    assert np.array_equal(r.blocks[0].s, want)
