"""Stream payloads of the data dispatcher (``docs/dispatch.md`` has the bit tables).

Every layout is an :class:`amaranth.lib.data.StructLayout`; fields are packed from bit 0 in
the order listed, which is the order of the Verilog ``*__payload`` bits (LSB first).
"""

from __future__ import annotations

from amaranth.hdl import unsigned
from amaranth.lib import data, enum


__all__ = ["Sel", "index_width", "sched_entry_layout", "sched_out_layout",
           "matcher_batch_layout", "matcher_slot_layout"]


class Sel(enum.Enum, shape=3):
    """What one column consumes in a matcher slot (its 8-bit port = 2 work units)."""
    NONE = 0      # nothing: FULL in A (and in B, or no B)
    BYTE_A = 1    # the byte of channel A (A is NONE, B is FULL or absent)
    BYTE_B = 2    # the byte of channel B (A is FULL)
    NIB_A = 3     # the low nibble of A (A is HALF, B is FULL or absent)
    NIB_B = 4     # the low nibble of B (A is FULL, B is HALF)
    NIB_AB = 5    # both low nibbles: A's in bits 3:0, B's in bits 7:4 (both HALF)


def index_width(n: int) -> int:
    """Bits of an index in ``range(n)`` (at least 1)."""
    return max(1, (n - 1).bit_length())


def sched_entry_layout(config) -> data.StructLayout:
    """Scheduler input entry: a token id and its reuse pattern (bit j = channel j has work)."""
    return data.StructLayout({
        "token_id": unsigned(config.token_id_width),
        "pattern": unsigned(config.sched_pattern_width),
    })


def sched_out_layout(config) -> data.StructLayout:
    """Scheduler output entry: the input entry, its cluster, and 'last entry of the cluster'."""
    return data.StructLayout({
        "token_id": unsigned(config.token_id_width),
        "pattern": unsigned(config.sched_pattern_width),
        "cluster": unsigned(index_width(config.sched_clusters)),
        "last": unsigned(1),
    })


def matcher_batch_layout(config) -> data.StructLayout:
    """Matcher input: C token ids and a 2-bit reuse code per (token, channel).

    ``codes[c][m]`` is token c's channel m: 0 FULL, 1 HALF, 2 NONE (3 is reserved and is
    treated as NONE).
    """
    C, M = config.cols, config.matcher_channels
    return data.StructLayout({
        "tokens": data.ArrayLayout(unsigned(config.token_id_width), C),
        "codes": data.ArrayLayout(data.ArrayLayout(unsigned(2), M), C),
    })


def matcher_slot_layout(config) -> data.StructLayout:
    """One issue slot: channel A, optional channel B, per-column select, the batch's tokens."""
    C, M = config.cols, config.matcher_channels
    return data.StructLayout({
        "a": unsigned(index_width(M)),
        "b": unsigned(index_width(M)),
        "merged": unsigned(1),
        "sel": data.ArrayLayout(Sel, C),
        "tokens": data.ArrayLayout(unsigned(config.token_id_width), C),
        "first": unsigned(1),
        "last": unsigned(1),
    })
