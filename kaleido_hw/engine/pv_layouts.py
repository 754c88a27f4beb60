"""Write-stream payloads of ``pv_engine`` (``docs/linear.md``, "RTL of P @ V"), shared by the
engine and by the blocks that feed it (:class:`~kaleido_hw.engine.p_transposer.PTransposer`).

Fields are packed from bit 0 in the order listed: the order of the Verilog ``*__payload``
bits, LSB first.
"""

from __future__ import annotations

from amaranth.hdl import unsigned
from amaranth.lib import data

from kaleido_hw.bitops import bits_for


__all__ = ["pv_p_word_layout", "pv_v_word_layout"]


def pv_p_word_layout(config) -> data.StructLayout:
    """One P word: row block ``rb``, ``key`` and the uint8 P of the block's ``rows`` queries
    at that key (query ``rb*R + i`` in byte i)."""
    R, n = config.rows, config.engine_max_tokens
    return data.StructLayout({"rb": unsigned(bits_for(-(-n // R) - 1)),
                              "key": unsigned(bits_for(n - 1)),
                              "p": unsigned(8 * R)})


def pv_v_word_layout(config) -> data.StructLayout:
    """One V word: column block ``cb``, ``key`` and the int8 V of the block's ``cols``
    channels at that key (channel ``cb*C + j`` in byte j)."""
    C, n = config.cols, config.engine_max_tokens
    return data.StructLayout({"cb": unsigned(bits_for(-(-config.engine_max_head_dim // C) - 1)),
                              "key": unsigned(bits_for(n - 1)),
                              "v": unsigned(8 * C)})
