"""SlotUnit (``kaleido_hw/dispatch/slot_unit.py``, ``docs/engine.md`` "Matcher"): per column block the
slot sequence of ``golden.dispatch.model.match``, replayed per quad with the skip rule, under random
valid gaps on both inputs and random output stalls; the replay timing and the bank's
release without stalls; and the blocks and quads of a real head's chunks
(``golden.engine.model``)."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
from amaranth.hdl import Value
from amaranth.sim import Simulator

from golden.array.schedule import ABSENT, units
from golden.dispatch.model import MatcherParams, match
from golden.engine.model import EngineParams, chunks, match_codes, orders
from golden.numerics import HALF, NONE, ChannelGroups, VideoGrid, reuse_masks
from kaleido_hw.bitops import bits_for
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.dispatch.layouts import index_width
from kaleido_hw.dispatch.slot_unit import SlotUnit


SMALL = KaleidoConfig(cols=4, sched_pattern_width=8, matcher_channels=8, matcher_lookahead=3)


def make_blocks(rng, C, W, n):
    """Column blocks (pass-3 classes) with 1..3 quads each: dense, sparse, HALF-heavy, all
    zero; work masks random, empty, full, single-channel."""
    blocks = []
    for _ in range(n):
        kind = rng.choice(("dense", "sparse", "half", "zero", "dense"))
        p = {"dense": (0.3, 0.3, 0.4), "sparse": (0.85, 0.1, 0.05), "half": (0.3, 0.6, 0.1),
             "zero": (1.0, 0.0, 0.0)}[kind]
        codes = np.array([[rng.choices((0, 1, 2), weights=p)[0] for _ in range(W)]
                          for _ in range(C)])
        quads = []
        for _ in range(rng.randrange(1, 4)):
            w = rng.choice((rng.getrandbits(W), 0, (1 << W) - 1, 1 << rng.randrange(W),
                            rng.getrandbits(W) & rng.getrandbits(W)))
            quads.append(w)
        blocks.append((codes, quads))
    return blocks


def expected_items(blocks, cfg):
    """Per quad, the items the unit must emit: (a, b, merged, sel tuple, count, carried,
    empty, last)."""
    C, W = cfg.cols, cfg.sched_pattern_width
    mp = MatcherParams(cols=C, channels=W, lookahead=cfg.matcher_lookahead)
    items = []
    for codes, quads in blocks:
        r = match(codes[None], mp)
        slots = [(int(a), int(max(b, 0)), bool(b >= 0), tuple(int(x) for x in s))
                 for a, b, s in zip(r.a, r.b, r.sel)]
        for w in quads:
            kept = [s for s in slots
                    if (w >> s[0]) & 1 or (s[2] and (w >> s[1]) & 1)]
            if not kept:
                items.append([("empty", 0)])
                continue
            carried = len(kept) + sum(s[2] for s in kept)
            items.append([(*s, len(kept), carried, False, i == len(kept) - 1)
                          for i, s in enumerate(kept)])
    return items


def unpack_item(cfg, word):
    C, W = cfg.cols, cfg.sched_pattern_width
    iw = index_width(W)
    off = 0

    def take(n):
        nonlocal off
        v = (word >> off) & ((1 << n) - 1)
        off += n
        return v
    a, b, merged = take(iw), take(iw), take(1)
    sel = tuple(take(3) for _ in range(C))
    count, carried, empty, last = take(bits_for(W)), take(bits_for(W)), take(1), take(1)
    if empty:
        assert last and count == 0 and carried == 0, (count, carried, last)
        return ("empty", 0)
    return (a, b, bool(merged), sel, count, carried, False, bool(last))


def pack_block(cfg, codes):
    C, W = cfg.cols, cfg.sched_pattern_width
    return sum(int(codes[c, j]) << (2 * (c * W + j)) for c in range(C) for j in range(W))


def run_unit(cfg, blocks, *, gap=0.0, stall=0.0, seed=0, max_cycles=50_000):
    """Drive blocks and quads with random gaps, the output with random stalls. Returns
    (items per quad, block accept cycles, quad accept cycles, item cycles per quad)."""
    rng = random.Random(seed)
    dut = SlotUnit(cfg)
    quads = [(w, i == len(q) - 1) for _, q in blocks for i, w in enumerate(q)]
    got, blk_cycles, quad_cycles, item_cycles = [], [], [], []
    o_payload = Value.cast(dut.o.payload)

    async def bench(ctx):
        cycle, kb, kq = 0, 0, 0
        blk_on = quad_on = False
        cur, cur_cycles = [], []
        while cycle < max_cycles and len(got) < len(quads):
            if not blk_on and kb < len(blocks) and not (gap and rng.random() < gap):
                blk_on = True
                ctx.set(dut.blk.payload.as_value(), pack_block(cfg, blocks[kb][0]))
            if not quad_on and kq < len(quads) and not (gap and rng.random() < gap):
                quad_on = True
                w, last = quads[kq]
                ctx.set(dut.quad.payload.work, w)
                ctx.set(dut.quad.payload.last, last)
            ctx.set(dut.blk.valid, blk_on)
            ctx.set(dut.quad.valid, quad_on)
            ctx.set(dut.o.ready, 0 if stall and rng.random() < stall else 1)
            _, _, bv, br, qv, qr, ov, orr, pl = await ctx.tick().sample(
                dut.blk.valid, dut.blk.ready, dut.quad.valid, dut.quad.ready,
                dut.o.valid, dut.o.ready, o_payload)
            if bv and br:
                blk_cycles.append(cycle)
                kb += 1
                blk_on = False
            if qv and qr:
                quad_cycles.append(cycle)
                kq += 1
                quad_on = False
            if ov and orr:
                item = unpack_item(cfg, pl)
                cur.append(item)
                cur_cycles.append(cycle)
                if item[0] == "empty" or item[-1]:
                    got.append(cur)
                    item_cycles.append(cur_cycles)
                    cur, cur_cycles = [], []
            cycle += 1
        assert len(got) == len(quads), f"timeout: {len(got)}/{len(quads)} quads replayed"
        for _ in range(8):                 # nothing more may come out
            ctx.set(dut.o.ready, 1)
            _, _, ov = await ctx.tick().sample(dut.o.valid)
            assert not ov, "extra output item"

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return got, blk_cycles, quad_cycles, item_cycles


@pytest.mark.parametrize("cfg,gap,stall,seed", [
    (SMALL, 0.3, 0.3, 1),
    (SMALL, 0.6, 0.1, 2),
    (dataclasses.replace(SMALL, matcher_lookahead=1), 0.2, 0.4, 3),
    (KaleidoConfig(), 0.3, 0.3, 4),                      # C = 4, W = 16, L = 4
    (KaleidoConfig(cols=3, sched_pattern_width=12, matcher_channels=4, matcher_lookahead=2),
     0.3, 0.3, 5),
])
def test_slots_are_the_golden_match_with_skips(cfg, gap, stall, seed):
    rng = random.Random(seed)
    blocks = make_blocks(rng, cfg.cols, cfg.sched_pattern_width, 24)
    want = expected_items(blocks, cfg)
    got, *_ = run_unit(cfg, blocks, gap=gap, stall=stall, seed=seed)
    assert len(got) == len(want)
    for n, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"quad {n}: got {g}, want {w}"
    # the stimulus exercised merges, skips and empty quads
    flat = [i for q in want for i in q]
    assert any(i[0] != "empty" and i[2] for i in flat) == (cfg.matcher_lookahead > 1)
    assert any(i == ("empty", 0) for i in flat)
    mp = MatcherParams(cols=cfg.cols, channels=cfg.sched_pattern_width,
                       lookahead=cfg.matcher_lookahead)
    per_quad = [int(match(c[None], mp).slots[0]) for c, q in blocks for _ in q]
    assert any(0 < len(w) < n for w, n in zip(want, per_quad)), "no partial skip exercised"


def test_replay_timing_and_bank_release():
    """Without gaps or stalls: a quad accepted at y emits its items at y+1 .. y+max(n, 1);
    the next quad is accepted at y+max(n, 1)+1 when the bank is complete; a block that
    starts at x (its matcher reads it in place) is taken with its last slot at x+S and its
    slots are in the bank from x+S+1 (a block without work: taken at x, in the bank from
    x+1); and the next block starts in the cycle after the last item of the block before
    (the bank's release), never earlier, while it waits on ``blk``."""
    cfg = SMALL
    rng = random.Random(7)
    blocks = make_blocks(rng, cfg.cols, cfg.sched_pattern_width, 16)
    got, blk_cycles, quad_cycles, item_cycles = run_unit(cfg, blocks)
    assert got == expected_items(blocks, cfg)
    mp = MatcherParams(cols=cfg.cols, channels=cfg.sched_pattern_width,
                       lookahead=cfg.matcher_lookahead)
    n_slots = [int(match(c[None], mp).slots[0]) for c, _ in blocks]
    starts = [taken - s for taken, s in zip(blk_cycles, n_slots)]
    block_of_quad = [b for b, (_, q) in enumerate(blocks) for _ in q]
    for qi, (y, cyc) in enumerate(zip(quad_cycles, item_cycles)):
        assert cyc == list(range(y + 1, y + 1 + len(cyc))), qi
        b = block_of_quad[qi]
        ready = blk_cycles[b] + 1
        prev_done = item_cycles[qi - 1][-1] + 1 if qi else 0
        assert y == max(ready, prev_done), (qi, y, ready, prev_done)
    last_item = {}
    for qi, b in enumerate(block_of_quad):
        last_item[b] = item_cycles[qi][-1]
    assert starts[0] == 0
    for b in range(len(blocks) - 1):
        assert starts[b + 1] == last_item[b] + 1, (b, starts[b + 1], last_item[b])
    assert any(n_slots) and not all(n_slots), "blocks with and without work"


def follower_codes(codes, grid, chunk):
    """(U, n) codes of each unit's follower at the chunk's channels (ABSENT: no follower)."""
    _, followers = units(grid, chunk.direction)
    present = followers >= 0
    f = np.where(present, followers, 0)
    return np.where(present[:, None], codes[np.ix_(f, chunk.channels)], ABSENT)


def test_engine_contract_blocks_and_quads():
    """A real head (grid 3x5x4, groups 4/6/6, W = 4, 2x2 arrays as one array's view): per
    chunk, the column blocks of the scheduled column order (``golden.engine.model.match_codes``)
    and, per quad, the row block's HALF/NONE channels; the slot unit's items equal the
    golden match with the engine's skip rule."""
    cfg = KaleidoConfig(rows=2, cols=2, sched_entries=8, sched_clusters=2,
                        sched_pattern_width=4, matcher_channels=4, matcher_lookahead=2,
                        engine_max_tokens=64)
    grid = VideoGrid(3, 5, 4)
    groups = ChannelGroups.from_sizes(4, 6, 6)
    rng = np.random.default_rng(8)
    q = np.clip(np.cumsum(rng.integers(-9, 10, (grid.n, 16)), axis=0), -128, 127).astype(np.int8)
    k = np.clip(np.cumsum(rng.integers(-9, 10, (grid.n, 16)), axis=0), -128, 127).astype(np.int8)
    mq, mk = reuse_masks(q, grid, groups), reuse_masks(k, grid, groups)
    p = EngineParams.from_config(cfg)
    R, C, W = cfg.rows, cfg.cols, cfg.sched_pattern_width
    blocks = []
    for ch, order in zip(chunks(groups, W), orders((mq, mk), grid, groups, p)):
        qc = follower_codes(mq, grid, ch)[order.q]
        kc = follower_codes(mk, grid, ch)[order.k]
        hn = (qc == HALF) | (qc == NONE)
        works = [sum(1 << j for j in range(hn.shape[1]) if hn[r:r + R, j].any())
                 for r in range(0, hn.shape[0], R)]
        for codes in match_codes(kc, C, W):
            blocks.append((codes, works))
    want = expected_items(blocks, cfg)
    got, *_ = run_unit(cfg, blocks, gap=0.2, stall=0.2, seed=9)
    assert got == want
    assert any(len(w) > 1 for w in want)
