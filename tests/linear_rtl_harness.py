"""Amaranth-simulation driver of the LinearEngine for ``tests/engine/test_linear_engine_rtl.py``:
several whole runs back to back on one engine (writes, configuration, start, counters, Y read
under random back-pressure)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from amaranth.sim import Simulator
from host_harness import configure_and_start, member, wait_done, write_operand

from kaleido_hw.engine.linear_engine import LinearEngine, counter_names, linear_ports


#: Longest run the tests wait for.
MAX_CYCLES = 20000


@dataclass
class Job:
    """One layer for the engine: operands, run parameters, and the read-out's ``ready``
    probability. ``ports`` overrides the encoded ``cfg__*`` values (to test rejections)."""
    x: np.ndarray
    w: np.ndarray
    grid: object
    directions: object = 0
    window: int = 2
    full_bits: int = 5
    half_bits: int = 3
    reuse: bool = True
    ready_prob: float = 1.0
    ports: dict = field(default=None)


def run_jobs(config, jobs, seed=0):
    """Run ``jobs`` one after the other on one LinearEngine in simulation; per job
    ``{"error", "counters", "Y"}`` (no ``Y`` for a rejected job)."""
    dut = LinearEngine(config)
    counters = {name: member(dut.cnt, name) for name in counter_names(config.engine_arrays)}
    rng = np.random.default_rng(seed)
    outs = []

    async def bench(ctx):
        for job in jobs:
            c_in, c_out = job.w.shape
            ports = job.ports or linear_ports(config, job.grid, c_in, c_out, job.directions,
                                              job.window, job.full_bits, job.half_bits,
                                              job.reuse)
            n = ports["cfg__t"] * ports["cfg__h"] * ports["cfg__w"]
            out = {}
            outs.append(out)
            await write_operand(ctx, dut, 0, job.x, index="index")
            await write_operand(ctx, dut, 1, job.w, index="index")
            await configure_and_start(ctx, dut, ports)
            await wait_done(ctx, dut, MAX_CYCLES)
            out["error"] = ctx.get(dut.error)
            out["counters"] = {c: ctx.get(sig) for c, sig in counters.items()}
            if out["error"]:
                continue
            ctx.set(dut.read, 1)
            await ctx.tick()
            ctx.set(dut.read, 0)
            y = []
            while len(y) < n * c_out:
                ready = int(rng.random() < job.ready_prob)
                ctx.set(dut.y.ready, ready)
                await ctx.delay(1e-9)
                if ready and ctx.get(dut.y.valid):
                    y.append(ctx.get(dut.y.payload))
                await ctx.tick()
            ctx.set(dut.y.ready, 1)
            for _ in range(3):
                await ctx.delay(1e-9)
                assert not ctx.get(dut.y.valid), "the Y stream went on after its last value"
                await ctx.tick()
            out["Y"] = np.array(y, dtype=np.int64).reshape(n, c_out)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return outs
