"""Linear windows of 3 on the tile passes: the register plan the engine core's arrays need to
run a linear layer whose activation is reused in windows of 3 (``docs/linear.md``, "Windows
of 3 on the tile passes").

The core runs linear blocks with windows of 2 as attention tile quads (``docs/engine.md``,
"Linear blocks on the attention datapath"): a window of 2 is an attention pair on the Q side
and the weight rows pair up on the K side without codes. A window of 3 does not fit a quad
that way: its three output rows need three registers, and a quad with K followers already
holds T0..T2 in R0..R2 after pass 0. So a window-3 quad takes **weight rows one per column**
(K units without followers) and gives the K follower's register and pass to the second
follower:

=====  =====  =======  ==========  ==========  ==========  ===============================
pass   rows   columns  R0          R1          R2          at the pass's first step
=====  =====  =======  ==========  ==========  ==========  ===============================
0      a      w        T0 = a.w    T1 = f2.w   T2 = f1.w   drain R0 (previous T2), clear
1      f2     w        T1          --          T2          drain R0 (T0), R0 <- R1
2      f1     w        T2          --          --          drain R0 (T1), R0 <- R2
=====  =====  =======  ==========  ==========  ==========  ===============================

(``a``, ``f1``, ``f2``: the row unit's anchor and followers; ``w``: the column's weight row.)
The register moves and drains at the first steps are the attention passes' own
(``golden.array.schedule``, ``PASS_ENTRY`` of ``kaleido_hw.array.tile_cell``); pass 3 has no
tile and is not run: the next quad's first step drains T2. Pass 0 hands each follower its
share of the anchor's product (FULL: all of it, HALF: the high part ``16*hi(a)*w``: a HALF
follower has its anchor's high nibble), passes 1 and 2 add what the followers' own values
must (NONE: the product, HALF: the low nibble ``lo(f)*w``), exactly the attention's pass 2
with a column without follower. Every entry splits the row (the activation), as the
ReusePE's linear mode (``golden.engine.linear``).

So the core needs, per PE, one more table (``(pass, c1, c2)`` instead of ``(pass, qc, kc)``,
selected by a row-wide mode bit) and the row's second follower code; per array, a third row
token per unit in the loader and the operand slots, pass 1's row operand switched to ``f2``
and its column operand to the weight row; and the result buffer writes T1 to the second
follower's row. :func:`window3_engine` is the functional model (equal to
``golden.linear(..., window=3)`` bit for bit), :func:`window3_issued` the issued channel
steps per quad, next to the windows of 2 the core runs today.

Plain numpy, no hardware imports.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from golden.array.schedule import (ABSENT, DECODE, MicroOp, Op, Sel, Split, _contributions,
                                   decode, decode_tables)
from golden.engine.linear import _check_w, _check_x, linear_plans
from golden.numerics import AXIS_T, FULL, HALF, NONE, as_grid


__all__ = ["PASSES3", "ROW_MEMBER", "REGISTER_TILE3", "decode3", "DECODE3", "window3_engine",
           "Window3Issued", "window3_issued"]

#: Passes a window-3 quad runs (pass 3 has no tile).
PASSES3 = 3
#: Window member on the rows in each pass: 0 anchor, 2 follower 2, 1 follower 1.
ROW_MEMBER = (0, 2, 1)
#: Register -> window member whose output it holds, per pass (None: unused); the same moves
#: as the attention passes' ``REGISTER_TILE`` with T1 (a K follower's tile there) for
#: follower 2 and T3 unused.
REGISTER_TILE3 = ((0, 2, 1), (2, None, 1), (1, None, None))


def decode3(pass_: int, c1: int, c2: int) -> MicroOp:
    """What a PE does in ``pass_`` (0-2) of a window-3 quad, given its row's follower codes
    ``c1`` and ``c2`` (FULL, HALF, NONE, or ABSENT for a window cut short by the grid's edge).

    Pass 0 (rows: anchors) is a row-split MUL into R0, handing each follower its share into
    its register (follower 1: R2, follower 2: R1). Passes 1 (rows: follower 2) and 2
    (follower 1) are the attention's pass 2 with a column that has no follower, on that
    follower's code.
    """
    if pass_ == 0:
        share = {FULL: Sel.PROD, HALF: Sel.HIGH}
        return MicroOp(Op.MUL, Split.ROW,
                       (Sel.PROD, share.get(int(c2), Sel.NONE), share.get(int(c1), Sel.NONE)))
    if pass_ == 1:
        return decode(2, c2, ABSENT)
    if pass_ == 2:
        return decode(2, c1, ABSENT)
    raise ValueError(f"pass must be 0..2 (a window-3 quad has no pass 3), got {pass_}")


#: ``DECODE3[0][p, c1, c2]`` op, ``DECODE3[1]`` split, ``DECODE3[2][..., r]`` select of R_r.
DECODE3 = decode_tables(decode3, PASSES3)
#: ``WORK3[p, c1, c2]``: the PE takes a term in pass p.
WORK3 = DECODE3[0] != Op.IDLE

# The functional model below relies on every entry being linear in the weight: a row split,
# never a column low nibble.
assert (DECODE3[1][WORK3] == Split.ROW).all() and not (DECODE3[0] == Op.LOW_COL).any()
# Pass 2 is the attention's own pass 2 with an ABSENT column, entry for entry.
assert all((DECODE3[i][2, :, c2] == DECODE[i][2, :, ABSENT]).all()
           for i in range(3) for c2 in range(4))


def window3_engine(x, w, grid, directions=AXIS_T, full_bits: int = 5, half_bits: int = 3,
                   reuse: bool = True) -> np.ndarray:
    """(N, C_out) int64 ``Y`` computed the way a window-3 quad computes it: every pass of
    :func:`decode3` on every row unit, each register's terms summed over the group's channels
    and handed to the window member :data:`REGISTER_TILE3` names (the drain of its last
    pass). Equals ``golden.linear(x, w, grid, directions, 3, full_bits, half_bits)`` bit for
    bit (``reuse=False``: ``x @ w``).

    Every entry is a row split, so a term is the weight times a factor of the row's value
    (the product, its high part, its low nibble): the factors of a register, summed over the
    group's channels against the weight rows, are one exact integer matrix product.
    """
    grid = as_grid(grid)
    x = _check_x(x, grid)
    wm = _check_w(w, x.shape[1]).astype(np.int64)
    plans = linear_plans(x, grid, directions, 3, full_bits, half_bits, reuse)
    y = np.zeros((grid.n, wm.shape[1]), np.int64)
    op_t, split_t, sel_t = DECODE3
    for pl in plans:
        c1, c2 = pl.c1, pl.c2
        weights = wm[pl.channels]                                     # (n, C_out)
        out = np.zeros((3,) + (pl.members.shape[0], wm.shape[1]), np.int64)   # per member
        for p in range(PASSES3):
            op, split, sel = op_t[p][c1, c2], split_t[p][c1, c2], sel_t[p][c1, c2]
            factors = _contributions(op, split, sel, pl.values[:, ROW_MEMBER[p]], 1)
            for r, member in enumerate(REGISTER_TILE3[p]):
                if member is not None:
                    out[member] += factors[r] @ weights
        for j in range(3):
            ok = pl.members[:, j] >= 0
            y[pl.members[ok, j]] += out[j][ok]
    return y


@dataclass(frozen=True)
class Window3Issued:
    """Issued channel steps of a linear layer's quads, per pass, summed over the layer.

    issued : (passes,) int64    steps that carry a channel, per pass
    steps : int                 the quads' steps with every pass at least ``rows`` long (a
                                drain wave holds the column port ``rows`` cycles) and
                                every quad at least as long as its loads (the gap)
    quads : int                 row blocks x column blocks x chunks
    outputs : int               token x feature outputs (the work the steps buy)
    """
    issued: np.ndarray
    steps: int
    quads: int
    outputs: int

    @property
    def steps_per_output(self) -> float:
        return self.steps / self.outputs


def _chunked(values, width):
    """Column slices of at most ``width`` channels."""
    return [slice(j, min(j + width, values)) for j in range(0, values, width)]


def window3_issued(x, grid, c_out: int, directions=AXIS_T, window: int = 3, rows: int = 4,
                   cols: int = 4, width: int = 16, full_bits: int = 5, half_bits: int = 3,
                   reuse: bool = True) -> Window3Issued:
    """Channel steps of a linear layer (activation ``x`` on ``grid``, ``c_out`` features) on
    R x C tile quads, in natural unit order, chunks of ``width`` channels of a group.

    ``window=3``: quads of R window-3 units x C weight rows, passes 0-2 of :func:`decode3`
    (pass 0 at least ``3*max(R, C)`` steps, as the KaleidoEngine runs them).
    ``window=2``: the core's windows of 2 (``golden.array.schedule``): R window-2 units x C
    pairs of weight rows (the K follower NONE, ABSENT past ``c_out``), passes 0-3.
    A pass issues a chunk channel when some real PE of the quad has work at it (the
    sequencer's rule); issue counts do not depend on the weights.
    """
    grid = as_grid(grid)
    plans = linear_plans(x, grid, directions, window, full_bits, half_bits, reuse,
                         with_values=False)
    n_passes = PASSES3 if window == 3 else 4
    issued = np.zeros(n_passes, np.int64)
    steps = quads = 0
    k_units = -(-c_out // (1 if window == 3 else 2))
    col_blocks = -(-k_units // cols)
    hn = (1 << HALF) | (1 << NONE)
    # The loader reads a quad's row tokens and column tokens on two ports while the quad
    # before steps: 2R and 2C words for windows of 2 (``EngineTiming.gap``); for windows of 3
    # 3M (M = max(R, C)) and a cycle for the codes, and pass 0 lasts at least 3M steps, so
    # that the next quad's anchors can be fetched after it (the KaleidoEngine's sequencer,
    # golden.engine.window3).
    gap = 3 * max(rows, cols) + 2 if window == 3 else 2 * max(rows, cols) + 1
    floor0 = 3 * max(rows, cols) if window == 3 else rows
    # Windows of 2: a column block has K followers (NONE) unless its pairs start past c_out
    # (only the last pair of the layer can lack one, so the block's first pair decides).
    k_follow = (2 * cols * np.arange(col_blocks) + 1 < c_out).astype(np.int64)
    for pl in plans:
        U = pl.members.shape[0]
        row_blocks = -(-U // rows)
        pad = row_blocks * rows - U

        def code_sets(codes):                     # (RB, n): codes present among real rows
            bits = np.pad(1 << codes.astype(np.int64), ((0, pad), (0, 0)))   # 0: padding
            return np.bitwise_or.reduce(bits.reshape(row_blocks, rows, -1), axis=1)

        set1, set2 = code_sets(pl.c1), code_sets(pl.c2)
        for sl in _chunked(pl.channels.size, width):
            n = sl.stop - sl.start
            # channels where some row's follower 1 / follower 2 needs its own work: (RB, 1)
            f1 = ((set1[:, sl] & hn) != 0).sum(axis=1)[:, None]
            if window == 3:
                per = [n, ((set2[:, sl] & hn) != 0).sum(axis=1)[:, None], f1]
            else:
                # pass 1 (a x k_f) works where the block has K followers, pass 2 where a row's
                # follower needs work, pass 3 where both
                per = [n, k_follow * n, f1, f1 * k_follow]
            quad_steps = np.zeros((row_blocks, col_blocks), np.int64)
            for p, v in enumerate(per):
                v = np.broadcast_to(v, quad_steps.shape)
                issued[p] += int(v.sum())
                quad_steps += np.maximum(v, floor0 if p == 0 else rows)
            steps += int(np.maximum(quad_steps, gap).sum())
            quads += row_blocks * col_blocks
    return Window3Issued(issued, steps, quads, grid.n * c_out)
