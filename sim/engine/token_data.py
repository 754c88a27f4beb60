"""Test data shared by the engine tests and benches: int8 tokens that look like a smooth
latent video."""

from __future__ import annotations

import numpy as np


def smooth_tokens(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    """``n`` x ``d`` random-walk int8 tokens (steps in [-12, 12] from a random start per
    channel): neighbours are close, so FULL, HALF and NONE codes all occur."""
    steps = rng.integers(-12, 13, (n, d))
    return np.clip(np.cumsum(steps, axis=0) + rng.integers(-40, 40, d), -128, 127).astype(np.int8)


def smooth_tensors(grid, d: int, seed: int, count: int) -> tuple:
    """``count`` tensors of :func:`smooth_tokens` for the tokens of ``grid`` (a ``(T, H, W)``
    tuple), drawn one after the other from ``default_rng(seed)`` (Q, K, then V of a head)."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(tuple(grid)))
    return tuple(smooth_tokens(rng, n, d) for _ in range(count))
