"""The engine tops' host protocol in the Amaranth simulator (async testbench steps), shared by
the KaleidoEngine tests: operand writes while idle, the
configuration ports and the ``start`` pulse, and a bounded wait for ``done``.
"""

from __future__ import annotations

from kaleido_hw.engine.host_port import operand_writes


def member(port, name: str):
    """A nested port member from its ``__``-joined name (``cnt``, ``"a0__steps"``)."""
    for part in name.split("__"):
        port = getattr(port, part)
    return port


async def write_operand(ctx, dut, sel: int, matrix):
    """Write an int8 ``matrix`` (one row per ``wr.token``) to operand ``sel``, one byte-lane
    group per cycle; leaves ``wr.en`` low."""
    port = dut.wr.token
    for row, lane, value in operand_writes(matrix):
        ctx.set(dut.wr.en, 1)
        ctx.set(dut.wr.sel, sel)
        ctx.set(port, row)
        ctx.set(dut.wr.lane, lane)
        ctx.set(dut.wr.data, value)
        await ctx.tick()
    ctx.set(dut.wr.en, 0)


def configure(ctx, cfg, ports: dict):
    """Drive the members of the ``cfg`` port (or of one of its nested groups) from a dict
    keyed ``"cfg__name"`` (as the tops' ``*_ports`` helpers return them) or ``"name"``."""
    for name, value in ports.items():
        ctx.set(getattr(cfg, name.removeprefix("cfg__")), value)


async def configure_and_start(ctx, dut, ports: dict):
    """Drive the ``cfg`` members from a ``{"cfg__name": value}`` dict and pulse ``start``."""
    configure(ctx, dut.cfg, ports)
    ctx.set(dut.start, 1)
    await ctx.tick()
    ctx.set(dut.start, 0)


async def wait_done(ctx, dut, max_cycles: int):
    """Tick until ``done`` (checked before each tick); a hang fails instead of running
    forever."""
    for _ in range(max_cycles):
        if ctx.get(dut.done):
            return
        await ctx.tick()
    assert ctx.get(dut.done), f"no done within {max_cycles} cycles"
