"""The engine core's controller in the Amaranth simulator with a behavioural DMA and memory:
commands are offered with random gaps; read requests return their beats after ``latency``
cycles with random gaps (at most ``outstanding`` requests in flight); write requests and
data are accepted with random back-pressure; addresses in ``fault`` ranges answer with an
AXI error code (2 SLVERR) instead of data (in the first program only). The cocotb bench of the Verilog top
(``sim/engine/core``) uses the real AxiDma and cocotbext-axi instead.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import pytest
from amaranth.hdl import Value
from amaranth.sim import Simulator

from golden.engine.commands import ERROR_CODES
from golden.engine.program import Memory, ProgramError, run_program



@dataclass
class CoreRun:
    cycles: int = 0
    error: int = 0
    error_command: int = 0
    engine_error: int = 0
    counters: dict = field(default_factory=dict)
    accepted: int = 0                         # commands accepted


def run_core(dut, words, memory: bytearray, *, latency: int = 3, outstanding: int = 4,
             gap: float = 0.0, stall: float = 0.0, seed: int = 0, fault=(),
             then=None, max_cycles: int = 2_000_000):
    """Run ``words`` (128-bit command ints) on a CoreController ``dut`` against ``memory``
    (updated in place by stores). Ends when every command is accepted and the core is idle
    (or in its error state). ``then``: a list of further programs, each run after
    ``error_clear`` (pulsed until the core leaves its error state) in the same simulation;
    the result is then a tuple of :class:`CoreRun`, one per program."""
    rng = random.Random(seed)
    runs = []
    dw = 8
    p = {n: Value.cast(getattr(dut, n).payload) for n in ("cmd", "rd_data", "wr_data")}
    p["rd_req"], p["wr_req"] = dut.rd_req.payload, dut.wr_req.payload

    def faulty(addr, nbytes):
        return not runs and any(lo < addr + nbytes and addr < hi for lo, hi in fault)

    state = {"dma_error": 0, "cycle": 0}

    async def program(ctx, words):
        out = CoreRun()
        reads = deque()                       # [addr, beats left, ready cycle, error]
        writes = deque()                      # [addr, beats left, error]
        k, cycle = 0, state["cycle"]
        start = cycle
        dma_error = state["dma_error"]
        while cycle < max_cycles:
            ctx.set(dut.cmd.valid, k < len(words) and not (gap and rng.random() < gap))
            if k < len(words):
                ctx.set(p["cmd"], words[k])
            ctx.set(dut.rd_req.ready, len(reads) < outstanding and not (stall and rng.random() < stall))
            head = reads[0] if reads else None
            rd_valid = bool(head and head[2] <= cycle and not head[3]
                            and not (gap and rng.random() < gap))
            ctx.set(dut.rd_data.valid, rd_valid)
            if rd_valid:
                addr = head[0]
                ctx.set(p["rd_data"], int.from_bytes(memory[addr:addr + dw], "little")
                        | (int(head[1] == 1) << 64))
            ctx.set(dut.wr_req.ready, not (stall and rng.random() < stall))
            ctx.set(dut.wr_data.ready, bool(writes) and not (stall and rng.random() < stall))
            ctx.set(dut.dma_error, dma_error)
            ctx.set(dut.dma_idle, not reads and not writes)
            (_, _, cv, cr, qv, qr, qp, dv, dr, wv, wr_, wp, bv, br, bp, busy, err,
             clear) = await ctx.tick().sample(
                dut.cmd.valid, dut.cmd.ready, dut.rd_req.valid, dut.rd_req.ready, p["rd_req"],
                dut.rd_data.valid, dut.rd_data.ready, dut.wr_req.valid, dut.wr_req.ready,
                p["wr_req"], dut.wr_data.valid, dut.wr_data.ready, p["wr_data"], dut.busy,
                dut.error, dut.dma_error_clear)
            cycle += 1
            if clear:
                dma_error = 0
            if cv and cr:
                k += 1
            if qv and qr:
                addr, beats = qp.addr, qp.beats
                bad = faulty(addr, beats * dw)
                reads.append([addr, beats, cycle + latency, bad])
            if reads and reads[0][3] and reads[0][2] <= cycle:
                # An erroring burst returns no data to the consumer: the DMA drops it.
                reads.popleft()
                dma_error = 2
            if dv and dr:
                h = reads[0]
                h[0] += dw
                h[1] -= 1
                if h[1] == 0:
                    reads.popleft()
            if wv and wr_:
                writes.append([wp.addr, wp.beats, faulty(wp.addr, wp.beats * dw)])
            if bv and br:
                h = writes[0]
                if not h[2]:
                    memory[h[0]:h[0] + dw] = int(bp).to_bytes(dw, "little")
                h[0] += dw
                h[1] -= 1
                if h[1] == 0:
                    writes.popleft()
                    if h[2]:
                        dma_error = 2
            if k == len(words) and not busy and not reads and not writes and not cv:
                break
        else:
            raise AssertionError(f"timeout after {max_cycles} cycles: {k}/{len(words)} "
                                 f"commands accepted")
        out.cycles, out.accepted = cycle - start, k
        out.error = ctx.get(dut.error)
        out.error_command = ctx.get(dut.error_command)
        out.engine_error = ctx.get(dut.engine_error)
        out.counters = {n: ctx.get(getattr(dut.cnt, n))
                        for n in dut.signature.members["cnt"].signature.members}
        state["dma_error"], state["cycle"] = dma_error, cycle
        runs.append(out)

    async def bench(ctx):
        await program(ctx, words)
        for prog in then or ():
            for _ in range(10_000):           # the core drains, then leaves its error state
                if not ctx.get(dut.error):
                    break
                ctx.set(dut.error_clear, 1)
                ctx.set(dut.dma_idle, 1)
                _, _, clear = await ctx.tick().sample(dut.dma_error_clear)
                if clear:
                    state["dma_error"] = 0
            ctx.set(dut.error_clear, 0)
            assert not ctx.get(dut.error), "the core did not leave its error state"
            await program(ctx, prog)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return runs[0] if then is None else tuple(runs)


def failing_program(errors, name):
    """(command words, code, index): error program ``name`` of ``errors`` (``(programs by
    name, memory, plan, clean program)``; a name starts with its error's name) followed by
    the clean program (whose commands the core must drop), and where the interpreter stops
    it."""
    progs, _, plan, base = errors
    prog = progs[name] + base          # commands after the error are dropped
    with pytest.raises(ProgramError) as exc:
        run_program(prog, Memory(plan.memory_size), plan.limits)
    code, index = exc.value.code, exc.value.index
    assert ERROR_CODES[code][0] == name.split("-")[0]
    return [c.encode() if hasattr(c, "encode") else c for c in prog], code, index


def check_clean_run(errors, good, buf):
    """The clean program after the errors left the interpreter's memory."""
    _, mem, plan, base = errors
    gold = Memory(plan.memory_size)
    gold.data[:] = mem.data
    run_program(base, gold, plan.limits)
    assert good.error == 0
    assert np.array_equal(np.frombuffer(bytes(buf), np.uint8), gold.data)


def check_errors_back_to_back(dut, errors, **run_kw):
    """Every error program of ``errors`` (as for :func:`failing_program`) in one simulation
    of ``dut``, each after the ``error_clear`` of the one before, then the clean program:
    each stops at the interpreter's command index (counted from reset) with its code, the
    rest of it dropped, and the clean program leaves the interpreter's memory."""
    progs, mem, _, base = errors
    failing = [failing_program(errors, name) for name in progs]
    buf = bytearray(mem.data.tobytes())
    runs = run_core(dut, failing[0][0], buf,
                    then=[w for w, _, _ in failing[1:]] + [[c.encode() for c in base]],
                    **run_kw)
    executed = 0                       # error_command counts commands from reset
    for name, (words, code, index), bad in zip(progs, failing, runs):
        assert (name, bad.error, bad.error_command) == (name, code, executed + index)
        assert bad.accepted == len(words)
        executed += index + 1          # the failing command is executed, the rest dropped
        assert bad.counters["commands"] == executed
    check_clean_run(errors, runs[-1], buf)


def run_words(dut, commands, mem: Memory, **run_kw):
    """Run ``commands`` (command dataclasses or words) on ``dut`` from a copy of ``mem``;
    returns the :class:`CoreRun` and the memory the core leaves (uint8)."""
    words = [c.encode() if hasattr(c, "encode") else c for c in commands]
    buf = bytearray(mem.data.tobytes())
    out = run_core(dut, words, buf, **run_kw)
    return out, np.frombuffer(bytes(buf), np.uint8).copy()


def run_checked(dut, commands, mem: Memory, limits, **run_kw):
    """Run ``commands`` on the interpreter (with the engine model) and on ``dut`` from the
    same ``mem``; the RTL must accept them all without an error and leave the interpreter's
    memory byte for byte. Returns the interpreter's result, the RTL's outcome and memory."""
    gold = Memory(mem.size)
    gold.data[:] = mem.data
    result = run_program(commands, gold, limits, engine=True)
    out, data = run_words(dut, commands, mem, **run_kw)
    assert out.error == 0 and out.accepted == len(commands)
    assert np.array_equal(data, gold.data)
    return result, out, data
