"""The PE arrays with the P @ V mode folded in (``kaleido_hw.array.pv_tile_cell.PvPEArray``,
``kaleido_hw.dispatch.pv_merged_cell.PvMergedArray``) against the two arrays each folds
together, in the Amaranth simulator, cycle by cycle:

* QK^T / linear steps (``pv`` 0) against the ``PEArray`` / ``MergedArray``: every drain
  record and the busy count, on random steps (every pass, code, first and issue flag, padding
  rows and columns; matcher slots with every ``sel``), with random values in the P @ V
  fields, which must be ignored;
* P @ V steps (``pv`` 1) against the ``PvArray``: the same, with random values in ``qc``
  (and the slot fields);
* both modes alternating block by block, each block's drained R0 against the block run
  alone on its own reference array;
* the PE's P @ V multiplier on its extreme operands against ``golden.engine.pv.pv_terms``;
* both folded arrays' Verilog lint-clean (``verilator --lint-only -Wall``).
"""

from __future__ import annotations

import random
import shutil

import pytest
from amaranth.sim import Simulator

from golden.engine.pv import OP_MUL, OP_PAIR, pv_terms
from kaleido_hw.array.array import PEArray
from kaleido_hw.array.pv_cell import PvArray
from kaleido_hw.array.pv_tile_cell import PvPEArray
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.dispatch.merged_array import MergedArray
from kaleido_hw.dispatch.pv_merged_cell import PvMergedArray
from kaleido_hw.flow.lint import lint_component
from kaleido_hw.pe.datapath import ReuseMultiplier
from kaleido_hw.pe.layouts import Op, Split

CONFIGS = [KaleidoConfig(), KaleidoConfig(rows=3, cols=2, acc_width=21)]
#: Folded array -> (its QK^T reference, the field that carries p1 in a P @ V step).
FOLDED = {"pv_pe": ("pe", "p1"), "pv_merged": ("merged", "a1")}
ARRAYS = {"pv_pe": PvPEArray, "pe": PEArray, "pv": PvArray, "pv_merged": PvMergedArray,
          "merged": MergedArray}


def random_step(rng, pv, first_prob=0.15):
    """One step in the PvPEArray's terms: rows share the mode, each has its own data."""
    mode = {"pass_idx": rng.randrange(4), "first": int(rng.random() < first_prob),
            "issue": int(rng.random() < 0.85)}
    return {"pv": pv, "mode": mode,
            "slot": int(rng.random() < 0.3),
            "rows": [{"a": rng.randrange(-128, 128), "qc": rng.randrange(4),
                      "valid": int(rng.random() < 0.9), "p1": rng.randrange(256),
                      "p2": rng.randrange(256), "a1": rng.randrange(-128, 128),
                      "qc1": rng.randrange(4)} for _ in range(8)],
            "cols": [{"b": rng.randrange(-128, 128), "kc": rng.randrange(4),
                      "valid": int(rng.random() < 0.9), "v1": rng.randrange(-128, 128),
                      "v2": rng.randrange(-128, 128), "c2": rng.randrange(4),
                      "kc1": rng.randrange(4), "sel": rng.randrange(6)}
                     for _ in range(8)]}


def _set_fields(ctx, view, values):
    """Set the fields of ``values`` that the layout of ``view`` has (the others belong to
    the other arrays' steps)."""
    names = {name for name, _ in view.shape()}
    for name, value in values.items():
        if name not in names:
            continue
        if isinstance(value, dict):
            _set_fields(ctx, getattr(view, name), value)
        else:
            ctx.set(getattr(view, name), value)


def _as_pv_array(step, row, p1):
    """The PvArray's fields of a P @ V step's row (``a`` is p0, the pass its kind)."""
    return {"p0": row["a"] & 0xFF, "p1": row[p1] & 0xFF, "p2": row["p2"],
            "valid": row["valid"],
            "mode": {"kind": step["mode"]["pass_idx"], "first": step["mode"]["first"],
                     "issue": step["mode"]["issue"]}}


def _as_pv_array_col(col):
    return {"v0": col["b"], "v1": col["v1"], "v2": col["v2"], "c1": col["kc"], "c2": col["c2"],
            "valid": col["valid"]}


def run_array(kind, config, steps, tags, tail=12, p1="p1"):
    """Drive ``kind`` (a key of :data:`ARRAYS`) with ``steps`` (one per cycle, then ``tail``
    idle cycles; the PvArray takes its p1 from the row field ``p1``); returns per cycle
    ``(drain records, busy_count)``, a drain record being ``(j, row, data, tag)`` of each
    valid column."""
    dut = ARRAYS[kind](config)
    R, C = config.rows, config.cols
    trace = []

    async def bench(ctx):
        idle = {"pv": 0, "slot": 0, "mode": {"pass_idx": 3, "first": 0, "issue": 0},
                "rows": [{"a": 0, "qc": 3, "valid": 0, "p1": 0, "p2": 0, "a1": 0,
                          "qc1": 3}] * 8,
                "cols": [{"b": 0, "kc": 3, "valid": 0, "v1": 0, "v2": 0, "c2": 3, "kc1": 3,
                          "sel": 0}] * 8}
        for n, step in enumerate(steps + [idle] * tail):
            ctx.set(dut.tag, tags[n] if n < len(tags) else 0)
            for i in range(R):
                row = step["rows"][i]
                if kind == "pv":
                    fields = _as_pv_array(step, row, p1)
                else:
                    fields = {**row, "mode": step["mode"], "pv": step["pv"],
                              "slot": step["slot"]}
                _set_fields(ctx, dut.row[i], fields)
            for j in range(C):
                col = step["cols"][j]
                _set_fields(ctx, dut.col[j], _as_pv_array_col(col) if kind == "pv" else col)
            await ctx.tick()
            drains = tuple((j, ctx.get(dut.drain[j].row), ctx.get(dut.drain[j].data),
                            ctx.get(dut.drain[j].tag))
                           for j in range(C) if ctx.get(dut.drain[j].valid))
            trace.append((drains, ctx.get(dut.busy_count)))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return trace


def _cases(with_pv: bool, keep_4x4=()):
    """Parameters over the folded cells x the array shapes (x the mode): every case on the
    3 x 2 arrays and the 4 x 4 ones named in ``keep_4x4`` run in ``make test``; the other 4 x
    4 cases (the same logic at the default shape, several times slower to simulate) are
    marked ``full_set`` (``make regress``)."""
    out = []
    for folded in FOLDED:
        for config, shape in zip(CONFIGS, ("4x4", "3x2")):
            for pv in ((0, 1) if with_pv else (None,)):
                name = "-".join(([("qk", "pv")[pv]] if with_pv else []) + [shape, folded])
                slow = shape == "4x4" and name not in keep_4x4
                args = (folded, config, pv) if with_pv else (folded, config)
                out.append(pytest.param(*args, id=name,
                                        marks=pytest.mark.full_set if slow else ()))
    return out


@pytest.mark.parametrize("folded, config, pv", _cases(True, keep_4x4=("pv-4x4-pv_merged",)))
def test_one_mode_equals_its_array(folded, config, pv):
    qk_ref, p1 = FOLDED[folded]
    rng = random.Random(7 + pv)
    steps = [random_step(rng, pv) for _ in range(400)]
    tags = [rng.randrange(256) for _ in steps]
    got = run_array(folded, config, steps, tags)
    want = run_array("pv" if pv else qk_ref, config, steps, tags, p1=p1)
    assert sum(len(d) for d, _ in want) > 200          # the drains carry data
    assert sum(b for _, b in want) > 0.25 * len(steps) * config.rows * config.cols  # PEs work
    assert got == want


def _block(rng, pv, length):
    """A block: a first step (pass 0 for QK^T, which clears R0-R2), then no other first."""
    steps = [random_step(rng, pv, first_prob=0.0) for _ in range(length)]
    steps[0]["mode"].update(first=1)
    if not pv:
        steps[0]["mode"]["pass_idx"] = 0
    return steps


@pytest.mark.parametrize("folded, config", _cases(False))
def test_modes_alternate_block_by_block(folded, config):
    """What the engine core does: a P @ V block right after a QK^T block and back. Block k's
    R0 drains at block k + 1's first step; it must equal the block run alone on its own
    array, closed by a first step."""
    rng = random.Random(11)
    modes = [rng.randrange(2) for _ in range(12)]
    blocks = [_block(rng, pv, rng.randrange(config.rows, 3 * config.rows)) for pv in modes]
    closing = random_step(rng, 0, first_prob=1.0)
    closing["mode"].update(pass_idx=0, issue=0)
    steps, tags = [], []
    for k, block in enumerate(blocks):
        steps += block
        tags += [k + 1] + [0] * (len(block) - 1)
    steps.append(closing)
    tags.append(len(blocks) + 1)
    got = run_array(folded, config, steps, tags)
    qk_ref, p1 = FOLDED[folded]
    for k, block in enumerate(blocks):
        alone = run_array("pv" if modes[k] else qk_ref, config, block + [closing],
                          [0] * len(block) + [99], p1=p1)
        want = sorted((j, r, d) for drains, _ in alone for j, r, d, t in drains if t == 99)
        mine = sorted((j, r, d) for drains, _ in got for j, r, d, t in drains if t == k + 2)
        assert len(want) == config.rows * config.cols
        assert mine == want, f"block {k} ({'P @ V' if modes[k] else 'QK^T'})"


def test_multiplier_pv_operands_at_their_extremes():
    """``x_lo``/``x_hi`` up to 1023 against the golden terms, MUL and PAIR, every b."""
    dut = ReuseMultiplier(pv=True)
    xs = [0, 1, 255, 510, 765, 1023]

    async def bench(ctx):
        ctx.set(dut.pv, 1)
        ctx.set(dut.split, Split.COL)
        for op, golden_op in ((Op.MUL, OP_MUL), (Op.LOW_PAIR, OP_PAIR)):
            ctx.set(dut.op, op)
            for x_lo in xs:
                for x_hi in xs:
                    for b in range(-128, 128, 7):
                        ctx.set(dut.x_lo, x_lo)
                        ctx.set(dut.x_hi, x_hi)
                        ctx.set(dut.b, b)
                        await ctx.delay(1e-9)
                        t0, t1 = pv_terms(golden_op, x_lo, x_hi, b & 0xFF)
                        assert ctx.get(dut.prod) == t0 + t1, (op, x_lo, x_hi, b)
        # pv 0: the int8 operands again
        ctx.set(dut.pv, 0)
        ctx.set(dut.op, Op.MUL)
        ctx.set(dut.x_lo, 1023)
        ctx.set(dut.x_hi, 1023)
        for a0 in (-128, -1, 127):
            for b in (-128, -3, 127):
                ctx.set(dut.a0, a0)
                ctx.set(dut.b, b)
                await ctx.delay(1e-9)
                assert ctx.get(dut.prod) == a0 * b

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.skipif(shutil.which("verilator") is None, reason="verilator not on PATH: make install")
@pytest.mark.parametrize("folded", list(FOLDED))
def test_folded_array_is_lint_clean(tmp_path, folded):
    name = {"pv_pe": "pv_pe_array", "pv_merged": "pv_merged_array"}[folded]
    problems = lint_component(ARRAYS[folded](KaleidoConfig()), name, tmp_path)
    assert not problems, "\n".join(problems)
