"""MergedCell / MergedDecoder (``kaleido_hw/dispatch/merged_cell.py``, ``docs/engine.md`` "Matcher"):
the decode of a matcher slot checked through the PE's golden model against the unmerged
pass-3 decode table (``golden.array.schedule.DECODE``), exhaustively over the codes; unmerged steps
against the TileDecoder; and whole tile quads on a real cell (slots from
``golden.dispatch.model.match``) against a TileCell and the exact dot products."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
from amaranth.hdl import Module, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from golden.array.schedule import ABSENT, DECODE
from golden.array.schedule import Op as GOp
from golden.array.schedule import _contributions
from golden.dispatch.model import (SEL_BYTE_A, SEL_BYTE_B, SEL_NIB_A, SEL_NIB_AB, SEL_NIB_B,
                                   SEL_NONE, MatcherParams, match, slot_select)
from golden.pe.model import PECtrl, pe_contributions
from kaleido_hw.array.tile_cell import TileCell, TileDecoder
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.dispatch.merged_cell import (MergedCell, MergedDecoder, merged_col_layout,
                                             merged_column_edge, merged_row_layout)
from kaleido_hw.pe.layouts import CtrlLayout, DrainSignature


FULL, HALF, NONE = 0, 1, 2
CODES = (FULL, HALF, NONE, ABSENT)
CFG = KaleidoConfig()


class StepDecoder(wiring.Component):
    """The decode one cell makes of a step: the array's column edge (``merged_column_edge``)
    in front of a MergedDecoder, with the step's row and column as ports."""

    def __init__(self):
        super().__init__({"row": In(merged_row_layout()), "col": In(merged_col_layout()),
                          "a0": Out(signed(8)), "a1": Out(signed(8)), "ctrl": Out(CtrlLayout),
                          "b": Out(signed(8))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.dec = dec = MergedDecoder(CFG)
        edge = merged_column_edge(m, self.col, self.row.slot)
        m.d.comb += [dec.row.eq(self.row), dec.col.eq(edge), self.a0.eq(dec.a0),
                     self.a1.eq(dec.a1), self.ctrl.eq(dec.ctrl), self.b.eq(dec.b)]
        return m


class StepCell(wiring.Component):
    """A MergedCell fed through the array's column edge, with the step's row and column as
    ports (a one-cell MergedArray without skew)."""

    def __init__(self):
        super().__init__({"row": In(merged_row_layout()), "col": In(merged_col_layout()),
                          "drain": Out(DrainSignature(CFG.acc_width))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.cell = cell = MergedCell(CFG)
        edge = merged_column_edge(m, self.col, self.row.slot)
        m.d.comb += [cell.row.eq(self.row), cell.col.eq(edge), self.drain.valid.eq(cell.drain.valid),
                     self.drain.data.eq(cell.drain.data)]
        return m


def simulate(dut, bench, clock=True):
    sim = Simulator(dut)
    if clock:
        sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


def work_class(kc):
    """Pass-3 matcher class of a column follower code: FULL/ABSENT 0, HALF 1, NONE 2."""
    return {FULL: 0, HALF: 1, NONE: 2, ABSENT: 0}[kc]


def unmerged(p, qc, kc, x, y):
    """R0, R1, R2 contributions of one unmerged step (the golden decode table)."""
    op, split, sel = DECODE[0][p, qc, kc], DECODE[1][p, qc, kc], DECODE[2][p, qc, kc]
    return [int(v) for v in _contributions(np.int64(op), np.int64(split), sel,
                                           np.int64(x), np.int64(y))]


def s8(v):
    return ((v + 128) & 0xFF) - 128


def lo(v):
    return v & 15


def set_step(ctx, port, fields):
    for name, value in fields.items():
        target = port
        for part in name.split("."):
            target = getattr(target, part)
        ctx.set(target, value)


def decoder_outputs(ctx, dec):
    word = ctx.get(dec.ctrl.as_value())
    return dict(ctrl=PECtrl.unpack(int(word)), a0=ctx.get(dec.a0), a1=ctx.get(dec.a1),
                b=ctx.get(dec.b))


def pe_adds(o):
    """What the PE adds to R0, R1, R2 (and busy) for the decoder's outputs."""
    (c0, c1, c2), busy = pe_contributions(o["ctrl"], o["a0"], o["a1"], o["b"])
    return [int(c0), int(c1), int(c2)], bool(busy)


def slot_row(a, qc, a1, qc1, first=0, valid=1):
    return {"a": a, "qc": qc, "valid": valid, "mode.pass_idx": 3, "mode.first": first,
            "mode.issue": 1, "a1": a1, "qc1": qc1, "slot": 1}


def slot_col(b, kc, kc1, sel, valid=1):
    return {"b": b, "kc": kc, "valid": valid, "kc1": kc1, "sel": sel}


def test_slot_decode_is_the_rule_for_every_sel_and_code():
    """Every (sel, qcA, qcB, kcA, kcB), random values: BYTE_A decodes A's pass-3 entry,
    BYTE_B B's with swapped lanes, NIB_* adds a_j * nibble_j for each selected lane whose
    entry is LOWc, NONE nothing; never anything into R1/R2."""
    rng = random.Random(1)
    dec = StepDecoder()
    bad = []

    async def bench(ctx):
        for sel, qa, qb, ka, kb in itertools.product(range(6), CODES, CODES, CODES, CODES):
            a0, a1, b = (rng.randrange(-128, 128) for _ in range(3))
            set_step(ctx, dec.row, slot_row(a0, qa, a1, qb, first=rng.randrange(2)))
            set_step(ctx, dec.col, slot_col(b, ka, kb, sel))
            got, busy = pe_adds(decoder_outputs(ctx, dec))
            if sel == SEL_BYTE_A:
                want = unmerged(3, qa, ka, a0, b)
            elif sel == SEL_BYTE_B:
                want = unmerged(3, qb, kb, a1, b)
            else:
                lanes = {SEL_NIB_A: (1, 0), SEL_NIB_B: (0, 1), SEL_NIB_AB: (1, 1)}.get(
                    sel, (0, 0))
                r0 = 0
                for on, qc, kc, x, nib in ((lanes[0], qa, ka, a0, b & 15),
                                           (lanes[1], qb, kb, a1, (b >> 4) & 15)):
                    if on and DECODE[0][3, qc, kc] == GOp.LOW_COL:
                        r0 += x * nib
                want = [r0, 0, 0]
            if sel in (SEL_BYTE_A, SEL_BYTE_B):
                qc, kc = (qa, ka) if sel == SEL_BYTE_A else (qb, kb)
                want_busy = DECODE[0][3, qc, kc] != GOp.IDLE
            else:
                want_busy = None    # checked below through the contract test
            if got != want or (want_busy is not None and busy != want_busy):
                bad.append((sel, qa, qb, ka, kb, got, want, busy))

    simulate(dec, bench, clock=False)
    assert not bad, bad[:5]


def test_slot_adds_exactly_the_unmerged_steps():
    """The contract: for every (qcA, qcB, kcA, kcB), an unmerged slot of A and, where the
    column's work fits one port, a merged slot of A and B add to R0 exactly what the
    unmerged pass-3 steps of the selected channels add (random values, 4 draws each), and
    the PE is busy iff some unmerged step is."""
    rng = random.Random(2)
    dec = StepDecoder()
    bad = []
    checked = {"merged": 0, "single": 0}

    async def bench(ctx):
        for qa, qb, ka, kb in itertools.product(CODES, CODES, CODES, CODES):
            wa, wb = work_class(ka), work_class(kb)
            cases = [False] + ([True] if wa + wb <= 2 else [])
            for merged, _ in itertools.product(cases, range(4)):
                fa, fb, kfa, kfb = (rng.randrange(-128, 128) for _ in range(4))
                sel = int(slot_select(wa, wb if merged else 0))
                b = {SEL_BYTE_A: kfa, SEL_BYTE_B: kfb}.get(
                    sel, s8(lo(kfa) | lo(kfb if merged else rng.randrange(16)) << 4))
                if sel == SEL_NONE:
                    b = rng.randrange(-128, 128)
                set_step(ctx, dec.row, slot_row(fa, qa, fb if merged else rng.randrange(-128, 128),
                                                qb if merged else rng.choice(CODES)))
                set_step(ctx, dec.col, slot_col(b, ka, kb if merged else rng.choice(CODES), sel))
                got, busy = pe_adds(decoder_outputs(ctx, dec))
                want = unmerged(3, qa, ka, fa, kfa)
                want_busy = DECODE[0][3, qa, ka] != GOp.IDLE
                if merged:
                    want = [u + v for u, v in zip(want, unmerged(3, qb, kb, fb, kfb))]
                    want_busy |= DECODE[0][3, qb, kb] != GOp.IDLE
                checked["merged" if merged else "single"] += 1
                if got != want or busy != want_busy:
                    bad.append((qa, qb, ka, kb, merged, sel, got, want, busy, want_busy))

    simulate(dec, bench, clock=False)
    assert not bad, bad[:5]
    assert checked["merged"] > 0 and checked["single"] == 4 * 256


def test_unmerged_steps_decode_like_the_tile_decoder():
    """slot = 0: whatever the slot fields hold, the PE gets the TileCell's control word,
    operands a/b, codes qc/kc and NONE second codes."""
    rng = random.Random(3)
    m = Module()
    m.submodules.dec = dec = StepDecoder()
    m.submodules.ref = ref = TileDecoder(CFG)
    bad = []

    async def bench(ctx):
        for p, qc, kc, first, issue, rv, cv in itertools.product(
                range(4), CODES, CODES, (0, 1), (0, 1), (0, 1), (0, 1)):
            a, b = rng.randrange(-128, 128), rng.randrange(-128, 128)
            mode = {"mode.pass_idx": p, "mode.first": first, "mode.issue": issue}
            set_step(ctx, dec.row, {"a": a, "qc": qc, "valid": rv, **mode,
                                    "a1": rng.randrange(-128, 128), "qc1": rng.choice(CODES),
                                    "slot": 0})
            set_step(ctx, dec.col, {"b": b, "kc": kc, "valid": cv, "kc1": rng.choice(CODES),
                                    "sel": rng.randrange(6)})
            set_step(ctx, ref, {**mode, "rvalid": rv, "cvalid": cv, "qc": qc, "kc": kc})
            o = decoder_outputs(ctx, dec)
            want = (ctx.get(ref.ctrl.op.as_value()), ctx.get(ref.ctrl.split.as_value()),
                    tuple(ctx.get(ref.ctrl.part[k].as_value()) for k in range(3)),
                    ctx.get(ref.ctrl.clear), ctx.get(ref.ctrl.move.as_value()),
                    ctx.get(ref.ctrl.drain.as_value()), a, 0, b)
            c = o["ctrl"]
            got = (c.op, c.split, tuple(c.parts), c.clear, c.move, c.drain,
                   o["a0"], o["a1"], o["b"])
            if got != want:
                bad.append((p, qc, kc, first, issue, rv, cv, got, want))

    simulate(m, bench, clock=False)
    assert not bad, bad[:5]


# -- whole quads on a real cell -----------------------------------------------------------------

def follower(anchor, code, rng):
    """An effective follower value consistent with ``code`` (FULL: the anchor; HALF: the
    anchor's high nibble with a new low nibble; NONE: anything)."""
    if code == FULL:
        return anchor
    if code == HALF:
        return s8((anchor & ~15 & 0xFF) | rng.randrange(16))
    return rng.randrange(-128, 128)


def quad_data(rng, d):
    def side():
        anchors = [rng.randrange(-128, 128) for _ in range(d)]
        if rng.random() < 0.15:
            return anchors, list(anchors), [ABSENT] * d
        codes = [rng.choice((FULL, HALF, NONE)) for _ in range(d)]
        return anchors, [follower(x, c, rng) for x, c in zip(anchors, codes)], codes
    return side(), side()


def quad_steps(q, k, d, slots=None):
    """Steps of one quad (passes 0-3, one channel per step); with ``slots`` (a, b, merged,
    this column's sel) pass 3 issues the matcher's slots instead. Quads follow each other
    directly: pass 0's first step drains the previous quad's T3."""
    (qa, qf, qcs), (ka, kf, kcs) = q, k
    steps = []
    for p in range(4):
        if p == 3 and slots is not None:
            for i, (a, b, merged, sel) in enumerate(slots):
                b_ = b if merged else a          # unmerged: lane 1 unused (sel has no B)
                colv = {SEL_BYTE_A: kf[a], SEL_BYTE_B: kf[b_]}.get(
                    sel, s8(lo(kf[a]) | lo(kf[b_]) << 4))
                steps.append((
                    {"a": qf[a], "qc": qcs[a], "valid": 1, "mode.pass_idx": 3,
                     "mode.first": int(i == 0), "mode.issue": 1, "a1": qf[b_],
                     "qc1": qcs[b_], "slot": 1},
                    {"b": colv, "kc": kcs[a], "valid": 1, "kc1": kcs[b_], "sel": sel}))
            if not slots:      # nothing to issue: the pass is one bubble (its first step)
                steps.append(({"a": 0, "qc": 0, "valid": 1, "mode.pass_idx": 3,
                               "mode.first": 1, "mode.issue": 0}, {"b": 0, "kc": 0, "valid": 1}))
            continue
        for c in range(d):
            x = (qa if p < 2 else qf)[c]
            y = (ka if p in (0, 2) else kf)[c]
            steps.append(({"a": x, "qc": qcs[c], "valid": 1, "mode.pass_idx": p,
                           "mode.first": int(c == 0), "mode.issue": 1},
                          {"b": y, "kc": kcs[c], "valid": 1}))
    return steps


#: The step after the last quad: drains its T3.
FINAL_STEP = ({"a": 0, "qc": 0, "valid": 1, "mode.pass_idx": 0, "mode.first": 1,
               "mode.issue": 0}, {"b": 0, "kc": 0, "valid": 1})


def run_cell(cell, steps):
    """Drive the steps; return the value drained by every first step (the finished tiles)."""
    drained = []

    async def bench(ctx):
        for row, col in steps:
            base_row = {"a1": 0, "qc1": 0, "slot": 0} if isinstance(cell, StepCell) else {}
            base_col = {"kc1": 0, "sel": 0} if isinstance(cell, StepCell) else {}
            if not isinstance(cell, StepCell):
                row = {k: v for k, v in row.items() if k not in ("a1", "qc1", "slot")}
                col = {k: v for k, v in col.items() if k not in ("kc1", "sel")}
            set_step(ctx, cell.row, {**base_row, **row})
            set_step(ctx, cell.col, {**base_col, **col})
            await ctx.tick()
            if row["mode.first"]:
                drained.append(ctx.get(cell.drain.data))

    simulate(cell, bench)
    return drained[1:]        # the first drain of the run holds the empty register


@pytest.mark.parametrize("lookahead", [2, 4])
def test_quads_with_slots_equal_tilecell_and_exact_products(lookahead):
    """Random quads (consistent codes, absent followers), pass 3 from the matcher's slots on
    a 4-column batch, every column in turn, run back to back on one cell: the drained
    T0..T3 of every quad equal the TileCell's (which steps one channel at a time) and the
    exact dot products of the effective values."""
    rng = random.Random(10 + lookahead)
    d, C = 8, 4
    mp = MatcherParams(cols=C, channels=d, lookahead=lookahead)
    merged_seen = 0
    merged_steps, tile_steps, exact, present = [], [], [], []
    for trial in range(8):
        q = quad_data(rng, d)[0]
        cols = [quad_data(rng, d)[1] for _ in range(C)]
        classes = np.array([[work_class(kc) for kc in k[2]] for k in cols])
        res = match(classes[None], mp)
        merged_seen += int(res.merged.sum())
        for j, k in enumerate(cols):
            slots = [(int(a), int(b), bool(b >= 0), int(s[j]))
                     for a, b, s in zip(res.a, res.b, res.sel)]
            merged_steps += quad_steps(q, k, d, slots)
            tile_steps += quad_steps(q, k, d)
            (qa, qf, qcs), (ka, kf, kcs) = q, k
            exact += [sum(x * y for x, y in zip(u, v))
                      for u, v in ((qa, ka), (qa, kf), (qf, ka), (qf, kf))]
            present += [True, kcs[0] != ABSENT, qcs[0] != ABSENT,
                        kcs[0] != ABSENT and qcs[0] != ABSENT]
    got = run_cell(StepCell(), merged_steps + [FINAL_STEP])
    ref = run_cell(TileCell(CFG), tile_steps + [FINAL_STEP])
    assert len(got) == len(exact)
    assert got == ref
    bad = [(n // 4, n % 4, g, e) for n, (g, e, p) in enumerate(zip(got, exact, present))
           if p and g != e]
    assert not bad, bad[:5]
    assert merged_seen > 0
