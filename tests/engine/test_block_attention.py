"""BlockAttention (``kaleido_hw/engine/block_attention.py``) in Amaranth's simulator: the
attention blocks of a head as the interpreter's COMPUTE kind 2 runs them
(``golden.engine.program``, through ``kaleido_hw.engine.host_attention``), one run per
block with V written before it and S streamed in; O of every query box equal to the
interpreter's bit for bit, P @ V's counters (but its cycles, which depend on when P
arrives) equal to ``pv_counters`` of the block, under random gaps on S and back-pressure on
O; padding keys as the most negative score; a head whose channels do not fill the build;
configuration errors."""

from __future__ import annotations

import random
import shutil

import numpy as np
import pytest
from amaranth.hdl import Const, Value
from amaranth.sim import Simulator

from golden import ChannelGroups
from golden.engine.pv import pv_v_words
from golden.numerics import VideoGrid
from kaleido_hw.config import ConfigError, KaleidoConfig
from kaleido_hw.engine.block_attention import BlockAttention, check_block_attention_config
from kaleido_hw.engine.host_attention import run_attention
from kaleido_hw.engine.pv_engine import COUNTERS
from kaleido_hw.engine.pv_layouts import pv_v_word_layout
from kaleido_hw.flow.generate import emit_verilog
from kaleido_hw.flow.lint import lint_file
from kaleido_hw.vector.layouts import output_beat_layout, score_beat_layout
from token_data import smooth_tokens as _smooth


CFG = KaleidoConfig(engine_arrays=2, vector_lanes=8, engine_max_tokens=16,
                    engine_max_head_dim=16, vector_max_row=16)


def _pack(layout, fields) -> int:
    return Const.cast(layout.const(fields)).value


def _blocks(cfg, grid, groups, seed, **kw):
    """The interpreter's run of the head and, per block in program order, what the unit is
    given: (first, last, S rows with padding keys at the most negative score, the key
    box's V as pv_engine words) and what it must give (the block's P @ V counters, the
    query box's O after its last block)."""
    rng = np.random.default_rng(seed)
    n = VideoGrid(*grid).n
    d = groups.head_dim
    q, k, v = (_smooth(rng, n, d) for _ in range(3))
    run = run_attention(cfg, q, k, v, grid, groups, engine=True, **kw)
    plan = run.plan
    nb = plan.box_tokens
    lowest = -(1 << (cfg.vector_score_bits - 1))
    out = []
    for st, blk in zip(plan.steps, run.result.blocks):
        real = plan._real(st.ki)
        s = np.where(real[None, :], blk.s, lowest)
        vbox = np.zeros((nb, d), np.int64)
        coords = np.argwhere(np.ones(plan.box, bool))[real] + np.asarray(plan.origin(st.ki))
        vbox[real] = v[np.ravel_multi_index(coords.T, grid)]
        out.append((st.ki == 0, st.ki == plan.n_k - 1, s, pv_v_words(vbox, cfg.cols), blk))
    return run, out


def _simulate(cfg, run, blocks, *, gap=0.0, stall=0.0, seed=0):
    dut = BlockAttention(cfg)
    plan = run.plan
    rng = random.Random(seed)
    L = cfg.vector_lanes
    s_layout, v_layout = score_beat_layout(cfg), pv_v_word_layout(cfg)
    chunks = -(-cfg.engine_max_head_dim // L)
    got = {"o": [], "cnt": []}
    nb = plan.box_tokens

    async def bench(ctx):
        c = dut.cfg
        for name, value in (("t", plan.box[0]), ("h", plan.box[1]), ("w", plan.box[2]),
                            ("channels", plan.groups.head_dim), ("axis", plan.v_dir),
                            ("window", plan.v_window), ("reuse", int(plan.v_reuse)),
                            ("full_bits", plan.full_bits), ("half_bits", plan.half_bits),
                            ("mult", plan.scale.mult), ("shift", plan.scale.shift)):
            ctx.set(getattr(c, name), value)
        s_pay, v_pay = Value.cast(dut.s.payload), Value.cast(dut.v_in.payload)
        for first, last, s, vwords, _ in blocks:
            for cb, key, word in vwords:
                ctx.set(v_pay, _pack(v_layout, {"cb": cb, "key": key, "v": word}))
                ctx.set(dut.v_in.valid, 1)
                await ctx.tick().until(dut.v_in.ready)
            ctx.set(dut.v_in.valid, 0)
            ctx.set(dut.first, int(first))
            ctx.set(dut.last, int(last))
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            beats = []
            for r in range(nb):
                row = [int(x) for x in s[r]]
                for j in range(0, nb, L):
                    chunk = row[j:j + L]
                    beats.append(_pack(s_layout, {
                        "scores": chunk + [0] * (L - len(chunk)), "tail": len(chunk) - 1,
                        "last": int(j + L >= nb), "mult": 0, "shift": 0}))
            rows, cycles = [], 0
            offer = False
            while True:
                if not offer and beats and not (gap and rng.random() < gap):
                    ctx.set(s_pay, beats[0])
                    offer = True
                ctx.set(dut.s.valid, offer)
                ctx.set(dut.out.ready, int(not (stall and rng.random() < stall)))
                _, _, sv, sr, ov, orr, op, done = await ctx.tick().sample(
                    dut.s.valid, dut.s.ready, dut.out.valid, dut.out.ready, dut.out.payload,
                    dut.done)
                if sv and sr:
                    beats.pop(0)
                    offer = False
                if ov and orr:
                    rows.append(Const.cast(op).value)
                cycles += 1
                assert cycles < 200_000, "hang"
                if done and not beats:
                    break
            ctx.set(dut.s.valid, 0)
            assert not beats
            assert ctx.get(dut.error.p) == 0 and ctx.get(dut.error.pv) == 0
            assert ctx.get(dut.error.softmax) == 0 and ctx.get(dut.error.weight) == 0
            got["cnt"].append({n: ctx.get(getattr(dut.cnt.pv, n)) for n in COUNTERS})
            if last:
                assert len(rows) == nb * chunks
                got["o"].append(rows)
            else:
                assert not rows

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return got


def _check(cfg, grid, groups, seed=0, sim_kw=None, **kw):
    run, blocks = _blocks(cfg, grid, groups, seed, **kw)
    got = _simulate(cfg, run, blocks, **(sim_kw or {}))
    layout = output_beat_layout(cfg)
    L, nb = cfg.vector_lanes, run.plan.box_tokens
    chunks = -(-cfg.engine_max_head_dim // L)
    d = groups.head_dim
    finals = [blk for *_, blk in blocks if blk.o is not None]
    assert len(got["o"]) == len(finals) == run.plan.n_q
    for qi, (beats, blk) in enumerate(zip(got["o"], finals)):
        o = np.zeros((nb, chunks * L), np.int64)
        for i, x in enumerate(beats):
            f = layout.from_bits(x)
            assert (f.row, f.chunk, f.last) == (i // chunks, i % chunks, int(i % chunks ==
                                                                          chunks - 1))
            o[f.row, f.chunk * L:(f.chunk + 1) * L] = [f.values[j] for j in range(L)]
        assert np.array_equal(o[:, :d], blk.o), f"query box {qi}"
        assert not o[:, d:].any()
    for cnt, (*_, blk) in zip(got["cnt"], blocks):
        want = blk.pv
        assert cnt["busy_pe_cycles"] == want.busy_pe_cycles
        assert [cnt["issued_a"], cnt["issued_f1"], cnt["issued_f2"]] == list(want.issued)
        assert [cnt["skipped_f1"], cnt["skipped_f2"]] == list(want.skipped[1:])
        assert (cnt["bubbles"], cnt["blocks"], cnt["steps"]) == \
            (want.bubbles, want.blocks, want.steps)
        assert cnt["cycles"] >= want.cycles


G16 = ChannelGroups.from_sizes(4, 6, 6)


def test_head_of_padded_boxes():
    """Grid 2x3x6 in boxes of 16 (padding along y): two query boxes of three key blocks,
    V reuse along x."""
    _check(CFG, (2, 3, 6), G16, v_dir=2, sim_kw=dict(gap=0.3, stall=0.3, seed=1))


def test_windows_of_three_and_fewer_channels():
    """V along y in windows of 3, head_dim 12 of the build's 16: the output's last chunk
    half empty; dense S."""
    groups = ChannelGroups.from_sizes(4, 4, 4)
    _check(CFG, (1, 6, 5), groups, seed=2, v_dir=1, v_window=3, variant="dense")


def test_config_checks():
    with pytest.raises(ConfigError, match="vector_lanes = engine_arrays \\* cols = 8"):
        check_block_attention_config(KaleidoConfig(
            engine_arrays=2, vector_lanes=16, engine_max_tokens=16, engine_max_head_dim=16))
    with pytest.raises(ConfigError, match="vector_max_row >= engine_max_tokens"):
        check_block_attention_config(KaleidoConfig(
            engine_arrays=2, vector_lanes=8, engine_max_tokens=32, engine_max_head_dim=16,
            vector_max_row=16))


@pytest.mark.skipif(shutil.which("verilator") is None, reason="verilator not on PATH: make install")
def test_lint_clean(tmp_path):
    """Its Verilog under ``verilator --lint-only -Wall`` (the engine core will hold it)."""
    path = tmp_path / "block_attention.v"
    path.write_text(emit_verilog(BlockAttention(CFG), "block_attention"))
    result = lint_file(path, "block_attention")
    warnings = [line for line in (result.stdout + result.stderr).splitlines()
                if line.startswith("%")]
    assert result.returncode == 0 and not warnings, "\n".join(warnings)
