"""The one configuration that flows through the generator.

:class:`KaleidoConfig` is a frozen dataclass. Every block's constructor takes it (or the
fields it needs), the manifest records it, and ``kaleido-hw generate --config FILE`` loads
it from TOML. It is validated as a whole when it is built, so an invalid value is rejected
before any Verilog is written, with a message that names the key and its allowed values.

TOML form: top-level keys with the field names below, e.g.::

    acc_width = 24
    preset = "wan2.1"
    matcher_lookahead = 8
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path


if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from golden.engine.model import SCHED_SIDES
from golden.numerics import MAX_PRODUCT, PRESETS, ChannelGroups


__all__ = ["ConfigError", "ENGINE_DISPATCHERS", "ENGINE_PES", "KaleidoConfig", "check_int",
           "min_acc_width"]


class ConfigError(ValueError):
    """An invalid configuration value; the message names the key and the allowed values."""


#: Dispatcher hardware a KaleidoEngine can be built with (``engine_dispatcher``).
ENGINE_DISPATCHERS = ("none", "scheduler", "matcher", "full")

#: PEs a KaleidoEngine can be built from (``engine_pe``): ReusePEs, plain BaselinePEs (the
#: dense systolic accelerator of the iso-area comparison, ``docs/engine.md``, "Plain build"),
#: or ReusePEs with the P @ V mode folded in (``docs/linear.md``, "P @ V in the ReusePE").
ENGINE_PES = ("reuse", "plain", "reuse-pv")

#: Largest |a*b| of two int8 values: (-128) * (-128).


def min_acc_width(channels: int) -> int:
    """Smallest signed accumulator width that holds any sum of ``channels`` int8 products.

    Each product lies in [-16256, 16384]; the sum of ``n`` of them needs
    ``2**(w-1) > n * 16384`` (the positive end is the tight one).
    """
    if channels < 1:
        raise ConfigError(f"channels must be >= 1, got {channels}")
    return (channels * MAX_PRODUCT).bit_length() + 1


def check_int(name, value, lo, hi, extra=""):
    """Raise :class:`ConfigError` unless ``value`` is an int (not a bool) in ``[lo, hi]``;
    the message names ``name``, the range and ``extra``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an integer in [{lo}, {hi}]{extra}, got {value!r}")
    if not lo <= value <= hi:
        raise ConfigError(f"{name} must be in [{lo}, {hi}]{extra}, got {value}")


@dataclass(frozen=True)
class KaleidoConfig:
    """Parameters of every generated block.

    Numerics (``docs/numerics.md``)
        preset : str
            Channel partition whose largest group sizes the PE accumulators
            (one of ``golden.PRESETS``).
        full_bits, half_bits : int
            Reuse thresholds: FULL when the top ``1 + full_bits`` bits agree, HALF when the
            top ``1 + half_bits`` bits agree. ``3 <= half_bits < full_bits <= 7``: a HALF
            follower computes the 4-bit low nibble itself, so its high nibble must agree.

    Processing element (``docs/pe.md``)
        acc_width : int
            Width of R0/R1/R2, signed. At least :func:`min_acc_width` of the preset's largest
            channel group (exact by construction), at most 48.

    PE array
        rows, cols : int
            PEs per array (output-stationary, R x C), 1..16 each (powers of two for the
            attention engine, whose accumulation buffer addresses by shifts).
        engine_max_tokens : int
            Tokens (T*H*W) of one box the engine's Q/K memories and accumulation buffer
            hold, 2..1024 (at most 362 for the engine core).
        engine_max_head_dim : int
            Channels per token the engine holds, a multiple of 8 in 8..256.

    Multi-array engine (``docs/engine.md``)
        engine_arrays : int
            PE arrays of the KaleidoEngine (P), 1..64.
        engine_dispatcher : str
            Dispatcher hardware built into the KaleidoEngine: ``"none"`` (Kaleido-pe),
            ``"scheduler"`` (pe-sh), ``"matcher"`` (pe-m) or ``"full"`` (both); the run-time
            ``schedule``/``match`` bits can only switch off what is built.
        engine_stall_seed : int
            Verification only: 0 (the default) builds nothing; otherwise the seed of LFSRs
            that randomly withhold every internal stream handshake of the KaleidoEngine
            (``docs/engine.md``, "Back-pressure"), 0..0xFFFF. Never set it for a product build.
        engine_pe : str
            PEs of the KaleidoEngine's arrays: ``"reuse"`` (ReusePEs, the default) or
            ``"plain"`` (BaselinePEs: the dense-only systolic engine the paper starts from,
            with no reuse hardware; ``docs/engine.md``, "Plain build"). ``"plain"`` needs
            ``engine_dispatcher = "none"``. ``"reuse-pv"``: ReusePEs with the P @ V mode
            (``PvMergedArray`` / ``PvPEArray``), which the engine's S and linear runs leave
            off; it measures what the mode costs the engine (``docs/linear.md``, "P @ V in
            the ReusePE"), before a P @ V sequencer uses it.
        engine_window3 : bool
            Build the KaleidoEngine's arrays and sequencers for linear blocks with windows of
            3 too (``docs/linear.md``, "Windows of 3 on the tile passes"): window-3 decode
            tables in the PEs, a third row word and code per unit in the sequencers; a run
            asks for it with ``cfg.window3`` (with ``cfg.linear``; without schedule and
            match, which a window-3 quad does not use). Needs ReusePEs (``engine_pe``
            "reuse" or "reuse-pv") and ``cols <= rows``. Off by default: it costs the
            arrays and sequencers area that attention runs do not use.

    Dispatcher (``docs/dispatch.md``)
        sched_entries : int
            Entries in one scheduler batch (the string queue), 4..256.
        sched_pattern_width : int
            Channels per pattern string, a multiple of 4 in 4..64.
        sched_clusters : int
            Cluster queues; must divide ``sched_entries``; 2..16.
        sched_lfsr_seed : int
            Non-zero seed of the pivot-selection LFSR, 16 bits.
        sched_sides : str
            What the KaleidoEngine's scheduler orders: ``"q"`` (the default) the Q units only,
            the K units keeping their natural order, so that all chunks of a channel group
            accumulate into one plane of the accumulation buffer (at most 3 planes); ``"qk"``
            both sides, one plane per chunk (``docs/engine.md``, "Accumulation buffer": the K
            order buys about 0.3% of the cycles and costs the planes of every further chunk).
        matcher_lookahead : int
            Pending channels the MergeMatcher may pair with the oldest one, 1..16.
        matcher_channels : int
            Channels of one cluster batch that the matcher walks (its channel batch), 1..64;
            must divide ``sched_pattern_width``.
        token_id_width : int
            Bits of the token id that travels with every dispatcher entry and slot, 1..32
            (17 holds the 118,800 tokens of a 720p head).

    Vector unit (``docs/vector.md``)
        vector_lanes : int
            Scores the softmax unit takes, and probabilities it gives, per cycle, 1..64.
        vector_max_row : int
            Longest row (keys) of S the unit buffers, a multiple of ``vector_lanes`` in
            ``vector_lanes``..4096 (each row buffer holds one row).
        vector_score_bits : int
            Width of a signed score S, 16..32 (24 holds every S of int8 operands with
            d <= 128: |S| <= 2**21).
        vector_row_buffers : int
            Row buffers of the softmax unit, 2..8: a row occupies one from its first beat in
            to its last beat out, so with 4 the input, the exp-and-sum pass, the reciprocal
            and the output each work on their own row.

    Memory port (``docs/engine.md``, "Memory port (AXI4 DMA)")
        axi_addr_width : int
            Bits of an AXI byte address, 32..64.
        axi_data_width : int
            Bits of an AXI data beat: 32, 64 or 128 (the engine core needs 64: one beat is
            one engine write of 8 channels).
        axi_max_burst : int
            Longest burst the DMA issues, in beats: a power of two in 1..256.
        axi_max_outstanding : int
            Read bursts, and write bursts awaiting their response, in flight at once, 1..16.

    Engine core (``docs/engine.md``, "Engine core")
        core_banks : int
            Scratchpad banks per side (Q, K) of the engine core, 1..4 (the 2-bit bank field
            of LOAD and COMPUTE): the engine's Q/K memories hold ``core_banks`` boxes each.
            2 (the default) lets a LOAD into one bank run while a COMPUTE reads the other;
            1 runs loads and computes one after another.
        core_attention : bool
            Build the attention path into the core (ATTENTION, STRIDES and LOAD of side V,
            COMPUTE kind 2, STORE of O: ``docs/engine.md``, "Attention commands"): the
            block_attention datapath with ``core_banks`` banks of V. Needs ``vector_lanes =
            engine_arrays * cols``, ``vector_max_row >= engine_max_tokens``, ``cols`` in
            1, 2, 4, 8 and ``vector_score_bits`` wide enough for an S of
            ``engine_max_head_dim`` channels. False (the default) builds a core that
            answers those commands with error 11.
    """

    preset: str = "hunyuanvideo"
    full_bits: int = 5
    half_bits: int = 3
    acc_width: int = 24
    rows: int = 4
    cols: int = 4
    engine_max_tokens: int = 64
    engine_max_head_dim: int = 128
    engine_arrays: int = 4
    engine_dispatcher: str = "full"
    engine_stall_seed: int = 0
    engine_pe: str = "reuse"
    engine_window3: bool = False
    sched_entries: int = 64
    sched_pattern_width: int = 16
    sched_clusters: int = 4
    sched_lfsr_seed: int = 0xACE1
    sched_sides: str = "q"
    matcher_lookahead: int = 4
    matcher_channels: int = 16
    token_id_width: int = 17
    vector_lanes: int = 16
    vector_max_row: int = 256
    vector_score_bits: int = 24
    vector_row_buffers: int = 5
    axi_addr_width: int = 32
    axi_data_width: int = 64
    axi_max_burst: int = 16
    axi_max_outstanding: int = 4
    core_banks: int = 2
    core_attention: bool = False

    def __post_init__(self):
        if self.preset not in PRESETS:
            raise ConfigError(
                f"preset must be one of {', '.join(sorted(PRESETS))}, got {self.preset!r}")
        check_int("full_bits", self.full_bits, 4, 7)
        check_int("half_bits", self.half_bits, 3, 6,
                   " (a HALF follower computes a 4-bit low nibble, so its high nibble must agree)")
        if not self.half_bits < self.full_bits:
            raise ConfigError(
                f"full_bits must be greater than half_bits ({self.half_bits}), got {self.full_bits}")
        need = min_acc_width(self.largest_group)
        check_int("acc_width", self.acc_width, need, 48,
                   f" (exact for the {self.largest_group}-channel groups of preset {self.preset!r})")
        check_int("rows", self.rows, 1, 16)
        check_int("cols", self.cols, 1, 16)
        check_int("engine_max_tokens", self.engine_max_tokens, 2, 1024)
        check_int("engine_max_head_dim", self.engine_max_head_dim, 8, 256, " (a multiple of 8)")
        if self.engine_max_head_dim % 8:
            raise ConfigError(f"engine_max_head_dim must be a multiple of 8 in [8, 256], "
                              f"got {self.engine_max_head_dim}")
        check_int("engine_arrays", self.engine_arrays, 1, 64)
        if self.engine_dispatcher not in ENGINE_DISPATCHERS:
            raise ConfigError(f"engine_dispatcher must be one of {', '.join(ENGINE_DISPATCHERS)}, "
                              f"got {self.engine_dispatcher!r}")
        check_int("engine_stall_seed", self.engine_stall_seed, 0, 0xFFFF)
        if self.engine_pe not in ENGINE_PES:
            raise ConfigError(f"engine_pe must be one of {', '.join(ENGINE_PES)}, "
                              f"got {self.engine_pe!r}")
        if self.engine_pe == "plain" and self.engine_dispatcher != "none":
            raise ConfigError(
                f"engine_pe = 'plain' needs engine_dispatcher = 'none' (BaselinePEs run dense "
                f"only, so a plain engine has no dispatcher), got engine_dispatcher = "
                f"{self.engine_dispatcher!r}")
        if not isinstance(self.engine_window3, bool):
            raise ConfigError(f"engine_window3 must be true or false, got "
                              f"{self.engine_window3!r}")
        if self.engine_window3:
            if self.engine_pe == "plain":
                raise ConfigError("engine_window3 needs engine_pe = 'reuse' or 'reuse-pv' "
                                  "(BaselinePEs have no decode table), got engine_pe = "
                                  "'plain'")
            if self.cols > self.rows:
                raise ConfigError(f"engine_window3 needs cols <= rows (the sequencer fetches "
                                  f"a quad's row words just in time), got cols = {self.cols} "
                                  f"and rows = {self.rows}")
        check_int("sched_entries", self.sched_entries, 4, 256)
        check_int("sched_pattern_width", self.sched_pattern_width, 4, 64)
        if self.sched_pattern_width % 4:
            raise ConfigError(
                f"sched_pattern_width must be a multiple of 4 in [4, 64], got {self.sched_pattern_width}")
        check_int("sched_clusters", self.sched_clusters, 2, 16)
        if self.sched_entries % self.sched_clusters:
            raise ConfigError(
                f"sched_clusters must divide sched_entries ({self.sched_entries}), "
                f"got {self.sched_clusters}")
        check_int("sched_lfsr_seed", self.sched_lfsr_seed, 1, 0xFFFF)
        if self.sched_sides not in SCHED_SIDES:
            raise ConfigError(f"sched_sides must be one of {', '.join(SCHED_SIDES)}, "
                              f"got {self.sched_sides!r}")
        check_int("matcher_lookahead", self.matcher_lookahead, 1, 16)
        check_int("matcher_channels", self.matcher_channels, 1, 64)
        if self.sched_pattern_width % self.matcher_channels:
            raise ConfigError(
                f"sched_pattern_width must be a multiple of the matcher's channel batch "
                f"matcher_channels ({self.matcher_channels}), got {self.sched_pattern_width}")
        check_int("token_id_width", self.token_id_width, 1, 32)
        check_int("vector_lanes", self.vector_lanes, 1, 64)
        check_int("vector_max_row", self.vector_max_row, self.vector_lanes, 4096,
                   f" (a multiple of vector_lanes = {self.vector_lanes})")
        if self.vector_max_row % self.vector_lanes:
            raise ConfigError(f"vector_max_row must be a multiple of vector_lanes "
                              f"({self.vector_lanes}) in [{self.vector_lanes}, 4096], "
                              f"got {self.vector_max_row}")
        check_int("vector_score_bits", self.vector_score_bits, 16, 32)
        check_int("vector_row_buffers", self.vector_row_buffers, 2, 8)
        check_int("axi_addr_width", self.axi_addr_width, 32, 64)
        if self.axi_data_width not in (32, 64, 128):
            raise ConfigError(f"axi_data_width must be one of 32, 64, 128, "
                              f"got {self.axi_data_width!r}")
        check_int("axi_max_burst", self.axi_max_burst, 1, 256, " (a power of two)")
        if self.axi_max_burst & (self.axi_max_burst - 1):
            raise ConfigError(f"axi_max_burst must be a power of two in [1, 256], "
                              f"got {self.axi_max_burst}")
        check_int("axi_max_outstanding", self.axi_max_outstanding, 1, 16)
        check_int("core_banks", self.core_banks, 1, 4,
                   " (scratchpad banks per side: the 2-bit bank field of LOAD and COMPUTE)")
        if not isinstance(self.core_attention, bool):
            raise ConfigError(f"core_attention must be true or false, got "
                              f"{self.core_attention!r}")

    @property
    def ordered_sides(self) -> tuple[str, ...]:
        """The sides a built scheduler orders: ``("q",)`` or ``("q", "k")`` (``sched_sides``)."""
        return tuple(self.sched_sides)

    @property
    def groups(self) -> ChannelGroups:
        """The channel partition of ``preset``."""
        return ChannelGroups.from_preset(self.preset)

    @property
    def largest_group(self) -> int:
        """Channels in the preset's largest group (sizes ``acc_width``)."""
        return max(self.groups.sizes)

    # -- (de)serialisation -------------------------------------------------------------------

    @classmethod
    def keys(cls) -> list[str]:
        """Every configuration key, in field order."""
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_dict(cls, values: dict) -> "KaleidoConfig":
        """Build from a dict; unknown keys raise :class:`ConfigError` naming them."""
        unknown = sorted(set(values) - set(cls.keys()))
        if unknown:
            raise ConfigError(
                f"unknown configuration key(s) {', '.join(unknown)}; "
                f"allowed keys: {', '.join(cls.keys())}")
        return cls(**values)

    @classmethod
    def from_toml(cls, path) -> "KaleidoConfig":
        """Load a TOML file of configuration keys; errors name the file or the key."""
        path = Path(path)
        try:
            values = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"config file {path} is not valid TOML: {e}") from None
        return cls.from_dict(values)

    def to_dict(self) -> dict:
        """Every key with its value (the manifest's ``config``)."""
        return dataclasses.asdict(self)

    def changed(self) -> dict:
        """The keys whose value differs from the default, with their values."""
        default = dataclasses.asdict(type(self)())
        return {k: v for k, v in self.to_dict().items() if v != default[k]}

    def to_toml(self, every_key: bool = False) -> str:
        """A TOML file :meth:`from_toml` reads back as this configuration: the
        :meth:`changed` keys, or with ``every_key`` all of them."""
        values = self.to_dict() if every_key else self.changed()
        # The keys' values are ints, strings and bools, which JSON writes as TOML does.
        return "".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items())

    def replace(self, **changes) -> "KaleidoConfig":
        """A validated copy with the given keys changed."""
        return dataclasses.replace(self, **changes)
