"""Host-side driver of the ``tile_engine`` Verilog for the cocotb benches (``sim/engine/tile``) and
the tile report: write Q and K, configure, start, wait for done, read the counters and S.

The configuration the Verilog was generated with comes from ``rtl_out/manifest.json`` (or
``KALEIDO_MANIFEST``); a job the hardware cannot run is rejected by
:func:`kaleido_hw.engine.tile_engine.check_run` before anything is driven.
"""

from __future__ import annotations

import random

import numpy as np
from run_host import PERIOD_NS, RunHost, load_config, mask_names

from kaleido_hw.engine.tile_engine import COUNTER_NAMES, ERROR_BITS, engine_ports


__all__ = ["EngineHost", "counters_as_model", "error_names", "load_config", "PERIOD_NS"]


def counters_as_model(c) -> dict:
    """``golden.array.schedule.TileCounters`` as the RTL's counter names."""
    out = {"cycles": c.cycles, "busy_pe_cycles": c.busy_pe_cycles, "bubbles": c.bubbles,
           "quads": c.quads}
    for p in range(4):
        out[f"issued{p}"] = c.issued[p]
        out[f"skipped{p}"] = c.skipped[p]
    return out


def error_names(mask: int) -> list[str]:
    """Names of the TileEngine ``error`` bits set in ``mask``."""
    return mask_names(mask, ERROR_BITS)


class EngineHost(RunHost):
    """Drives one ``tile_engine`` instance (clock and reset already running)."""

    def __init__(self, dut, config):
        super().__init__(dut, config, COUNTER_NAMES)

    async def run(self, q, k, grid, groups, *, full_bits=5, half_bits=3, reuse=True,
                  max_cycles: int = 2_000_000) -> dict:
        """Write Q and K, run, and return ``{"error": mask, "counters": {...}}``."""
        ports = engine_ports(self.config, grid, groups, full_bits, half_bits, reuse)
        await self.write_operand(0, q)
        await self.write_operand(1, k)
        self.configure(ports)
        return await self.start(max_cycles)

    async def read_scores(self, n: int, *, stall: float = 0.0,
                          rng: random.Random | None = None) -> np.ndarray:
        """Pulse ``read`` and collect the n x n scores under random back-pressure; checks that
        nothing beyond n*n items arrives."""
        return (await self.read_out(n * n, stall=stall, rng=rng)).reshape(n, n)
