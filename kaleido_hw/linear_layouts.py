"""Geometry and data layouts shared by the blocks of the LinearEngine (``docs/linear.md``,
"RTL"): :class:`~kaleido_hw.linear_sequencer.LinearSequencer`, the PE array of
:class:`~kaleido_hw.linear_decoder.LinearCell`, :class:`~kaleido_hw.linear_buffer.LinearBuffer`
and :class:`~kaleido_hw.linear_engine.LinearEngine`.

Layouts pack from bit 0 in declaration order (``amaranth.lib.data``).
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import signed, unsigned
from amaranth.lib import data

from .config import ConfigError, KaleidoConfig, min_acc_width
from .tile_layouts import bits_for


__all__ = ["LinearGeometry", "linear_mode_layout", "linear_row_layout", "linear_col_layout",
           "linear_tag_layout", "linear_run_layout", "BUBBLE"]

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
        """Largest channel group whose sums R0/R1/R2 hold exactly (``min_acc_width``)."""
        n = self.max_in
        while n > 1 and min_acc_width(n) > self.acc_width:
            n -= 1
        return n


def linear_mode_layout() -> data.StructLayout:
    """What every PE of a row does in a step: ``kind`` (0 A, 1 F1, 2 F2, 3 no channel),
    ``issue`` (a channel is issued), ``first`` (the step starts a drain wave: the array's
    read-out trigger, named as in the tile mode), ``drain`` (the register it drains, a
    ``Drain`` value), ``clear`` (the block's first step: R0-R2 start from zero)."""
    return data.StructLayout({"kind": unsigned(2), "issue": unsigned(1), "first": unsigned(1),
                              "drain": unsigned(2), "clear": unsigned(1)})


def linear_row_layout() -> data.StructLayout:
    """One row of a step at the array's left edge: lanes ``a0``/``a1`` (int8, per the step
    kind), the row unit's follower codes ``c1``/``c2`` at the channel (3 = ABSENT), ``valid``
    (0: padding row) and the mode."""
    return data.StructLayout({"a0": signed(8), "a1": signed(8), "c1": unsigned(2),
                              "c2": unsigned(2), "valid": unsigned(1),
                              "mode": linear_mode_layout()})


def linear_col_layout() -> data.StructLayout:
    """One column of a step at the array's top edge: the weight and its valid bit."""
    return data.StructLayout({"b": signed(8), "valid": unsigned(1)})


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
