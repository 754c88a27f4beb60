"""What reuse costs in accuracy (``docs/numerics.md``, "Quality").

The attention output ``O = softmax(S * scale) @ V`` is computed in float64 for the exact path
and for the reuse path (``S = Q_eff @ K_eff.T``, and ``V_eff`` of the window rule when V is
reused), and compared by MSE, PSNR (peak = max |O_exact|) and cosine similarity. Two skip
baselines at the same saving ratio (the oracle QK^T reduction of the reuse path) show what
reuse buys over sparsity:

* ``skip_smallest``: per query row, the entries with the smallest |S_exact| are dropped from the
  softmax, as many as the saving ratio of the row's N entries (an ideal top-k sparse attention);
* ``skip_masks``: the same masks, but a FULL operand contributes nothing instead of its anchor's
  value and a HALF operand only its own low bits (the part it computes itself).

Both baselines use the same V operand as the reuse path, so they differ from it only in how S
is formed. Every S here is exact (integer-valued float32 BLAS, see :func:`golden.exact_matmul`).
"""

from __future__ import annotations

import math

import numpy as np

from golden.checks import as_int8, check_bits, check_int, check_tokens, check_window
from golden.numerics import (AXIS_T, FULL, HALF, _as_groups, as_grid, effective_operand,
                             oracle_ops, reuse_masks)
from golden.window import linear_ops, window_effective_operand, window_masks


__all__ = ["compare", "skip_operand", "attention_output", "attention_quality"]

#: Score elements per row block (bounds each float64 temporary to ~32 MB).
_BLOCK_ELEMENTS = 1 << 22


def compare(reference, test) -> dict:
    """``mse``, ``psnr`` (dB, peak = max |reference|; inf when equal) and ``cosine`` (of the
    flattened tensors) of ``test`` against ``reference``."""
    ref = np.asarray(reference, dtype=np.float64)
    out = np.asarray(test, dtype=np.float64)
    if ref.shape != out.shape:
        raise ValueError(f"reference and test must have one shape, got {ref.shape} and {out.shape}")
    mse = float(np.mean((out - ref) ** 2)) if ref.size else 0.0
    peak = float(np.max(np.abs(ref))) if ref.size else 0.0
    psnr = math.inf if mse == 0 else (10 * math.log10(peak ** 2 / mse) if peak > 0 else -math.inf)
    norms = float(np.linalg.norm(ref)) * float(np.linalg.norm(out))
    if norms > 0:
        cosine = float(np.dot(ref.ravel(), out.ravel()) / norms)
    else:
        cosine = 1.0 if mse == 0 else 0.0
    return {"mse": mse, "psnr": psnr, "cosine": cosine}


def skip_operand(x, masks, half_bits: int = 3) -> np.ndarray:
    """The skip baseline's operand: FULL -> 0, HALF -> its low ``7 - half_bits`` bits (as a
    non-negative value), NONE -> unchanged."""
    x = as_int8(x, "x")
    half_bits = check_int("half_bits", half_bits, 0, 6)
    m = np.asarray(masks)
    if m.shape != x.shape:
        raise ValueError(f"masks must have the shape of x {x.shape}, got {m.shape}")
    low = np.int8((1 << (7 - half_bits)) - 1)
    out = np.where(m == HALF, x & low, x)
    out[m == FULL] = 0
    return out


def v_operand(v, grid, reuse_v: bool, v_directions, window, full_bits: int, half_bits: int):
    """``(V used, V's operation reduction)``: V itself, or with ``reuse_v`` its effective
    operand under the window rule along ``v_directions`` (``docs/numerics.md`` section 8)."""
    if not reuse_v:
        return v, 0.0
    mv = window_masks(v, grid, v_directions, window, full_bits, half_bits)
    return (window_effective_operand(v, mv, grid, v_directions, window),
            linear_ops(mv, grid.n)["reduction"])


def _score_float(d: int):
    """float32 holds every int8 score exactly while d * 128 * 128 <= 2**24 (d <= 1024)."""
    return np.float32 if d * 128 * 128 <= 1 << 24 else np.float64


def _softmax(logits):
    logits = logits - logits.max(axis=1, keepdims=True)
    np.exp(logits, out=logits)
    logits /= logits.sum(axis=1, keepdims=True)
    return logits


def attention_output(q, k, v, scale: float, rows=None) -> np.ndarray:
    """float64 ``softmax((q @ k.T) * scale) @ v`` for the query ``rows`` (all when None).

    ``q``, ``k`` are int8-range integer matrices, ``v`` any numeric matrix with one row per key.
    """
    q, k = as_int8(q, "q"), as_int8(k, "k")
    rows = np.arange(q.shape[0]) if rows is None else np.asarray(rows)
    ft = _score_float(q.shape[1])
    kf = k.astype(ft).T
    vf = np.asarray(v, dtype=np.float64)
    out = np.empty((rows.size, vf.shape[1]))
    step = max(1, _BLOCK_ELEMENTS // max(1, k.shape[0]))
    for r in range(0, rows.size, step):
        s = (q[rows[r:r + step]].astype(ft) @ kf).astype(np.float64)
        out[r:r + step] = _softmax(s * scale) @ vf
    return out


def _query_rows(n: int, queries) -> np.ndarray:
    if queries is None or queries >= n:
        return np.arange(n)
    queries = check_int("queries", queries, 1, n)
    return np.unique(np.linspace(0, n - 1, queries).round().astype(np.int64))


def attention_quality(q, k, v, grid, groups, scale: float, full_bits: int = 5,
                      half_bits: int = 3, reuse_v: bool = False, v_directions=AXIS_T,
                      window: int = 2, queries: int | None = None) -> dict:
    """Quality of reuse against the exact attention output, and of the two skip baselines.

    ``q``, ``k``, ``v`` are (N, d) int8 on ``grid``; ``scale`` maps the int8 scores to softmax
    logits (a workload's ``QKV.scale``). ``reuse_v`` applies the window rule to V along
    ``v_directions``. ``queries`` evaluates an evenly spaced subset of the query rows (every
    key is always used; each output row is independent of the others), for large grids.

    Returns ``saving`` (the oracle QK^T reduction, the baselines' skip ratio), ``queries``,
    and for ``reuse``, ``skip_smallest`` and ``skip_masks`` a dict of ``mse``, ``psnr``,
    ``cosine`` against the exact output; ``mse_ratio`` gives each baseline's MSE over the
    reuse MSE; ``v_reduction`` the oracle P@V reduction when V is reused (else 0).
    """
    grid, groups = as_grid(grid), _as_groups(groups)
    full_bits, half_bits = check_bits(full_bits, half_bits)
    window = check_window(window)
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating, np.integer)) \
            or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    q, k, v = as_int8(q, "q"), as_int8(k, "k"), as_int8(v, "v")
    for name, x in (("q", q), ("k", k)):
        check_tokens(x, name, grid.n, str(grid), groups.head_dim)
    check_tokens(v, "v", grid.n, str(grid))
    rows = _query_rows(grid.n, queries)

    mq = reuse_masks(q, grid, groups, full_bits, half_bits)
    mk = reuse_masks(k, grid, groups, full_bits, half_bits)
    saving = oracle_ops(mq, mk)["reduction"]
    q_eff, k_eff = effective_operand(q, mq, grid, groups), effective_operand(k, mk, grid, groups)
    q_skip, k_skip = skip_operand(q, mq, half_bits), skip_operand(k, mk, half_bits)
    v_used, v_reduction = v_operand(v, grid, reuse_v, v_directions, window, full_bits,
                                    half_bits)

    n = grid.n
    skipped = min(n - 1, int(round(saving * n)))
    ft = _score_float(groups.head_dim)
    kf = {name: x.astype(ft).T for name, x in
          (("exact", k), ("reuse", k_eff), ("skip", k_skip))}
    vf, vuf = v.astype(np.float64), v_used.astype(np.float64)
    outs = {m: np.empty((rows.size, v.shape[1])) for m in
            ("exact", "reuse", "skip_smallest", "skip_masks")}
    step = max(1, _BLOCK_ELEMENTS // n)
    for r in range(0, rows.size, step):
        block = rows[r:r + step]
        sl = slice(r, r + block.size)
        s_exact = (q[block].astype(ft) @ kf["exact"]).astype(np.float64)
        s_reuse = (q_eff[block].astype(ft) @ kf["reuse"]).astype(np.float64)
        s_skip = (q_skip[block].astype(ft) @ kf["skip"]).astype(np.float64)
        outs["exact"][sl] = _softmax(s_exact * scale) @ vf
        outs["reuse"][sl] = _softmax(s_reuse * scale) @ vuf
        outs["skip_masks"][sl] = _softmax(s_skip * scale) @ vuf
        logits = s_exact * scale
        if skipped:
            # Drop the `skipped` smallest |S| of every row from the softmax.
            drop = np.argpartition(np.abs(s_exact), skipped - 1, axis=1)[:, :skipped]
            np.put_along_axis(logits, drop, -np.inf, axis=1)
        outs["skip_smallest"][sl] = _softmax(logits) @ vuf

    result = {"saving": saving, "queries": int(rows.size), "reuse_v": bool(reuse_v),
              "v_reduction": v_reduction}
    for m in ("reuse", "skip_smallest", "skip_masks"):
        result[m] = compare(outs["exact"], outs[m])
    base = result["reuse"]["mse"]
    result["mse_ratio"] = {
        m: (result[m]["mse"] / base if base > 0 else (math.inf if result[m]["mse"] else 1.0))
        for m in ("skip_smallest", "skip_masks")}
    return result
