"""Stream payloads of the softmax unit (``docs/vector.md`` has the bit tables).

Fields are packed from bit 0 in the order listed: the order of the Verilog ``*__payload``
bits, LSB first.
"""

from __future__ import annotations

from amaranth.hdl import signed, unsigned
from amaranth.lib import data


__all__ = ["MULT_BITS", "SHIFT_BITS", "EXP_WIDTH", "RECIP_WIDTH", "WEIGHT_BITS",
           "lane_index_width", "state_row_width", "score_beat_layout", "prob_beat_layout",
           "block_score_beat_layout", "block_prob_beat_layout", "O_BITS", "OUT_BITS",
           "chunk_width", "partial_beat_layout", "finish_layout", "output_beat_layout"]

#: The fixed-point softmax scale: a 16-bit multiplier and a right shift in 1..47
#: (``golden.vector.softmax_scale``).
MULT_BITS = 16
SHIFT_BITS = 6
#: Width of an exponential E in [0, 2**15].
EXP_WIDTH = 16
#: Width of the row reciprocal R = (255 << 32) // sum, sum >= 2**15: R < 255 * 2**17 < 2**25.
RECIP_WIDTH = 25


#: Width of a row's weight L of section 15: ``L <= 255 * n < 2**28`` for heads of up to
#: 2**20 keys (``docs/numerics.md`` section 15).
WEIGHT_BITS = 28


#: Width of an output accumulator O of section 15 (signed): ``|O| < 2**35`` for heads of up
#: to 2**20 keys.
O_BITS = 36
#: The normalised output: int16 with 8 fractional bits.
OUT_BITS = 16


def chunk_width(config) -> int:
    """Bits of a channel chunk's index: ``ceil(engine_max_head_dim / vector_lanes)`` chunks of
    ``vector_lanes`` channels per row (at least 1 bit)."""
    chunks = -(-config.engine_max_head_dim // config.vector_lanes)
    return max(1, (chunks - 1).bit_length())


def state_row_width(config) -> int:
    """Bits of a query row's index in the block softmax unit's state (one row per query of
    the engine core's box: ``engine_max_tokens`` rows)."""
    return max(1, (config.engine_max_tokens - 1).bit_length())


def lane_index_width(lanes: int) -> int:
    """Bits of a lane index in ``range(lanes)`` (at least 1)."""
    return max(1, (lanes - 1).bit_length())


def score_beat_layout(config) -> data.StructLayout:
    """One input beat: ``vector_lanes`` scores, the valid lanes of a last beat, the row's end
    and the row's scale (taken from its first beat)."""
    return data.StructLayout({
        "scores": data.ArrayLayout(signed(config.vector_score_bits), config.vector_lanes),
        "tail": unsigned(lane_index_width(config.vector_lanes)),
        "last": unsigned(1),
        "mult": unsigned(MULT_BITS),
        "shift": unsigned(SHIFT_BITS),
    })


def prob_beat_layout(config) -> data.StructLayout:
    """One output beat: ``vector_lanes`` uint8 probabilities (scale 1/255), ``tail`` and
    ``last`` as the input beat had them."""
    return data.StructLayout({
        "p": data.ArrayLayout(unsigned(8), config.vector_lanes),
        "tail": unsigned(lane_index_width(config.vector_lanes)),
        "last": unsigned(1),
    })


def block_score_beat_layout(config) -> data.StructLayout:
    """One input beat of the block softmax unit: the scores of one query row in one key
    block (as :func:`score_beat_layout`), plus from the row's first beat the query row's
    index in the unit's state (``row``) and ``first`` (the row's first key block: its
    running maximum and weight start afresh)."""
    return data.StructLayout({
        **{name: score_beat_layout(config)[name].shape
           for name in ("scores", "tail", "last", "mult", "shift")},
        "row": unsigned(state_row_width(config)),
        "first": unsigned(1),
    })


def block_prob_beat_layout(config) -> data.StructLayout:
    """One output beat of the block softmax unit: ``vector_lanes`` uint8 P (scale 1/255 of
    the running maximum), ``tail``, ``last``, the query ``row``, the row's rescale ``factor``
    F of this block (``2**15``: no change) and, on the row's last beat, its ``weight`` L after
    the block (0 on the other beats)."""
    return data.StructLayout({
        "p": data.ArrayLayout(unsigned(8), config.vector_lanes),
        "tail": unsigned(lane_index_width(config.vector_lanes)),
        "last": unsigned(1),
        "row": unsigned(state_row_width(config)),
        "factor": unsigned(EXP_WIDTH),
        "weight": unsigned(WEIGHT_BITS),
    })


def partial_beat_layout(config) -> data.StructLayout:
    """One input beat of the block output unit: ``vector_lanes`` channels of one query row's
    ``P @ V`` of one key block (signed, ``acc_width`` bits: the arrays' accumulators), the
    ``row``, the channel ``chunk``, ``first`` (the row's first key block: O starts from this
    partial) and the row's rescale ``factor`` F of this block (from the block softmax unit)."""
    return data.StructLayout({
        "values": data.ArrayLayout(signed(config.acc_width), config.vector_lanes),
        "row": unsigned(state_row_width(config)),
        "chunk": unsigned(chunk_width(config)),
        "first": unsigned(1),
        "factor": unsigned(EXP_WIDTH),
    })


def finish_layout(config) -> data.StructLayout:
    """A row to normalise and read out: its ``row`` and final ``weight`` L."""
    return data.StructLayout({
        "row": unsigned(state_row_width(config)),
        "weight": unsigned(WEIGHT_BITS),
    })


def output_beat_layout(config) -> data.StructLayout:
    """One output beat: ``vector_lanes`` channels of a normalised row (int16, 8 fractional
    bits), the ``row``, the ``chunk`` and ``last`` (the row's last chunk)."""
    return data.StructLayout({
        "values": data.ArrayLayout(signed(OUT_BITS), config.vector_lanes),
        "row": unsigned(state_row_width(config)),
        "chunk": unsigned(chunk_width(config)),
        "last": unsigned(1),
    })
