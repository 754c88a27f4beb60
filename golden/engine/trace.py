"""Dispatcher traces of a KaleidoEngine run and the invariants the engine benches check on
the RTL's (``docs/engine.md``, "Back-pressure").

What the benches watch (through the probe signals of ``OrderUnit`` and ``SlotUnit``):

* per side (Q, K), per chunk with the scheduler: the units entering the OrderUnit and the
  order it writes; the order must be a permutation of the chunk's units (no unit lost or
  duplicated, dummies excluded) and equal :func:`golden.engine.model.orders` (a snooping
  pre-pass, ``sched_sides = "q"``, numbers the units by their positions in the chunk
  before's row order); a pre-pass the
  engine dropped (its chunk fell back to natural order) must be one the model drops too
  (``EngineCounters.fallbacks``);
* per array, per (chunk, column block) with the matcher: the block's pass-3 classes entering
  the SlotUnit and the matcher's slots; the slots must cover every channel with work in the
  block exactly once, merge only compatible channels (at most 2 work units per column) with
  the select of :func:`golden.dispatch.model.slot_select`, and equal :func:`golden.dispatch.model.match`.

Plain Python and numpy; the benches decode the probe values into the records below.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from golden.array.schedule import _plans
from golden.dispatch.model import match, slot_select, work_units
from golden.engine.model import (EngineParams, _orders, chunks, engine_counters, match_codes,
                                 snoops, variant_flags)
from golden.numerics import _as_groups


__all__ = ["ExpectedTrace", "expected_trace", "OrderTrace", "SlotTrace", "check_order",
           "check_slots", "check_trace", "check_counters", "decode_block", "decode_sel",
           "observed_fallbacks",
           "SEL_BITS", "TIME_COUNTERS"]

#: Per-array counters that measure time (they may grow under stall injection).
TIME_COUNTERS = ("idle", "stall")

#: Bits of one column's select on the matcher's port (``kaleido_hw.dispatch.layouts.Sel``).
SEL_BITS = 3


def decode_block(value: int, cols: int, width: int) -> np.ndarray:
    """The SlotUnit's block probe (``codes[c][m]``, 2 bits each, c major) as (C, W) classes."""
    v = int(value)
    return np.array([[(v >> (2 * (c * width + j))) & 3 for j in range(width)]
                     for c in range(cols)], np.uint8)


def decode_sel(value: int, cols: int) -> tuple:
    """The matcher slot's ``sel`` probe (``SEL_BITS`` per column, column 0 lowest)."""
    mask = (1 << SEL_BITS) - 1
    return tuple((int(value) >> (SEL_BITS * c)) & mask for c in range(cols))


@dataclass
class ExpectedTrace:
    """What the dispatcher must produce in one run.

    ``units[k]``: units of chunk k; ``orders[side][i]``: the order of the i-th chunk that
    passes through the schedulers (side "q", and "k" with ``sched_sides = "qk"``; empty lists
    without the scheduler), chunk
    ``ordered[i]`` (every chunk but the first, which runs in natural order, and the
    ``fallbacks``, whose pre-pass was dropped); ``blocks[a]``: per array a, the (C, W) pass-3
    classes of each (chunk, column block) it walks, in walk order (empty without the
    matcher); ``slots[a]``: the matcher's slots for each of those blocks, as
    ``(a, b, merged, sel tuple)`` (b = 0 when unmerged)."""
    units: list
    orders: dict
    blocks: dict
    slots: dict
    ordered: list = field(default_factory=list)
    fallbacks: tuple = ()


def expected_trace(q, k, grid, groups, params: EngineParams, variant: str,
                   full_bits: int = 5, half_bits: int = 3, natural=None) -> ExpectedTrace:
    """The dispatcher trace of one run from the golden model (same chunks, orders, column
    blocks and matcher as :func:`golden.engine.model.engine_counters`). ``natural``: the
    fallbacks (None: the model's, ``engine_counters(...).fallbacks``; under stall injection
    the run's own, which the model's timing cannot predict)."""
    reuse, sched, matched = variant_flags(variant)
    groups = _as_groups(groups)
    if natural is None:
        natural = engine_counters(q, k, grid, groups, params, variant, full_bits,
                                  half_bits).fallbacks
    natural = tuple(sorted(int(c) for c in natural))
    grid, plans = _plans(q, k, grid, groups, full_bits, half_bits, reuse)
    chunk_list = chunks(groups, params.width)
    ords = _orders(plans, chunk_list, params, sched, natural)
    snoop = snoops(params)
    by_group = {pl.group: pl for pl in plans}
    P, C = params.arrays, params.cols
    units, orders, ordered = [], {"q": [], "k": []}, []
    blocks = {a: [] for a in range(P)}
    slots = {a: [] for a in range(P)}
    for c, (ch, od) in enumerate(zip(chunk_list, ords)):
        pl = by_group[ch.group]
        units.append(int(pl.anchors.size))
        if sched and c > 0 and c not in natural:
            ordered.append(c)
            # A snooping pre-pass numbers the units by their positions in the chunk before.
            q_in = ords[c - 1].inv_q[od.q] if snoop else od.q
            orders["q"].append([int(u) for u in q_in])
            if params.sched_sides == "qk":          # else K keeps its natural order
                orders["k"].append([int(u) for u in od.k])
        if not matched:
            continue
        kc = pl.kc[:, ch.local][od.k]
        cls = match_codes(kc, C, params.width)               # (CB, C, W)
        for cb in range(cls.shape[0]):
            a = cb % P
            blocks[a].append(cls[cb])
            r = match(cls[cb], params.matcher())
            slots[a].append([(int(x), int(max(y, 0)), bool(y >= 0), tuple(int(s) for s in sel))
                             for x, y, sel in zip(r.a, r.b, r.sel)])
    return ExpectedTrace(units, orders, blocks, slots, ordered, natural if sched else ())


@dataclass
class OrderTrace:
    """Observed OrderUnit traffic of one side: ``inputs`` / ``outputs`` per completed chunk
    (units in handshake order), ``input_cycles`` (per chunk, the cycle of each input
    handshake, when the recorder gives it), ``ends`` (per pre-pass, in run order: "order"
    when it completed, "abort" when the engine dropped it), ``replaced`` (aborts that found
    the dropped chunk's order already complete) and the chunk being collected."""
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    input_cycles: list = field(default_factory=list)
    ends: list = field(default_factory=list)
    replaced: int = 0
    _in: list = field(default_factory=list)
    _out: list = field(default_factory=list)
    _in_cycles: list = field(default_factory=list)

    def unit_in(self, unit: int, last: bool, cycle: int | None = None):
        """A unit handed to the OrderUnit (``last``: the chunk's last unit) in ``cycle``."""
        self._in.append(int(unit))
        if cycle is not None:
            self._in_cycles.append(int(cycle))
        if last:
            self.inputs.append(self._in)
            self.input_cycles.append(self._in_cycles)
            self._in, self._in_cycles = [], []

    def unit_out(self, unit: int | None, complete: bool):
        """A real unit written to the order (``None``: only ``complete`` this cycle)."""
        if unit is not None:
            self._out.append(int(unit))
        if complete:
            self.outputs.append(self._out)
            self._out = []
            self.ends.append("order")

    def abort(self, replaced: bool = False):
        """The OrderUnit dropped the newest chunk (the engine ran it in natural order):
        still in progress, or, ``replaced``, with its order already complete."""
        if replaced:                                     # its order is no order of the run
            self.outputs.pop()
            self.ends.pop()
            self.replaced += 1
        if len(self.inputs) > len(self.outputs):        # every unit was in already
            self.inputs.pop()
            self.input_cycles.pop()
        self._in, self._in_cycles, self._out = [], [], []
        self.ends.append("abort")

    @property
    def fallbacks(self) -> tuple:
        """The chunks that fell back: pre-pass i orders chunk i + 1 (chunk 0 has none)."""
        return tuple(i + 1 for i, end in enumerate(self.ends) if end == "abort")


@dataclass
class SlotTrace:
    """Observed SlotUnit traffic of one array: the blocks it accepted (``(C, W)`` classes)
    and, per block with work, the matcher's slots ``(a, b, merged, sel tuple)``."""
    blocks: list = field(default_factory=list)
    slots: list = field(default_factory=list)
    _pending: list = field(default_factory=list)

    def block(self, codes):
        """A block accepted by the SlotUnit (blocks without work get an empty slot list)."""
        codes = np.asarray(codes)
        self.blocks.append(codes)
        self.slots.append([])
        if codes.any():
            self._pending.append(len(self.slots) - 1)

    def slot(self, a: int, b: int, merged: bool, sel, last: bool):
        """A slot leaving the matcher (for the oldest block with work still matching)."""
        assert self._pending, "matcher slot with no block in the matcher"
        self.slots[self._pending[0]].append((int(a), int(b) if merged else 0, bool(merged),
                                             tuple(int(s) for s in sel)))
        if last:
            self._pending.pop(0)


def observed_fallbacks(orders: dict):
    """The chunks a run fell back on, from its OrderTraces (side -> OrderTrace; every side
    drops the same pre-passes); None without the scheduler."""
    falls = {tr.fallbacks for tr in orders.values()}
    assert len(falls) <= 1, f"the sides fell back on different chunks: {falls}"
    return falls.pop() if falls else None


def check_order(units: int, order, label: str = ""):
    """An order of a chunk of ``units`` units must be a permutation of 0 .. units-1."""
    order = list(order)
    seen = set(order)
    lost = sorted(set(range(units)) - seen)
    extra = sorted(u for u in seen if not 0 <= u < units)
    dups = sorted({u for u in order if order.count(u) > 1})
    assert not (lost or extra or dups) and len(order) == units, (
        f"{label}: order of {units} units is not a permutation: lost {lost}, duplicated "
        f"{dups}, out of range {extra}")


def check_slots(codes, slots, label: str = ""):
    """Slots of one block ((C, W) pass-3 classes): every channel with work in some column is
    covered exactly once, no channel without work is, a merged slot pairs two channels whose
    work fits every column port (work(A) + work(B) <= 2) and each select is that of
    ``slot_select``."""
    w = work_units(np.asarray(codes))                       # (C, W)
    need = set(np.flatnonzero(w.any(axis=0)).tolist())
    covered = []
    for a, b, merged, sel in slots:
        covered += [a, b] if merged else [a]
        if merged:
            assert a != b and np.all(w[:, a] + w[:, b] <= 2), (
                f"{label}: slot merges incompatible channels {a} and {b}")
        want = slot_select(w[:, a], w[:, b] if merged else np.zeros_like(w[:, a]))
        assert tuple(int(s) for s in want) == tuple(sel), (
            f"{label}: slot ({a}, {b}) has select {sel}, expected {tuple(want)}")
    dups = sorted({c for c in covered if covered.count(c) > 1})
    assert not dups, f"{label}: channels {dups} issued more than once"
    assert set(covered) == need, (f"{label}: channels with work {sorted(need)}, "
                                  f"slots cover {sorted(set(covered))}")


def check_trace(expected: ExpectedTrace, orders: dict, slots: dict, label: str = ""):
    """Every invariant on an observed run: ``orders`` = {"q": OrderTrace, "k": ...} (with the
    scheduler) and ``slots`` = {array: SlotTrace} (with the matcher). Returns a summary
    (chunks ordered, chunks fallen back, fallbacks that replaced a complete order, blocks
    and slots checked)."""
    summary = {"orders": 0, "blocks": 0, "slots": 0, "fallbacks": len(expected.fallbacks),
               "replaced": sum(tr.replaced for tr in orders.values())}
    for side, tr in orders.items():
        assert tr.fallbacks == tuple(expected.fallbacks), (
            f"{label}: {side} side: chunks {tr.fallbacks} fell back to natural order, "
            f"model {tuple(expected.fallbacks)}")
        want = expected.orders[side]
        assert len(tr.inputs) == len(want) and len(tr.outputs) == len(want), (
            f"{label}: {side} side: {len(tr.inputs)} chunks in, {len(tr.outputs)} orders out, "
            f"expected {len(want)}")
        for c, got_in, got_out, order in zip(expected.ordered, tr.inputs, tr.outputs, want):
            U = expected.units[c]
            assert got_in == list(range(U)), (
                f"{label}: {side} chunk {c}: units entered {got_in}, expected 0..{U - 1}")
            check_order(U, got_out, f"{label}: {side} chunk {c}")
            assert got_out == order, f"{label}: {side} chunk {c}: order {got_out}, model {order}"
            summary["orders"] += 1
    for a, tr in slots.items():
        want_b, want_s = expected.blocks[a], expected.slots[a]
        assert len(tr.blocks) == len(want_b), (
            f"{label}: array {a}: {len(tr.blocks)} blocks matched, expected {len(want_b)}")
        for n, (codes, got, wcodes, wslots) in enumerate(zip(tr.blocks, tr.slots, want_b,
                                                             want_s)):
            assert np.array_equal(codes, wcodes), f"{label}: array {a} block {n}: classes differ"
            check_slots(codes, got, f"{label}: array {a} block {n}")
            assert got == wslots, f"{label}: array {a} block {n}: slots {got}, model {wslots}"
            summary["blocks"] += 1
            summary["slots"] += len(got)
    return summary


def check_counters(got: dict, want: dict, arrays: int, injected: bool, label: str = ""):
    """The RTL's counters (``cycles``, ``chunks``, ``a<k>__<name>``) against the cycle
    model's. Without stall injection every one must be equal (``stall`` is 0 in the model).
    With it, the work counters (issued, skipped, merged, bubbles, quads, busy PE-cycles,
    chunks) must be equal, ``cycles`` at least the model's, and per array every cycle must
    be a step, idle or stalled: ``idle + stall = cycles - issued - bubbles``."""
    if not injected:
        diff = {key: (got[key], want[key]) for key in want if got[key] != want[key]}
        assert not diff, f"{label}: counters differ (rtl, model): {diff}"
        return
    timing = {"cycles"} | {f"a{a}__{n}" for a in range(arrays) for n in TIME_COUNTERS}
    diff = {key: (got[key], want[key]) for key in want
            if key not in timing and got[key] != want[key]}
    assert not diff, f"{label}: work counters differ under stalls (rtl, model): {diff}"
    assert got["cycles"] >= want["cycles"], (
        f"{label}: {got['cycles']} cycles under stalls, fewer than the model's {want['cycles']}")
    for a in range(arrays):
        steps = sum(got[f"a{a}__issued{p}"] for p in range(4)) + got[f"a{a}__bubbles"]
        assert got[f"a{a}__idle"] + got[f"a{a}__stall"] == got["cycles"] - steps, (
            f"{label}: array {a}: idle {got[f'a{a}__idle']} + stall {got[f'a{a}__stall']} "
            f"!= cycles {got['cycles']} - steps {steps}")
