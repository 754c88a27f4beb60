"""Stimulus for the PE benches (cocotb in ``sim/pe/reuse`` and ``sim/pe/baseline``, Amaranth in
``tests/pe/test_pe.py``): per-cycle input lists for ``golden.pe.model`` and the RTL.

* Random legal traffic: every field of the PE's control word takes every encoding (all are
  defined), operands are biased to the extremes -128/127.
* Directed operating points built from ``golden.pe.modes``: whole tile quads (paper Modes
  0-3) with operands consistent with their codes and the exact tile values expected, with
  skipped idle channel steps and LOW_PAIR-merged channels; the linear-layer mode. They are
  written as schedule-level words with follower codes (:class:`CodedStep`), the way an
  array's sequencer sees them, and resolved per PE (``Ctrl.resolve``) into what the PE gets,
  as the arrays' decoders do; codes include the spare value 3.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

import numpy as np

from golden.pe.model import (BaselineCtrl, BaselineInputs, Code, Ctrl, Drain, Move, Op, Part,
                             PECtrl, PEInputs, Split, lo, pairable, step_contributions)
from golden.pe.modes import dense_word, drain_word, linear_words, paired, quad_passes


__all__ = ["CodedStep", "resolve", "random_operand", "random_ctrl", "random_inputs",
           "quad_stimulus", "linear_stimulus", "dense_stimulus", "baseline_random_inputs",
           "QUAD_VARIANTS"]

#: (order, split, moves) variants of the tile quad that the directed tests cover.
QUAD_VARIANTS = (
    ("t1-first", Split.AUTO_COL, "direct"),
    ("t1-first", Split.AUTO_ROW, "direct"),
    ("t1-first", Split.AUTO_COL, "rotate"),
    ("t2-first", Split.AUTO_COL, "direct"),
    ("t2-first", Split.AUTO_ROW, "direct"),
    ("t1-first", Split.COL, "direct"),
    ("t1-first", Split.ROW, "direct"),
)

_EXTREMES = (-128, 127, -1, 0, 1, -127, 126)


@dataclass
class CodedStep:
    """One PE step as a sequencer sees it: operands, a schedule-level :class:`Ctrl` word and
    the follower codes that decide, per PE, what the word does."""
    a0: int = 0
    a1: int = 0
    qc0: int = Code.NONE
    qc1: int = Code.NONE
    ctrl: Ctrl = field(default_factory=Ctrl)
    b: int = 0
    kc0: int = Code.NONE
    kc1: int = Code.NONE

    def with_ctrl(self, ctrl: Ctrl) -> "CodedStep":
        """The same step with another word."""
        return replace(self, ctrl=ctrl)

    def resolve(self) -> PEInputs:
        """What the PE receives: the word resolved for this step's codes."""
        return PEInputs(a0=self.a0, a1=self.a1, b=self.b,
                        ctrl=self.ctrl.resolve(self.qc0, self.qc1, self.kc0, self.kc1))


def resolve(steps: list[CodedStep]) -> list[PEInputs]:
    """:meth:`CodedStep.resolve` of every step."""
    return [s.resolve() for s in steps]


def random_operand(rng: random.Random) -> int:
    """An int8, one time in three an extreme or boundary value."""
    return rng.choice(_EXTREMES) if rng.random() < 0.33 else rng.randint(-128, 127)


def _random_code(rng):
    return rng.choice((Code.FULL, Code.HALF, Code.NONE, Code.FULL, Code.HALF, Code.NONE, 3))


def random_ctrl(rng: random.Random) -> PECtrl:
    """A PE control word with every field uniformly random over all its encodings."""
    return PECtrl(op=Op(rng.randrange(4)), split=Split(rng.randrange(2)),
                  parts=tuple(Part(rng.randrange(4)) for _ in range(3)),
                  clear=rng.randrange(8) if rng.random() < 0.3 else 0,
                  move=Move(rng.randrange(4)) if rng.random() < 0.3 else Move.NONE,
                  drain=Drain(rng.randrange(4)) if rng.random() < 0.3 else Drain.NONE)


def _random_step(rng, ctrl, acc_width):
    return PEInputs(a0=random_operand(rng), a1=random_operand(rng), ctrl=ctrl,
                    b=random_operand(rng), drain_valid=rng.randrange(2),
                    drain_data=rng.randint(-(1 << (acc_width - 1)), (1 << (acc_width - 1)) - 1))


def _follower(rng, anchor, codes):
    """Follower values consistent with their codes: FULL = anchor (the effective operand),
    HALF = same high nibble, own low nibble; NONE = anything."""
    out = []
    for x, c in zip(anchor, codes):
        if c == Code.FULL:
            out.append(int(x))
        elif c == Code.HALF:
            out.append((int(x) >> 4) * 16 + rng.randrange(16))
        else:
            out.append(random_operand(rng))
    return np.array(out, dtype=np.int64)


def _codes(rng, d, weights):
    return np.array(rng.choices((Code.FULL, Code.HALF, Code.NONE), weights=weights, k=d),
                    dtype=np.int64)


def _to_int8(v):
    v &= 0xFF
    return v - 256 if v & 0x80 else v


def quad_stimulus(rng: random.Random, d: int, order="t1-first", split=Split.AUTO_COL,
                  moves="direct", *, skip_idle=True, pair=False, drain_first=False,
                  weights=(1, 1, 1)):
    """One tile quad over ``d`` channels for one PE, plus its exact tile values.

    Returns ``(inputs, expected)``: ``inputs`` a list of :class:`CodedStep` ending with a step
    that drains the last tile (:func:`resolve` gives the PE's inputs); ``expected`` the list
    of tile values in drain order (tile 0, then the order's tiles). With ``drain_first`` the first step also drains R0 (whatever
    the previous quad left there; not in ``expected``). ``skip_idle`` drops channel steps in
    which the PE has no work; ``pair`` merges pairable channel steps into LOW_PAIR steps.
    """
    A = np.array([random_operand(rng) for _ in range(d)], dtype=np.int64)
    a = np.array([random_operand(rng) for _ in range(d)], dtype=np.int64)
    q, k = _codes(rng, d, weights), _codes(rng, d, weights)
    F, f = _follower(rng, A, q), _follower(rng, a, k)
    tiles = {0: int(A @ a), 1: int(A @ f), 2: int(F @ a), 3: int(F @ f)}
    inputs, expected = [], []
    passes = quad_passes(order, split, moves)
    for n, p in enumerate(passes):
        rows = A if p.rows == "anchor" else F
        cols = a if p.cols == "anchor" else f
        work = []
        for c in range(d):
            step = CodedStep(a0=int(rows[c]), a1=random_operand(rng), qc0=int(q[c]),
                             qc1=_random_code(rng), ctrl=p.word, b=int(cols[c]), kc0=int(k[c]),
                             kc1=_random_code(rng))
            if skip_idle:
                _, busy = step_contributions(p.word, step.a0, step.a1, step.b, step.qc0,
                                             step.qc1, step.kc0, step.kc1)
                if not busy:
                    continue
            work.append((c, step))
        if pair:
            work = _merge_pairs(work, p.word, rows, cols, q, k)
        steps = [s for _, s in work] or [CodedStep(ctrl=Ctrl())]
        first = steps[0].ctrl.with_(**p.entry)
        if n == 0 and not drain_first:
            first = first.with_(drain=Drain.NONE)
        steps[0] = steps[0].with_ctrl(first)
        inputs.extend(steps)
        expected.append(tiles[p.tile])
    inputs.append(CodedStep(ctrl=drain_word(0)))
    return inputs, expected


def _merge_pairs(work, word, rows, cols, q, k):
    """Merge consecutive pairable channel steps into LOW_PAIR steps (Mode 2 / Mode 3 half)."""
    out, pending = [], None
    for c, step in work:
        ok = bool(pairable(word, step.qc0, step.qc1, step.kc0, step.kc1))
        if not ok:
            out.append((c, step))
            continue
        if pending is None:
            pending = (c, step)
            continue
        c0, s0 = pending
        pending = None
        b = _to_int8((int(lo(cols[c0])) | (int(lo(cols[c])) << 4)))
        out.append((c0, CodedStep(a0=int(rows[c0]), a1=int(rows[c]), qc0=int(q[c0]),
                                  qc1=int(q[c]), ctrl=paired(word), b=b, kc0=int(k[c0]),
                                  kc1=int(k[c]))))
    if pending is not None:
        out.append(pending)
    return out


def linear_stimulus(rng: random.Random, d: int, window: int = 2, weights=(1, 1, 1)):
    """One linear-layer window over ``d`` channels for one PE (row = tokens, column = weight).

    Returns ``(inputs, expected)`` (:class:`CodedStep` list) with expected ``[Y_anchor,
    Y_f1(, Y_f2)]`` in drain order (R0, R1, R2 drained one per cycle by the last steps).
    """
    words = linear_words(window)
    x = np.array([random_operand(rng) for _ in range(d)], dtype=np.int64)
    w = np.array([random_operand(rng) for _ in range(d)], dtype=np.int64)
    codes = [_codes(rng, d, weights) for _ in range(window - 1)]
    followers = [_follower(rng, x, c) for c in codes]
    q1 = codes[1] if window == 3 else np.full(d, Code.NONE)
    inputs = [CodedStep(a0=int(x[c]), qc0=int(codes[0][c]), qc1=int(q1[c]), ctrl=words.anchor,
                        b=int(w[c])) for c in range(d)]
    inputs[0] = inputs[0].with_ctrl(words.anchor.with_(clear=0b111))
    for c in range(d):
        c1 = int(codes[0][c])
        if window == 3:
            c2 = int(codes[1][c])
            if c1 == Code.HALF and c2 == Code.HALF:
                # both HALF: one LOW step (lane 0 -> R1, lane 1 -> R2)
                inputs.append(CodedStep(a0=int(followers[0][c]), a1=int(followers[1][c]),
                                        qc0=c1, qc1=c2, ctrl=words.both_half, b=int(w[c])))
                continue
            if c2 != Code.FULL:
                inputs.append(CodedStep(a0=int(followers[1][c]), qc0=c2, ctrl=words.follower2,
                                        b=int(w[c])))
        if c1 != Code.FULL:
            inputs.append(CodedStep(a0=int(followers[0][c]), qc0=c1, ctrl=words.follower1,
                                    b=int(w[c])))
    for r in range(window):
        inputs.append(CodedStep(ctrl=drain_word(r)))
    expected = [int(x @ w)] + [int(fv @ w) for fv in followers]
    return inputs, expected


def dense_stimulus(rng: random.Random, d: int):
    """A plain dot product on the ReusePE's dense word (reuse off); expected ``[a.b]``
    (:class:`CodedStep` list)."""
    a = [random_operand(rng) for _ in range(d)]
    b = [random_operand(rng) for _ in range(d)]
    inputs = [CodedStep(a0=x, b=y, ctrl=dense_word(first=(i == 0)).with_(drain=Drain.NONE))
              for i, (x, y) in enumerate(zip(a, b))]
    inputs.append(CodedStep(ctrl=drain_word(0)))
    return inputs, [sum(x * y for x, y in zip(a, b))]


def random_inputs(rng: random.Random, cycles: int, acc_width: int, *, directed_every=0.25):
    """``cycles`` PE inputs mixing fully random words with directed quads / linear windows
    (back-to-back pass switches, resolved per step), no reset."""
    out = []
    while len(out) < cycles:
        r = rng.random()
        if r < directed_every:
            variant = rng.choice(QUAD_VARIANTS)
            steps, _ = quad_stimulus(rng, rng.randint(1, 12), *variant,
                                     skip_idle=rng.random() < 0.5, pair=rng.random() < 0.5,
                                     drain_first=True,
                                     weights=rng.choice(((1, 1, 1), (3, 3, 1), (1, 3, 1))))
            out.extend(resolve(steps[:-1]))
        elif r < directed_every + 0.05:
            steps, _ = linear_stimulus(rng, rng.randint(1, 8), rng.choice((2, 3)))
            out.extend(resolve(steps))
        else:
            for _ in range(rng.randint(1, 40)):
                out.append(_random_step(rng, random_ctrl(rng), acc_width))
    return out[:cycles]


def baseline_random_inputs(rng: random.Random, cycles: int, acc_width: int):
    """Random BaselinePE traffic: every control bit combination, extreme operands."""
    half = 1 << (acc_width - 1)
    return [BaselineInputs(a0=random_operand(rng), b=random_operand(rng),
                           ctrl=BaselineCtrl(acc=int(rng.random() < 0.8),
                                             clear=int(rng.random() < 0.08),
                                             drain=int(rng.random() < 0.1)),
                           drain_valid=rng.randrange(2), drain_data=rng.randint(-half, half - 1))
            for _ in range(cycles)]
