"""The engine core with the attention path (``core_attention``) in the Amaranth simulator,
with the behavioural DMA and memory of ``core_harness``: attention heads planned by
``kaleido_hw.engine.host_attention`` run as commands, O in memory byte for byte the
interpreter's (``golden.engine.program`` with ``CoreLimits.attention``) and equal to the
whole-grid golden O, every exact counter (S's and P @ V's work) equal to
``golden.engine.core_model.core_counters``, under random command gaps, memory latency and
back-pressure, on one scratchpad bank per side and on two (the next key box's K and V
loading while a block runs); the attention errors raised at the interpreter's command; a
clean head after an error in the middle of a query box."""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest
from core_harness import check_errors_back_to_back, failing_program, run_checked

from golden import ChannelGroups
from golden.engine.commands import Attention, Compute, Load, Store
from golden.engine.block_timing import BlockDatapath
from golden.engine.core_model import ATTENTION_COUNTERS, BenchMemory, core_counters, core_cycles
from golden.engine.program import CoreLimits, Memory
from kaleido_hw.config import ConfigError, KaleidoConfig
from kaleido_hw.engine.core import CoreController, check_core_config
from kaleido_hw.engine.core_top import KaleidoCore
from kaleido_hw.engine.host_attention import (plan_attention, read_o, whole_grid_o,
                                              write_attention_operands)
from kaleido_hw.engine.host import plan_linear, read_y, whole_grid_y, write_linear_operands
from kaleido_hw.flow.lint import lint_component
from token_data import smooth_tensors

G16 = ChannelGroups.from_sizes(4, 6, 6)
#: Two arrays of 2 x 2 (4 lanes: a P @ V beat), boxes of 16 tokens, 16 channels; V as
#: words of 2 channels (four to a memory beat).
ATT = KaleidoConfig(rows=2, cols=2, engine_arrays=2, engine_max_tokens=16,
                    engine_max_head_dim=16, engine_dispatcher="none", vector_lanes=4,
                    vector_max_row=16, core_attention=True)
#: One array of 2 x 4 (words of four channels), the full dispatcher, one bank per side.
ATT1 = dataclasses.replace(ATT, rows=2, cols=4, engine_arrays=1, engine_dispatcher="full",
                           core_banks=1)


def _setup(cfg, grid, seed=0, **plan_args):
    q, k, v = smooth_tensors(grid, G16.head_dim, seed, 3)
    plan = plan_attention(cfg, grid, G16.head_dim, groups=G16, **plan_args)
    mem = Memory(plan.memory_size)
    write_attention_operands(mem, q, k, v, plan.addrs, grid)
    return (q, k, v), plan, mem


@pytest.mark.parametrize("cfg, grid, plan_args, kw", [
    # make test runs a clean head after the error programs (test_core_attention_errors_
    # back_to_back) and the cocotb bench's heads (counters, O): these in make regress.
    pytest.param(ATT, (2, 3, 5), dict(variant="pe", v_dir=2),
                 dict(gap=0.2, stall=0.3, latency=5, seed=1), marks=pytest.mark.full_set),
    pytest.param(ATT1, (3, 2, 4), dict(variant="full", v_dir=0, v_window=3),
                 dict(gap=0.1, stall=0.2, latency=2, outstanding=2, seed=2),
                 marks=pytest.mark.full_set),
    pytest.param(ATT, (1, 4, 6), dict(variant="dense", v_reuse=False), dict(seed=3),
                 marks=pytest.mark.full_set),
    pytest.param(ATT.replace(engine_pe="reuse-pv"), (2, 3, 5), dict(variant="pe", v_dir=1),
                 dict(gap=0.1, stall=0.2, latency=3, seed=4), marks=pytest.mark.full_set),
], ids=["pe-x-padded", "full-t3-one-bank", "dense-no-v-reuse", "shared-arrays"])
def test_core_attention_head(cfg, grid, plan_args, kw):
    (q, k, v), plan, mem = _setup(cfg, grid, seed=kw["seed"], **plan_args)
    assert plan.limits.attention and plan.limits == dataclasses.replace(
        CoreLimits.from_config(cfg), variants=plan.limits.variants)
    dut = CoreController(cfg)
    # engine_pe "reuse-pv": one set of arrays, the engine's, runs S and P @ V.
    assert len(dut.arrays) == (cfg.engine_arrays if cfg.engine_pe == "reuse-pv" else 0)
    assert plan.n_q > 1 and plan.n_k > 1
    # The memory the core leaves is the interpreter's byte for byte; O is the whole grid's.
    result, out, data = run_checked(dut, plan.commands, mem, plan.limits, **kw)
    mem.data[:] = data
    p = plan
    ref = whole_grid_o(q, k, v, grid, G16, p.full_bits, p.half_bits, p.variant, p.scale,
                       p.box, p.v_dir, p.v_window, p.v_reuse)
    assert np.array_equal(read_o(mem, plan), ref)
    want = core_counters(result)
    assert set(ATTENTION_COUNTERS) <= set(want) and "compute" not in want
    assert {n: out.counters[n] for n in want} == want
    c = out.counters
    assert c["cycles"] == c["compute"] + c["mem_wait"] and c["compute"] > c["engine_cycles"]


@pytest.mark.parametrize("cfg, grid, plan_args", [
    # One bank per side: V LOADs wait for a running block's P @ V on the bank, K and V of
    # the next key box load after the block's S; window 3 along t.
    (ATT1, (3, 2, 4), dict(variant="full", v_dir=0, v_window=3)),
    # One box of 15 tokens: rows of 15 scores (a last beat of 3 lanes), an odd row count
    # (the engine's last row pair a single row).
    (ATT, (1, 3, 5), dict(variant="pe", v_dir=2, box=(1, 3, 5))),
    pytest.param(ATT1, (1, 3, 6), dict(variant="full", v_dir=1, v_window=3, box=(1, 3, 2)),
                 marks=pytest.mark.full_set),
    pytest.param(ATT, (1, 5, 4), dict(variant="pe", v_dir=0, box=(1, 5, 2)),
                 marks=pytest.mark.full_set),
    pytest.param(ATT, (2, 3, 5), dict(variant="pe", v_dir=2), marks=pytest.mark.full_set),
    pytest.param(ATT, (1, 4, 6), dict(variant="dense", v_reuse=False),
                 marks=pytest.mark.full_set),
    pytest.param(ATT.replace(engine_pe="reuse-pv"), (2, 3, 5), dict(variant="pe", v_dir=1),
                 marks=pytest.mark.full_set),
], ids=["full-t3-one-bank", "one-box-15", "one-bank-box-6", "box-10", "pe-x-padded",
        "dense-no-v-reuse", "shared-arrays"])
def test_core_attention_cycles(cfg, grid, plan_args):
    """Commands back to back against ``BenchMemory`` (no gaps, no stalls): ``cycles``,
    ``compute`` and ``mem_wait`` equal ``core_cycles`` with the block datapath's model
    (``golden.engine.block_timing``), the exact counters ``core_counters``. These builds'
    softmax takes rows of 16 keys at 4 lanes, so it is the bottleneck of the S read-out and
    the model's back-pressure is what is checked."""
    _, plan, mem = _setup(cfg, grid, seed=5, **plan_args)
    result, out, _ = run_checked(CoreController(cfg), plan.commands, mem, plan.limits)
    want = {**core_counters(result),
            **core_cycles(plan.commands, result, BenchMemory(), BlockDatapath.from_config(cfg))}
    assert {n: out.counters[n] for n in want} == want
    with pytest.raises(ValueError, match="needs the datapath"):
        core_cycles(plan.commands, result, BenchMemory())


def _error_programs():
    """Attention programs that fail, each from the clean head's preamble (CONFIG, GROUPS,
    ATTENTION, STRIDES, the first LOADs), and the clean head (two query boxes of two key
    boxes) that runs after them."""
    cfg = ATT
    (_, _, _), plan, mem = _setup(cfg, (2, 2, 8), seed=7, variant="pe", v_dir=2)
    base = list(plan.commands)
    assert plan.n_q == 2 and plan.n_k == 2
    i_cmp = next(i for i, c in enumerate(base) if isinstance(c, Compute))
    pre, first = base[:i_cmp], base[i_cmp]
    assert first.first and not first.last
    conf = base[0]
    att = next(c for c in base if isinstance(c, Attention))
    i_st = next(i for i, c in enumerate(base) if isinstance(c, Store))
    store = base[i_st]
    v_load = next(c for c in pre if isinstance(c, Load) and c.side == 2)
    rep = dataclasses.replace
    only = rep(first, last=1)                       # a query box of one key block
    progs = {
        # First: no CONFIG has run since reset (error_clear keeps the configuration).
        "not_configured-attention": [att],
        "bad_config-mult": [conf, rep(att, scale_mult=(1 << 15) - 1)],
        "bad_config-shift0": [conf, rep(att, scale_shift=0)],
        "bad_config-shift48": [conf, rep(att, scale_shift=48)],
        "bad_config-v_dir": [conf, rep(att, v_dir=3)],
        "not_configured-compute": [c for c in pre if not isinstance(c, Attention)] + [first],
        "bank_empty-v": [c for c in pre if not (isinstance(c, Load) and c.side == 2)]
        + [first],
        "bad_bank-v": pre + [rep(first, v_bank=cfg.core_banks)],
        "no_result-not-first": pre + [rep(first, first=0)],
        "result_pending-first-open": pre + [first, first],
        "result_pending-config-open": pre + [first, conf],
        "result_pending-attention-open": pre + [first, att],
        "result_pending-kind0-open": pre + [first, Compute(0, 0, 0)],
        "no_result-store-open": pre + [first, store],
        "no_result-acc-onto-o": pre + [only, Compute(0, 0, 0, 1)],
        "result_pending-o-unstored": pre + [only, Compute(0, 0, 0)],
        "bad_origin-rows-v": pre + [rep(v_load, rows=1)],
        # An error in the middle of a query box (its first block ran, its O half made).
        "malformed-mid-box": pre + [first, 0x9],
    }
    return progs, mem, plan, base


#: One program of each error code for ``make test``: the cheap decode errors, and of the
#: errors after a block has run, an unstored O and a malformed command in the middle of a
#: query box (the block datapath's state left open). ``make regress`` runs all of them.
QUICK_ERRORS = ("not_configured-attention", "bad_config-v_dir", "bank_empty-v", "bad_bank-v",
                "no_result-not-first", "result_pending-o-unstored", "bad_origin-rows-v",
                "malformed-mid-box")


@pytest.mark.parametrize("which", ["quick", pytest.param("all", marks=pytest.mark.full_set)])
def test_core_attention_errors_back_to_back(which):
    """Attention error programs in one simulation, each after the ``error_clear`` of the one
    before, at the interpreter's command index with its code (the block datapath's state of
    a box left open dropped); then the clean head leaves the interpreter's memory: O
    bit-exact after errors in the middle of a query box. ``quick``: one program per error
    code (:data:`QUICK_ERRORS`); ``all``: every one."""
    progs, *rest = _error_programs()
    if which == "quick":
        codes = {name: failing_program((progs, *rest), name)[1] for name in progs}
        assert sorted(codes[name] for name in QUICK_ERRORS) == sorted(set(codes.values()))
        progs = {name: progs[name] for name in QUICK_ERRORS}
    check_errors_back_to_back(CoreController(ATT), (progs, *rest), gap=0.1, stall=0.1)


def test_core_attention_config_errors():
    """What the attention path needs of the build, named before anything is generated."""
    for bad, match in (
            (dict(vector_lanes=8, vector_max_row=16), "vector_lanes = engine_arrays \\* cols"),
            (dict(vector_max_row=8), "vector_max_row >= engine_max_tokens"),
            (dict(rows=2, cols=3, engine_arrays=1, vector_lanes=3, vector_max_row=18),
             "cols in \\[1, 2, 4, 8\\]"),
            (dict(vector_score_bits=18), "vector_score_bits > 19")):
        with pytest.raises(ConfigError, match=match):
            check_core_config(dataclasses.replace(ATT, **bad))
    with pytest.raises(ConfigError, match="core_attention must be true or false"):
        KaleidoConfig(core_attention=1)


@pytest.mark.skipif(shutil.which("verilator") is None, reason="verilator not on PATH: make install")
def test_lint_clean(tmp_path):
    """The core top with the attention path under ``verilator --lint-only -Wall``."""
    problems = lint_component(KaleidoCore(ATT), "kaleido_core", tmp_path)
    assert not problems, "\n".join(problems)


@pytest.mark.full_set
def test_linear_window3_on_shared_arrays():
    """A linear layer with windows of 3 on a core with the attention path whose engine and
    block datapath share one set of arrays with the P @ V mode (``engine_pe = "reuse-pv"``,
    ``engine_window3``: Window3PvMergedArrays): Y the whole grid's ``golden.linear`` with
    windows of 3, the memory the interpreter's, every counter and the cycles the model's."""
    cfg = dataclasses.replace(ATT, engine_max_tokens=32, vector_max_row=32,
                              engine_dispatcher="full", engine_pe="reuse-pv",
                              engine_window3=True)
    grid = (3, 2, 3)
    rng = np.random.default_rng(4)
    x = smooth_tensors(grid, 16, 4, 1)[0]
    w = rng.integers(-128, 128, (16, 13)).astype(np.int8)
    plan = plan_linear(cfg, grid, 16, 13, groups=G16, window=3)
    mem = Memory(plan.memory_size)
    write_linear_operands(mem, x, w, plan.addrs, plan.grid, rows=plan.w_rows,
                          channels=plan.c_padded)
    result, out, data = run_checked(CoreController(cfg), plan.commands, mem, plan.limits)
    mem.data[:] = data
    assert np.array_equal(read_y(mem, plan),
                          whole_grid_y(x, w, grid, G16, plan.full_bits, plan.half_bits, "pe", 3))
    counters = core_counters(result)
    assert {n: out.counters[n] for n in counters} == counters
    cycles = core_cycles(plan.commands, result, BenchMemory(3, 4),
                         BlockDatapath.from_config(cfg))
    assert {n: out.counters[n] for n in cycles} == cycles
