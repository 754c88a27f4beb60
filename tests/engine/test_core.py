"""The streaming engine core's controller (``kaleido_hw/engine/core.py``) in the Amaranth
simulator, with a behavioural DMA and memory (``core_harness``): heads of several boxes with
S bit-exact against the whole-grid golden S and every exact counter equal to
``golden.engine.core_model.core_counters``, under random command gaps, memory latency and
back-pressure; ``cycles`` and ``mem_wait`` equal to ``core_cycles`` for the bench's memory,
on one scratchpad bank per side and on two (loads under computes), and through the
interlocks; every error code of ``golden.engine.commands.ERROR_CODES`` raised at the same
command as ``golden.engine.program.run_program`` raises it, also an AXI error in a LOAD
that walks under later commands, the rest of the program dropped, and a clean run after
``error_clear``. The Verilog top with the AxiDma is benched in
``tests/engine/test_core_sim.py``."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from core_harness import (check_clean_run, check_errors_back_to_back, failing_program,
                          run_checked, run_core, run_words)

from golden import ChannelGroups
from golden.engine.commands import (Attention, Compute, Config, Fence, Groups, Load, Store,
                                    Strides, groups_commands)
from golden.engine.core_model import (BenchMemory, core_counters, core_cycles, core_schedule,
                                     load_run_cycles)
from golden.engine.program import CoreLimits, Memory, ProgramError, box_coords, run_program
from golden.numerics import VideoGrid
from golden.window import linear
from kaleido_hw.config import ConfigError, KaleidoConfig
from kaleido_hw.engine.core import CoreController, check_core_config
from kaleido_hw.engine.host import (plan_head, plan_linear, read_s, read_y, whole_grid_s,
                                    whole_grid_y, write_linear_operands, write_operands)
from token_data import smooth_tensors
from token_data import smooth_tokens as _smooth

G16 = ChannelGroups.from_sizes(4, 6, 6)
TINY = KaleidoConfig(rows=2, cols=2, engine_arrays=1, engine_max_tokens=16,
                     engine_max_head_dim=16, engine_dispatcher="none")
#: The same core with one bank per side: loads, computes and stores one after another.
TINY1 = dataclasses.replace(TINY, core_banks=1)


def _setup(cfg, grid, variant, seed=0, groups=G16):
    q, k = smooth_tensors(grid, groups.head_dim, seed, 2)
    plan = plan_head(cfg, grid, groups.head_dim, groups=groups, variant=variant)
    mem = Memory(plan.memory_size)
    write_operands(mem, q, k, plan.addrs, grid)
    return q, k, plan, mem


def _run_checked(cfg, commands, mem: Memory, limits, **kw):
    """:func:`core_harness.run_checked` on a CoreController of ``cfg``."""
    return run_checked(CoreController(cfg), commands, mem, limits, **kw)


@pytest.mark.parametrize("cfg, grid, variant, kw", [
    (TINY, (2, 3, 5), "pe", dict(gap=0.2, stall=0.2, latency=5, seed=1)),
    (dataclasses.replace(TINY, engine_arrays=2, engine_dispatcher="full"), (2, 4, 4), "full",
     dict(gap=0.1, stall=0.3, latency=1, outstanding=2, seed=2)),
    # dense runs in make test in the odd-box case of the cycle test below
    pytest.param(TINY, (1, 3, 7), "dense", dict(seed=3), marks=pytest.mark.full_set),
], ids=["pe-padded", "full-P2", "dense"])
def test_core_head(cfg, grid, variant, kw):
    q, k, plan, mem = _setup(cfg, grid, variant, seed=kw["seed"])
    # The memory the RTL leaves equals the interpreter's, byte for byte; S on real tokens
    # equals the whole grid's.
    result, out, data = _run_checked(cfg, plan.commands, mem, plan.limits, **kw)
    mem.data[:] = data
    assert np.array_equal(read_s(mem, plan), whole_grid_s(q, k, grid, G16, plan.full_bits,
                                                          plan.half_bits, variant))
    want = core_counters(result)
    got = {n: out.counters[n] for n in want}
    assert got == want
    c = out.counters
    assert c["cycles"] == c["compute"] + c["mem_wait"] and c["mem_wait"] > 0


def _linear_program(variant_bits, c_out, seed):
    """A linear layer by hand on TINY's box (2x2x4 = 16 tokens): X on a 2x3x4 grid (two Q
    boxes, the second padded), C_out = ``c_out`` weight rows in blocks of 16 (``rows``
    LOADs, the last block's rows past ``c_out`` zero), the four blocks in serpentine order
    with each next LOAD issued before the COMPUTE it overlaps; the memory, X, W, the
    commands and where block (qi, ki) is stored."""
    grid, box, n, d = (2, 3, 4), (2, 2, 4), 16, G16.head_dim
    x = smooth_tensors(grid, d, seed, 2)[0]
    w = np.random.default_rng(seed).integers(-128, 128, (d, c_out)).astype(np.int8)
    xs = (16, 4 * 16, 12 * 16)
    waddr, yaddr = 24 * 16, 24 * 16 + 2 * n * 16
    mem = Memory(yaddr + 4 * n * n * 4)
    mem.write_tensor(0, x, grid, xs)
    rows = np.zeros((2 * n, d), np.int8)
    rows[:c_out] = w.T
    mem.write(waddr, rows)
    y = {}

    def st(qi, ki):
        y[(qi, ki)] = yaddr + len(y) * n * n * 4
        return Store(y[(qi, ki)])
    cmds = [Config(*box, d, *G16.directions, 5, 3, *variant_bits, *grid),
            *groups_commands(G16.group_of), Strides(0, *xs), Strides(1, *xs),
            Load(0, 0, 0, 0, 0, 0), Load(1, 0, 0, 0, 0, waddr, rows=1),
            Load(1, 1, 0, 0, 0, waddr + n * 16, rows=1), Compute(0, 0, 1), st(0, 0),
            Load(0, 1, 0, 2, 0, 0), Compute(0, 1, 1), st(0, 1),
            Compute(1, 1, 1), st(1, 1), Compute(1, 0, 1), st(1, 0), Fence()]
    return mem, x, w, cmds, y


@pytest.mark.parametrize("cfg, bits, kw", [
    (dataclasses.replace(TINY, engine_arrays=2, engine_dispatcher="full"), (1, 1, 1),
     dict(gap=0.2, stall=0.2, latency=3, outstanding=2, seed=4)),
    (TINY, (1, 0, 0), dict(seed=5)),
], ids=["full-P2-gaps", "pe-exact-cycles"])
def test_core_linear_layer(cfg, bits, kw):
    """COMPUTE kind 1 with ``rows`` LOADs of the weights, loads under computes: the memory
    the RTL leaves equals the interpreter's byte for byte, the blocks hold the whole grid's
    ``golden.linear`` (windows of 2 along each channel's group direction) on real tokens
    and features, every exact counter equals ``core_counters``; without command gaps or
    back-pressure ``cycles`` and ``mem_wait`` equal ``core_cycles`` for the bench memory."""
    mem, x, w, cmds, y = _linear_program(bits, 21, kw["seed"])
    result, out, data = _run_checked(cfg, cmds, mem, CoreLimits.from_config(cfg), **kw)
    want_y = linear(x, w, (2, 3, 4), G16.channel_directions(), 2)
    mem.data[:] = data
    for (qi, ki), at in y.items():
        blk = mem.read(at, 256, np.int32).reshape(16, 16).astype(np.int64)
        coords = box_coords((0, 2 * qi, 0), (2, 2, 4))
        real = (coords < np.asarray((2, 3, 4))).all(axis=1)
        tok = np.ravel_multi_index(coords[real].T, (2, 3, 4))
        feats = np.arange(16 * ki, min(16 * ki + 16, 21))
        assert np.array_equal(blk[np.ix_(real, feats - 16 * ki)], want_y[np.ix_(tok, feats)])
    assert not np.array_equal(want_y, x.astype(np.int64) @ w.astype(np.int64))
    want = core_counters(result)
    assert {n: out.counters[n] for n in want} == want
    if "gap" not in kw:
        cycles = core_cycles(cmds, result, BenchMemory(3, 4))     # run_core's defaults
        assert {n: out.counters[n] for n in cycles} == cycles


@pytest.mark.parametrize("cfg, variant, kw", [
    # gaps and stalls on slices in make regress; test_core_linear_layer has them in make test
    pytest.param(dataclasses.replace(TINY, engine_arrays=2, engine_dispatcher="full"), "full",
                 dict(gap=0.2, stall=0.2, latency=3, outstanding=2, seed=6),
                 id="full-P2-gaps", marks=pytest.mark.full_set),
    pytest.param(TINY1, "pe", dict(seed=7), id="pe-1bank-exact-cycles"),
])
def test_core_linear_channel_slices(cfg, variant, kw):
    """A linear layer of 40 input channels on a core of 16 (``plan_linear``: three slices of
    16, the last zero-padded, COMPUTEs with ``acc`` adding the slices of each block, one STORE
    per block): the memory equals the interpreter's, Y the whole grid's ``golden.linear`` on
    the 40 channels, every exact counter ``core_counters``; without gaps ``core_cycles``."""
    grid, c_in, c_out = (2, 3, 4), 40, 21
    rng = np.random.default_rng(kw["seed"])
    x = _smooth(rng, VideoGrid(*grid).n, c_in)
    w = rng.integers(-128, 128, (c_in, c_out)).astype(np.int8)
    plan = plan_linear(cfg, grid, c_in, c_out, variant=variant)
    assert plan.slices == 3 and any(getattr(c, "acc", 0) for c in plan.commands)
    mem = Memory(plan.memory_size)
    write_linear_operands(mem, x, w, plan.addrs, plan.grid, rows=plan.w_rows,
                          channels=plan.c_padded)
    result, out, data = _run_checked(cfg, plan.commands, mem, plan.limits, **kw)
    mem.data[:] = data
    assert np.array_equal(read_y(mem, plan), whole_grid_y(x, w, grid, None, plan.full_bits,
                                                          plan.half_bits, variant))
    want = core_counters(result)
    assert {n: out.counters[n] for n in want} == want
    if "gap" not in kw:
        cycles = core_cycles(plan.commands, result, BenchMemory(3, 4))
        assert {n: out.counters[n] for n in cycles} == cycles


#: A core whose engine also runs linear blocks with windows of 3 (docs/engine.md).
W3CORE = dataclasses.replace(TINY, engine_max_tokens=32, engine_window3=True)


@pytest.mark.parametrize("grid, box, c_out, variant, kw", [
    pytest.param((3, 2, 3), None, 13, "pe", dict(seed=8), id="pe-exact-cycles"),
    pytest.param((3, 2, 4), (3, 2, 3), 21, "pe",
                 dict(gap=0.2, stall=0.2, latency=3, outstanding=2, seed=9),
                 id="pe-4blocks-gaps", marks=pytest.mark.full_set),
    pytest.param((3, 2, 3), None, 13, "dense", dict(seed=10), id="dense",
                 marks=pytest.mark.full_set),
])
def test_core_linear_window3(grid, box, c_out, variant, kw):
    """COMPUTEs with ``window3`` (``plan_linear(window=3)``) on a core built with
    ``engine_window3``, the three groups reused along x, t and y (windows of 3 complete
    along t and x, cut short along y): Y is the whole grid's ``golden.linear`` with windows
    of 3 (not that of windows of 2), the memory equals the interpreter's, every exact counter
    ``core_counters``; without gaps ``cycles`` and ``mem_wait`` equal ``core_cycles``. In
    ``make regress`` also four blocks (two Q boxes cutting x at a multiple of 3, the second
    padded, two weight blocks) under command gaps and memory back-pressure, and the dense
    variant."""
    rng = np.random.default_rng(kw["seed"])
    x = _smooth(rng, VideoGrid(*grid).n, 16)
    w = rng.integers(-128, 128, (16, c_out)).astype(np.int8)
    plan = plan_linear(W3CORE, grid, 16, c_out, groups=G16, box=box, variant=variant,
                       window=3)
    assert all(c.window3 for c in plan.commands if isinstance(c, Compute))
    mem = Memory(plan.memory_size)
    write_linear_operands(mem, x, w, plan.addrs, plan.grid, rows=plan.w_rows,
                          channels=plan.c_padded)
    result, out, data = _run_checked(W3CORE, plan.commands, mem, plan.limits, **kw)
    mem.data[:] = data
    want = whole_grid_y(x, w, grid, G16, plan.full_bits, plan.half_bits, variant, 3)
    assert np.array_equal(read_y(mem, plan), want)
    if variant != "dense":
        assert not np.array_equal(want, whole_grid_y(x, w, grid, G16, plan.full_bits,
                                                     plan.half_bits, variant, 2))
    counters = core_counters(result)
    assert {n: out.counters[n] for n in counters} == counters
    if "gap" not in kw:
        cycles = core_cycles(plan.commands, result, BenchMemory(3, 4))
        assert {n: out.counters[n] for n in cycles} == cycles


_PADDED = ((2, 3, 5), None, "pe", 5, 4)            # padded boxes
_STARVED = ((2, 4, 4), None, "pe", 12, 2)          # the outstanding limit starves the walk
_ODD_BOX = ((1, 3, 7), (1, 3, 5), "dense", 2, 3)   # odd box: half-empty last beat of a STORE


@pytest.mark.parametrize("cfg, grid, box, variant, latency, outstanding", [
    # the odd box in make test (padded boxes and cycle-exact runs are in the other tests of
    # make test too); every shape on one and two banks in make regress
    pytest.param(TINY, *_PADDED, id="padded-2banks", marks=pytest.mark.full_set),
    pytest.param(TINY1, *_PADDED, id="padded-1bank", marks=pytest.mark.full_set),
    pytest.param(TINY, *_STARVED, id="starved-2banks", marks=pytest.mark.full_set),
    pytest.param(TINY1, *_STARVED, id="starved-1bank", marks=pytest.mark.full_set),
    pytest.param(TINY, *_ODD_BOX, id="odd-box-2banks"),
    pytest.param(TINY1, *_ODD_BOX, id="odd-box-1bank", marks=pytest.mark.full_set),
])
def test_core_cycles_are_exact_for_the_bench_memory(cfg, grid, box, variant, latency,
                                                    outstanding):
    """Commands back to back against a memory of fixed latency, one beat per cycle and an
    outstanding limit: ``cycles`` and ``mem_wait`` equal ``core_cycles`` exactly (and so
    does the bench's own count of the cycles until idle), with loads under computes (two
    banks) and without (one)."""
    q, k = smooth_tensors(grid, G16.head_dim, 0, 2)
    plan = plan_head(cfg, grid, G16.head_dim, groups=G16, variant=variant, box=box,
                     split_pairs=box is not None)
    mem = Memory(plan.memory_size)
    write_operands(mem, q, k, plan.addrs, grid)
    result, out, _ = _run_checked(cfg, plan.commands, mem, plan.limits, latency=latency,
                                  outstanding=outstanding)
    want = core_cycles(plan.commands, result, BenchMemory(latency, outstanding))
    assert {n: out.counters[n] for n in want} == want
    assert out.cycles == want["cycles"] + 1       # the bench also counts the last, idle cycle


@pytest.mark.parametrize("most", [pytest.param(2, marks=pytest.mark.full_set),
                                  pytest.param(4, marks=pytest.mark.full_set)])
def test_banks_same_memory(most):
    """One bank per side (no prefetch: loads, computes and stores one after another), two
    (each LOAD walks while the COMPUTE before it runs) and, in make regress, four (round
    robin over banks 0..3) leave the same memory, the interpreter's, and the same exact
    counters; more banks take fewer cycles, all of them saved on waiting for memory. Both
    cases run in make regress (make test has each bank count in
    test_core_cycles_are_exact_for_the_bench_memory and test_core_head)."""
    runs = {}
    for cfg in (TINY1, TINY, dataclasses.replace(TINY, core_banks=4))[:most // 2 + 1]:
        q, k, plan, mem = _setup(cfg, (2, 3, 5), "pe", seed=4)
        result, out, data = _run_checked(cfg, plan.commands, mem, plan.limits, latency=4)
        assert {n: out.counters[n] for n in core_counters(result)} == core_counters(result)
        assert {n: out.counters[n] for n in ("cycles", "compute", "mem_wait")} \
            == core_cycles(plan.commands, result, BenchMemory(4, 4))
        runs[cfg.core_banks] = out.counters, data
    (one, m1), (two, m2) = runs[1], runs[2]
    assert np.array_equal(m1, m2)
    assert two["compute"] == one["compute"] and two["commands"] == one["commands"]
    assert two["cycles"] < one["cycles"] and two["mem_wait"] < one["mem_wait"]
    if most == 4:
        four, m4 = runs[4]
        assert np.array_equal(m1, m4)
        assert four["compute"] == one["compute"] and four["cycles"] <= two["cycles"]


def _interlock_program():
    """A hand-written two-bank program on 2x2x8 (boxes 2x2x4: Q0, Q1, K0, K1) in which a
    COMPUTE follows the LOAD of a bank it reads (it waits for the walk), and a LOAD
    overwrites the bank the COMPUTE just before it read (it waits for that COMPUTE)."""
    q, k, plan, mem = _setup(TINY, (2, 2, 8), "pe", seed=6)
    assert plan.n_boxes == 2 and plan.limits.banks == 2
    a = plan.addrs

    def ld(side, box, bank):
        return Load(side, bank, *plan.origin(box), a.k if side else a.q)

    prog = list(plan.commands[:4]) + [
        ld(0, 0, 0), ld(1, 0, 0), Compute(0, 0), Store(plan.s_address(0, 0)),
        ld(1, 1, 1), ld(0, 1, 1), Compute(1, 1), ld(1, 0, 1), Store(plan.s_address(1, 1)),
        Compute(1, 1), Store(plan.s_address(1, 0)),
        ld(0, 0, 1), ld(1, 1, 0), Compute(1, 0), Store(plan.s_address(0, 1)), Fence()]
    return q, k, plan, mem, prog


def test_core_interlock():
    """The interlocks keep the program's meaning (the interpreter's memory, S of the whole
    grid) under random gaps and latency, and ``core_cycles`` (whose COMPUTE waits for the
    walk into its bank) stays exact."""
    q, k, plan, mem, prog = _interlock_program()
    gold = Memory(plan.memory_size)
    gold.data[:] = mem.data
    result = run_program(prog, gold, plan.limits, engine=True)
    out, data = run_words(CoreController(TINY), prog, mem, gap=0.2, stall=0.2, latency=6,
                          seed=7)
    assert out.error == 0 and np.array_equal(data, gold.data)
    mem.data[:] = data
    assert np.array_equal(read_s(mem, plan), whole_grid_s(q, k, plan.grid, G16, plan.full_bits,
                                                          plan.half_bits, "pe"))
    sched = core_schedule(prog, result, BenchMemory(3, 4))
    held = [c for c in sched if c.decode > c.arrive]
    assert [c.name for c in held] == ["COMPUTE", "COMPUTE", "STORE", "COMPUTE"]
    mem.data[:] = gold.data
    out, _ = run_words(CoreController(TINY), prog, mem, latency=3, outstanding=4)
    want = core_cycles(prog, result, BenchMemory(3, 4))
    assert {n: out.counters[n] for n in want} == want


# make regress: test_core_queued_load_errors has AXI errors in walking LOADs in make test
@pytest.mark.full_set
@pytest.mark.parametrize("then", ["compute", "malformed"])
def test_core_background_load_error(then):
    """An AXI error in a LOAD that walks while later commands run (the prefetch of the next
    K box under a COMPUTE) names that LOAD, as the interpreter does (the first failing
    command in program order), even when a later command has already failed its decode;
    the load unit drains and the next run is clean."""
    q, k = smooth_tensors((2, 2, 8), G16.head_dim, 8, 2)
    plan = plan_head(TINY, (2, 2, 8), G16.head_dim, groups=G16, variant="pe", box=(1, 2, 8),
                     split_pairs=True)
    mem = Memory(plan.memory_size)
    write_operands(mem, q, k, plan.addrs, plan.grid)
    prog = list(plan.commands)
    i_k = next(i for i, c in enumerate(prog) if isinstance(c, Load) and c.side == 1
               and c.bank == 1)
    assert isinstance(prog[i_k + 1], Compute)     # the walk runs under this COMPUTE
    if then == "malformed":
        prog[i_k + 1] = 0x9
    limit = prog[i_k].address + plan.addrs.t_stride + 64      # K box 1: t = 1, 4 tokens in
    _check_load_fault(prog, list(plan.commands), mem, plan, limit, i_k, stall=0.2, latency=6)


def _check_load_fault(prog, clean, mem, plan, limit, index, **run_kw):
    """``prog`` against a memory that ends at ``limit`` (the RTL: an AXI error from there
    on): the interpreter and the RTL stop with error 12 at ``index``, every word taken;
    then ``clean`` runs without error and leaves the interpreter's memory."""
    small = Memory(limit)
    small.data[:] = mem.data[:limit]
    with pytest.raises(ProgramError) as exc:
        run_program(prog, small, plan.limits)
    assert (exc.value.code, exc.value.index) == (12, index)
    words = [c.encode() if hasattr(c, "encode") else c for c in prog]
    buf = bytearray(mem.data.tobytes())
    bad, good = run_core(CoreController(TINY), words, buf, fault=[(limit, 1 << 40)],
                         then=[[c.encode() for c in clean]], **run_kw)
    assert (bad.error, bad.error_command) == (12, index)
    assert bad.accepted == len(words)
    gold = Memory(plan.memory_size)
    gold.data[:] = mem.data
    run_program(clean, gold, plan.limits)
    assert good.error == 0
    assert np.array_equal(np.frombuffer(bytes(buf), np.uint8), gold.data)


@pytest.mark.parametrize("faulty", ["walking", "queued"])
def test_core_queued_load_errors(faulty):
    """The load unit's queue: the Q and K LOADs of a box, back to back, so K waits in the
    queue while Q walks. An AXI error in Q's walk names Q, and the queued K is dropped; an
    AXI error in the queued K's walk names K even though the command after it (a malformed
    word) has failed its decode meanwhile: the first failing command in program order, as
    the interpreter has it. Then a clean run."""
    base, mem, plan = _tiny_program()
    i_q = next(i for i, c in enumerate(base) if isinstance(c, Load) and c.side == 0)
    i_k = i_q + 1
    assert isinstance(base[i_k], Load) and base[i_k].side == 1
    prog = list(base)
    i_bad = i_q if faulty == "walking" else i_k
    if faulty == "queued":
        prog[i_k + 1] = 0x9                       # malformed, decoded while K waits or walks
    # Q's fault is on its last token, so that Q still walks when K reaches the queue.
    limit = prog[i_bad].address + (64 if faulty == "queued" else 15 * G16.head_dim)
    _check_load_fault(prog, base, mem, plan, limit, i_bad, latency=6)


def test_load_walk_closed_form():
    """A walk the memory never starves (enough requests in flight) takes ``latency + 2``
    cycles beyond one cycle per beat; padding costs one cycle per beat; a one-request limit
    serialises the tokens."""
    for n, bpt, lat in ((16, 2, 3), (64, 16, 8), (5, 1, 0)):
        out = -(-(lat + 2) // bpt) + 1
        assert load_run_cycles((True,) * n, bpt, lat, out) == lat + n * bpt + 2
        assert load_run_cycles((False,) * n, bpt, lat, 1) == n * bpt + 1
        # one request at a time: each token waits for its request's latency
        assert load_run_cycles((True,) * n, bpt, lat, 1) == n * (lat + 1 + bpt) + 1
    with pytest.raises(ValueError, match="BenchMemory.outstanding"):
        BenchMemory(3, 0)


def _tiny_program():
    """A valid one-box program on TINY (grid 2x2x4 = one box of 16 tokens) and its memory."""
    q, k, plan, mem = _setup(TINY, (2, 2, 4), "pe", seed=5)
    assert plan.n_boxes == 1
    return list(plan.commands), mem, plan


def _error_programs():
    base, mem, plan = _tiny_program()
    cfg = base[0]
    i_load = next(i for i, c in enumerate(base) if isinstance(c, Load))
    i_cmp = next(i for i, c in enumerate(base) if isinstance(c, Compute))
    i_st = next(i for i, c in enumerate(base) if isinstance(c, Store))
    ld, st = base[i_load], base[i_st]
    rep = dataclasses.replace
    progs = {
        "malformed-opcode": [cfg, 0x9],
        "malformed-reserved": [cfg, Fence().encode() | 1 << 100],
        "malformed-kind": base[:i_cmp] + [Compute(0, 0, 0).encode() | (3 << 8)],
        "bad_config-box": [rep(cfg, box_t=4, box_h=4, box_w=4)],
        "bad_config-half": [rep(cfg, half_bits=2)],
        "bad_config-group3": [cfg, Groups(0, (0, 3))],
        "bad_config-variant": [rep(cfg, schedule=1)],
        "not_configured-load": [ld],
        "not_configured-strides": [c for c in base[:i_load + 1] if not isinstance(c, Strides)],
        "not_configured-groups": [c for c in base[:i_cmp + 1] if not isinstance(c, Groups)],
        "bad_bank": base[:i_load] + [rep(ld, bank=plan.limits.banks)],
        "bank_empty": [c for c in base[:i_cmp + 1] if not isinstance(c, Load) or c.side == 0],
        "misaligned-load": base[:i_load] + [rep(ld, address=ld.address + 8)],
        "misaligned-stride": [cfg, Strides(0, 24, 1024, 4096)],
        "no_result": base[:i_cmp] + [st],
        "no_result-acc": base[:i_cmp] + [Compute(0, 0, 0, 1)],
        "bad_strides": [cfg, Strides(1, 16, 32, 4096)],
        "bad_origin": base[:i_load] + [rep(ld, origin_w=1)],
        "bad_origin-rows": base[:i_load] + [rep(ld, rows=1, origin_t=1)],
        "result_pending": base[:i_cmp + 1] + [base[i_cmp]],
        "result_pending-acc": base[:i_cmp + 1] + [next(c for c in base if isinstance(c, Groups)),
                                                  Compute(0, 0, 0, 1)],
        "malformed-side": base[:i_load] + [ld.encode() | 3 << 4],
        "malformed-first": base[:i_cmp] + [Compute(0, 0).encode() | 1 << 15],
        "malformed-acc-pv": base[:i_cmp] + [Compute(0, 0, 2).encode() | 1 << 12],
        "unsupported": base[:i_cmp] + [Compute(0, 0, 2)],
        "unsupported-attention": [cfg, Attention(0xB8AA, 13, 2, 1, 1)],
        "unsupported-v-strides": [cfg, Strides(2, 16, 1024, 4096)],
        "unsupported-v-load": base[:i_load] + [rep(ld, side=2)],
        "out_of_range-address": base[:i_load] + [rep(ld, address=1 << 40)],
    }
    return progs, mem, plan, base


def test_core_errors_back_to_back():
    """Every error program of :func:`_error_programs` in one simulation, each after the
    ``error_clear`` of the one before: each stops at the interpreter's command index with
    its code and the rest of its program dropped; the clean program at the end leaves the
    interpreter's memory. (``test_core_errors``, in ``make regress``, runs the clean program
    after every error in a simulation of its own.)"""
    check_errors_back_to_back(CoreController(TINY), _error_programs(), gap=0.1, stall=0.1)


@pytest.mark.full_set
@pytest.mark.parametrize("name", list(_error_programs()[0]))
def test_core_errors(name):
    """Each error at the interpreter's command index; the rest dropped; then a clean run."""
    errors = _error_programs()
    words, code, index = failing_program(errors, name)
    _, mem, _, base = errors
    buf = bytearray(mem.data.tobytes())
    bad, good = run_core(CoreController(TINY), words, buf, then=[[c.encode() for c in base]],
                         gap=0.1, stall=0.1)
    assert (bad.error, bad.error_command) == (code, index)
    assert bad.accepted == len(words)
    check_clean_run(errors, good, buf)


def test_core_bus_error():
    """An AXI error on a LOAD's read ends the run with out_of_range at that LOAD (the
    interpreter: a read past the end of memory), and the next run is clean."""
    base, mem, plan = _tiny_program()
    i_k = next(i for i, c in enumerate(base) if isinstance(c, Load) and c.side == 1)
    limit = base[i_k].address + 64
    small = Memory(limit)
    small.data[:] = mem.data[:limit]
    with pytest.raises(ProgramError) as exc:
        run_program(base, small, plan.limits)
    assert (exc.value.code, exc.value.index) == (12, i_k)
    buf = bytearray(mem.data.tobytes())
    bad, good = run_core(CoreController(TINY), [c.encode() for c in base], buf,
                         fault=[(limit, 1 << 40)], then=[[c.encode() for c in base]],
                         stall=0.2)
    assert (bad.error, bad.error_command) == (12, i_k)
    assert good.error == 0


def test_core_config_errors():
    with pytest.raises(ConfigError, match="engine_max_tokens must be at most 362"):
        check_core_config(KaleidoConfig(engine_max_tokens=400))
    for bad in (0, 5, 2.0):
        with pytest.raises(ConfigError, match=r"core_banks must be (an integer )?in \[1, 4\]"):
            KaleidoConfig(core_banks=bad)


def test_head_traffic_at_paper_scale():
    """One 720p head at the paper's 819.2 GB/s and 1 GHz: storing S in full (this core's
    programs) costs 56 GB and about 69 M cycles, ten times the full variant's compute;
    keeping S on chip leaves Q, K, V in and O out, about 130 k cycles."""
    from golden.engine.core_model import dram_cycles, head_traffic
    from kaleido_hw.reports.engine_report import format_memory, paper_memory
    n, d = 33 * 45 * 80, 128
    s_out, fused = head_traffic(n, d, fused=False), head_traffic(n, d, fused=True)
    assert s_out == {"read": 2 * n * d, "written": 4 * n * n, "total": 2 * n * d + 4 * n * n}
    assert fused["total"] == 3 * n * d + 4 * n * d
    assert dram_cycles(s_out["total"]) == 68_950_407        # ceil(bytes / 819.2)
    assert dram_cycles(819) == 1 and dram_cycles(820) == 2
    assert dram_cycles(1000, gbytes_per_s=1.0, clock_ghz=2.0) == 2000
    m = paper_memory(n, d)
    assert m == {"dram_cycles_s_out": 68_950_407, "dram_cycles_fused": 129_938}
    table = format_memory([{"variant": "full", "cycles": 6_800_000, **m}])
    assert "| full | 6,800,000 | 68,950,407 | 10.14x | 129,938 | 0.0191x |" in table
    with pytest.raises(ValueError, match="head_dim must be an integer >= 1"):
        head_traffic(n, 0, fused=True)
    with pytest.raises(ValueError, match="gbytes_per_s and clock_ghz must be > 0"):
        dram_cycles(1, gbytes_per_s=0)
