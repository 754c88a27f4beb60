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


class _StreamPair:
    """One cycle at a time: offer ``inputs`` on ``i_port`` (holding each until accepted,
    a random gap before each with probability ``gap``) and take ``o_port``'s items (``ready``
    dropped with probability ``stall``, unless forced high). ``packed``: the inputs are ints
    put on the payload as one value, whatever its layout."""

    def __init__(self, i_port, o_port, inputs, rng: random.Random, gap: float, stall: float,
                 packed: bool = False):
        self.i_port, self.o_port, self.inputs = i_port, o_port, inputs
        self.i_payload = Value.cast(i_port.payload) if packed else i_port.payload
        self.o_payload = Value.cast(o_port.payload)
        self.rng, self.gap, self.stall = rng, gap, stall
        self.k, self.offering = 0, False

    def _drive(self, ctx, ready_high: bool) -> bool:
        """Set this cycle's valid, payload and ready; True when a new input is offered."""
        new_offer = False
        if (not self.offering and self.k < len(self.inputs)
                and not (self.gap and self.rng.random() < self.gap)):
            self.offering = new_offer = True
            ctx.set(self.i_payload, self.inputs[self.k])
        ctx.set(self.i_port.valid, self.offering)
        ctx.set(self.o_port.ready,
                1 if ready_high or not (self.stall and self.rng.random() < self.stall) else 0)
        return new_offer

    async def cycle(self, ctx, ready_high: bool = False) -> tuple[bool, bool, bool, int]:
        """One clock edge: (a new input offered, an input accepted, an output taken, its
        payload)."""
        new_offer = self._drive(ctx, ready_high)
        _, _, iv, ir, ov, orr, pl = await ctx.tick().sample(
            self.i_port.valid, self.i_port.ready, self.o_port.valid, self.o_port.ready,
            self.o_payload)
        accepted = bool(iv and ir)
        if accepted:
            self.k += 1
            self.offering = False
        return new_offer, accepted, bool(ov and orr), pl


def _simulate(dut, bench) -> None:
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


def run_stream(dut, inputs, n_out: int, *, gap: float = 0.0, stall: float = 0.0, seed: int = 0,
               settle: int = 16, max_cycles: int = 100_000, ports: tuple[str, str] = ("i", "o"),
               cfg: dict | None = None) -> StreamRun:
    """Feed ``inputs`` (packed ints) into the input stream (``dut.i``, or ``ports[0]``),
    collect ``n_out`` items from the output stream (``dut.o``, or ``ports[1]``), then run
    ``settle`` more cycles (with ready high) to catch any extra output. ``cfg``: values of
    ``dut.cfg`` members, set before the first cycle."""
    run = StreamRun()
    i_port, o_port = getattr(dut, ports[0]), getattr(dut, ports[1])
    pair = _StreamPair(i_port, o_port, inputs, random.Random(seed), gap, stall, packed=True)

    async def bench(ctx):
        for name, value in (cfg or {}).items():
            ctx.set(getattr(dut.cfg, name), value)
        cycle, extra = 0, 0
        while cycle < max_cycles:
            done = len(run.out_items) >= n_out
            offered, accepted, taken, pl = await pair.cycle(ctx, ready_high=done)
            if offered:
                run.offer_cycles.append(cycle)
            if accepted:
                run.in_cycles.append(cycle)
            if taken:
                run.out_items.append(pl)
                run.out_cycles.append(cycle)
            cycle += 1
            if done:
                extra += 1
                if extra > settle:
                    return
        raise AssertionError(f"timeout after {max_cycles} cycles: {pair.k}/{len(inputs)} inputs "
                             f"accepted, {len(run.out_items)}/{n_out} outputs")

    _simulate(dut, bench)
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
    results = []

    async def bench(ctx):
        for cfg, inputs in runs:
            for name, value in cfg.items():
                ctx.set(getattr(dut.cfg, name), value)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            pair = _StreamPair(i_port, o_port, inputs, rng, gap, stall)
            outs, cycles = [], 0
            while not ctx.get(dut.done):
                _, _, taken, pl = await pair.cycle(ctx)
                if taken:
                    outs.append(pl)
                cycles += 1
                if cycles >= max_cycles:
                    raise AssertionError(f"no done after {cycles} cycles ({pair.k} inputs in)")
            ctx.set(i_port.valid, 0)
            results.append((outs, ctx.get(dut.error), cycles, pair.k))

    _simulate(dut, bench)
    return results


def pack(layout, **fields: int) -> int:
    """A ``data.StructLayout`` value packed from its ``fields`` (ints; missing ones 0)."""
    out = 0
    for name, value in fields.items():
        f = layout[name]
        out |= (value & ((1 << f.width) - 1)) << f.offset
    return out


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
