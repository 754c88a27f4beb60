"""cocotb harness of the PE benches (``sim/pe/reuse``, ``sim/pe/baseline``): drives one cycle's
inputs, lets the clock edge happen, and compares every output and register with the golden
cycle model (``golden.pe.model``).

Timing: inputs change on the falling edge; after the rising edge the bench waits for
ReadOnly and reads the settled registered outputs, which must equal the model's state
after the same edge. ``rst`` is driven like any other input (synchronous).
"""

from __future__ import annotations

import os

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge
from simlib import to_signed

from golden.pe.model import (BaselineCtrl, BaselineInputs, BaselinePEModel, PECtrl, PEInputs,
                             ReusePEModel)


def bench_seed(offset: int = 0) -> int:
    """The cocotb random seed (``COCOTB_RANDOM_SEED``) plus ``offset``."""
    return int(os.environ.get("COCOTB_RANDOM_SEED", "1")) + offset


class PEHarness:
    """Lock-step DUT/model runner for ``kaleido_pe`` (``baseline=False``) or ``baseline_pe``.

    ``acc_width`` is read from the DUT's ``r0`` port, so the bench follows the generated
    configuration.
    """

    def __init__(self, dut, baseline: bool = False):
        self.dut = dut
        self.baseline = baseline
        self.acc_width = len(dut.r0)
        self.model = (BaselinePEModel if baseline else ReusePEModel)(self.acc_width)
        names = (["row__a0", "row__ctrl", "col__b"] if baseline else
                 ["row__a0", "row__a1", "row__ctrl", "col__b"])
        self.inputs = {n: getattr(dut, n) for n in names + ["drain_in__valid", "drain_in__data"]}
        self.widths = {n: len(h) for n, h in self.inputs.items()}
        signed = {"r0", "r1", "r2", "drain_out__data", "row_out__a0", "row_out__a1", "col_out__b"}
        outs = (["r0", "busy", "drain_out__valid", "drain_out__data", "row_out__a0",
                 "row_out__ctrl", "col_out__b"] if baseline else
                ["r0", "r1", "r2", "busy", "drain_out__valid", "drain_out__data", "row_out__a0",
                 "row_out__a1", "row_out__ctrl", "col_out__b"])
        self.outputs = [(n, getattr(dut, n), len(getattr(dut, n)) if n in signed else 0)
                        for n in outs]
        self.cycle = 0
        self.drained: list[int] = []

    async def start(self):
        """Start the clock and apply one reset cycle (DUT and model)."""
        cocotb.start_soon(Clock(self.dut.clk, 10, unit="ns").start())
        await self.step(BaselineInputs(rst=1) if self.baseline else PEInputs(rst=1))

    def _drive(self, x):
        ctrl = x.ctrl.pack() if isinstance(x.ctrl, (PECtrl, BaselineCtrl)) else int(x.ctrl)
        values = {"row__a0": x.a0, "row__ctrl": ctrl, "col__b": x.b,
                  "drain_in__valid": x.drain_valid, "drain_in__data": x.drain_data}
        if not self.baseline:
            values["row__a1"] = x.a1
        for name, v in values.items():
            self.inputs[name].value = int(v) & ((1 << self.widths[name]) - 1)
        self.dut.rst.value = int(x.rst)

    def read(self) -> dict:
        out = {}
        for name, handle, signed_width in self.outputs:
            v = int(handle.value)
            out[name] = to_signed(v, signed_width) if signed_width else v
        return out

    async def step(self, x) -> dict:
        """Apply ``x`` for one cycle; assert the DUT equals the model after the edge."""
        await FallingEdge(self.dut.clk)
        self._drive(x)
        await RisingEdge(self.dut.clk)
        await ReadOnly()
        expect = self.model.step(x)
        got = self.read()
        if got != expect:
            diff = {k: (got[k], expect[k]) for k in expect if got[k] != expect[k]}
            raise AssertionError(f"cycle {self.cycle}: (rtl, model) differ in {diff}; inputs {x}")
        if got["drain_out__valid"]:
            self.drained.append(got["drain_out__data"])
        self.cycle += 1
        return got

    async def run(self, inputs) -> list[int]:
        """Apply every input; return the values drained (drain_out valid) meanwhile."""
        start = len(self.drained)
        for x in inputs:
            await self.step(x)
        return self.drained[start:]
