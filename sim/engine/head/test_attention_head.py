"""cocotb bench of ``attention_head`` (``docs/architecture.md``, section ``attention_head``):
Q, K and V in, O out, S kept on chip. O is bit-exact against
``golden.engine.head.head_output`` (S of the engine's variant, the integer softmax, P @ V
with V window reuse), the engine's and P @ V's counters equal ``engine_counters`` and
``pv_counters``, the stage counters split the run's cycles; reuse and dense variants, V
along every axis in windows of 2 and 3, random gaps on the V stream and random
back-pressure on O; then a rejected engine start and a rejected P @ V start, each followed
by a clean run; a reset while the softmax stage and P @ V run, then clean runs.

``make -C sim/engine/head [SIM=icarus]`` on the default build (generated into
``sim_build/rtl``); pytest runs it on a small variant (``tests/engine/test_attention_head_sim.py``).
``KALEIDO_SEEDS=N`` runs N seeds.
"""

from __future__ import annotations

import random
import zlib

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
from head_checks import check_stage_counters
from run_host import load_config, write_operand
from simlib import (StreamSink, StreamSource, seeds_requested, start_and_wait_done,
                    start_clock_and_reset, to_signed)

from golden.engine.head import head_output
from golden.engine.model import EngineParams, engine_counters
from golden.engine.pv import pv_counters, pv_v_words
from golden.numerics import ChannelGroups, VideoGrid
from golden.vector import softmax_scale
from golden.workloads import make_qkv
from kaleido_hw.engine.attention_head import STAGE_COUNTERS
from kaleido_hw.engine.kaleido_engine import counter_names as engine_counter_names
from kaleido_hw.engine.kaleido_engine import counters_from_model as engine_model_counters
from kaleido_hw.engine.kaleido_engine import engine_ports
from kaleido_hw.engine.pv_engine import counter_names as pv_counter_names
from kaleido_hw.engine.pv_engine import counters_from_model as pv_model_counters
from kaleido_hw.engine.pv_layouts import pv_v_word_layout


CFG = load_config()
PARAMS = EngineParams.from_config(CFG)
AW, C = CFG.acc_width, CFG.cols
_V = pv_v_word_layout(CFG)
CBW, KW = _V["cb"].width, _V["key"].width


def rng_for(test: str, n: int = 0) -> np.random.Generator:
    """A generator seeded by the test name, the seed index and cocotb's seed."""
    return np.random.default_rng([zlib.crc32(test.encode()), n, int(cocotb.RANDOM_SEED)])


def heads():
    """(grid, groups, data) of the heads that fit the build: an odd grid with three groups
    and random smooth data; then, where the build holds d = 128 and 64 tokens (the default),
    the hunyuanvideo synthetic head on 2x4x8 (``make_qkv``, seed 7: fixed data, so its
    logged cycles are reproducible), else the largest grid with one group per axis."""
    d = min(CFG.engine_max_head_dim, 24)
    third = d // 3
    out = [(VideoGrid(2, 3, 2), ChannelGroups.from_sizes(third, d - 2 * third, third,
                                                         directions=(2, 1, 0)), None)]
    if CFG.engine_max_head_dim >= 128 and CFG.engine_max_tokens >= 64:
        grid = VideoGrid(2, 4, 8)
        out.append((grid, ChannelGroups.from_preset("hunyuanvideo"),
                    make_qkv("hunyuanvideo", grid, seed=7)))
    else:
        big = [g for g in (VideoGrid(2, 4, 4), VideoGrid(3, 2, 2))
               if g.n <= CFG.engine_max_tokens][0]
        dd = CFG.engine_max_head_dim
        out.append((big, ChannelGroups.from_sizes(dd // 4, dd // 4, dd - dd // 2), None))
    return out


def operands(grid, d, rng):
    """Smooth Q and K (much reuse) and V with a few outlier tokens (HALF and NONE)."""
    n = grid.n
    q = np.clip(rng.integers(-100, 100, (1, d)) + rng.integers(-8, 9, (n, d)), -128, 127)
    k = np.clip(rng.integers(-100, 100, (1, d)) + rng.integers(-8, 9, (n, d)), -128, 127)
    v = np.clip(rng.integers(-100, 100, (1, d)) + rng.integers(-5, 6, (n, d)), -128, 127)
    v[rng.random(n) < 0.2] = rng.integers(-128, 128, d)
    return q.astype(np.int8), k.astype(np.int8), v.astype(np.int8)


class HeadHost:
    """Drives one attention_head (clock and reset running)."""

    def __init__(self, dut, rng: random.Random):
        self.dut = dut
        self.v_src = StreamSource(dut, "v_in", gap=0.3, rng=rng)
        self.sink = StreamSink(dut, "o", stall=0.4, rng=rng)
        self.sink.start()
        dut.start.value = 0
        dut.wr__en.value = 0

    async def _watch_p(self, nrb: int) -> list:
        """When each row block of P may be read by P @ V (the top's ``p_blocks`` wire), in
        cycles from P @ V's start (= 0: the edge that sets ``cnt__pv_cycles`` to 1)."""
        dut, edge, start, ready = self.dut, 0, None, []
        while len(ready) < nrb:
            await RisingEdge(dut.clk)
            await ReadOnly()
            edge += 1
            if start is None:
                if int(dut.cnt__pv_cycles.value) == 1:
                    start = edge
                else:
                    continue
            # The value after edge k holds in the cycle that ends with edge k + 1.
            while len(ready) < min(int(dut.p_blocks.value), nrb):
                ready.append(edge + 1 - start)
        return ready

    async def run(self, q, k, v, grid, groups, variant, v_axis, window, scale, *,
                  s_override=None, v_override=None):
        """One head; ``s_override`` / ``v_override`` replace ``cfg__s__*`` / ``cfg__v__*``
        values (to provoke a rejected start). Returns (error fields, counters, O or
        None)."""
        dut = self.dut
        n, d = v.shape
        await write_operand(dut, 0, q)
        await write_operand(dut, 1, k)
        await self.v_src.send(cb | kk << CBW | word << (CBW + KW)
                              for cb, kk, word in pv_v_words(v, C))
        # The head computes S only: its engine's cfg.linear is tied off, not a port.
        ports = {name[5:]: value
                 for name, value in engine_ports(CFG, grid, groups, variant=variant).items()
                 if name != "cfg__linear"}
        for name, value in {**ports, **(s_override or {})}.items():
            getattr(dut, f"cfg__s__{name}").value = value
        pv = {"axis": v_axis, "window": window, "reuse": int(variant != "dense"),
              "full_bits": 5, "half_bits": 3, **(v_override or {})}
        for name, value in pv.items():
            getattr(dut, f"cfg__v__{name}").value = value
        dut.cfg__mult.value, dut.cfg__shift.value = scale.mult, scale.shift
        start = len(self.sink.items)
        watch = cocotb.start_soon(self._watch_p(-(-n // CFG.rows)))
        await start_and_wait_done(dut, 2_000_000, "attention_head")
        await ClockCycles(dut.clk, 1)
        p_ready = watch.result() if watch.done() else None
        watch.cancel()
        error = {f: int(getattr(dut, f"error__{f}").value)
                 for f in ("s", "score", "p", "softmax", "pv")}
        cnt = {name: int(getattr(dut, f"cnt__{name}").value) for name in STAGE_COUNTERS}
        cnt["s"] = {name: int(getattr(dut, f"cnt__s__{name}").value)
                    for name in engine_counter_names(CFG)}
        cnt["pv"] = {name: int(getattr(dut, f"cnt__pv__{name}").value)
                     for name in pv_counter_names(CFG.engine_arrays)}
        cnt["p_ready"] = p_ready
        if error["s"] or error["pv"]:
            await ClockCycles(dut.clk, 8)
            assert len(self.sink.items) == start, "O values after a rejected run"
            return error, cnt, None
        while not (len(self.sink.items) > start and self.sink.items[-1] >> AW & 1):
            await RisingEdge(dut.clk)
        await ClockCycles(dut.clk, 8)      # anything more would be a duplicate
        items = self.sink.items[start:]
        assert len(items) == n * d, f"O stream gave {len(items)} values, expected {n * d}"
        o = np.array([to_signed(x & ((1 << AW) - 1), AW) for x in items], np.int64)
        return error, cnt, o.reshape(n, d)


async def check_head(host, q, k, v, grid, groups, variant, v_axis, window, scale):
    error, cnt, o = await host.run(q, k, v, grid, groups, variant, v_axis, window, scale)
    assert error == {"s": 0, "score": 0, "p": 0, "softmax": 0, "pv": 0}, error
    reuse = variant != "dense"
    want = head_output(q, k, v, grid, groups, scale.mult, scale.shift, PARAMS, variant, reuse,
                       v_axis, window)
    wrap = 1 << AW
    np.testing.assert_array_equal(o, (want["O"] + wrap // 2) % wrap - wrap // 2)
    s_model = engine_model_counters(engine_counters(q, k, grid, groups, PARAMS, variant),
                                    CFG.engine_arrays)
    assert cnt["s"] == s_model, (cnt["s"], s_model)
    pv_model = pv_model_counters(pv_counters(want["P"], v, grid, v_axis, window, CFG.rows,
                                             C, CFG.engine_arrays, reuse=reuse))
    # Given when each row block of P could be read, P @ V's cycles are exact.
    streamed = pv_counters(want["P"], v, grid, v_axis, window, CFG.rows, C, CFG.engine_arrays,
                           reuse=reuse, p_ready=cnt["p_ready"])
    check_stage_counters(cnt, s_model["cycles"], pv_model, grid.n, CFG.rows, streamed.cycles)
    cnt["pv_model_cycles"] = pv_model["cycles"]
    return cnt


@cocotb.test()
async def test_heads(dut):
    """Heads back to back: the full variant with V reuse along t in windows of 2, dense with
    dense P @ V, pe with V along y in windows of 3 on an odd grid; full and dense on the
    largest grid of the build (the cycles of each stage are logged)."""
    await start_clock_and_reset(dut)
    for s in range(seeds_requested()):
        rng = rng_for("heads", s)
        host = HeadHost(dut, random.Random(int(rng.integers(1 << 30))))
        for (grid, groups, data), cases in zip(heads(), ([("full", 0, 2), ("dense", 0, 2),
                                                          ("pe", 1, 3)],
                                                         [("full", 0, 2), ("dense", 0, 2)])):
            q, k, v = data if data is not None else operands(grid, groups.head_dim, rng)
            cycles = {}
            for variant, axis, window in cases:
                cnt = await check_head(host, q, k, v, grid, groups, variant, axis, window,
                                       softmax_scale(1 / np.sqrt(groups.head_dim)))
                cycles[variant] = cnt
                dut._log.info(f"{grid.t}x{grid.h}x{grid.w} d={groups.head_dim} {variant}: "
                              f"{cnt['cycles']} cycles (S {cnt['s_cycles']}, then softmax "
                              f"{cnt['softmax_cycles']} alongside P @ V {cnt['pv_cycles']}, "
                              f"of which {cnt['pv_cycles'] - cnt['pv_model_cycles']} waiting "
                              f"for P)")
            full, dense = cycles["full"], cycles["dense"]
            dut._log.info(
                f"{grid.t}x{grid.h}x{grid.w}: full over dense, S "
                f"{dense['s_cycles'] / full['s_cycles']:.3f}x, P @ V "
                f"{dense['pv_cycles'] / full['pv_cycles']:.3f}x, whole head "
                f"{dense['cycles'] / full['cycles']:.3f}x")


async def first_grid_head(dut, name: str, seed: int):
    """The error and reset tests' set-up: clock and reset, a host, random operands on the
    build's first (odd) grid and a softmax scale of 0.1. Returns (host, q, k, v, grid,
    groups, scale)."""
    await start_clock_and_reset(dut)
    host = HeadHost(dut, random.Random(seed))
    grid, groups, _ = heads()[0]
    q, k, v = operands(grid, groups.head_dim, rng_for(name))
    return host, q, k, v, grid, groups, softmax_scale(0.1)


@cocotb.test()
async def test_rejected_starts(dut):
    """A head_dim of 0 (the engine rejects it) and a V window of 1 (P @ V rejects it) end
    their runs with the block's error bits and no O; a clean run follows each."""
    host, q, k, v, grid, groups, scale = await first_grid_head(dut, "errors", 1)
    error, _, o = await host.run(q, k, v, grid, groups, "full", 0, 2, scale,
                                 v_override={"window": 1})
    assert error["pv"] != 0 and error["s"] == 0 and o is None, error
    await check_head(host, q, k, v, grid, groups, "full", 0, 2, scale)
    error, _, o = await host.run(q, k, v, grid, groups, "full", 0, 2, scale,
                                 s_override={"head_dim": 0})
    assert error["s"] != 0 and error["pv"] == 0 and o is None, error
    await check_head(host, q, k, v, grid, groups, "pe", 2, 2, scale)


@cocotb.test()
async def test_reset_mid_run(dut):
    """A reset while the softmax stage and P @ V run together, then a clean run: O and every
    counter exact (the registers restart; the next run rewrites the memories it reads)."""
    host, q, k, v, grid, groups, scale = await first_grid_head(dut, "reset", 2)
    run = cocotb.start_soon(host.run(q, k, v, grid, groups, "full", 0, 2, scale))
    for _ in range(200_000):
        await RisingEdge(dut.clk)
        if int(dut.cnt__pv_cycles.value) > 8:
            break
    assert not run.done() and int(dut.busy.value), "the run ended before the reset"
    run.cancel()
    dut.start.value = 0
    dut.rst.value = 1
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    assert not int(dut.busy.value) and not int(dut.done.value)
    await check_head(host, q, k, v, grid, groups, "full", 0, 2, scale)
    await check_head(host, q, k, v, grid, groups, "dense", 1, 3, scale)
