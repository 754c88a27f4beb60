"""The geometry of one PE array's tile (R x C PEs, the token and channel limits, the
accumulator width) and the widths every engine block shares: the 32-bit counters, their
per-pass layout, and the signed 32-bit S / Y read-out. The multi-array engine's geometry
(:class:`~kaleido_hw.engine.engine_layouts.KaleidoGeometry`) and the linear engine's build on
:class:`EngineGeometry`.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import unsigned
from amaranth.lib import data

from kaleido_hw.bitops import bits_for
from golden.numerics import group_channels
from kaleido_hw.config import ConfigError, KaleidoConfig


__all__ = ["EngineGeometry", "COUNTER_WIDTH", "S_WIDTH", "S_BEAT_WIDTH", "counters_layout"]

#: Width of every performance counter.
COUNTER_WIDTH = 32
#: Width of the S (and Y) read-out streams (signed).
S_WIDTH = 32
#: Width of a beat of the engine's S read-out: two S values, the first in the low half (the
#: engine core's DMA beat, so a STORE forwards beats unchanged).
S_BEAT_WIDTH = 2 * S_WIDTH


def counters_layout() -> data.StructLayout:
    """A sequencer's counters: channel steps issued / skipped per pass, bubbles, quads."""
    w = unsigned(COUNTER_WIDTH)
    return data.StructLayout({"issued": data.ArrayLayout(w, 4), "skipped": data.ArrayLayout(w, 4),
                              "bubbles": w, "quads": w})


def _is_pow2(v: int) -> bool:
    return v >= 1 and v & (v - 1) == 0


@dataclass(frozen=True)
class EngineGeometry:
    """Sizes derived from a :class:`KaleidoConfig` for the engine blocks.

    ``kb`` is the number of buffer words per Q token in one bank: two per column block
    (anchor, follower), rounded up to a power of two so the address is a concatenation.
    """
    rows: int
    cols: int
    max_tokens: int
    max_dim: int
    acc_width: int

    @classmethod
    def from_config(cls, config: KaleidoConfig, require_pow2: bool = True) -> "EngineGeometry":
        """The geometry of ``config`` (rows, cols, engine_max_tokens, engine_max_head_dim,
        acc_width); ``require_pow2`` rejects non-power-of-two rows/cols with a ConfigError."""
        if not isinstance(config, KaleidoConfig):
            raise TypeError(f"expected a KaleidoConfig, got {type(config).__name__}")
        if require_pow2:
            for key in ("rows", "cols"):
                v = getattr(config, key)
                if not _is_pow2(v):
                    raise ConfigError(
                        f"{key} must be a power of two (1, 2, 4, 8 or 16) for the engine "
                        f"(its accumulation buffer addresses by shifts), got {v}")
        return cls(config.rows, config.cols, config.engine_max_tokens,
                   config.engine_max_head_dim, config.acc_width)

    # -- widths ---------------------------------------------------------------------------------
    @property
    def tok_width(self) -> int:
        """Bits of a token index 0..max_tokens-1."""
        return bits_for(self.max_tokens - 1)

    @property
    def size_width(self) -> int:
        """Bits of a grid length or token count 0..max_tokens."""
        return bits_for(self.max_tokens)

    @property
    def ch_width(self) -> int:
        """Bits of a channel index 0..max_dim-1."""
        return bits_for(self.max_dim - 1)

    @property
    def dim_width(self) -> int:
        """Bits of a channel count 0..max_dim."""
        return bits_for(self.max_dim)

    @property
    def row_width(self) -> int:
        """Bits of a row index of the array."""
        return bits_for(self.rows - 1)

    @property
    def max_group_channels(self) -> int:
        """Largest channel group whose sums R0/R1/R2 hold exactly (``golden.numerics.group_channels``, at most the channels a run has)."""
        return max(1, min(self.max_dim, group_channels(self.acc_width)))

    # -- accumulation buffer ---------------------------------------------------------------------
    @property
    def col_blocks(self) -> int:
        """Column blocks of the largest group: at most max_tokens units, C per block."""
        return -(-self.max_tokens // self.cols)

    @property
    def kb_width(self) -> int:
        """Bits of the per-token word offset in a bank (anchor/follower of each column block)."""
        return max(1, (2 * self.col_blocks - 1).bit_length())

    @property
    def kb(self) -> int:
        """Buffer words per Q token in one bank: 2 per column block, rounded up to a power of two."""
        return 1 << self.kb_width

    @property
    def cb_width(self) -> int:
        """Bits of a column-block index."""
        return max(1, self.kb_width - 1)

    @property
    def bank_depth(self) -> int:
        """Words in one accumulation bank: max_tokens * kb."""
        return self.max_tokens * self.kb

    @property
    def bank_addr_width(self) -> int:
        """Bits of a bank address."""
        return bits_for(self.bank_depth - 1)
