"""``pv_engine`` in the Amaranth simulator: O bit-exact against
``golden.vector.attention_int(p, V_eff)`` and every counter, the per-array ones included,
equal to ``golden.engine.pv.pv_counters(..., arrays=P)``, on one, two and four arrays (some
without a column block), runs back to back, random valid gaps on the write streams and
random back-pressure on the O stream; the column decode against ``PV_DECODE``; every error
bit."""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.sim import Simulator
from host_harness import member
from stream_harness import read_until_last

import golden
from golden.engine.pv import pv_counters, pv_p_words, pv_v_words
from golden.vector import attention_int
from golden.window import window_effective_operand, window_masks
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.pv_engine import ERROR_BITS, PvEngine, counter_names, counters_from_model

pytestmark = pytest.mark.xdist_group("pv_rtl")

#: Four arrays (the default): at most 3 column blocks of 8 channels, so one array has none.
CONFIG = KaleidoConfig(rows=2, cols=3, engine_max_tokens=32, engine_max_head_dim=8)


def cfg_ports(grid, queries, channels, axis, window, reuse=True, full_bits=5, half_bits=3):
    g = golden.numerics.as_grid(grid)
    return dict(t=g.t, h=g.h, w=g.w, axis=axis, window=window, queries=queries,
                channels=channels, reuse=int(reuse), full_bits=full_bits, half_bits=half_bits)


def run_jobs(config, jobs, seed=0, valid_prob=0.7, ready_prob=0.6, streamed=False,
             v_banks=1):
    """Each job: dict(p, v, ports); returns per job {"error", "counters", "O"}. ``v_banks``
    2: job i reads V bank i mod 2, and the next job's V is written into the other bank while
    job i runs (each word taken while busy; the run's own bank not ready). ``streamed``:
    a ``PvEngine(streamed_p=True)`` whose P is written after ``start``, row block by row
    block after random pauses (some longer than a row block's work), ``p_blocks`` raised
    after each block's last word; then each job also has ``"p_ready"``, the cycle (the
    start's = 0) from which each row block could be read."""
    dut = PvEngine(config, streamed_p=streamed, v_banks=v_banks)
    R, C = config.rows, config.cols
    rng = np.random.default_rng(seed)
    outs = []

    async def write(ctx, port, words) -> int:
        """Offer ``words`` with random gaps (every offer is taken: ready is high while the
        engine writes); returns the clock edges it took."""
        edges = 0
        for fields in words:
            while rng.random() > valid_prob:
                ctx.set(port.valid, 0)
                await ctx.tick()
                edges += 1
            ctx.set(port.valid, 1)
            ctx.set(port.payload, fields)
            await ctx.tick()
            edges += 1
        ctx.set(port.valid, 0)
        return edges

    def v_words(v):
        return [{"cb": cb, "key": k, "v": word} for cb, k, word in pv_v_words(v, C)]

    async def bench(ctx):
        for i, job in enumerate(jobs):
            p, v, ports = job["p"], job["v"], job["ports"]
            q, n = p.shape
            d = v.shape[1]
            pwords = [{"rb": rb, "key": k, "p": word} for rb, k, word in pv_p_words(p, R)]
            if not streamed:
                await write(ctx, dut.p_in, pwords)
            if v_banks == 1:
                await write(ctx, dut.v_in, v_words(v))
            elif i == 0:
                ctx.set(dut.v_in_bank, 0)
                await write(ctx, dut.v_in, v_words(v))
            for name, value in ports.items():
                ctx.set(getattr(dut.cfg, name), value)
            if v_banks > 1:
                ctx.set(dut.v_bank, i % 2)
            ctx.set(dut.start, 1)
            if streamed:
                ctx.set(dut.p_blocks, 0)
            await ctx.tick()
            ctx.set(dut.start, 0)
            if v_banks > 1 and i + 1 < len(jobs):
                # While this job runs: its own bank takes no write, the other one does.
                ctx.set(dut.v_in_bank, i % 2)
                assert ctx.get(dut.busy) and not ctx.get(dut.v_in.ready)
                ctx.set(dut.v_in_bank, (i + 1) % 2)
                nxt = v_words(jobs[i + 1]["v"])
                for w in nxt:
                    assert ctx.get(dut.busy) and ctx.get(dut.v_in.ready)
                    ctx.set(dut.v_in.valid, 1)
                    ctx.set(dut.v_in.payload, w)
                    await ctx.tick()
                ctx.set(dut.v_in.valid, 0)
            if streamed:
                p_ready, edge = [], 0          # edge 0 accepted the start
                for rb in range(-(-q // R)):
                    for _ in range(int(rng.integers(0, 4)) * int(rng.integers(0, 12))):
                        await ctx.tick()
                        edge += 1
                    edge += await write(ctx, dut.p_in, [w for w in pwords if w["rb"] == rb])
                    ctx.set(dut.p_blocks, rb + 1)
                    p_ready.append(edge + 1)
            for _ in range(20000):
                if ctx.get(dut.done):
                    break
                await ctx.tick()
            else:
                raise AssertionError("no done")
            out = {"error": ctx.get(dut.error),
                   "counters": {c: ctx.get(member(dut.cnt, c))
                                for c in counter_names(config.engine_arrays)}}
            if streamed:
                out["p_ready"] = p_ready
            outs.append(out)
            if out["error"]:
                continue
            vals = await read_until_last(ctx, dut.o, rng, ready_prob)
            out["O"] = np.array(vals, np.int64).reshape(q, d)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return outs


def _job(rng, grid, q, d, axis, window, reuse=True, smooth=True, bits=(5, 3)):
    g = golden.numerics.as_grid(grid)
    if smooth:
        base = rng.integers(-128, 128, (1, d))
        v = np.clip(base + rng.integers(-6, 7, (g.n, d)), -128, 127).astype(np.int8)
        # a few nibble-edge and random tokens: HALF and NONE followers
        v[rng.random(g.n) < 0.2] = ((base & ~15) + rng.integers(0, 16, (1, d))).clip(-128, 127)
        v[rng.random(g.n) < 0.15] = rng.integers(-128, 128, d)
    else:
        v = rng.integers(-128, 128, (g.n, d)).astype(np.int8)
    p = rng.integers(0, 256, (q, g.n))
    p[rng.random(p.shape) < 0.05] = 255
    return {"p": p, "v": v, "grid": g, "axis": axis, "window": window, "reuse": reuse,
            "bits": bits, "ports": cfg_ports(g, q, d, axis, window, reuse, *bits)}


def _check(job, out, config):
    g, axis, window = job["grid"], job["axis"], job["window"]
    assert out["error"] == 0
    if job["reuse"]:
        masks = window_masks(job["v"], g, axis, window, *job["bits"])
        v_eff = window_effective_operand(job["v"], masks, g, axis, window)
    else:
        v_eff = job["v"]
    wrap = 1 << config.acc_width
    ref = attention_int(job["p"], v_eff)
    ref = (ref + wrap // 2) % wrap - wrap // 2
    np.testing.assert_array_equal(out["O"], ref)
    model = pv_counters(job["p"], job["v"], g, axis, window, config.rows, config.cols,
                        config.engine_arrays, *job["bits"], reuse=job["reuse"],
                        p_ready=out.get("p_ready"))
    assert out["counters"] == counters_from_model(model)


def test_runs_back_to_back():
    rng = np.random.default_rng(1)
    jobs = [
        _job(rng, "4x2x3", 5, 7, 0, 2),          # padding row and column blocks
        _job(rng, "5x2x2", 3, 4, 0, 3),          # window 3, incomplete window along t
        _job(rng, "2x3x3", 4, 3, 1, 3, bits=(4, 3)),
        _job(rng, "1x2x5", 2, 8, 2, 2, smooth=False),
        _job(rng, "3x2x2", 3, 5, 0, 2, reuse=False),                   # dense
        _job(rng, "1x1x1", 1, 1, 0, 2),          # one key: blocks shorter than R (bubbles)
        _job(rng, "2x1x1", 2, 2, 2, 3, bits=(7, 6)),   # windows absent along x
    ]
    outs = run_jobs(CONFIG, jobs, seed=2)
    for job, out in zip(jobs, outs):
        _check(job, out, CONFIG)


@pytest.mark.parametrize("dispatcher", ["full", "none"])
def test_runs_on_the_folded_arrays(dispatcher):
    """``engine_pe = "reuse-pv"``: the same runs on the KaleidoEngine's arrays with the P @ V
    mode folded in (``PvMergedArray`` with the matcher, ``PvPEArray`` without) instead of
    PvArrays: O bit-exact and every counter, cycles included, equal to ``pv_counters``, so
    the folded arrays take the P @ V sequencer's steps at its pace."""
    config = CONFIG.replace(engine_pe="reuse-pv", engine_dispatcher=dispatcher)
    rng = np.random.default_rng(3)
    jobs = [
        _job(rng, "4x2x3", 5, 7, 0, 2),
        _job(rng, "5x2x2", 3, 4, 0, 3),
        _job(rng, "2x3x3", 4, 3, 1, 3, bits=(4, 3)),
        _job(rng, "3x2x2", 3, 5, 0, 2, reuse=False),
        _job(rng, "1x1x1", 1, 1, 0, 2),
    ]
    outs = run_jobs(config, jobs, seed=4)
    for job, out in zip(jobs, outs):
        _check(job, out, config)


def test_two_v_banks():
    """``v_banks = 2``: each job's V written into the bank the job before does not read,
    while that job runs; O and every counter exact for every job."""
    config = CONFIG.replace(engine_max_head_dim=16)
    rng = np.random.default_rng(6)
    # Long runs (many queries) so that the next V's words all go in while one runs.
    jobs = [_job(rng, "4x2x3", 24, 7, 0, 2), _job(rng, "5x2x2", 24, 4, 0, 3),
            _job(rng, "2x3x3", 24, 3, 1, 3, bits=(4, 3)), _job(rng, "4x2x3", 24, 6, 2, 2)]
    outs = run_jobs(config, jobs, seed=7, v_banks=2)
    for job, out in zip(jobs, outs):
        _check(job, out, config)


def test_streamed_p_waits_for_each_row_block():
    """P written during the run, row block by row block after random pauses: the arrays
    wait for each block (at its start, between blocks, after bubbles), and O and every
    counter stay exact, cycles included, given when each block could be read."""
    rng = np.random.default_rng(4)
    jobs = [
        _job(rng, "4x2x3", 7, 7, 0, 2),
        _job(rng, "5x2x2", 5, 4, 0, 3),
        _job(rng, "2x3x3", 6, 3, 1, 3, bits=(4, 3)),
        _job(rng, "1x2x5", 4, 8, 2, 2, smooth=False),
        _job(rng, "3x2x2", 5, 5, 0, 2, reuse=False),
        _job(rng, "1x1x1", 5, 1, 0, 2),          # blocks of bubbles
    ]
    waited = 0
    for seed in range(3):
        outs = run_jobs(CONFIG, jobs, seed=seed, streamed=True)
        for job, out in zip(jobs, outs):
            _check(job, out, CONFIG)
            plain = pv_counters(job["p"], job["v"], job["grid"], job["axis"], job["window"],
                                CONFIG.rows, CONFIG.cols, CONFIG.engine_arrays, *job["bits"],
                                reuse=job["reuse"])
            waited += out["counters"]["cycles"] > plain.cycles
    assert waited >= len(jobs)


def test_errors():
    rng = np.random.default_rng(3)
    good = _job(rng, "2x2x2", 2, 2, 0, 2)
    bad = []
    for field, value, bit in [("window", 1, 0), ("axis", 3, 1), ("t", 0, 2), ("t", 9, 2),
                              ("queries", 0, 3), ("queries", 33, 3), ("channels", 0, 4),
                              ("channels", 9, 4), ("full_bits", 3, 5), ("half_bits", 2, 5),
                              ("half_bits", 5, 5)]:
        job = dict(good)
        job["ports"] = dict(good["ports"], **{field: value})
        bad.append((job, bit))
    outs = run_jobs(CONFIG, [j for j, _ in bad] + [good], seed=4)
    for (job, bit), out in zip(bad, outs):
        assert out["error"] == 1 << bit, (job["ports"], out["error"])
    _check(good, outs[-1], CONFIG)
    assert len(ERROR_BITS) == 6


def test_column_decode_every_entry():
    """A 1 x 1 PvArray: every (kind, c1, c2) entry of ``PV_DECODE``, mixed FULL/HALF codes
    included (the window rule never makes them), adds exactly the golden word's term to R0,
    on random P lanes and V bytes; an invalid column or a bubble adds nothing."""
    from golden.engine.pv import decode, pv_terms
    from kaleido_hw.array.pv_cell import PvArray

    config = KaleidoConfig(rows=1, cols=1)
    dut = PvArray(config)
    rng = np.random.default_rng(11)
    cases = []
    for kind in range(4):
        for c1 in range(4):
            for c2 in range(4):
                for _ in range(3):
                    p = [int(x) for x in rng.integers(0, 256, 3)]
                    v = [int(x) for x in rng.integers(-128, 128, 3)]
                    valid = int(rng.random() < 0.9)
                    cases.append((kind, c1, c2, p, v, valid))
    got = []

    async def bench(ctx):
        async def step(kind, c1, c2, p, v, valid, first, issue):
            row, col = dut.row[0], dut.col[0]
            ctx.set(row.p0, p[0])
            ctx.set(row.p1, p[1])
            ctx.set(row.p2, p[2])
            ctx.set(row.valid, 1)
            ctx.set(row.mode.kind, kind)
            ctx.set(row.mode.first, first)
            ctx.set(row.mode.issue, issue)
            ctx.set(col.v0, v[0])
            ctx.set(col.v1, v[1])
            ctx.set(col.v2, v[2])
            ctx.set(col.c1, c1)
            ctx.set(col.c2, c2)
            ctx.set(col.valid, valid)
            await ctx.tick()
            if ctx.get(dut.drain[0].valid):
                got.append(ctx.get(dut.drain[0].data))

        for kind, c1, c2, p, v, valid in cases:
            await step(kind, c1, c2, p, v, valid, 1, int(kind < 3))
            await step(0, 0, 0, [0, 0, 0], [0, 0, 0], 0, 1, 0)     # drain it
        for _ in range(4):
            await step(0, 0, 0, [0, 0, 0], [0, 0, 0], 0, 0, 0)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    want = []
    for kind, c1, c2, p, v, valid in cases:
        term = 0
        if kind < 3 and valid:
            w = decode(kind, c1, c2)
            b = [v[0], v[1], v[2], ((v[1] & 15) | (v[2] & 15) << 4)][w.bsel]
            x = [sum(p[j] for j in range(3) if sel >> j & 1) for sel in (w.lo_sel, w.hi_sel)]
            t0, t1 = pv_terms(w.op, x[0], x[1], b)
            term = int(t0 + t1)
        want += [term, 0]    # the entry's term, then (next entry's first step) an empty R0
    # got[0]: the reset R0 drained by the first entry; no first step drains after the last
    assert got == [0] + want[:-1]


def test_random_runs_on_another_build():
    """Random runs on a 3 x 2 build with 40 keys (not a power of two) and a 21-bit
    accumulator (O wraps): random grids, axes, windows, thresholds, reuse and dense, queries
    up to the maximum, under heavier stream gaps and back-pressure."""
    config = KaleidoConfig(rows=3, cols=2, engine_max_tokens=40, engine_max_head_dim=8,
                           acc_width=21)
    rng = np.random.default_rng(100)
    jobs = []
    for k in range(10):
        while True:
            dims = [int(x) for x in rng.integers(1, 6, 3)]
            if np.prod(dims) <= config.engine_max_tokens:
                break
        grid = golden.VideoGrid(*dims)
        q = int(rng.integers(1, 41)) if k % 3 == 0 else int(rng.integers(1, 8))
        d = int(rng.integers(1, 9))
        full_bits = int(rng.integers(4, 8))
        bits = (full_bits, int(rng.integers(3, full_bits)))
        jobs.append(_job(rng, grid, q, d, int(rng.integers(0, 3)), int(rng.integers(2, 4)),
                         reuse=bool(rng.random() < 0.8), smooth=k % 3 != 2, bits=bits))
    outs = run_jobs(config, jobs, seed=5, valid_prob=0.5, ready_prob=0.5)
    for job, out in zip(jobs, outs):
        _check(job, out, config)


@pytest.mark.parametrize("arrays", [1, 2, 3])
def test_column_blocks_over_arrays(arrays):
    """Column block cb on array ``cb mod P``, each array walking several (16 channels are 6
    column blocks: 3 per array at P = 2, 2 at P = 3, where the V bank and word of a write are
    a division by P), and a single array: random runs, some with fewer column blocks than
    arrays; every counter, per array too."""
    config = KaleidoConfig(rows=2, cols=3, engine_arrays=arrays, engine_max_tokens=24,
                           engine_max_head_dim=16)
    rng = np.random.default_rng(20 + arrays)
    jobs = []
    for k in range(5):
        grid = golden.VideoGrid(*[int(x) for x in rng.integers(1, 4, 3)])
        while grid.n > config.engine_max_tokens:
            grid = golden.VideoGrid(*[int(x) for x in rng.integers(1, 4, 3)])
        d = 16 if k == 0 else int(rng.integers(1, 17))
        jobs.append(_job(rng, grid, int(rng.integers(1, 8)), d, int(rng.integers(0, 3)),
                         int(rng.integers(2, 4)), reuse=k != 4))
    outs = run_jobs(config, jobs, seed=arrays, valid_prob=0.6, ready_prob=0.5)
    for job, out in zip(jobs, outs):
        _check(job, out, config)
