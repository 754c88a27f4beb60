"""Host-side driver of the ``plain_engine`` Verilog (``sim/engine/plain``): the shared
:class:`run_host.RunHost` with the KaleidoEngine's counter names, the dense run, and the
cycle model's counters for comparison.

The Verilog is generated from the manifest's configuration through
:func:`kaleido_hw.engine.kaleido_engine.plain_config` (``engine_pe = "plain"``,
``engine_dispatcher = "none"``), so :func:`load_plain_config` applies it too.
"""

from __future__ import annotations

from run_host import RunHost, load_config, mask_names

from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.kaleido_engine import (ERROR_BITS, counter_names, engine_ports,
                                              model_counters, plain_config)


__all__ = ["PlainEngineHost", "counter_names", "model_counters", "error_names",
           "load_plain_config"]


def load_plain_config() -> KaleidoConfig:
    """The configuration the ``plain_engine`` under test was built from (the manifest's,
    made plain)."""
    return plain_config(load_config())


def error_names(mask: int) -> list[str]:
    """Names of the ``error`` bits set in ``mask``."""
    return mask_names(mask, ERROR_BITS)


class PlainEngineHost(RunHost):
    """Drives one ``plain_engine`` instance (clock and reset already running)."""

    def __init__(self, dut, config: KaleidoConfig):
        super().__init__(dut, config, counter_names(config))

    async def run(self, q, k, grid, groups, *, max_cycles: int = 2_000_000) -> dict:
        """Write Q and K, run dense, and return ``{"error", "busy", "counters"}``."""
        ports = engine_ports(self.config, grid, groups, variant="dense")
        await self.write_operand(0, q)
        await self.write_operand(1, k)
        self.configure(ports)
        return await self.start(max_cycles)

