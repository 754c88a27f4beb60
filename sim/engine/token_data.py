"""Test data shared by the engine tests and benches: int8 tokens that look like a smooth
latent video."""

from __future__ import annotations

import numpy as np


def smooth_tokens(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    """``n`` x ``d`` random-walk int8 tokens (steps in [-12, 12] from a random start per
    channel): neighbours are close, so FULL, HALF and NONE codes all occur."""
    steps = rng.integers(-12, 13, (n, d))
    return np.clip(np.cumsum(steps, axis=0) + rng.integers(-40, 40, d), -128, 127).astype(np.int8)
