"""Synthetic, deterministic Q/K/V and activations with a video's spatio-temporal correlation
(``docs/numerics.md``, "Workloads").

A latent video is modelled as a field of ``channels`` feature maps per frame:

1. each frame is white noise low-pass filtered with a Gaussian of ``smooth`` tokens (done in
   the 2-D Fourier domain, so the field is periodic in y and x);
2. frame t is frame t-1 moved by ``motion`` tokens/frame (a sub-token Fourier shift, along x
   for a scalar, ``(vy, vx)`` for a pair), mixed with a fresh field of relative weight
   ``noise`` (the content that is new in each frame): ``F_t = sqrt(1-noise**2) * shift(F_{t-1})
   + noise * G_t``;
3. white ``grain`` (relative std) is added per token, standing for detail below the latent's
   resolution.

Each head projects the field with Gaussian weights, adds a per-channel offset (``bias``, in
units of the channel's std; real Q/K carry strong per-channel means), scales each RoPE pair by a
log-normal magnitude (``channel_spread``: real Q/K have a few large channels and many small
ones), applies 3D RoPE with the preset's partition, theta and pair layout (V gets no RoPE),
and quantizes every tensor to int8 per tensor. The softmax scale is set so that the float
attention logits have standard deviation ``logit_std``.

Everything is drawn from ``seed``: weights and field use separate streams, so changing
``motion`` or ``noise`` changes the video but not the head's weights.
"""

from __future__ import annotations

import math

import numpy as np

from golden.checks import check_int
from golden.numerics import PRESETS, VideoGrid, as_grid, quantize


__all__ = ["GRIDS", "DEFAULTS", "QKV", "grid_named", "latent_field", "apply_rope", "make_qkv",
           "make_activations"]


#: Named token grids (T x H x W latent tokens): simulation-sized ones and the real sizes.
GRIDS: dict[str, VideoGrid] = {
    "tiny": VideoGrid(2, 4, 4),
    "small": VideoGrid(4, 8, 8),
    "medium": VideoGrid(8, 16, 16),
    "hunyuanvideo-720p": VideoGrid(33, 45, 80),
    "hunyuanvideo-480p": VideoGrid(33, 30, 45),
    "wan-480p": VideoGrid(21, 30, 52),
    "cogvideox": VideoGrid(13, 30, 45),
}

#: Default workload knobs (see the module docstring and docs/numerics.md).
DEFAULTS = {
    "motion": 1.0,          # tokens per frame, along x (fast motion: 3 and more)
    "noise": 0.15,          # relative weight of new content per frame
    "smooth": 1.5,          # spatial correlation length (Gaussian sigma, tokens)
    "grain": 0.02,          # per-token white noise, relative std
    "channels": 32,         # feature maps of the latent field
    "channel_spread": 0.75, # log-normal sigma of the per-pair magnitudes
    "bias": 1.0,            # per-channel offset, in channel stds
    "logit_std": 2.0,       # std of the float attention logits
}


def grid_named(grid) -> VideoGrid:
    """A grid from a name in :data:`GRIDS`, a ``"TxHxW"`` string, a tuple or a VideoGrid."""
    if isinstance(grid, str) and grid.lower() in GRIDS:
        return GRIDS[grid.lower()]
    try:
        return as_grid(grid)
    except ValueError:
        raise ValueError(f"grid must be TxHxW (e.g. 8x16x16) or one of {', '.join(GRIDS)}, "
                         f"got {grid!r}") from None


def _check_real(name, value, lo, hi, lo_open=False):
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if ok:
        value = float(value)
        ok = math.isfinite(value) and (value > lo if lo_open else value >= lo) and value <= hi
    if not ok:
        bracket = "(" if lo_open else "["
        raise ValueError(f"{name} must be a number in {bracket}{lo}, {hi}], got {value!r}")
    return float(value)


def _motion(motion) -> tuple[float, float]:
    if isinstance(motion, (tuple, list)) and len(motion) == 2:
        return (_check_real("motion vy", motion[0], -64, 64),
                _check_real("motion vx", motion[1], -64, 64))
    return (0.0, _check_real("motion", motion, -64, 64))


def latent_field(grid, channels: int = DEFAULTS["channels"], seed: int = 0,
                 motion=DEFAULTS["motion"], noise: float = DEFAULTS["noise"],
                 smooth: float = DEFAULTS["smooth"], grain: float = DEFAULTS["grain"]):
    """(T, H, W, channels) float32 field with unit std per channel (see module docstring)."""
    grid = grid_named(grid)
    channels = check_int("channels", channels, 1, 4096)
    vy, vx = _motion(motion)
    noise = _check_real("noise", noise, 0.0, 1.0)
    smooth = _check_real("smooth", smooth, 0.0, 1e3)
    grain = _check_real("grain", grain, 0.0, 1e3)
    rng = np.random.default_rng([check_int("seed", seed, 0, 2**63 - 1), 0])
    T, H, W = grid.shape
    fy = np.fft.fftfreq(H)[:, None, None]
    fx = np.fft.rfftfreq(W)[None, :, None]
    lowpass = np.exp(-2.0 * (np.pi * smooth) ** 2 * (fy ** 2 + fx ** 2))
    step = np.exp(-2j * np.pi * (fy * vy + fx * vx))
    keep = math.sqrt(1.0 - noise ** 2)

    def fresh():
        return np.fft.rfft2(rng.standard_normal((H, W, channels)), axes=(0, 1)) * lowpass

    field = np.empty((T, H, W, channels))
    spectrum = fresh()
    for t in range(T):  # frames only; every frame is one vectorized 2-D transform
        if t:
            spectrum = keep * spectrum * step + noise * fresh()
        field[t] = np.fft.irfft2(spectrum, s=(H, W), axes=(0, 1))
    field /= field.std(axis=(0, 1, 2), keepdims=True) + 1e-300
    field = field.astype(np.float32)
    if grain:
        field += grain * rng.standard_normal(field.shape, dtype=np.float32)
    return field


def _rope_pairs(first: int, size: int, layout: str):
    """Channel index pairs (c1, c2) that RoPE rotates together inside one group."""
    half = size // 2
    i = np.arange(half)
    if layout == "adjacent":
        return first + 2 * i, first + 2 * i + 1
    return first + i, first + half + i


def apply_rope(x: np.ndarray, grid, preset: str) -> np.ndarray:
    """3D RoPE of a (N, head_dim) float array with the preset's groups, theta and layout.

    In each group of ``n`` channels, pair ``i`` rotates by ``pos * theta**(-2i/n)``, where pos
    is the token's t, y or x coordinate for the t-, y- and x-group. Works on the (T, H, W, d)
    view with per-axis angle tables, so no trigonometry or gather is done per token.
    """
    grid = grid_named(grid)
    p = PRESETS[preset]
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    x4 = x.reshape(grid.shape + (p.head_dim,))
    out = x4.copy()
    first = 0
    for axis, size in enumerate((p.t, p.h, p.w)):
        c1, c2 = _rope_pairs(first, size, p.pair_layout)
        c1 = slice(int(c1[0]), int(c1[-1]) + 1, int(c1[1] - c1[0]) if size > 2 else 1)
        c2 = slice(int(c2[0]), int(c2[-1]) + 1, c1.step)
        freq = p.theta ** (-2.0 * np.arange(size // 2) / size)
        angle = np.arange(grid.shape[axis])[:, None] * freq[None, :]
        shape = [1, 1, 1, size // 2]
        shape[axis] = grid.shape[axis]
        cos = np.cos(angle).reshape(shape).astype(x.dtype)
        sin = np.sin(angle).reshape(shape).astype(x.dtype)
        a, b = x4[..., c1], x4[..., c2]
        out[..., c1] = a * cos - b * sin
        out[..., c2] = a * sin + b * cos
        first += size
    return out.reshape(x.shape)


def _project(field2d, dim, rng, channel_spread, bias, pairs=None):
    """Gaussian projection to ``dim`` channels plus offset and log-normal magnitudes (shared
    by the two channels of a RoPE pair, so the rotation keeps them balanced)."""
    w = rng.standard_normal((field2d.shape[1], dim)) / math.sqrt(field2d.shape[1])
    offset = bias * rng.standard_normal(dim)
    mag = np.exp(channel_spread * rng.standard_normal(dim))
    if pairs is not None:
        mag[pairs[1]] = mag[pairs[0]]
    # (F @ W + offset) * mag with the scaling folded into the weights, in float32.
    return field2d @ (w * mag).astype(np.float32) + (offset * mag).astype(np.float32)


class QKV(tuple):
    """``(q, k, v)``: three (N, head_dim) int8 arrays; unpacks like a tuple.

    Attributes: ``scale`` (softmax scale of the int8 scores: logits = ``S * scale``),
    ``scales`` (the per-tensor quantization steps of q, k, v), ``grid``, ``preset``, ``knobs``
    (the workload parameters used).
    """

    def __new__(cls, q, k, v, scale, scales, grid, preset, knobs):
        self = super().__new__(cls, (q, k, v))
        self.scale, self.scales, self.grid, self.preset, self.knobs = (
            scale, scales, grid, preset, knobs)
        return self

    q = property(lambda self: self[0], doc="Queries, (N, head_dim) int8.")
    k = property(lambda self: self[1], doc="Keys, (N, head_dim) int8.")
    v = property(lambda self: self[2], doc="Values, (N, head_dim) int8.")


def _knobs(motion, noise, smooth, grain, channels, channel_spread, bias, logit_std):
    return {
        "motion": motion, "noise": noise, "smooth": smooth, "grain": grain,
        "channels": channels,
        "channel_spread": _check_real("channel_spread", channel_spread, 0.0, 4.0),
        "bias": _check_real("bias", bias, 0.0, 100.0),
        "logit_std": _check_real("logit_std", logit_std, 0.0, 100.0, lo_open=True),
    }


def make_qkv(preset: str, grid, seed: int = 0, motion=DEFAULTS["motion"],
             noise: float = DEFAULTS["noise"], smooth: float = DEFAULTS["smooth"],
             grain: float = DEFAULTS["grain"], channels: int = DEFAULTS["channels"],
             channel_spread: float = DEFAULTS["channel_spread"], bias: float = DEFAULTS["bias"],
             logit_std: float = DEFAULTS["logit_std"]) -> QKV:
    """int8 ``(q, k, v)`` of one attention head of ``preset`` on ``grid``, from ``seed``.

    ``grid``: a :class:`VideoGrid`, a name in :data:`GRIDS` or ``"TxHxW"``. ``motion`` is in
    tokens per frame (scalar: along x; ``(vy, vx)``: both). See the module docstring for the
    other knobs.
    """
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {', '.join(sorted(PRESETS))}, got {preset!r}")
    grid = grid_named(grid)
    knobs = _knobs(motion, noise, smooth, grain, channels, channel_spread, bias, logit_std)
    field = latent_field(grid, channels, seed, motion, noise, smooth, grain).reshape(grid.n, -1)
    p = PRESETS[preset]
    rng = np.random.default_rng([seed, 1])
    pair_a, pair_b = [], []
    first = 0
    for size in (p.t, p.h, p.w):
        a, b = _rope_pairs(first, size, p.pair_layout)
        pair_a.append(a)
        pair_b.append(b)
        first += size
    pairs = (np.concatenate(pair_a), np.concatenate(pair_b))
    spread, bias = knobs["channel_spread"], knobs["bias"]
    qf = apply_rope(_project(field, p.head_dim, rng, spread, bias, pairs), grid, preset)
    kf = apply_rope(_project(field, p.head_dim, rng, spread, bias, pairs), grid, preset)
    vf = _project(field, p.head_dim, rng, spread, bias)
    # Softmax scale: the float logits q.k/sqrt(d) are rescaled to std logit_std, measured on
    # an even sample of at most 512 tokens (the full N x N would not fit at 720p).
    sample = np.linspace(0, grid.n - 1, min(grid.n, 512)).astype(np.int64)
    logits = qf[sample] @ kf[sample].T / math.sqrt(p.head_dim)
    gain = knobs["logit_std"] / max(float(logits.std()), 1e-12)
    (q, sq), (k, sk), (v, sv) = quantize(qf), quantize(kf), quantize(vf)
    scale = gain * sq * sk / math.sqrt(p.head_dim)
    knobs["seed"] = seed
    return QKV(q, k, v, scale, (sq, sk, sv), grid, preset, knobs)


def make_activations(grid, features: int, seed: int = 0, motion=DEFAULTS["motion"],
                     noise: float = DEFAULTS["noise"], smooth: float = DEFAULTS["smooth"],
                     grain: float = DEFAULTS["grain"], channels: int = DEFAULTS["channels"],
                     channel_spread: float = DEFAULTS["channel_spread"],
                     bias: float = DEFAULTS["bias"]) -> tuple[np.ndarray, float]:
    """(N, features) int8 activation of a linear layer on ``grid`` (no RoPE) and its
    quantization step, from the same latent-field model as :func:`make_qkv`."""
    grid = grid_named(grid)
    features = check_int("features", features, 1, 1 << 16)
    knobs = _knobs(motion, noise, smooth, grain, channels, channel_spread, bias, 1.0)
    field = latent_field(grid, channels, seed, motion, noise, smooth, grain).reshape(grid.n, -1)
    rng = np.random.default_rng([seed, 2])
    return quantize(_project(field, features, rng, knobs["channel_spread"], knobs["bias"]))
