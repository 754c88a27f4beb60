"""Golden model of the multi-array KaleidoEngine (``docs/engine.md``): functional and cycle model.

The engine runs the tile quads of ``docs/array.md`` on P arrays of R x C ReusePEs, fed by the
data dispatcher (``docs/dispatch.md``). The channels of every group are cut into *chunks* of
W channels; per chunk,

1. each side (Q rows, K columns) gets a unit *order*: natural, or the ClusterScheduler's
   output (:func:`orders`);
2. column block ``cb`` of the chunk's column order goes to array ``cb mod P``, which walks its
   column blocks and, for each, every row block (quads in the order (cb, rb));
3. every quad runs passes 0-3 through the per-PE decode table ``golden.array.schedule.DECODE``;
   with the matcher, pass 3 replays the MergeMatcher's slot sequence of the column block,
   issuing two compatible channels per step where it can;
4. results go to the chunk's plane of the accumulation buffer (banked by column position),
   and S is the sum of the planes read back through the inverse column orders.

Variants (``VARIANTS``): ``dense`` (every code NONE: exact ``Q @ K^T``), ``pe`` (reuse, natural
order, one channel per step), ``pe-sh`` (+ scheduler), ``pe-m`` (+ matcher), ``full`` (both).

Two models, checked against each other and against a per-quad walk by
``tests/engine/test_engine_model.py``:

- :func:`kaleido_engine`: S, computed the way the engine computes it (orders, decode table,
  slot sequence with merged low-nibble pairs, bank/address map); equals
  ``golden.attention_scores`` (dense: ``q @ k.T``) bit for bit.
- :func:`engine_counters`: every counter of the RTL, cycle-exact per ``docs/engine.md``,
  vectorized over quads (issue counts as matrix products over per-block code sets, the
  matcher run once per chunk for all column blocks), fast enough for a 720p head on the
  paper's 16,384 arrays.

Plain numpy; no hardware imports.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from golden.array.schedule import (DECODE, PASSES, REGISTER_TILE, SET_WORK, Op, _code_sets,
                                   _contributions, _plans, follower_codes, units)
from golden.checks import as_int8, check_bits, check_int, check_tokens
from golden.dispatch.model import (SEL_BYTE_A, SEL_BYTE_B, SEL_NIB_A, SEL_NIB_AB, SEL_NIB_B,
                                   MatcherParams, SchedulerParams, match, schedule)
from golden.numerics import FULL, HALF, NONE, ChannelGroups, _as_groups, as_grid


__all__ = [
    "VARIANTS", "variant_flags", "EngineParams", "EngineTiming", "Chunk", "ChunkOrder",
    "EngineCounters", "chunks", "orders", "kaleido_engine", "engine_counters",
    "match_codes", "bank_address", "SCHED_SIDES", "PLAIN_AXIS", "plain_walk", "ChunkTimeline",
    "snoops", "snoop_last_read",
]

#: Variant -> (reuse, scheduler, matcher): the run-time ``cfg`` bits of ``docs/engine.md``.
_FLAGS = {"dense": (False, False, False), "pe": (True, False, False),
          "pe-sh": (True, True, False), "pe-m": (True, False, True),
          "full": (True, True, True)}
VARIANTS = tuple(_FLAGS)

#: What the scheduler orders (``sched_sides``): the Q units only, or both sides.
SCHED_SIDES = ("q", "qk")

#: Pass-3 class of a column's K-follower code (FULL/HALF/NONE/ABSENT) as a matcher code:
#: FULL and ABSENT need nothing in pass 3, HALF the low nibble, NONE the whole byte.
_PASS3_CLASS = np.array([FULL, HALF, NONE, FULL], dtype=np.uint8)


def variant_flags(variant: str) -> tuple[bool, bool, bool]:
    """``(reuse, scheduler, matcher)`` of a variant name."""
    if variant not in _FLAGS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    return _FLAGS[variant]


@dataclass(frozen=True)
class EngineParams:
    """Shape of the engine and of its dispatcher (mirror of ``KaleidoConfig`` keys).

    rows, cols : int   R x C ReusePEs per array (``rows``, ``cols``)
    arrays : int       P arrays (``engine_arrays``; larger values are allowed here for
                       paper-scale studies, e.g. 16,384 arrays of 4 x 4)
    width : int        W channels per chunk (``sched_pattern_width``); also the scheduler's
                       pattern width and the matcher's batch of channels
    entries : int      E entries per scheduler batch (``sched_entries``)
    clusters : int     K cluster queues (``sched_clusters``)
    seed : int         LFSR seed of the schedulers (``sched_lfsr_seed``)
    lookahead : int    L, the matcher's pending window (``matcher_lookahead``)
    sched_sides : str  ``"q"``: the scheduler orders the Q units only and the K units keep
                       their natural order, so every chunk of a group puts a score at the same
                       bank and word and the group's chunks accumulate into one plane;
                       ``"qk"``: both sides are ordered per chunk, one plane per chunk
                       (``sched_sides``; ``docs/engine.md``, "Accumulation buffer")
    """
    rows: int = 4
    cols: int = 4
    arrays: int = 4
    width: int = 16
    entries: int = 64
    clusters: int = 4
    seed: int = 0xACE1
    lookahead: int = 4
    sched_sides: str = "q"

    def __post_init__(self):
        check_int("rows", self.rows, 1, 64)
        check_int("cols", self.cols, 1, 64)
        check_int("arrays", self.arrays, 1, 1 << 20)
        check_int("width", self.width, 1, 64)
        check_int("lookahead", self.lookahead, 1, 64)
        if self.sched_sides not in SCHED_SIDES:
            raise ValueError(f"sched_sides must be one of {', '.join(SCHED_SIDES)}, "
                             f"got {self.sched_sides!r}")
        self.scheduler()    # checks entries, clusters, seed

    @classmethod
    def from_config(cls, config, **overrides) -> "EngineParams":
        """From a ``KaleidoConfig`` (or a dict with its keys); ``overrides`` replace fields."""
        c = config.__getitem__ if isinstance(config, dict) else (lambda key: getattr(config, key))
        values = dict(rows=c("rows"), cols=c("cols"), arrays=c("engine_arrays"),
                      width=c("sched_pattern_width"), entries=c("sched_entries"),
                      clusters=c("sched_clusters"), seed=c("sched_lfsr_seed"),
                      lookahead=c("matcher_lookahead"), sched_sides=c("sched_sides"))
        values.update(overrides)
        return cls(**values)

    def scheduler(self) -> SchedulerParams:
        """Parameters of each side's ClusterScheduler (E, W, K, seed)."""
        return SchedulerParams(self.entries, self.width, self.clusters, self.seed)

    def matcher(self) -> MatcherParams:
        """Parameters of each array's MergeMatcher (C = cols, M = W, L)."""
        return MatcherParams(self.cols, self.width, self.lookahead)


@dataclass(frozen=True)
class EngineTiming:
    """Fixed latencies of the engine's pipeline (``docs/engine.md``, "Timing").

    - ``load_base``, ``tail_base``: as the single-array pipeline's (``golden.array.schedule.Timing``).
    - ``pre_base``: the scheduler pre-pass of a chunk of U units takes
      ``(ceil(U/E) + 2) * E + U + pre_base`` cycles: one unit per two cycles in (its anchor's
      and follower's words through one read port), padded to whole batches at one dummy per
      cycle, then the last batch's E reads and E outputs, plus ``pre_base`` cycles of
      pipeline (set from the RTL: three cycles from the chunk's pre-pass start to its first
      unit in the OrderUnit, the last real unit ``2(U - 1)`` cycles after it and the last
      dummy ``N - U`` after that, the order complete ``2E + 4`` cycles later, and one cycle
      to register the chunk's ``go``; ``N`` = U padded to whole batches).
    - ``snoop_base``: with the Q side alone ordered (``sched_sides = "q"``) the pre-pass of
      chunk k+1 takes its units from array 0's loads in chunk k (:func:`snoop_last_read`):
      its order is complete ``(N - U) + 2E + snoop_base`` cycles after array 0 read the
      follower word of chunk k's last row unit (the unit enters the OrderUnit three cycles
      after that read, and from there it takes ``(N - U) + 2E + 6`` cycles as with a port
      of its own).
    - ``barrier``: cycles from the end of a chunk (every array issued its last step) to the
      start of the next one.
    """
    load_base: int = 2
    tail_base: int = 1
    pre_base: int = 7
    snoop_base: int = 9
    barrier: int = 2

    @staticmethod
    def gap(rows: int, cols: int) -> int:
        """Minimum distance of two quads' starts: ``2*max(R, C)`` reads plus one cycle."""
        return 2 * max(rows, cols) + 1

    def prepass(self, units: int, entries: int) -> int:
        """Cycles of one chunk's scheduler pre-pass over ``units`` units."""
        return (-(-units // entries) + 2) * entries + units + self.pre_base

    def snoop_ready(self, last_read: int, units: int, entries: int) -> int:
        """Cycle (from the chunk's ``go``) at which the snooping pre-pass of the next chunk is
        complete, from array 0's read of the last row unit's follower in ``last_read``."""
        padded = -(-units // entries) * entries
        return last_read + padded - units + 2 * entries + self.snoop_base


def snoop_last_read(cb0_steps, units: int, rows: int, gap: int) -> int:
    """Cycles from a chunk's ``go`` to array 0's read of the follower word of row position
    ``units - 1`` (the last Q unit it loads in its first column block).

    Array 0 loads the quads (0, 0), (0, 1), ... of column block 0: quad 0's reads start with
    ``go``, quad rb's (rb >= 1) with the swap to quad rb - 1, which is ``gap + sum_{j < rb-1}
    max(s_j, gap)`` cycles after ``go`` (``s_j``: the steps of quad (0, j), ``cb0_steps``);
    a quad reads its units anchor then follower, two cycles per unit."""
    nrb = -(-units // rows)
    r_last = units - 1 - (nrb - 1) * rows
    start = 0
    if nrb >= 2:
        start = gap + int(np.maximum(np.asarray(cb0_steps[:nrb - 2], np.int64), gap).sum())
    return start + 2 * r_last + 1


# -- chunks and orders ------------------------------------------------------------------------

@dataclass(frozen=True)
class Chunk:
    """One chunk: ``channels`` (head channel indices, ascending) of ``group``; ``local`` are
    their positions within the group's channel list."""
    index: int
    group: int
    direction: int
    channels: np.ndarray
    local: np.ndarray


def chunks(groups, width: int) -> list[Chunk]:
    """The run's chunks in run order: group t, y, x (empty groups have none), then W
    consecutive channels of the group at a time (the last chunk of a group may be shorter)."""
    groups = _as_groups(groups)
    width = check_int("width", width, 1, 64)
    out = []
    for g in range(3):
        ch = groups.channels(g)
        for j in range(0, ch.size, width):
            local = np.arange(j, min(j + width, ch.size))
            out.append(Chunk(len(out), g, groups.directions[g], ch[local], local))
    return out


@dataclass
class ChunkOrder:
    """Unit orders of one chunk: ``q[pos]`` / ``k[pos]`` is the unit at row / column
    position ``pos``; ``inv_q[u]`` / ``inv_k[u]`` the position of unit ``u``."""
    chunk: Chunk
    q: np.ndarray
    k: np.ndarray
    inv_q: np.ndarray = field(repr=False, default=None)
    inv_k: np.ndarray = field(repr=False, default=None)

    def __post_init__(self):
        self.inv_q = np.argsort(self.q, kind="stable")
        self.inv_k = np.argsort(self.k, kind="stable")


def _patterns(codes: np.ndarray, width: int) -> np.ndarray:
    """(U, n) follower codes (with ABSENT) -> (U,) scheduler patterns: bit j set iff the
    follower has code HALF or NONE at chunk channel j."""
    work = ((codes == HALF) | (codes == NONE)).astype(np.uint64)
    weights = np.uint64(1) << np.arange(codes.shape[1], dtype=np.uint64)
    return (work * weights).sum(axis=1, dtype=np.uint64)


def _scheduled_order(codes, params: EngineParams, state: int):
    """The ClusterScheduler's order of the units of one chunk side, and the LFSR state after."""
    U = codes.shape[0]
    E = params.entries
    pats = np.zeros(-(-U // E) * E, dtype=np.uint64)        # dummies: pattern 0
    pats[:U] = _patterns(codes, params.width)
    r = schedule(pats, params.scheduler(), state=state)
    out = (r.order + (np.arange(r.order.shape[0]) * E)[:, None]).ravel()
    return out[out < U], r.state


class _OrderSource:
    """The unit orders of a run's chunks, one chunk at a time (each side's LFSR state carried
    over the chunks it orders).

    A chunk runs in natural order when there is no scheduler, when it is chunk 0 (nothing
    runs before it to hide a pre-pass behind) and when the engine falls back (``natural``
    below). A chunk in natural order drops the pre-pass that was ordering it (the
    ClusterScheduler's local reset), so the next chunk's pre-pass starts from the seed.

    ``before``: the chunk before's order when the pre-pass snoops array 0's loads
    (``sched_sides = "q"``, :func:`snoops`): the scheduler then takes the units in the order
    array 0 loaded them, the chunk before's row order, and identifies each by its position
    in it; else (None) in natural order."""

    def __init__(self, plans, params: EngineParams, scheduled: bool):
        self.by_group = {pl.group: pl for pl in plans}
        self.params, self.scheduled = params, scheduled
        self.state_q = self.state_k = params.seed

    def order(self, chunk: Chunk, natural: bool, before: "ChunkOrder | None" = None
              ) -> ChunkOrder:
        pl = self.by_group[chunk.group]
        U = pl.anchors.size
        oq = ok = np.arange(U)
        p = self.params
        if self.scheduled and natural:
            self.state_q = self.state_k = p.seed
        elif self.scheduled and before is not None:
            seq = before.q
            pos, self.state_q = _scheduled_order(pl.qc[seq][:, chunk.local], p, self.state_q)
            oq = seq[pos]
        elif self.scheduled:
            oq, self.state_q = _scheduled_order(pl.qc[:, chunk.local], p, self.state_q)
            if p.sched_sides == "qk":
                ok, self.state_k = _scheduled_order(pl.kc[:, chunk.local], p, self.state_k)
        return ChunkOrder(chunk, oq, ok)


def snoops(params: EngineParams) -> bool:
    """Whether the Q side's pre-pass snoops array 0's loads (``docs/engine.md``, "Orders"):
    with ``sched_sides = "q"``. Then the first chunk of every group runs in natural order
    (no loads of its units came before it), and the others are ordered from the units in
    the chunk before's row order. With ``"qk"`` each side reads its units through a read
    port of its own (an array loads only its own column blocks' K units)."""
    return params.sched_sides == "q"


def _group_first(chunk_list) -> set:
    """Indices of the chunks that start a group."""
    return {i for i, ch in enumerate(chunk_list)
            if i == 0 or ch.group != chunk_list[i - 1].group}


def _check_natural(natural, count: int) -> frozenset:
    out = frozenset(int(i) for i in natural)
    bad = sorted(i for i in out if not 0 <= i < count)
    if bad:
        raise ValueError(f"natural must hold chunk indices in [0, {count - 1}], got {bad}")
    return out


def _orders(plans, chunk_list, params: EngineParams, scheduled: bool,
            natural=()) -> list[ChunkOrder]:
    """Orders of every chunk; chunk 0 and the chunks in ``natural`` in natural order (with a
    snooping pre-pass also the first chunk of every group)."""
    natural = _check_natural(natural, len(chunk_list)) | {0}
    snoop = snoops(params)
    if snoop and scheduled:
        natural = natural | _group_first(chunk_list)
    src = _OrderSource(plans, params, scheduled)
    out = []
    for i, ch in enumerate(chunk_list):
        out.append(src.order(ch, i in natural, out[-1] if snoop and out else None))
    return out


class ChunkTimeline:
    """When each chunk of a run starts, and in which order it runs (``docs/engine.md``,
    "Timing"): the loop every cycle model of the engine composes its chunk times with.

    Chunk k starts ``barrier`` cycles after chunk k-1 ends (chunk 0 at ``load_base``) and
    never waits for an order: with the scheduler, chunk k's pre-pass starts when chunk k-1
    starts; if it is not done when chunk k could start, chunk k runs in natural order (a
    *fallback*) and its pre-pass is dropped. The pre-pass reads its units through a port of
    its own and takes ``timing.prepass(U)`` cycles, or, with ``sched_sides = "q"``
    (:func:`snoops`), takes them from array 0's loads of chunk k-1's first column block and
    is done ``timing.snoop_ready`` cycles after chunk k-1's start (so the first chunk of a
    group, whose units chunk k-1 did not load, always falls back). So the chunks of every
    variant start back to back, and as no chunk in any order issues more steps than in
    dense, no variant is ever slower than dense. (A scheduled order can still cost a few
    cycles more than the natural one.)

    ``natural``: None (decide by the timing above) or the chunk indices that fell back in an
    observed run (a run under stall injection, whose timing the model does not follow).

    Use: ``order = tl.next(chunk)`` then ``tl.ran(T, cb0_steps)`` with the chunk's time and
    the steps of array 0's quads in column block 0 (their row-block order; needed only with a
    snooping pre-pass), per chunk; then ``tl.end`` (the last chunk's end), ``tl.starts``,
    ``tl.lengths``, ``tl.fallbacks``."""

    def __init__(self, plans, chunk_list, params: EngineParams, scheduled: bool,
                 timing: EngineTiming, natural=None):
        self.timing, self.params, self.scheduled = timing, params, scheduled
        self.forced = None if natural is None else _check_natural(natural, len(chunk_list))
        self.source = _OrderSource(plans, params, scheduled)
        self.snoop = scheduled and snoops(params)
        self._firsts = _group_first(chunk_list)       # chunks nobody loaded before: no pre-pass
        self.end = timing.load_base - timing.barrier
        self.pre_start = timing.load_base
        self.starts, self.lengths, self.fallbacks = [], [], []
        self._start = None
        self._last = None                 # the chunk before's order
        self._ready = None                # ... and when the snooped pre-pass after it is done

    def next(self, chunk: Chunk) -> ChunkOrder:
        """The order of the next chunk (decides whether it falls back)."""
        i = len(self.starts)
        self._start = self.end + self.timing.barrier
        if not self.scheduled or i == 0:
            fell = False
        elif self.forced is not None:
            fell = i in self.forced
        elif self.snoop:
            fell = i in self._firsts or self._ready > self._start
        else:
            units = self.source.by_group[chunk.group].anchors.size
            ready = self.pre_start + self.timing.prepass(units, self.params.entries)
            fell = ready > self._start
        if fell:
            self.fallbacks.append(i)
        order = self.source.order(chunk, i == 0 or fell, self._last if self.snoop else None)
        self._last = order
        return order

    def ran(self, time: int, cb0_steps=None):
        """The chunk just ordered took ``time`` cycles (its slowest array's); ``cb0_steps``:
        the steps of array 0's quads in its first column block (with a snooping pre-pass)."""
        start = self._start
        self.end = start + int(time)
        self.pre_start = start
        self.starts.append(start)
        self.lengths.append(int(time))
        if self.snoop:
            if cb0_steps is None:
                raise ValueError("a snooping pre-pass needs the steps of array 0's first "
                                 "column block (cb0_steps)")
            p = self.params
            units = self._last.q.size
            read = snoop_last_read(cb0_steps, units, p.rows, self.timing.gap(p.rows, p.cols))
            self._ready = start + self.timing.snoop_ready(read, units, p.entries)


def orders(codes, grid, groups, params: EngineParams, scheduled: bool = True, natural=()
           ) -> list[ChunkOrder]:
    """Per chunk (run order), the Q and K unit orders and their inverses.

    ``codes``: ``(mask_q, mask_k)``, the (N, d) reuse codes of Q and K
    (``golden.reuse_masks``). Without the scheduler every order is the natural one. With it,
    each scheduled side (Q only with ``params.sched_sides = "q"``, the default; Q and K with
    ``"qk"``) streams the chunk's units through its own ClusterScheduler (pattern bit j: the
    unit's follower is HALF or NONE at chunk channel j; padded with dummy entries to whole
    batches of E); the order is its output with the dummies removed. With ``"qk"`` the units
    go in natural order; with ``"q"`` the pre-pass snoops array 0's loads (:func:`snoops`),
    so they go in the chunk before's row order, and the first chunk of every group keeps the
    natural order. The first chunk of a run is never scheduled: it keeps the natural order,
    and its arrays start at once while the schedulers order chunk 1 (so the pre-pass of
    every scheduled chunk overlaps the previous chunk's work). The chunks in ``natural``
    (the fallbacks of :class:`ChunkTimeline`, ``EngineCounters.fallbacks``) keep the natural
    order too. Each LFSR starts from the seed after every chunk in natural order; each
    side's state then runs on across its scheduled chunks.
    """
    grid, groups = as_grid(grid), _as_groups(groups)
    mq, mk = (np.asarray(c) for c in codes)
    plans = _code_plans(mq, mk, grid, groups)
    return _orders(plans, chunks(groups, params.width), params, scheduled, natural)


@dataclass
class _CodePlan:
    group: int
    anchors: np.ndarray
    qc: np.ndarray
    kc: np.ndarray


def _code_plans(mq, mk, grid, groups):
    out = []
    for g in range(3):
        ch = groups.channels(g)
        if ch.size == 0:
            continue
        anchors, followers = units(grid, groups.directions[g])
        out.append(_CodePlan(g, anchors, follower_codes(mq, ch, followers),
                             follower_codes(mk, ch, followers)))
    return out


def match_codes(kc: np.ndarray, cols: int, width: int) -> np.ndarray:
    """The matcher's batches of one chunk: (CB, C, W) pass-3 classes of the column units in
    column order ``kc`` ((U, n) follower codes, permuted); padding columns and channels past
    the chunk's end are FULL."""
    U, n = kc.shape
    cb = -(-U // cols)
    out = np.zeros((cb * cols, width), np.uint8)
    out[:U, :n] = _PASS3_CLASS[kc]
    return out.reshape(cb, cols, width)


def bank_address(token_q, pos, follower, arrays: int, cols: int, kb: int):
    """Accumulation-buffer word of (Q token, K unit at column position ``pos``, ``follower``):
    ``(bank, address)`` per ``docs/engine.md``."""
    pc = arrays * cols
    return pos % pc, token_q * kb + 2 * (pos // pc) + follower


def _kb(max_units: int, arrays: int, cols: int) -> int:
    words = 2 * -(-max_units // (arrays * cols))
    return 1 << max(words - 1, 0).bit_length()


# -- functional model -------------------------------------------------------------------------

def _check_inputs(q, k, grid, groups, variant, full_bits, half_bits):
    grid, groups = as_grid(grid), _as_groups(groups)
    flags = variant_flags(variant)
    check_bits(full_bits, half_bits)
    q, k = as_int8(q, "q"), as_int8(k, "k")
    check_tokens(q, "q", grid.n, str(grid), groups.head_dim)
    check_tokens(k, "k", grid.n, str(grid), groups.head_dim)
    return q, k, grid, groups, flags


def _pe_term(op, x, y):
    """R0 term of one pass-3 PE operation (MUL, LOWc, LOWr or idle) on int64 arrays."""
    return np.select([op == Op.MUL, op == Op.LOW_COL, op == Op.LOW_ROW],
                     [x * y, x * (y & 15), (x & 15) * y], 0)


def _pass_tiles(qa, qf, qc, ka, kf, kc, passes):
    """Tiles T0..T3 (4, Uq, Uk) accumulated over ``passes`` via the decode table."""
    op_t, split_t, sel_t = DECODE
    tiles = np.zeros((4, qa.shape[0], ka.shape[0]), np.int64)
    qcb, kcb = qc[:, None, :], kc[None, :, :]
    for p in passes:
        op, split, sel = op_t[p][qcb, kcb], split_t[p][qcb, kcb], sel_t[p][qcb, kcb]
        x = (qa if p < 2 else qf)[:, None, :]
        y = (ka if p in (0, 2) else kf)[None, :, :]
        for r, tile in enumerate(REGISTER_TILE[p]):
            if tile is not None:
                tiles[tile] += _contributions(op, split, sel, x, y)[r].sum(axis=2)
    return tiles


def _matched_pass3(qf, qc, kf, kc, params: EngineParams):
    """Tile 3 (Uq, Uk) from the matcher's slot sequence, per column block, with each slot
    skipped in the row blocks where no real row has work at A or B."""
    R, C = params.rows, params.cols
    Uq, Uk = qf.shape[0], kf.shape[0]
    m = match(match_codes(kc, C, params.width), params.matcher())
    t3 = np.zeros((Uq, Uk), np.int64)
    if m.a.size == 0:
        return t3
    pos = m.batch[:, None] * C + np.arange(C)[None, :]               # (S, C)
    real = pos < Uk
    posc = np.minimum(pos, Uk - 1)
    a = np.broadcast_to(m.a[:, None], pos.shape)
    b = np.broadcast_to(np.maximum(m.b, 0)[:, None], pos.shape)     # channel of lane 1
    sel = m.sel.astype(np.int64)
    op3 = DECODE[0][3]
    # Row operands of the slot: a0 = channel A, a1 = channel B (per row, per slot).
    xa = qf[:, m.a][:, :, None]                                       # (Uq, S, 1)
    xb = qf[:, np.maximum(m.b, 0)][:, :, None]
    qca, qcb = qc[:, m.a][:, :, None], qc[:, np.maximum(m.b, 0)][:, :, None]
    kca, kcb = kc[posc, a][None], kc[posc, b][None]                   # (1, S, C)
    ya, yb = kf[posc, a][None], kf[posc, b][None]
    # BYTE_A / BYTE_B: the PE decodes that channel's pass-3 entry on its whole byte.
    byte_a = _pe_term(op3[qca, kca], xa, ya)
    byte_b = _pe_term(op3[qcb, kcb], xb, yb)
    # NIB_*: one byte carries both low nibbles; LOW_PAIR takes lane j into R0 iff that lane's
    # channel is selected and its entry is LOWc.
    nib = (ya & 15) | ((yb & 15) << 4)
    take_a = np.isin(sel, (SEL_NIB_A, SEL_NIB_AB))[None] & (op3[qca, kca] == Op.LOW_COL)
    take_b = np.isin(sel, (SEL_NIB_B, SEL_NIB_AB))[None] & (op3[qcb, kcb] == Op.LOW_COL)
    pair = np.where(take_a, xa * (nib & 15), 0) + np.where(take_b, xb * ((nib >> 4) & 15), 0)
    s3 = sel[None]
    term = np.select([s3 == SEL_BYTE_A, s3 == SEL_BYTE_B,
                      (s3 == SEL_NIB_A) | (s3 == SEL_NIB_B) | (s3 == SEL_NIB_AB)],
                     [byte_a, byte_b, pair], 0)
    # Skip rule: a slot is not issued in a quad whose real rows are all idle at A and at B.
    hn = (qc == HALF) | (qc == NONE)                                  # (Uq, n)
    rb = np.arange(Uq) // R
    nrb = -(-Uq // R)
    blk = np.zeros((nrb, hn.shape[1]), bool)
    np.logical_or.at(blk, rb, hn)
    work = blk[:, m.a] | (blk[:, np.maximum(m.b, 0)] & (m.b >= 0))    # (RB, S)
    term = term * work[rb][:, :, None]
    term = np.where(real[None], term, 0)
    np.add.at(t3.T, posc[real], term[:, real].T)
    return t3


def kaleido_engine(q, k, grid, groups, params: EngineParams = EngineParams(),
                   variant: str = "full", full_bits: int = 5, half_bits: int = 3, *,
                   linear: bool = False) -> np.ndarray:
    """(N, N) int64 S computed the way the engine computes it.

    Per chunk: the unit orders (:func:`orders`), passes 0-3 of every (row, column) unit pair
    through the decode table (pass 3 with the matcher: the slot sequence of each column
    block, merged low-nibble pairs formed as LOW_PAIR on one byte), each tile written to the
    chunk's plane at its bank and address (once per word and chunk; a plane per group whose
    chunks accumulate onto it with ``sched_sides = "q"``, a plane per chunk with ``"qk"``),
    and S read back as the sum of the planes through the inverse column orders. Equals
    ``golden.attention_scores`` (``q @ k.T`` for ``dense``) bit for bit.

    ``linear``: a linear block instead (the core's COMPUTE kind 1): ``q`` is the activation X
    on ``grid``, ``k`` holds weight rows (row j = column j of W), X's codes follow the window
    rule with windows of 2 along each channel's group direction and the weights have none
    (:func:`golden.array.schedule.operand_codes`); the result is ``golden.linear(q, k.T,
    grid, directions, 2, full_bits, half_bits)`` (``q @ k.T`` for ``dense``).
    """
    q, k, grid, groups, (reuse, sched, matched) = _check_inputs(
        q, k, grid, groups, variant, full_bits, half_bits)
    grid, plans = _plans(q, k, grid, groups, full_bits, half_bits, reuse, linear)
    chunk_list = chunks(groups, params.width)
    ords = _orders(plans, chunk_list, params, sched)
    by_group = {pl.group: pl for pl in plans}
    P, C = params.arrays, params.cols
    kb = _kb(max(pl.anchors.size for pl in plans), P, C)
    N = grid.n
    s = np.zeros((N, N), np.int64)
    tok = np.arange(N)
    words = kb * N
    planes = {}           # plane -> (scores, written, the chunk's group plan, inverse K order)
    for index, order in enumerate(ords):
        ch = order.chunk
        pl = by_group[ch.group]
        cols = ch.local
        oq, ok = order.q, order.k
        qa, qf, qc = (x[oq][:, cols] for x in (pl.q_anchor, pl.q_follow, pl.qc))
        ka, kf, kc = (x[ok][:, cols] for x in (pl.k_anchor, pl.k_follow, pl.kc))
        tiles = _pass_tiles(qa, qf, qc, ka, kf, kc, (0, 1, 2) if matched else range(4))
        if matched:
            tiles[3] += _matched_pass3(qf, qc, kf, kc, params)
        # The chunk's plane: its own with both sides scheduled; with the K order natural, the
        # group's (every chunk of the group adds onto the words the first one wrote).
        key = ch.group if params.sched_sides == "q" else index
        if key not in planes:
            planes[key] = (np.zeros((P * C, words), np.int64),
                           np.zeros((P * C, words), np.int64), pl, order.inv_k)
        plane, written, _, _ = planes[key]
        # Write: bank = pos mod (P*C), address from the Q token and the position.
        once = np.zeros((P * C, words), np.int64)
        row_tok = (pl.anchors[oq], pl.followers[oq])
        col_has_f = pl.followers[ok] >= 0
        pos = np.arange(ok.size)
        for t in range(4):
            rtok = row_tok[1] if t >= 2 else row_tok[0]
            rmask = rtok >= 0
            f = int(t in (1, 3))
            cmask = col_has_f if f else np.ones(ok.size, bool)
            bank, addr = bank_address(rtok[rmask][:, None], pos[cmask][None, :], f, P, C, kb)
            np.add.at(plane, (bank, addr), tiles[t][np.ix_(rmask, cmask)])
            np.add.at(once, (bank, addr), 1)
        if once.max() > 1:
            raise AssertionError("an accumulation-buffer word was written twice by one chunk")
        written += once
    # Read-out: token t of K is unit u's anchor or follower; its position from inv_k.
    for plane, written, pl, inv_k in planes.values():
        unit = np.full(N, -1, np.int64)
        isf = np.zeros(N, np.int64)
        unit[pl.anchors] = np.arange(pl.anchors.size)
        fa = pl.followers >= 0
        unit[pl.followers[fa]] = np.flatnonzero(fa)
        isf[pl.followers[fa]] = 1
        kpos = inv_k[unit]
        bank, addr = bank_address(tok[:, None], kpos[None, :], isf[None, :], P, C, kb)
        if not written[bank, addr].all():
            raise AssertionError("a word of the plane was never written")
        s += plane[bank, addr]
    return s


# -- cycle model ------------------------------------------------------------------------------

@dataclass
class EngineCounters:
    """Counters of one engine run: engine-wide ``cycles`` and ``chunks``; per array
    (index a = 0..P-1) ``busy_pe_cycles``, ``issued[a, p]``, ``skipped[a, p]``, ``merged``,
    ``bubbles``, ``quads``, ``idle``. ``chunk_cycles`` is the length of each chunk
    (``end_k - start_k``), ``chunk_start`` its start cycle, ``fallbacks`` the chunks that
    ran in natural order because their pre-pass was not done (:class:`ChunkTimeline`)."""
    cycles: int
    chunks: int
    busy_pe_cycles: np.ndarray
    issued: np.ndarray
    skipped: np.ndarray
    merged: np.ndarray
    bubbles: np.ndarray
    quads: np.ndarray
    idle: np.ndarray
    chunk_start: np.ndarray = None
    chunk_cycles: np.ndarray = None
    fallbacks: tuple = ()

    @property
    def arrays(self) -> int:
        """P, the number of arrays."""
        return self.busy_pe_cycles.size

    @property
    def steps(self) -> np.ndarray:
        """(P,) steps of every array (issued steps of all passes + bubbles)."""
        return self.issued.sum(axis=1) + self.bubbles

    def totals(self) -> dict:
        """Sums over arrays (the form of ``golden.array.schedule.TileCounters.as_dict``)."""
        return {"cycles": int(self.cycles), "chunks": int(self.chunks),
                "busy_pe_cycles": int(self.busy_pe_cycles.sum()),
                "issued": [int(x) for x in self.issued.sum(axis=0)],
                "skipped": [int(x) for x in self.skipped.sum(axis=0)],
                "merged": int(self.merged.sum()), "bubbles": int(self.bubbles.sum()),
                "quads": int(self.quads.sum()), "idle": int(self.idle.sum())}

    def utilization(self, rows: int, cols: int) -> float:
        """PE utilization: busy PE-cycles / (P * R * C * cycles)."""
        return float(self.busy_pe_cycles.sum()) / (self.arrays * rows * cols * self.cycles)

    def as_dict(self) -> dict:
        """Totals plus every per-array counter as lists (JSON-ready)."""
        d = self.totals()
        d.update({"per_array": {key: getattr(self, key).tolist() for key in (
            "busy_pe_cycles", "issued", "skipped", "merged", "bubbles", "quads", "idle")}})
        return d


#: Output elements of one block of row blocks (bounds every temporary to ~16 MB).
_BLOCK = 1 << 22


def _issue_matrices(qset, kset, p):
    """(RB, m) and (m, CB) float32 whose product is the pass-p issued count of every quad:
    one term per (channel, column code set present at that channel)."""
    n = kset.shape[1]
    chs, vals = [], []
    for c in range(n):
        for b in np.unique(kset[:, c]):
            if SET_WORK[p][:, b].any():
                chs.append(c)
                vals.append(b)
    chs = np.asarray(chs, np.int64)
    vals = np.asarray(vals, np.int64)
    left = SET_WORK[p][qset[:, chs], vals[None, :]].astype(np.float32)
    right = (kset[:, chs] == vals[None, :]).T.astype(np.float32)
    return left, right


def _matcher_matrices(qc, kc, qset, params: EngineParams):
    """Pass 3 with the matcher. Returns ``(left (RB, m), right_all (m, CB), right_merged
    (m, CB), merged_slots (CB,), busy_saving (CB,))``: left @ right_all is the number of
    issued slots of every quad, left @ right_merged the issued slots with two channels.

    A slot (A, B) of column block cb is issued in row block rb iff some real row of rb has
    code HALF/NONE at A or at B: ``hn[A] + hn[B] - hn[A]*hn[B]`` (B absent: ``hn[A]``), a
    linear form in the features ``hn[c]`` and ``hn[A]*hn[B]`` of the row block.
    """
    n = qc.shape[1]
    C = params.cols
    CB = -(-kc.shape[0] // C)
    m = match(match_codes(kc, C, params.width), params.matcher())
    hn = (qset & ((1 << HALF) | (1 << NONE))) != 0                   # (RB, n)
    merged = m.b >= 0
    single = np.zeros((CB, n), np.int64)
    np.add.at(single, (m.batch[~merged], m.a[~merged]), 1)
    both = np.zeros((CB, n), np.int64)
    np.add.at(both, (m.batch[merged], m.a[merged]), 1)
    np.add.at(both, (m.batch[merged], m.b[merged]), 1)
    pid = m.a[merged] * n + m.b[merged]
    pairs, inverse = np.unique(pid, return_inverse=True)
    pa, pb = pairs // n, pairs % n
    pair_count = np.zeros((CB, pairs.size), np.int64)
    np.add.at(pair_count, (m.batch[merged], inverse.ravel()), 1)
    left = np.concatenate([hn, hn[:, pa] & hn[:, pb]], axis=1).astype(np.float32)
    right_all = np.concatenate([single + both, -pair_count], axis=1).T.astype(np.float32)
    right_merged = np.concatenate([both, -pair_count], axis=1).T.astype(np.float32)
    merged_slots = np.bincount(m.batch[merged], minlength=CB)
    # Busy PE-cycles: a NIB_AB column is one busy cycle per PE even when both lanes work,
    # where the unmerged schedule counts two: per row with HALF/NONE at A and at B.
    hn_units = ((qc == HALF) | (qc == NONE)).astype(np.int64)        # (Uq, n)
    both_rows = hn_units.T @ hn_units                                  # (n, n)
    nib_ab = (m.sel == SEL_NIB_AB).sum(axis=1)
    saving = np.bincount(m.batch[merged], weights=(nib_ab * both_rows[m.a, m.b.clip(0)])[merged],
                         minlength=CB).astype(np.int64)
    return left, right_all, right_merged, merged_slots, saving


def _chunk_run(qc, kc, params: EngineParams, matched: bool, timing: EngineTiming):
    """Per-column-block counters of one chunk, each array's time T_a in it and the steps of
    column block 0's quads (for :func:`snoop_last_read`)."""
    R, C, P = params.rows, params.cols, params.arrays
    n = qc.shape[1]
    qset = _code_sets(qc, R)                                           # (RB, n)
    kset = _code_sets(kc, C)                                           # (CB, n)
    RB, CB = qset.shape[0], kset.shape[0]
    gap = timing.gap(R, C)
    work = (DECODE[0] != Op.IDLE).astype(np.int64)                     # (4, 4, 4)
    # Busy PE-cycles per column block: code histograms of all rows x the block's columns.
    qh = np.stack([(qc == v).sum(axis=0) for v in range(4)], axis=-1)            # (n, 4)
    kpad = np.full((CB * C, n), 255, np.uint8)
    kpad[:kc.shape[0]] = kc
    kpad = kpad.reshape(CB, C, n)
    kh = np.stack([(kpad == v).sum(axis=1) for v in range(4)], axis=-1)          # (CB, n, 4)
    busy = np.einsum("nu,puv,bnv->b", qh, work, kh)
    mats = {p: _issue_matrices(qset, kset, p) for p in range(1, PASSES)
            if not (matched and p == 3)}
    if matched:
        left3, right3, right3m, merged_slots, saving = _matcher_matrices(qc, kc, qset, params)
        busy = busy - saving
    issued = np.zeros((CB, PASSES), np.int64)
    padded = np.zeros((CB, PASSES), np.int64)      # sum over quads of max(issued, R)
    merged = np.zeros(CB, np.int64)
    occupied = np.zeros(CB, np.int64)              # sum over rb of max(steps, gap)
    issued[:, 0] = n * RB
    padded[:, 0] = max(n, R) * RB
    rows_per = max(1, _BLOCK // max(CB, 1))
    last_steps = None
    cb0 = []                                       # steps of column block 0's quads
    for r0 in range(0, RB, rows_per):
        sl = slice(r0, min(r0 + rows_per, RB))
        steps = np.full((sl.stop - sl.start, CB), max(n, R), np.float32)
        for p in range(1, PASSES):
            if matched and p == 3:
                iss = left3[sl] @ right3
                merged += (left3[sl] @ right3m).sum(axis=0).astype(np.int64)
            else:
                left, right = mats[p]
                iss = left[sl] @ right
            issued[:, p] += iss.sum(axis=0).astype(np.int64)
            np.maximum(iss, R, out=iss)
            padded[:, p] += iss.sum(axis=0).astype(np.int64)
            steps += iss
        last_steps = steps[-1].astype(np.int64)
        cb0.append(steps[:, 0].astype(np.int64))
        occupied += np.maximum(steps, gap).sum(axis=0).astype(np.int64)
    skipped = n * RB - issued
    skipped[:, 0] = 0
    if matched:
        skipped[:, 3] -= merged                    # a merged slot carries two channels
    bubbles = (padded - issued).sum(axis=1)
    # T_a: gap + every quad's max(steps, gap), except that the array's last quad (last row
    # block of its last column block) occupies only its steps.
    arr = np.arange(CB) % P
    T = np.zeros(P, np.int64)
    np.add.at(T, arr, occupied)
    owners = np.arange(min(P, CB))
    last_cb = owners + P * ((CB - 1 - owners) // P)
    T[owners] += gap - np.maximum(last_steps[last_cb], gap) + last_steps[last_cb]
    per_cb = dict(busy=busy, issued=issued, skipped=skipped, merged=merged, bubbles=bubbles,
                  quads=np.full(CB, RB, np.int64))
    out = {}
    for key, v in per_cb.items():
        acc = np.zeros((P,) + v.shape[1:], np.int64)
        np.add.at(acc, arr, v)
        out[key] = acc
    return out, T, np.concatenate(cb0)


#: The axis a plain build walks its channels along (x).
PLAIN_AXIS = 2


def plain_walk(groups) -> ChannelGroups:
    """``groups`` as a plain build (``engine_pe = "plain"``) walks them: all channels in one
    group (group 0), walked along x (``docs/engine.md``, "Plain build"). Without reuse pairs
    neither the channel groups nor the walk axis matter to S: one group makes every chunk W
    consecutive channels, which a sequencer slices out of a token word instead of gathering
    them, and one axis puts a K token at the same bank and word in every chunk, so a single
    accumulation plane serves the run. The work does not depend on it; the cycles do a
    little (fewer, fuller chunks; no padding units where a group's own axis has an odd
    extent)."""
    g = _as_groups(groups)
    return ChannelGroups(np.zeros_like(g.group_of), (PLAIN_AXIS,) * 3, g.name)


def engine_counters(q, k, grid, groups, params: EngineParams = EngineParams(),
                    variant: str = "full", full_bits: int = 5, half_bits: int = 3,
                    timing: EngineTiming | None = None, progress=None,
                    natural=None, *, linear: bool = False) -> EngineCounters:
    """Every counter of one engine run, cycle-exact per ``docs/engine.md``.

    Vectorized: per chunk and pass, the issued channel count of every quad (rb, cb) is a sum
    over channels of ``SET_WORK[p][row code set, column code set]``, one float32 matrix
    product (exact: small integers); with the matcher, pass 3 runs the MergeMatcher once for
    all column blocks of the chunk and counts each quad's issued slots as a matrix product
    over the row block's HALF/NONE channel features and their pairwise products. Per-array
    sums go by ``cb mod P``; the chunk times follow the Timing section.

    ``progress``: optional callable ``progress(done_chunks, total_chunks)``. ``natural``:
    None (the chunks that fall back follow from the timing, :class:`ChunkTimeline`) or the
    fallbacks observed in a run whose timing the model does not follow (stall injection).
    ``linear``: the run computes a linear block (:func:`kaleido_engine`).
    """
    timing = timing or EngineTiming()
    q, k, grid, groups, (reuse, sched, matched) = _check_inputs(
        q, k, grid, groups, variant, full_bits, half_bits)
    grid, plans = _plans(q, k, grid, groups, full_bits, half_bits, reuse, linear)
    chunk_list = chunks(groups, params.width)
    tl = ChunkTimeline(plans, chunk_list, params, sched, timing, natural)
    by_group = {pl.group: pl for pl in plans}
    P, R, C = params.arrays, params.rows, params.cols
    acc = {key: np.zeros(shape, np.int64) for key, shape in (
        ("busy", (P,)), ("issued", (P, PASSES)), ("skipped", (P, PASSES)), ("merged", (P,)),
        ("bubbles", (P,)), ("quads", (P,)))}
    for i, ch in enumerate(chunk_list):
        order = tl.next(ch)
        pl = by_group[ch.group]
        qc = pl.qc[order.q][:, ch.local]
        kc = pl.kc[order.k][:, ch.local]
        per, T, cb0 = _chunk_run(qc, kc, params, matched, timing)
        for key in acc:
            acc[key] += per[key]
        tl.ran(T.max(), cb0)
        if progress is not None:
            progress(i + 1, len(chunk_list))
    end = tl.end
    cycles = end + 1 + timing.tail_base + R + C
    steps = acc["issued"].sum(axis=1) + acc["bubbles"]
    return EngineCounters(cycles, len(chunk_list), acc["busy"], acc["issued"], acc["skipped"],
                          acc["merged"], acc["bubbles"], acc["quads"], cycles - steps,
                          np.asarray(tl.starts, np.int64), np.asarray(tl.lengths, np.int64),
                          tuple(tl.fallbacks))
