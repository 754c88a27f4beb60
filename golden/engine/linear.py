"""Window units of a linear layer and the ReusePE's linear-mode decode (``docs/linear.md``).

``Y = X_eff @ W`` (``docs/numerics.md`` section 8, :func:`golden.linear`). Input channels are
grouped by reuse direction (t, y, x; empty directions skipped); within a group, tokens are
cut along the group's axis into windows of ``w`` tokens (2 or 3). A window (its anchor and
its ``w - 1`` followers) is a **unit**; the tokens of a trailing incomplete window form one
unit too (followers NONE, missing ones ABSENT), so every token belongs to exactly one unit
(:func:`linear_units`, :func:`linear_plans`: units, values and codes per group). The engine
core's window-3 blocks (``golden.engine.window3``) and P @ V's V windows
(``golden.engine.pv``) are built on these units.

The ReusePE's linear mode computes a unit on one PE row (R0 the anchor's output, R1
follower 1's, R2 follower 2's; a PE column holds one output feature, the column port
carries ``W[c, j]``) in three kinds of channel steps:

* ``A`` (anchor): every channel of the group. MUL split on the row: R0 takes the product,
  R1/R2 take the part their follower shares (FULL: all of it, HALF: the high part
  ``16*hi(a)*w``, since a HALF follower has the anchor's high nibble).
* ``F1``: row lanes carry ``a0 = follower 1``, ``a1 = follower 2``; a PE adds follower 1's
  rest (NONE: MUL, HALF: the low nibble ``lo(f1)*w``) and, when follower 1 leaves the lane
  free, follower 2's low nibble (two LOW lanes in one step).
* ``F2`` (window 3): ``a0 = follower 2``; what F1 could not take: a NONE follower 2, or a
  HALF one whose row used F1 for a MUL.

:func:`decode` gives each PE's word, :data:`WORK` whether it has work (the window-code
units' F1/F2 work bits); :func:`linear_by_decode` computes Y through those words, every PE
at once (equal to :func:`golden.linear`). The engine core runs linear layers on its tile
passes instead (``docs/engine.md``, "Linear blocks"); its whole-layer cycle model is
``golden.engine.linear_layer``.

Plain numpy, no hardware imports; the PE's terms and gates come from :mod:`golden.pe.model`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from golden.array.schedule import \
    ABSENT  # code 3: a follower slot without a token (as for attention)
from golden.checks import as_int8, check_axes, check_bits, check_int, check_tokens, check_window
from golden.numerics import AXIS_T, FULL, HALF, NONE, _axis_channels, as_grid
from golden.pe.model import Op, Part, PECtrl, Split, pe_contributions
from golden.window import window_masks


__all__ = ["ABSENT", "KINDS", "ANCHOR", "FOLLOWER1", "FOLLOWER2", "decode", "DECODE", "WORK",
           "linear_units", "LinearPlan", "linear_plans", "linear_by_decode", "LinearCounters"]


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

def linear_by_decode(x, w, grid, directions=AXIS_T, window: int = 2, full_bits: int = 5,
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


# -- counters ---------------------------------------------------------------------------------

@dataclass
class LinearCounters:
    """Counters of a run of window blocks on P arrays (sums over arrays unless per-array):
    the base of ``golden.engine.pv.PvCounters``."""
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
