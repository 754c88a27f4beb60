"""Control-word layouts, enums and port signatures shared by the PEs and the arrays built on
them (``docs/pe.md``).

The enum values and the field order mirror ``golden/pe_model.py`` (the cycle model the
benches compare against); ``tests/test_pe.py`` checks that both agree bit for bit.
"""

from __future__ import annotations

from amaranth.hdl import signed, unsigned
from amaranth.lib import data, enum, wiring
from amaranth.lib.wiring import Out


__all__ = [
    "Code", "Op", "Split", "Part", "RowCond", "ColCond", "Move", "Drain",
    "SelLayout", "CtrlLayout", "BaselineCtrlLayout",
    "RowSignature", "ColSignature", "BaselineRowSignature", "BaselineColSignature",
    "DrainSignature", "OPERAND_WIDTH",
]

#: Width of one operand (int8).
OPERAND_WIDTH = 8


class Code(enum.Enum, shape=2):
    """Reuse code of a follower relative to its anchor; 3 behaves like NONE."""
    FULL = 0
    HALF = 1
    NONE = 2


class Op(enum.Enum, shape=2):
    """What the two 4x8 multipliers compute (see ``golden.pe_model.terms``)."""
    IDLE = 0
    MUL = 1
    LOW = 2
    LOW_PAIR = 3


class Split(enum.Enum, shape=2):
    """Which operand MUL/LOW split into nibbles."""
    COL = 0
    ROW = 1
    AUTO_COL = 2   # COL if kc0 is HALF, else ROW
    AUTO_ROW = 3   # ROW if qc0 is HALF, else COL


class Part(enum.Enum, shape=2):
    """Which of the two terms a register may take."""
    NONE = 0
    PROD = 1
    LOW = 2
    HIGH = 3


class RowCond(enum.Enum, shape=2):
    """Per-term condition on the row follower's code."""
    ANY = 0
    SHARE = 1
    REST = 2
    SHARE1 = 3


class ColCond(enum.Enum, shape=2):
    """Per-term condition on the column follower's code."""
    ANY = 0
    SHARE = 1
    REST = 2
    NEVER = 3


class Move(enum.Enum, shape=2):
    """New base values of R0/R1/R2 (applied before ``clear``)."""
    NONE = 0
    R1_TO_R0 = 1
    R2_TO_R0 = 2
    ROTATE = 3


class Drain(enum.Enum, shape=2):
    """Register that enters the drain chain this cycle (its value before the update)."""
    NONE = 0
    R0 = 1
    R1 = 2
    R2 = 3


#: Selector of one register: a part of this cycle's product, gated by two code conditions.
SelLayout = data.StructLayout({"part": Part, "row": RowCond, "col": ColCond})

#: The ReusePE control word (29 bits; field order = bit order, LSB first).
CtrlLayout = data.StructLayout({
    "op": Op,
    "split": Split,
    "sel0": SelLayout,
    "sel1": SelLayout,
    "sel2": SelLayout,
    "clear": unsigned(3),
    "move": Move,
    "drain": Drain,
})

#: The BaselinePE control word (3 bits).
BaselineCtrlLayout = data.StructLayout({"acc": unsigned(1), "clear": unsigned(1),
                                        "drain": unsigned(1)})


def RowSignature() -> wiring.Signature:
    """Row port of a ReusePE (as its producer sees it): two int8 values, the codes of their
    followers, and the control word that travels with them."""
    return wiring.Signature({
        "a0": Out(signed(OPERAND_WIDTH)),
        "a1": Out(signed(OPERAND_WIDTH)),
        "qc0": Out(Code),
        "qc1": Out(Code),
        "ctrl": Out(CtrlLayout),
    })


def ColSignature() -> wiring.Signature:
    """Column port of a ReusePE: one int8 (or two low nibbles) and the follower codes."""
    return wiring.Signature({
        "b": Out(signed(OPERAND_WIDTH)),
        "kc0": Out(Code),
        "kc1": Out(Code),
    })


def BaselineRowSignature() -> wiring.Signature:
    """Row port of a BaselinePE: one int8 value and its 3-bit control word (no codes)."""
    return wiring.Signature({"a0": Out(signed(OPERAND_WIDTH)), "ctrl": Out(BaselineCtrlLayout)})


def BaselineColSignature() -> wiring.Signature:
    """Column port of a BaselinePE: one int8 value."""
    return wiring.Signature({"b": Out(signed(OPERAND_WIDTH))})


def DrainSignature(acc_width: int) -> wiring.Signature:
    """One link of the drain shift chain: a valid flag and an accumulator value."""
    return wiring.Signature({"valid": Out(1), "data": Out(signed(acc_width))})
