"""``O = P @ V_eff`` on R x C PE arrays with V reuse: schedule, functional model and exact
cycle model (``docs/linear.md``, section "P @ V on the PE arrays").

P is the (queries, keys) uint8 output of the integer softmax (scale 1/255), V the (keys,
channels) int8 value operand after the window rule (``docs/numerics.md`` sections 8 and 14,
:func:`golden.vector.attention_int`, :func:`golden.vector.pv_merged`).

The array is output stationary: PE (i, j) accumulates ``O[i, c]`` for query ``rb*R + i`` and
channel ``c`` = the j-th channel of the block's column block, in R0 only. Unlike a linear
layer, the reused operand's windows run along the **reduction** (the keys), and codes are per
(key, channel), i.e. per column: a FULL V follower's P is *added* to its anchor's P before the
multiply, a HALF follower's P is added to the anchor's P for the high-nibble product only.

Channels are grouped by V's reuse direction (t, y, x; empty ones skipped). Along a group's
axis the keys form **units** exactly as a linear layer's tokens do
(:func:`golden.engine.linear.linear_units`: a window's anchor and followers, a trailing
incomplete window with NONE / ABSENT followers). A **block** is R queries x C channels of
one group; it walks the group's units in order, and per unit runs up to three steps. In every
step of unit u the row lanes carry the same three P values of the row's query,
``p0, p1, p2 = P[i, member 0, 1, 2]`` (0 for an absent member); each column carries one byte
``b`` chosen by its own codes, and each PE decodes (kind, c1, c2) of its column into a
word ``(op, lo_sel, hi_sel, bsel)``:

* the pre-adder forms ``x_lo = sum of the p lanes in lo_sel`` and ``x_hi`` likewise
  (unsigned, up to 10 bits at window 3);
* ``op`` MUL: ``t0 = x_lo * lo(b)``, ``t1 = 16 * x_hi * hi(b)`` (``hi`` the signed high nibble);
  ``op`` PAIR: ``t0 = x_lo * b[3:0]``, ``t1 = x_hi * b[7:4]`` (two unsigned low nibbles);
* R0 takes ``t0 + t1``.

Step kinds (:func:`decode`):

* ``A`` (anchor), every unit: MUL of ``b = V[anchor, c]``, ``x_lo`` = anchor + FULL followers,
  ``x_hi`` = anchor + FULL and HALF followers (HALF shares the anchor's high nibble);
* ``F1``: follower 1's rest (NONE: MUL of its own V; HALF: its low nibble ``p1 * lo(V1)``) and,
  in lane 1 of a PAIR, a HALF follower 2's low nibble; issued when some real column of the
  block needs it;
* ``F2`` (window 3): what F1 could not take (a NONE follower 2, or a HALF one when F1 was a
  MUL for a NONE follower 1).

Plain numpy, no hardware imports.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from golden.checks import as_int8, check_bits, check_int, check_tokens, check_window
from golden.engine.linear import (ABSENT, ANCHOR, FOLLOWER1, FOLLOWER2, LinearCounters,
                                  LinearPlan, linear_plans)
from golden.engine.model import EngineTiming
from golden.numerics import AXIS_T, FULL, HALF, NONE, as_grid


__all__ = ["OP_IDLE", "OP_MUL", "OP_PAIR", "B_V0", "B_V1", "B_V2", "B_PACK", "PvWord", "decode",
           "PV_DECODE", "PV_WORK", "pv_plans", "pv_engine", "pv_terms", "pv_block_steps",
           "PvTiming", "PvCounters", "pv_counters", "pv_run_cycles", "pv_acc_width", "pv_p_words",
           "pv_v_words"]


#: Ops of the P @ V word: IDLE (nothing), MUL (an 8-bit V split into a signed high and an
#: unsigned low nibble), PAIR (two unsigned 4-bit nibbles of b, one per multiplier half).
OP_IDLE, OP_MUL, OP_PAIR = 0, 1, 2
#: What a column carries in a step: the anchor's, follower 1's or follower 2's V, or the
#: packed low nibbles ``lo(V1) | lo(V2) << 4`` (0 for an absent member).
B_V0, B_V1, B_V2, B_PACK = 0, 1, 2, 3


@dataclass(frozen=True)
class PvWord:
    """One PE's decoded word in a P @ V step. ``lo_sel``/``hi_sel``: bit j adds row lane
    ``p_j`` into ``x_lo``/``x_hi``."""
    op: int = OP_IDLE
    lo_sel: int = 0
    hi_sel: int = 0
    bsel: int = B_V0


def decode(kind: int, c1: int, c2: int) -> PvWord:
    """Word of a PE whose column has follower codes ``c1``, ``c2`` (FULL, HALF, NONE, ABSENT;
    window 2: ``c2`` ABSENT) at the step's unit, in a step of ``kind`` (0 A, 1 F1, 2 F2)."""
    for name, c in (("c1", c1), ("c2", c2)):
        if c not in (FULL, HALF, NONE, ABSENT):
            raise ValueError(f"{name} must be a code in {{0 FULL, 1 HALF, 2 NONE, 3 ABSENT}}, "
                             f"got {c!r}")
    if kind == ANCHOR:
        lo = 1 | (2 if c1 == FULL else 0) | (4 if c2 == FULL else 0)
        hi = 1 | (2 if c1 in (FULL, HALF) else 0) | (4 if c2 in (FULL, HALF) else 0)
        return PvWord(OP_MUL, lo, hi, B_V0)
    if kind == FOLLOWER1:
        if c1 == NONE:
            return PvWord(OP_MUL, 2, 2, B_V1)
        if c1 == HALF:        # lane 0: p1 * lo(V1); lane 1: p2 * lo(V2) when follower 2 is HALF
            return PvWord(OP_PAIR, 2, 4 if c2 == HALF else 0, B_PACK)
        if c2 == HALF:        # follower 1 needs nothing: follower 2's low nibble rides lane 1
            return PvWord(OP_PAIR, 0, 4, B_PACK)
        return PvWord()
    if kind == FOLLOWER2:
        if c2 == NONE:
            return PvWord(OP_MUL, 4, 4, B_V2)
        if c2 == HALF and c1 == NONE:   # F1 was a MUL for follower 1
            return PvWord(OP_PAIR, 0, 4, B_PACK)
        return PvWord()
    raise ValueError(f"kind must be 0 (A), 1 (F1) or 2 (F2), got {kind!r}")


def _table():
    t = np.zeros((4, 3, 4, 4), np.int8)
    for k in range(3):
        for c1 in range(4):
            for c2 in range(4):
                w = decode(k, c1, c2)
                t[:, k, c1, c2] = (w.op, w.lo_sel, w.hi_sel, w.bsel)
    return t


#: ``PV_DECODE[f, kind, c1, c2]`` with f = 0 op, 1 lo_sel, 2 hi_sel, 3 bsel.
PV_DECODE = _table()
#: ``PV_WORK[kind, c1, c2]``: the PE takes a product term in a step of that kind.
PV_WORK = PV_DECODE[0] != OP_IDLE


# -- operands ---------------------------------------------------------------------------------

def _as_p(p) -> np.ndarray:
    a = np.asarray(p)
    if a.dtype == np.bool_ or not np.issubdtype(a.dtype, np.integer) or a.ndim != 2:
        raise ValueError(f"p must be a 2-D integer array (queries, keys) of uint8 P, "
                         f"got dtype {a.dtype} and shape {a.shape}")
    if a.shape[0] < 1:
        raise ValueError("p must have at least one query row, got 0")
    if a.size and (a.min() < 0 or a.max() > 255):
        raise ValueError(f"p values must lie in [0, 255] (uint8 P of scale 1/255), "
                         f"got values in [{a.min()}, {a.max()}]")
    return a.astype(np.int64)


def pv_p_words(p, rows: int) -> list[tuple[int, int, int]]:
    """P as the P @ V arrays take it: one word per (row block, key), row blocks in order and
    keys in order within each, ``[(rb, key, word)]`` with query ``rb*rows + i``'s uint8 P in
    byte i of ``word`` (queries past the last row read as 0). What ``pv_engine``'s ``p_in``
    is written with, and what the P transposer makes of the vector unit's rows."""
    pm = _as_p(p)
    rows = check_int("rows", rows, 1, 1 << 12)
    q, n = pm.shape
    nrb = -(-q // rows)
    padded = np.zeros((nrb * rows, n), dtype=object)
    padded[:q] = pm
    blocks = padded.reshape(nrb, rows, n)
    words = sum(blocks[:, i, :] << (8 * i) for i in range(rows))      # (nrb, n), exact ints
    return [(rb, k, int(words[rb, k])) for rb in range(nrb) for k in range(n)]


def pv_v_words(v, cols: int) -> list[tuple[int, int, int]]:
    """V as the P @ V arrays take it: one word per (column block, key), column blocks in
    order and keys in order within each, ``[(cb, key, word)]`` with channel ``cb*cols + j``'s
    int8 V (two's complement) in byte j of ``word`` (channels past the last read as 0). What
    ``pv_engine``'s ``v_in`` is written with."""
    vm = as_int8(v, "v")
    if vm.ndim != 2:
        raise ValueError(f"v must be a 2-D (keys, channels) int8 array, got shape {vm.shape}")
    cols = check_int("cols", cols, 1, 1 << 12)
    n, d = vm.shape
    ncb = -(-d // cols)
    padded = np.zeros((n, ncb * cols), dtype=object)
    padded[:, :d] = vm.astype(np.int64) & 0xFF
    blocks = padded.reshape(n, ncb, cols)
    words = sum(blocks[:, :, j] << (8 * j) for j in range(cols))      # (n, ncb)
    return [(cb, k, int(words[k, cb])) for cb in range(ncb) for k in range(n)]


def _operands(p, v, grid):
    grid = as_grid(grid)
    pm = _as_p(p)
    vm = as_int8(v, "v")
    check_tokens(vm, "v", grid.n, str(grid))
    if pm.shape[1] != grid.n:
        raise ValueError(f"p must have one column per key token of the grid {grid} "
                         f"({grid.n}), got {pm.shape[1]}")
    return grid, pm, vm


def pv_plans(v, grid, directions=AXIS_T, window: int = 2, full_bits: int = 5,
             half_bits: int = 3, reuse: bool = True) -> list[LinearPlan]:
    """Per direction group of V's channels (t, y, x order, empty ones skipped): the key units,
    V by unit (``values`` (U, w, n), 0 where absent) and the follower codes (ABSENT included;
    ``reuse=False``: every present follower NONE). The same arrangement as a linear layer's
    activation (:func:`golden.engine.linear.linear_plans`)."""
    grid = as_grid(grid)
    vm = as_int8(v, "v")
    check_tokens(vm, "v", grid.n, str(grid))
    if not isinstance(reuse, (bool, np.bool_)):
        raise ValueError(f"reuse must be True or False, got {reuse!r}")
    return linear_plans(vm, grid, directions, window, full_bits, half_bits, reuse)


# -- functional model -------------------------------------------------------------------------

def pv_terms(op, x_lo, x_hi, b):
    """``(t0, t1)`` of the P @ V datapath (vectorized): MUL ``x_lo*lo(b)``, ``16*x_hi*hi(b)``;
    PAIR ``x_lo*b[3:0]``, ``x_hi*b[7:4]`` (unsigned nibbles); IDLE 0, 0. ``b`` int8 (or its
    byte), ``x_lo``, ``x_hi`` unsigned."""
    op = np.asarray(op)
    b8 = np.asarray(b, np.int64) & 0xFF
    lo = b8 & 0xF
    hi_u = b8 >> 4
    hi_s = np.where(hi_u >= 8, hi_u - 16, hi_u)
    x_lo = np.asarray(x_lo, np.int64)
    x_hi = np.asarray(x_hi, np.int64)
    t0 = np.where(op == OP_IDLE, 0, x_lo * lo)
    t1 = np.where(op == OP_MUL, 16 * x_hi * hi_s, np.where(op == OP_PAIR, x_hi * hi_u, 0))
    return t0, t1


def _column_bytes(values: np.ndarray, window: int) -> np.ndarray:
    """(4, U, n) int64: the column byte for each ``bsel`` (V0, V1, V2, packed nibbles)."""
    v0 = values[:, 0]
    v1 = values[:, 1]
    v2 = values[:, 2] if window == 3 else np.zeros_like(v0)
    pack = (v1 & 0xF) | ((v2 & 0xF) << 4)
    pack = np.where(pack >= 128, pack - 256, pack)        # as the int8 the column carries
    return np.stack([v0, v1, v2, pack])


def pv_engine(p, v, grid, directions=AXIS_T, window: int = 2, full_bits: int = 5,
              half_bits: int = 3, reuse: bool = True) -> np.ndarray:
    """(queries, channels) int64 ``O`` computed as the arrays compute it: every step of every
    unit through the decoded words and :func:`pv_terms`, all PEs at once.

    Equals ``golden.vector.attention_int(p, V_eff)`` bit for bit (``reuse=False``:
    ``p @ v``). Exact int64 accumulation: the PE's ``acc_width`` must cover it
    (:func:`pv_acc_width`).
    """
    grid, pm, vm = _operands(p, v, grid)
    plans = pv_plans(vm, grid, directions, window, full_bits, half_bits, reuse)
    out = np.zeros((pm.shape[0], vm.shape[1]), np.int64)
    for pl in plans:
        U, n = pl.members.shape[0], pl.channels.size
        present = pl.members >= 0
        lanes = np.zeros((3, pm.shape[0], U), np.int64)          # p0, p1, p2 by unit
        for j in range(window):
            lanes[j] = np.where(present[:, j], pm[:, np.where(present[:, j], pl.members[:, j],
                                                              0)], 0)
        cbytes = _column_bytes(pl.values, window)
        c1, c2 = pl.c1.astype(np.intp), pl.c2.astype(np.intp)
        # O[i, c] = sum_u sum_j p_j[i, u] * coef_j[u, c], coef_j collecting, over the step
        # kinds, the low- and high-half multiplicands that lane j feeds.
        coef = np.zeros((3, U, n), np.int64)
        for kind in range(window):
            op, lo_sel, hi_sel, bsel = (PV_DECODE[f, kind][c1, c2].astype(np.int64)
                                        for f in range(4))
            b = np.take_along_axis(cbytes, bsel[None], axis=0)[0]
            m_lo, m_hi = pv_terms(op, 1, 1, b)                     # multiplicands of x = 1
            for j in range(3):
                coef[j] += ((lo_sel >> j) & 1) * m_lo + ((hi_sel >> j) & 1) * m_hi
        acc = np.zeros((pm.shape[0], n), np.float64)
        for j in range(window):
            acc += lanes[j].astype(np.float64) @ coef[j].astype(np.float64)
        out[:, pl.channels] = acc.astype(np.int64)
    return out


def pv_acc_width(keys: int, p_sum: int | None = None) -> int:
    """Accumulator bits that hold every partial sum of one O element exactly: the register
    only ever holds a sum of whole products and of a HALF follower's high part (at most
    ``|16*hi|*x <= 128*x``), so ``|R0| <= 128 * sum(P)``; ``sum(P) <= 255 * keys`` for any P
    (``p_sum`` tighter when known: an integer softmax row sums to at most
    ``255 + keys // 2``)."""
    keys = check_int("keys", keys, 1, 1 << 40)
    total = 255 * keys if p_sum is None else check_int("p_sum", p_sum, 0, 255 * keys)
    return (128 * total).bit_length() + 1


# -- cycle model ------------------------------------------------------------------------------

def pv_block_steps(units, f1, f2, rows: int):
    """Steps of a block (vectorized): ``units`` A steps and the issued ``f1``/``f2`` steps,
    then bubbles so that the block lasts at least R steps: R0 is drained by the next block's
    first step (which also clears it), and the column port carries one drain wave of R cycles
    at a time."""
    s = np.asarray(units, np.int64) + np.asarray(f1, np.int64) + np.asarray(f2, np.int64)
    return np.maximum(s, rows)


_ENGINE_TIMING = EngineTiming()


@dataclass(frozen=True)
class PvTiming:
    """Fixed latencies of a P @ V run (the engine's conventions, ``docs/engine.md``):
    cycle 0 accepts ``start``; the first step reaches the array ``load_base`` cycles later
    (``pv_engine``: the first unit's reads in cycle 1, its words registered in cycle 2, its
    window codes and work bits registered in cycle 3, the step presented in cycle 4 and
    registered once before the array); steps then follow back to back across blocks; after
    the last step one final drain step, ``tail_base`` cycles of output register and the last
    drain wave's ``R + C`` cycles."""
    load_base: int = 5
    tail_base: int = _ENGINE_TIMING.tail_base


@dataclass
class PvCounters(LinearCounters):
    """Counters of one P @ V run on P arrays (sums over arrays unless per-array), in the
    linear layers' layout: ``issued`` A, F1, F2 steps; ``skipped`` F1/F2 steps not issued
    (``skipped[0]`` is 0: A always issues); ``bubbles``, ``blocks``, ``groups``;
    ``array_busy`` and ``array_steps`` per array; ``rb_steps``: each array's steps in one
    row block (all its column blocks) and ``row_blocks``, which :func:`pv_run_cycles` turns
    into the run's cycles for any arrival of P."""
    rb_steps: list = field(default_factory=list)
    row_blocks: int = 0


def _column_block_issue(work: np.ndarray, cols: int) -> np.ndarray:
    """(CB, U) bool: unit u's step is issued in column block cb when some real column of the
    block has work. ``work`` is (U, n) bool; padding columns have none."""
    U, n = work.shape
    ncb = -(-n // cols)
    padded = np.zeros((U, ncb * cols), bool)
    padded[:, :n] = work
    return padded.reshape(U, ncb, cols).any(axis=2).T


def pv_counters(p, v, grid, directions=AXIS_T, window: int = 2, rows: int = 4, cols: int = 4,
                arrays: int = 1, full_bits: int = 5, half_bits: int = 3, reuse: bool = True,
                timing: PvTiming | None = None, p_ready=None) -> PvCounters:
    """Exact counters of ``O = P @ V_eff`` on ``arrays`` R x C arrays.

    Column blocks are numbered over the groups in order (group t's first, C channels each,
    the last of a group padded); column block k runs on array ``k mod arrays``, which walks
    every row block of R queries and, in each, its column blocks in increasing k (a block's
    cost does not depend on the order). A block's
    issued F1/F2 steps depend only on its columns' codes (P is never reused), so they are the
    same for every row block of a column block. The arrays share no barrier (groups write
    disjoint channels of O): the run ends with the slowest array.

    ``p_ready``: P streamed in during the run (the engine core's attention blocks, ``BlockAttention``), the cycle (counted from
    the one that accepts ``start``) from which each row block of P may be read, one per row
    block in order; an array's first step of row block r then reaches it no earlier than
    ``p_ready[r] + 4`` (read, registered words, registered codes, presented, registered:
    the start's own latency, ``load_base`` = 1 + 4). ``None``: P written before ``start``.
    Only ``cycles`` depends on it.
    """
    timing = timing or PvTiming()
    grid, pm, vm = _operands(p, v, grid)
    rows = check_int("rows", rows, 1, 1 << 12)
    cols = check_int("cols", cols, 1, 1 << 12)
    arrays = check_int("arrays", arrays, 1, 1 << 10)
    window = check_window(window)
    check_bits(full_bits, half_bits)
    plans = pv_plans(vm, grid, directions, window, full_bits, half_bits, reuse)
    queries = pm.shape[0]
    nrb = -(-queries // rows)
    if p_ready is not None:
        p_ready = [int(x) for x in p_ready]
        if len(p_ready) != nrb or any(x < 1 for x in p_ready):
            raise ValueError(f"p_ready must hold one cycle >= 1 per row block ({nrb}), got "
                             f"{p_ready}")
    out = PvCounters(groups=len(plans), array_busy=[0] * arrays, array_steps=[0] * arrays)
    rb_steps = [0] * arrays               # an array's steps in one row block (all its blocks)
    k = 0                                                   # global column block index
    for pl in plans:
        U, n = pl.members.shape[0], pl.channels.size
        c1, c2 = pl.c1.astype(np.intp), pl.c2.astype(np.intp)
        f1w = PV_WORK[FOLLOWER1][c1, c2]                    # (U, n)
        f2w = PV_WORK[FOLLOWER2][c1, c2]
        f1 = _column_block_issue(f1w, cols).sum(axis=1)     # (CB,) issued per block
        f2 = _column_block_issue(f2w, cols).sum(axis=1)
        ncb = f1.size
        real = np.minimum(cols, n - np.arange(ncb) * cols)
        col_busy = U * real + np.add.reduceat(f1w.sum(axis=0) + f2w.sum(axis=0),
                                              np.arange(0, n, cols))   # per PE row
        s = pv_block_steps(U, f1, f2, rows)                 # (CB,) per row block
        out.blocks += ncb * nrb
        out.issued[0] += U * ncb * nrb
        out.issued[1] += int(f1.sum()) * nrb
        out.issued[2] += int(f2.sum()) * nrb
        out.skipped[1] += int((U - f1).sum()) * nrb
        out.skipped[2] += int((U - f2).sum()) * nrb if window == 3 else 0
        out.bubbles += int((s - U - f1 - f2).sum()) * nrb
        out.busy_pe_cycles += int(col_busy.sum()) * queries
        for cb in range(ncb):
            a = (k + cb) % arrays
            out.array_busy[a] += int(col_busy[cb]) * queries
            out.array_steps[a] += int(s[cb]) * nrb
            rb_steps[a] += int(s[cb])
        k += ncb
    out.rb_steps, out.row_blocks = rb_steps, nrb
    out.cycles = pv_run_cycles(rb_steps, nrb, rows, cols, p_ready, timing)
    return out


def pv_run_cycles(rb_steps, row_blocks: int, rows: int, cols: int, p_ready=None,
                  timing: PvTiming | None = None) -> int:
    """Cycles of a P @ V run (from the cycle that accepts ``start`` to the one ``done`` is
    first high) whose array ``a`` takes ``rb_steps[a]`` steps per row block, for
    ``row_blocks`` row blocks; ``p_ready`` as in :func:`pv_counters`. Each array's next step
    reaches it row block by row block; the run ends with the slowest array, its final drain
    step, the output register and the last drain wave."""
    timing = timing or PvTiming()
    ends = []
    for steps in rb_steps:
        t = timing.load_base
        for r in range(row_blocks):
            if p_ready is not None and steps:
                t = max(t, p_ready[r] + timing.load_base - 1)
            t += steps
        ends.append(t)
    return max(ends) + 1 + timing.tail_base + rows + cols
