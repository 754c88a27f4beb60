"""Host-side driver of the ``linear_engine`` Verilog for the cocotb bench (``sim/linear_engine``):
write X and W, configure, start, wait for done, read the counters and Y.

The configuration the Verilog was generated with comes from ``rtl_out/manifest.json`` (or
``KALEIDO_MANIFEST``), as for the TileEngine's host (``sim/engine/engine_host.py``); a layer
the hardware cannot run is rejected by :func:`kaleido_hw.linear_engine.check_linear_run`
before anything is driven.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np
from cocotb.triggers import ClockCycles, RisingEdge, with_timeout

from kaleido_hw.config import KaleidoConfig
from kaleido_hw.linear_engine import ERROR_BITS, counter_names, linear_ports, operand_writes
from simlib import StreamSink, to_signed

REPO = Path(__file__).resolve().parents[2]
PERIOD_NS = 10


def load_config() -> KaleidoConfig:
    """The KaleidoConfig the Verilog under test was generated with."""
    path = Path(os.environ.get("KALEIDO_MANIFEST", REPO / "rtl_out" / "manifest.json"))
    if path.exists():
        return KaleidoConfig.from_dict(json.loads(path.read_text())["config"])
    return KaleidoConfig()


def error_names(mask: int) -> list[str]:
    """Names of the ``error`` bits set in ``mask`` (``ERROR_BITS`` order)."""
    return [name for b, (name, _) in enumerate(ERROR_BITS) if mask >> b & 1]


class LinearHost:
    """Drives one ``linear_engine`` instance (clock and reset already running)."""

    def __init__(self, dut, config: KaleidoConfig):
        self.dut = dut
        self.config = config
        for name in ("wr__en", "start", "read", "y__ready"):
            getattr(dut, name).value = 0

    async def write_operand(self, sel: int, values):
        """Host writes of X (``sel`` 0, N x C_in) or W (``sel`` 1, C_in x C_out)."""
        dut = self.dut
        dut.wr__sel.value = sel
        for index, lane, value, strobe in operand_writes(np.asarray(values)):
            dut.wr__en.value = 1
            dut.wr__index.value = index
            dut.wr__lane.value = lane
            dut.wr__data.value = value
            dut.wr__strobe.value = strobe
            await RisingEdge(dut.clk)
        dut.wr__en.value = 0

    def configure(self, ports: dict):
        """Drive the ``cfg__*`` ports."""
        for name, value in ports.items():
            getattr(self.dut, name).value = value

    async def run(self, x, w, grid, directions=0, window=2, *, full_bits=5, half_bits=3,
                  reuse=True, max_cycles: int = 200_000) -> dict:
        """Write X and W, run one layer, and return ``{"error": mask, "counters": {...}}``."""
        ports = linear_ports(self.config, grid, x.shape[1], w.shape[1], directions, window,
                             full_bits, half_bits, reuse)
        await self.write_operand(0, x)
        await self.write_operand(1, w)
        self.configure(ports)
        return await self.start(max_cycles)

    async def start(self, max_cycles: int = 200_000) -> dict:
        """Pulse ``start`` with the ports as driven; wait for ``done``; read the counters."""
        dut = self.dut
        dut.start.value = 1
        await RisingEdge(dut.clk)
        dut.start.value = 0
        await RisingEdge(dut.clk)        # busy or done is visible from here
        if not int(dut.done.value):
            await with_timeout(RisingEdge(dut.done), max_cycles * PERIOD_NS, "ns")
        await ClockCycles(dut.clk, 1)
        raw = {name: getattr(dut, f"cnt__{name}").value
               for name in counter_names(self.config.engine_arrays)}
        unknown = [f"{name}={value}" for name, value in raw.items() if not value.is_resolvable]
        assert not unknown, f"counters with X/Z bits after done: {', '.join(unknown)}"
        return {"error": int(dut.error.value), "busy": int(dut.busy.value),
                "counters": {name: int(value) for name, value in raw.items()}}

    async def read_y(self, n: int, c_out: int, *, stall: float = 0.0,
                     rng: random.Random | None = None) -> np.ndarray:
        """Pulse ``read`` and collect the n x c_out outputs under random back-pressure;
        checks that nothing beyond n*c_out items arrives."""
        dut = self.dut
        total = n * c_out
        sink = StreamSink(dut, "y", stall=stall, rng=rng or random.Random(0))
        task = sink.start()
        dut.read.value = 1
        await RisingEdge(dut.clk)
        dut.read.value = 0
        for _ in range(total * (2 + int(20 * stall)) + 100):
            if len(sink.items) >= total:
                break
            await RisingEdge(dut.clk)
        await ClockCycles(dut.clk, 8)    # anything extra would be a duplicate
        task.cancel()
        dut.y__ready.value = 0
        assert len(sink.items) == total, f"read-out gave {len(sink.items)} values for {total}"
        return np.array([to_signed(v, 32) for v in sink.items], np.int64).reshape(n, c_out)
