"""Input validation shared by the golden model (``docs/numerics.md``, "Inputs").

Every check raises :class:`ValueError` with one line that names the parameter and its allowed
values; the CLI turns that line into an error message and exit code 2. Nothing here imports
the rest of the package, so every golden module can use it.
"""

from __future__ import annotations

import numpy as np


__all__ = ["check_int", "check_bits", "check_window", "as_int8", "check_tokens", "as_codes",
           "check_axes"]


def check_int(name: str, value, lo: int, hi: int, extra: str = "") -> int:
    """``value`` as an int in ``[lo, hi]``; bools and non-integers are rejected."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer in [{lo}, {hi}]{extra}, got {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be an integer in [{lo}, {hi}]{extra}, got {value}")
    return int(value)


def check_bits(full_bits, half_bits) -> tuple[int, int]:
    """Reuse thresholds: ``0 <= half_bits < full_bits <= 7``."""
    full_bits = check_int("full_bits", full_bits, 1, 7)
    half_bits = check_int("half_bits", half_bits, 0, full_bits - 1,
                          f" (below full_bits = {full_bits})")
    return full_bits, half_bits


def check_window(window) -> int:
    """Window of the activation-side rule: 2 or 3 tokens."""
    return check_int("window", window, 2, 3)


def as_int8(x, name: str = "x") -> np.ndarray:
    """``x`` as an int8 ndarray.

    int8 passes through untouched (no copy); any other integer dtype is accepted when all its
    values lie in [-128, 127]. Floats, bools and objects are rejected: the contract is integer
    arithmetic, and silently rounding would hide a quantization bug.
    """
    a = np.asarray(x)
    if a.dtype == np.int8:
        return a
    if a.dtype == np.bool_ or not np.issubdtype(a.dtype, np.integer):
        raise ValueError(
            f"{name} must be an int8 array (or integers in [-128, 127]), got dtype {a.dtype}")
    if a.size and (a.min() < -128 or a.max() > 127):
        raise ValueError(
            f"{name} values must lie in [-128, 127] (int8), got values in [{a.min()}, {a.max()}]")
    return a.astype(np.int8)


def check_tokens(a: np.ndarray, name: str, n: int, grid_text: str, d: int | None = None,
                 what: str = "head_dim") -> None:
    """``a`` must be ``(n, d)``: one row per token of the grid (``d`` free when None)."""
    want_d = "d" if d is None else str(d)
    ok = a.ndim == 2 and a.shape[0] == n and (d is None or a.shape[1] == d)
    if not ok or a.shape[1] < 1:
        suffix = "" if d is None else f" and {what} {d}"
        raise ValueError(
            f"{name} must have shape (N, {want_d}) = ({n}, {want_d}) for grid {grid_text}"
            f"{suffix}, got {tuple(a.shape)}")


def as_codes(m, name: str = "masks") -> np.ndarray:
    """Reuse-code array as uint8 with values in {0 FULL, 1 HALF, 2 NONE}."""
    a = np.asarray(m)
    if a.dtype == np.bool_ or not np.issubdtype(a.dtype, np.integer):
        raise ValueError(
            f"{name} must be an integer array of codes 0 (FULL), 1 (HALF), 2 (NONE), "
            f"got dtype {a.dtype}")
    if a.dtype != np.uint8:
        if a.size and (a.min() < 0 or a.max() > 2):
            raise ValueError(
                f"{name} codes must be 0 (FULL), 1 (HALF) or 2 (NONE), "
                f"got values in [{a.min()}, {a.max()}]")
        a = a.astype(np.uint8)
    elif a.size and a.max() > 2:
        raise ValueError(
            f"{name} codes must be 0 (FULL), 1 (HALF) or 2 (NONE), got a value {a.max()}")
    if a.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (tokens, channels), got shape {a.shape}")
    return a


def check_axes(directions, channels: int, name: str = "directions") -> np.ndarray:
    """Per-channel reuse axes: one int in {0 t, 1 y, 2 x} for all, or one per channel."""
    allowed = "0 (t), 1 (y) or 2 (x)"
    if isinstance(directions, str):
        text = directions.lower()
        if text in ("t", "y", "x"):
            directions = "tyx".index(text)
        else:
            raise ValueError(f"{name} must be {allowed} (or 't', 'y', 'x'), got {directions!r}")
    d = np.asarray(directions)
    if d.dtype == np.bool_ or not np.issubdtype(d.dtype, np.integer):
        raise ValueError(f"{name} must be {allowed}, one for all channels or one per channel, "
                         f"got {directions!r}")
    if d.ndim == 0:
        d = np.full(channels, int(d), dtype=np.int64)
    if d.shape != (channels,):
        raise ValueError(f"{name} must be a single axis or one per channel ({channels}), "
                         f"got shape {d.shape}")
    if d.size and (d.min() < 0 or d.max() > 2):
        raise ValueError(f"{name} values must be {allowed}, got {sorted(set(d.tolist()))}")
    return d.astype(np.int64)
