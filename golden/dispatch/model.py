"""Golden model of the data dispatcher: ClusterScheduler and MergeMatcher (``docs/dispatch.md``).

Both blocks are modelled exactly: same LFSR, same pivot rule, same assignment order and tie
rules, same greedy matching, same slot encoding, and the same cycle timing as the RTL when the
output is never stalled. Plain numpy; every batch-level loop is vectorized across batches, so
the model is fast enough for a paper-scale cycle model (tens of thousands of batches/second).

Scheduler API
    ``SchedulerParams``           entries E, pattern width W, clusters K, LFSR seed, id width
    ``schedule(patterns, p)``     -> ``ScheduleResult`` (assignment, output order, pivots, state)
    ``scheduler_output_cycles``   handshake cycle of every output entry, given the cycle of the
                                  last input handshake of each batch (output never stalled)
    ``lfsr_advance``, ``draw_pivot_offsets``   the pivot-selection LFSR
    ``patterns_from_codes``       reuse codes (N, d) -> pattern strings (N, d // W)

Matcher API
    ``MatcherParams``             columns C, channels M, lookahead L, id width
    ``match(codes, p)``           codes (B, C, M) -> ``MatchResult`` (the slot sequence)
    ``matcher_slot_cycles``       handshake cycle of every slot, given when batches are offered
    ``work_units``                codes -> work units (FULL 0, HALF 1, NONE 2)

Cycle convention: cycle ``c`` is the clock period that ends with rising edge ``c``; a handshake
"at cycle c" is one sampled (valid and ready high) by that edge.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


__all__ = [
    "FULL", "HALF", "NONE", "WORK_UNITS",
    "SEL_NONE", "SEL_BYTE_A", "SEL_BYTE_B", "SEL_NIB_A", "SEL_NIB_B", "SEL_NIB_AB", "SEL_NAMES",
    "LFSR_WIDTH", "LFSR_TAPS", "lfsr_step", "lfsr_advance", "draw_pivot_offsets",
    "SchedulerParams", "ScheduleResult", "schedule", "scheduler_output_cycles",
    "scheduler_first_out_latency", "patterns_from_codes", "popcount",
    "MatcherParams", "MatchResult", "match", "work_units", "slot_select",
    "matcher_slot_cycles",
]

# -- reuse codes and work units ---------------------------------------------------------------

#: Reuse codes of the numerics contract: FULL (no work), HALF (low nibble), NONE (full byte).
FULL, HALF, NONE = 0, 1, 2
#: Work units of each code: a column port carries 8 bits = 2 units per cycle.
WORK_UNITS = np.array([0, 1, 2], dtype=np.uint8)

#: Per-column select of a matcher slot (3 bits): what the column consumes in this cycle.
SEL_NONE, SEL_BYTE_A, SEL_BYTE_B, SEL_NIB_A, SEL_NIB_B, SEL_NIB_AB = range(6)
SEL_NAMES = ("none", "byte A", "byte B", "nibble A", "nibble B", "nibbles A+B")
# _SEL_TABLE[work(A), work(B)]; 255 marks pairs whose sum exceeds the port (never emitted).
_SEL_TABLE = np.array([[SEL_NONE, SEL_NIB_B, SEL_BYTE_B],
                       [SEL_NIB_A, SEL_NIB_AB, 255],
                       [SEL_BYTE_A, 255, 255]], dtype=np.uint8)

# -- pivot-selection LFSR ---------------------------------------------------------------------

#: 16-bit Fibonacci LFSR, polynomial x^16 + x^14 + x^13 + x^11 + 1 (maximal, period 65535).
#: One step: ``fb = s[0] ^ s[2] ^ s[3] ^ s[5]; s = (s >> 1) | (fb << 15)``.
LFSR_WIDTH = 16
LFSR_TAPS = (0, 2, 3, 5)
_LFSR_MASK = (1 << LFSR_WIDTH) - 1


def lfsr_step(state):
    """One LFSR step; works on ints and on integer numpy arrays alike."""
    fb = (state ^ (state >> 2) ^ (state >> 3) ^ (state >> 5)) & 1
    return (state >> 1) | (fb << 15)


def lfsr_advance(state, steps: int):
    """The state ``steps`` steps after ``state`` (int or integer array)."""
    for _ in range(steps):
        state = lfsr_step(state)
    return state


_ADV16_TABLE: np.ndarray | None = None


def _adv16_table() -> np.ndarray:
    """State -> state 16 steps later, for all 65536 states (built once, vectorized)."""
    global _ADV16_TABLE
    if _ADV16_TABLE is None:
        _ADV16_TABLE = lfsr_advance(np.arange(1 << LFSR_WIDTH, dtype=np.uint32), 16)
    return _ADV16_TABLE


def draw_pivot_offsets(state: int, clusters: int, capacity: int, batches: int = 1):
    """Pivot offsets of ``batches`` consecutive batches, and the LFSR state after them.

    For each batch and each cluster ``k`` in order, the LFSR advances 16 steps to a fresh
    16-bit word ``s``; the offset is ``r = (s * capacity) >> 16`` (in ``[0, capacity)``) and
    the pivot of cluster ``k`` is the batch's entry ``k * capacity + r`` (one pivot per
    stratum of ``capacity`` consecutive arrivals, so pivots are always distinct entries).
    Returns ``(offsets (batches, clusters) int64, new_state)``.
    """
    if not 1 <= int(state) <= _LFSR_MASK:
        raise ValueError(f"LFSR state must be in [1, 0xFFFF], got {state!r}")
    table = _adv16_table()
    words = np.empty(batches * clusters, dtype=np.int64)
    s = int(state)
    for n in range(batches * clusters):
        s = int(table[s])
        words[n] = s
    offsets = (words * int(capacity)) >> LFSR_WIDTH
    return offsets.reshape(batches, clusters), s


# -- ClusterScheduler -------------------------------------------------------------------------

def _keys(config):
    return config.__getitem__ if isinstance(config, dict) else (lambda k: getattr(config, k))


def _check_int(name, value, lo, hi):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
        raise ValueError(f"{name} must be an integer in [{lo}, {hi}], got {value!r}")


@dataclass(frozen=True)
class SchedulerParams:
    """Parameters of the ClusterScheduler (mirror of the ``sched_*`` configuration keys).

    entries : int        E, entries per batch (the string queue)
    pattern_width : int  W, bits per pattern string (channels of one batch)
    clusters : int       K, cluster queues; must divide E; capacity Q = E / K
    seed : int           non-zero 16-bit LFSR seed (the state after reset)
    token_id_width : int bits of the token id carried with every entry
    """
    entries: int = 64
    pattern_width: int = 16
    clusters: int = 4
    seed: int = 0xACE1
    token_id_width: int = 17

    def __post_init__(self):
        _check_int("entries", self.entries, 1, 1 << 16)
        _check_int("pattern_width", self.pattern_width, 1, 64)
        _check_int("clusters", self.clusters, 1, self.entries)
        if self.entries % self.clusters:
            raise ValueError(f"clusters must divide entries ({self.entries}), got {self.clusters}")
        _check_int("seed", self.seed, 1, _LFSR_MASK)
        _check_int("token_id_width", self.token_id_width, 1, 64)

    @property
    def capacity(self) -> int:
        """Entries per cluster queue, Q = E / K."""
        return self.entries // self.clusters

    @classmethod
    def from_config(cls, config) -> "SchedulerParams":
        """From a ``KaleidoConfig``, or a dict with its keys (e.g. a manifest's config)."""
        c = _keys(config)
        return cls(c("sched_entries"), c("sched_pattern_width"), c("sched_clusters"),
                   c("sched_lfsr_seed"), c("token_id_width"))


@dataclass
class ScheduleResult:
    """What the scheduler does with ``B`` batches (arrays indexed [batch, ...]).

    pivots : (B, K)    arrival index of each cluster's pivot within its batch
    cluster : (B, E)   cluster each arrival is assigned to
    position : (B, E)  its position in that cluster queue (assignment order)
    order : (B, E)     arrival index of each output entry; output is cluster 0's queue, then
                       cluster 1's, ...; each queue in assignment (= arrival) order
    distances : (B, E, K) Hamming distance of every arrival to every pivot
    state : int        LFSR state after the batches (pass it on to continue a stream)
    """
    params: SchedulerParams
    pivots: np.ndarray
    cluster: np.ndarray
    position: np.ndarray
    order: np.ndarray
    distances: np.ndarray
    state: int

    @property
    def out_cluster(self) -> np.ndarray:
        """(B, E) cluster index of each output entry (k repeated Q times, k ascending)."""
        p = self.params
        return np.broadcast_to(np.repeat(np.arange(p.clusters), p.capacity),
                               self.order.shape).copy()

    @property
    def out_last(self) -> np.ndarray:
        """(B, E) True on the last entry of each cluster queue."""
        p = self.params
        last = (np.arange(p.entries) % p.capacity) == p.capacity - 1
        return np.broadcast_to(last, self.order.shape).copy()

    def output(self, token_ids, patterns) -> list[tuple[int, int, int, bool]]:
        """The output stream as ``(token_id, pattern, cluster, last)`` tuples, in order."""
        ids = np.asarray(token_ids).reshape(self.order.shape)
        pats = np.asarray(patterns).reshape(self.order.shape)
        rows = np.arange(self.order.shape[0])[:, None]
        oid, opat = ids[rows, self.order], pats[rows, self.order]
        return [(int(a), int(b), int(c), bool(d)) for a, b, c, d in zip(
            oid.ravel(), opat.ravel(), self.out_cluster.ravel(), self.out_last.ravel())]


def popcount(x: np.ndarray) -> np.ndarray:
    """Bits set in each element of an unsigned integer array (up to 64 bits)."""
    x = np.asarray(x, dtype=np.uint64)
    count = np.zeros(x.shape, dtype=np.int64)
    for shift in range(0, 64, 8):
        count += _POP8[((x >> np.uint64(shift)) & np.uint64(0xFF)).astype(np.intp)]
    return count


_POP8 = np.array([bin(i).count("1") for i in range(256)], dtype=np.int64)


def schedule(patterns, params: SchedulerParams = SchedulerParams(), state: int | None = None
             ) -> ScheduleResult:
    """Cluster a stream of pattern strings, batch by batch, exactly as the RTL does.

    ``patterns``: integers < 2**W, length a multiple of E (arrival order); or shape (B, E).
    ``state``: the LFSR state before the first batch (default: the seed, i.e. after reset).

    Per batch: pivots are drawn (``draw_pivot_offsets``); every arrival, in arrival order,
    goes to the non-full cluster with the smallest (Hamming distance to its pivot, cluster
    index); a cluster is full at Q entries. Since K * Q = E, every queue ends exactly full.
    """
    p = params
    pats = np.asarray(patterns)
    if pats.size % p.entries:
        raise ValueError(f"number of patterns must be a multiple of entries ({p.entries}), "
                         f"got {pats.size}")
    if pats.size and (pats.min() < 0 or int(pats.max()) >> p.pattern_width):
        raise ValueError(f"patterns must be integers in [0, 2**{p.pattern_width}), "
                         f"got values in [{pats.min()}, {pats.max()}]")
    pats = pats.astype(np.uint64).reshape(-1, p.entries)
    nb, E, K, Q = pats.shape[0], p.entries, p.clusters, p.capacity
    offsets, new_state = draw_pivot_offsets(p.seed if state is None else state, K, Q, nb)
    pivots = np.arange(K)[None, :] * Q + offsets
    rows = np.arange(nb)[:, None]
    pivot_pat = pats[rows, pivots]                                    # (B, K)
    dist = popcount(pats[:, :, None] ^ pivot_pat[:, None, :])         # (B, E, K)
    cluster = np.empty((nb, E), dtype=np.int64)
    position = np.empty((nb, E), dtype=np.int64)
    count = np.zeros((nb, K), dtype=np.int64)
    r = np.arange(nb)
    for i in range(E):
        # A full queue's key exceeds every distance; argmin takes the lowest index on ties.
        key = dist[:, i, :] + np.where(count >= Q, p.pattern_width + 1, 0)
        k = np.argmin(key, axis=1)
        cluster[:, i] = k
        position[:, i] = count[r, k]
        count[r, k] += 1
    order = np.empty((nb, E), dtype=np.int64)
    order[rows, cluster * Q + position] = np.arange(E)[None, :]
    return ScheduleResult(p, pivots, cluster, position, order, dist, new_state)


#: Cycles from the last input handshake of a batch to its first output handshake is E + 5:
#: 1 (batch-complete flag), E (one read per entry), 1 (read-data register), 1 (distance
#: stage), 1 (assign/write stage), 1 (drain read into the output register).
def scheduler_first_out_latency(params: SchedulerParams) -> int:
    """Cycles from a batch's last input handshake to its first output (E + 5)."""
    return params.entries + 5


def scheduler_output_cycles(last_input_cycles, params: SchedulerParams) -> np.ndarray:
    """(B, E) handshake cycle of every output entry when the output is never stalled.

    ``last_input_cycles[n]``: cycle of the last input handshake of batch ``n``. Inputs
    are in order; when the output is always ready the input is never refused, and batch n's
    entry j (output order) leaves at ``last_input_cycles[n] + E + 5 + j``: the output is one
    entry per cycle and back-to-back batches (one input per cycle) stream without a gap.
    """
    last = np.asarray(last_input_cycles, dtype=np.int64).reshape(-1, 1)
    if last.size > 1 and np.any(np.diff(last[:, 0]) < params.entries):
        raise ValueError("last_input_cycles must grow by at least entries per batch "
                         "(one input per cycle at most)")
    return last + scheduler_first_out_latency(params) + np.arange(params.entries)[None, :]


def patterns_from_codes(codes, width: int) -> np.ndarray:
    """Reuse codes (N, d) -> pattern strings (N, d // width) as uint64.

    Pattern ``g`` of token ``n`` covers channels ``g*width .. g*width + width-1``; bit ``j``
    is 1 when channel ``g*width + j`` has work (HALF or NONE), 0 when FULL.
    """
    codes = np.asarray(codes)
    if codes.ndim != 2:
        raise ValueError(f"codes must have shape (N, d), got {codes.shape}")
    n, d = codes.shape
    if d % width:
        raise ValueError(f"channel count d ({d}) must be a multiple of the pattern width {width}")
    if width > 64:
        raise ValueError(f"pattern width must be at most 64, got {width}")
    bits = (codes != FULL).reshape(n, d // width, width).astype(np.uint64)
    weights = np.uint64(1) << np.arange(width, dtype=np.uint64)
    return (bits * weights).sum(axis=2, dtype=np.uint64)


# -- MergeMatcher -----------------------------------------------------------------------------

@dataclass(frozen=True)
class MatcherParams:
    """Parameters of the MergeMatcher.

    cols : int           C, tokens per batch (the PE array's columns)
    channels : int       M, channels of one batch (``matcher_channels``)
    lookahead : int      L, pending channels visible to the greedy match (1 = never merge)
    token_id_width : int bits of each token id carried with every slot
    """
    cols: int = 4
    channels: int = 16
    lookahead: int = 4
    token_id_width: int = 17

    def __post_init__(self):
        _check_int("cols", self.cols, 1, 64)
        _check_int("channels", self.channels, 1, 1024)
        _check_int("lookahead", self.lookahead, 1, 1024)
        _check_int("token_id_width", self.token_id_width, 1, 64)

    @classmethod
    def from_config(cls, config) -> "MatcherParams":
        """From a ``KaleidoConfig``, or a dict with its keys (e.g. a manifest's config)."""
        c = _keys(config)
        return cls(c("cols"), c("matcher_channels"), c("matcher_lookahead"),
                   c("token_id_width"))


@dataclass
class MatchResult:
    """The slot sequence of ``B`` batches (slot arrays in issue order, batch by batch).

    batch : (S,)    batch index of each slot
    a : (S,)        channel A (always present)
    b : (S,)        channel B, -1 when the slot issues A alone
    sel : (S, C)    per-column select (``SEL_*``)
    first, last : (S,) first / last slot of its batch
    slots : (B,)    slots per batch (0 for a batch without work)
    """
    params: MatcherParams
    batch: np.ndarray
    a: np.ndarray
    b: np.ndarray
    sel: np.ndarray
    first: np.ndarray
    last: np.ndarray
    slots: np.ndarray

    @property
    def merged(self) -> np.ndarray:
        """Per slot: True when it carries two channels (``b >= 0``)."""
        return self.b >= 0

    def as_tuples(self) -> list[tuple]:
        """``(batch, a, b, merged, sel tuple, first, last)`` per slot (b is 0 when unmerged,
        as on the RTL port)."""
        return [(int(n), int(a), int(max(b, 0)), bool(b >= 0), tuple(int(x) for x in s),
                 bool(f), bool(l)) for n, a, b, s, f, l in zip(
                     self.batch, self.a, self.b, self.sel, self.first, self.last)]


def work_units(codes) -> np.ndarray:
    """Codes (any shape) -> work units; rejects anything but FULL/HALF/NONE."""
    codes = np.asarray(codes)
    if codes.size and (codes.min() < 0 or codes.max() > NONE):
        raise ValueError(f"reuse codes must be 0 (FULL), 1 (HALF) or 2 (NONE), got values in "
                         f"[{codes.min()}, {codes.max()}]")
    return WORK_UNITS[codes.astype(np.intp)]


def slot_select(work_a, work_b) -> np.ndarray:
    """Per-column select from the work units of A and B (B = 0 when unmerged)."""
    sel = _SEL_TABLE[np.asarray(work_a, np.intp), np.asarray(work_b, np.intp)]
    if np.any(sel == 255):
        raise ValueError("a column would carry more than 2 work units")
    return sel


def match(codes, params: MatcherParams = MatcherParams()) -> MatchResult:
    """Greedy channel merging of batches of C tokens, exactly as the RTL does.

    ``codes``: (B, C, M) or (C, M) reuse codes; ``codes[n, c, m]`` is token c's channel m.

    Per batch, the live channels are those with work in some column (all-FULL channels are
    dropped). While any is live: A = the lowest live channel; the pending buffer is A and the
    next L-1 live channels; B = the first of those with work(A) + work(B) <= 2 in every
    column. The slot issues A with B if found, else A alone; both stop being live.
    """
    p = params
    codes = np.asarray(codes)
    if codes.ndim == 2:
        codes = codes[None]
    if codes.ndim != 3 or codes.shape[1:] != (p.cols, p.channels):
        raise ValueError(f"codes must have shape (B, {p.cols}, {p.channels}) "
                         f"(batches, cols, channels), got {codes.shape}")
    w = work_units(codes)                                     # (B, C, M)
    nb, C, M = w.shape
    live = w.any(axis=1)                                      # (B, M)
    idx = np.arange(M)[None, :]
    rows = np.arange(nb)
    steps_a, steps_b, steps_sel, steps_act = [], [], [], []
    while live.any():
        act = live.any(axis=1)
        a = np.argmax(live, axis=1)
        wa = w[rows, :, a]                                    # (B, C)
        compat = np.all(wa[:, :, None] + w <= 2, axis=1)      # (B, M)
        above = idx > a[:, None]
        cand = live & compat & above
        has = cand.any(axis=1)
        b = np.argmax(cand, axis=1)
        between = (live & above & (idx < b[:, None])).sum(axis=1)
        merge = act & has & (between <= p.lookahead - 2)
        wb = np.where(merge[:, None], w[rows, :, b], 0)
        sel = _SEL_TABLE[wa.astype(np.intp), wb.astype(np.intp)]
        steps_a.append(a)
        steps_b.append(np.where(merge, b, -1))
        steps_sel.append(sel)
        steps_act.append(act)
        live[rows[act], a[act]] = False
        live[rows[merge], b[merge]] = False
    if steps_act:
        act = np.stack(steps_act, axis=1)                     # (B, steps), row-major = issue order
        bi, si = np.nonzero(act)
        a_arr = np.stack(steps_a, axis=1)[bi, si]
        b_arr = np.stack(steps_b, axis=1)[bi, si]
        sel_arr = np.stack(steps_sel, axis=1)[bi, si]
        slots = act.sum(axis=1)
    else:
        bi = si = a_arr = b_arr = np.zeros(0, dtype=np.int64)
        sel_arr = np.zeros((0, C), dtype=np.uint8)
        slots = np.zeros(nb, dtype=np.int64)
    first = si == 0
    last = si == slots[bi] - 1
    return MatchResult(p, bi.astype(np.int64), a_arr.astype(np.int64), b_arr.astype(np.int64),
                       sel_arr.astype(np.uint8), first, last, slots.astype(np.int64))


def matcher_slot_cycles(offer_cycles, slots) -> tuple[np.ndarray, np.ndarray]:
    """Accept cycle of every batch and handshake cycle of every slot, output never stalled.

    ``offer_cycles[n]``: first cycle in which batch n is valid at the input (non-decreasing);
    ``slots[n]``: its slot count. A batch is accepted when offered and the previous one has
    issued its last slot (or, for a batch without work, one cycle after it was accepted):
    ``accept[n] = max(offer[n], accept[n-1] + max(slots[n-1], 1))``; its slot j leaves at
    ``accept[n] + 1 + j``. Returns ``(accept (B,), slot_cycles (S,))``.
    """
    offer = np.asarray(offer_cycles, dtype=np.int64)
    slots = np.asarray(slots, dtype=np.int64)
    if offer.shape != slots.shape:
        raise ValueError(f"offer_cycles and slots must have the same shape, got "
                         f"{offer.shape} and {slots.shape}")
    # Max-plus scan: with d = max(slots, 1) and D[n] = sum(d[:n]),
    # accept[n] = D[n] + max over m <= n of (offer[m] - D[m]).
    busy = np.concatenate([[0], np.cumsum(np.maximum(slots, 1))[:-1]]) if slots.size else slots
    accept = busy + np.maximum.accumulate(offer - busy) if slots.size else offer.copy()
    starts = np.repeat(accept + 1, slots)
    within = np.arange(int(slots.sum())) - np.repeat(np.cumsum(slots) - slots, slots)
    return accept, starts + within
