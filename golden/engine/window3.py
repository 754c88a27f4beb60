"""Linear blocks with windows of 3 on the KaleidoEngine (``docs/engine.md``, "Linear windows
of 3"): the functional and the cycle model of a run with ``cfg.linear`` and ``cfg.window3``
on a build with ``engine_window3``.

The quads follow the register plan of :mod:`golden.array.window3`: R window-3 units of X
on the rows, C single weight rows on the columns, passes 0-2 (rows: anchors, second
followers, first followers), no pass 3. Per chunk (the channels of one group, at most W) and
array ``a``: column blocks ``a, a+P, ...`` of the block's ``N`` weight rows (K units are the
rows themselves: ``ceil(N / C)`` column blocks), for each every row block of the group's
window units (:func:`golden.engine.linear.linear_plans`, natural order: a window-3 run uses
neither the scheduler nor the matcher).

Timing (the sequencer's, ``kaleido_hw/engine/array_sequencer.py``): the loader reads a quad's
``3*M`` row words (anchor, follower 1, follower 2 of each unit; ``M = max(R, C)``) while the
quad before steps, and the anchors and second followers are fetched into the stepping slot
just in time, after the loader is done; so pass 0 lasts at least ``3*M`` steps, passes 1 and 2
at least ``R``:

    steps(quad) = max(n, 3M) + max(i1, R) + max(i2, R)

with ``n`` the chunk's channels, ``i1`` (``i2``) the channels where some real row's second
(first) follower is HALF or NONE. A chunk's first quad is read before any quad steps, and
its codes are formed one cycle after its last word (a register stage in front of the window
rule): ``gap = 3M + 2`` cycles from the chunk's start to its first step. The chunks follow each other
as in :class:`golden.engine.model.ChunkTimeline` without a scheduler.

Plain numpy, no hardware imports.
"""

from __future__ import annotations

import numpy as np

from golden.array.window3 import WORK3, window3_engine
from golden.checks import as_int8, check_bits, check_tokens
from golden.engine.linear import linear_plans
from golden.engine.model import (EngineCounters, EngineParams, EngineTiming, chunks,
                                 variant_flags)
from golden.numerics import _as_groups, as_grid


__all__ = ["WINDOW3_VARIANTS", "window3_gap", "window3_block", "window3_counters"]

#: Variants a window-3 run takes (no scheduler, no matcher).
WINDOW3_VARIANTS = ("dense", "pe")


def window3_gap(rows: int, cols: int) -> int:
    """Cycles from a chunk's start to its first step: ``3*max(R, C)`` reads, the codes'
    register stage, and one."""
    return 3 * max(rows, cols) + 2


def _check(x, w_rows, grid, groups, variant, full_bits, half_bits):
    grid, groups = as_grid(grid), _as_groups(groups)
    if variant not in WINDOW3_VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(WINDOW3_VARIANTS)} for a window-3 "
                         f"run (its quads have no pass 3 to match, and it runs in natural "
                         f"order), got {variant!r}")
    check_bits(full_bits, half_bits)
    x, w_rows = as_int8(x, "x"), as_int8(w_rows, "w_rows")
    check_tokens(x, "x", grid.n, str(grid), groups.head_dim)
    check_tokens(w_rows, "w_rows", grid.n, str(grid), groups.head_dim)
    reuse = variant_flags(variant)[0]
    return x, w_rows, grid, groups, reuse


def window3_block(x, w_rows, grid, groups, variant: str = "pe", full_bits: int = 5,
                  half_bits: int = 3) -> np.ndarray:
    """(N, N) int64 block S[i, j] = Y[i, j]: the activation ``x`` ((N, d) on ``grid``) times
    the weight rows ``w_rows`` ((N, d): row j = output feature j), X reused in windows of 3
    along each channel's group direction, computed through the window-3 decode table
    (:func:`golden.array.window3.window3_engine`; equals ``golden.linear(x, w_rows.T, grid,
    directions, 3, ...)``; ``dense``: ``x @ w_rows.T``)."""
    x, w_rows, grid, groups, reuse = _check(x, w_rows, grid, groups, variant, full_bits,
                                            half_bits)
    return window3_engine(x, w_rows.T, grid, groups.channel_directions(), full_bits, half_bits,
                          reuse)


def _group_codes(x, grid, groups, full_bits, half_bits, reuse):
    """``{group: ((U, n) c1 codes, (U, n) c2 codes)}`` of each non-empty group's window units
    at its channels, ABSENT where the member is missing (``linear_plans`` of the group's
    channels along its direction)."""
    out = {}
    for g in range(3):
        ch = groups.channels(g)
        if ch.size:
            pl, = linear_plans(x[:, ch], grid, groups.directions[g], 3, full_bits, half_bits,
                               reuse, with_values=False)
            out[g] = (pl.c1, pl.c2)
    return out


def window3_counters(x, w_rows, grid, groups, params: EngineParams = EngineParams(),
                     variant: str = "pe", full_bits: int = 5, half_bits: int = 3,
                     timing: EngineTiming | None = None) -> EngineCounters:
    """Every counter of a window-3 run, cycle-exact per the module docstring (the counters of
    :class:`golden.engine.model.EngineCounters`; pass 3 issues and skips nothing, nothing is
    merged). The weights do not change a counter; ``w_rows`` is checked like the RTL's
    operand."""
    timing = timing or EngineTiming()
    x, w_rows, grid, groups, reuse = _check(x, w_rows, grid, groups, variant, full_bits,
                                            half_bits)
    P, R, C = params.arrays, params.rows, params.cols
    M = max(R, C)
    gap = window3_gap(R, C)
    N = grid.n
    CB = -(-N // C)
    col_real = np.minimum(C, N - C * np.arange(CB))                  # real columns per block
    owner = np.arange(CB) % P
    codes = _group_codes(x, grid, groups, full_bits, half_bits, reuse)
    busy = np.zeros(P, np.int64)
    issued = np.zeros((P, 4), np.int64)
    skipped = np.zeros((P, 4), np.int64)
    bubbles = np.zeros(P, np.int64)
    quads = np.zeros(P, np.int64)
    work1, work2 = WORK3[1], WORK3[2]                                  # (c1, c2) tables
    starts, lengths = [], []
    end = timing.load_base - timing.barrier
    chunk_list = chunks(groups, params.width)
    for ch in chunk_list:
        c1, c2 = (c[:, ch.local] for c in codes[ch.group])
        U, n = c1.shape
        RB = -(-U // R)
        pad = RB * R - U
        blocks = lambda a: np.pad(a, ((0, pad), (0, 0))).reshape(RB, R, n)  # noqa: E731
        real = blocks(np.ones((U, n), bool))
        # Per row block: channels some real row needs in passes 1, 2; rows working per channel.
        rows1 = (blocks(work1[c1, c2]) & real).sum(axis=1)           # (RB, n)
        rows2 = (blocks(work2[c1, c2]) & real).sum(axis=1)
        i1 = (rows1 > 0).sum(axis=1)                                  # (RB,)
        i2 = (rows2 > 0).sum(axis=1)
        rows0 = real[:, :, 0].sum(axis=1)                             # real rows per block
        steps = max(n, 3 * M) + np.maximum(i1, R) + np.maximum(i2, R)  # (RB,)
        quad_busy = rows0 * n + rows1.sum(axis=1) + rows2.sum(axis=1)   # per real column
        np.add.at(busy, owner, col_real * int(quad_busy.sum()))
        np.add.at(quads, owner, RB)
        np.add.at(issued[:, 0], owner, n * RB)
        np.add.at(issued[:, 1], owner, int(i1.sum()))
        np.add.at(issued[:, 2], owner, int(i2.sum()))
        np.add.at(skipped[:, 1], owner, int((n - i1).sum()))
        np.add.at(skipped[:, 2], owner, int((n - i2).sum()))
        np.add.at(bubbles, owner, int((steps - n - i1 - i2).sum()))
        # T_a: the first quad's reads, every quad's steps (each at least the gap), the last
        # quad's steps only.
        blocks_of = np.bincount(owner, minlength=P)
        occupied = np.maximum(steps, gap).sum()
        T = np.where(blocks_of > 0, gap + blocks_of * occupied
                     - max(int(steps[-1]), gap) + int(steps[-1]), 0)
        start = end + timing.barrier
        end = start + int(T.max())
        starts.append(start)
        lengths.append(int(T.max()))
    cycles = end + 1 + timing.tail_base + R + C
    steps_all = issued.sum(axis=1) + bubbles
    return EngineCounters(cycles, len(chunk_list), busy, issued, skipped,
                          np.zeros(P, np.int64), bubbles, quads, cycles - steps_all,
                          np.asarray(starts, np.int64), np.asarray(lengths, np.int64), ())
