"""Attention by key blocks with a running maximum (``docs/numerics.md``, section 15).

Section 14 normalises P to the row sum before P @ V: ``P = 255 * E / sum(E)`` in 8 bits. A
probability of a long row is a small fraction of one unit of 1/255 (a uniform row of 8,192
keys gives 0.03 units), so almost every P rounds to 0 and the output collapses as the head
grows; it also needs the whole row of S before the first P. This module computes the head the
way a tiled accelerator can, one block of keys at a time, and normalises the output instead:

For each query row, with the running maximum ``M`` (the largest score seen so far) and the
accumulators ``O`` (int, one per channel) and ``L`` (the row's weight), and for each key block
``b`` in the given order:

1. ``M_new = max(M, max(s_b))``; when a block raises it, the accumulators are rescaled by
   ``F = exp_fixed(y(M_new - M))`` (section 14's exponent and table, relative to ``2**15``):
   ``O = (O * F + 2**14) >> 15``, ``L = (L * F + 2**14) >> 15`` (rounded half up; ``F =
   2**15`` leaves them unchanged, so a block that does not raise the maximum costs nothing);
2. ``E = exp_fixed(y(M_new - s_b))`` and the block's weights ``P = (E * 255 + 2**14) >> 15``,
   uint8 of scale 1/255 *relative to the running maximum* (``P = 255`` at it);
3. ``O += P @ V_eff[b]`` (the PE arrays: at most ``255 * 128 * B`` per block, 24 bits for
   blocks of up to 256 keys) and ``L += sum(P)``.

At the end ``R = 2**40 // L`` (``L >= 255``: the block that set the final maximum added 255 for
it, and nothing is rescaled after it) and the output is ``O_out = clamp((O * R + 2**31) >>
32, -2**15, 2**15 - 1)``: int16 with 8 fractional bits, a weighted mean of V in V's units
(scale ``s_v / 256``). The weights that multiply V are the ones that are summed, so ``O_out``
is a true weighted mean up to the rescales' roundings; the clamp only catches those (a mean
of int8 values lies in [-128, 127]).

Every step is an integer operation on int64, vectorised over the rows; the loop runs over
blocks. The result depends on the blocks and their order (the rescales round), never on how
the rows are batched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from golden.checks import as_int8, check_int
from golden.vector.softmax import (EXP_BITS, EXP_ONE, MAX_ROW, P_ONE, _as_scores, _check_scale,
                                   exp_fixed, exponent)


__all__ = ["O_FRAC_BITS", "OUT_MIN", "OUT_MAX", "NORM_BITS", "BLOCK_MAX", "P_REFERENCES",
           "BLOCK_FRAC_BITS", "OnlineState", "online_block", "online_finish", "contiguous_blocks",
           "check_blocks", "box_blocks", "online_stages", "attention_online",
           "block_max_partial", "online_attention_quality"]

#: Fractional bits of the output ``O_out`` (int16, scale ``s_v / 2**O_FRAC_BITS``).
O_FRAC_BITS = 8
OUT_MIN, OUT_MAX = -(1 << 15), (1 << 15) - 1
#: ``R = 2**NORM_BITS // L``: 32 fractional bits of the product plus the output's 8.
NORM_BITS = 32 + O_FRAC_BITS
#: Longest key block whose partial ``P @ V`` fits a 24-bit signed accumulator
#: (``255 * 128 * 256 < 2**23``); longer blocks are allowed in the model.
BLOCK_MAX = 256


def block_max_partial(block: int) -> int:
    """Largest ``|P @ V|`` of one block of ``block`` keys (int8 V, P <= 255)."""
    return P_ONE * 128 * block


def contiguous_blocks(n: int, block: int) -> list[np.ndarray]:
    """Keys ``0..n-1`` in blocks of ``block`` (the last one shorter), in index order."""
    n = check_int("n", n, 1, MAX_ROW)
    block = check_int("block", block, 1, MAX_ROW)
    return [np.arange(b, min(b + block, n), dtype=np.int64) for b in range(0, n, block)]


def check_blocks(blocks, n: int) -> list[np.ndarray]:
    """``blocks`` as a list of int64 key-index arrays that cover ``0..n-1`` once each.

    ``blocks`` is an int (contiguous blocks of that many keys, :func:`contiguous_blocks`) or a
    sequence of 1-D integer arrays, non-empty, in the order they are computed.
    """
    if isinstance(blocks, (int, np.integer)) and not isinstance(blocks, bool):
        return contiguous_blocks(n, blocks)
    if not isinstance(blocks, Sequence) or isinstance(blocks, (str, bytes)) or not blocks:
        raise ValueError("blocks must be a block length (int) or a non-empty sequence of "
                         f"key-index arrays, got {blocks!r}")
    out, seen = [], np.zeros(n, dtype=np.int64)
    for i, b in enumerate(blocks):
        a = np.asarray(b)
        if a.ndim != 1 or a.size == 0 or a.dtype == np.bool_ \
                or not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"blocks[{i}] must be a non-empty 1-D integer array of key "
                             f"indices, got dtype {a.dtype} and shape {a.shape}")
        if a.min() < 0 or a.max() >= n:
            raise ValueError(f"blocks[{i}] must hold key indices in [0, {n - 1}], got values "
                             f"in [{a.min()}, {a.max()}]")
        np.add.at(seen, a, 1)
        out.append(a.astype(np.int64))
    if np.any(seen != 1):
        bad = int(np.flatnonzero(seen != 1)[0])
        raise ValueError(f"blocks must cover every key 0..{n - 1} exactly once; key {bad} "
                         f"appears {int(seen[bad])} times")
    return out


def _exp_of(d, mult: int, shift: int):
    """Section 14's ``E = exp_fixed(y(d))`` of score distances ``d >= 0`` (relative to
    ``2**15``)."""
    return exp_fixed(exponent(d, mult, shift))


def _weights(e):
    """P of exponentials ``e``: ``(E * 255 + 2**14) >> 15``, uint8 of scale 1/255."""
    return (e * P_ONE + (1 << (EXP_BITS - 1))) >> EXP_BITS


def _rescale(x, f, drop: int = EXP_BITS):
    """``(x * f + 2**(drop-1)) >> drop``: ``x`` times ``f / 2**drop``, rounded half up."""
    return (x * f + (1 << (drop - 1))) >> drop


#: Reference of a block's P: the row's running maximum (section 15, what the RTL builds) or
#: the block's own maximum (the measured refinement of section 15, "P to the block's
#: maximum").
P_REFERENCES = ("running", "block")
#: Extra fractional bits of O and L with P to the block's maximum.
BLOCK_FRAC_BITS = 8


def online_stages(s, v, mult: int, shift: int, blocks, trace: bool = False,
                  p_reference: str = "running") -> dict:
    """Every result of :func:`attention_online` of scores ``s`` (rows, n) and ``v`` (n, d).

    ``p_reference="block"``: each block's P is scaled to the block's own maximum ``m_b``
    (255 there), and its partial product and P sum enter O and L times ``G =
    exp_fixed(y(M' - m_b))`` with :data:`BLOCK_FRAC_BITS` more fractional bits:
    ``(x * G + 2**6) >> 7``; the rescales are as with the running maximum, and the output
    divides ``2**48`` by L and shifts ``O * R`` by 40 (O and L carry the same extra scale).

    Returns int64 arrays: ``max`` (rows,) the final running maximum, ``weight`` (rows,) the
    final L, ``acc`` (rows, d) the final O, ``recip`` (rows,), ``out`` (rows, d) the int16
    output; ``rescales`` (rows,) how many blocks raised a row's maximum after its first.
    With ``trace``, ``blocks``: per block a dict of its ``max`` (running, after it), ``factor``
    F, ``p`` (rows, block), ``partial`` P @ V (rows, d) and ``weight`` (L after it), for
    the RTL's benches (with ``p_reference="block"`` also ``gain`` G).
    """
    if p_reference not in P_REFERENCES:
        raise ValueError(f"p_reference must be one of {', '.join(P_REFERENCES)}, "
                         f"got {p_reference!r}")
    mult, shift = _check_scale(mult, shift)
    s = _as_scores(s)
    if s.ndim == 1:
        s = s[None, :]
    vm = as_int8(v, "v")
    n = s.shape[1]
    if vm.ndim != 2 or vm.shape[0] != n or vm.shape[1] < 1:
        raise ValueError(f"v must have shape (keys, channels) with keys = {n} (the columns "
                         f"of s), got {tuple(vm.shape)}")
    parts = check_blocks(blocks, n)
    state = OnlineState.empty(s.shape[0], vm.shape[1])
    steps = []
    for keys in parts:
        step = online_block(state, s[:, keys], vm[keys], mult, shift, p_reference)
        if trace:
            steps.append({"keys": keys, **step})
    recip, out = online_finish(state, p_reference)
    res = {"max": state.run_max, "weight": state.weight, "acc": state.acc, "recip": recip,
           "out": out, "rescales": state.rescales}
    if trace:
        res["blocks"] = steps
    return res


@dataclass
class OnlineState:
    """What section 15 keeps per query row between key blocks: the running maximum
    ``run_max``, the output accumulators ``acc`` (rows, d), the weight ``weight`` (L), the
    rescales so far and the blocks taken (``blocks``; 0: the next block is the first)."""
    run_max: np.ndarray
    acc: np.ndarray
    weight: np.ndarray
    rescales: np.ndarray
    blocks: int = 0

    @classmethod
    def empty(cls, rows: int, channels: int) -> "OnlineState":
        """The state before the first block of ``rows`` query rows and ``channels`` channels."""
        z = np.zeros(rows, dtype=np.int64)
        return cls(z.copy(), np.zeros((rows, channels), dtype=np.int64), z.copy(), z.copy())


def online_block(state: OnlineState, sb, vb, mult: int, shift: int,
                 p_reference: str = "running") -> dict:
    """Take one key block into ``state`` (in place): scores ``sb`` (rows, keys of the block,
    int64) and ``vb`` (keys, d) int8 V (V_eff with reuse). Steps 1-3 of the module docstring;
    returns the block's ``max`` (running, after it), ``factor`` F, ``p`` (rows, keys),
    ``partial`` P @ V and ``weight`` (L after it), with ``p_reference="block"`` also ``gain``
    G. Arguments are not checked here (:func:`online_stages` checks them)."""
    first = state.blocks == 0
    new_max = sb.max(axis=1) if first else np.maximum(state.run_max, sb.max(axis=1))
    factor = np.full(sb.shape[0], EXP_ONE, dtype=np.int64)
    if not first:
        factor = _exp_of(new_max - state.run_max, mult, shift)
        state.rescales += new_max > state.run_max
        state.acc = _rescale(state.acc, factor[:, None])
        state.weight = _rescale(state.weight, factor)
    state.run_max = new_max
    ref = state.run_max if p_reference == "running" else sb.max(axis=1)
    p = _weights(_exp_of(ref[:, None] - sb, mult, shift))
    # Exact through float64: |partial| <= 255 * 128 * n < 2**53.
    partial = (p.astype(np.float64) @ np.asarray(vb, np.float64)).astype(np.int64)
    step = {}
    if p_reference == "running":
        state.acc = state.acc + partial
        state.weight = state.weight + p.sum(axis=1)
    else:
        gain = _exp_of(state.run_max - ref, mult, shift)
        drop = EXP_BITS - BLOCK_FRAC_BITS
        state.acc = state.acc + _rescale(partial, gain[:, None], drop)
        state.weight = state.weight + _rescale(p.sum(axis=1), gain, drop)
        step["gain"] = gain
    state.blocks += 1
    return {"max": state.run_max.copy(), "factor": factor, "p": p, "partial": partial,
            "weight": state.weight.copy(), **step}


def online_finish(state: OnlineState, p_reference: str = "running") -> tuple:
    """``(recip, out)`` after the last block: ``R = 2**40 // L`` per row and the int64 output
    ``clamp((O * R + 2**31) >> 32)`` (int16 range, 8 fractional bits)."""
    if state.blocks == 0:
        raise ValueError("online_finish needs at least one key block taken")
    # With P to the block's maximum, O and L carry BLOCK_FRAC_BITS more: so does R's numerator
    # (R keeps its 33 bits and its precision).
    norm = NORM_BITS + (BLOCK_FRAC_BITS if p_reference == "block" else 0)
    recip = (1 << norm) // state.weight
    out = np.clip(_rescale(state.acc, recip[:, None], norm - O_FRAC_BITS), OUT_MIN, OUT_MAX)
    return recip, out


def attention_online(s, v, mult: int, shift: int, blocks,
                     p_reference: str = "running") -> np.ndarray:
    """int16 attention output (8 fractional bits, V's units) of scores ``s`` (rows, n) and
    int8 ``v`` (n, d, V_eff when V is reused), the keys taken in ``blocks`` (a block length or
    a sequence of key-index arrays, :func:`check_blocks`).

    ``mult``, ``shift``: the scale pair of :func:`golden.vector.softmax_scale`;
    ``p_reference``: see :func:`online_stages`.
    """
    out = online_stages(s, v, mult, shift, blocks, p_reference=p_reference)["out"]
    out = out.astype(np.int16)
    return out[0] if np.ndim(s) == 1 else out


def box_blocks(grid, box) -> list[np.ndarray]:
    """The tokens of ``grid`` in boxes of ``box = (bt, by, bx)`` tokens (the engine core's key
    boxes; edge boxes are cut), boxes in t, y, x order, tokens in index order inside."""
    from golden.numerics import as_grid

    grid = as_grid(grid)
    dims = (grid.t, grid.h, grid.w)
    if len(box) != 3:
        raise ValueError(f"box must be (bt, by, bx), got {box!r}")
    box = tuple(check_int(f"box[{i}]", b, 1, MAX_ROW) for i, b in enumerate(box))
    index = np.arange(grid.n, dtype=np.int64).reshape(dims)
    return [index[t:t + box[0], y:y + box[1], x:x + box[2]].ravel()
            for t in range(0, dims[0], box[0]) for y in range(0, dims[1], box[1])
            for x in range(0, dims[2], box[2])]


def _block_v_reduction(v, grid, blocks, directions, window, full_bits, half_bits) -> float:
    """P @ V saving when a FULL V follower merges only with an anchor of its own key block
    (one whose anchor lies in another block multiplies its own V_eff: same O, no saving)."""
    from golden.numerics import FULL, HALF
    from golden.vector.attention import _owner
    from golden.window import window_masks

    masks = window_masks(v, grid, directions, window, full_bits, half_bits)
    own = _owner(grid, masks, directions, window)
    block_of = np.empty(grid.n, dtype=np.int64)
    for i, keys in enumerate(blocks):
        block_of[keys] = i
    merged = (masks == FULL) & (block_of[own] == block_of[:, None])
    cost = masks.size - np.count_nonzero(merged) - np.count_nonzero(masks == HALF) / 2
    return 1.0 - cost / masks.size


def online_attention_quality(q, k, v, grid, groups, scale: float, blocks=(2, 2, 16),
                             queries: int | None = 256, full_bits: int = 5,
                             half_bits: int = 3, reuse_v: bool = True, v_directions="t",
                             window: int = 2) -> dict:
    """Section 15 against section 14 as the head grows: each against float64
    ``softmax(S_exact * scale) @ V``, outputs in V's units (``O_out / 256``, ``O / 255``).

    ``blocks``: a box ``(bt, by, bx)`` (:func:`box_blocks`), a block length or key-index
    arrays. ``queries``: an evenly spaced subset of the query rows (every key is used).
    Returns ``online`` (section 15, reuse S and V'), ``online_exact`` (section 15, exact S and
    V), ``online_block`` (section 15 with P to the block's maximum, reuse S and V'),
    ``row_softmax`` (section 14, reuse S and V'), ``float_reuse`` (float softmax of the
    reuse S, ``@ V'``), each a dict of ``mse``, ``psnr``, ``cosine``; ``p_zero`` /
    ``p_zero_online`` (share of P that is 0), ``row_weight`` (mean row sum of section 14's P,
    of 255), ``rescales`` (mean per row), ``v_reduction`` (oracle) and
    ``v_reduction_blocks`` (merges inside a block only), with V' = V_eff when ``reuse_v``.
    """
    from golden.checks import check_bits
    from golden.numerics import (_as_groups, as_grid, effective_operand, exact_matmul,
                                 reuse_masks)
    from golden.quality import _query_rows, _softmax, compare, v_operand
    from golden.vector.attention import attention_int
    from golden.vector.softmax import softmax_int, softmax_scale

    grid, groups = as_grid(grid), _as_groups(groups)
    full_bits, half_bits = check_bits(full_bits, half_bits)
    q, k, v = as_int8(q, "q"), as_int8(k, "k"), as_int8(v, "v")
    if isinstance(blocks, tuple) and len(blocks) == 3:
        blocks = box_blocks(grid, blocks)
    parts = check_blocks(blocks, grid.n)
    mult, shift = softmax_scale(scale)
    rows = _query_rows(grid.n, queries)
    mq = reuse_masks(q, grid, groups, full_bits, half_bits)
    mk = reuse_masks(k, grid, groups, full_bits, half_bits)
    q_eff = effective_operand(q, mq, grid, groups)[rows]
    k_eff = effective_operand(k, mk, grid, groups)
    v_used, v_reduction = v_operand(v, grid, reuse_v, v_directions, window, full_bits,
                                    half_bits)
    s_exact = exact_matmul(q[rows], k.T)
    s_reuse = exact_matmul(q_eff, k_eff.T)
    ref = _softmax(s_exact.astype(np.float64) * scale) @ v.astype(np.float64)
    f_reuse = _softmax(s_reuse.astype(np.float64) * scale) @ v_used.astype(np.float64)
    p_row = softmax_int(s_reuse, mult, shift)
    o_row = attention_int(p_row, v_used) / P_ONE
    on = online_stages(s_reuse, v_used, mult, shift, parts)
    on_exact = online_stages(s_exact, v, mult, shift, parts)
    on_block = online_stages(s_reuse, v_used, mult, shift, parts, p_reference="block")
    scale_out = float(1 << O_FRAC_BITS)
    # Section 15's P of the whole row relative to the row's maximum: what the blocks
    # quantise at the latest (a block's P is relative to the running maximum, never above).
    p_online = _weights(_exp_of(on["max"][:, None] - s_reuse, mult, shift))
    v_blocks = (_block_v_reduction(v, grid, parts, v_directions, window, full_bits, half_bits)
                if reuse_v else 0.0)
    return {"queries": int(rows.size), "blocks": len(parts), "mult": mult, "shift": shift,
            "online": compare(ref, on["out"] / scale_out),
            "online_exact": compare(ref, on_exact["out"] / scale_out),
            "online_block": compare(ref, on_block["out"] / scale_out),
            "row_softmax": compare(ref, o_row), "float_reuse": compare(ref, f_reuse),
            "p_zero": float(np.mean(p_row == 0)), "p_zero_online": float(np.mean(p_online == 0)),
            "row_weight": float(p_row.astype(np.int64).sum(axis=1).mean()),
            "rescales": float(on["rescales"].mean()),
            "v_reduction": v_reduction, "v_reduction_blocks": v_blocks}
