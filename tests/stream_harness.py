"""Run a one-input, one-output stream component in the Amaranth simulator, cycle by cycle.

The source holds ``valid`` (and the payload) until accepted and inserts random gaps before
items; the sink drops ``ready`` at random. Handshakes are sampled at each rising edge, so the
returned cycle numbers follow the golden model's convention (cycle c ends with edge c).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from amaranth.hdl import Value
from amaranth.sim import Simulator


@dataclass
class StreamRun:
    in_cycles: list[int] = field(default_factory=list)     # edge of each input handshake
    offer_cycles: list[int] = field(default_factory=list)  # first cycle each input was valid
    out_items: list[int] = field(default_factory=list)
    out_cycles: list[int] = field(default_factory=list)


def run_stream(dut, inputs, n_out: int, *, gap: float = 0.0, stall: float = 0.0, seed: int = 0,
               settle: int = 16, max_cycles: int = 100_000, ports: tuple[str, str] = ("i", "o")
               ) -> StreamRun:
    """Feed ``inputs`` (packed ints) into the input stream (``dut.i``, or ``ports[0]``),
    collect ``n_out`` items from the output stream (``dut.o``, or ``ports[1]``), then run
    ``settle`` more cycles (with ready high) to catch any extra output."""
    rng = random.Random(seed)
    run = StreamRun()
    i_port, o_port = getattr(dut, ports[0]), getattr(dut, ports[1])
    i_payload, o_payload = Value.cast(i_port.payload), Value.cast(o_port.payload)

    async def bench(ctx):
        cycle, k, offering, extra = 0, 0, False, 0
        while cycle < max_cycles:
            if not offering and k < len(inputs) and not (gap and rng.random() < gap):
                offering = True
                run.offer_cycles.append(cycle)
                ctx.set(i_payload, inputs[k])
            ctx.set(i_port.valid, offering)
            done = len(run.out_items) >= n_out
            ctx.set(o_port.ready, 1 if done or not (stall and rng.random() < stall) else 0)
            _, _, iv, ir, ov, orr, pl = await ctx.tick().sample(
                i_port.valid, i_port.ready, o_port.valid, o_port.ready, o_payload)
            if iv and ir:
                run.in_cycles.append(cycle)
                k += 1
                offering = False
            if ov and orr:
                run.out_items.append(pl)
                run.out_cycles.append(cycle)
            cycle += 1
            if done:
                extra += 1
                if extra > settle:
                    return
        raise AssertionError(f"timeout after {max_cycles} cycles: {k}/{len(inputs)} inputs "
                             f"accepted, {len(run.out_items)}/{n_out} outputs")

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return run


def run_stream_runs(dut, runs, *, gap: float = 0.0, stall: float = 0.0, seed: int = 0,
                    max_cycles: int = 200_000, ports: tuple[str, str] = ("i", "o")) -> list:
    """Runs of a stream component with ``cfg``, ``start``, ``done`` and ``error`` ports, back
    to back: each run is ``(cfg, inputs)`` with ``cfg`` a dict of ``dut.cfg`` members and
    ``inputs`` payloads (ints or dicts). Sets ``cfg``, pulses ``start``, feeds the inputs
    (random gaps) and takes outputs (random back-pressure) until ``done``. Returns per run
    ``(outputs as ints, error, cycles from start to done, inputs accepted)``."""
    rng = random.Random(seed)
    i_port, o_port = getattr(dut, ports[0]), getattr(dut, ports[1])
    o_payload = Value.cast(o_port.payload)
    results = []

    async def bench(ctx):
        for cfg, inputs in runs:
            for name, value in cfg.items():
                ctx.set(getattr(dut.cfg, name), value)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            outs, k, offering, cycles = [], 0, False, 0
            while not ctx.get(dut.done):
                if not offering and k < len(inputs) and not (gap and rng.random() < gap):
                    offering = True
                    ctx.set(i_port.payload, inputs[k])
                ctx.set(i_port.valid, offering)
                ctx.set(o_port.ready, int(not (stall and rng.random() < stall)))
                _, _, iv, ir, ov, orr, pl = await ctx.tick().sample(
                    i_port.valid, i_port.ready, o_port.valid, o_port.ready, o_payload)
                if iv and ir:
                    k += 1
                    offering = False
                if ov and orr:
                    outs.append(pl)
                cycles += 1
                if cycles >= max_cycles:
                    raise AssertionError(f"no done after {cycles} cycles ({k} inputs in)")
            ctx.set(i_port.valid, 0)
            results.append((outs, ctx.get(dut.error), cycles, k))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return results


def unpack(value: int, layout, *fields: str) -> tuple:
    """The ``fields`` of a packed ``value`` of a ``data.StructLayout``, as ints."""
    return tuple((value >> layout[f].offset) & ((1 << layout[f].width) - 1) for f in fields)


async def read_until_last(ctx, port, rng, ready_prob: float) -> list:
    """Take a result stream whose payload has ``data`` and ``last`` (random back-pressure:
    ``ready`` high with probability ``ready_prob``) up to and including the value with
    ``last``; then check for three cycles, ``ready`` high, that nothing more comes."""
    vals = []
    while True:
        ready = int(rng.random() < ready_prob)
        ctx.set(port.ready, ready)
        await ctx.delay(1e-9)
        if ready and ctx.get(port.valid):
            pay = ctx.get(port.payload)
            vals.append(pay.data)
            if pay.last:
                await ctx.tick()
                break
        await ctx.tick()
    ctx.set(port.ready, 1)
    for _ in range(3):
        await ctx.delay(1e-9)
        assert not ctx.get(port.valid), "the stream went on after its last value"
        await ctx.tick()
    ctx.set(port.ready, 0)
    return vals
