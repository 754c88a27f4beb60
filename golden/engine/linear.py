"""Linear layers on the reuse-aware PE arrays: schedule, functional model and exact cycle
model (``docs/linear.md``).

``Y = X_eff @ W`` (``docs/numerics.md`` section 8, :func:`golden.linear`) on R x C arrays of
ReusePEs, output stationary. Input channels are grouped by reuse direction (t, y, x; empty
directions skipped); each group is computed on its own and the groups' partial outputs add
up (one accumulation plane per group, like the attention engine's planes).

Within a group, tokens are cut along the group's axis into windows of ``w`` tokens (2 or 3).
A window (its anchor and its ``w - 1`` followers) is a **unit**; the tokens of a trailing
incomplete window form one unit too (followers NONE, missing ones ABSENT), so every token
belongs to exactly one unit. A PE row holds one unit: R0 accumulates the anchor's output,
R1 follower 1's, R2 follower 2's. A PE column holds one output feature; the column port
carries the weight ``W[c, j]``.

A **block** is R consecutive units x C consecutive output features. It runs three kinds of
channel steps:

* ``A`` (anchor): every channel of the group. MUL split on the row: R0 takes the product,
  R1/R2 take the part their follower shares (FULL: all of it, HALF: the high part
  ``16*hi(a)*w``, since a HALF follower has the anchor's high nibble).
* ``F1``: a channel is issued when some row of the block has work at it. Row lanes carry
  ``a0 = follower 1``, ``a1 = follower 2``; a PE adds follower 1's rest (NONE: MUL, HALF: the
  low nibble ``lo(f1)*w``) and, when follower 1 leaves the lane free, follower 2's low
  nibble (two LOW lanes in one step).
* ``F2`` (window 3): ``a0 = follower 2``; what F1 could not take: a NONE follower 2, or a
  HALF one whose row used F1 for a MUL.

Every PE then does the minimum number of steps for its (c1, c2) pair (0, 1 or 2), and R0,
R1, R2 leave through the column port: ``w`` drain waves of R cycles each per block, which
set the block's minimum length (:func:`block_steps`).

Plain numpy, no hardware imports; the PE's terms and gates come from :mod:`golden.pe.model`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from golden.array.schedule import \
    ABSENT  # code 3: a follower slot without a token (as for attention)
from golden.checks import as_int8, check_axes, check_bits, check_int, check_tokens, check_window
from golden.engine.model import EngineTiming
from golden.numerics import AXIS_T, FULL, HALF, NONE, _axis_channels, as_grid
from golden.pe.model import Op, Part, PECtrl, Split, pe_contributions
from golden.window import window_masks


__all__ = ["ABSENT", "KINDS", "ANCHOR", "FOLLOWER1", "FOLLOWER2", "decode", "DECODE", "WORK",
           "linear_units", "LinearPlan", "linear_plans", "linear_engine", "block_steps",
           "LinearTiming", "LinearCounters", "linear_counters"]


#: Step kinds of a block, in issue order.
KINDS = ("A", "F1", "F2")
ANCHOR, FOLLOWER1, FOLLOWER2 = 0, 1, 2

_P, _H, _L, _N = Part.PROD, Part.HIGH, Part.LOW, Part.NONE


def _word(op, split=Split.ROW, p0=_N, p1=_N, p2=_N) -> PECtrl:
    """A resolved ReusePE control word: the per-PE decoder has already looked at the codes."""
    return PECtrl(op=op, split=split, parts=(p0, p1, p2))


_IDLE = PECtrl()


def decode(kind: int, c1: int, c2: int) -> PECtrl:
    """Resolved ReusePE word of one PE in a step of ``kind`` (0 A, 1 F1, 2 F2), given the codes of its
    row's follower 1 (``c1``) and follower 2 (``c2``) at the step's channel (FULL, HALF, NONE,
    ABSENT; with window 2, ``c2`` is ABSENT).

    Row lanes: A: ``a0`` = anchor; F1: ``a0`` = follower 1, ``a1`` = follower 2; F2: ``a0`` =
    follower 2. Column: ``b`` = the weight. Split is always ROW (the activation is split:
    its high nibble is what a HALF follower shares). For LOW, part LOW is lane 0, HIGH lane 1.
    """
    if kind == ANCHOR:
        share = {FULL: _P, HALF: _H}
        return _word(Op.MUL, Split.ROW, _P, share.get(c1, _N), share.get(c2, _N))
    if kind == FOLLOWER1:
        if c1 == NONE:
            return _word(Op.MUL, Split.ROW, p1=_P)
        if c1 == HALF:
            return _word(Op.LOW, Split.ROW, p1=_L, p2=_H if c2 == HALF else _N)
        if c2 == HALF:            # follower 1 needs nothing: its lane-1 slot serves follower 2
            return _word(Op.LOW, Split.ROW, p2=_H)
        return _IDLE
    if kind == FOLLOWER2:
        if c2 == NONE:
            return _word(Op.MUL, Split.ROW, p2=_P)
        if c2 == HALF and c1 == NONE:   # F1 was a MUL for follower 1
            return _word(Op.LOW, Split.ROW, p2=_L)
        return _IDLE
    raise ValueError(f"kind must be 0 (A), 1 (F1) or 2 (F2), got {kind!r}")


def _table():
    op = np.zeros((3, 4, 4), np.int8)
    split = np.zeros_like(op)
    part = np.zeros((3, 4, 4, 3), np.int8)
    for k in range(3):
        for c1 in range(4):
            for c2 in range(4):
                word = decode(k, c1, c2)
                op[k, c1, c2], split[k, c1, c2] = word.op, word.split
                part[k, c1, c2] = word.parts
    return op, split, part


#: ``DECODE[0][k, c1, c2]`` op, ``DECODE[1]`` split, ``DECODE[2][..., r]`` part taken by R_r.
DECODE = _table()
#: ``WORK[k, c1, c2]``: the PE is busy (takes a term) in a step of kind k.
WORK = DECODE[0] != Op.IDLE


# -- units -----------------------------------------------------------------------------------

def linear_units(grid, axis: int, window: int = 2) -> np.ndarray:
    """(U, window) int64 token indices of every unit along ``axis`` (-1: slot without token).

    Unit of token (t, y, x): its flat index in a grid whose length on ``axis`` is
    ``ceil(L / window)``, with the coordinate on ``axis`` replaced by ``coord // window``; the
    token is the unit's member ``coord % window`` (member 0 the anchor). So units are numbered
    in the token order of their anchors, like the attention units of ``docs/array.md``.
    """
    grid = as_grid(grid)
    axis = check_int("axis", axis, 0, 2, " (0 t, 1 y, 2 x)")
    window = check_window(window)
    shape = list(grid.shape)
    length = shape[axis]
    ushape = list(shape)
    ushape[axis] = -(-length // window)
    coords = np.indices(ushape).reshape(3, -1)
    members = np.full((coords.shape[1], window), -1, np.int64)
    for j in range(window):
        c = coords.copy()
        c[axis] = c[axis] * window + j
        ok = c[axis] < length
        members[ok, j] = np.ravel_multi_index(tuple(c[:, ok]), shape)
    return members


@dataclass
class LinearPlan:
    """One direction group's operands arranged by unit."""
    axis: int
    channels: np.ndarray    # (n,) input channels of the group
    members: np.ndarray     # (U, w) token indices, -1 where absent
    values: np.ndarray | None   # (U, w, n) int64 activation values (0 where absent)
    codes: np.ndarray       # (U, w - 1, n) uint8 follower codes incl. ABSENT

    @property
    def c1(self):
        """(U, n) follower 1's codes."""
        return self.codes[:, 0]

    @property
    def c2(self):
        """Follower 2's codes; all ABSENT for window 2."""
        if self.codes.shape[1] > 1:
            return self.codes[:, 1]
        return np.full_like(self.codes[:, 0], ABSENT)


def _check_x(x, grid):
    x = as_int8(x, "x")
    check_tokens(x, "x", grid.n, str(grid))
    return x


def _check_w(w, channels):
    wm = as_int8(w, "w")
    if wm.ndim != 2 or wm.shape[0] != channels or wm.shape[1] < 1:
        raise ValueError(f"w must have shape (C_in, C_out) with C_in = {channels} (the channels "
                         f"of x), got {tuple(wm.shape)}")
    return wm


def _check_half(half_bits):
    if half_bits < 3:
        raise ValueError(f"half_bits must be at least 3 on the PE (its HALF split is the high "
                         f"nibble), got {half_bits}")


def linear_plans(x, grid, directions=AXIS_T, window: int = 2, full_bits: int = 5,
                 half_bits: int = 3, reuse: bool = True,
                 with_values: bool = True) -> list[LinearPlan]:
    """Per direction group (t, y, x order, empty ones skipped): units, values and codes.

    Codes come from :func:`golden.window_masks` (so tokens of a trailing incomplete window are
    NONE); with ``reuse=False`` every present follower is NONE (the dense baseline).
    ``with_values=False`` leaves ``values`` None (the cycle model needs only the codes).
    """
    grid = as_grid(grid)
    window = check_window(window)
    full_bits, half_bits = check_bits(full_bits, half_bits)
    _check_half(half_bits)
    x = _check_x(x, grid)
    axes = check_axes(directions, x.shape[1])
    if reuse:
        masks = window_masks(x, grid, axes, window, full_bits, half_bits)
    else:
        masks = np.full(x.shape, NONE, np.uint8)
    plans = []
    for axis, chans in _axis_channels(axes):
        ch = np.arange(x.shape[1])[chans]
        members = linear_units(grid, axis, window)
        present = members >= 0
        tok = np.where(present, members, 0)
        values = None
        if with_values:
            values = np.where(present[..., None], x[np.ix_(tok.ravel(), ch)].reshape(
                members.shape + (ch.size,)), 0).astype(np.int64)
        fol = tok[:, 1:]
        codes = np.where(present[:, 1:, None], masks[np.ix_(fol.ravel(), ch)].reshape(
            fol.shape + (ch.size,)), ABSENT).astype(np.uint8)
        plans.append(LinearPlan(axis, ch, members, values, codes))
    return plans


# -- functional model ------------------------------------------------------------------------

def linear_engine(x, w, grid, directions=AXIS_T, window: int = 2, full_bits: int = 5,
                  half_bits: int = 3, reuse: bool = True) -> np.ndarray:
    """(N, C_out) int64 ``Y`` computed the way the arrays compute it: every channel step of
    every kind through the ReusePE's terms (:func:`golden.pe.model.pe_contributions`)
    with the words of :func:`decode`, every PE at once; R0/R1/R2 of each unit go to its
    anchor / follower 1 / follower 2. Equals :func:`golden.linear` bit for bit (``reuse=False``:
    ``X @ W``). Registers are exact (int64): the PE's ``acc_width`` must cover a group's sum.
    """
    grid = as_grid(grid)
    x = _check_x(x, grid)
    wm = _check_w(w, x.shape[1]).astype(np.int64)
    plans = linear_plans(x, grid, directions, window, full_bits, half_bits, reuse)
    y = np.zeros((grid.n, wm.shape[1]), np.int64)
    op_t, split_t, part_t = DECODE
    for pl in plans:
        U, n = pl.members.shape[0], pl.channels.size
        regs = [np.zeros((U, wm.shape[1]), np.int64) for _ in range(3)]
        c1, c2 = pl.c1, pl.c2
        f2 = pl.values[:, 2] if window == 3 else np.zeros_like(pl.values[:, 0])
        lanes = {ANCHOR: (pl.values[:, 0], 0), FOLLOWER1: (pl.values[:, 1], f2),
                 FOLLOWER2: (f2, 0)}
        for kind in range(window):
            a0_all, a1_all = lanes[kind]
            for i in range(n):
                k1, k2 = c1[:, i], c2[:, i]
                ctrl = PECtrl(op=op_t[kind, k1, k2][:, None].astype(np.int64),
                              split=split_t[kind, k1, k2][:, None].astype(np.int64),
                              parts=tuple(part_t[kind, k1, k2, r][:, None].astype(np.int64)
                                          for r in range(3)))
                a0 = a0_all[:, i][:, None]
                a1 = a1_all[:, i][:, None] if isinstance(a1_all, np.ndarray) else 0
                b = wm[pl.channels[i]][None, :]
                contrib, _ = pe_contributions(ctrl, a0, a1, b)
                for r in range(3):
                    regs[r] += contrib[r]
        for j in range(window):
            ok = pl.members[:, j] >= 0
            y[pl.members[ok, j]] += regs[j][ok]
    return y


# -- cycle model -----------------------------------------------------------------------------

def block_steps(n, f1, f2, rows: int, window: int):
    """Steps of a block (vectorized over blocks): ``n`` A steps, ``f1``/``f2`` issued F1/F2
    steps, then bubbles until its registers have drained.

    The column port reads one register of one row per cycle, so a drain wave (one register of
    every PE of a column) occupies it R cycles, and waves start at least R steps apart. The
    waves: R0 once the A steps are done (step ``d0 = max(n, R)``: R0 is not written after
    them, and the previous block's last wave ends at step R), R1 once F1 is done
    (``d1 = max(n + f1, d0 + R)``, window 3), and the last register (R1 for window 2, R2
    for window 3) with the next block's first step, which clears the registers (its pre-update
    value is drained): so that last wave must wait R steps after the previous one.
    """
    n = np.asarray(n, np.int64)
    f1 = np.asarray(f1, np.int64)
    f2 = np.asarray(f2, np.int64)
    d0 = np.maximum(n, rows)
    if window == 2:
        return np.maximum(n + f1, d0 + rows)
    d1 = np.maximum(n + f1, d0 + rows)
    return np.maximum(n + f1 + f2, d1 + rows)


#: The attention engine's latencies, which the linear runs share.
_ENGINE_TIMING = EngineTiming()


@dataclass(frozen=True)
class LinearTiming:
    """Fixed latencies of a linear run, with the attention engine's conventions
    (``docs/engine.md``, "Timing"): cycle 0 accepts ``start``; ``load_base`` cycles before
    the first reads; a block loads its R units' ``w`` tokens (``w*R`` reads plus two cycles:
    the read port and the register in front of the window codes, ``gap``) while the previous block runs; groups are separated by ``barrier``; at the end
    one final step drains the last register, ``tail_base`` cycles of registers (the
    sequencer's output register and the register stage in front of the array) and ``R + C``
    cycles of drain wave. ``load_base`` and ``barrier`` are ``golden.engine.model.EngineTiming``'s."""
    load_base: int = _ENGINE_TIMING.load_base
    tail_base: int = _ENGINE_TIMING.tail_base + 1
    barrier: int = _ENGINE_TIMING.barrier

    @staticmethod
    def gap(rows: int, window: int) -> int:
        """Minimum cycles between block starts: the block's ``window*rows`` token reads + 2."""
        return window * rows + 2


@dataclass
class LinearCounters:
    """Counters of one linear run on P arrays (sums over arrays unless per-array)."""
    cycles: int = 0
    busy_pe_cycles: int = 0
    issued: list = field(default_factory=lambda: [0, 0, 0])    # A, F1, F2 steps
    skipped: list = field(default_factory=lambda: [0, 0, 0])   # channel steps not issued
    bubbles: int = 0
    blocks: int = 0
    groups: int = 0
    array_busy: list = field(default_factory=list)     # busy PE-cycles per array
    array_steps: list = field(default_factory=list)    # issued + bubble steps per array

    @property
    def steps(self) -> int:
        """Issued plus bubble steps, over all arrays."""
        return sum(self.issued) + self.bubbles

    def as_dict(self) -> dict:
        """Every counter as a JSON-ready dict."""
        return {"cycles": self.cycles, "busy_pe_cycles": self.busy_pe_cycles,
                "issued": list(self.issued), "skipped": list(self.skipped),
                "bubbles": self.bubbles, "blocks": self.blocks, "groups": self.groups,
                "array_busy": list(self.array_busy), "array_steps": list(self.array_steps)}


def _block_issue(work: np.ndarray, rows: int) -> np.ndarray:
    """(RB,) issued steps per row block: channels where some row of the block has work.
    ``work`` is (U, n) bool; padding rows have none."""
    U, n = work.shape
    nrb = -(-U // rows)
    padded = np.zeros((nrb * rows, n), bool)
    padded[:U] = work
    return padded.reshape(nrb, rows, n).any(axis=1).sum(axis=1)


def linear_counters(x, w, grid, directions=AXIS_T, window: int = 2, rows: int = 4,
                    cols: int = 4, arrays: int = 1, full_bits: int = 5, half_bits: int = 3,
                    reuse: bool = True, timing: LinearTiming | None = None) -> LinearCounters:
    """Exact counters of ``Y = X_eff @ W`` on ``arrays`` R x C arrays (``docs/linear.md``).

    Per group: column block ``cb`` (output features ``cb*C ..``) runs on array ``cb mod P``;
    each array walks its column blocks in increasing ``cb`` and, for each, every row block.
    A block's issued F1/F2 steps depend only on its rows' codes (weights are never reused),
    so they are computed once per row block (an OR over the block's rows per channel) and
    shared by all column blocks. Busy PE-cycles: every (unit, output feature) pair is busy in
    every A step and in the F steps its codes need.
    """
    timing = timing or LinearTiming()
    grid = as_grid(grid)
    x = _check_x(x, grid)
    wm = _check_w(w, x.shape[1])
    rows = check_int("rows", rows, 1, 1 << 12)
    cols = check_int("cols", cols, 1, 1 << 12)
    arrays = check_int("arrays", arrays, 1, 1 << 10)
    window = check_window(window)
    plans = linear_plans(x, grid, directions, window, full_bits, half_bits, reuse,
                         with_values=False)
    c_out = wm.shape[1]
    ncb = -(-c_out // cols)
    real_cols = np.minimum(cols, c_out - np.arange(ncb) * cols)     # (ncb,)
    gap = timing.gap(rows, window)
    out = LinearCounters(groups=len(plans), array_busy=[0] * arrays, array_steps=[0] * arrays)
    end = timing.load_base - timing.barrier
    for pl in plans:
        n = pl.channels.size
        c1, c2 = pl.c1.astype(np.intp), pl.c2.astype(np.intp)
        f1w = WORK[FOLLOWER1][c1, c2]
        f2w = WORK[FOLLOWER2][c1, c2]
        f1 = _block_issue(f1w, rows)
        f2 = _block_issue(f2w, rows)
        nrb = f1.size
        s = block_steps(n, f1, f2, rows, window)                      # (RB,)
        unit_busy = n + f1w.sum(axis=1) + f2w.sum(axis=1)             # (U,)
        busy_per_cb = int(unit_busy.sum())
        blocks = ncb * nrb
        out.blocks += blocks
        out.issued[0] += n * blocks
        out.issued[1] += int(f1.sum()) * ncb
        out.issued[2] += int(f2.sum()) * ncb
        out.skipped[1] += (n * nrb - int(f1.sum())) * ncb
        out.skipped[2] += ((n * nrb - int(f2.sum())) * ncb) if window == 3 else 0
        out.bubbles += int((s - n - f1 - f2).sum()) * ncb
        out.busy_pe_cycles += busy_per_cb * c_out
        # Time of each array in this group.
        occupied = int(np.maximum(s, gap).sum())                       # one column block
        longest = 0
        for a in range(arrays):
            mine = np.arange(a, ncb, arrays)
            if mine.size == 0:
                continue
            m = mine.size
            t_a = gap + m * occupied - max(int(s[-1]), gap) + int(s[-1])
            longest = max(longest, t_a)
            out.array_busy[a] += busy_per_cb * int(real_cols[mine].sum())
            out.array_steps[a] += int(s.sum()) * m
        start = end + timing.barrier
        end = start + longest
    out.cycles = end + 1 + timing.tail_base + rows + cols
    return out
