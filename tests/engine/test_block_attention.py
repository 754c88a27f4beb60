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

import pytest
from amaranth.hdl import Const, Value
from amaranth.sim import Simulator

from block_attention_data import attention_blocks, out_chunks, run_settings
from golden import ChannelGroups
from kaleido_hw.config import ConfigError, KaleidoConfig
from kaleido_hw.engine.block_attention import BlockAttention, check_block_attention_config
from kaleido_hw.engine.pv_engine import COUNTERS
from kaleido_hw.flow.lint import lint_component
from kaleido_hw.vector.layouts import output_beat_layout


CFG = KaleidoConfig(engine_arrays=2, vector_lanes=8, engine_max_tokens=16,
                    engine_max_head_dim=16, vector_max_row=16)


def _simulate(cfg, run, cases, *, gap=0.0, stall=0.0, seed=0):
    """Each case (a block) in turn: V written, ``start`` with its flags, S streamed (random
    gaps), ``out`` taken (random stalls) until ``done``. Returns per block the ``out``
    beats, P @ V's counters and the block's cycles."""
    dut = BlockAttention(cfg)
    rng = random.Random(seed)
    got = {"out": [], "cnt": [], "cycles": []}

    async def bench(ctx):
        for name, value in run_settings(run).items():
            ctx.set(getattr(dut.cfg, name), value)
        s_pay, v_pay = Value.cast(dut.s.payload), Value.cast(dut.v_in.payload)
        for case in cases:
            for word in case.v_words:
                ctx.set(v_pay, word)
                ctx.set(dut.v_in.valid, 1)
                await ctx.tick().until(dut.v_in.ready)
            ctx.set(dut.v_in.valid, 0)
            ctx.set(dut.first, int(case.first))
            ctx.set(dut.last, int(case.last))
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            beats, out, cycles, offer = list(case.s_beats), [], 0, False
            while True:
                if not offer and beats and not (gap and rng.random() < gap):
                    ctx.set(s_pay, beats[0])
                    offer = True
                # Past the block's rows a beat is offered too: it must not be taken.
                ctx.set(dut.s.valid, offer or not beats)
                ctx.set(dut.out.ready, int(not (stall and rng.random() < stall)))
                _, _, sv, sr, ov, orr, op, done = await ctx.tick().sample(
                    dut.s.valid, dut.s.ready, dut.out.valid, dut.out.ready, dut.out.payload,
                    dut.done)
                if sv and sr:
                    assert beats, "a beat past the block's rows was taken"
                    beats.pop(0)
                    offer = False
                if ov and orr:
                    out.append(Const.cast(op).value)
                cycles += 1
                assert cycles < 200_000, "hang"
                if done and not beats:
                    break
            ctx.set(dut.s.valid, 0)
            assert ctx.get(dut.error.p) == 0 and ctx.get(dut.error.pv) == 0
            assert ctx.get(dut.error.softmax) == 0 and ctx.get(dut.error.weight) == 0
            got["out"].append(out)
            got["cnt"].append({n: ctx.get(getattr(dut.cnt.pv, n)) for n in COUNTERS})
            got["cycles"].append(ctx.get(dut.cnt.cycles))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return got


def _check(cfg, grid, groups, seed=0, sim_kw=None, **kw):
    run, cases = attention_blocks(cfg, grid, groups, seed, **kw)
    got = _simulate(cfg, run, cases, **(sim_kw or {}))
    layout = output_beat_layout(cfg)
    assert sum(bool(c.out_beats) for c in cases) == run.plan.n_q
    for i, (case, out) in enumerate(zip(cases, got["out"])):
        assert len(out) == len(case.out_beats), f"block {i}"
        for j, (x, e) in enumerate(zip(out, case.out_beats)):
            assert x == e, f"block {i} beat {j}: {layout.from_bits(x)} != {layout.from_bits(e)}"
    nb, chunks = run.plan.box_tokens, out_chunks(cfg)
    for cnt, cycles, case in zip(got["cnt"], got["cycles"], cases):
        want = case.pv
        assert cnt["busy_pe_cycles"] == want.busy_pe_cycles
        assert [cnt["issued_a"], cnt["issued_f1"], cnt["issued_f2"]] == list(want.issued)
        assert [cnt["skipped_f1"], cnt["skipped_f2"]] == list(want.skipped[1:])
        assert (cnt["bubbles"], cnt["blocks"], cnt["steps"]) == \
            (want.bubbles, want.blocks, want.steps)
        assert cnt["cycles"] >= want.cycles
        # The block: P @ V, then its read-out (a beat per row and chunk) and, after a last
        # block, O's (as many beats, and each row's finish), at least.
        assert cycles > cnt["cycles"] + nb * chunks * (2 if case.last else 1)


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
    """Its Verilog under ``verilator --lint-only -Wall`` (the core with ``core_attention`` holds it)."""
    problems = lint_component(BlockAttention(CFG), "block_attention", tmp_path)
    assert not problems, "\n".join(problems)
