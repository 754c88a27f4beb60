"""Geometry and data layouts shared by the blocks of the LinearEngine (``docs/linear.md``,
"RTL"): :class:`~kaleido_hw.engine.linear_sequencer.LinearSequencer`, the PE array of
:class:`~kaleido_hw.array.linear_cell.LinearCell`, :class:`~kaleido_hw.engine.linear_buffer.LinearBuffer`
and :class:`~kaleido_hw.engine.linear_engine.LinearEngine`.

Layouts pack from bit 0 in declaration order (``amaranth.lib.data``).
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import unsigned
from amaranth.lib import data

from kaleido_hw.bitops import bits_for
from golden.numerics import group_channels
from kaleido_hw.config import ConfigError, KaleidoConfig


__all__ = ["LinearGeometry", "linear_tag_layout", "linear_run_layout", "BUBBLE"]

#: ``mode.kind`` of a step that issues no channel (a bubble or the final drain step).
BUBBLE = 3


@dataclass(frozen=True)
class LinearGeometry:
    """Sizes of a LinearEngine derived from a :class:`KaleidoConfig`: R x C array
    (``cols`` a power of two: the Y buffer addresses a feature's column block by a shift),
    ``engine_max_tokens`` tokens, ``linear_max_in`` input channels, ``linear_max_out``
    output features, ``acc_width``, ``engine_arrays`` arrays (column block cb runs on array
    ``cb mod arrays``)."""
    rows: int
    cols: int
    max_tokens: int
    max_in: int
    max_out: int
    acc_width: int
    arrays: int = 1

    @classmethod
    def from_config(cls, config: KaleidoConfig) -> "LinearGeometry":
        """Validate what the LinearEngine needs of ``config`` and derive its sizes."""
        if not isinstance(config, KaleidoConfig):
            raise TypeError(f"expected a KaleidoConfig, got {type(config).__name__}")
        if config.cols & (config.cols - 1):
            raise ConfigError(f"cols must be a power of two (1, 2, 4, 8 or 16) for the "
                              f"LinearEngine (its Y buffer addresses by shifts), got {config.cols}")
        return cls(config.rows, config.cols, config.engine_max_tokens, config.linear_max_in,
                   config.linear_max_out, config.acc_width, config.engine_arrays)

    @property
    def tok_width(self) -> int:
        """Bits of a token index 0..max_tokens-1."""
        return bits_for(self.max_tokens - 1)

    @property
    def size_width(self) -> int:
        """Bits of a grid length or token count 0..max_tokens."""
        return bits_for(self.max_tokens)

    @property
    def in_width(self) -> int:
        """Bits of an input-channel count 0..max_in."""
        return bits_for(self.max_in)

    @property
    def out_width(self) -> int:
        """Bits of an output-feature count 0..max_out."""
        return bits_for(self.max_out)

    @property
    def col_blocks(self) -> int:
        """Column blocks of the widest layer: ceil(max_out / C)."""
        return -(-self.max_out // self.cols)

    @property
    def cb_width(self) -> int:
        """Bits of a column-block index."""
        return bits_for(self.col_blocks - 1)

    @property
    def array_blocks(self) -> int:
        """Column blocks of the widest layer on one array: ceil(col_blocks / arrays)."""
        return -(-self.col_blocks // self.arrays)

    @property
    def slot_width(self) -> int:
        """Bits of a column block's index on its array (cb // arrays)."""
        return bits_for(self.array_blocks - 1)

    @property
    def cbi_width(self) -> int:
        """Bits of an array's column-block counter (it runs up to col_blocks + arrays - 1)."""
        return bits_for(self.col_blocks + self.arrays - 1)

    @property
    def max_group_channels(self) -> int:
        """Largest channel group whose sums R0/R1/R2 hold exactly (``golden.numerics.group_channels``, at most the channels a run has)."""
        return max(1, min(self.max_in, group_channels(self.acc_width)))


def linear_tag_layout(geo: LinearGeometry) -> data.StructLayout:
    """Where a drain wave goes in the Y buffer: ``plane`` (the channel group), ``slot`` (the
    column block's index on its array, ``cb // arrays``), ``rtok[i]`` (token of row i's
    drained member), ``rwe`` (rows whose member exists), ``cwe`` (columns below C_out)."""
    return data.StructLayout({
        "plane": unsigned(2),
        "slot": unsigned(geo.slot_width),
        "rtok": data.ArrayLayout(unsigned(geo.tok_width), geo.rows),
        "rwe": unsigned(geo.rows),
        "cwe": unsigned(geo.cols),
    })


def linear_run_layout(geo: LinearGeometry) -> data.StructLayout:
    """The configuration of one run, latched at start (derived values included):
    ``gmask[g]``/``gsize[g]`` the input channels of group g (direction g), ``w3`` window 3,
    ``full_limit`` the FULL bound ``(w * 2**(7 - full_bits))**2`` on the window's sum of
    squared pairwise differences, ``half_mask`` the HALF byte mask, ``ncb`` column blocks."""
    sw = geo.size_width
    return data.StructLayout({
        "t": unsigned(sw), "h": unsigned(sw), "w": unsigned(sw),
        "hw": unsigned(sw), "n": unsigned(sw),
        "c_out": unsigned(geo.out_width),
        "ncb": unsigned(bits_for(geo.col_blocks)),
        "gmask": data.ArrayLayout(unsigned(geo.max_in), 3),
        "gsize": data.ArrayLayout(unsigned(geo.in_width), 3),
        "w3": unsigned(1),
        "full_limit": unsigned(10),
        "half_mask": unsigned(8),
        "reuse": unsigned(1),
    })
