"""Cycle-level golden model of the reuse-aware PE (``ReusePE``) and of the plain MAC
(``BaselinePE``); the contract of ``docs/pe.md``.

Plain Python and numpy, no hardware imports. Two layers:

* Vectorized datapath functions (:func:`effective_split_col`, :func:`terms`, :func:`gates`,
  :func:`step_contributions`, :func:`pairable`). They take scalars or equally shaped arrays
  (one element per PE, per channel, ...), so a tile sequencer or a cycle model can ask
  "which PEs have work in this channel step" for a whole array at once.
* :class:`ReusePEModel` and :class:`BaselinePEModel`: given the same inputs per cycle as the
  RTL (including ``rst``), they hold every register and predict every output after each
  rising edge.

Two levels of control word. :class:`Ctrl` is the *schedule* word: per register a part of
the product gated by SHARE/REST conditions on the follower codes, with AUTO splits; one such
word, the same for every PE of an array, is how the paper's Modes 0-3 and the linear mode
are written (``golden/pe/modes.py``). :class:`PECtrl` is what the ReusePE executes: the
word *resolved* for one PE's codes (:meth:`Ctrl.resolve`), per register just the part it
takes. The hardware never sees codes; the arrays' decoders resolve them per PE.

Numerics. Operands are int8. ``lo(x) = x & 0xF`` (0..15) and ``hi(x) = x >> 4`` (arithmetic,
-8..7), so ``x = 16*hi(x) + lo(x)``. A MUL step splits one operand ``y`` (the column value
``b`` when the effective split is COL, the row value ``a0`` when it is ROW) and forms two
terms on the two 4x8 multipliers: ``t0 = x*lo(y)`` (the LOW part) and ``t1 = 16*x*hi(y)``
(the HIGH part); ``t0 + t1 = x*y``. LOW and LOW_PAIR steps form two independent low-nibble
products (lanes) without the shift. Each register ``R_k`` then adds ``t0``, ``t1``, both or
neither, as gated by its selector and the reuse codes of the operands' followers.

Share/rest algebra (why the gates are what they are). A follower's code says how much of a
product its tile can take from its anchor's product: FULL shares both parts, HALF shares the
HIGH part when the split is on the follower's side (equal high nibbles give an identical
``16*x*hi(y)``), NONE shares nothing. ``SHARE`` gates a register to the shared parts,
``REST`` to the complement. Because the shared parts of the anchor product equal the same
parts of the follower product, ``SHARE`` (in the anchor's pass) plus ``REST`` (in the
follower's pass) adds up to the follower product exactly, for any split rule used
consistently; ``docs/pe.md`` works through the tile quad.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import IntEnum

import numpy as np


__all__ = [
    "Code", "Op", "Split", "Part", "RowCond", "ColCond", "Move", "Drain",
    "Sel", "Ctrl", "PECtrl", "BaselineCtrl", "CTRL_FIELDS", "SEL_FIELDS", "CTRL_WIDTH",
    "PE_CTRL_FIELDS", "PE_CTRL_WIDTH",
    "BASELINE_CTRL_FIELDS", "BASELINE_CTRL_WIDTH",
    "lo", "hi", "wrap", "effective_split_col", "terms", "gates", "step_contributions",
    "pe_contributions", "pairable", "PEInputs", "BaselineInputs", "ReusePEModel",
    "BaselinePEModel",
]


# -- enums of the control word (values are the bit encodings) --------------------------------

class Code(IntEnum):
    """Reuse code of a follower value relative to its anchor (``docs/numerics.md``).
    The unused encoding 3 behaves exactly like NONE."""
    FULL = 0
    HALF = 1
    NONE = 2


class Op(IntEnum):
    """What the two 4x8 multipliers compute this cycle."""
    IDLE = 0       # nothing (terms are 0)
    MUL = 1        # one full 8x8 product, split into LOW (t0) and HIGH (t1) parts
    LOW = 2        # two lanes: t_i = a_i * lo(b) (split COL) or lo(a_i) * b (split ROW)
    LOW_PAIR = 3   # two lanes: t0 = a0 * b[3:0], t1 = a1 * b[7:4] (column carries two nibbles)


class Split(IntEnum):
    """Which operand a MUL or LOW step splits into nibbles."""
    COL = 0        # the column value b
    ROW = 1        # the row value(s) a0 (and a1 for LOW)
    AUTO_COL = 2   # COL if kc0 is HALF, else ROW: a HALF column follower gets the HIGH part
    AUTO_ROW = 3   # ROW if qc0 is HALF, else COL: a HALF row follower gets the HIGH part


class Part(IntEnum):
    """Which of this cycle's two terms a register may take (before the code conditions)."""
    NONE = 0
    PROD = 1       # both: t0 + t1
    LOW = 2        # t0 only (MUL: the low part; LOW/LOW_PAIR: lane 0)
    HIGH = 3       # t1 only (MUL: the high part 16*x*hi(y); LOW/LOW_PAIR: lane 1)


class RowCond(IntEnum):
    """Condition on the row-side follower code, per term."""
    ANY = 0
    SHARE = 1      # the term is shared with the row follower (code qc of the term's lane)
    REST = 2       # the term is not shared with the row follower
    SHARE1 = 3     # shared with the second row follower (code qc1, for every term)


class ColCond(IntEnum):
    """Condition on the column-side follower code, per term."""
    ANY = 0
    SHARE = 1      # the term is shared with the column follower (code kc of the term's lane)
    REST = 2       # the term is not shared with the column follower
    NEVER = 3      # never (the register takes nothing)


class Move(IntEnum):
    """Register moves between passes: the new base values of R0/R1/R2."""
    NONE = 0       # R0, R1, R2 keep their values
    R1_TO_R0 = 1   # R0 <- R1, R1 <- 0, R2 keeps
    R2_TO_R0 = 2   # R0 <- R2, R2 <- 0, R1 keeps
    ROTATE = 3     # R0 <- R1, R1 <- R2, R2 <- 0


class Drain(IntEnum):
    """Which register (its value before this cycle's update) enters the drain chain."""
    NONE = 0       # drain_out <- drain_in (shift)
    R0 = 1
    R1 = 2
    R2 = 3


# -- bit layout of the control word -----------------------------------------------------------

#: (name, width) of a register selector, LSB first.
SEL_FIELDS = (("part", 2), ("row", 2), ("col", 2))
#: (name, width) of the control word ``ctrl``, LSB first (Amaranth StructLayout order).
CTRL_FIELDS = (("op", 2), ("split", 2), ("sel0", 6), ("sel1", 6), ("sel2", 6),
               ("clear", 3), ("move", 2), ("drain", 2))
CTRL_WIDTH = sum(w for _, w in CTRL_FIELDS)
#: (name, width) of the resolved word :class:`PECtrl`, the ReusePE's ``row__ctrl`` (16 bits).
PE_CTRL_FIELDS = (("op", 2), ("split", 1), ("part0", 2), ("part1", 2), ("part2", 2),
                  ("clear", 3), ("move", 2), ("drain", 2))
PE_CTRL_WIDTH = sum(w for _, w in PE_CTRL_FIELDS)
#: The baseline PE's 3-bit control word.
BASELINE_CTRL_FIELDS = (("acc", 1), ("clear", 1), ("drain", 1))
BASELINE_CTRL_WIDTH = 3


def _pack(fields, values):
    word, offset = 0, 0
    for name, width in fields:
        v = int(values[name])
        if not 0 <= v < (1 << width):
            raise ValueError(f"control field {name} must be in [0, {(1 << width) - 1}], got {v}")
        word |= v << offset
        offset += width
    return word


def _unpack(fields, word):
    out, offset = {}, 0
    for name, width in fields:
        out[name] = (int(word) >> offset) & ((1 << width) - 1)
        offset += width
    return out


@dataclass(frozen=True)
class Sel:
    """Selector of one register: ``part`` gated by a row and a column condition."""
    part: Part = Part.NONE
    row: RowCond = RowCond.ANY
    col: ColCond = ColCond.ANY

    def pack(self) -> int:
        """The 6-bit selector field (part, row condition, column condition)."""
        return _pack(SEL_FIELDS, {"part": self.part, "row": self.row, "col": self.col})

    @classmethod
    def unpack(cls, word: int) -> "Sel":
        """Decode a 6-bit selector field."""
        f = _unpack(SEL_FIELDS, word)
        return cls(Part(f["part"]), RowCond(f["row"]), ColCond(f["col"]))

    def __str__(self):
        s = self.part.name
        if self.row != RowCond.ANY:
            s += f"&row.{self.row.name}"
        if self.col != ColCond.ANY:
            s += f"&col.{self.col.name}"
        return s


NO_SEL = Sel()


@dataclass(frozen=True)
class Ctrl:
    """The ReusePE control word. ``clear`` bit k makes R_k start from 0 (after ``move``)."""
    op: Op = Op.IDLE
    split: Split = Split.COL
    sel0: Sel = NO_SEL
    sel1: Sel = NO_SEL
    sel2: Sel = NO_SEL
    clear: int = 0
    move: Move = Move.NONE
    drain: Drain = Drain.NONE

    @property
    def sels(self) -> tuple[Sel, Sel, Sel]:
        """The selectors of R0, R1, R2."""
        return (self.sel0, self.sel1, self.sel2)

    def pack(self) -> int:
        """The 29-bit control word of ``kaleido_pe`` (``row__ctrl``)."""
        return _pack(CTRL_FIELDS, {
            "op": self.op, "split": self.split, "sel0": self.sel0.pack(),
            "sel1": self.sel1.pack(), "sel2": self.sel2.pack(), "clear": self.clear,
            "move": self.move, "drain": self.drain})

    @classmethod
    def unpack(cls, word: int) -> "Ctrl":
        """Decode a 29-bit ReusePE control word."""
        f = _unpack(CTRL_FIELDS, word)
        return cls(Op(f["op"]), Split(f["split"]), Sel.unpack(f["sel0"]), Sel.unpack(f["sel1"]),
                   Sel.unpack(f["sel2"]), f["clear"], Move(f["move"]), Drain(f["drain"]))

    def with_(self, **changes) -> "Ctrl":
        """A copy with the given fields replaced."""
        return replace(self, **changes)

    def resolve(self, qc0=Code.NONE, qc1=Code.NONE, kc0=Code.NONE, kc1=Code.NONE) -> "PECtrl":
        """The word one PE executes given its follower codes: the effective split, and per
        register the part (:class:`Part`) its selector lets through (a gate pair (t0, t1)
        is one of NONE, LOW, HIGH, PROD). Exact: :func:`pe_contributions` of the result
        equals :func:`step_contributions` of this word for every operand."""
        split_col = bool(effective_split_col(self.split, qc0, kc0))
        parts = []
        for sel in self.sels:
            g0, g1 = gates(sel, self.op, split_col, qc0, qc1, kc0, kc1)
            parts.append(_PART_OF_GATES[bool(g0), bool(g1)])
        return PECtrl(self.op, Split.COL if split_col else Split.ROW, tuple(parts),
                      self.clear, self.move, self.drain)


#: (takes t0, takes t1) -> the part that adds exactly those terms.
_PART_OF_GATES = {(False, False): Part.NONE, (True, False): Part.LOW,
                  (False, True): Part.HIGH, (True, True): Part.PROD}


@dataclass(frozen=True)
class PECtrl:
    """The ReusePE's control word (``row__ctrl``, 16 bits): what one PE does this cycle.

    ``op`` and ``split`` (COL or ROW only) choose the multiplier's terms, ``parts[k]`` what
    register R_k adds (NONE, PROD = t0 + t1, LOW = t0, HIGH = t1); ``clear``, ``move`` and
    ``drain`` are the pass-change fields of :class:`Ctrl`.
    """
    op: Op = Op.IDLE
    split: Split = Split.COL
    parts: tuple = (Part.NONE, Part.NONE, Part.NONE)
    clear: int = 0
    move: Move = Move.NONE
    drain: Drain = Drain.NONE

    def __post_init__(self):
        if isinstance(self.split, np.ndarray):   # a vectorized word (one entry per PE)
            return
        if self.split not in (Split.COL, Split.ROW):
            raise ValueError(f"a PE word's split must be COL or ROW (resolve AUTO splits with "
                             f"Ctrl.resolve), got {Split(self.split).name}")
        if len(self.parts) != 3:
            raise ValueError(f"parts must give the part of R0, R1 and R2, got {self.parts!r}")

    def pack(self) -> int:
        """The 16-bit word of ``kaleido_pe`` (``row__ctrl``)."""
        return _pack(PE_CTRL_FIELDS, {
            "op": self.op, "split": self.split, "part0": self.parts[0],
            "part1": self.parts[1], "part2": self.parts[2], "clear": self.clear,
            "move": self.move, "drain": self.drain})

    @classmethod
    def unpack(cls, word: int) -> "PECtrl":
        """Decode a 16-bit ReusePE control word."""
        f = _unpack(PE_CTRL_FIELDS, word)
        return cls(Op(f["op"]), Split(f["split"]),
                   (Part(f["part0"]), Part(f["part1"]), Part(f["part2"])),
                   f["clear"], Move(f["move"]), Drain(f["drain"]))

    def with_(self, **changes) -> "PECtrl":
        """A copy with the given fields replaced."""
        return replace(self, **changes)

    @property
    def busy(self) -> bool:
        """Some register takes a term this cycle."""
        return self.op != Op.IDLE and any(p != Part.NONE for p in self.parts)


@dataclass(frozen=True)
class BaselineCtrl:
    """The BaselinePE control word: accumulate a0*b, clear R0 first, drain R0."""
    acc: int = 0
    clear: int = 0
    drain: int = 0

    def pack(self) -> int:
        """The 3-bit control word of ``baseline_pe`` (``row__ctrl``)."""
        return _pack(BASELINE_CTRL_FIELDS, {"acc": self.acc, "clear": self.clear,
                                            "drain": self.drain})

    @classmethod
    def unpack(cls, word: int) -> "BaselineCtrl":
        """Decode a BaselinePE control word."""
        return cls(**_unpack(BASELINE_CTRL_FIELDS, word))


# -- datapath (vectorized) --------------------------------------------------------------------
# Written once for Python ints and numpy arrays alike: the cycle models below call these
# functions with scalars every cycle (fast, no 0-d arrays), a sequencer or cycle model can
# call them with arrays (one element per PE / channel) for whole arrays at once.

def _where(cond, x, y):
    if isinstance(cond, np.ndarray):
        return np.where(cond, x, y)
    return x if cond else y


def _not(x):
    return ~x if isinstance(x, np.ndarray) else not x


def _broadcast(value, *inputs):
    """``value`` as an array of the inputs' broadcast shape if any input is an array (a
    decision that does not depend on the array inputs comes out as a Python scalar)."""
    arrays = [x for x in inputs if isinstance(x, np.ndarray)]
    if not arrays:
        return value
    return np.broadcast_to(value, np.broadcast_shapes(*(x.shape for x in arrays))).copy()


def _operand(x):
    if isinstance(x, (int, np.integer, np.ndarray)):
        return x
    return np.asarray(x, dtype=np.int64)


def lo(x):
    """Low nibble, unsigned 0..15."""
    return _operand(x) & 0xF


def hi(x):
    """High nibble of an int8, arithmetic shift: -8..7."""
    return _operand(x) >> 4


def wrap(value, width: int):
    """Two's-complement wrap of ``value`` to ``width`` bits (what a register of that width holds)."""
    half = 1 << (width - 1)
    return ((_operand(value) + half) & ((1 << width) - 1)) - half


def effective_split_col(split, qc0, kc0):
    """True where the effective split is COL (the column value is split into nibbles)."""
    split, qc0, kc0 = _operand(split), _operand(qc0), _operand(kc0)
    col = _where(split == Split.COL, True,
                 _where(split == Split.ROW, False,
                        _where(split == Split.AUTO_COL, kc0 == Code.HALF, qc0 != Code.HALF)))
    return _broadcast(col, split, qc0, kc0)


def terms(op, split_col, a0, a1, b):
    """The two multiplier terms ``(t0, t1)`` of this cycle.

    MUL: ``t0 = x*lo(y)``, ``t1 = 16*x*hi(y)`` with ``y = b, x = a0`` (split COL) or
    ``y = a0, x = b`` (split ROW). LOW: lane i is ``a_i*lo(b)`` (COL) or ``lo(a_i)*b`` (ROW).
    LOW_PAIR: ``a0*b[3:0]`` and ``a1*b[7:4]``, nibbles unsigned. IDLE: zeros.
    """
    op, a0, a1, b = _operand(op), _operand(a0), _operand(a1), _operand(b)
    pair = op == Op.LOW_PAIR
    col = split_col | pair
    t0 = _where(op == Op.IDLE, 0, _where(col, a0 * lo(b), b * lo(a0)))
    t1 = _where(op == Op.MUL, 16 * _where(split_col, a0 * hi(b), b * hi(a0)),
                _where(op == Op.LOW, _where(split_col, a1 * lo(b), b * lo(a1)),
                       _where(pair, a1 * ((b >> 4) & 0xF), 0)))
    inputs = (op, split_col, a0, a1, b)
    return _broadcast(t0, *inputs), _broadcast(t1, *inputs)


def _share(code, part_high, split_col, side_col):
    """Is a term shared with a follower of ``code`` on side ``side_col`` (True = column)?

    FULL shares every term; HALF shares only a MUL's HIGH part, and only when the split is on
    the follower's side (then the high nibbles, hence the terms, are identical)."""
    side = split_col if side_col else _not(split_col)
    return (code == Code.FULL) | ((code == Code.HALF) & part_high & side)


def gates(sel: Sel | tuple, op, split_col, qc0, qc1, kc0, kc1):
    """``(g0, g1)``: does the register with selector ``sel`` take term t0 / t1 this cycle.

    ``sel`` is a :class:`Sel` or a ``(part, row, col)`` tuple of scalars or arrays. The code of
    a term's row follower is qc0 for a MUL (both parts belong to lane 0) and qc_i for lane i of
    LOW/LOW_PAIR; its column follower's code is kc_i for lane i of LOW_PAIR, else kc0
    (every other op has one column value).
    """
    part, row, col = (sel.part, sel.row, sel.col) if isinstance(sel, Sel) else sel
    part, row, col, op = (_operand(v) for v in (part, row, col, op))
    qc0, qc1, kc0, kc1 = (_operand(v) for v in (qc0, qc1, kc0, kc1))
    is_mul, is_pair = op == Op.MUL, op == Op.LOW_PAIR
    out = []
    for j in (0, 1):
        part_high = is_mul if j == 1 else False
        row_code = qc0 if j == 0 else _where(is_mul, qc0, qc1)
        col_code = kc0 if j == 0 else _where(is_pair, kc1, kc0)
        share_row = _share(row_code, part_high, split_col, False)
        share_row1 = _share(qc1, part_high, split_col, False)
        share_col = _share(col_code, part_high, split_col, True)
        g_part = (part == Part.PROD) | (part == (Part.LOW if j == 0 else Part.HIGH))
        g_row = _where(row == RowCond.ANY, True,
                       _where(row == RowCond.SHARE, share_row,
                              _where(row == RowCond.REST, _not(share_row), share_row1)))
        g_col = _where(col == ColCond.ANY, True,
                       _where(col == ColCond.SHARE, share_col,
                              _where(col == ColCond.REST, _not(share_col), False)))
        out.append(g_part & g_row & g_col & (op != Op.IDLE))
    inputs = (part, row, col, op, split_col, qc0, qc1, kc0, kc1)
    return _broadcast(out[0], *inputs), _broadcast(out[1], *inputs)


def step_contributions(ctrl: Ctrl, a0, a1, b, qc0, qc1, kc0, kc1):
    """What R0, R1, R2 add this cycle and whether the PE is busy (vectorized over PEs).

    Returns ``([c0, c1, c2], busy)``. ``busy`` is True where some register takes a term.
    """
    split_col = effective_split_col(ctrl.split, qc0, kc0)
    t0, t1 = terms(ctrl.op, split_col, a0, a1, b)
    contributions, busy = [], False
    for sel in ctrl.sels:
        g0, g1 = gates(sel, ctrl.op, split_col, qc0, qc1, kc0, kc1)
        contributions.append(_where(g0, t0, 0) + _where(g1, t1, 0))
        busy = busy | g0 | g1
    return contributions, busy


def pe_contributions(ctrl: PECtrl, a0, a1, b):
    """What R0, R1, R2 add this cycle under a resolved word (vectorized: the operands and
    the word's fields may be arrays, one element per PE).

    Returns ``([c0, c1, c2], busy)``: ``c_k`` is 0, ``t0 + t1``, ``t0`` or ``t1`` as
    ``ctrl.parts[k]`` says; ``busy`` is True where some register takes a term.
    """
    op = _operand(ctrl.op)
    t0, t1 = terms(op, _operand(ctrl.split) == Split.COL, a0, a1, b)
    out, takes = [], False
    for part in ctrl.parts:
        part = _operand(part)
        out.append(_where(part == Part.PROD, t0 + t1,
                          _where(part == Part.LOW, t0, _where(part == Part.HIGH, t1, 0))))
        takes = takes | (part != Part.NONE)
    inputs = (op, *(_operand(x) for x in ctrl.parts), _operand(a0), _operand(a1), _operand(b))
    return [_broadcast(c, *inputs) for c in out], _broadcast(takes & (op != Op.IDLE), *inputs)


def pairable(ctrl: Ctrl, qc0, qc1, kc0, kc1):
    """Where a MUL step ``ctrl`` could be one lane of a LOW_PAIR step instead (vectorized).

    True where the step takes no HIGH term into any register and every taken LOW term has
    the column split (``a0*lo(b)``, the form a LOW_PAIR lane computes). A tile sequencer may
    merge two channel steps into one LOW_PAIR step (same selectors, lane codes in qc0/kc0 and
    qc1/kc1) only if this holds for every PE of the array at both channels.
    """
    if ctrl.op != Op.MUL:
        raise ValueError(f"pairable() needs a MUL word, got op {ctrl.op.name}")
    split_col = effective_split_col(ctrl.split, qc0, kc0)
    ok = True
    for sel in ctrl.sels:
        g0, g1 = gates(sel, ctrl.op, split_col, qc0, qc1, kc0, kc1)
        ok = ok & _not(g1) & (_not(g0) | split_col)
    return ok


# -- cycle models -----------------------------------------------------------------------------

@dataclass
class PEInputs:
    """One cycle's inputs of a ReusePE (values as the ports carry them, signed where signed).

    ``ctrl`` is the resolved :class:`PECtrl` (or its packed 16-bit word)."""
    a0: int = 0
    a1: int = 0
    ctrl: PECtrl | int = field(default_factory=PECtrl)
    b: int = 0
    drain_valid: int = 0
    drain_data: int = 0
    rst: int = 0


class ReusePEModel:
    """Cycle model of ``ReusePE``: registers and outputs after every rising edge.

    Parameters
    ----------
    acc_width : int
        Width of R0/R1/R2 and of the drain data (signed, wraps modulo ``2**acc_width``).

    :meth:`step` applies one cycle's :class:`PEInputs` (or keyword arguments of it) and
    returns :meth:`outputs`: a dict keyed like the Verilog ports (``r0``, ``row_out__a0``,
    ``drain_out__data``, ...), with signed values for signed ports and the packed word for
    ``row_out__ctrl``.
    """

    def __init__(self, acc_width: int = 24):
        if isinstance(acc_width, bool) or not isinstance(acc_width, int) or acc_width < 2:
            raise ValueError(f"acc_width must be an integer >= 2, got {acc_width!r}")
        self.acc_width = acc_width
        self.reset()

    def reset(self):
        """State after ``rst``: every register 0."""
        self.r = [0, 0, 0]
        self.row_out = {"a0": 0, "a1": 0, "ctrl": 0}
        self.col_out = {"b": 0}
        self.drain_valid, self.drain_data = 0, 0
        self.busy = 0

    def step(self, inputs: PEInputs | None = None, **kw) -> dict:
        """Advance one clock edge with ``inputs`` (or keyword inputs); return the new outputs."""
        x = inputs if inputs is not None else PEInputs(**kw)
        if x.rst:
            self.reset()
            return self.outputs()
        ctrl = x.ctrl if isinstance(x.ctrl, PECtrl) else PECtrl.unpack(x.ctrl)
        (c0, c1, c2), busy = pe_contributions(ctrl, x.a0, x.a1, x.b)
        r0, r1, r2 = self.r
        base = {Move.NONE: [r0, r1, r2], Move.R1_TO_R0: [r1, 0, r2],
                Move.R2_TO_R0: [r2, r1, 0], Move.ROTATE: [r1, r2, 0]}[ctrl.move]
        base = [0 if (ctrl.clear >> k) & 1 else v for k, v in enumerate(base)]
        if ctrl.drain == Drain.NONE:
            self.drain_valid, self.drain_data = int(x.drain_valid) & 1, int(x.drain_data)
        else:
            self.drain_valid, self.drain_data = 1, self.r[ctrl.drain - 1]
        self.r = [int(wrap(v + int(c), self.acc_width)) for v, c in zip(base, (c0, c1, c2))]
        self.row_out = {"a0": int(x.a0), "a1": int(x.a1), "ctrl": ctrl.pack()}
        self.col_out = {"b": int(x.b)}
        self.busy = int(bool(busy))
        return self.outputs()

    def outputs(self) -> dict:
        """Current outputs, keyed by the Verilog port names of ``kaleido_pe``."""
        out = {"r0": self.r[0], "r1": self.r[1], "r2": self.r[2], "busy": self.busy,
               "drain_out__valid": self.drain_valid, "drain_out__data": self.drain_data}
        out.update({f"row_out__{k}": v for k, v in self.row_out.items()})
        out.update({f"col_out__{k}": v for k, v in self.col_out.items()})
        return out


@dataclass
class BaselineInputs:
    """One cycle's inputs of a BaselinePE."""
    a0: int = 0
    ctrl: BaselineCtrl | int = field(default_factory=BaselineCtrl)
    b: int = 0
    drain_valid: int = 0
    drain_data: int = 0
    rst: int = 0


class BaselinePEModel:
    """Cycle model of ``BaselinePE`` (one 8x8 MAC into R0), same output naming as above.

    Parameters
    ----------
    acc_width : int
        Width of R0 and of the drain data.
    """

    def __init__(self, acc_width: int = 24):
        if isinstance(acc_width, bool) or not isinstance(acc_width, int) or acc_width < 2:
            raise ValueError(f"acc_width must be an integer >= 2, got {acc_width!r}")
        self.acc_width = acc_width
        self.reset()

    def reset(self):
        """State after ``rst``: every register 0."""
        self.r0 = 0
        self.row_out = {"a0": 0, "ctrl": 0}
        self.col_out = {"b": 0}
        self.drain_valid, self.drain_data = 0, 0
        self.busy = 0

    def step(self, inputs: BaselineInputs | None = None, **kw) -> dict:
        """Advance one clock edge with ``inputs`` (or keyword inputs); return the new outputs."""
        x = inputs if inputs is not None else BaselineInputs(**kw)
        if x.rst:
            self.reset()
            return self.outputs()
        ctrl = x.ctrl if isinstance(x.ctrl, BaselineCtrl) else BaselineCtrl.unpack(x.ctrl)
        if ctrl.drain:
            self.drain_valid, self.drain_data = 1, self.r0
        else:
            self.drain_valid, self.drain_data = int(x.drain_valid) & 1, int(x.drain_data)
        base = 0 if ctrl.clear else self.r0
        self.r0 = int(wrap(base + (int(x.a0) * int(x.b) if ctrl.acc else 0), self.acc_width))
        self.row_out = {"a0": int(x.a0), "ctrl": ctrl.pack()}
        self.col_out = {"b": int(x.b)}
        self.busy = int(ctrl.acc)
        return self.outputs()

    def outputs(self) -> dict:
        """Current outputs, keyed by the Verilog port names of ``baseline_pe``."""
        out = {"r0": self.r0, "busy": self.busy,
               "drain_out__valid": self.drain_valid, "drain_out__data": self.drain_data}
        out.update({f"row_out__{k}": v for k, v in self.row_out.items()})
        out.update({f"col_out__{k}": v for k, v in self.col_out.items()})
        return out
