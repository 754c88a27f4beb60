"""What the S engine tops (``kaleido_engine``, ``plain_engine``) share on the host side, for
their cocotb benches: the generated configuration, byte-lane operand writes while idle, the
``cfg__*`` ports, the ``start``/``done`` handshake with the counters, and the read-out
stream under random back-pressure.

The tops follow one host protocol (``docs/array.md``, "Host interface"): write
operands with ``wr__*``, drive ``cfg__*``, pulse ``start``; ``done`` rises (at once with a
non-zero ``error`` mask when the job is rejected), the ``cnt__*`` counters are then valid,
and a ``read`` pulse streams S row-major as signed 32-bit values, two per 64-bit beat of
``s`` (the first in the low half; :func:`kaleido_hw.engine.host_port.unpack_s_beats`).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np
from cocotb.triggers import ClockCycles, RisingEdge, with_timeout
from simlib import StreamSink

from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.host_port import operand_writes, s_beat_count, unpack_s_beats


REPO = Path(__file__).resolve().parents[2]
PERIOD_NS = 10


def load_config() -> KaleidoConfig:
    """The KaleidoConfig the Verilog under test was generated with: from the manifest named by
    ``KALEIDO_MANIFEST`` (a generated variant), else ``rtl_out/manifest.json``."""
    path = Path(os.environ.get("KALEIDO_MANIFEST", REPO / "rtl_out" / "manifest.json"))
    if path.exists():
        return KaleidoConfig.from_dict(json.loads(path.read_text())["config"])
    return KaleidoConfig()


def mask_names(mask: int, bits) -> list[str]:
    """Names of the bits set in an ``error`` ``mask``; ``bits`` is a top's ``ERROR_BITS``."""
    return [name for b, (name, _) in enumerate(bits) if mask >> b & 1]


async def write_operand(dut, sel: int, values):
    """Write an int8 matrix to operand ``sel`` through the ``wr__*`` port while the top is
    idle, one row per ``wr__token`` value, one byte lane group per cycle."""
    dut.wr__sel.value = sel
    port = dut.wr__token
    for row, lane, value in operand_writes(np.asarray(values)):
        dut.wr__en.value = 1
        port.value = row
        dut.wr__lane.value = lane
        dut.wr__data.value = value
        await RisingEdge(dut.clk)
    dut.wr__en.value = 0


class RunHost:
    """Drives one engine top (clock and reset already running).

    ``counters``: the counter port names without the ``cnt__`` prefix.
    """

    def __init__(self, dut, config: KaleidoConfig, counters):
        self.dut, self.config = dut, config
        self.counter_names = list(counters)
        for name in ("wr__en", "start", "read", "s__ready"):
            getattr(dut, name).value = 0
        # The KaleidoEngine's run option (an undriven input is X on Icarus): a new result.
        if hasattr(dut, "accumulate"):
            dut.accumulate.value = 0

    async def write_operand(self, sel: int, values):
        """Write an int8 matrix (one row per token) to operand ``sel``."""
        await write_operand(self.dut, sel, values)

    def configure(self, ports: dict):
        """Drive the ``cfg__*`` ports (names as the top's ``*_ports`` helper returns them)."""
        for name, value in ports.items():
            getattr(self.dut, name).value = value

    async def start(self, max_cycles: int = 2_000_000) -> dict:
        """Pulse ``start`` with the ports as driven, wait for ``done`` and return
        ``{"error": mask, "busy": b, "counters": {name: value}}``; counters with X/Z bits
        fail the test."""
        dut = self.dut
        dut.start.value = 1
        await RisingEdge(dut.clk)
        dut.start.value = 0
        await RisingEdge(dut.clk)        # busy or done is visible from here
        if not int(dut.done.value):
            await with_timeout(RisingEdge(dut.done), max_cycles * PERIOD_NS, "ns")
        await ClockCycles(dut.clk, 1)
        raw = {name: getattr(dut, f"cnt__{name}").value for name in self.counter_names}
        unknown = [f"{name}={value}" for name, value in raw.items() if not value.is_resolvable]
        assert not unknown, f"counters with X/Z bits after done: {', '.join(unknown)}"
        return {"error": int(dut.error.value), "busy": int(dut.busy.value),
                "counters": {name: int(value) for name, value in raw.items()}}

    async def read_scores(self, n: int, *, stall: float = 0.0,
                          rng: random.Random | None = None) -> np.ndarray:
        """Pulse ``read`` and collect the n x n scores, two per beat, under random
        back-pressure; an odd count's last beat must have a zero high half."""
        beats = await self._read_items(s_beat_count(n * n), stall, rng)
        return unpack_s_beats(beats, n * n).reshape(n, n)

    async def _read_items(self, total: int, stall: float, rng: random.Random | None) -> list:
        """Pulse ``read`` and collect ``total`` raw transfers of the result stream; waits a
        few cycles more and fails if anything beyond ``total`` arrives."""
        dut = self.dut
        sink = StreamSink(dut, "s", stall=stall, rng=rng or random.Random(0))
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
        dut.s__ready.value = 0
        assert len(sink.items) == total, f"read-out gave {len(sink.items)} items for {total}"
        return list(sink.items)
