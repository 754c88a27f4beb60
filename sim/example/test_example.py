"""A minimal cocotb bench against a generated top: ``rtl_out/baseline_pe.v`` (the plain
8-bit MAC PE, ``docs/pe.md``), checked against a few lines of Python.

It is the template of ``docs/integration.md``: read the port widths from the manifest, drive
inputs on the falling edge, sample the registered outputs after the rising edge (ReadOnly),
and compare with a reference model. Run it with ``make -C sim/example [SIM=icarus] [WAVES=1]``.

The PE: ``R0 <= (clear ? 0 : R0) + (acc ? a0*b : 0)`` every cycle; ``drain`` puts the R0 of
before the edge on ``drain_out`` (``row__ctrl`` bit 0 acc, bit 1 clear, bit 2 drain).
"""

import json
import os
import random
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge


ACC, CLEAR, DRAIN = 1, 2, 4
MANIFEST = Path(os.environ.get("KALEIDO_MANIFEST",
                               Path(__file__).resolve().parents[2] / "rtl_out" / "manifest.json"))


def ports(top: str) -> dict:
    """{port name: manifest entry} of ``top`` (direction, width, signed, meaning)."""
    tops = json.loads(MANIFEST.read_text())["tops"]
    entry = next(t for t in tops if t["module"] == top)
    return {p["name"]: p for p in entry["ports"]}


def signed(value, width: int) -> int:
    """Two's complement read: Verilog ports carry no sign, the manifest says which are signed."""
    v = int(value)
    return v - (1 << width) if v >> (width - 1) & 1 else v


class MacModel:
    """Reference of the PE: one accumulator of ``width`` bits that wraps like the hardware."""

    def __init__(self, width: int):
        self.width, self.r0 = width, 0

    def step(self, a: int, b: int, ctrl: int):
        """Returns the drained value (or None); updates R0 as the rising edge does."""
        drained = self.r0 if ctrl & DRAIN else None
        r0 = (0 if ctrl & CLEAR else self.r0) + (a * b if ctrl & ACC else 0)
        self.r0 = signed(r0 & ((1 << self.width) - 1), self.width)
        return drained


async def start(dut) -> MacModel:
    """10 ns clock, one reset cycle, every input idle; the model sized from the manifest."""
    p = ports("baseline_pe")
    for name in ("r0", "drain_out__data", "row__a0", "col__b"):
        assert len(getattr(dut, name)) == p[name]["width"], f"{name}: width differs from manifest"
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    for name in ("row__a0", "col__b", "row__ctrl", "drain_in__valid", "drain_in__data"):
        getattr(dut, name).value = 0
    dut.rst.value = 1
    await RisingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0
    return MacModel(p["r0"]["width"])


async def step(dut, model: MacModel, a: int, b: int, ctrl: int):
    """Drive one cycle, let the edge happen, check r0 / busy / the drain chain."""
    dut.row__a0.value = a & 0xFF
    dut.col__b.value = b & 0xFF
    dut.row__ctrl.value = ctrl
    await RisingEdge(dut.clk)
    await ReadOnly()                       # registered outputs have settled after the edge
    drained = model.step(a, b, ctrl)
    width = len(dut.r0)
    assert signed(dut.r0.value, width) == model.r0, \
        f"r0 = {signed(dut.r0.value, width)}, expected {model.r0} (a={a}, b={b}, ctrl={ctrl})"
    assert int(dut.busy.value) == ctrl & ACC
    assert int(dut.drain_out__valid.value) == (drained is not None)
    if drained is not None:
        assert signed(dut.drain_out__data.value, width) == drained
    await FallingEdge(dut.clk)             # inputs change away from the rising edge
    return drained


@cocotb.test()
async def dot_products(dut):
    """Random dot products (seeded by COCOTB_RANDOM_SEED), then drain each result."""
    model = await start(dut)
    rng = random.Random(int(cocotb.RANDOM_SEED))
    for n in (1, 5, 64):
        a = [rng.randint(-128, 127) for _ in range(n)]
        b = [rng.randint(-128, 127) for _ in range(n)]
        for i, (x, y) in enumerate(zip(a, b)):
            await step(dut, model, x, y, ACC | (CLEAR if i == 0 else 0))
        drained = await step(dut, model, 0, 0, DRAIN)
        assert drained == sum(x * y for x, y in zip(a, b))


@cocotb.test()
async def extremes_wrap(dut):
    """-128 * -128 repeatedly: the accumulator wraps at its width exactly like the model."""
    model = await start(dut)
    steps = (1 << (len(dut.r0) - 1)) // (128 * 128) + 2     # enough to overflow once
    for i in range(steps):
        await step(dut, model, -128, -128, ACC | (CLEAR if i == 0 else 0))
    await step(dut, model, 0, 0, DRAIN)
    assert model.r0 != steps * 128 * 128, "the test must reach the wrap-around"
