"""Attention heads as engine-core commands (``kaleido_hw/engine/host_attention.py``, the
ATTENTION command, side V and COMPUTE kind 2 of ``golden/engine/program.py``): O read back
from memory equals the whole-grid section 15 (``whole_grid_o``) bit for bit on padded grids,
every variant, V along each axis in windows of 2 and 3, on and off, one bank and two; the
program's shape; an attention block's S, P and P @ V counters against their own models;
every error an attention program can raise; bad plan arguments."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from golden import ChannelGroups
from golden.engine.commands import (KIND_PV, SIDE_K, SIDE_Q, SIDE_V, Attention, Compute,
                                    Config, Load, Store, Strides)
from golden.engine.pv import pv_counters, pv_engine
from golden.engine.program import CoreLimits, Memory, ProgramError, box_coords, run_program
from golden.numerics import VideoGrid
from golden.quality import _softmax
from golden.vector.online import O_FRAC_BITS
from golden.window import window_effective_operand, window_masks
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.host import run_head, whole_grid_s
from kaleido_hw.engine.host_attention import (AttentionAddrs, plan_attention, run_attention,
                                              whole_grid_o, write_attention_operands)
from token_data import smooth_tensors


SMALL = KaleidoConfig(engine_max_tokens=16, engine_max_head_dim=32)
MID = KaleidoConfig(engine_max_tokens=24, engine_max_head_dim=32)
G16 = ChannelGroups.from_sizes(4, 6, 6)


def _check_o(cfg, grid, groups, seed=0, **kw):
    q, k, v = smooth_tensors(grid, groups.head_dim, seed, 3)
    run = run_attention(cfg, q, k, v, grid, groups, **kw)
    p = run.plan
    ref = whole_grid_o(q, k, v, grid, groups, p.full_bits, p.half_bits, p.variant, p.scale,
                       p.box, p.v_dir, p.v_window, p.v_reuse)
    assert np.array_equal(run.o, ref)
    return run


@pytest.mark.parametrize("variant", ["dense", "pe", "full"])
@pytest.mark.parametrize("v_dir, v_window", [(0, 2), (1, 3), (2, 2)])
@pytest.mark.parametrize("v_reuse", [True, False])
def test_o_equals_the_whole_grid(variant, v_dir, v_window, v_reuse):
    """An odd grid, padded boxes (boxes of at most 24 tokens)."""
    run = _check_o(MID, (3, 5, 6), G16, variant=variant, v_dir=v_dir, v_window=v_window,
                   v_reuse=v_reuse)
    p = run.plan
    assert p.n_q > 4 and any(g % b for g, b in zip(p.grid.shape, p.box))
    if v_reuse:
        assert p.box[v_dir] % v_window == 0 or p.box[v_dir] >= p.grid.shape[v_dir]


@pytest.mark.parametrize("banks", [1, 2])
def test_one_bank_and_two_give_the_same_o(banks):
    grid = (2, 6, 6)
    q, k, v = smooth_tensors(grid, 16, 3, 3)
    runs = [run_attention(SMALL, q, k, v, grid, G16, banks=b) for b in (1, banks)]
    assert np.array_equal(runs[0].o, runs[1].o)
    assert runs[0].result.counters["loads"] == runs[1].result.counters["loads"]


def test_o_is_attention():
    """The dense head without V reuse against float64 ``softmax(S * scale) @ V`` (the
    integer pipeline's rounding only): a bad scale, key order or mask would fail this."""
    grid = (2, 4, 6)
    q, k, v = smooth_tensors(grid, 16, 1, 3)
    run = run_attention(SMALL, q, k, v, grid, G16, variant="dense", v_reuse=False,
                        scale=0.05)
    s = whole_grid_s(q, k, grid, G16, 5, 3, "dense").astype(np.float64)
    ref = _softmax(s * 0.05) @ v.astype(np.float64)
    got = run.o / (1 << O_FRAC_BITS)
    assert np.abs(got - ref).max() < 0.5          # V's units: int8 values
    cos = (got * ref).sum() / np.linalg.norm(got) / np.linalg.norm(ref)
    assert cos > 0.999


def test_program_shape():
    """Per query box: its Q, then every key box forward with K and V in the same bank
    index, COMPUTE kind 2 with first / last, one STORE of O after the last; the next new
    operands load before a COMPUTE (two banks), into the other bank."""
    plan = plan_attention(SMALL, (2, 4, 6), 16, G16)
    cmds = plan.commands
    assert isinstance(cmds[0], Config)
    assert [type(c) for c in cmds[1:4]] == [type(cmds[1]), Attention, Strides]
    assert [c.side for c in cmds if isinstance(c, Strides)] == [SIDE_Q, SIDE_K, SIDE_V]
    computes = [c for c in cmds if isinstance(c, Compute)]
    n = plan.n_q
    assert len(computes) == n * n
    assert all(c.kind == KIND_PV and c.v_bank == c.k_bank and not c.acc for c in computes)
    assert [(c.first, c.last) for c in computes[:n]] == \
        [(int(i == 0), int(i == n - 1)) for i in range(n)]
    stores = [c.address for c in cmds if isinstance(c, Store)]
    assert stores == [plan.o_address(qi) for qi in range(n)]
    loads = [c for c in cmds if isinstance(c, Load)]
    kv = [(c.side, c.bank, c.origin) for c in loads if c.side != SIDE_Q]
    assert all(a[0] == SIDE_K and b[0] == SIDE_V and a[1:] == b[1:]
               for a, b in zip(kv[::2], kv[1::2]))
    # Key boxes forward in every row: row r's key origins are those of row 0.
    origins = [plan.origin(st.ki) for st in plan.steps]
    assert origins == [plan.origin(i) for i in range(n)] * n
    # Every COMPUTE reads its step's boxes: the loads before it left them in its banks.
    held, j = {}, 0
    for c in cmds:
        if isinstance(c, Load):
            held[(c.side, c.bank)] = c.origin
        if isinstance(c, Compute):
            st = plan.steps[j]
            assert held[(SIDE_Q, c.q_bank)] == plan.origin(st.qi)
            assert held[(SIDE_K, c.k_bank)] == held[(SIDE_V, c.v_bank)] == plan.origin(st.ki)
            j += 1
    # Forward key order: a row starts by loading key box 0 again.
    sides = [c.side for c in cmds if isinstance(c, Load)]
    assert (sides.count(SIDE_Q), sides.count(SIDE_K), sides.count(SIDE_V)) == (n, n * n, n * n)
    assert plan.memory_size == plan.o_address(n)
    a = AttentionAddrs.packed((2, 4, 6), 16)
    assert (a.k - a.q, a.v - a.k, a.o - a.v) == (48 * 16,) * 3


def test_blocks_against_their_models():
    """With ``engine=True``: an attention block's S is the kind-S block of the same boxes,
    its P @ V counters are ``pv_counters`` of its P and V box, and the arrays' P @ V
    (``pv_engine``) of them is P @ V_eff of the box: what the interpreter adds."""
    grid = (2, 4, 6)
    q, k, v = smooth_tensors(grid, 16, 2, 3)
    run = run_attention(SMALL, q, k, v, grid, G16, engine=True, variant="pe", v_dir=2)
    p, res = run.plan, run.result
    box = VideoGrid(*p.box)
    for blk in res.blocks:
        assert blk.kind == KIND_PV and blk.engine is not None and blk.pv is not None
        ki = next(i for i in range(p.n_q) if p.origin(i) == blk.k_origin)
        vbox = np.zeros((box.n, 16), np.int8)
        real = p.real_tokens(ki)
        coords = box_coords(blk.k_origin, p.box)[real]
        vbox[real] = v[np.ravel_multi_index(coords.T, grid)]
        assert not blk.p[:, ~real].any()
        want = pv_counters(blk.p, vbox, box, 2, 2, 4, 4, 4, p.full_bits, p.half_bits, True)
        assert blk.pv == want
        masks = window_masks(vbox, box, 2, 2, p.full_bits, p.half_bits)
        v_eff = window_effective_operand(vbox, masks, box, 2, 2)
        assert np.array_equal(pv_engine(blk.p, vbox, box, 2, 2, p.full_bits, p.half_bits),
                              blk.p @ v_eff.astype(np.int64))
    assert res.counters["pv_cycles"] == sum(b.pv.cycles for b in res.blocks)
    assert res.counters["cycles"] == sum(b.engine.cycles for b in res.blocks)
    # The same boxes as S blocks (kind 0): the same S.
    head = run_head(SMALL, q, k, grid, G16, variant="pe", box=p.box)
    s_blocks = {(b.q_origin, b.k_origin): b.s for b in head.result.blocks}
    assert all(np.array_equal(s_blocks[(b.q_origin, b.k_origin)], b.s) for b in res.blocks)
    assert [b.o is not None for b in res.blocks] == \
        [st.ki == p.n_q - 1 for st in p.steps]


# -- errors -------------------------------------------------------------------------------

GRID, BOX, D = (2, 4, 4), (2, 2, 4), 16


def _base():
    """A valid two-query-box attention program on GRID, its memory and the core limits."""
    q, k, v = smooth_tensors(GRID, D, 4, 3)
    plan = plan_attention(SMALL, GRID, D, G16, box=BOX)
    mem = Memory(plan.memory_size)
    write_attention_operands(mem, q, k, v, plan.addrs, GRID)
    return list(plan.commands), mem, plan


def _cut(cmds, cls, nth=0, after=False):
    """The program up to the ``nth`` command of type ``cls`` (excluded, or included)."""
    idx = [i for i, c in enumerate(cmds) if isinstance(c, cls)][nth]
    return cmds[:idx + 1] if after else cmds[:idx]


def _error_cases():
    base, _, plan = _base()
    att = next(c for c in base if isinstance(c, Attention))
    cmp0 = next(c for c in base if isinstance(c, Compute))
    rep = dataclasses.replace
    pre = _cut(base, Compute)                     # everything before the first COMPUTE
    first = _cut(base, Compute, 0, after=True)    # ... and the first COMPUTE (box open)
    done = _cut(base, Compute, 1, after=True)     # ... the query box's last COMPUTE
    no_att = [c for c in pre if not isinstance(c, Attention)]
    ld_v = next(c for c in base if isinstance(c, Load) and c.side == SIDE_V)
    return [
        (2, pre + [rep(att, scale_mult=100)], "scale_mult must be in"),
        (2, pre + [rep(att, scale_shift=0)], r"scale_shift must be in \[1, 47\]"),
        (2, pre + [rep(att, v_dir=3)], "v_dir must be 0"),
        (3, [att], "ATTENTION before CONFIG"),
        (3, no_att + [cmp0], "COMPUTE kind 2 before ATTENTION"),
        (5, [c for c in pre if not (isinstance(c, Load) and c.side == SIDE_V and c.bank)]
         + [rep(cmp0, v_bank=1)], "v_bank 1 holds no V box"),
        (7, pre + [rep(cmp0, first=0)], "without first, and no query box is open"),
        (7, first + [Store(plan.o_address(0))], "STORE while the attention of the query box"),
        (7, done + [Compute(cmp0.q_bank, cmp0.k_bank, 0, 1)], "acc onto the attention output"),
        (9, pre + [rep(ld_v, rows=1, origin_t=0, origin_h=0, origin_w=0)],
         "a rows LOAD is for weight rows"),
        (10, first + [Compute(cmp0.q_bank, cmp0.k_bank)], "COMPUTE kind 0 while the attention"),
        (10, first + [base[0]], "CONFIG while the attention"),
        (10, first + [att], "ATTENTION while the attention"),
        (10, first + [cmp0], "COMPUTE kind 2 with first while the attention"),
        (10, done + [cmp0], "with first while the result of the COMPUTE"),
    ]


@pytest.mark.parametrize("code, prog, match", _error_cases())
def test_attention_errors(code, prog, match):
    _, mem, plan = _base()
    with pytest.raises(ProgramError, match=match) as e:
        run_program(prog, mem, plan.limits)
    assert e.value.code == code and e.value.index == len(prog) - 1


def test_the_program_runs_clean_and_needs_the_attention_path():
    base, mem, plan = _base()
    run_program(base, mem, plan.limits)
    with pytest.raises(ProgramError, match="ATTENTION needs the attention path") as e:
        run_program(base, mem, dataclasses.replace(plan.limits, attention=False))
    assert e.value.code == 11
    # A box whose P @ V could overflow the accumulators (acc_width 16: 7 keys).
    with pytest.raises(ProgramError, match="may overflow the P @ V accumulators") as e:
        run_program(base, mem, dataclasses.replace(plan.limits, pv_keys=7))
    assert e.value.code == 2


def test_stored_o_is_int16_rows():
    base, mem, plan = _base()
    res = run_program(base, mem, plan.limits)
    last = [b for b in res.blocks if b.o is not None]
    assert len(last) == plan.n_q
    for qi, b in enumerate(last):
        got = mem.read(plan.o_address(qi), plan.box_tokens * D, np.int16)
        assert np.array_equal(got.reshape(plan.box_tokens, D), b.o)
        assert b.address == plan.o_address(qi)
    assert res.counters["bytes_stored"] == plan.n_q * plan.o_bytes


@pytest.mark.parametrize("kw, match", [
    (dict(v_dir=3), r"v_dir values must be 0 \(t\), 1 \(y\) or 2 \(x\)"),
    (dict(v_window=4), r"window must be an integer in \[2, 3\]"),
    (dict(box=(2, 2, 4), v_dir=2, v_window=3), r"cuts V's windows of 3 along x"),
    (dict(box=(2, 2, 3), v_dir=2), r"cuts reuse pairs along \['x'\]"),
    (dict(scale=1e6), "scale must lie in"),
    (dict(v_reuse=1), "v_reuse must be True or False"),
])
def test_plan_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        plan_attention(SMALL, (2, 6, 6), 16, G16, **kw)
    # A box that keeps the pairs and V's windows of 3 along y.
    assert plan_attention(SMALL, (1, 6, 6), 16, G16, box=(1, 6, 2), v_dir=1,
                          v_window=3).box == (1, 6, 2)


def test_plain_core_has_no_v_reuse():
    plain = KaleidoConfig(engine_pe="plain", engine_dispatcher="none", engine_max_tokens=16,
                          engine_max_head_dim=32)
    with pytest.raises(ValueError, match="plain build"):
        plan_attention(plain, (2, 4, 4), 16, G16)
    run = _check_o(plain, (2, 4, 4), G16, v_reuse=False)
    assert run.plan.limits.plain


def test_core_limits_pv_keys_follow_acc_width():
    assert CoreLimits.from_config(KaleidoConfig()).pv_keys == 257
    assert CoreLimits.from_config(KaleidoConfig(acc_width=28)).pv_keys == 4112
