"""Token grid, channel groups and presets of the numerics contract (``docs/numerics.md``).

Plain numpy; no hardware imports. Everything the RTL must reproduce is defined here and in
the modules beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


__all__ = [
    "AXES", "AXIS_T", "AXIS_Y", "AXIS_X", "GROUP_NAMES",
    "Preset", "PRESETS", "VideoGrid", "ChannelGroups",
]

#: Token-grid axes, in the order of the flattening ``n = (t*H + y)*W + x``.
AXIS_T, AXIS_Y, AXIS_X = 0, 1, 2
AXES = ("t", "y", "x")
#: Channel groups are named after the axis whose position their RoPE encodes.
GROUP_NAMES = ("t", "y", "x")
#: The contract's reuse direction of each group: t-group along x, y-group along t,
#: x-group along y (a group never reuses along the axis it encodes).
DEFAULT_DIRECTIONS = (AXIS_X, AXIS_T, AXIS_Y)


@dataclass(frozen=True)
class Preset:
    """A model's 3D-RoPE channel partition of one attention head.

    ``t``, ``h`` and ``w`` are contiguous channel counts, in that order. ``pair_layout`` is
    how RoPE pairs channels within a group: ``"adjacent"`` rotates (2i, 2i+1), ``"split"``
    rotates (i, i + n/2).
    """
    name: str
    head_dim: int
    t: int
    h: int
    w: int
    theta: float
    pair_layout: str


PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("hunyuanvideo",      128, 16, 56, 56, 256.0,   "adjacent"),
    Preset("wan2.1",            128, 44, 42, 42, 10000.0, "adjacent"),
    Preset("longcat",           128, 44, 42, 42, 10000.0, "adjacent"),
    # The paper's Table 1 lists 32/48/48 for CogVideoX; the model's code (5B, head_dim 64)
    # uses 16/24/24, which is what we follow.
    Preset("cogvideox-5b",       64, 16, 24, 24, 10000.0, "adjacent"),
    Preset("opensora-plan-1.3",  96, 32, 32, 32, 10000.0, "split"),
)}


def _positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class VideoGrid:
    """A latent video of ``t`` frames x ``h`` rows x ``w`` columns.

    Token ``n = (t*H + y)*W + x``: t-major, x fastest, as HunyuanVideo and Wan flatten.
    """
    t: int
    h: int
    w: int

    def __post_init__(self):
        for axis in ("t", "h", "w"):
            object.__setattr__(self, axis, _positive_int(f"grid {axis}", getattr(self, axis)))

    @classmethod
    def parse(cls, text: str) -> "VideoGrid":
        """``"TxHxW"``, e.g. ``"8x16x16"``."""
        parts = str(text).lower().split("x")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ValueError(
                f"grid must be TxHxW with three positive integers (e.g. 8x16x16), got {text!r}")
        return cls(*(int(p) for p in parts))

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.t, self.h, self.w)

    @property
    def n(self) -> int:
        return self.t * self.h * self.w

    def __str__(self):
        return f"{self.t}x{self.h}x{self.w}"

    def coords(self) -> np.ndarray:
        """(N, 3) int array of each token's (t, y, x)."""
        t, y, x = np.meshgrid(np.arange(self.t), np.arange(self.h), np.arange(self.w),
                              indexing="ij")
        return np.stack([t.ravel(), y.ravel(), x.ravel()], axis=1)

    def stride(self, axis: int) -> int:
        """Token-index distance between neighbours along ``axis``."""
        return (self.h * self.w, self.w, 1)[axis]


@dataclass(frozen=True)
class ChannelGroups:
    """The map from a head's channels to the t-, y- and x-groups, and each group's direction.

    ``group_of[c]`` is 0 (t), 1 (y) or 2 (x). ``directions[g]`` is the grid axis (0 t, 1 y,
    2 x) along which group ``g`` reuses; by default t along x, y along t, x along y.
    """
    group_of: tuple[int, ...]
    directions: tuple[int, int, int] = DEFAULT_DIRECTIONS
    name: str = "custom"

    def __post_init__(self):
        group_of = tuple(int(g) for g in np.asarray(self.group_of).ravel())
        if not group_of:
            raise ValueError("channel-to-group map must name at least one channel")
        bad = sorted({g for g in group_of if g not in (0, 1, 2)})
        if bad:
            raise ValueError(
                f"channel-to-group map values must be 0 (t), 1 (y) or 2 (x), got {bad}")
        directions = tuple(int(d) for d in self.directions)
        if len(directions) != 3 or any(d not in (0, 1, 2) for d in directions):
            raise ValueError(
                f"directions must be three axes, each 0 (t), 1 (y) or 2 (x), got {self.directions!r}")
        object.__setattr__(self, "group_of", group_of)
        object.__setattr__(self, "directions", directions)

    @classmethod
    def from_preset(cls, name: str, directions=DEFAULT_DIRECTIONS) -> "ChannelGroups":
        if name not in PRESETS:
            raise ValueError(f"preset must be one of {', '.join(sorted(PRESETS))}, got {name!r}")
        p = PRESETS[name]
        return cls((0,) * p.t + (1,) * p.h + (2,) * p.w, directions, name)

    @classmethod
    def from_sizes(cls, t: int, h: int, w: int, directions=DEFAULT_DIRECTIONS) -> "ChannelGroups":
        """Contiguous t, h, w groups of the given sizes (a size may be 0)."""
        for n, v in (("t", t), ("h", h), ("w", w)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"group size {n} must be a non-negative integer, got {v!r}")
        return cls((0,) * t + (1,) * h + (2,) * w, directions, f"custom-{t}-{h}-{w}")

    @property
    def head_dim(self) -> int:
        return len(self.group_of)

    @property
    def group_array(self) -> np.ndarray:
        return np.asarray(self.group_of, dtype=np.int64)

    @property
    def sizes(self) -> tuple[int, int, int]:
        g = self.group_array
        return tuple(int((g == i).sum()) for i in range(3))

    def channels(self, group: int) -> np.ndarray:
        """Channel indices of ``group``, ascending."""
        return np.flatnonzero(self.group_array == group)

    def channel_directions(self) -> np.ndarray:
        """(d,) reuse axis of every channel."""
        return np.asarray(self.directions, dtype=np.int64)[self.group_array]
