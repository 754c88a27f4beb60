"""The PE array with linear window-3 quads (``kaleido_hw.array.array.Window3PEArray``) in the
Amaranth simulator:

* window-3 quads driven pass by pass as ``golden.array.window3`` plans them (rows: anchor,
  follower 2, follower 1; columns: one weight row each; every pass at least R steps; no
  pass 3): every drained register equals its window member's output of ``golden.linear``
  (window 3), on an odd grid with edge windows of one and two tokens and padding rows and
  columns;
* attention steps (``w3`` 0, random qc2): cycle for cycle the ``PEArray``'s drains and busy
  count;
* its Verilog lint-clean (``verilator --lint-only -Wall``).
"""

from __future__ import annotations

import random
import shutil

import numpy as np
import pytest
from amaranth.sim import Simulator

from golden.array.window3 import PASSES3, ROW_MEMBER
from golden.engine.linear import linear_plans
from golden.window import linear
from kaleido_hw.array.array import PEArray, Window3PEArray
from kaleido_hw.array.layouts import ABSENT
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.dispatch.layouts import Sel
from kaleido_hw.array.pv_tile_cell import PvPEArray, Window3PvPEArray
from kaleido_hw.dispatch.merged_array import MergedArray, Window3MergedArray
from kaleido_hw.dispatch.pv_merged_cell import PvMergedArray, Window3PvMergedArray
from kaleido_hw.flow.lint import lint_component


def _run(dut, steps, tags, tail=12):
    """One step per cycle (dicts of ``mode``, ``rows``, ``cols``), then ``tail`` idle ones;
    returns per cycle ``(drain records (j, row, data, tag), busy_count)``."""
    R, C = dut.rows, dut.cols
    names = {name for name, _ in dut.row[0].shape()}
    # a MergedArray's row carries the second follower's code in the slot lane's qc1
    alias = {"qc2": "qc1"} if "qc2" not in names else {}
    idle = {"mode": {"pass_idx": 0, "first": 0, "issue": 0},
            "rows": [{"a": 0, "qc": ABSENT, "valid": 0, "qc2": ABSENT, "w3": 0}] * R,
            "cols": [{"b": 0, "kc": ABSENT, "valid": 0}] * C}
    trace = []

    async def bench(ctx):
        for n, step in enumerate(steps + [idle] * tail):
            ctx.set(dut.tag, tags[n] if n < len(tags) else 0)
            for i in range(R):
                for name, value in step["rows"][i].items():
                    name = alias.get(name, name)
                    if name in names:
                        ctx.set(getattr(dut.row[i], name), value)
                for name, value in step["mode"].items():
                    ctx.set(getattr(dut.row[i].mode, name), value)
            for j in range(C):
                for name, value in step["cols"][j].items():
                    ctx.set(getattr(dut.col[j], name), value)
            await ctx.tick()
            trace.append((tuple((j, ctx.get(dut.drain[j].row), ctx.get(dut.drain[j].data),
                                 ctx.get(dut.drain[j].tag))
                                for j in range(C) if ctx.get(dut.drain[j].valid)),
                          ctx.get(dut.busy_count)))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return trace


def _window3_steps(plan, w, R, C):
    """The steps of every quad (row block of R units x column block of C weight rows) of one
    direction group, and per step its tag: ``(quad, pass) + 1`` on a pass's first step. The
    last step is a closing first step (it drains the last quad's follower-1 tile)."""
    U, n = plan.members.shape[0], plan.channels.size
    c_out = w.shape[1]
    steps, tags, quads = [], [], []
    for r0 in range(0, U, R):
        for j0 in range(0, c_out, C):
            q = len(quads)
            quads.append((r0, j0))
            for p in range(PASSES3):
                for s in range(max(n, R)):
                    c = min(s, n - 1)
                    rows = []
                    for i in range(R):
                        u = r0 + i
                        real = u < U
                        rows.append({
                            "a": int(plan.values[u, ROW_MEMBER[p], c]) if real else 0,
                            "qc": int(plan.c1[u, c]) if real else ABSENT,
                            "qc2": int(plan.c2[u, c]) if real else ABSENT,
                            "valid": int(real), "w3": 1})
                    cols = [{"b": int(w[plan.channels[c], j0 + j]) if j0 + j < c_out else 0,
                             "kc": ABSENT, "valid": int(j0 + j < c_out)} for j in range(C)]
                    steps.append({"mode": {"pass_idx": p, "first": int(s == 0),
                                           "issue": int(s < n)}, "rows": rows, "cols": cols})
                    tags.append(4 * q + p + 1 if s == 0 else 0)
    closing = {"mode": {"pass_idx": 0, "first": 1, "issue": 0},
               "rows": [{"a": 0, "qc": ABSENT, "qc2": ABSENT, "valid": 0, "w3": 1}] * R,
               "cols": [{"b": 0, "kc": ABSENT, "valid": 0}] * C}
    steps.append(closing)
    tags.append(4 * len(quads) + 1)
    return steps, tags, quads


# the arrays with the P @ V mode (their decoders are the TileCell's and the MergedCell's) in
# make regress
_PV = pytest.mark.full_set


@pytest.mark.parametrize("array", [Window3PEArray, Window3MergedArray,
                                   pytest.param(Window3PvPEArray, marks=_PV),
                                   pytest.param(Window3PvMergedArray, marks=_PV)])
@pytest.mark.parametrize("config, grid", [
    (KaleidoConfig(rows=3, cols=2, acc_width=21), (7, 2, 1)),
    (KaleidoConfig(), (5, 1, 3)),
], ids=["3x2", "4x4"])
def test_window3_quads_compute_the_window_rule(config, grid, array):
    rng = np.random.default_rng(config.rows)
    n_tok, channels, c_out = int(np.prod(grid)), 6, 5
    base = rng.integers(-100, 100, (1, channels))
    jump = rng.integers(-128, 128, (n_tok, channels)) * (rng.random((n_tok, channels)) < 0.3)
    x = np.clip(base + jump + rng.integers(-4, 5, (n_tok, channels)), -128, 127).astype(np.int8)
    w = rng.integers(-128, 128, (channels, c_out)).astype(np.int8)
    want = linear(x, w, grid, 0, 3)
    (plan,) = linear_plans(x, grid, 0, 3)
    assert {0, 1, 2} <= set(np.unique(plan.codes).tolist())
    R, C = config.rows, config.cols
    steps, tags, quads = _window3_steps(plan, w, R, C)
    trace = _run(array(config), steps, tags)
    # The tile a first step drains is the previous pass's: pass 0 drains follower 1 (the
    # quad before's pass 2), pass 1 the anchor, pass 2 follower 2.
    drained_member = {0: 1, 1: 0, 2: 2}
    got = {}
    for records, _ in trace:
        for j, i, value, tag in records:
            q, p = divmod(tag - 1, 4)
            if p == 0:
                q -= 1
            if q < 0:
                continue
            r0, j0 = quads[q]
            got[(r0 + i, drained_member[p], j0 + j)] = value
    checked = 0
    for (u, member, f), value in got.items():
        token = plan.members[u, member] if u < plan.members.shape[0] else -1
        if token >= 0 and f < c_out:
            assert value == want[token, f], (u, member, f)
            checked += 1
    assert checked == n_tok * c_out


@pytest.mark.parametrize("array, plain", [(Window3PEArray, PEArray),
                                          (Window3MergedArray, MergedArray),
                                          pytest.param(Window3PvPEArray, PvPEArray, marks=_PV),
                                          pytest.param(Window3PvMergedArray, PvMergedArray,
                                                       marks=_PV)])
def test_attention_steps_are_the_pe_arrays(array, plain):
    """``w3`` 0: the attention decode whatever ``qc2`` says, cycle for cycle the PEArray (the
    MergedArray, with matcher slots in pass 3)."""
    config = KaleidoConfig(rows=3, cols=2, acc_width=21)
    rng = random.Random(3)
    steps, tags = [], []
    for _ in range(300):
        p = rng.randrange(4)
        slot = int(p == 3 and rng.random() < 0.5)
        steps.append({
            "mode": {"pass_idx": p, "first": int(rng.random() < 0.15),
                     "issue": int(rng.random() < 0.85)},
            "rows": [{"a": rng.randrange(-128, 128), "qc": rng.randrange(4),
                      "valid": int(rng.random() < 0.9), "qc2": rng.randrange(4), "w3": 0,
                      "a1": rng.randrange(-128, 128), "slot": slot}
                     for _ in range(config.rows)],
            "cols": [{"b": rng.randrange(-128, 128), "kc": rng.randrange(4),
                      "valid": int(rng.random() < 0.9),
                      **({"kc1": rng.randrange(4), "sel": Sel(rng.randrange(6))}
                         if array in (Window3MergedArray, Window3PvMergedArray) else {})}
                     for _ in range(config.cols)]})
        tags.append(rng.randrange(256))
    got = _run(array(config), steps, tags)
    assert sum(len(d) for d, _ in got) > 100
    assert got == _run(plain(config), steps, tags)


@pytest.mark.skipif(shutil.which("verilator") is None, reason="verilator not on PATH: make install")
def test_lint_clean(tmp_path):
    """The default 4 x 4 Window3PEArray under ``verilator --lint-only -Wall``."""
    problems = lint_component(Window3PEArray(KaleidoConfig()), "window3_pe_array", tmp_path)
    assert not problems, "\n".join(problems)
