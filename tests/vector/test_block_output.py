"""The block output unit (``BlockOutputUnit``, ``docs/numerics.md`` section 15) in Amaranth's
simulator: a head's partial products block by block with their rescale factors, each row
finished once its last block is in; every output beat equal to ``golden.vector.online_stages``
(``out``), under random gaps on both inputs and output back-pressure, for lanes that do not
divide the channels, one word's beats back to back, and a bad weight."""

from __future__ import annotations

import random

import numpy as np
import pytest
from amaranth.hdl import Value
from amaranth.sim import Simulator

from golden.vector import online_stages, softmax_scale
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.vector.block_output import FINISH_OVERHEAD, BlockOutputUnit
from kaleido_hw.vector.layouts import output_beat_layout
from long_head_beats import finish_requests, output_beats, partial_beats

SMALL = KaleidoConfig(vector_lanes=4, engine_max_head_dim=24, engine_max_tokens=6)
ODD = KaleidoConfig(vector_lanes=5, vector_max_row=20, engine_max_head_dim=16, engine_max_tokens=5,
                    acc_width=28)


def _head(rng, rows, n, d, scale):
    spread = rng.uniform(0.5, 6.0) / scale
    s = np.round(rng.normal(rng.uniform(-1e5, 1e5), spread, (rows, n))).astype(np.int64)
    s[:, -max(1, n // 6):] += int(3 / scale)         # late blocks raise the maxima
    return s, rng.integers(-128, 128, size=(n, d))


def _stimulus(cfg, s, v, mult, shift, blocks, order=None):
    """(o beats with the row each finishes or None, fin requests, expected output beats)."""
    st = online_stages(s, v, mult, shift, blocks, trace=True)
    return (partial_beats(cfg, st["blocks"], order), finish_requests(cfg, st["weight"]),
            output_beats(cfg, st["out"]))


def _run(cfg, heads, *, gap=0.0, stall=0.0, seed=0, max_cycles=20_000, fins_last=False):
    """One unit, the ``heads`` ((beats, fins, want) of :func:`_stimulus`) one after the
    other, without a reset: drive ``o`` (random gaps) and ``fin`` (a row's request once its
    last beat is in, in that order; with ``fins_last`` once every beat is in); take ``out``
    (random stalls); the next head starts when the outputs of the one before are out.
    Returns (outputs per head, their cycles, flags)."""
    dut = BlockOutputUnit(cfg)
    rng = random.Random(seed)
    got, cycles, flags = [], [], {}

    async def bench(ctx):
        o_pay, f_pay, out_pay = (Value.cast(p) for p in
                                 (dut.o.payload, dut.fin.payload, dut.out.payload))
        cycle = 0
        for beats, fins, want in heads:
            expected = sum(len(w) for w in want.values())
            got.append([])
            cycles.append([])
            k, pending, done = 0, [], []
            o_offer = f_offer = False
            while len(got[-1]) < expected:
                if not o_offer and k < len(beats) and not (gap and rng.random() < gap):
                    o_offer = True
                    ctx.set(o_pay, beats[k][0])
                if not f_offer and pending and not (gap and rng.random() < gap):
                    f_offer = True
                    ctx.set(f_pay, fins[pending[0]])
                ctx.set(dut.o.valid, o_offer)
                ctx.set(dut.fin.valid, f_offer)
                ctx.set(dut.out.ready, int(not (stall and rng.random() < stall)))
                _, _, ov, orr, fv, fr, xv, xr, xp = await ctx.tick().sample(
                    dut.o.valid, dut.o.ready, dut.fin.valid, dut.fin.ready, dut.out.valid,
                    dut.out.ready, out_pay)
                if ov and orr:
                    if beats[k][1] is not None:
                        done.append(beats[k][1])
                    k += 1
                    o_offer = False
                    if not fins_last or k == len(beats):
                        pending += done
                        done.clear()
                if fv and fr:
                    pending.pop(0)
                    f_offer = False
                if xv and xr:
                    got[-1].append(xp)
                    cycles[-1].append(cycle)
                cycle += 1
                assert cycle < max_cycles, f"hang: {len(got[-1])}/{expected} beats, {k} in"
            ctx.set(dut.o.valid, 0)
            ctx.set(dut.fin.valid, 0)
        for _ in range(30):                           # nothing more may come
            ctx.set(dut.out.ready, 1)
            _, _, xv = await ctx.tick().sample(dut.out.valid)
            assert not xv, "an output beat more than the finished rows have"
        flags["bad_weight"] = ctx.get(dut.bad_weight)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return got, cycles, flags


def _check(cfg, heads, **kw):
    """Run heads ((s, v, mult, shift, blocks, order) each) through one unit and compare every
    output beat with the golden one; returns the output cycles of the last head."""
    stimuli = [_stimulus(cfg, *h) for h in heads]
    got, cycles, flags = _run(cfg, stimuli, **kw)
    layout = output_beat_layout(cfg)
    for h, ((beats, _, want), g) in enumerate(zip(stimuli, got)):
        finish_order = [b[1] for b in beats if b[1] is not None]
        expect = [w for r in finish_order for w in want[r]]
        assert len(g) == len(expect)
        for i, (x, e) in enumerate(zip(g, expect)):
            assert x == e, (f"head {h} beat {i}: got {layout.from_bits(x)}, "
                            f"want {layout.from_bits(e)}")
    assert flags["bad_weight"] == 0
    return cycles[-1]


@pytest.mark.parametrize("cfg, seed", [(SMALL, 0), (SMALL, 1), (ODD, 2)])
def test_head_exact_under_backpressure(cfg, seed):
    rng = np.random.default_rng(seed)
    scale = float(np.exp(rng.uniform(np.log(1e-4), np.log(0.5))))
    mult, shift = softmax_scale(scale)
    rows, d = cfg.engine_max_tokens, cfg.engine_max_head_dim - int(seed == 2) * 3
    s, v = _head(rng, rows, 50, d, scale)
    blocks = np.split(rng.permutation(50), [7, 19, 20, 38])
    perm = lambda b: np.random.default_rng(b).permutation(rows)   # noqa: E731
    # A second head on the same rows: its first blocks must not add onto the first head's O.
    s2, v2 = _head(rng, rows, 20, d, scale)
    _check(cfg, [(s, v, mult, shift, blocks, perm), (s2, v2, mult, shift, [np.arange(20)])],
           gap=0.3, stall=0.4, seed=seed)


def test_default_build_and_finish_period():
    cfg = KaleidoConfig()
    rng = np.random.default_rng(4)
    mult, shift = softmax_scale(0.004)
    s, v = _head(rng, 3, 150, 128, 0.004)
    blocks = [np.arange(0, 64), np.arange(64, 128), np.arange(128, 150)]
    cycles = _check(cfg, [(s, v, mult, shift, blocks)], fins_last=True)
    chunks = 128 // cfg.vector_lanes
    ends = cycles[chunks - 1::chunks]
    assert set(np.diff(ends).tolist()) == {2 * chunks + FINISH_OVERHEAD}


def test_one_words_beats_back_to_back():
    """One row, one chunk: every beat updates the word the one before it is still writing."""
    cfg = KaleidoConfig(vector_lanes=8, engine_max_head_dim=8, engine_max_tokens=2)
    rng = np.random.default_rng(5)
    mult, shift = softmax_scale(0.01)
    s, v = _head(rng, 1, 30, 8, 0.01)
    s[0] = np.sort(s[0])                               # every block rescales
    blocks = [np.arange(b, b + 3) for b in range(0, 30, 3)]
    _check(cfg, [(s, v, mult, shift, blocks)])
    _check(cfg, [(s, v, mult, shift, blocks)], gap=0.5, stall=0.5, seed=3)


def test_bad_weight_flag_and_no_hang():
    cfg = SMALL
    fin = finish_requests(cfg, [0, 0])[1]
    chunks = -(-cfg.engine_max_head_dim // cfg.vector_lanes)
    dut = BlockOutputUnit(cfg)
    out = {}

    async def bench(ctx):
        ctx.set(Value.cast(dut.fin.payload), fin)
        ctx.set(dut.fin.valid, 1)
        ctx.set(dut.out.ready, 1)
        await ctx.tick().until(dut.fin.ready)
        ctx.set(dut.fin.valid, 0)
        n = 0
        for _ in range(100):
            _, _, valid = await ctx.tick().sample(dut.out.valid)
            n += valid
        out["beats"], out["flag"] = n, ctx.get(dut.bad_weight)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert out == {"beats": chunks, "flag": 1}


def test_clamped_mean():
    """Section 15's clamp: the rescale's rounding takes this row's mean to -128.25 (the
    golden test's case), which leaves int16; the unit gives -2**15, and +127 * 256 - 1 at
    the other end."""
    cfg = KaleidoConfig(vector_lanes=4, engine_max_head_dim=8, engine_max_tokens=2)
    s = np.array([[0, 2304], [0, 2304]])
    v = np.array([[-128, 127], [-128, 127]])
    st = online_stages(s, v, 1 << 15, 15, 1)
    assert st["out"][0].tolist() == [-(1 << 15), 127 * 256 + 63]
    _check(cfg, [(s, v, 1 << 15, 15, 1)])


def test_finish_requests_go_first():
    """A finish request holds the partial beats until its row is out: with partial beats
    offered every cycle, the finished row leaves before the last of them is taken."""
    cfg = SMALL
    rng = np.random.default_rng(8)
    mult, shift = softmax_scale(0.01)
    s, v = _head(rng, cfg.engine_max_tokens, 12, 24, 0.01)
    first, later = _stimulus(cfg, s, v, mult, shift, 12), _stimulus(cfg, s, v, mult, shift, 12)
    beats = [(b, None) for b, _ in later[0]] * 3       # another head's beats, no finishes
    chunks = len(first[2][0])
    # Row 0 finishes right after its beats; the other head's beats follow without gaps.
    heads = [(first[0][:chunks] + beats, {0: first[1][0]}, {0: first[2][0]})]
    dut_out, cycles, _ = _run(cfg, heads, max_cycles=5_000)
    assert dut_out[0] == first[2][0]
    assert cycles[0][-1] < chunks + len(beats)
