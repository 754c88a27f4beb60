"""Host-side driver of the ``linear_engine`` Verilog for the cocotb bench (``sim/engine/linear``):
write X and W, configure, start, wait for done, read the counters and Y.

The configuration the Verilog was generated with comes from ``rtl_out/manifest.json`` (or
``KALEIDO_MANIFEST``; ``sim/engine/run_host.py``, shared by every engine bench); a layer
the hardware cannot run is rejected by :func:`kaleido_hw.engine.linear_engine.check_linear_run`
before anything is driven.
"""

from __future__ import annotations

import random

import numpy as np
from run_host import PERIOD_NS, RunHost, load_config, mask_names

from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.linear_engine import ERROR_BITS, counter_names, linear_ports


__all__ = ["LinearHost", "error_names", "load_config", "PERIOD_NS"]


def error_names(mask: int) -> list[str]:
    """Names of the LinearEngine ``error`` bits set in ``mask``."""
    return mask_names(mask, ERROR_BITS)


class LinearHost(RunHost):
    """Drives one ``linear_engine`` instance (clock and reset already running): X is operand
    0 (N x C_in, one row per token), W operand 1 (C_in x C_out, one row per input channel)."""

    def __init__(self, dut, config: KaleidoConfig):
        super().__init__(dut, config, counter_names(config.engine_arrays), out="y",
                         index="index")

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
        return await super().start(max_cycles)

    async def read_y(self, n: int, c_out: int, *, stall: float = 0.0,
                     rng: random.Random | None = None) -> np.ndarray:
        """Pulse ``read`` and collect the n x c_out outputs under random back-pressure;
        checks that nothing beyond n*c_out items arrives."""
        return (await self.read_out(n * c_out, stall=stall, rng=rng)).reshape(n, c_out)
