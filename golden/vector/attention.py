"""``O = P_q @ V_eff`` in integers and the quality of the integer attention pipeline
(``docs/numerics.md``, section 14).

``P_q`` is the uint8 output of :func:`golden.vector.softmax_int` (scale 1/255), ``V_eff`` the
int8 V after the window rule (``golden.window_effective_operand``; V itself when V is not
reused). ``O`` is exact int64, and ``O * s_v / 255`` approximates the float attention output
(``s_v`` the quantisation step of V).

V reuse merges P before the multiply: when token f is a FULL follower of anchor a in channel
c, ``P[i,a]*V[a,c] + P[i,f]*V_eff[f,c] = (P[i,a] + P[i,f]) * V[a,c]``, one product instead of
two. :func:`pv_merged` computes O that way (one product per anchor and per non-FULL token)
and is equal to ``P_q @ V_eff`` by construction; the merged P of a window of w tokens is at
most ``w * 255`` (10 bits unsigned at w = 3).
"""

from __future__ import annotations

import numpy as np

from golden.checks import as_int8, check_bits, check_int, check_tokens, check_window
from golden.numerics import AXIS_T, FULL, _as_groups, as_grid, attention_scores, exact_matmul
from golden.window import linear_ops, window_anchor_index, window_masks
from golden.vector.softmax import P_ONE, softmax_int, softmax_scale


__all__ = ["attention_int", "pv_merged", "pv_ops", "integer_attention_quality"]


def _as_p(p) -> np.ndarray:
    a = np.asarray(p)
    if a.dtype == np.bool_ or not np.issubdtype(a.dtype, np.integer) or a.ndim != 2:
        raise ValueError(f"p must be a 2-D integer array (queries, keys) of uint8 P, "
                         f"got dtype {a.dtype} and shape {a.shape}")
    if a.size and (a.min() < 0 or a.max() > P_ONE):
        raise ValueError(f"p values must lie in [0, {P_ONE}] (uint8 P of scale 1/255), "
                         f"got values in [{a.min()}, {a.max()}]")
    return a.astype(np.int64)


def attention_int(p, v) -> np.ndarray:
    """int64 ``O = p @ v``: ``p`` (queries, keys) uint8 P, ``v`` (keys, channels) int8.

    Exact through float64: every partial sum is an integer of magnitude at most
    ``keys * 255 * 128`` < 2**53 for any row length the golden model allows.
    """
    pm, vm = _as_p(p), as_int8(v, "v")
    if vm.ndim != 2 or vm.shape[0] != pm.shape[1]:
        raise ValueError(f"v must have shape (keys, channels) with keys = {pm.shape[1]} "
                         f"(the columns of p), got {tuple(vm.shape)}")
    return (pm.astype(np.float64) @ vm.astype(np.float64)).astype(np.int64)


def _owner(grid, masks, directions, window) -> np.ndarray:
    """(N, C) int64: the token whose V a (token, channel) multiplies in the merged form: its
    window anchor when it is a FULL follower, else itself."""
    n, channels = masks.shape
    axes = np.broadcast_to(np.asarray([{"t": 0, "y": 1, "x": 2}.get(a, a) for a in
                                       np.atleast_1d(directions)], dtype=np.int64), (channels,))
    own = np.repeat(np.arange(n, dtype=np.int64)[:, None], channels, axis=1)
    for axis in range(3):
        cols = np.flatnonzero(axes == axis)
        if cols.size == 0:
            continue
        anchor = window_anchor_index(grid, axis, window)
        full = (masks[:, cols] == FULL) & (anchor[:, None] >= 0)
        own[:, cols] = np.where(full, anchor[:, None], own[:, cols])
    return own


def pv_merged(p, v, grid, directions=AXIS_T, window: int = 2, full_bits: int = 5,
              half_bits: int = 3) -> np.ndarray:
    """int64 ``O`` computed as the hardware with V reuse does: per channel, the P of every FULL
    follower is added to its window anchor's P first, then each (merged P, V) pair is
    multiplied once. Equal to ``attention_int(p, V_eff)`` (the distributive law, in
    integers)."""
    grid = as_grid(grid)
    window = check_window(window)
    full_bits, half_bits = check_bits(full_bits, half_bits)
    pm, vm = _as_p(p), as_int8(v, "v")
    check_tokens(vm, "v", grid.n, str(grid))
    if pm.shape[1] != grid.n:
        raise ValueError(f"p must have one column per token of the grid {grid} ({grid.n}), "
                         f"got {pm.shape[1]}")
    masks = window_masks(vm, grid, directions, window, full_bits, half_bits)
    own = _owner(grid, masks, directions, window)
    out = np.empty((pm.shape[0], vm.shape[1]), dtype=np.int64)
    for c in range(vm.shape[1]):
        merged = np.zeros((grid.n, pm.shape[0]), dtype=np.int64)   # merged P, key-major
        np.add.at(merged, own[:, c], pm.T)
        out[:, c] = merged.T.astype(np.float64) @ vm[:, c].astype(np.float64)
    return out


def pv_ops(v, grid, queries: int, directions=AXIS_T, window: int = 2, full_bits: int = 5,
           half_bits: int = 3) -> dict:
    """Oracle op accounting of ``P @ V_eff`` (``golden.linear_ops`` with ``out_features`` =
    the queries: a FULL V element costs 0, HALF 1/2, NONE 1 per query)."""
    grid = as_grid(grid)
    queries = check_int("queries", queries, 1, 1 << 40)
    masks = window_masks(as_int8(v, "v"), grid, directions, window, full_bits, half_bits)
    return linear_ops(masks, queries)


def _softmax_float(logits):
    logits = logits - logits.max(axis=1, keepdims=True)
    np.exp(logits, out=logits)
    logits /= logits.sum(axis=1, keepdims=True)
    return logits


def integer_attention_quality(q, k, v, grid, groups, scale: float, full_bits: int = 5,
                              half_bits: int = 3, reuse_v: bool = False,
                              v_directions=AXIS_T, window: int = 2) -> dict:
    """Quality of the integer attention pipeline against float64 ``softmax(S*scale) @ V``.

    Every output is in units of V's int8 LSB (the integer paths divide O by 255). Returns,
    each a dict of ``mse``, ``psnr``, ``cosine`` against the exact float output:

    * ``int_exact``: integer softmax of the exact S, ``P_q @ V``;
    * ``int_reuse``: integer softmax of the reuse S (``Q_eff K_eff^T``), ``P_q @ V'``;
    * ``float_reuse``: float softmax of the reuse S, ``@ V'`` (the path of
      ``golden.attention_quality``);
    * ``int_vs_float_reuse``: ``int_reuse`` against ``float_reuse`` (what the integer softmax
      alone costs on the reuse path);

    with ``V' = V_eff`` of the window rule when ``reuse_v``, else V; plus ``mult``, ``shift``
    (the fixed-point scale), ``v_reduction`` (oracle P@V saving, 0 without V reuse) and
    ``merged_equal`` (the merged V-reuse product equals ``P_q @ V_eff``).
    """
    from golden.quality import compare, v_operand

    grid, groups = as_grid(grid), _as_groups(groups)
    full_bits, half_bits = check_bits(full_bits, half_bits)
    q, k, v = as_int8(q, "q"), as_int8(k, "k"), as_int8(v, "v")
    mult, shift = softmax_scale(scale)
    s_exact = exact_matmul(q, k.T)
    s_reuse = attention_scores(q, k, grid, groups, full_bits, half_bits)
    v_used, v_reduction = v_operand(v, grid, reuse_v, v_directions, window, full_bits,
                                    half_bits)
    ref = _softmax_float(s_exact.astype(np.float64) * scale) @ v.astype(np.float64)
    p_exact = softmax_int(s_exact, mult, shift)
    p_reuse = softmax_int(s_reuse, mult, shift)
    o_exact = attention_int(p_exact, v) / P_ONE
    o_reuse_int = attention_int(p_reuse, v_used)
    o_reuse = o_reuse_int / P_ONE
    f_reuse = _softmax_float(s_reuse.astype(np.float64) * scale) @ v_used.astype(np.float64)
    merged_equal = True
    if reuse_v:
        merged = pv_merged(p_reuse, v, grid, v_directions, window, full_bits, half_bits)
        merged_equal = bool(np.array_equal(merged, o_reuse_int))
    return {"mult": mult, "shift": shift, "reuse_v": bool(reuse_v), "v_reduction": v_reduction,
            "merged_equal": merged_equal,
            "int_exact": compare(ref, o_exact), "int_reuse": compare(ref, o_reuse),
            "float_reuse": compare(ref, f_reuse),
            "int_vs_float_reuse": compare(f_reuse, o_reuse)}
