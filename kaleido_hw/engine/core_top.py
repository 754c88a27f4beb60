"""``kaleido_core``: the streaming engine core as one top for an SoC (``docs/engine.md``,
"Engine core"; ``docs/integration.md``): the :class:`~kaleido_hw.engine.core.CoreController`
(command decoder, load and store walkers, the KaleidoEngine) and the
:class:`~kaleido_hw.engine.dma.AxiDma` (AXI4 master) behind one command stream.

Ports: ``cmd`` (128-bit command words, valid/ready), the AXI4 master ``axi`` (the DMA's;
``axi__ar*``, ``axi__r*``, ``axi__aw*``, ``axi__w*``, ``axi__b*``), ``busy``, ``error`` /
``error_command`` / ``engine_error`` / ``error_clear``, and the counters ``cnt__*``
(``golden.engine.core_model.CORE_COUNTERS``). The DMA's sticky error is cleared with the
core's (``error_clear``).
"""

from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from kaleido_hw.config import ConfigError, KaleidoConfig
from kaleido_hw.engine.core import ATTENTION_ERROR_BITS, CoreController, check_core_config
from golden.engine.commands import ERROR_CODES
from golden.engine.core_model import ATTENTION_COUNTERS, CORE_COUNTERS
from kaleido_hw.engine.dma import AXI_PORT_DOCS, AxiDma
from kaleido_hw.engine.kaleido_engine import _ARRAY_COUNTER_DOCS
from kaleido_hw.engine.host_port import WRITE_BYTES

__all__ = ["KaleidoCore"]


def _forward(m, top, name, sub):
    """Connect port ``name`` of component ``top`` to the same port of submodule ``sub``
    (``wiring.connect`` joins opposite ports only): inputs flow in, outputs flow out."""
    for path, member, value in top.signature.flatten(top):
        if path[0] != name:
            continue
        inner = sub
        for p in path:
            inner = inner[p] if isinstance(p, int) else getattr(inner, p)
        if member.flow == wiring.In:
            m.d.comb += inner.eq(value)
        else:
            m.d.comb += value.eq(inner)


class KaleidoCore(wiring.Component):
    """The engine core with its AXI4 memory port.

    Parameters
    ----------
    config : KaleidoConfig
        The engine's keys and the DMA's ``axi_addr_width``, ``axi_data_width`` (64 here: one
        beat is one engine write), ``axi_max_burst``, ``axi_max_outstanding``.
    """

    PORT_DOCS = {
        **{f"axi__{k}": v for k, v in AXI_PORT_DOCS.items()},
        "cmd__valid": "command stream: a 128-bit command word is offered",
        "cmd__ready": "command stream: the word is taken (always, in the error state: dropped)",
        "cmd__payload": "command word (golden.engine.commands; docs/engine.md, Command stream)",
        "busy": "a command is executing or a LOAD's walk runs in the load unit",
        "error": ("sticky error code of golden.engine.commands.ERROR_CODES (0 none): "
                  + ", ".join(f"{c} {n}" for c, (n, _) in ERROR_CODES.items())),
        "error_command": "index (from 0 after reset) of the command that failed",
        "engine_error": "the engine's error mask when it rejected a COMPUTE (else 0)",
        "error_clear": "leave the error state (once the transfers in flight are drained)",
        "cnt__cycles": "cycles from a command's arrival until the core is idle, summed",
        "cnt__commands": "commands executed (the failing one included)",
        "cnt__compute": "cycles in COMPUTEs (the engine's cycles + 2 per COMPUTE)",
        "cnt__mem_wait": "cycles the arrays waited for memory: cycles - compute",
        "cnt__engine_cycles": "the engine's cycles, summed over COMPUTEs",
        "cnt__chunks": "the engine's chunks, summed over COMPUTEs",
        **{f"cnt__{n}": _ARRAY_COUNTER_DOCS[n].format(a="k").replace("array k", "the arrays")
           + ", summed over COMPUTEs and arrays" for n in CORE_COUNTERS[6:]},
        # A build with the attention path (core_attention).
        "attention_error": ("what ended an attention block with error 2 (bit k: " + ", ".join(
            f"{k} {n}" for n, k in ATTENTION_ERROR_BITS.items()) + "; else 0)"),
        **{f"cnt__{n}": f"P @ V's {n[3:]} counter (pv_engine), summed over attention blocks"
           for n in ATTENTION_COUNTERS},
    }

    def __init__(self, config: KaleidoConfig):
        if config.axi_data_width != 8 * WRITE_BYTES:
            raise ConfigError(f"axi_data_width must be {8 * WRITE_BYTES} for kaleido_core (one "
                              f"beat is one engine write of {WRITE_BYTES} channels), got "
                              f"{config.axi_data_width}")
        # Checked before any submodule exists: a rejected configuration leaves no
        # elaboratable behind (Amaranth would warn about it, on the CLI's one-line error).
        check_core_config(config)
        self.config = config
        self.ctrl = CoreController(config, config.axi_addr_width)
        self.dma = AxiDma(config)
        ctrl_sig = self.ctrl.signature.members
        super().__init__({
            "cmd": ctrl_sig["cmd"],
            "axi": self.dma.signature.members["axi"],
            "busy": Out(1),
            "error": Out(ctrl_sig["error"].shape),
            "error_command": Out(ctrl_sig["error_command"].shape),
            "engine_error": Out(ctrl_sig["engine_error"].shape),
            **({"attention_error": Out(ctrl_sig["attention_error"].shape)}
               if config.core_attention else {}),
            "error_clear": In(1),
            "cnt": ctrl_sig["cnt"],
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.ctrl = ctrl = self.ctrl
        m.submodules.dma = dma = self.dma
        _forward(m, self, "cmd", ctrl)
        _forward(m, self, "axi", dma)
        wiring.connect(m, ctrl.rd_req, dma.rd_req)
        wiring.connect(m, dma.rd_data, ctrl.rd_data)
        wiring.connect(m, ctrl.wr_req, dma.wr_req)
        wiring.connect(m, ctrl.wr_data, dma.wr_data)
        m.d.comb += [
            ctrl.dma_error.eq(dma.error),
            ctrl.dma_idle.eq(dma.rd_idle & dma.wr_idle),
            dma.error_clear.eq(ctrl.dma_error_clear),
            ctrl.error_clear.eq(self.error_clear),
            self.busy.eq(ctrl.busy),
            self.error.eq(ctrl.error),
            self.error_command.eq(ctrl.error_command),
            self.engine_error.eq(ctrl.engine_error),
        ]
        if self.config.core_attention:
            m.d.comb += self.attention_error.eq(ctrl.attention_error)
        m.d.comb += [getattr(self.cnt, n).eq(getattr(ctrl.cnt, n))
                     for n in ctrl.signature.members["cnt"].signature.members]
        return m
