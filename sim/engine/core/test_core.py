"""cocotb bench of ``kaleido_core`` (``docs/engine.md``, "Engine core"): the command stream
and the AXI4 memory port of the streaming engine core, against
``golden.engine.program.run_program`` and ``golden.engine.core_model``: heads of S blocks,
their timing, a linear layer (COMPUTE kind 1), errors and reset.

The memory is a ``cocotbext-axi`` ``AxiRam`` with random pauses on every AXI channel (read
and write latency and back-pressure); the commands come from the host library
(``kaleido_hw.engine.host.plan_head``) with random gaps. Checks: the memory after the run
equals the interpreter's byte for byte (so S of the head equals the whole-grid golden S,
which the host library's tests prove of the interpreter), every exact counter equals
``core_counters``, ``cycles = compute + mem_wait``; a malformed command and an AXI error
(SLVERR from the RAM past a given address) end the run with their code at the right command, the rest
dropped, and a clean run follows ``error_clear``; a reset in the middle of a run, then a
clean run.

On a build with the attention path (``core_attention``), ``test_attention_head`` runs whole
attention heads (``kaleido_hw.engine.host_attention``): O in memory equal to the
interpreter's byte for byte and to the whole-grid golden O, the counters to the models; an
AXI error in a V LOAD and a reset in the middle of a query box, each followed by a clean head.

``KALEIDO_CORE_GRID`` (``TxHxW``, default 2x4x6) and ``KALEIDO_CORE_VARIANT`` (default: the
most capable the build runs) choose the head; the head's channel groups are the preset's when
``engine_max_head_dim`` holds them, else 4/6/6 channels of 16. ``make -C sim/engine/core``
runs on ``rtl_out/kaleido_core.v`` (default build: d = 128, 4 arrays of 4 x 4); the pytest
wrapper (``tests/engine/test_core_sim.py``) on small generated builds. ``make bench-head``
runs ``test_timing`` with the 1,024-token hunyuanvideo head (``KALEIDO_CORE_GRID=4x16x16``) on
the default build, an optimised Verilator model (``CORE_FAST=1``). ``KALEIDO_PROGRAM=DIR``
runs the files ``kaleido-hw program`` wrote into DIR (``test_program``: memory, counters and
cycles equal to the files'; ``docs/integration.md``, section 6).
"""

from __future__ import annotations

import json
import logging
import os
import random
from pathlib import Path

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, RisingEdge, Timer
from cocotbext.axi import AxiBus, AxiRam
from run_host import load_config
from simlib import StreamSource, seeds_requested, start_clock_and_reset

from golden import ChannelGroups, make_qkv
from golden.numerics import _as_groups
from golden.engine.core_model import (ATTENTION_COUNTERS, CORE_COUNTERS, BenchMemory,
                                     core_counters, core_cycles)
from golden.engine.program import Memory, ProgramError, run_program
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.host import (plan_head, plan_linear, read_y, whole_grid_y,
                                    write_linear_operands, write_operands)
from kaleido_hw.engine.host_attention import (plan_attention, read_o, whole_grid_o,
                                              write_attention_operands)

CFG = load_config()
AXI_PREFIX = "axi_"          # AxiBus joins prefix and name with "_": axi__araddr
GRID = tuple(int(x) for x in os.environ.get("KALEIDO_CORE_GRID", "2x4x6").split("x"))
#: The clock period of ``simlib.start_clock_and_reset``.
CLOCK_NS = 10
SMALL_GROUPS = ChannelGroups.from_sizes(4, 6, 6)


def _groups():
    preset = _as_groups(CFG.preset)
    return preset if preset.head_dim <= CFG.engine_max_head_dim else SMALL_GROUPS


def _preset_head(grid, seed):
    """The channel groups and the preset's synthetic Q, K, V on ``grid`` (their first
    ``head_dim`` channels on a small build)."""
    groups = _groups()
    d = groups.head_dim
    h = make_qkv(CFG.preset, grid, seed=seed)
    return groups, tuple(x[:, :d].copy() for x in (h.q, h.k, h.v))


def _plan(grid, variant=None, seed=0, banks=None):
    groups, (q, k, _) = _preset_head(grid, seed)
    d = groups.head_dim
    plan = plan_head(CFG, grid, d, groups=groups, banks=banks,
                     variant=variant or os.environ.get("KALEIDO_CORE_VARIANT") or None)
    mem = Memory(plan.memory_size)
    write_operands(mem, q, k, plan.addrs, grid)
    return plan, mem


class FaultyRam(AxiRam):
    """An AxiRam that answers SLVERR for any beat at or past ``fault_from`` (None: never),
    as a bus fabric answers an access past the end of memory (cocotbext-axi answers SLVERR
    when its read or write handler raises)."""

    fault_from = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        read, write = self.read_if._read, self.write_if._write

        async def faulty_read(address, length):
            self._check(address, length)
            return await read(address, length)

        async def faulty_write(address, data):
            self._check(address, len(data))
            return await write(address, data)
        self.read_if._read, self.write_if._write = faulty_read, faulty_write

    def _check(self, address, length):
        if self.fault_from is not None and address + length > self.fault_from:
            raise IndexError(f"access at {address:#x} past {self.fault_from:#x}")


def _ram(dut, size, rng, pause=0.2):
    """The bench memory with random pauses on all five AXI channels."""
    ram = FaultyRam(AxiBus.from_prefix(dut, AXI_PREFIX), dut.clk, dut.rst, size=size)
    # One line per burst at INFO would dominate a long run's time.
    for log in (ram.write_if.log, ram.read_if.log):
        log.setLevel(logging.WARNING)

    def pauses():
        while True:
            yield rng.random() < pause
    # Without pauses no generator: each would wake up on every clock edge.
    for ch in (ram.read_if.ar_channel, ram.read_if.r_channel, ram.write_if.aw_channel,
               ram.write_if.w_channel, ram.write_if.b_channel) if pause else ():
        ch.set_pause_generator(pauses())
    return ram


async def _run(dut, words, *, gap=0.2, rng=None, max_cycles=20_000_000, poll=1):
    """Send the words (random gaps), then wait until the core is idle; returns the cycles
    waited (a multiple of ``poll``: a long run checks for the end only every ``poll`` cycles,
    with one timer instead of one callback per clock edge)."""
    src = StreamSource(dut, "cmd", gap=gap, rng=rng)
    start = cocotb.start_soon(src.send(words))
    cycles, report = 0, 0
    while not (start.done() and not int(dut.busy.value)):
        await (RisingEdge(dut.clk) if poll == 1 else Timer(poll * CLOCK_NS, "ns"))
        cycles += poll
        if cycles >= report + 100_000:
            report = cycles
            dut._log.info(f"cycle {cycles}: {src.sent}/{len(words)} commands sent, "
                          f"{int(dut.cnt__commands.value)} executed, busy "
                          f"{int(dut.busy.value)}, error {int(dut.error.value)}")
        assert cycles < max_cycles, f"no end within {max_cycles} cycles"
    await RisingEdge(dut.clk)
    await ClockCycles(dut.clk, 2)
    return cycles


def _idle_inputs(dut):
    """No command, no error_clear (before reset: X on an input would reach the state)."""
    dut.cmd__valid.value = 0
    dut.cmd__payload.value = 0
    dut.error_clear.value = 0


def _counters(dut):
    names = CORE_COUNTERS + (ATTENTION_COUNTERS if CFG.core_attention else ())
    return {n: int(getattr(dut, f"cnt__{n}").value) for n in names}


async def _clear(dut):
    dut.error_clear.value = 1
    for _ in range(100_000):
        await RisingEdge(dut.clk)
        if not int(dut.error.value):
            break
    dut.error_clear.value = 0
    assert not int(dut.error.value), "the core did not leave its error state"


def _gold(plan, mem, engine=False):
    """The memory the interpreter leaves after the plan, from ``mem``, and its result
    (``engine``: with the engine model's counters)."""
    gold = Memory(plan.memory_size)
    gold.data[:] = mem.data
    return gold, run_program(plan.commands, gold, plan.limits, engine=engine)


async def _run_head(dut, ram, plan, mem, **run_kw):
    """Reset, load the memory, run the plan's commands; check that no error was raised,
    that the memory equals the interpreter's byte for byte, that the exact counters equal
    ``core_counters`` and that ``cycles = compute + mem_wait``. Returns the interpreter's
    result (with the engine model's counters), the core's counters and the cycles until
    idle."""
    _idle_inputs(dut)
    await start_clock_and_reset(dut)
    gold, result = _gold(plan, mem, engine=True)
    ram.write(0, mem.data.tobytes())
    cycles = await _run(dut, [c.encode() for c in plan.commands], **run_kw)
    c = _check_run(dut, ram, 0, gold.data, core_counters(result), "the interpreter's")
    assert c["cycles"] == c["compute"] + c["mem_wait"]
    return result, c, cycles


def _check_run(dut, ram, base, want_memory, want_counters, what):
    """After a run: no error raised, the memory from ``base`` equal to ``want_memory`` (uint8)
    byte for byte and the counters named in ``want_counters`` equal to their values (``what``
    names where both come from). Returns every counter of the core."""
    assert int(dut.error.value) == 0, f"error {int(dut.error.value)} at command " \
                                      f"{int(dut.error_command.value)}"
    got = np.frombuffer(ram.read(base, len(want_memory)), np.uint8)
    bad = np.flatnonzero(got != want_memory)
    assert bad.size == 0, f"{bad.size} bytes differ from {what}, first at {base + bad[0]:#x}"
    c = _counters(dut)
    assert {n: c[n] for n in want_counters} == want_counters, f"RTL {c}, {what} {want_counters}"
    return c


async def _clean_run(dut, ram, words, mem, gold, rng):
    """Load ``mem`` into the RAM, run ``words`` without an error and leave ``gold``."""
    ram.write(0, mem.data.tobytes())
    await _run(dut, words, rng=rng)
    assert int(dut.error.value) == 0
    got = np.frombuffer(ram.read(0, len(gold.data)), np.uint8)
    assert np.array_equal(got, gold.data)


@cocotb.test()
async def test_head(dut):
    """A head through the AXI memory: memory and counters equal to the models."""
    ram = None
    for seed in range(seeds_requested()):
        rng = random.Random(seed)
        plan, mem = _plan(GRID, seed=seed)
        if ram is None:
            # Before the first reset: the AXI models drive their outputs from reset on.
            ram = _ram(dut, plan.memory_size, rng)
        result, c, cycles = await _run_head(dut, ram, plan, mem, rng=rng)
        dut._log.info(f"grid {GRID} box {plan.box} variant {plan.variant}: {len(plan.commands)} "
                      f"commands, {cycles} cycles, compute {c['compute']}, mem_wait "
                      f"{c['mem_wait']}, engine {c['engine_cycles']}")


@cocotb.test()
async def test_timing(dut):
    """A small head with commands back to back and an AxiRam without pauses: ``cycles`` and
    ``mem_wait`` equal the exact model (``core_cycles`` with ``BenchMemory.axi_ram``), which
    holds while every token's request is one AXI burst; for the build's program (loads
    under computes when ``core_banks`` > 1) and for a one-bank program (no prefetch). With
    ``KALEIDO_CORE_GRID`` set (``make bench-head``): that grid's head, the build's program
    only."""
    ram = None
    if "KALEIDO_CORE_GRID" in os.environ:
        grid, bank_counts = GRID, [CFG.core_banks]
    else:
        # Boxes with padding; at least two per side, so that two banks overlap walks and
        # computes (2x3x5 is one box on the default build).
        grid = (2, 3, 5) if _plan((2, 3, 5))[0].n_boxes > 1 else (2, 3, 11)
        bank_counts = sorted({1, CFG.core_banks})
    for banks in bank_counts:
        plan, mem = _plan(grid, banks=banks)
        if plan.groups.head_dim > 8 * CFG.axi_max_burst:
            raise AssertionError(f"the timing check needs head_dim <= 8 * axi_max_burst "
                                 f"({8 * CFG.axi_max_burst}), got {plan.groups.head_dim}")
        if ram is None:
            ram = _ram(dut, plan.memory_size, random.Random(0), pause=0)
        # A long head polls for its end every 256 cycles; the counters are exact regardless.
        poll = 256 if len(plan.commands) > 100 else 1
        result, c, _ = await _run_head(dut, ram, plan, mem, gap=0, poll=poll)
        want = core_cycles(plan.commands, result, BenchMemory.axi_ram(CFG))
        assert {n: c[n] for n in want} == want, f"banks {banks}: RTL {c}, model {want}"
        dut._log.info(f"grid {grid} box {plan.box} variant {plan.variant}, banks {banks}: "
                      f"{len(plan.commands)} commands, memory equal to the interpreter's, "
                      f"counters equal to the model: " + ", ".join(
                          f"{n} {c[n]}" for n in ("cycles", "compute", "mem_wait",
                                                  "engine_cycles", "busy_pe_cycles")))


@cocotb.test()
async def test_linear_layer(dut):
    """Linear layers ``Y = X_eff W`` through the AXI memory (COMPUTE kind 1, the weight rows
    by ``rows`` LOADs; C_out not a multiple of the box): X the preset head's Q on the grid
    with its channel groups (windows of 2 along each group's direction), then a layer of
    two core words and eight channels more (three slices, COMPUTEs with ``acc``, every
    channel along t): memory equal to the interpreter's, Y equal to the whole grid's
    ``golden.linear``, counters equal to the models."""
    rng = random.Random(11)
    h = make_qkv(CFG.preset, GRID, seed=3)
    wide = np.concatenate([h.q, h.k, h.q[:, ::-1]], axis=1)
    layers = []
    for groups in (_groups(), None):
        d = groups.head_dim if groups else 2 * CFG.engine_max_head_dim + 8
        plan = plan_linear(CFG, GRID, d, CFG.engine_max_tokens + 5, groups=groups,
                           variant=os.environ.get("KALEIDO_CORE_VARIANT") or None)
        layers.append((wide[:, :d].copy(), groups, plan))
    # One RAM for both layers (a second one would answer on the same bus).
    ram = _ram(dut, max(p.memory_size for _, _, p in layers), rng)
    for x, groups, plan in layers:
        d = x.shape[1]
        w = np.random.default_rng(11).integers(-128, 128, (d, plan.c_out)).astype(np.int8)
        mem = Memory(plan.memory_size)
        write_linear_operands(mem, x, w, plan.addrs, plan.grid, rows=plan.w_rows,
                              channels=plan.c_padded)
        result, c, cycles = await _run_head(dut, ram, plan, mem, rng=rng)
        mem.data[:] = np.frombuffer(ram.read(0, plan.memory_size), np.uint8)
        y = read_y(mem, plan)
        assert np.array_equal(y, whole_grid_y(x, w, plan.grid, groups, plan.full_bits,
                                              plan.half_bits, plan.variant))
        dut._log.info(f"linear layer on grid {GRID}, C_in {d} ({plan.slices} slices), C_out "
                      f"{plan.c_out}, box {plan.box}, variant {plan.variant}: "
                      f"{len(plan.commands)} commands, {cycles} cycles, compute "
                      f"{c['compute']}, mem_wait {c['mem_wait']}; Y equal to golden.linear")


@cocotb.test()
async def test_errors_and_reset(dut):
    """A malformed command, an AXI error response (a LOAD past the end of memory), a reset in the middle
    of a run: each followed by a clean run."""
    rng = random.Random(7)
    plan, mem = _plan((1, 2, 4))
    ram = _ram(dut, plan.memory_size, rng)
    _idle_inputs(dut)
    await start_clock_and_reset(dut)
    words = [c.encode() for c in plan.commands]
    gold, _ = _gold(plan, mem)

    # 1. malformed: opcode 9 after CONFIG
    await _run(dut, [words[0], 0x9, *words[1:]], rng=rng)
    assert (int(dut.error.value), int(dut.error_command.value)) == (1, 1)
    await _clear(dut)
    await _clean_run(dut, ram, words, mem, gold, rng)

    # 2. the K tensor past the end of memory: an AXI error response on the K LOAD
    await _fault_run(dut, ram, plan, mem, plan.addrs.k + 16, rng)
    await _clean_run(dut, ram, words, mem, gold, rng)

    # 3. reset in the middle of a run, then a clean run
    await _reset_during(dut, words, rng, ClockCycles(dut.clk, 300))
    await _clean_run(dut, ram, words, mem, gold, rng)


async def _fault_run(dut, ram, plan, mem, cut, rng) -> int:
    """Run the plan with the RAM answering SLVERR at and past byte ``cut``: the core stops
    with the interpreter's code at its command (the interpreter: a LOAD past the end of a
    memory of ``cut`` bytes), the rest dropped; then ``error_clear``. Returns the command's
    index in the plan."""
    small = Memory(cut)
    small.data[:] = mem.data[:cut]
    try:
        run_program(plan.commands, small, plan.limits)
        raise AssertionError("the interpreter accepted a LOAD past the end of memory")
    except ProgramError as e:
        code, index = e.code, e.index
    ram.fault_from = cut
    base = int(dut.cnt__commands.value)         # error_command counts from reset
    ram.write(0, mem.data.tobytes())
    await _run(dut, [c.encode() for c in plan.commands], rng=rng)
    assert (int(dut.error.value), int(dut.error_command.value)) == (code, base + index)
    ram.fault_from = None
    await _clear(dut)
    return index


async def _reset_during(dut, words, rng, trigger):
    """Send ``words`` (random gaps) and reset the core once ``trigger`` (an awaitable) has
    fired, in the middle of the run."""
    src = StreamSource(dut, "cmd", gap=0.1, rng=rng)
    task = cocotb.start_soon(src.send(words))
    await trigger
    task.cancel()
    dut.cmd__valid.value = 0
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 2)


def _attention_plan(grid, seed=0, **plan_args):
    """An attention head of the preset's synthetic Q, K, V (``_preset_head``), V along t
    unless given."""
    groups, (q, k, v) = _preset_head(grid, seed)
    plan = plan_attention(CFG, grid, groups.head_dim, groups=groups, **plan_args)
    mem = Memory(plan.memory_size)
    write_attention_operands(mem, q, k, v, plan.addrs, grid)
    return plan, mem, (q, k, v)


@cocotb.test(skip=not CFG.core_attention)
async def test_attention_head(dut):
    """Attention heads as commands through the AXI memory (random pauses, command gaps):
    padded boxes; one head with reuse (V along t, windows of 2) and dense without V reuse,
    then V along y with windows of 3; O equal to the whole grid's golden O, memory to the
    interpreter's, counters to the models. Then an AXI error in a V LOAD (the V tensor past the end of memory) and a reset
    in the middle of a query box, each followed by a clean head."""
    rng = random.Random(5)
    ram = None
    # The same head with reuse (S: the build's variant; V along t) and without (dense S, V
    # as loaded): the whole head's cycles side by side. Then V along y in windows of 3.
    cases = [dict(v_dir=0, v_window=2), dict(v_dir=0, v_reuse=False, variant="dense"),
             dict(v_dir=1, v_window=3, seed=1)]
    for case in cases:
        case = dict(case)
        plan, mem, (q, k, v) = _attention_plan(GRID, seed=case.pop("seed", 0), **case)
        if ram is None:
            ram = _ram(dut, plan.memory_size, rng)
        result, c, cycles = await _run_head(dut, ram, plan, mem, rng=rng)
        mem.data[:] = np.frombuffer(ram.read(0, plan.memory_size), np.uint8)
        p = plan
        ref = whole_grid_o(q, k, v, GRID, p.groups, p.full_bits, p.half_bits, p.variant,
                           p.scale, p.box, p.v_dir, p.v_window, p.v_reuse)
        assert np.array_equal(read_o(mem, plan), ref)
        serial = result.counters["cycles"] + result.counters["pv_cycles"]
        dut._log.info(f"attention head on grid {GRID}, box {plan.box}, variant {plan.variant}, "
                      f"V along {'tyx'[plan.v_dir]} windows of {plan.v_window} reuse "
                      f"{plan.v_reuse}: {len(plan.commands)} commands, {len(result.blocks)} "
                      f"blocks; cnt cycles {c['cycles']}, compute {c['compute']} (S engine "
                      f"{c['engine_cycles']}), mem_wait {c['mem_wait']}; the models' S + "
                      f"P @ V one after the other {serial}; O equal to the whole grid's")

    plan, mem, _ = _attention_plan(GRID)
    words = [c.encode() for c in plan.commands]
    gold, _ = _gold(plan, mem)

    # An AXI error on the first V LOAD (V past the end of memory), then a clean head.
    index = await _fault_run(dut, ram, plan, mem, plan.addrs.v + 16, rng)
    assert plan.commands[index].NAME == "LOAD" and plan.commands[index].side == 2
    await _clean_run(dut, ram, words, mem, gold, rng)

    # A reset once the first query box's first block has run, then a clean head.
    first = next(i for i, c in enumerate(plan.commands) if c.NAME == "COMPUTE")

    async def first_block_ran():
        while int(dut.cnt__commands.value) <= first + 2:
            await RisingEdge(dut.clk)
    await _reset_during(dut, words, rng, first_block_ran())
    await _clean_run(dut, ram, words, mem, gold, rng)


@cocotb.test(skip="KALEIDO_PROGRAM" not in os.environ)
async def test_program(dut):
    """The files ``kaleido-hw program`` wrote into ``KALEIDO_PROGRAM`` (a folder) on this
    build: ``memory_in.bin`` at the program's base in an AxiRam without pauses, the words of
    ``commands.hex`` back to back; the memory then holds ``memory_out.bin`` at the base, the
    counters are ``program.json``'s and so are the cycles when it has them (a program without
    attention blocks). The files must be for this build's configuration."""
    folder = Path(os.environ["KALEIDO_PROGRAM"])
    info = json.loads((folder / "program.json").read_text())
    theirs = KaleidoConfig.from_dict(info["config"]).to_dict()
    ours = CFG.to_dict()
    differ = sorted(k for k in ours if theirs[k] != ours[k])
    assert not differ, (f"{folder} is for another build: "
                        + ", ".join(f"{k} = {theirs[k]!r} (this build: {ours[k]!r})"
                                    for k in differ))
    words = [int(x, 16) for x in (folder / "commands.hex").read_text().split()]
    image_in = (folder / "memory_in.bin").read_bytes()
    image_out = (folder / "memory_out.bin").read_bytes()
    base = info["base"]
    # A sparse memory over the whole address space: any base.
    ram = FaultyRam(AxiBus.from_prefix(dut, AXI_PREFIX), dut.clk, dut.rst,
                    size=1 << CFG.axi_addr_width)
    for log in (ram.write_if.log, ram.read_if.log):
        log.setLevel(logging.WARNING)
    _idle_inputs(dut)
    await start_clock_and_reset(dut)
    ram.write(base, image_in)
    poll = 256 if len(words) > 100 else 1
    cycles = await _run(dut, words, gap=0, poll=poll)
    want = dict(info.get("counters", {}), **info.get("cycles_axi_ram", {}))
    _check_run(dut, ram, base, np.frombuffer(image_out, np.uint8), want,
               "memory_out.bin and program.json")
    dut._log.info(f"{folder}: {len(words)} commands, memory equal to memory_out.bin, "
                  f"{len(want)} counters equal to program.json's; {cycles} cycles until idle")
