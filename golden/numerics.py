"""The numerics contract of channel-wise reuse (``docs/numerics.md``): token grid, channel
groups, presets, the pairing of tokens, the FULL/HALF/NONE decision, the effective operand,
the exact attention scores and the oracle op accounting.

Plain, vectorized numpy; no hardware imports and no Python loop over tokens. Everything the
RTL must reproduce is defined here and in the modules beside it (``golden.window`` for the
activation-side window rule, ``golden.quality`` for the float64 quality figures).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from golden.checks import as_codes, as_int8, check_bits, check_int, check_tokens


__all__ = [
    "AXES", "AXIS_T", "AXIS_Y", "AXIS_X", "GROUP_NAMES", "DEFAULT_DIRECTIONS",
    "Preset", "PRESETS", "VideoGrid", "ChannelGroups", "as_grid",
    "FULL", "HALF", "NONE", "CODE_NAMES",
    "quantize", "anchor_index", "follower_mask", "reuse_masks", "effective_operand",
    "exact_matmul", "attention_scores", "code_counts", "oracle_from_counts", "oracle_ops",
    "oracle_cap", "MAX_PRODUCT", "RESULT_CHANNELS", "group_channels",
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
        """``(T, H, W)``."""
        return (self.t, self.h, self.w)

    @property
    def n(self) -> int:
        """Number of tokens, T*H*W."""
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
        """The channel partition of a named preset (``PRESETS``): t-, then y-, then x-channels."""
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
        """Channels per token, d."""
        return len(self.group_of)

    @property
    def group_array(self) -> np.ndarray:
        """Group of every channel as an int64 array (0 t, 1 y, 2 x)."""
        return np.asarray(self.group_of, dtype=np.int64)

    @property
    def sizes(self) -> tuple[int, int, int]:
        """Channels in the t, y and x groups."""
        g = self.group_array
        return tuple(int((g == i).sum()) for i in range(3))

    def channels(self, group: int) -> np.ndarray:
        """Channel indices of ``group``, ascending."""
        return np.flatnonzero(self.group_array == group)

    def channel_directions(self) -> np.ndarray:
        """(d,) reuse axis of every channel."""
        return np.asarray(self.directions, dtype=np.int64)[self.group_array]


def as_grid(grid) -> VideoGrid:
    """A :class:`VideoGrid`, or a ``"TxHxW"`` string, or a ``(t, h, w)`` tuple, as a grid."""
    if isinstance(grid, VideoGrid):
        return grid
    if isinstance(grid, str):
        return VideoGrid.parse(grid)
    if isinstance(grid, (tuple, list)) and len(grid) == 3:
        return VideoGrid(*grid)
    raise ValueError(f"grid must be a VideoGrid or TxHxW (e.g. 8x16x16), got {grid!r}")


def _as_groups(groups) -> ChannelGroups:
    if isinstance(groups, ChannelGroups):
        return groups
    if isinstance(groups, str):
        return ChannelGroups.from_preset(groups)
    raise ValueError(
        f"groups must be a ChannelGroups or a preset name ({', '.join(sorted(PRESETS))}), "
        f"got {groups!r}")


# -- reuse codes ------------------------------------------------------------------------------

#: Per-(token, channel) reuse codes. FULL: take the anchor's value; HALF: the high part equals
#: the anchor's (compute only the low bits); NONE: compute. Anchors and unpaired tokens are NONE.
FULL, HALF, NONE = 0, 1, 2
CODE_NAMES = ("FULL", "HALF", "NONE")


def quantize(x) -> tuple[np.ndarray, float]:
    """Symmetric per-tensor int8 quantization: ``s = max|x| / 127``, ``q = clip(round(x/s))``.

    Rounding is numpy's half-to-even, in the input's float precision (float64 for integer
    input). An all-zero tensor gets ``s = 1``. Returns ``(q, s)`` with ``x ~= q * s``.
    """
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    peak = float(np.max(np.abs(x))) if x.size else 0.0
    s = peak / 127.0 if peak > 0 else 1.0
    q = np.clip(np.round(x / s), -128, 127).astype(np.int8)
    return q, s


# -- pairing ----------------------------------------------------------------------------------

def _pair_slices(axis: int, length: int, channels):
    """Index tuples into a (T, H, W, d) array selecting, for ``channels``, the anchors and the
    followers along ``axis``: anchors at even coordinates 0, 2, .., followers one later.
    None when the axis has fewer than two tokens (nobody is paired)."""
    pairs = length // 2
    if pairs == 0:
        return None, None
    anchors = [slice(None)] * 3 + [channels]
    followers = list(anchors)
    anchors[axis] = slice(0, 2 * pairs, 2)
    followers[axis] = slice(1, 2 * pairs, 2)
    return tuple(anchors), tuple(followers)


def _axis_channels(channel_axes: np.ndarray):
    """``[(axis, channels)]`` for every axis that some channel reuses along. ``channels`` is a
    slice when the channels are contiguous (a view, no copy), else an index array."""
    out = []
    for axis in range(3):
        idx = np.flatnonzero(channel_axes == axis)
        if idx.size == 0:
            continue
        if idx[-1] - idx[0] + 1 == idx.size:
            out.append((axis, slice(int(idx[0]), int(idx[-1]) + 1)))
        else:
            out.append((axis, idx))
    return out


def anchor_index(grid, axis: int) -> np.ndarray:
    """(N,) int64: for every token, the index of its anchor along ``axis``, or -1 for anchors
    and unpaired tokens.

    A token whose coordinate on ``axis`` is even and that has a successor on ``axis`` is an
    anchor; the successor (coordinate + 1) is its follower.
    """
    grid = as_grid(grid)
    axis = check_int("axis", axis, 0, 2, " (0 t, 1 y, 2 x)")
    out = np.full(grid.shape, -1, dtype=np.int64)
    anchors, followers = _pair_slices(axis, grid.shape[axis], slice(None))
    if anchors is not None:
        idx = np.arange(grid.n, dtype=np.int64).reshape(grid.shape)
        out[followers[:3]] = idx[anchors[:3]]
    return out.ravel()


def follower_mask(grid, groups) -> np.ndarray:
    """(N, d) bool: True where token n is a follower along channel c's reuse direction."""
    grid, groups = as_grid(grid), _as_groups(groups)
    out = np.zeros(grid.shape + (groups.head_dim,), dtype=bool)
    for axis, chans in _axis_channels(groups.channel_directions()):
        _, followers = _pair_slices(axis, grid.shape[axis], chans)
        if followers is not None:
            out[followers] = True
    return out.reshape(grid.n, groups.head_dim)


# -- masks and effective operand --------------------------------------------------------------

def _check_operand(x, name, grid, groups):
    x = as_int8(x, name)
    check_tokens(x, name, grid.n, str(grid), groups.head_dim)
    return np.ascontiguousarray(x).reshape(grid.shape + (groups.head_dim,))


def reuse_masks(x, grid, groups, full_bits: int = 5, half_bits: int = 3) -> np.ndarray:
    """(N, d) uint8 reuse codes of one operand (Q or K), from its own values.

    Per channel c, along its group's direction: a follower ``b`` with anchor ``a`` is FULL
    when the top ``1 + full_bits`` bits of the int8 values agree, else HALF when the top
    ``1 + half_bits`` bits agree, else NONE. The bits agree exactly when the XOR, read as an
    unsigned byte, is below ``2**(7 - bits)``; so the whole decision is one XOR and two
    compares on bytes. Anchors and unpaired tokens are NONE.
    """
    grid, groups = as_grid(grid), _as_groups(groups)
    full_bits, half_bits = check_bits(full_bits, half_bits)
    x4 = _check_operand(x, "x", grid, groups).view(np.uint8)
    masks = np.full(x4.shape, NONE, dtype=np.uint8)
    full_limit = np.uint8(1 << (7 - full_bits))
    half_limit = np.uint8(1 << (7 - half_bits))
    for axis, chans in _axis_channels(groups.channel_directions()):
        anchors, followers = _pair_slices(axis, grid.shape[axis], chans)
        if anchors is None:
            continue
        diff = x4[anchors] ^ x4[followers]
        # FULL -> 0 + 0, HALF -> 1 + 0, NONE -> 1 + 1 (full_limit < half_limit).
        code = (diff >= full_limit).view(np.uint8)
        code += diff >= half_limit
        masks[followers] = code
    return masks.reshape(grid.n, groups.head_dim)


def _effective(x4: np.ndarray, m4: np.ndarray, grid: VideoGrid, groups: ChannelGroups):
    out = x4.copy()
    for axis, chans in _axis_channels(groups.channel_directions()):
        anchors, followers = _pair_slices(axis, grid.shape[axis], chans)
        if anchors is not None:
            out[followers] = np.where(m4[followers] == FULL, x4[anchors], x4[followers])
    return out


def _check_masks(masks, name, grid, groups):
    m = as_codes(masks, name)
    check_tokens(m, name, grid.n, str(grid), groups.head_dim)
    m4 = np.ascontiguousarray(m).reshape(grid.shape + (groups.head_dim,))
    stray = (m4 != NONE) & ~follower_mask(grid, groups).reshape(m4.shape)
    if stray.any():
        n, c = (int(i) for i in np.argwhere(stray.reshape(grid.n, -1))[0])
        raise ValueError(
            f"{name} may mark FULL or HALF only on followers (anchors and unpaired tokens are "
            f"NONE = 2), got code {int(m4.reshape(grid.n, -1)[n, c])} at token {n} channel {c}")
    return m4


def effective_operand(x, masks, grid, groups) -> np.ndarray:
    """(N, d) int8: the operand the accelerator effectively multiplies.

    A FULL follower takes its anchor's value; HALF and NONE keep their own (a HALF follower's
    high part equals its anchor's, so reusing that partial product is exact).
    """
    grid, groups = as_grid(grid), _as_groups(groups)
    x4 = _check_operand(x, "x", grid, groups)
    m4 = _check_masks(masks, "masks", grid, groups)
    return _effective(x4, m4, grid, groups).reshape(grid.n, groups.head_dim)


# -- exact products ---------------------------------------------------------------------------

#: Largest integer below which every float32 / float64 sum of integers is exact.
_F32_EXACT, _F64_EXACT = 1 << 24, 1 << 53
#: Output elements computed per float block (bounds the float temporary to ~32 MB).
_BLOCK_ELEMENTS = 1 << 22


#: Largest |product| of two int8 values: (-128) * (-128).
MAX_PRODUCT = 1 << 14
#: Most int8 products an int32 sum holds exactly: ``n * 2^14 < 2^31``.
RESULT_CHANNELS = ((1 << 31) - 1) // MAX_PRODUCT


def group_channels(acc_width: int) -> int:
    """Most products of int8 values a signed ``acc_width``-bit accumulator sums exactly:
    ``n * 2^14 < 2^(acc_width - 1)``."""
    return ((1 << (acc_width - 1)) - 1) // MAX_PRODUCT


def exact_matmul(a, b) -> np.ndarray:
    """int64 ``a @ b`` of two integer matrices, computed exactly with float BLAS.

    Every partial sum is an integer of magnitude at most ``max|a| * max|b| * K``; below
    ``2**24`` (float32) or ``2**53`` (float64) each rounding step is exact whatever order BLAS
    adds in, so the result is bit-identical to an int64 matmul and 20-30x faster. For int8
    operands float32 suffices up to K = 1024. Larger bounds fall back to int64 ``np.matmul``.
    """
    a, b = np.asarray(a), np.asarray(b)
    for name, m in (("a", a), ("b", b)):
        if m.ndim != 2 or m.dtype == np.bool_ or not np.issubdtype(m.dtype, np.integer):
            raise ValueError(f"{name} must be a 2-D integer matrix, got {m.dtype} {m.shape}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions must agree, got {a.shape} @ {b.shape}")
    peak = lambda m: int(np.max(np.abs(m.astype(np.int64)))) if m.size else 0  # noqa: E731
    bound = peak(a) * peak(b) * a.shape[1]
    if bound > _F64_EXACT:
        return np.matmul(a.astype(np.int64), b.astype(np.int64))
    ftype = np.float32 if bound <= _F32_EXACT else np.float64
    af, bf = a.astype(ftype), b.astype(ftype)
    out = np.empty((a.shape[0], b.shape[1]), dtype=np.int64)
    rows = max(1, _BLOCK_ELEMENTS // max(1, b.shape[1]))
    for r in range(0, a.shape[0], rows):
        out[r:r + rows] = af[r:r + rows] @ bf
    return out


def attention_scores(q, k, grid, groups, full_bits: int = 5, half_bits: int = 3) -> np.ndarray:
    """(N, N) int64 reuse-accelerated scores ``S = Q_eff @ K_eff.T``; the RTL reproduces it.

    Masks are computed separately for Q and K, each from its own values.
    """
    grid, groups = as_grid(grid), _as_groups(groups)
    full_bits, half_bits = check_bits(full_bits, half_bits)
    q4 = _check_operand(q, "q", grid, groups)
    k4 = _check_operand(k, "k", grid, groups)
    d = groups.head_dim
    effs = []
    for x4 in (q4, k4):
        m = reuse_masks(x4.reshape(grid.n, d), grid, groups, full_bits, half_bits)
        effs.append(_effective(x4, m.reshape(x4.shape), grid, groups).reshape(grid.n, d))
    return exact_matmul(effs[0], effs[1].T)


# -- oracle op accounting ---------------------------------------------------------------------

def code_counts(masks) -> np.ndarray:
    """(3, d) int64: per channel, how many tokens are FULL, HALF and NONE (rows in code order)."""
    m = as_codes(masks)
    full = np.add.reduce(m == FULL, axis=0, dtype=np.int64)
    none = np.add.reduce(m == NONE, axis=0, dtype=np.int64)
    return np.stack([full, m.shape[0] - full - none, none])


def oracle_from_counts(counts_q, counts_k) -> dict:
    """Oracle QK^T op accounting from per-channel code counts (see :func:`oracle_ops`)."""
    cq = np.asarray(counts_q, dtype=np.int64)
    ck = np.asarray(counts_k, dtype=np.int64)
    if cq.ndim != 2 or cq.shape[0] != 3 or cq.shape != ck.shape:
        raise ValueError(f"code counts must both be (3, d) arrays of one d, got "
                         f"{cq.shape} and {ck.shape}")
    nq, nk = cq.sum(axis=0), ck.sum(axis=0)
    # Per channel: products where neither side is FULL, and those where both are NONE.
    not_full = (nq - cq[FULL]) * (nk - ck[FULL])
    none = int((cq[NONE] * ck[NONE]).sum())
    not_full = int(not_full.sum())
    dense = int((nq * nk).sum())
    half = not_full - none
    cost = none + half / 2
    return {
        "dense": dense,
        "cost": cost,
        "reduction": 1.0 - cost / dense if dense else 0.0,
        "full": dense - not_full,
        "half": half,
        "none": none,
    }


def oracle_ops(mask_q, mask_k) -> dict:
    """Ideal QK^T operation count under reuse, from the masks of Q and K.

    A product ``q[i, c] * k[j, c]`` costs 0 if either side is FULL, 1/2 if either side is HALF
    (and neither FULL), 1 otherwise. Computed from per-channel code counts in O(N*d).

    Returns a dict: ``dense`` (N_q * N_k * d products), ``cost`` (sum of the costs; a multiple
    of 1/2), ``reduction`` (``1 - cost/dense``), and the product counts ``full``, ``half``,
    ``none`` of each cost class.
    """
    mq, mk = as_codes(mask_q, "mask_q"), as_codes(mask_k, "mask_k")
    if mq.shape[1] != mk.shape[1]:
        raise ValueError(f"mask_q and mask_k must have the same number of channels, got "
                         f"{mq.shape[1]} and {mk.shape[1]}")
    return oracle_from_counts(code_counts(mq), code_counts(mk))


def oracle_cap(grid, groups) -> float:
    """Largest QK^T reduction the pairing allows on ``grid`` (0.75 when every reuse axis has
    even length): every follower FULL in both Q and K, so a channel keeps the products of its
    non-followers only, ``(1 - f)**2`` of them for a follower fraction ``f <= 1/2``."""
    grid, groups = as_grid(grid), _as_groups(groups)
    f = np.array([(grid.shape[a] // 2) / grid.shape[a] for a in range(3)])
    fc = f[groups.channel_directions()]
    return float(1.0 - np.mean((1.0 - fc) ** 2))
