# amaranth: UnusedElaboratable=no
# (the configuration tests build components without elaborating them)
"""Amaranth-simulator tests of ReusePE and BaselinePE (async testbenches).

Every test drives the RTL and ``golden.pe.model`` with the same inputs and compares every
output and register after every clock edge; the directed tests also check the drained tile
values against exact numpy dot products (operating points of ``golden.pe.modes``).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from amaranth.hdl import ClockDomain, Module
from amaranth.sim import Simulator
from pe_stimulus import (QUAD_VARIANTS, CodedStep, baseline_random_inputs, dense_stimulus,
                         linear_stimulus, quad_stimulus, random_ctrl, random_inputs, resolve)

import golden.pe.model as gm
from golden.pe.modes import quad_passes
from kaleido_hw.config import ConfigError, KaleidoConfig, min_acc_width
from kaleido_hw.pe import layouts as hw
from kaleido_hw.pe.pe import BaselinePE, ReusePE


CONFIG = KaleidoConfig()
ROW_FIELDS = ("a0", "a1", "ctrl")
COL_FIELDS = ("b",)


def _drive_reuse(ctx, dut, x: gm.PEInputs, rst):
    ctx.set(rst, x.rst)
    ctx.set(dut.row.a0, x.a0)
    ctx.set(dut.row.a1, x.a1)
    ctrl = x.ctrl.pack() if isinstance(x.ctrl, gm.PECtrl) else x.ctrl
    ctx.set(dut.row.ctrl.as_value(), ctrl)
    ctx.set(dut.col.b, x.b)
    ctx.set(dut.drain_in.valid, x.drain_valid)
    ctx.set(dut.drain_in.data, x.drain_data)


def _drive_baseline(ctx, dut, x: gm.BaselineInputs, rst):
    ctx.set(rst, x.rst)
    ctx.set(dut.row.a0, x.a0)
    ctrl = x.ctrl.pack() if isinstance(x.ctrl, gm.BaselineCtrl) else x.ctrl
    ctx.set(dut.row.ctrl.as_value(), ctrl)
    ctx.set(dut.col.b, x.b)
    ctx.set(dut.drain_in.valid, x.drain_valid)
    ctx.set(dut.drain_in.data, x.drain_data)


def _read(ctx, dut, row_fields, col_fields, regs):
    out = {r: ctx.get(getattr(dut, r)) for r in regs}
    out["busy"] = ctx.get(dut.busy)
    out["drain_out__valid"] = ctx.get(dut.drain_out.valid)
    out["drain_out__data"] = ctx.get(dut.drain_out.data)
    for prefix, port, fields in (("row_out", dut.row_out, row_fields),
                                 ("col_out", dut.col_out, col_fields)):
        for f in fields:   # enum and layout views read as their raw bits
            v = getattr(port, f)
            out[f"{prefix}__{f}"] = ctx.get(v.as_value() if hasattr(v, "as_value") else v)
    return out


def run_against_model(inputs, *, baseline=False, config=CONFIG):
    """Simulate ``inputs`` (one per cycle) on the RTL and the model; assert equality after
    every edge. Returns the drained values (drain_out valid) in order."""
    dut = BaselinePE(config) if baseline else ReusePE(config)
    model = (gm.BaselinePEModel if baseline else gm.ReusePEModel)(config.acc_width)
    top = Module()
    top.domains.sync = cd = ClockDomain("sync")
    top.submodules.dut = dut
    sim = Simulator(top)
    sim.add_clock(1e-6)
    drive = _drive_baseline if baseline else _drive_reuse
    rows, cols = (("a0", "ctrl"), ("b",)) if baseline else (ROW_FIELDS, COL_FIELDS)
    regs = ("r0",) if baseline else ("r0", "r1", "r2")
    drained = []

    async def bench(ctx):
        for cycle, x in enumerate(inputs):
            drive(ctx, dut, x, cd.rst)
            await ctx.tick()
            expect = model.step(x)
            got = _read(ctx, dut, rows, cols, regs)
            assert got == expect, f"cycle {cycle}: inputs {x}\n rtl   {got}\n model {expect}"
            if got["drain_out__valid"]:
                drained.append(got["drain_out__data"])
    sim.add_testbench(bench)
    sim.run()
    return drained


# -- the layouts match the golden model --------------------------------------------------------

@pytest.mark.parametrize("name", ["Op", "Part", "Move", "Drain"])
def test_enums_match_golden(name):
    hw_enum, gm_enum = getattr(hw, name), getattr(gm, name)
    assert {e.name: e.value for e in hw_enum} == {e.name: e.value for e in gm_enum}


def test_split_is_the_resolved_half_of_golden():
    """The PE's split is COL or ROW; the schedule's AUTO splits are resolved before the PE."""
    assert {e.name: e.value for e in hw.Split} == {"COL": gm.Split.COL, "ROW": gm.Split.ROW}


def test_ctrl_layout_matches_golden():
    """The RTL's 16-bit word has golden.pe.model's field order and widths (parts R0..R2)."""
    part = hw.CtrlLayout["part"]
    fields = {name: (hw.CtrlLayout[name].offset, hw.CtrlLayout[name].width)
              for name in ("op", "split", "clear", "move", "drain")}
    fields.update({f"part{k}": (part.offset + 2 * k, 2) for k in range(3)})
    offset = 0
    for name, width in gm.PE_CTRL_FIELDS:
        assert fields[name] == (offset, width), name
        offset += width
    assert hw.CtrlLayout.size == gm.PE_CTRL_WIDTH == 16
    assert [(n, hw.BaselineCtrlLayout[n].offset) for n, _ in gm.BASELINE_CTRL_FIELDS] == \
        [("acc", 0), ("clear", 1), ("drain", 2)]


def test_ctrl_pack_roundtrip():
    rng = random.Random(3)
    for _ in range(200):
        c = random_ctrl(rng)
        assert gm.PECtrl.unpack(c.pack()) == c
    with pytest.raises(ValueError, match="clear"):
        gm.PECtrl(clear=8).pack()
    with pytest.raises(ValueError, match="COL or ROW"):
        gm.PECtrl(split=gm.Split.AUTO_COL)


# -- operating points --------------------------------------------------------------------------

def _tile0_expected(A, a, q, k):
    """R0/R1/R2 after a tile-0 pass with split AUTO_COL, written out independently."""
    hi = lambda x: x >> 4
    r1 = sum(x * y if kc == 0 else 16 * x * hi(y) if kc == 1 else 0
             for x, y, kc in zip(A, a, k))
    r2 = sum(x * y if qc == 0 else 16 * hi(x) * y if (qc == 1 and kc != 1) else 0
             for x, y, qc, kc in zip(A, a, q, k))
    return int(np.dot(A, a)), r1, r2


def test_mode0_tile0_shares():
    """Paper Mode 0: R0 takes A.a, R1 what tile 1 reuses, R2 what tile 2 reuses."""
    rng = random.Random(10)
    d = 24
    A = [rng.choice((-128, 127, rng.randint(-128, 127))) for _ in range(d)]
    a = [rng.choice((-128, 127, rng.randint(-128, 127))) for _ in range(d)]
    q = [rng.randrange(3) for _ in range(d)]
    k = [rng.randrange(3) for _ in range(d)]
    word = quad_passes()[0].word
    inputs = [CodedStep(a0=x, b=y, qc0=qc, kc0=kc, ctrl=word.with_(clear=0b111) if i == 0
                        else word) for i, (x, y, qc, kc) in enumerate(zip(A, a, q, k))]
    inputs += [CodedStep(ctrl=gm.Ctrl(drain=gm.Drain(r + 1))) for r in range(3)]
    assert run_against_model(resolve(inputs)) == list(_tile0_expected(A, a, q, k))


@pytest.mark.parametrize("variant", QUAD_VARIANTS, ids=lambda v: str(v))
def test_quad_modes_exact(variant):
    """Modes 0, 1 and 3 (tile 0, tiles 1/2, tile 3): a whole quad is exact, with skipped
    idle channel steps, and passes switch back to back (entry step drains + moves)."""
    rng = random.Random(hash(variant) & 0xFFFF)
    inputs, expected = [], []
    for n in range(3):   # three quads back to back: each tile-0 entry drains the last T3
        steps, exp = quad_stimulus(rng, 10, *variant, skip_idle=n > 0, drain_first=n > 0,
                                   weights=((1, 1, 1), (3, 3, 1), (1, 1, 3))[n])
        inputs += steps[:-1] if n < 2 else steps
        expected += exp
    assert run_against_model(resolve(inputs)) == expected


@pytest.mark.parametrize("order", ["t1-first", "t2-first"])
def test_mode2_low_pair_exact(order):
    """Mode 2 (and Mode 3 with HALF columns): pairable channels merged into LOW_PAIR steps."""
    rng = random.Random(7)
    inputs, expected = [], []
    pairs = 0
    for n in range(3):
        steps, exp = quad_stimulus(rng, 16, order, skip_idle=True, pair=True,
                                   drain_first=n > 0, weights=(1, 4, 1))
        pairs += sum(1 for s in steps if s.ctrl.op == gm.Op.LOW_PAIR)
        inputs += steps[:-1] if n < 2 else steps
        expected += exp
    assert pairs >= 5, "the stimulus should exercise LOW_PAIR"
    assert run_against_model(resolve(inputs)) == expected


@pytest.mark.parametrize("window", [2, 3])
def test_linear_mode_exact(window):
    rng = random.Random(window)
    steps, expected = linear_stimulus(rng, 20, window, weights=(1, 3, 1))
    assert run_against_model(resolve(steps)) == expected


def test_dense_mode_exact():
    rng = random.Random(1)
    steps, expected = dense_stimulus(rng, 30)
    assert run_against_model(resolve(steps)) == expected


def test_random_words_match_model():
    """Every op, split, part, clear, move and drain encoding, random operands."""
    rng = random.Random(2024)
    run_against_model(random_inputs(rng, 1000, CONFIG.acc_width))


def test_accumulator_wraps_like_model():
    """The narrowest legal accumulator (20 bits for cogvideox-5b) wraps modulo
    2**acc_width identically in RTL and model when driven past its exact range."""
    cfg = KaleidoConfig(preset="cogvideox-5b", acc_width=min_acc_width(24))
    word = gm.PECtrl(op=gm.Op.MUL, parts=(gm.Part.PROD, gm.Part.HIGH, gm.Part.LOW))
    inputs = [gm.PEInputs(a0=-128, b=-128, ctrl=word) for _ in range(200)]
    run_against_model(inputs, config=cfg)


def test_reset_mid_accumulation():
    """A reset in the middle of a quad returns every register and output to 0; the PE
    then carries on from the reset state."""
    rng = random.Random(9)
    steps, _ = quad_stimulus(rng, 12, weights=(1, 1, 3))
    steps = resolve(steps)
    cut = len(steps) // 2
    reset = gm.PEInputs(rst=1, a0=-128, b=-128, ctrl=steps[cut].ctrl, drain_valid=1)
    inputs = steps[:cut] + [reset] + steps[cut:]
    model = gm.ReusePEModel(CONFIG.acc_width)
    for x in steps[:cut]:
        model.step(x)
    assert all(model.r), "the reset must hit R0, R1 and R2 holding partial sums"
    after = model.step(reset)
    assert {k: v for k, v in after.items() if v} == {}
    run_against_model(inputs)   # the RTL equals the model every cycle, including this one


def test_drain_chain_shifts():
    """drain_in passes through when the word drains nothing; a drain overrides it."""
    inputs = [gm.PEInputs(drain_valid=1, drain_data=-5 - i) for i in range(4)]
    inputs += [gm.PEInputs(a0=3, b=4, ctrl=gm.PECtrl(op=gm.Op.MUL, parts=(gm.Part.PROD,) +
                                                      (gm.Part.NONE,) * 2),
                           drain_valid=1, drain_data=99),
               gm.PEInputs(ctrl=gm.PECtrl(drain=gm.Drain.R0), drain_valid=1, drain_data=77)]
    assert run_against_model(inputs) == [-5, -6, -7, -8, 99, 12]


# -- BaselinePE --------------------------------------------------------------------------------

def test_baseline_random_matches_model():
    rng = random.Random(5)
    run_against_model(baseline_random_inputs(rng, 800, CONFIG.acc_width), baseline=True)


def test_baseline_dot_product_and_reset():
    rng = random.Random(6)
    a = [rng.choice((-128, 127, rng.randint(-128, 127))) for _ in range(40)]
    b = [rng.choice((-128, 127, rng.randint(-128, 127))) for _ in range(40)]
    acc = gm.BaselineCtrl(acc=1)
    inputs = [gm.BaselineInputs(a0=x, b=y, ctrl=gm.BaselineCtrl(acc=1, clear=int(i == 0)))
              for i, (x, y) in enumerate(zip(a, b))]
    inputs += [gm.BaselineInputs(ctrl=gm.BaselineCtrl(drain=1))]
    inputs += [gm.BaselineInputs(a0=x, b=y, ctrl=acc) for x, y in zip(a[:7], b[:7])]
    inputs += [gm.BaselineInputs(rst=1, a0=1, b=1, ctrl=acc),
               gm.BaselineInputs(ctrl=gm.BaselineCtrl(drain=1))]
    assert run_against_model(inputs, baseline=True) == [int(np.dot(a, b)), 0]


# -- configuration errors ----------------------------------------------------------------------

@pytest.mark.parametrize("cls", [ReusePE, BaselinePE])
def test_pe_rejects_non_config(cls):
    with pytest.raises(TypeError, match="KaleidoConfig"):
        cls({"acc_width": 24})


def test_acc_width_below_exact_minimum_rejected():
    need = min_acc_width(KaleidoConfig().largest_group)
    with pytest.raises(ConfigError, match=rf"acc_width must be in \[{need}, 48\]"):
        KaleidoConfig(acc_width=need - 1)


@pytest.mark.parametrize("width", [21, 32, 48])
def test_acc_width_sets_port_widths(width):
    pe = ReusePE(KaleidoConfig(acc_width=width))
    for name in ("r0", "r1", "r2"):
        assert getattr(pe, name).shape().width == width
    assert pe.drain_out.data.shape().width == width
    assert BaselinePE(KaleidoConfig(acc_width=width)).r0.shape().width == width
