"""Tile-quad schedule of one reuse-aware PE array: numerics and cycle model (``docs/array.md``).

A channel group ``g`` pairs tokens along its direction into *units*: an anchor (or an
unpaired token) and its follower, if any. An R x C array takes R row units of Q and C column
units of K at a time, a *tile quad*:

=======  ==================  =====================
tile     rows (Q)            columns (K)
=======  ==================  =====================
T0       anchors             anchors
T1       anchors             followers (effective)
T2       followers (eff.)    anchors
T3       followers (eff.)    followers (eff.)
=======  ==================  =====================

and computes it in four passes over the group's channels, one per tile. Each PE keeps three
accumulators; which tile a register holds changes from pass to pass:

=====  ==========  ==========  ==========  ====================================
pass   R0          R1          R2          at the pass's first step
=====  ==========  ==========  ==========  ====================================
0      T0          T1          T2          drain R0 (previous quad's T3), clear all
1      T1          T3          T2          drain R0 (T0), R0 <- R1, clear R1
2      T2          T3          --          drain R0 (T1), R0 <- R2
3      T3          --          --          drain R0 (T2), R0 <- R1
=====  ==========  ==========  ==========  ====================================

Products are formed from the two 4x8 multipliers; for a MUL the *high part* is the product
with the split operand's signed high nibble (shifted by 4), the *low part* the rest. Pass 0
hands the tile-0 product, or its high part, to R1/R2 for tiles 1 and 2 (the paper's Mode 0);
passes 1 and 2 hand products on to tile 3 (Mode 1); HALF followers only add their low-nibble
products (Mode 2); the rest are plain products (Mode 3). :func:`decode` is the complete
table, per pass and per pair (row follower code, column follower code). With three
registers, tile 3 cannot take a reuse from pass 0, so when both followers are FULL tile 3
recomputes the anchor product in pass 1 (one multiply the oracle counts as free): this and
the HALF/HALF case of tile 2 are where the hardware falls short of the oracle's count.

Everything here is plain numpy. :func:`tile_engine` and :func:`tile_counters` run the schedule
on one array over whole channel groups; the engine (``golden.engine.model``) runs the same
decode table and passes chunk by chunk on P arrays, and with one array, variant ``pe`` and
chunks as wide as the groups its counters equal :func:`tile_counters`
(``tests/engine/test_engine_model.py``), which is how the engine's RTL holds this model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from golden.numerics import FULL, HALF, NONE, _as_groups, as_grid, effective_operand, reuse_masks
from golden.window import window_masks


__all__ = [
    "ABSENT", "Op", "Split", "Sel", "MicroOp", "decode", "decode_tables", "DECODE", "SET_WORK",
    "units",
    "follower_codes",
    "TileCounters", "Timing", "tile_engine", "tile_counters",
]

#: Code on the wires for "this unit has no follower" (an unpaired token).
ABSENT = 3

PASSES = 4
#: Register -> tile it holds, per pass (None: unused).
REGISTER_TILE = ((0, 1, 2), (1, 3, 2), (2, 3, None), (3, None, None))


class Op:
    """Operations of the decode table: IDLE, MUL, LOWc (column low nibble), LOWr (row)."""
    IDLE, MUL, LOW_COL, LOW_ROW = 0, 1, 2, 3


class Split:
    """Operand whose nibbles split a MUL: COL (column value) or ROW (row value)."""
    COL, ROW = 0, 1


class Sel:
    """What a register receives: nothing, the product P, its high part H or its low part L."""
    NONE, PROD, HIGH, LOWPART = 0, 1, 2, 3


@dataclass(frozen=True)
class MicroOp:
    """One decode-table entry: operation, split and the selections of R0, R1, R2."""
    op: int = Op.IDLE
    split: int = Split.COL
    sel: tuple = (Sel.NONE, Sel.NONE, Sel.NONE)


def decode(pass_: int, qc: int, kc: int) -> MicroOp:
    """What a PE does in ``pass_`` given its row follower's code ``qc`` and its column
    follower's code ``kc`` (FULL/HALF/NONE, or ABSENT when the unit has no follower).

    Rows carry Q anchors in passes 0-1 and effective Q followers in passes 2-3; columns carry
    K anchors in passes 0 and 2 and effective K followers in passes 1 and 3.
    """
    N_, P, H, L = Sel.NONE, Sel.PROD, Sel.HIGH, Sel.LOWPART
    if pass_ == 0:
        split = Split.COL if kc == HALF else Split.ROW
        s1 = {FULL: P, HALF: H}.get(kc, N_)
        s2 = P if qc == FULL else (H if qc == HALF and kc != HALF else N_)
        return MicroOp(Op.MUL, split, (P, s1, s2))
    if pass_ == 1:   # T1 = anchors x followers; R1 collects T3 where the row follower is FULL/HALF
        if kc == NONE:
            s1 = {FULL: P, HALF: H}.get(qc, N_)
            return MicroOp(Op.MUL, Split.ROW, (P, s1, N_))
        if kc == HALF:
            if qc == FULL:
                return MicroOp(Op.MUL, Split.COL, (L, P, N_))
            return MicroOp(Op.LOW_COL, Split.COL, (P, N_, N_))
        if kc == FULL and qc == FULL:
            return MicroOp(Op.MUL, Split.ROW, (N_, P, N_))
        return MicroOp()
    if pass_ == 2:   # T2 = followers x anchors; R1 keeps collecting T3 where kc is FULL/HALF
        if qc in (FULL, ABSENT):
            return MicroOp()
        if qc == NONE:
            split = Split.COL if kc == HALF else Split.ROW
            s1 = {FULL: P, HALF: H}.get(kc, N_)
            return MicroOp(Op.MUL, split, (P, s1, N_))
        # qc == HALF
        if kc == FULL:
            return MicroOp(Op.MUL, Split.ROW, (L, P, N_))
        if kc == HALF:   # pass 0 split on the column: the row's high part was not handed over
            return MicroOp(Op.MUL, Split.COL, (P, H, N_))
        return MicroOp(Op.LOW_ROW, Split.ROW, (P, N_, N_))
    if pass_ == 3:   # T3 = followers x followers: only what passes 1-2 did not hand over
        if qc in (FULL, ABSENT) or kc in (FULL, ABSENT):
            return MicroOp()
        if kc == HALF:
            return MicroOp(Op.LOW_COL, Split.COL, (P, N_, N_))
        if qc == HALF:
            return MicroOp(Op.LOW_ROW, Split.ROW, (P, N_, N_))
        return MicroOp(Op.MUL, Split.ROW, (P, N_, N_))
    raise ValueError(f"pass must be 0..3, got {pass_}")


def decode_tables(decode_fn, passes: int):
    """``(op, split, sel)`` arrays of a decode function over every pass and code pair:
    ``op[p, c, c']``, ``split[p, c, c']``, ``sel[p, c, c', r]`` of ``decode_fn(p, c, c')``."""
    op = np.zeros((passes, 4, 4), np.int8)
    split = np.zeros_like(op)
    sel = np.zeros((passes, 4, 4, 3), np.int8)
    for p in range(passes):
        for a in range(4):
            for b in range(4):
                u = decode_fn(p, a, b)
                op[p, a, b], split[p, a, b], sel[p, a, b] = u.op, u.split, u.sel
    return op, split, sel


#: ``DECODE[0][p, qc, kc]`` op, ``DECODE[1]`` split, ``DECODE[2][..., r]`` select of register r.
DECODE = decode_tables(decode, PASSES)


def units(grid, axis: int):
    """Pair tokens along ``axis`` into units, in token order of their anchors.

    Returns ``(anchors, followers)``: (U,) int64 token indices; ``followers[u]`` is -1 for an
    unpaired token. The unit of token (t, y, x) is the token's flat index with its coordinate
    on ``axis`` halved (rounded down) and that axis' length halved (rounded up).
    """
    grid = as_grid(grid)
    shape = list(grid.shape)
    coords = np.indices(shape).reshape(3, -1)
    is_anchor = (coords[axis] % 2 == 0)
    anchors = np.flatnonzero(is_anchor)
    has_follower = coords[axis][anchors] + 1 < shape[axis]
    followers = np.where(has_follower, anchors + grid.stride(axis), -1)
    return anchors.astype(np.int64), followers.astype(np.int64)


def follower_codes(masks, channels, followers) -> np.ndarray:
    """(U, n) uint8: the reuse code of each unit's follower at ``channels`` (from the
    (N, d) ``masks``), ABSENT for a unit without follower (``followers[u] == -1``)."""
    present = followers >= 0
    f = np.where(present, followers, 0)
    return np.where(present[:, None], masks[np.ix_(f, channels)], ABSENT).astype(np.uint8)


def _split_parts(x, y, split):
    """(product, high part) of int64 arrays for a MUL with the given split side."""
    prod = x * y
    high = np.where(split == Split.COL, 16 * x * (y >> 4), 16 * (x >> 4) * y)
    return prod, high


def _contributions(op, split, sel, x, y):
    """Per-register contribution of one pass; x, y int64 broadcast to op's shape."""
    prod, high = _split_parts(x, y, split)
    lo_col = x * (y & 15)
    lo_row = (x & 15) * y
    main = np.select([op == Op.MUL, op == Op.LOW_COL, op == Op.LOW_ROW],
                     [prod, lo_col, lo_row], 0)
    high = np.where(op == Op.MUL, high, 0)
    lowpart = np.where(op == Op.MUL, prod - high, 0)
    out = []
    for r in range(3):
        s = sel[..., r]
        out.append(np.select([s == Sel.PROD, s == Sel.HIGH, s == Sel.LOWPART],
                             [main, high, lowpart], 0))
    return out


@dataclass
class GroupPlan:
    """Per-group operands and codes arranged by unit (rows and columns use the same units)."""
    group: int
    channels: np.ndarray   # (n,)
    anchors: np.ndarray    # (U,)
    followers: np.ndarray  # (U,) -1 if unpaired
    q_anchor: np.ndarray   # (U, n) int64
    q_follow: np.ndarray   # (U, n) int64, effective value (0 where absent)
    qc: np.ndarray         # (U, n) uint8 codes incl. ABSENT
    k_anchor: np.ndarray
    k_follow: np.ndarray
    kc: np.ndarray


def linear_codes(x, grid, groups, full_bits, half_bits) -> np.ndarray:
    """(N, d) codes of a linear block's activation: the window rule with windows of 2 along
    each channel's group direction (``golden.window_masks``; its windows are the pairs of
    ``golden.reuse_masks``, only FULL is decided differently)."""
    groups = _as_groups(groups)
    return window_masks(x, grid, groups.channel_directions(), 2, full_bits, half_bits)


def side_codes(x, grid, groups, full_bits, half_bits, linear=False, k_side=False):
    """(N, d) reuse codes of one operand: pairs for S (``golden.reuse_masks``); for a linear
    block (``linear``: the Q side holds the activation X, the K side the weight rows W^T)
    :func:`linear_codes` on X and none on W."""
    if linear and k_side:
        return np.full(np.shape(x), NONE, np.uint8)
    if linear:
        return linear_codes(x, grid, groups, full_bits, half_bits)
    return reuse_masks(x, grid, groups, full_bits, half_bits)


def operand_codes(q, k, grid, groups, full_bits, half_bits, linear=False):
    """(N, d) reuse codes of the two operands (:func:`side_codes` of each)."""
    return (side_codes(q, grid, groups, full_bits, half_bits, linear),
            side_codes(k, grid, groups, full_bits, half_bits, linear, k_side=True))


def _plans(q, k, grid, groups, full_bits, half_bits, reuse, linear=False):
    grid, groups = as_grid(grid), _as_groups(groups)
    q = np.asarray(q)
    k = np.asarray(k)
    if reuse:
        mq, mk = operand_codes(q, k, grid, groups, full_bits, half_bits, linear)
        q_eff = effective_operand(q, mq, grid, groups).astype(np.int64)
        k_eff = effective_operand(k, mk, grid, groups).astype(np.int64)
    else:
        mq = np.full(q.shape, NONE, np.uint8)
        mk = np.full(k.shape, NONE, np.uint8)
        q_eff, k_eff = q.astype(np.int64), k.astype(np.int64)
    plans = []
    for g in range(3):
        ch = groups.channels(g)
        if ch.size == 0:
            continue
        anchors, followers = units(grid, groups.directions[g])
        present = followers >= 0
        f = np.where(present, followers, 0)

        def side(x, x_eff, m):
            a = x[np.ix_(anchors, ch)].astype(np.int64)
            fv = np.where(present[:, None], x_eff[np.ix_(f, ch)], 0)
            return a, fv, follower_codes(m, ch, followers)

        qa, qf, qcodes = side(q, q_eff, mq)
        ka, kf, kcodes = side(k, k_eff, mk)
        plans.append(GroupPlan(g, ch, anchors, followers, qa, qf, qcodes, ka, kf, kcodes))
    return grid, plans


def tile_engine(q, k, grid, groups, full_bits: int = 5, half_bits: int = 3, reuse: bool = True):
    """S computed the way the array computes it: pass by pass through :func:`decode`.

    Equals ``attention_scores(q, k, ...)`` (or ``q @ k.T`` with ``reuse=False``) bit for bit;
    the test suite checks that, which is what makes the decode table trustworthy.
    """
    grid, plans = _plans(q, k, grid, groups, full_bits, half_bits, reuse)
    n_tok = grid.n
    s = np.zeros((n_tok, n_tok), np.int64)
    op_t, split_t, sel_t = DECODE
    for pl in plans:
        U = pl.anchors.size
        tiles = np.zeros((4, U, U), np.int64)
        qc = pl.qc[:, None, :]
        kc = pl.kc[None, :, :]
        for p in range(PASSES):
            op, split, sel = op_t[p][qc, kc], split_t[p][qc, kc], sel_t[p][qc, kc]
            x = (pl.q_anchor if p < 2 else pl.q_follow)[:, None, :]
            y = (pl.k_anchor if p in (0, 2) else pl.k_follow)[None, :, :]
            contrib = _contributions(op, split, sel, x, y)
            for r, tile in enumerate(REGISTER_TILE[p]):
                if tile is not None:
                    tiles[tile] += contrib[r].sum(axis=2)
        fa = pl.followers >= 0
        a, f = pl.anchors, pl.followers
        s[np.ix_(a, a)] += tiles[0]
        s[np.ix_(a, f[fa])] += tiles[1][:, fa]
        s[np.ix_(f[fa], a)] += tiles[2][fa, :]
        s[np.ix_(f[fa], f[fa])] += tiles[3][np.ix_(fa, fa)]
    return s


# -- cycle model ----------------------------------------------------------------------------

@dataclass
class TileCounters:
    """Counters of one single-array run (the engine's performance counters on one array)."""
    cycles: int = 0
    busy_pe_cycles: int = 0
    issued: list = field(default_factory=lambda: [0] * PASSES)
    skipped: list = field(default_factory=lambda: [0] * PASSES)
    bubbles: int = 0          # steps added so that every pass lasts at least R cycles (drain)
    quads: int = 0

    @property
    def steps(self) -> int:
        """Steps fed to the array: issued channel steps plus bubbles."""
        return sum(self.issued) + self.bubbles

    def as_dict(self) -> dict:
        """The counters as a JSON-friendly dict."""
        return {"cycles": self.cycles, "busy_pe_cycles": self.busy_pe_cycles,
                "issued": list(self.issued), "skipped": list(self.skipped),
                "bubbles": self.bubbles, "quads": self.quads}


def _blocks(n_units: int, size: int):
    nb = -(-n_units // size)
    idx = np.arange(nb * size).reshape(nb, size)
    return idx, idx < n_units


def _code_sets(codes, size: int):
    """(blocks, n) uint8: per block of ``size`` units and channel, the set of codes that
    occur among the block's real units, as a 4-bit mask (bit v: code v occurs)."""
    U = codes.shape[0]
    idx, real = _blocks(U, size)
    bits = np.where(real[..., None], np.left_shift(1, codes[np.minimum(idx, U - 1)]), 0)
    return np.bitwise_or.reduce(bits, axis=1).astype(np.uint8)


def _set_tables():
    """(PASSES, 16, 16) bool: a channel has work in pass p for a quad whose row code set is A
    and column code set is B iff some (u in A, v in B) has a non-idle decode entry."""
    work = DECODE[0] != Op.IDLE                                    # (P, 4, 4)
    member = (np.arange(16)[:, None] >> np.arange(4)) & 1          # (16, 4): set -> codes
    t = np.einsum("au,puv,bv->pab", member, work.astype(np.int64), member)
    return t > 0


SET_WORK = _set_tables()

#: Elements of one (row blocks x column blocks) chunk of the per-quad arrays.
_CHUNK = 1 << 22


def tile_counters(q, k, grid, groups, rows: int = 4, cols: int = 4, full_bits: int = 5,
                  half_bits: int = 3, reuse: bool = True, timing=None) -> TileCounters:
    """Counters of one single-array run, vectorized over tile quads.

    Per group and pass, a channel step of a quad is issued iff some (row code, column code)
    pair occurring in it has a non-idle decode entry: a function of the quad's row code set
    and column code set at that channel (:data:`SET_WORK`). The issued count of every quad
    is therefore a sum over channels of a 16 x 16 table lookup, computed as one matrix
    product per column code set (exact in float32: counts < 2**24); busy PE-cycles
    separate into per-channel code histograms of rows and columns. Memory is bounded by
    processing row blocks in chunks, so full-size grids (e.g. 33x45x80) run in minutes.

    ``timing`` (a :class:`Timing`) holds the fixed latencies of the RTL's pipeline.
    """
    timing = timing or Timing()
    grid, plans = _plans(q, k, grid, groups, full_bits, half_bits, reuse)
    work = (DECODE[0] != Op.IDLE).astype(np.int64)                 # (P, 4, 4)
    gap = timing.gap(rows, cols)
    c = TileCounters()
    body = 0                    # sum over quads of max(steps, gap)
    last_steps = 0
    for pl in plans:
        n = pl.channels.size
        qset = _code_sets(pl.qc, rows)                             # (RB, n)
        kset = _code_sets(pl.kc, cols)                             # (CB, n)
        nrb, ncb = qset.shape[0], kset.shape[0]
        c.quads += nrb * ncb
        # Busy PE-cycles: sum over PEs of the table, separable into code histograms.
        qh = np.stack([(pl.qc == v).sum(axis=0) for v in range(4)], axis=-1)   # (n, 4)
        kh = np.stack([(pl.kc == v).sum(axis=0) for v in range(4)], axis=-1)
        c.busy_pe_cycles += int(np.einsum("nu,puv,nv->", qh, work, kh))
        # Pass 0 issues every channel of every quad.
        c.issued[0] += n * nrb * ncb
        c.bubbles += max(rows - n, 0) * nrb * ncb
        k_masks = {int(b): (kset == b).astype(np.float32) for b in np.unique(kset)}
        chunk = max(1, _CHUNK // max(ncb, 1))
        for r0 in range(0, nrb, chunk):
            qs = qset[r0:r0 + chunk]
            steps = np.full((qs.shape[0], ncb), max(n, rows), np.int64)
            for p in range(1, PASSES):
                issued = np.zeros((qs.shape[0], ncb), np.float32)
                for b, kmask in k_masks.items():
                    issued += SET_WORK[p][qs, b].astype(np.float32) @ kmask.T
                issued = issued.astype(np.int64)
                c.issued[p] += int(issued.sum())
                c.skipped[p] += int(n * issued.size - issued.sum())
                c.bubbles += int(np.maximum(rows - issued, 0).sum())
                steps += np.maximum(issued, rows)
            body += int(np.maximum(steps, gap).sum())
            last_steps = int(steps[-1, -1])          # run order: row block, then column block
    body += last_steps - max(last_steps, gap)        # the last quad waits for no next load
    c.cycles = timing.total_from_body(body, rows, cols)
    return c


@dataclass(frozen=True)
class Timing:
    """Fixed latencies of the single-array pipeline (``docs/array.md``, "Timing and the
    cycle model"), which the engine's arrays keep within a chunk.

    Cycle 0 is the cycle ``start`` is accepted; ``cycles`` counts the cycles after it up to
    and including the one before ``done`` rises.

    - ``load_base``: cycles before the first quad's operand reads (configuration latched,
      then the sequencer starts).
    - A quad's loads take ``2*max(R, C)`` reads plus one cycle for the last word (``gap``);
      the next quad's loads start when a quad enters the stepper, so consecutive quads start
      at least ``gap`` cycles apart: quad n occupies ``max(steps_n, gap)`` cycles, the last
      one ``steps``.
    - After the last step: one final step (drains tile 3 of the last quad), ``tail_base``
      (the sequencer's output register) and ``R + C`` cycles for the drain wave to cross the
      array and be written to the accumulation buffer.
    """
    load_base: int = 2
    tail_base: int = 1

    @staticmethod
    def gap(rows: int, cols: int) -> int:
        """Minimum cycles between quad starts: ``2*max(R, C)`` reads plus one."""
        return 2 * max(rows, cols) + 1

    def total(self, quad_steps, rows: int, cols: int) -> int:
        """Cycles of a run whose quads (in run order) take ``quad_steps`` steps each."""
        steps = np.asarray(quad_steps, dtype=np.int64).ravel()
        gap = self.gap(rows, cols)
        body = int(np.maximum(steps[:-1], gap).sum() + steps[-1]) if steps.size else 0
        return self.total_from_body(body, rows, cols)

    def total_from_body(self, body: int, rows: int, cols: int) -> int:
        """Cycles of a run whose quads occupy ``body`` cycles from the first quad's first
        step to the last quad's last step."""
        return self.load_base + self.gap(rows, cols) + body + 1 + self.tail_base + rows + cols
