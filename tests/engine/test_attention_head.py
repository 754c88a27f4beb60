"""``AttentionHead`` in the Amaranth simulator: Q, K, V in, O out, S kept on chip. O is
bit-exact against ``golden.engine.head.head_output`` (S of the variant -> ``softmax_int``
-> P @ V with V window reuse), the engine's and P @ V's
counters equal their cycle models, the stage counters add up; dense and reuse variants back
to back, random back-pressure on O, a start while O is pending ignored; a rejected
engine start ends the run with its error."""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.sim import Simulator
from head_checks import check_stage_counters
from host_harness import configure, configure_and_start, member, wait_done, write_operand
from stream_harness import read_until_last

from golden.engine.head import head_output
from golden.engine.model import EngineParams, engine_counters
from golden.engine.pv import pv_counters, pv_v_words
from golden.numerics import ChannelGroups, VideoGrid
from golden.vector import softmax_scale
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.attention_head import STAGE_COUNTERS, AttentionHead, check_head_config
from kaleido_hw.engine.kaleido_engine import ENGINE_COUNTERS, engine_ports
from kaleido_hw.engine.pv_engine import counter_names as pv_counter_names
from kaleido_hw.engine.pv_engine import counters_from_model

pytestmark = pytest.mark.xdist_group("attention_head")

CONFIG = KaleidoConfig(rows=2, cols=2, engine_arrays=2, engine_max_tokens=16,
                       engine_max_head_dim=16, sched_pattern_width=4, matcher_channels=4,
                       sched_entries=4, vector_lanes=4, vector_max_row=16, vector_row_buffers=3)


def run_head(config, jobs, seed=0, ready_prob=0.7):
    """Each job: dict(q, k, v, ports, pv, scale): returns per job {"error", "O", "cnt"}."""
    dut = AttentionHead(config)
    if config.engine_pe == "reuse-pv":      # one set of arrays, driven through views
        assert len(dut.arrays) == config.engine_arrays
        assert dut.engine.array_views and dut.pv.array_views
    rng = np.random.default_rng(seed)
    outs = []

    async def bench(ctx):
        for job in jobs:
            await write_operand(ctx, dut, 0, job["q"])
            await write_operand(ctx, dut, 1, job["k"])
            for cb, key, word in pv_v_words(job["v"], config.cols):
                ctx.set(dut.v_in.valid, 1)
                ctx.set(dut.v_in.payload, {"cb": cb, "key": key, "v": word})
                await ctx.tick().until(dut.v_in.ready)
            ctx.set(dut.v_in.valid, 0)
            configure(ctx, dut.cfg.s, job["ports"])
            configure(ctx, dut.cfg.v, job["pv"])
            await configure_and_start(ctx, dut, {"mult": job["scale"].mult,
                                                 "shift": job["scale"].shift})
            await wait_done(ctx, dut, 200_000)
            err = {f: ctx.get(getattr(dut.error, f)) for f in ("s", "score", "p", "softmax", "pv")}
            cnt = {name: ctx.get(getattr(dut.cnt, name)) for name in STAGE_COUNTERS}
            cnt["s"] = {name: ctx.get(getattr(dut.cnt.s, name)) for name in ENGINE_COUNTERS}
            cnt["pv"] = {name: ctx.get(member(dut.cnt.pv, name))
                         for name in pv_counter_names(config.engine_arrays)}
            out = {"error": err, "cnt": cnt}
            outs.append(out)
            if err["s"] or err["pv"]:
                continue
            # A start while O is still to be taken is ignored.
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            assert not ctx.get(dut.busy) and ctx.get(dut.done), "start taken before O left"
            vals = await read_until_last(ctx, dut.o, rng, ready_prob)
            out["O"] = np.array(vals, np.int64)

    # P @ V's view of P's arrival: per P @ V start, the cycle (the start's cycle = 0) from
    # which each row block may be read, one after its last word's write.
    p_ready_runs = []

    async def monitor(ctx):
        pv, edge, start_edge = dut.pv, 0, None
        async for _, _, start, valid, ready, key, queries in ctx.tick().sample(
                pv.start, pv.p_in.valid, pv.p_in.ready, pv.p_in.payload.key, pv.cfg.queries):
            if start:
                start_edge = edge
                p_ready_runs.append([])
            elif valid and ready and start_edge is not None and key == queries - 1:
                p_ready_runs[-1].append(edge - start_edge + 1)
            edge += 1

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.add_testbench(monitor, background=True)
    sim.run()
    started = [out for out in outs if not out["error"]["s"]]
    assert len(started) == len(p_ready_runs)
    for out, p_ready in zip(started, p_ready_runs):
        out["p_ready"] = p_ready
    return outs


def _job(rng, config, grid, groups, variant, axis, window, scale):
    n, d = grid.n, groups.head_dim
    base_q, base_k = rng.integers(-100, 100, (1, d)), rng.integers(-100, 100, (1, d))
    q = np.clip(base_q + rng.integers(-8, 9, (n, d)), -128, 127).astype(np.int8)
    k = np.clip(base_k + rng.integers(-8, 9, (n, d)), -128, 127).astype(np.int8)
    v = np.clip(rng.integers(-100, 100, (1, d)) + rng.integers(-5, 6, (n, d)),
                -128, 127).astype(np.int8)
    v[rng.random(n) < 0.2] = rng.integers(-128, 128, d)
    reuse = variant != "dense"
    pv = {"axis": axis, "window": window, "reuse": int(reuse), "full_bits": 5, "half_bits": 3}
    return {"q": q, "k": k, "v": v, "grid": grid, "groups": groups, "variant": variant,
            "ports": {name: value for name, value in
                      engine_ports(config, grid, groups, variant=variant).items()
                      if name != "cfg__linear"},       # the head's engine runs S only
            "pv": pv,
            "scale": softmax_scale(scale)}


def _want(job, config, p_ready=None):
    grid, groups, pv = job["grid"], job["groups"], job["pv"]
    params = EngineParams.from_config(config)
    want = head_output(job["q"], job["k"], job["v"], grid, groups, job["scale"].mult,
                       job["scale"].shift, params, job["variant"], bool(pv["reuse"]),
                       pv["axis"], pv["window"])
    s_cnt = engine_counters(job["q"], job["k"], grid, groups, params, job["variant"])
    pv_cnt = pv_counters(want["P"], job["v"], grid, pv["axis"], pv["window"], config.rows,
                         config.cols, config.engine_arrays, reuse=bool(pv["reuse"]),
                         p_ready=p_ready)
    return want["O"], s_cnt, counters_from_model(pv_cnt)


def _check_jobs(config, jobs):
    for job, out in zip(jobs, run_head(config, jobs)):
        assert out["error"] == {"s": 0, "score": 0, "p": 0, "softmax": 0, "pv": 0}
        o, s_cnt, pv_cnt = _want(job, config)
        assert np.array_equal(out["O"].reshape(o.shape), o), job["variant"]
        _, _, streamed = _want(job, config, out["p_ready"])
        check_stage_counters(out["cnt"], s_cnt.cycles, pv_cnt, job["grid"].n, config.rows,
                             streamed["cycles"])


def test_head_o_bit_exact_dense_and_reuse():
    rng = np.random.default_rng(5)
    grid = VideoGrid(2, 3, 2)
    groups = ChannelGroups.from_sizes(3, 5, 4, directions=(2, 1, 0))
    _check_jobs(CONFIG, [
        _job(rng, CONFIG, grid, groups, "full", 0, 2, 0.02),
        _job(rng, CONFIG, grid, groups, "dense", 0, 2, 0.02),
        _job(rng, CONFIG, VideoGrid(3, 2, 2), ChannelGroups.from_sizes(4, 4, 4), "pe", 1, 3,
             0.01)])


def test_head_on_one_set_of_arrays():
    """``engine_pe = "reuse-pv"``: S and P @ V on one set of arrays (the engine's, with the
    P @ V mode), handed from the engine to P @ V when S has ended and back at the next run:
    the same O and the same counters, cycles included, as with P @ V on arrays of its own
    (a reuse run and a dense run back to back)."""
    config = CONFIG.replace(engine_pe="reuse-pv")
    rng = np.random.default_rng(6)
    grid = VideoGrid(2, 3, 2)
    groups = ChannelGroups.from_sizes(3, 5, 4, directions=(2, 1, 0))
    _check_jobs(config, [_job(rng, config, grid, groups, "full", 0, 2, 0.02),
                         _job(rng, config, grid, groups, "dense", 1, 3, 0.02)])


def test_rejected_engine_start_and_config_check():
    rng = np.random.default_rng(1)
    grid = VideoGrid(2, 2, 2)
    groups = ChannelGroups.from_sizes(4, 4, 4)
    bad = _job(rng, CONFIG, grid, groups, "full", 0, 2, 0.02)
    bad["ports"] = dict(bad["ports"], cfg__head_dim=0)                  # a bad head_dim
    good = _job(rng, CONFIG, grid, groups, "full", 0, 2, 0.02)
    res = run_head(CONFIG, [bad, good])
    assert res[0]["error"]["s"] != 0 and "O" not in res[0]
    o, _, _ = _want(good, CONFIG)
    assert np.array_equal(res[1]["O"].reshape(o.shape), o)
    with pytest.raises(ValueError, match="vector_max_row >= engine_max_tokens"):
        check_head_config(KaleidoConfig(engine_max_tokens=64, vector_max_row=32,
                                        vector_lanes=16))
