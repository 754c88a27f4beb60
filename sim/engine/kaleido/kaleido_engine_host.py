"""Host-side driver of the ``kaleido_engine`` Verilog for the cocotb bench
(``sim/engine/kaleido``): write Q and K, configure a variant, start, wait for done, read the
engine and per-array counters and S (under random back-pressure).

The configuration the Verilog was generated with comes from ``rtl_out/manifest.json`` (or
``KALEIDO_MANIFEST``); a job the hardware cannot run is rejected by
:func:`kaleido_hw.engine.kaleido_engine.check_engine_run` before anything is driven.
"""

from __future__ import annotations

import cocotb
from cocotb.triggers import RisingEdge
from run_host import PERIOD_NS, RunHost, load_config, mask_names

from golden.engine.trace import OrderTrace, SlotTrace, decode_block, decode_sel
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.kaleido_engine import (ERROR_BITS, counter_names, engine_ports,
                                              model_counters)


__all__ = ["KaleidoEngineHost", "DispatchMonitor", "counter_names", "model_counters",
           "error_names", "load_config", "PERIOD_NS"]


class KaleidoEngineHost(RunHost):
    """Drives one ``kaleido_engine`` instance (clock and reset already running)."""

    def __init__(self, dut, config: KaleidoConfig):
        super().__init__(dut, config, counter_names(config))

    async def run(self, q, k, grid, groups, *, variant="pe", full_bits=5, half_bits=3,
                  max_cycles: int = 2_000_000) -> dict:
        """Write Q and K, run, and return ``{"error": mask, "busy": b, "counters": {...}}``."""
        ports = engine_ports(self.config, grid, groups, full_bits, half_bits, variant)
        await self.write_operand(0, q)
        await self.write_operand(1, k)
        self.configure(ports)
        return await self.start(max_cycles)



def error_names(mask: int) -> list[str]:
    """Names of the KaleidoEngine ``error`` bits set in ``mask``."""
    return mask_names(mask, ERROR_BITS)


class DispatchMonitor:
    """Records the dispatcher's probe wires (``probe_*`` in the ``q_order`` (and with
    ``sched_sides = "qk"`` ``k_order``) OrderUnits and each ``seq<a>.slots`` SlotUnit, read through the hierarchy at every
    rising clock edge: the values before the edge) into ``orders`` (side -> OrderTrace) and
    ``slots`` (array -> SlotTrace) for :func:`golden.engine.trace.check_trace`."""

    def __init__(self, dut, config: KaleidoConfig, *, orders: bool, slots: bool):
        self.dut, self.config = dut, config
        self.orders = ({side: OrderTrace() for side in config.ordered_sides} if orders
                       else {})
        self.slots = {a: SlotTrace() for a in range(config.engine_arrays)} if slots else {}
        self._ou = {side: getattr(dut, f"{side}_order") for side in self.orders}
        self._su = {a: getattr(dut, f"seq{a}").slots for a in self.slots}
        self._task = None

    def start(self):
        """Start recording (call before ``start`` is pulsed)."""
        self._task = cocotb.start_soon(self._run())
        return self

    def stop(self):
        """Stop recording."""
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self):
        C, W = self.config.cols, self.config.sched_pattern_width
        while True:
            await RisingEdge(self.dut.clk)
            for side, ou in self._ou.items():
                tr = self.orders[side]
                if int(ou.probe_abort.value):
                    tr.abort(bool(int(ou.probe_abort_replace.value)))
                if int(ou.probe_in_fire.value):
                    tr.unit_in(int(ou.probe_in_unit.value), bool(int(ou.probe_in_last.value)))
                fire, done = int(ou.probe_out_fire.value), int(ou.probe_out_done.value)
                if fire or done:
                    tr.unit_out(int(ou.probe_out_unit.value) if fire else None, bool(done))
            for a, su in self._su.items():
                tr = self.slots[a]
                if int(su.probe_blk_fire.value):
                    tr.block(decode_block(int(su.probe_blk_codes.value), C, W))
                if int(su.probe_slot_fire.value):
                    tr.slot(int(su.probe_slot_a.value), int(su.probe_slot_b.value),
                            bool(int(su.probe_slot_merged.value)),
                            decode_sel(int(su.probe_slot_sel.value), C),
                            bool(int(su.probe_slot_last.value)))
