"""Dataflow study of the KaleidoEngine (issue 15, ``docs/dataflow.md``): cycle models of
candidate pass structures and matching schemes, and the ceiling of step-synchronous arrays.

Everything here counts with the engine's own rules (``golden.engine.model``): the same chunks
(W channels of one group), the same unit orders (natural, or the ClusterScheduler's), column
block ``cb`` on array ``cb mod P``, quads in (cb, rb) order, the same decode table
(``golden.array.schedule.DECODE``: which products a PE forms, reuses or halves is the
pairing contract of ``docs/numerics.md`` and never changes here), and the same timing
(per quad ``max(steps, gap)``, every pass at least R steps so the drain wave fits, chunk
barriers and the scheduler pre-pass). A candidate only changes *when* a PE spends a cycle
on an operation of the table:

- ``steps`` model (:func:`dataflow_counters`), per quad and pass:

  * baseline: a channel step is issued iff some PE of the quad has work at it (today's
    ``pe`` / ``pe-sh``; equals ``engine_counters`` exactly, tested);
  * ``match_passes``: a per-quad MergeMatcher (the greedy rule of
    ``golden.dispatch.model.match``, lookahead L) packs two channels into one step where the
    narrow port allows it. ``pair_side`` per pass: ``"col"`` (8-bit column port carries one K
    byte or two K low nibbles, 16-bit row port two Q bytes: two LOWc at once) or ``"row"``
    (the transpose: 8-bit row port with two Q nibbles, 16-bit column port: two LOWr at
    once). Each column's (row's) need per channel is taken from the quad's real codes (0
    idle, 1 nibble, 2 byte), and two channels pair iff every column (row) needs <= 2 units
    in all: then every PE forms at most one MUL, or two low-nibble products, per step;
  * ``fifo_depth`` D > 1: per-row decoupling. The column operands of each issued channel
    step (with a matcher: of each slot) enter one FIFO of depth D per PE row; a row spends
    a cycle on an entry only if one of its PEs has work, and drops the others for free; the
    feed pushes at most ``feed`` entries per cycle, in order, and only when every row's
    FIFO has room. Rows meet again at the end of every pass (the register hand-over of the
    next pass). D = 1, or a feed of 1, is the step-synchronous array.

- ``engine`` candidates are ``engine_counters`` itself with other parameters (bigger
  scheduler batches, other array shapes) or on the transposed problem (K on the rows,
  Q on the columns: S^T, exact by the engine's own functional model).

- :func:`ceiling`: lower bounds on cycles: quad-stationary (one operation, or two
  low-nibble products, per PE-step), today's pass structure with per-PE freedom, and any
  mapping of the work onto the PEs (``docs/dataflow.md``, "The ceiling", has the statements
  and the proofs).

- :func:`candidate_scores`: S rebuilt from a candidate's own slot sequences (port rule and
  coverage asserted), for the tests' comparison with ``golden.attention_scores``.

Plain numpy, vectorized over quads; no hardware imports.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from golden.array.schedule import DECODE, PASSES, SET_WORK, Op, _code_sets, _contributions, _plans
from golden.dispatch.model import MatcherParams, match
from golden.engine.model import (ChunkTimeline, EngineParams, EngineTiming, _check_inputs,
                                 _orders, chunks, engine_counters)
from golden.numerics import as_grid, oracle_ops, reuse_masks


__all__ = ["Candidate", "CANDIDATES", "DEFAULT_CANDIDATES", "DataflowCounters",
           "dataflow_counters", "quad_slots", "greedy_slots", "Slots", "Ceiling", "ceiling", "candidate_scores",
           "run_candidate", "REGIMES", "regime_head", "load_npz_head", "Head", "study"]

#: Code index of a padding unit (a row or column of the last block without a unit).
PAD = 4

# -- per-pass operation tables on (row follower code, column follower code), PAD included ----

_OP = np.zeros((PASSES, 5, 5), np.int8)
_OP[:, :4, :4] = DECODE[0]
#: PE has work.
BUSY = _OP != Op.IDLE
#: Low-nibble products (one 4x8 multiplier) and full products (both).
LOW = (_OP == Op.LOW_COL) | (_OP == Op.LOW_ROW)
MUL = _OP == Op.MUL
#: Port units per channel (4 bits each): what the column port must carry to the PE (a
#: LOWc needs the K low nibble, every other operation the K byte), and the row port.
COL_UNITS = np.where(BUSY, np.where(_OP == Op.LOW_COL, 1, 2), 0).astype(np.int8)
ROW_UNITS = np.where(BUSY, np.where(_OP == Op.LOW_ROW, 1, 2), 0).astype(np.int8)
_MEMBER = ((np.arange(16)[:, None] >> np.arange(5)) & 1).astype(bool)   # set -> codes (PAD never)
_MEMBER[:, PAD] = False


def _set_max_rows(table):
    """(PASSES, 16, 5): max over row codes u in a row code set of ``table[p, u, v]``."""
    out = np.zeros((PASSES, 16, 5), np.int8)
    for s in range(16):
        codes = np.flatnonzero(_MEMBER[s])
        if codes.size:
            out[:, s] = table[:, codes].max(axis=1)
    return out


def _set_max_cols(table):
    """(PASSES, 5, 16): max over column codes v in a column code set of ``table[p, u, v]``."""
    return _set_max_rows(table.transpose(0, 2, 1)).transpose(0, 2, 1)


COL_NEED_SET = _set_max_rows(COL_UNITS)          # [p, row set, column code]
ROW_NEED_SET = _set_max_cols(ROW_UNITS)          # [p, row code, column set]
ROW_BUSY_SET = _set_max_cols(BUSY.astype(np.int8)).astype(bool)


# -- candidates -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Candidate:
    """One dataflow to measure.

    ``kind``: ``"engine"`` (``engine_counters`` with ``variant`` and ``overrides`` of the
    EngineParams; ``transposed``: run on (k, q)) or ``"steps"`` (:func:`dataflow_counters`
    with ``scheduled``, ``match_passes``, ``pair_side``, ``lookahead``, ``fifo_depth``).
    ``hardware``: what it needs beyond today's engine, in words. ``exact``: counted by an
    exact cycle model (False would mark an estimate; every candidate here is exact).
    """
    name: str
    kind: str
    summary: str
    hardware: str
    variant: str = "full"
    overrides: tuple = ()
    transposed: bool = False
    scheduled: bool = True
    match_passes: tuple = ()
    pair_side: tuple = ("col", "col", "row", "col")
    lookahead: int = 4
    fifo_depth: int = 1
    feed: int = 1
    exact: bool = True

    def params(self, base: EngineParams = EngineParams()) -> EngineParams:
        """The engine parameters of the candidate."""
        return replace(base, **dict(self.overrides))

    @property
    def reference(self) -> bool:
        """True for today's five variants (the baseline rows)."""
        return self.kind == "engine" and not self.overrides and not self.transposed


def _c(*args, **kw):
    return Candidate(*args, **kw)


_TODAY = "none (today's engine)"
CANDIDATES: dict[str, Candidate] = {c.name: c for c in (
    _c("dense", "engine", "every code NONE: exact Q K^T", _TODAY, variant="dense"),
    _c("pe", "engine", "reuse, natural order, one channel per step", _TODAY, variant="pe"),
    _c("pe-sh", "engine", "pe + ClusterScheduler on both sides", _TODAY, variant="pe-sh"),
    _c("pe-m", "engine", "pe + column-block MergeMatcher in pass 3", _TODAY, variant="pe-m"),
    _c("full", "engine", "scheduler + matcher (today's full)", _TODAY, variant="full"),
    _c("m3q", "steps", "full, but the pass-3 matcher runs per quad on the quad's real "
       "column needs (not per column block on the worst case)",
       "matcher input from the quad's row code set: per column and channel a 2-bit need "
       "(C*W*2 = 128 bits) decoded from the row block's code set (W*4 bits) and the column "
       "codes; one matcher per array runs per quad instead of per column block",
       match_passes=(3,)),
    _c("m123", "steps", "per-quad matcher in passes 1, 2 and 3 (pass 1 and 3 pair K low "
       "nibbles on the column port, pass 2 pairs Q low nibbles on the row port), scheduler "
       "order",
       "m3q plus: pass 1 as pass 3 (the row port already carries two Q bytes); pass 2 pairs "
       "Q nibbles: the column port widens to 16 bits (two K bytes) in pass 2 and the "
       "MergedCell gets a row-nibble pair mode (a second LOWr on its second 4x8 "
       "multiplier); a second need decoder for rows (R*W*2 bits)",
       match_passes=(1, 2, 3)),
    _c("m13", "steps", "per-quad matcher in passes 1 and 3 only (K low-nibble pairs on the "
       "column port), scheduler order",
       "m3q plus pass 1 through the same matcher and MergedCell mode (the row port already "
       "carries two Q bytes); no wider column port", match_passes=(1, 3)),
    _c("m123-L16", "steps", "m123 with the whole chunk visible (lookahead L = W = 16): a "
       "per-quad channel schedule instead of the 4-deep window",
       "m123 with a 16-deep pending window: the B search spans 16 channels (wider prefix "
       "OR and compatibility check, W*C*2 bits compared per cycle)",
       match_passes=(1, 2, 3), lookahead=16),
    _c("rowfifo4", "steps", "per-row decoupling: FIFO depth 4, the column-operand feed "
       "pushes up to 2 channel steps per cycle, scheduler order, no matcher",
       "per PE row a 4-entry FIFO of the column operands (C*(8+2) bits + a 4-bit channel "
       "index = 44 bits per entry at C = 4: R*4*44 = 704 bits per 4x4 array) with 2 write "
       "ports, a per-row skip sequencer and channel counter; the column operand bus and "
       "the operand reads doubled (2 channels per cycle); the feed stalls when a FIFO is full",
       fifo_depth=4, feed=2),
    _c("rowfifo8", "steps", "per-row decoupling: FIFO depth 8, feed of 4 channel steps per "
       "cycle",
       "as rowfifo4 with 8-entry FIFOs (1,408 bits per 4x4 array) and 4 write ports; the "
       "column operand bus and reads 4x", fifo_depth=8, feed=4),
    _c("m123-fifo4", "steps", "m123 with per-row decoupling: each row takes the quad's slot "
       "sequence through a 4-deep FIFO (feed of 2 slots per cycle) and spends a cycle only "
       "on slots where it has work",
       "m123 plus rowfifo4's FIFOs, per-row sequencers and doubled operand feed; each FIFO "
       "entry carries a slot (two channels' column operands: C*(16+4) bits + 2 channel "
       "indices = 88 bits at C = 4; R*4*88 = 1,408 bits per 4x4 array)",
       match_passes=(1, 2, 3), fifo_depth=4, feed=2),
    _c("m123-fifo8", "steps", "m123 with per-row FIFOs of depth 8, feed of 4 slots per cycle",
       "as m123-fifo4 with 8-deep FIFOs (2,816 bits per 4x4 array) and a 4x feed",
       match_passes=(1, 2, 3), fifo_depth=8, feed=4),
    _c("m123-fifo4-2x2", "steps", "m123-fifo4 on 16 arrays of 2x2",
       "m123-fifo4's changes on full-2x2's arrays (2-entry-wide FIFOs per row: C = 2)",
       match_passes=(1, 2, 3), fifo_depth=4, feed=2,
       overrides=(("rows", 2), ("cols", 2), ("arrays", 16))),
    _c("full-E256", "engine", "full with scheduler batches of 256 entries, 8 clusters",
       "two ClusterSchedulers with E = 256 (4x the queue and bank SRAM: 3*E*(T+W) bits "
       "each) and K = 8 (8 pivot distances per cycle instead of 4)",
       overrides=(("entries", 256), ("clusters", 8))),
    _c("full-T", "engine", "full on the transposed problem: K units on the rows, Q units "
       "on the columns (computes S^T; the asymmetric decode table then reuses differently)",
       "the write-back transposes the accumulation-buffer address (S^T read out by "
       "columns); nothing in the arrays", transposed=True),
    _c("full-2x2", "engine", "full on 16 arrays of 2x2 (same 64 PEs)",
       "4x the arrays' sequencers, code units and SlotUnits with 2-column matchers; "
       "16 accumulation-buffer bank groups", overrides=(("rows", 2), ("cols", 2),
                                                         ("arrays", 16))),
    _c("full-1x1", "engine", "full on 64 arrays of 1x1",
       "one sequencer, code unit and matcher per PE", overrides=(
           ("rows", 1), ("cols", 1), ("arrays", 64))),
    _c("full-8x8", "engine", "full on 1 array of 8x8",
       "one array; 8-column matcher", overrides=(("rows", 8), ("cols", 8), ("arrays", 1))),
    _c("m123-2x2", "steps", "m123 on 16 arrays of 2x2",
       "m123's matcher changes on full-2x2's arrays", match_passes=(1, 2, 3),
       overrides=(("rows", 2), ("cols", 2), ("arrays", 16))),
)}
#: The default study (about a minute for the three regimes of one preset).
DEFAULT_CANDIDATES = ("dense", "pe", "pe-sh", "pe-m", "full", "m13", "m123")


# -- the steps model --------------------------------------------------------------------------

@dataclass
class DataflowCounters:
    """Counters of one run of a ``steps`` candidate: ``cycles``, ``busy`` PE-cycles (a PE
    forming two low-nibble products in one step counts once), ``issued`` steps per pass
    (summed over quads, before the R-step floor; with per-row FIFOs the cycles until the
    pass's last row is done), ``merged`` steps that carry two channels, ``chunk_cycles``."""
    cycles: int
    busy: int
    issued: np.ndarray
    merged: int
    chunk_cycles: np.ndarray

    def utilization(self, pes: int) -> float:
        """busy PE-cycles / (PEs * cycles)."""
        return self.busy / (pes * self.cycles)


def _padded(codes, size):
    """(blocks, size, n) codes with PAD rows after the last unit."""
    U, n = codes.shape
    nb = -(-U // size)
    out = np.full((nb * size, n), PAD, np.uint8)
    out[:U] = codes
    return out.reshape(nb, size, n)


def _chunk_busy(qc, kc):
    """Busy PE-cycles of every table operation of one chunk (no merging)."""
    qh = np.stack([(qc == v).sum(axis=0) for v in range(4)], axis=-1)      # (n, 4)
    kh = np.stack([(kc == v).sum(axis=0) for v in range(4)], axis=-1)
    return int(np.einsum("nu,puv,nv->", qh, BUSY[:, :4, :4].astype(np.int64), kh))


@dataclass
class Slots:
    """A per-quad slot sequence (the fields of ``golden.dispatch.model.MatchResult`` the
    study needs): ``batch`` (quad index rb * CB + cb), ``a``, ``b`` (-1: single channel) per
    slot in issue order, ``slots`` per quad."""
    batch: np.ndarray
    a: np.ndarray
    b: np.ndarray
    slots: np.ndarray


#: Widest port side (columns or rows) matched through the base-3 compatibility table.
_TABLE_WIDTH = 6


def _compat_table(width):
    """(3^w, 3^w) bool: two channels whose per-lane needs (base-3 digits, 0..2 units) sum to
    at most 2 units in every lane."""
    v = np.arange(3 ** width)
    digits = (v[:, None] // 3 ** np.arange(width)) % 3                 # (V, w)
    return np.all(digits[:, None, :] + digits[None, :, :] <= 2, axis=2)


def greedy_slots(need, lookahead):
    """The MergeMatcher's greedy rule (``golden.dispatch.model.match``) on many batches at
    once: ``need`` (B, lanes, n) units 0..2. Same slots as ``match``; lanes of up to
    ``_TABLE_WIDTH`` are packed into one base-3 code per channel, so a pair test is one
    table lookup (fast enough for every quad of a head)."""
    B, width, n = need.shape
    if width > _TABLE_WIDTH:
        m = match(need, MatcherParams(width, n, lookahead))
        return Slots(m.batch, m.a, m.b, m.slots)
    codes = np.einsum("blc,l->bc", need.astype(np.int64), 3 ** np.arange(width))
    compat = _compat_table(width)
    live = codes != 0
    idx = np.arange(n)[None, :]
    rows = np.arange(B)
    out_b, out_a, out_bb = [], [], []
    while True:
        act = np.flatnonzero(live.any(axis=1))
        if act.size == 0:
            break
        lv, cd = live[act], codes[act]
        a = np.argmax(lv, axis=1)
        ca = cd[np.arange(act.size), a]
        above = idx > a[:, None]
        cand = lv & compat[ca[:, None], cd] & above
        has = cand.any(axis=1)
        b = np.argmax(cand, axis=1)
        between = (lv & above & (idx < b[:, None])).sum(axis=1)
        merge = has & (between <= lookahead - 2)
        out_b.append(act)
        out_a.append(a)
        out_bb.append(np.where(merge, b, -1))
        live[act, a] = False
        live[act[merge], b[merge]] = False
    if not out_b:
        z = np.zeros(0, np.int64)
        return Slots(z, z, z, np.zeros(B, np.int64))
    batch = np.concatenate(out_b)
    step = np.concatenate([np.full(x.size, i) for i, x in enumerate(out_b)])
    order = np.lexsort((step, batch))                                   # issue order per quad
    a, b = np.concatenate(out_a)[order], np.concatenate(out_bb)[order]
    batch = batch[order]
    return Slots(batch, a, b, np.bincount(batch, minlength=B).astype(np.int64))


def quad_slots(qc, kc, rows, cols, pass_, side="col", lookahead=4):
    """Per-quad MergeMatcher of one pass of one chunk.

    Returns ``(slots, quads_shape, saving)``: the :class:`Slots` whose batch ``rb * CB + cb``
    is quad (rb, cb) (its slots are the quad's issued steps in order, ``b = -1`` for a
    single channel), ``(RB, CB)``, and the busy PE-cycles saved by the merged slots (PEs
    forming both low-nibble products in one step).
    """
    qp, kp = _padded(qc, rows), _padded(kc, cols)                      # (RB, R, n), (CB, C, n)
    RB, CB, n = qp.shape[0], kp.shape[0], qc.shape[1]
    if side == "col":
        qset = _code_sets(qc, rows)                                    # (RB, n)
        need = COL_NEED_SET[pass_][qset[:, None, None, :], kp[None]]   # (RB, CB, C, n)
        width = cols
    elif side == "row":
        kset = _code_sets(kc, cols)
        need = ROW_NEED_SET[pass_][qp[:, None], kset[None, :, None, :]]  # (RB, CB, R, n)
        width = rows
    else:
        raise ValueError(f"pair side must be 'col' or 'row', got {side!r}")
    m = greedy_slots(need.reshape(RB * CB, width, n), lookahead)
    merged = m.b >= 0
    rb, cb = np.divmod(m.batch[merged], CB)
    a, b = m.a[merged], m.b[merged]
    qa, qb = qp[rb, :, a], qp[rb, :, b]                                # (S, R)
    ka, kb = kp[cb, :, a], kp[cb, :, b]                                # (S, C)
    both = (BUSY[pass_][qa[:, :, None], ka[:, None, :]]
            & BUSY[pass_][qb[:, :, None], kb[:, None, :]])
    return m, (RB, CB), int(both.sum())


def _fifo_steps(rowbusy, depth, feed=1):
    """Steps of one pass of every quad with per-row FIFOs of ``depth``.

    ``rowbusy``: (Q, R, n) bool, row r of quad q has work at channel c. Entries are the
    channels where some row has work, in channel order; the feed pushes at most ``feed``
    entries per cycle, in order, and entry e only once every row has left entry e - depth
    (room in every FIFO); a row spends one cycle on an entry it works on and leaves the
    others as soon as it reaches them. Returns (Q,) cycles until the last row is done.
    With depth 1 (or feed 1) this is the issue count of the step-synchronous array.
    """
    Q, R, n = rowbusy.shape
    issue = rowbusy.any(axis=1)                                        # (Q, n)
    push = np.full(Q, 0, np.int64)                                     # cycle of the last push
    pushed = np.full((Q, feed), -1, np.int64)                          # last `feed` pushes, ring
    done = np.zeros((Q, R), np.int64)
    left = np.zeros((Q, depth), np.int64)                              # leave time, ring
    count = np.zeros(Q, np.int64)
    qi = np.arange(Q)
    for c in range(n):
        on = issue[:, c]
        t = np.maximum(np.maximum(push, pushed[qi, count % feed] + 1), left[qi, count % depth])
        push = np.where(on, t, push)
        pushed[qi[on], (count % feed)[on]] = t[on]
        new = np.maximum(done, t[:, None]) + rowbusy[:, :, c]
        done = np.where(on[:, None], new, done)
        left[qi[on], (count % depth)[on]] = done[on].max(axis=1)
        count += on
    return done.max(axis=1)


def _slot_rows(m, qc, kset, rows, pass_):
    """(Q, R, n) bool: row r of quad q has work in the quad's slot number s (channel A, or
    B of a pair); slots past the quad's last are all False (never issued)."""
    qp = _padded(qc, rows)
    CB = kset.shape[0]
    Q, n = m.slots.size, qc.shape[1]
    out = np.zeros((Q, rows, n), bool)
    pos = np.arange(m.batch.size) - np.repeat(np.cumsum(m.slots) - m.slots, m.slots)
    rb, cb = np.divmod(m.batch, CB)
    work = ROW_BUSY_SET[pass_][qp[rb, :, m.a], kset[cb, m.a][:, None]]            # (S, R)
    pair = m.b >= 0
    b = np.maximum(m.b, 0)
    work |= pair[:, None] & ROW_BUSY_SET[pass_][qp[rb, :, b], kset[cb, b][:, None]]
    out[m.batch, :, pos] = work
    return out


def _steps_quads(qc, kc, cand: Candidate, params: EngineParams):
    """(RB, CB) steps of every quad of one chunk (before ``max(steps, gap)``), busy saving,
    per-pass issued totals and merged steps."""
    R, C = params.rows, params.cols
    n = qc.shape[1]
    qset, kset = _code_sets(qc, R), _code_sets(kc, C)
    RB, CB = qset.shape[0], kset.shape[0]
    steps = np.full((RB, CB), max(n, R), np.int64)
    issued = np.zeros(PASSES, np.int64)
    issued[0] = n * RB * CB
    saving = merged = 0
    for p in range(1, PASSES):
        if p in cand.match_passes:
            m, _, save = quad_slots(qc, kc, R, C, p, cand.pair_side[p], cand.lookahead)
            iss = m.slots.reshape(RB, CB)
            saving += save
            merged += int((m.b >= 0).sum())
            if cand.fifo_depth > 1:
                iss = _fifo_steps(_slot_rows(m, qc, kset, R, p), cand.fifo_depth,
                                  cand.feed).reshape(RB, CB)
        elif cand.fifo_depth > 1:
            qp = _padded(qc, R)
            rowbusy = ROW_BUSY_SET[p][qp[:, None], kset[None, :, None, :]]   # (RB, CB, R, n)
            iss = _fifo_steps(rowbusy.reshape(RB * CB, R, n), cand.fifo_depth,
                              cand.feed).reshape(RB, CB)
        else:
            iss = SET_WORK[p][qset[:, None, :], kset[None, :, :]].sum(axis=2)
        issued[p] = int(iss.sum())
        steps += np.maximum(iss, R)
    return steps, saving, issued, merged


def _array_times(steps, arrays, gap):
    """Each array's time in one chunk from the quads' steps (as ``_chunk_run``)."""
    CB = steps.shape[1]
    occupied = np.maximum(steps, gap).sum(axis=0)
    arr = np.arange(CB) % arrays
    T = np.bincount(arr, weights=occupied, minlength=arrays).astype(np.int64)
    owners = np.arange(min(arrays, CB))
    last_cb = owners + arrays * ((CB - 1 - owners) // arrays)
    last = steps[-1, last_cb]
    T[owners] += gap - np.maximum(last, gap) + last
    return T


def _chunk_codes(q, k, grid, groups, params, scheduled, full_bits, half_bits, timing):
    """The run's :class:`~golden.engine.model.ChunkTimeline` and, per chunk, the follower
    codes of the rows in row order and of the columns in column order (call the timeline's
    ``ran`` with each chunk's time before taking the next)."""
    grid, plans = _plans(q, k, grid, groups, full_bits, half_bits, True)
    by_group = {pl.group: pl for pl in plans}
    chunk_list = chunks(groups, params.width)
    tl = ChunkTimeline(plans, chunk_list, params, scheduled, timing)

    def codes():
        for ch in chunk_list:
            order = tl.next(ch)
            pl = by_group[ch.group]
            yield pl.qc[order.q][:, ch.local], pl.kc[order.k][:, ch.local]
    return tl, codes()


def dataflow_counters(q, k, grid, groups, cand: Candidate, params: EngineParams | None = None,
                      full_bits: int = 5, half_bits: int = 3,
                      timing: EngineTiming | None = None) -> DataflowCounters:
    """Counters of a ``steps`` candidate (module docstring), composed into chunk and engine
    cycles exactly as ``engine_counters`` does. With no matcher and ``fifo_depth = 1`` it is
    ``engine_counters`` of ``pe`` (natural order) or ``pe-sh`` (scheduled)."""
    if cand.kind != "steps":
        raise ValueError(f"{cand.name} is not a steps candidate")
    timing = timing or EngineTiming()
    params = cand.params(params or EngineParams())
    q, k, grid, groups, _ = _check_inputs(q, k, grid, groups, "pe", full_bits, half_bits)
    P, R, C = params.arrays, params.rows, params.cols
    gap = timing.gap(R, C)
    busy = merged = 0
    issued = np.zeros(PASSES, np.int64)
    tl, codes = _chunk_codes(q, k, grid, groups, params, cand.scheduled, full_bits, half_bits,
                             timing)
    for qc, kc in codes:
        steps, saving, iss, mer = _steps_quads(qc, kc, cand, params)
        busy += _chunk_busy(qc, kc) - saving
        issued += iss
        merged += mer
        tl.ran(_array_times(steps, P, gap).max(), steps[:, 0])
    cycles = tl.end + 1 + timing.tail_base + R + C
    return DataflowCounters(cycles, busy, issued, merged, np.asarray(tl.lengths, np.int64))


# -- the ceiling ------------------------------------------------------------------------------

@dataclass
class Ceiling:
    """Lower bounds on cycles (``docs/dataflow.md``, "The ceiling").

    ``quad_one``: quad-stationary, one table operation per PE per step;
    ``quad_pair``: quad-stationary, a PE may form two low-nibble products in one step;
    ``free``: any mapping of the operations onto the PEs, pairs allowed (work / PEs);
    ``passes``: the bound of designs that keep today's pass structure and timing (every
    pass of a quad ends when its slowest PE is done, at least R steps; quad loads, chunk
    barriers and the pre-pass as today) with every PE free to skip and pair on its own.
    ``busy_one`` / ``busy_pair``: the PE-cycles of the operations (pairs counted once
    in ``busy_pair``); ``overhead``: the fixed cycles every run pays.
    """
    quad_one: int
    quad_pair: int
    free: int
    busy_one: int
    busy_pair: int
    overhead: int
    pes: int
    passes: int = 0

    def utilization(self, which: str = "quad_one") -> float:
        """Utilization at the bound: busy / (PEs * compute cycles of the bound)."""
        busy = self.busy_one if which == "quad_one" else self.busy_pair
        return busy / (self.pes * (getattr(self, which) - self.overhead))


def _pe_work(qc, kc, table):
    """(Uq, Uk) per-PE sum over the chunk's channels and passes of ``table[p, qc, kc]``."""
    t = table[:, :4, :4].sum(axis=0).astype(np.float32)                # (4, 4)
    oq = (qc[:, :, None] == np.arange(4)).astype(np.float32)           # (Uq, n, 4)
    ok = (kc[:, :, None] == np.arange(4)).astype(np.float32)
    left = (oq @ t).reshape(qc.shape[0], -1)                           # (Uq, n*4)
    return np.rint(left @ ok.reshape(kc.shape[0], -1).T).astype(np.int64)


def _quad_max(work, rows, cols):
    Uq, Uk = work.shape
    RB, CB = -(-Uq // rows), -(-Uk // cols)
    pad = np.zeros((RB * rows, CB * cols), np.int64)
    pad[:Uq, :Uk] = work
    return pad.reshape(RB, rows, CB, cols).max(axis=(1, 3))


def ceiling(q, k, grid, groups, params: EngineParams = EngineParams(), scheduled: bool = True,
            full_bits: int = 5, half_bits: int = 3,
            timing: EngineTiming | None = None) -> Ceiling:
    """The bounds of :class:`Ceiling` on the chunk quads of the given order.

    Per chunk quad (the R x C units of its row and column blocks, over the chunk's W
    channels), PE (i, j) must form ``mul_ij`` full and ``low_ij`` low-nibble products (the
    decode table); it needs ``w1 = mul + low`` steps at one operation per step and
    ``w2 = mul + ceil(low / 2)`` with pairs. A quad takes at least ``max_ij w``; the quads
    run on P arrays one at a time each, so the compute time is at least
    ``max(ceil(sum_quads max_ij w / P), max_quads max_ij w)``. ``free`` drops the quads:
    ``ceil(sum_PE-products (mul + low/2) / (P*R*C))``.
    """
    timing = timing or EngineTiming()
    q, k, grid, groups, _ = _check_inputs(q, k, grid, groups, "pe", full_bits, half_bits)
    P, R, C = params.arrays, params.rows, params.cols
    sum1 = sum2 = max1 = max2 = 0
    busy1 = busy2 = mul_total = low_total = 0
    gap = timing.gap(R, C)
    tl, codes = _chunk_codes(q, k, grid, groups, params, scheduled, full_bits, half_bits,
                             timing)
    for qc, kc in codes:
        # Today's pass structure with per-PE freedom: each pass at least R steps.
        steps = 0
        for p in range(PASSES):
            w = _pe_work(qc, kc, MUL[p:p + 1]) + (_pe_work(qc, kc, LOW[p:p + 1]) + 1) // 2
            steps = steps + np.maximum(_quad_max(w, R, C), R)
        tl.ran(_array_times(steps, P, gap).max(), steps[:, 0])
        mul = _pe_work(qc, kc, MUL)
        low = _pe_work(qc, kc, LOW)
        w1 = mul + low
        w2 = mul + (low + 1) // 2
        m1, m2 = _quad_max(w1, R, C), _quad_max(w2, R, C)
        sum1, sum2 = sum1 + int(m1.sum()), sum2 + int(m2.sum())
        max1, max2 = max(max1, int(m1.max())), max(max2, int(m2.max()))
        busy1, busy2 = busy1 + int(w1.sum()), busy2 + int(w2.sum())
        mul_total, low_total = mul_total + int(mul.sum()), low_total + int(low.sum())
    pes = P * R * C
    overhead = timing.load_base + 1 + timing.tail_base + R + C
    quad_one = max(-(-sum1 // P), max1)
    quad_pair = max(-(-sum2 // P), max2)
    free = -(-(2 * mul_total + low_total) // (2 * pes))
    return Ceiling(quad_one + overhead, quad_pair + overhead, free + overhead, busy1, busy2,
                   overhead, pes, tl.end + 1 + timing.tail_base + R + C)


# -- functional check: S from a candidate's slot sequences ------------------------------------

def candidate_scores(q, k, grid, groups, cand: Candidate, params: EngineParams | None = None,
                     full_bits: int = 5, half_bits: int = 3) -> np.ndarray:
    """(N, N) S computed from the candidate's per-quad slot sequences (small heads: a Python
    loop over quads and slots).

    Every slot's channels go through the decode table one by one (a pair slot's merged cell
    sums the two low-nibble products); the check asserts that each slot respects the port
    rule (every column (row) needs at most 2 units for the pair) and that the slots of a pass
    cover every channel with work exactly once and nothing else. Tiles are written to S as in
    ``golden.array.schedule.tile_engine``; the caller compares with
    ``golden.attention_scores``. Candidates without a matcher issue the baseline steps in
    channel order (per-row FIFOs only delay a row's steps), so their S is the baseline's.
    """
    from golden.array.schedule import REGISTER_TILE
    params = cand.params(params or EngineParams())
    q, k, grid, groups, _ = _check_inputs(q, k, grid, groups, "pe", full_bits, half_bits)
    grid, plans = _plans(q, k, grid, groups, full_bits, half_bits, True)
    by_group = {pl.group: pl for pl in plans}
    R, C = params.rows, params.cols
    op_t, split_t, sel_t = DECODE
    s = np.zeros((grid.n, grid.n), np.int64)
    for order in _orders(plans, chunks(groups, params.width), params, cand.scheduled):
        ch = order.chunk
        pl = by_group[ch.group]
        oq, ok, loc = order.q, order.k, ch.local
        qa, qf, qc = (x[oq][:, loc] for x in (pl.q_anchor, pl.q_follow, pl.qc))
        ka, kf, kc = (x[ok][:, loc] for x in (pl.k_anchor, pl.k_follow, pl.kc))
        n = loc.size
        Uq, Uk = qc.shape[0], kc.shape[0]
        tiles = np.zeros((4, Uq, Uk), np.int64)
        slots = {}
        for p in cand.match_passes:
            m, _, _ = quad_slots(qc, kc, R, C, p, cand.pair_side[p], cand.lookahead)
            slots[p] = (m, np.concatenate([[0], np.cumsum(m.slots)]))
        RB, CB = -(-Uq // R), -(-Uk // C)
        for rb in range(RB):
            rows = np.arange(rb * R, min(rb * R + R, Uq))
            for cb in range(CB):
                cols = np.arange(cb * C, min(cb * C + C, Uk))
                for p in range(PASSES):
                    qcs, kcs = qc[rows][:, None, :], kc[cols][None, :, :]
                    work = op_t[p][qcs, kcs] != Op.IDLE                 # (r, c, n)
                    if p in slots:
                        m, bounds = slots[p]
                        lo, hi = bounds[rb * CB + cb], bounds[rb * CB + cb + 1]
                        chans = list(zip(m.a[lo:hi].tolist(), m.b[lo:hi].tolist()))
                    else:
                        chans = [(c, -1) for c in range(n) if work[:, :, c].any()]
                    seen = []
                    for a, b in chans:
                        if b >= 0:
                            _check_pair(p, qc[rows], kc[cols], a, b, cand.pair_side[p])
                        seen += [a] + ([b] if b >= 0 else [])
                    want = [c for c in range(n) if work[:, :, c].any()]
                    if sorted(seen) != want:
                        raise AssertionError(f"pass {p} quad ({rb}, {cb}): slots cover "
                                             f"{sorted(seen)}, work at {want}")
                    x = (qa if p < 2 else qf)[rows][:, None, :]
                    y = (ka if p in (0, 2) else kf)[cols][None, :, :]
                    # Sums are exact integers, so the order of the slots does not matter;
                    # what matters is that exactly the channels with work are issued.
                    cs = np.asarray(seen, np.int64)
                    op, split, sl = (op_t[p][qcs[..., cs], kcs[..., cs]],
                                     split_t[p][qcs[..., cs], kcs[..., cs]],
                                     sel_t[p][qcs[..., cs], kcs[..., cs]])
                    contrib = _contributions(op, split, sl, x[..., cs], y[..., cs])
                    for r, tile in enumerate(REGISTER_TILE[p]):
                        if tile is not None:
                            tiles[tile][np.ix_(rows, cols)] += contrib[r].sum(axis=2)
        a_q, f_q = pl.anchors[oq], pl.followers[oq]
        a_k, f_k = pl.anchors[ok], pl.followers[ok]
        fq, fk = f_q >= 0, f_k >= 0
        s[np.ix_(a_q, a_k)] += tiles[0]
        s[np.ix_(a_q, f_k[fk])] += tiles[1][:, fk]
        s[np.ix_(f_q[fq], a_k)] += tiles[2][fq, :]
        s[np.ix_(f_q[fq], f_k[fk])] += tiles[3][np.ix_(fq, fk)]
    return s


def _check_pair(p, qcr, kcc, a, b, side):
    """Assert that channels a and b fit the narrow port together in every column (row)."""
    if side == "col":
        need = COL_UNITS[p][qcr[:, None, [a, b]], kcc[None, :, [a, b]]].max(axis=0)  # (c, 2)
    else:
        need = ROW_UNITS[p][qcr[:, None, [a, b]], kcc[None, :, [a, b]]].max(axis=1)  # (r, 2)
    if (need.sum(axis=-1) > 2).any():
        raise AssertionError(f"pass {p}: channels {a} and {b} overflow the {side} port")


# -- workloads --------------------------------------------------------------------------------

#: The issue's three regimes (keyword arguments of ``golden.workloads.make_qkv``).
REGIMES = {"default": {}, "smooth": {"noise": 0.02, "smooth": 5.0}, "fast": {"motion": 3.0}}


@dataclass
class Head:
    """One attention head: int8 ``q``, ``k`` (N, d) on ``grid`` with ``preset``'s groups."""
    label: str
    preset: str
    regime: str
    grid: object
    q: np.ndarray
    k: np.ndarray
    groups: object = field(init=False)
    oracle: float = field(init=False)

    def __post_init__(self):
        from golden.numerics import ChannelGroups
        self.grid = as_grid(self.grid)
        self.groups = ChannelGroups.from_preset(self.preset)
        self.oracle = oracle_ops(reuse_masks(self.q, self.grid, self.groups),
                                 reuse_masks(self.k, self.grid, self.groups))["reduction"]


def regime_head(preset: str, grid, regime: str = "default", seed: int = 0) -> Head:
    """The synthetic ``make_qkv`` head of ``preset`` in ``regime`` (:data:`REGIMES`)."""
    from golden.workloads import make_qkv
    if regime not in REGIMES:
        raise ValueError(f"regime must be one of {', '.join(REGIMES)}, got {regime!r}")
    q, k, _ = make_qkv(preset, grid, seed=seed, **REGIMES[regime])
    return Head(f"{preset} {regime}", preset, regime, grid, q, k)


def load_npz_head(path, grid=None, preset=None) -> Head:
    """A user head from ``path`` (.npz): int8 ``q`` and ``k`` of shape (N, d), tokens in
    (t, y, x) order; ``grid`` (3 ints T, H, W) and ``preset`` (a string naming a
    ``golden.PRESETS`` entry) from the file or from the arguments (the arguments win)."""
    from golden.checks import as_int8
    with np.load(path, allow_pickle=False) as z:
        q, k = as_int8(z["q"], "q"), as_int8(z["k"], "k")
        if grid is None and "grid" in z:
            grid = tuple(int(x) for x in z["grid"])
        if preset is None and "preset" in z:
            preset = str(z["preset"])
    if grid is None or preset is None:
        raise ValueError(f"{path}: grid and preset are needed (arrays 'grid' and 'preset' in "
                         f"the file, or the arguments)")
    return Head(str(path), preset, "user", grid, q, k)


# -- the study --------------------------------------------------------------------------------

def run_candidate(head: Head, cand: Candidate, base: EngineParams = EngineParams()):
    """``(cycles, busy PE-cycles, PEs)`` of one candidate on one head."""
    params = cand.params(base)
    pes = params.arrays * params.rows * params.cols
    if cand.kind == "engine":
        q, k = (head.k, head.q) if cand.transposed else (head.q, head.k)
        c = engine_counters(q, k, head.grid, head.groups, params, cand.variant)
        return int(c.cycles), int(c.busy_pe_cycles.sum()), pes
    c = dataflow_counters(head.q, head.k, head.grid, head.groups, cand, base)
    return int(c.cycles), int(c.busy), pes


def study(heads, names=DEFAULT_CANDIDATES, base: EngineParams = EngineParams(), progress=None
          ) -> list[dict]:
    """One row per (head, candidate) and four bound rows per head (:class:`Ceiling`).

    Speedups are over ``dense`` and ``pe`` on the candidate's own PE count (dense on the
    same shape for the shape candidates). ``gap_closed`` = (cycles(full) - cycles) /
    (cycles(full) - ceiling) against the pair ceiling of the 4x4 scheduled quads.
    """
    rows = []
    key0 = (base.rows, base.cols, base.arrays)
    for head in heads:
        runs = {name: run_candidate(head, CANDIDATES[name], base) for name in names}
        dense = {key0: runs["dense"] if "dense" in runs
                 else run_candidate(head, CANDIDATES["dense"], base)}
        pe = {key0: runs["pe"] if "pe" in runs else run_candidate(head, CANDIDATES["pe"], base)}
        for name in names:
            shape = CANDIDATES[name].params(base)
            key = (shape.rows, shape.cols, shape.arrays)
            if key not in dense:
                over = CANDIDATES[name].overrides
                dense[key] = run_candidate(head, replace(CANDIDATES["dense"], overrides=over), base)
                pe[key] = run_candidate(head, replace(CANDIDATES["pe"], overrides=over), base)
            if progress:
                progress(head, name)
        ceil = ceiling(head.q, head.k, head.grid, head.groups, base, scheduled=True)
        ceil_nat = ceiling(head.q, head.k, head.grid, head.groups, base, scheduled=False)
        d0, pe0 = dense[key0][0], pe[key0][0]
        dense_busy = dense[key0][1]
        full0 = runs["full"][0] if "full" in runs else \
            run_candidate(head, CANDIDATES["full"], base)[0]
        gap_den = full0 - ceil.quad_pair

        def row(name, cycles, busy, pes, kind, exact, dense_cycles, pe_cycles, summary):
            hw = 1.0 - busy / (dense_busy * 1.0)
            return {"label": head.label, "preset": head.preset, "regime": head.regime,
                    "grid": str(head.grid), "candidate": name, "kind": kind, "exact": exact,
                    "pes": pes, "cycles": cycles, "dense_cycles": dense_cycles,
                    "speedup": dense_cycles / cycles, "over_pe": pe_cycles / cycles,
                    "utilization": busy / (pes * cycles), "busy": busy,
                    "hw_op_reduction": hw, "oracle_reduction": head.oracle,
                    "hw_of_oracle": hw / head.oracle if head.oracle else float("nan"),
                    "gap_closed": (full0 - cycles) / gap_den if gap_den else float("nan"),
                    "summary": summary}
        for name in names:
            cand = CANDIDATES[name]
            cycles, busy, pes = runs[name]
            shape = cand.params(base)
            key = (shape.rows, shape.cols, shape.arrays)
            rows.append(row(name, cycles, busy, pes, cand.kind, cand.exact, dense[key][0],
                            pe[key][0], cand.summary))
        pes = ceil.pes
        rows.append(row("ceiling-1op", ceil.quad_one, ceil.busy_one, pes, "bound", True, d0,
                        pe0, "quad-stationary bound, one operation per PE per step "
                        "(scheduler order)"))
        rows.append(row("ceiling", ceil.quad_pair, ceil.busy_pair, pes, "bound", True, d0, pe0,
                        "quad-stationary bound, two low-nibble products per PE-step "
                        "allowed (scheduler order)"))
        rows.append(row("ceiling-passes", ceil.passes, ceil.busy_pair, pes, "bound", True, d0,
                        pe0, "today's pass structure and timing, every PE skipping and pairing "
                        "on its own (scheduler order)"))
        rows.append(row("ceiling-nat", ceil_nat.quad_pair, ceil_nat.busy_pair, pes, "bound",
                        True, d0, pe0, "as ceiling, natural order"))
        rows.append(row("ceiling-free", ceil.free, ceil.busy_pair, pes, "bound", True, d0, pe0,
                        "any mapping of the operations onto the PEs (work / PEs)"))
    return rows
