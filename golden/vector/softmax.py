"""Row-wise integer softmax of the vector unit (``docs/numerics.md``, section 14).

For one row ``s`` of int32 scores and the scale pair ``(mult, shift)``:

1. ``d = max(s) - s`` (non-negative; 0 at the row maximum);
2. ``y = (d * mult + 2**(shift - 1)) >> shift``: the exponent ``d * scale * log2(e)`` in
   fixed point with :data:`Y_FRAC_BITS` = 8 fractional bits (``mult`` carries ``log2(e)``);
3. ``E = EXP_LUT[y & 255] >> (y >> 8)``, 0 once ``y >> 8 >= 16``: ``2**(-y/256)`` scaled by
   :data:`EXP_ONE` = 2**15, the fraction through a 256-entry table and the integer part as a
   right shift (truncating); ``E = 2**15`` exactly at the maximum;
4. ``sum = sum(E)`` and one reciprocal per row, ``R = (255 << 32) // sum``;
5. ``P = (E * R + 2**31) >> 32``: uint8, scale 1/255 (``P = 255`` means 1.0).

Every step is an integer operation on int64, vectorised over rows.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from golden.checks import check_int


__all__ = ["EXP_LUT", "EXP_ONE", "MAX_ROW", "MULT_MIN", "MULT_MAX", "P_ONE", "RECIP_BITS",
           "SHIFT_MAX", "SHIFT_MIN", "Y_FRAC_BITS", "SoftmaxScale", "exp_fixed", "exponent", "scale_of",
           "softmax_int", "softmax_scale", "softmax_stages"]

#: Fractional bits of the base-2 exponent ``y`` (the exp table has ``2**Y_FRAC_BITS`` entries).
Y_FRAC_BITS = 8
#: Fixed-point one of the exponential: ``E`` of the row maximum.
EXP_BITS = 15
EXP_ONE = 1 << EXP_BITS
#: Integer parts of ``y`` at and above this give ``E = 0`` (every table entry is <= 2**15).
EXP_ZERO_SHIFT = EXP_BITS + 1
#: ``P`` of a probability of 1.0 (P is uint8 with scale 1/255).
P_ONE = 255
#: Fractional bits of the row reciprocal ``R = (255 << RECIP_BITS) // sum``.
RECIP_BITS = 32
#: The multiplier is normalised to 16 bits: ``2**15 <= mult < 2**16``.
MULT_BITS = 16
MULT_MIN, MULT_MAX = 1 << (MULT_BITS - 1), (1 << MULT_BITS) - 1
#: Allowed right shifts of ``d * mult``.
SHIFT_MIN, SHIFT_MAX = 1, 47
#: Longest row of the golden model (the RTL's is ``KaleidoConfig.vector_max_row``).
MAX_ROW = 1 << 20
#: Scores are int32.
SCORE_MIN, SCORE_MAX = -(1 << 31), (1 << 31) - 1


def _exp_table() -> np.ndarray:
    """``round(2**15 * 2**(-f/256))`` for f in 0..255 (round half up; no entry is within 1e-6
    of a tie, so the float64 evaluation is exact after rounding)."""
    exact = EXP_ONE * np.exp2(-np.arange(1 << Y_FRAC_BITS, dtype=np.float64) / (1 << Y_FRAC_BITS))
    table = np.floor(exact + 0.5).astype(np.int64)
    assert np.all(np.abs(exact - np.floor(exact) - 0.5) > 1e-6)
    return table


#: The exp table: ``EXP_LUT[f] = round(2**15 * 2**(-f / 256))``, 16-bit unsigned,
#: ``EXP_LUT[0] = 2**15`` and every other entry in (2**14, 2**15).
EXP_LUT = _exp_table()
EXP_LUT.setflags(write=False)


class SoftmaxScale(NamedTuple):
    """The softmax scale in fixed point: logits in base 2 are ``d * mult * 2**-(shift + 8)``."""
    mult: int
    shift: int


def softmax_scale(scale: float) -> SoftmaxScale:
    """The fixed-point pair of a float softmax ``scale`` (logits = ``S * scale``).

    ``c = scale * log2(e)`` (float64) is written ``f * 2**e`` with ``f`` in [0.5, 1)
    (``math.frexp``, exact); ``mult = round(f * 2**16)`` (half to even) and
    ``shift = 8 - e``, so ``mult * 2**-(shift + 8) = c`` to 2**-17 relative. When the rounding
    gives 2**16, ``mult = 2**15`` and ``shift`` drops by one. Scales whose shift falls outside
    [1, 47] (``scale`` outside about [6.3e-13, 88.7]) are rejected.
    """
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer, np.floating)) \
            or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    c = float(scale) * math.log2(math.e)
    f, e = math.frexp(c)
    mult, shift = round(f * (1 << MULT_BITS)), Y_FRAC_BITS - e
    if mult == 1 << MULT_BITS:
        mult, shift = MULT_MIN, shift - 1
    if not SHIFT_MIN <= shift <= SHIFT_MAX:
        lo, hi = scale_of(MULT_MIN, SHIFT_MAX), scale_of(MULT_MAX, SHIFT_MIN)
        raise ValueError(f"scale must lie in [{lo:.3g}, {hi:.3g}] (a shift in [{SHIFT_MIN}, "
                         f"{SHIFT_MAX}] with a 16-bit multiplier), got {scale!r}")
    return SoftmaxScale(int(mult), int(shift))


def scale_of(mult: int, shift: int) -> float:
    """The float softmax scale that ``(mult, shift)`` stands for (natural-log logits)."""
    return mult * 2.0 ** -(shift + Y_FRAC_BITS) / math.log2(math.e)


def _check_scale(mult, shift) -> tuple[int, int]:
    mult = check_int("mult", mult, MULT_MIN, MULT_MAX, " (a normalised 16-bit multiplier)")
    shift = check_int("shift", shift, SHIFT_MIN, SHIFT_MAX)
    return mult, shift


def _as_scores(s) -> np.ndarray:
    a = np.asarray(s)
    if a.ndim not in (1, 2):
        raise ValueError(f"s must be one row (n,) or rows (r, n) of scores, got shape {a.shape}")
    if not 1 <= a.shape[-1] <= MAX_ROW:
        raise ValueError(f"s must have a row length in [1, {MAX_ROW}], got {a.shape[-1]}")
    if a.dtype == np.bool_ or not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"s must be an integer array of int32 scores, got dtype {a.dtype}")
    if a.size and (a.min() < SCORE_MIN or a.max() > SCORE_MAX):
        raise ValueError(f"s values must lie in [{SCORE_MIN}, {SCORE_MAX}] (int32), "
                         f"got values in [{a.min()}, {a.max()}]")
    return a.astype(np.int64)


def exp_fixed(y) -> np.ndarray:
    """``E = EXP_LUT[y & 255] >> (y >> 8)`` (0 once ``y >> 8 >= 16``) of exponents ``y >= 0``."""
    y = np.asarray(y, dtype=np.int64)
    k = y >> Y_FRAC_BITS
    e = EXP_LUT[y & ((1 << Y_FRAC_BITS) - 1)] >> np.minimum(k, EXP_ZERO_SHIFT - 1)
    return np.where(k < EXP_ZERO_SHIFT, e, 0)


def exponent(d, mult: int, shift: int):
    """Step 2: ``y = (d * mult + 2**(shift-1)) >> shift`` of score distances ``d >= 0``, the
    base-2 exponent with :data:`Y_FRAC_BITS` fractional bits (``mult``, ``shift`` checked by
    the caller)."""
    return (d * mult + (1 << (shift - 1))) >> shift


def softmax_stages(s, mult: int, shift: int) -> dict:
    """Every intermediate of :func:`softmax_int` (int64 arrays; per row: ``max``, ``sum``,
    ``recip``; per element: ``d``, ``y``, ``e``, ``p``), for tests and bench diagnostics."""
    mult, shift = _check_scale(mult, shift)
    s = _as_scores(s)
    smax = s.max(axis=-1, keepdims=True)
    d = smax - s
    y = exponent(d, mult, shift)
    e = exp_fixed(y)
    total = e.sum(axis=-1, keepdims=True)
    recip = (P_ONE << RECIP_BITS) // total
    p = (e * recip + (1 << (RECIP_BITS - 1))) >> RECIP_BITS
    return {"max": smax[..., 0], "d": d, "y": y, "e": e, "sum": total[..., 0],
            "recip": recip[..., 0], "p": p}


def softmax_int(s, mult: int, shift: int) -> np.ndarray:
    """uint8 ``P`` (scale 1/255) of each row of int32 scores ``s`` ((n,) or (rows, n)).

    ``mult``, ``shift``: the scale pair of :func:`softmax_scale`.
    """
    return softmax_stages(s, mult, shift)["p"].astype(np.uint8)
