"""Shared cocotb helpers: the configuration under test, clock and reset, signed reads, and
valid/ready stream drivers with random gaps and random back-pressure (nothing may be lost or
duplicated)."""

from __future__ import annotations

import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge


def seeds_requested(default: int = 1) -> int:
    """How many random seeds a bench should run (``make regress SEEDS=N`` sets KALEIDO_SEEDS)."""
    return int(os.environ.get("KALEIDO_SEEDS", default))


def to_signed(value, width: int) -> int:
    v = int(value)
    return v - (1 << width) if v & (1 << (width - 1)) else v


def bench_config():
    """The ``KaleidoConfig`` of the Verilog under test: from the manifest ``KALEIDO_MANIFEST``
    names (a variant), else the default (what ``rtl_out/`` and the benches' on-demand
    generation use)."""
    import json
    from pathlib import Path

    from kaleido_hw.config import KaleidoConfig

    path = os.environ.get("KALEIDO_MANIFEST")
    if path:
        return KaleidoConfig.from_dict(json.loads(Path(path).read_text())["config"])
    return KaleidoConfig()


async def idle_and_reset(dut, inputs, clock: bool) -> None:
    """Set the ``inputs`` (port names) to 0, then reset; with ``clock`` start the clock too
    (a test's first reset), else hold ``rst`` for two edges on the running clock."""
    for name in inputs:
        getattr(dut, name).value = 0
    if clock:
        await start_clock_and_reset(dut)
        return
    dut.rst.value = 1
    await RisingEdge(dut.clk)
    await RisingEdge(dut.clk)
    dut.rst.value = 0
    await RisingEdge(dut.clk)


async def start_clock_and_reset(dut, cycles: int = 2):
    """10 ns clock on ``dut.clk``; ``dut.rst`` high for ``cycles`` rising edges."""
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    for _ in range(cycles):
        await RisingEdge(dut.clk)
    dut.rst.value = 0
    await RisingEdge(dut.clk)


class StreamSource:
    """Drives an Amaranth ``stream`` interface (``<prefix>__valid/__ready/__payload``).

    ``gap`` is the probability of holding ``valid`` low before each item.
    """

    def __init__(self, dut, prefix: str, *, gap: float = 0.0, rng: random.Random | None = None):
        self.clk = dut.clk
        self.valid = getattr(dut, f"{prefix}__valid")
        self.ready = getattr(dut, f"{prefix}__ready")
        self.payload = getattr(dut, f"{prefix}__payload")
        self.gap = gap
        self.rng = rng or random.Random()
        self.sent = 0
        self.valid.value = 0

    async def send(self, items):
        for item in items:
            while self.gap and self.rng.random() < self.gap:
                self.valid.value = 0
                await RisingEdge(self.clk)
            self.valid.value = 1
            self.payload.value = int(item)
            while True:
                await RisingEdge(self.clk)
                if int(self.ready.value):
                    break
            self.sent += 1
        self.valid.value = 0


class StreamSink:
    """Accepts items from a stream with random back-pressure and records each exactly once.

    ``stall`` is the probability that ``ready`` is low in a cycle.
    """

    def __init__(self, dut, prefix: str, *, stall: float = 0.0, rng: random.Random | None = None):
        self.clk = dut.clk
        self.valid = getattr(dut, f"{prefix}__valid")
        self.ready = getattr(dut, f"{prefix}__ready")
        self.payload = getattr(dut, f"{prefix}__payload")
        self.stall = stall
        self.rng = rng or random.Random()
        self.items: list[int] = []
        self.cycles_seen: list[int] = []
        self.ready.value = 0
        self._cycle = 0

    async def run(self):
        while True:
            self.ready.value = 0 if (self.stall and self.rng.random() < self.stall) else 1
            await RisingEdge(self.clk)
            self._cycle += 1
            # Read right at the edge: the handshake values the DUT sampled on this edge.
            if int(self.valid.value) and int(self.ready.value):
                self.items.append(int(self.payload.value))
                self.cycles_seen.append(self._cycle)

    def start(self):
        return cocotb.start_soon(self.run())


async def start_and_wait_done(dut, max_cycles: int, what: str) -> None:
    """Pulse ``start`` for one cycle, then wait for ``done`` (a hang fails the test after
    ``max_cycles`` cycles, naming ``what``)."""
    dut.start.value = 1
    await RisingEdge(dut.clk)
    dut.start.value = 0
    for _ in range(max_cycles):
        await RisingEdge(dut.clk)
        if int(dut.done.value):
            return
    raise AssertionError(f"{what}: no done within {max_cycles} cycles")
