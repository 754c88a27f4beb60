"""Amaranth-simulator unit tests of the blocks every engine array is built from
(``docs/array.md``): the per-PE decoder against the golden decode table, the code unit
against ``golden.reuse_masks``, the work bitmaps against the table; the configuration and
host-port checks; and the single-array cycle model (``golden.array.schedule.tile_counters``)
against a per-quad reference. Whole engines run in ``tests/engine/test_kaleido_engine.py``
and their cocotb benches."""

from __future__ import annotations

import gc
import itertools
import warnings

import numpy as np
import pytest
from amaranth.hdl import Module, Signal, UnusedElaboratable
from amaranth.sim import Simulator

from golden.array.schedule import ABSENT, DECODE, Op, Sel, Split, _contributions, tile_counters
from golden.array.window3 import DECODE3
from golden.numerics import FULL, HALF, NONE, ChannelGroups, VideoGrid, reuse_masks
from golden.window import window_masks
from golden.pe.model import Op as MOp
from golden.pe.model import Part as MPart
from golden.pe.model import PECtrl
from golden.pe.model import Split as MSplit
from golden.pe.model import pe_contributions
from kaleido_hw.array.tile_cell import PASS_ENTRY, TileDecoder, decode3_entry, decode_entry
from kaleido_hw.config import ConfigError, KaleidoConfig
from kaleido_hw.pe.layouts import Part
from kaleido_hw.engine.code_unit import CodeUnit, code_mask, work_bitmap
from kaleido_hw.engine.host_port import check_run, engine_ports
from kaleido_hw.engine.kaleido_engine import ERROR_BITS, KaleidoEngine
from kaleido_hw.engine.tile_layouts import EngineGeometry


CODES = (FULL, HALF, NONE, ABSENT)


def simulate(dut, bench, clock=True):
    sim = Simulator(dut)
    if clock:
        sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


# -- decode table -------------------------------------------------------------------------------

@pytest.mark.parametrize("p,qc,kc", list(itertools.product(range(4), CODES, CODES)))
def test_decode_table_is_the_golden_table(p, qc, kc):
    """The RTL's table (docs/array.md text) names the same micro-op as golden.array.schedule.decode:
    a golden LOWc / LOWr is the low half t0 of a column- / row-split MUL, and the split of
    every working entry is COL exactly when the column follower is HALF (the decoder
    derives the split from kc alone)."""
    op, split, parts = decode_entry(p, qc, kc)
    gop, gsplit, gsel = int(DECODE[0][p, qc, kc]), int(DECODE[1][p, qc, kc]), DECODE[2][p, qc, kc]
    if gop == Op.IDLE:
        assert op.name == "IDLE" and all(x.name == "NONE" for x in parts)
        return
    assert op.name == "MUL"
    want_split = {Op.MUL: "COL" if gsplit == Split.COL else "ROW", Op.LOW_COL: "COL",
                  Op.LOW_ROW: "ROW"}[gop]
    assert split.name == want_split == ("COL" if kc == HALF else "ROW")
    for part, s in zip(parts, gsel):
        if gop == Op.MUL:
            assert part.name == {Sel.NONE: "NONE", Sel.PROD: "PROD", Sel.HIGH: "HIGH",
                                 Sel.LOWPART: "LOW"}[int(s)]
        else:
            assert part.name == {Sel.NONE: "NONE", Sel.PROD: "LOW"}[int(s)]


def _model_ctrl(op, split, parts):
    return PECtrl(op=MOp(op.value), split=MSplit(split.value),
                  parts=tuple(MPart(p.value) for p in parts))


@pytest.mark.parametrize("p,qc,kc", list(itertools.product(range(4), CODES, CODES)))
def test_pe_words_add_what_the_schedule_adds(p, qc, kc):
    """The PE (its cycle model) driven by the decoded word adds to R0..R2 exactly what the
    golden schedule's micro-op adds, for random operands; busy iff the entry is not idle."""
    rng = np.random.default_rng(p * 16 + qc * 4 + kc)
    x = rng.integers(-128, 128, 200)
    y = rng.integers(-128, 128, 200)
    ctrl = _model_ctrl(*decode_entry(p, qc, kc))
    got, busy = pe_contributions(ctrl, x, np.zeros_like(x), y)
    want = _contributions(*(np.full(200, int(DECODE[i][p, qc, kc])) for i in range(2)),
                          np.broadcast_to(DECODE[2][p, qc, kc], (200, 3)), x, y)
    for r in range(3):
        assert np.array_equal(np.broadcast_to(got[r], (200,)), want[r]), f"register {r}"
    assert np.all(busy == (DECODE[0][p, qc, kc] != Op.IDLE))


def test_tile_decoder_rtl():
    """Every input of the TileDecoder: the table entry when a channel issues in a real PE,
    idle otherwise; a first step drains R0 and moves/clears as the pass needs."""
    dut = TileDecoder()

    async def bench(ctx):
        for p, qc, kc, issue, rv, cv, first in itertools.product(
                range(4), range(4), range(4), (0, 1), (0, 1), (0, 1), (0, 1)):
            ctx.set(dut.mode.pass_idx, p)
            ctx.set(dut.mode.issue, issue)
            ctx.set(dut.mode.first, first)
            ctx.set(dut.rvalid, rv)
            ctx.set(dut.cvalid, cv)
            ctx.set(dut.qc, qc)
            ctx.set(dut.kc, kc)
            await ctx.delay(1e-9)
            c = ctx.get(dut.ctrl)
            # The op is always MUL and the split follows kc alone; the parts say the rest.
            assert c.op.name == "MUL"
            assert c.split.name == ("COL" if kc == HALF else "ROW")
            if issue and rv and cv:
                op, split, parts = decode_entry(p, qc, kc)
                assert list(c.part) == list(parts)
                if op.name != "IDLE":
                    assert c.split == split
            else:
                assert all(x.name == "NONE" for x in c.part)
            clear, move = PASS_ENTRY[p] if first else (0, PASS_ENTRY[1][1].NONE)
            assert c.clear == clear and c.move == move
            assert c.drain.name == ("R0" if first else "NONE")

    simulate(dut, bench, clock=False)


def test_tile_decoder_window3_rtl():
    """The TileDecoder with linear window-3 quads: with ``w3`` the entry of (pass, c1 = qc,
    c2 = qc2) of ``decode3`` (pass 3 idle), split ROW whatever the column code; without, the
    attention table as in the decoder without the option; first steps as in every pass."""
    dut = TileDecoder(window3=True)

    async def bench(ctx):
        for p, qc, qc2, kc, w3, issue, first in itertools.product(
                range(4), range(4), range(4), range(4), (0, 1), (0, 1), (0, 1)):
            ctx.set(dut.mode.pass_idx, p)
            ctx.set(dut.mode.issue, issue)
            ctx.set(dut.mode.first, first)
            ctx.set(dut.rvalid, 1)
            ctx.set(dut.cvalid, 1)
            ctx.set(dut.qc, qc)
            ctx.set(dut.qc2, qc2)
            ctx.set(dut.kc, kc)
            ctx.set(dut.w3, w3)
            await ctx.delay(1e-9)
            c = ctx.get(dut.ctrl)
            op, split, parts = decode3_entry(p, qc, qc2) if w3 else decode_entry(p, qc, kc)
            assert list(c.part) == (list(parts) if issue else [Part.NONE] * 3)
            assert c.split.name == ("COL" if kc == HALF and not w3 else "ROW")
            clear, move = PASS_ENTRY[p] if first else (0, PASS_ENTRY[1][1].NONE)
            assert c.clear == clear and c.move == move

    simulate(dut, bench, clock=False)


@pytest.mark.parametrize("p", range(3))
def test_pe_words_add_what_window3_adds(p):
    """The PE driven by a window-3 word adds what ``golden.array.window3``'s micro-op adds."""
    rng = np.random.default_rng(p)
    x = rng.integers(-128, 128, 200)
    y = rng.integers(-128, 128, 200)
    for c1, c2 in itertools.product(CODES, CODES):
        got, busy = pe_contributions(_model_ctrl(*decode3_entry(p, c1, c2)), x,
                                     np.zeros_like(x), y)
        want = _contributions(*(np.full(200, int(DECODE3[i][p, c1, c2])) for i in range(2)),
                              np.broadcast_to(DECODE3[2][p, c1, c2], (200, 3)), x, y)
        for r in range(3):
            assert np.array_equal(np.broadcast_to(got[r], (200,)), want[r]), (c1, c2, r)
        assert np.all(busy == (DECODE3[0][p, c1, c2] != Op.IDLE))


# -- code unit and work bitmaps ----------------------------------------------------------------

def test_code_unit_against_reuse_masks():
    """CodeUnit codes equal golden.reuse_masks for a token pair, over random and near values,
    every threshold pair; the effective word takes the anchor's value where FULL."""
    lanes = 16
    dut = CodeUnit(lanes)
    grid, groups = VideoGrid(1, 1, 2), ChannelGroups((0,) * lanes, (2, 2, 2))   # pair along x
    rng = np.random.default_rng(5)

    async def bench(ctx):
        for trial in range(120):
            full_bits = int(rng.integers(4, 8))
            half_bits = int(rng.integers(3, full_bits))
            a = rng.integers(-128, 128, lanes)
            f = np.where(rng.random(lanes) < 0.5, a ^ rng.integers(0, 32, lanes),
                         rng.integers(-128, 128, lanes))
            f = ((f + 128) % 256 - 128).astype(np.int8)
            x = np.stack([a.astype(np.int8), f])
            want = reuse_masks(x, grid, groups, full_bits, half_bits)[1]
            reuse, present = trial % 7 != 0, trial % 11 != 0
            ctx.set(dut.anchor, int.from_bytes(x[0].tobytes(), "little"))
            ctx.set(dut.follower, int.from_bytes(x[1].tobytes(), "little"))
            ctx.set(dut.present, present)
            ctx.set(dut.reuse, reuse)
            ctx.set(dut.full_mask, code_mask(full_bits))
            ctx.set(dut.half_mask, code_mask(half_bits))
            await ctx.delay(1e-9)
            lo, hi = ctx.get(dut.code_lo), ctx.get(dut.code_hi)
            got = [((lo >> c) & 1) | ((hi >> c) & 1) << 1 for c in range(lanes)]
            if not present:
                assert got == [ABSENT] * lanes
            elif not reuse:
                assert got == [NONE] * lanes
            else:
                assert got == [int(v) for v in want]
                eff = ctx.get(dut.effective).to_bytes(lanes, "little")
                want_eff = np.where(want == FULL, x[0], x[1]).astype(np.int8).tobytes()
                assert eff == want_eff
            planes = [ctx.get(dut.is_code[v]) for v in range(4)]
            for c in range(lanes):
                assert [(planes[v] >> c) & 1 for v in range(4)] == \
                    [int(got[c] == v) for v in range(4)]

    simulate(dut, bench, clock=False)


def test_code_unit_window_rule_every_byte_pair():
    """With ``window`` (a linear block) the CodeUnit's codes equal golden.window_masks with
    windows of 2 for every (anchor, follower) byte pair and every threshold pair, and the
    effective word takes the anchor's value where FULL; ``window`` = 0 keeps the top-bits rule
    on the same words (pairs that only one of the rules calls FULL occur at every threshold)."""
    lanes = 128
    dut = CodeUnit(lanes)
    values = np.arange(-128, 128)
    # Token 0 the anchors, token 1 the followers: one channel per byte pair, paired along x.
    x = np.stack(np.meshgrid(values, values, indexing="ij"), -1).reshape(-1, 2).T.astype(np.int8)
    grid = VideoGrid(1, 1, 2)
    groups = ChannelGroups((0,) * x.shape[1], (2, 2, 2))
    # Every full_bits (the window distance depends on it alone), each with one half_bits.
    thresholds = [(4, 3), (5, 3), (6, 4), (7, 6)]

    def bits(value):
        return np.unpackbits(np.frombuffer(value.to_bytes(lanes // 8, "little"), np.uint8),
                             bitorder="little")

    async def bench(ctx):
        ctx.set(dut.present, 1)
        ctx.set(dut.reuse, 1)
        for full_bits, half_bits in thresholds:
            ctx.set(dut.full_mask, code_mask(full_bits))
            ctx.set(dut.half_mask, code_mask(half_bits))
            wants = {1: window_masks(x, grid, 2, 2, full_bits, half_bits)[1],
                     0: reuse_masks(x, grid, groups, full_bits, half_bits)[1]}
            assert np.count_nonzero((wants[1] == FULL) != (wants[0] == FULL)) > 0
            for i, start in enumerate(range(0, x.shape[1], lanes)):
                a, f = x[0, start:start + lanes], x[1, start:start + lanes]
                ctx.set(dut.anchor, int.from_bytes(a.tobytes(), "little"))
                ctx.set(dut.follower, int.from_bytes(f.tobytes(), "little"))
                # The top-bits rule on every eighth word (its own test covers it in full).
                for window in ((1, 0) if i % 8 == 0 else (1,)):
                    ctx.set(dut.window, window)
                    await ctx.delay(1e-9)
                    got = bits(ctx.get(dut.code_lo)) | bits(ctx.get(dut.code_hi)) << 1
                    want = wants[window][start:start + lanes]
                    assert np.array_equal(got, want), (full_bits, half_bits, window, start)
                    eff = ctx.get(dut.effective).to_bytes(lanes, "little")
                    assert eff == np.where(want == FULL, a, f).astype(np.int8).tobytes()

    simulate(dut, bench, clock=False)


def test_work_bitmap_is_the_table():
    """A channel has work in a pass iff some (row code, column code) that occurs has a
    non-idle entry: every pair of code sets, every pass (one lane per pair of sets)."""
    pairs = list(itertools.product(range(1, 16), range(1, 16)))
    m = Module()
    qs = [Signal(len(pairs), name=f"qs{v}") for v in range(4)]
    ks = [Signal(len(pairs), name=f"ks{v}") for v in range(4)]
    outs = [Signal(len(pairs), name=f"work{p}") for p in range(4)]
    for p in range(4):
        m.d.comb += outs[p].eq(work_bitmap(p, qs, ks))

    async def bench(ctx):
        for v in range(4):
            ctx.set(qs[v], sum(((a >> v) & 1) << i for i, (a, _) in enumerate(pairs)))
            ctx.set(ks[v], sum(((b >> v) & 1) << i for i, (_, b) in enumerate(pairs)))
        await ctx.delay(1e-9)
        for p in range(4):
            got = ctx.get(outs[p])
            for i, (a, b) in enumerate(pairs):
                want = any(DECODE[0][p, u, w] != Op.IDLE for u in range(4) for w in range(4)
                           if a >> u & 1 and b >> w & 1)
                assert (got >> i) & 1 == want, f"pass {p} sets {a:04b} {b:04b}"

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()


# -- configuration errors ------------------------------------------------------------------------

def test_engine_needs_power_of_two_array():
    with warnings.catch_warnings():
        # The half-built component is garbage: Amaranth would warn that it was never used.
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(ConfigError, match="rows must be a power of two"):
            KaleidoEngine(KaleidoConfig(rows=3))
        with pytest.raises(ConfigError, match="cols must be a power of two"):
            EngineGeometry.from_config(KaleidoConfig(cols=6))
        gc.collect()


@pytest.mark.parametrize("kwargs,match", [
    ({"engine_max_tokens": 1}, "engine_max_tokens must be in"),
    ({"engine_max_head_dim": 12}, "engine_max_head_dim must be a multiple of 8"),
    ({"engine_max_head_dim": 512}, "engine_max_head_dim must be in"),
])
def test_engine_config_fields(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        KaleidoConfig(**kwargs)


def test_python_check_rejects_what_the_hardware_cannot_run():
    cfg = KaleidoConfig()
    groups = ChannelGroups.from_sizes(4, 6, 6)
    with pytest.raises(ValueError, match="engine_max_tokens = 64"):
        check_run(cfg, VideoGrid(3, 5, 5), groups)
    with pytest.raises(ValueError, match="engine_max_head_dim = 128"):
        check_run(cfg, VideoGrid(1, 2, 2), ChannelGroups.from_sizes(64, 64, 8))
    with pytest.raises(ValueError, match="full_bits/half_bits"):
        check_run(cfg, VideoGrid(1, 2, 2), groups, full_bits=4, half_bits=4)
    narrow = KaleidoConfig(preset="cogvideox-5b", acc_width=20)
    with pytest.raises(ValueError, match="acc_width = 20 sums exactly"):
        check_run(narrow, VideoGrid(1, 2, 2), ChannelGroups.from_sizes(100, 14, 14))
    ports = engine_ports(cfg, VideoGrid(2, 3, 4), ChannelGroups((1, 0, 2, 2), (2, 0, 1)),
                         reuse=False)
    assert ports["cfg__group_map"] == 0b10_10_00_01
    assert ports["cfg__directions"] == 0b01_00_10 and ports["cfg__reuse"] == 0
    assert [name for name, _ in ERROR_BITS][:2] == ["grid", "head_dim"]


# -- the cycle model ------------------------------------------------------------------------------

def _per_quad_counters(q, k, grid, groups, rows, cols, reuse=True):
    """Reference of tile_counters: the per-quad, per-channel busy count of every quad
    (einsum over code histograms), its issued steps and the cycle formula over the quads
    in run order."""
    from golden.array.schedule import PASSES, Timing, _blocks, _plans
    _, plans = _plans(q, k, grid, groups, 5, 3, reuse)
    work = (DECODE[0] != Op.IDLE).astype(np.int64)
    out = {"busy": 0, "issued": [0] * 4, "skipped": [0] * 4, "bubbles": 0, "quads": 0}
    quad_steps = []
    for pl in plans:
        n, U = pl.channels.size, pl.anchors.size
        rb_idx, rb_real = _blocks(U, rows)
        cb_idx, cb_real = _blocks(U, cols)
        qc = np.where(rb_real[..., None], pl.qc[np.minimum(rb_idx, U - 1)], 255)
        kc = np.where(cb_real[..., None], pl.kc[np.minimum(cb_idx, U - 1)], 255)
        qh = np.stack([(qc == v).sum(axis=1) for v in range(4)], axis=-1)
        kh = np.stack([(kc == v).sum(axis=1) for v in range(4)], axis=-1)
        steps = np.zeros((qc.shape[0], kc.shape[0]), np.int64)
        out["quads"] += steps.size
        for p in range(PASSES):
            busy = np.einsum("anu,bnv,uv->abn", qh, kh, work[p])
            issued = (busy > 0).sum(axis=2)
            out["busy"] += int(busy.sum())
            out["issued"][p] += int(issued.sum())
            out["skipped"][p] += int((n - issued).sum())
            out["bubbles"] += int(np.maximum(rows - issued, 0).sum())
            steps += np.maximum(issued, rows)
        quad_steps.append(steps.ravel())
    out["cycles"] = Timing().total(np.concatenate(quad_steps), rows, cols)
    return out


@pytest.mark.parametrize("grid,rows,cols,sizes", [
    (VideoGrid(3, 5, 4), 4, 4, (4, 6, 6)), (VideoGrid(2, 7, 6), 2, 8, (3, 0, 9)),
    (VideoGrid(5, 3, 3), 8, 1, (7, 2, 1)), (VideoGrid(4, 8, 8), 4, 4, (16, 56, 56))])
def test_fast_cycle_model_equals_per_quad_reference(grid, rows, cols, sizes):
    groups = ChannelGroups.from_sizes(*sizes, directions=(2, 0, 1))
    rng = np.random.default_rng(grid.n + rows)
    shape = (grid.n, groups.head_dim)
    q, k = (np.clip(np.cumsum(rng.integers(-4, 5, shape), 0), -128, 127).astype(np.int8)
            for _ in range(2))
    for reuse in (True, False):
        c = tile_counters(q, k, grid, groups, rows, cols, reuse=reuse)
        ref = _per_quad_counters(q, k, grid, groups, rows, cols, reuse)
        assert (c.busy_pe_cycles, c.issued, c.skipped, c.bubbles, c.quads, c.cycles) == (
            ref["busy"], ref["issued"], ref["skipped"], ref["bubbles"], ref["quads"],
            ref["cycles"])
