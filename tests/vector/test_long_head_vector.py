"""The two units of long heads composed (``docs/vector.md``, "Long heads"): a head's S blocks
through ``block_softmax``, each block row's P times V (the bench plays the PE arrays: exact
``P @ V_eff`` of the block) into ``block_output`` with the factor the softmax unit gave, and
each row's finish request with the weight it gave; the int16 rows that come out must equal
``golden.vector.attention_online`` of the whole head, under random gaps and back-pressure.
The test checks that the units' interfaces carry section 15 from end to end: nothing but
what the units emit goes from the first to the second."""

from __future__ import annotations

import random

import numpy as np
from amaranth.hdl import Module, Value
from amaranth.sim import Simulator

from golden.vector import attention_online, softmax_scale
from golden.vector.online import box_blocks
from golden.window import window_effective_operand, window_masks
from golden.numerics import ChannelGroups, attention_scores
from golden.workloads import make_qkv
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.vector.block_output import BlockOutputUnit
from kaleido_hw.vector.block_softmax import BlockSoftmaxUnit
from kaleido_hw.vector.layouts import block_prob_beat_layout, output_beat_layout
from long_head_beats import finish_requests, row_partials, score_beats


def test_head_through_both_units():
    cfg = KaleidoConfig(vector_lanes=8, vector_max_row=32, engine_max_tokens=8,
                        engine_max_head_dim=128)
    L, rows = cfg.vector_lanes, cfg.engine_max_tokens
    w = make_qkv("hunyuanvideo", "2x4x8", seed=3)              # 64 keys, d = 128
    s = attention_scores(w.q, w.k, w.grid, ChannelGroups.from_preset("hunyuanvideo"))[:rows]
    masks = window_masks(w.v, w.grid, "t", 2, 5, 3)
    v_eff = window_effective_operand(w.v, masks, w.grid, "t", 2).astype(np.int64)
    mult, shift = softmax_scale(w.scale)
    blocks = box_blocks(w.grid, (2, 2, 4))                    # 4 blocks of 16 keys
    want = attention_online(s, v_eff, mult, shift, blocks)

    m = Module()
    m.submodules.sm = sm = BlockSoftmaxUnit(cfg)
    m.submodules.out = out = BlockOutputUnit(cfg)
    p_layout, x_layout = block_prob_beat_layout(cfg), output_beat_layout(cfg)
    scores = score_beats(cfg, s, blocks, mult, shift,
                         [(b, r) for b in range(len(blocks)) for r in range(rows)])
    rng = random.Random(5)
    got = {}

    async def bench(ctx):
        s_pay, o_pay, f_pay = (Value.cast(p) for p in (sm.s.payload, out.o.payload,
                                                       out.fin.payload))
        k = 0
        p_row, block_of_row = [], {r: 0 for r in range(rows)}
        to_o, to_fin = [], []
        s_on = o_on = f_on = False
        for _ in range(40_000):
            if not s_on and k < len(scores) and rng.random() > 0.2:
                s_on = True
                ctx.set(s_pay, scores[k])
            if not o_on and to_o and rng.random() > 0.2:
                o_on = True
                ctx.set(o_pay, to_o[0])
            if not f_on and to_fin and not to_o and rng.random() > 0.2:
                f_on = True
                ctx.set(f_pay, to_fin[0])
            ctx.set(sm.s.valid, s_on)
            ctx.set(out.o.valid, o_on)
            ctx.set(out.fin.valid, f_on)
            ctx.set(sm.p.ready, int(rng.random() > 0.3))
            ctx.set(out.out.ready, int(rng.random() > 0.3))
            (_, _, sv, sr, pv, pr, pp, ov, orr, fv, fr, xv, xr, xp) = await ctx.tick().sample(
                sm.s.valid, sm.s.ready, sm.p.valid, sm.p.ready, Value.cast(sm.p.payload),
                out.o.valid, out.o.ready, out.fin.valid, out.fin.ready, out.out.valid,
                out.out.ready, Value.cast(out.out.payload))
            if sv and sr:
                k += 1
                s_on = False
            if ov and orr:
                to_o.pop(0)
                o_on = False
            if fv and fr:
                to_fin.pop(0)
                f_on = False
            if pv and pr:
                beat = p_layout.from_bits(pp)
                p_row += [int(beat.p[i]) for i in range(L)]
                if beat.last:
                    # The arrays' part: this block row's P @ V_eff, in chunks of L channels.
                    r = int(beat.row)
                    b = block_of_row[r]
                    partial = np.asarray(p_row[:len(blocks[b])]) @ v_eff[blocks[b]]
                    to_o += row_partials(cfg, partial, r, b == 0, int(beat.factor))
                    if b == len(blocks) - 1:
                        to_fin.append(finish_requests(cfg, {r: int(beat.weight)})[r])
                    block_of_row[r] += 1
                    p_row = []
            if xv and xr:
                beat = x_layout.from_bits(xp)
                got.setdefault(int(beat.row), []).extend(
                    int(beat.values[i]) for i in range(L))
            if len(got) == rows and all(len(g) == 128 for g in got.values()):
                return
        raise AssertionError(f"hang: {k}/{len(scores)} score beats, rows out {sorted(got)}")

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert {r: got[r] for r in range(rows)} == {r: want[r].tolist() for r in range(rows)}
