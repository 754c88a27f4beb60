"""Control-word layouts, enums and port signatures shared by the PEs and the arrays built on
them (``docs/pe.md``).

The ReusePE executes a *resolved* control word (:data:`CtrlLayout`): per register the part
of this cycle's product it takes, with no reuse codes left to look at. Which part a register
takes in a given PE depends on that PE's follower codes; the cells of the arrays (tile
and merged decoders, with their window-3 tables) resolve it from their decode tables, and
``golden.pe.model.Ctrl.resolve`` does the same for a schedule-level word with SHARE/REST
conditions (the paper's Modes 0-3 as uniform words). The enum values and the field order
mirror ``golden/pe/model.py``; ``tests/pe/test_pe.py`` checks that both agree bit for bit.
"""

from __future__ import annotations

from amaranth.hdl import signed, unsigned
from amaranth.lib import data, enum, wiring
from amaranth.lib.wiring import Out


__all__ = [
    "Op", "Split", "Part", "Move", "Drain", "CtrlLayout", "BaselineCtrlLayout",
    "RowSignature", "ColSignature", "BaselineRowSignature", "BaselineColSignature",
    "DrainSignature", "OPERAND_WIDTH", "REGISTERS",
]

#: Width of one operand (int8).
OPERAND_WIDTH = 8
#: Accumulators of a ReusePE (R0, R1, R2).
REGISTERS = 3


class Op(enum.Enum, shape=2):
    """What the two 4x8 multiplier halves compute (see ``golden.pe.model.terms``)."""
    IDLE = 0
    MUL = 1
    LOW = 2
    LOW_PAIR = 3


class Split(enum.Enum, shape=1):
    """Which operand MUL/LOW split into nibbles."""
    COL = 0
    ROW = 1


class Part(enum.Enum, shape=2):
    """Which of the two terms a register takes."""
    NONE = 0
    PROD = 1
    LOW = 2
    HIGH = 3


class Move(enum.Enum, shape=2):
    """New roles of the registers (applied before ``clear``); the register that leaves R0
    starts from 0."""
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


#: The ReusePE control word (16 bits; field order = bit order, LSB first): the op and split
#: of the two multiplier halves, the part each register R0..R2 takes, and the pass-change
#: fields (``clear`` bit k: R_k starts from 0, applied after ``move``; ``drain``).
CtrlLayout = data.StructLayout({
    "op": Op,
    "split": Split,
    "part": data.ArrayLayout(Part, REGISTERS),
    "clear": unsigned(REGISTERS),
    "move": Move,
    "drain": Drain,
})

#: The BaselinePE control word (3 bits).
BaselineCtrlLayout = data.StructLayout({"acc": unsigned(1), "clear": unsigned(1),
                                        "drain": unsigned(1)})


def RowSignature() -> wiring.Signature:
    """Row port of a ReusePE (as its producer sees it): two int8 values (lane 1 is used by
    LOW and LOW_PAIR steps only) and the control word that travels with them."""
    return wiring.Signature({
        "a0": Out(signed(OPERAND_WIDTH)),
        "a1": Out(signed(OPERAND_WIDTH)),
        "ctrl": Out(CtrlLayout),
    })


def ColSignature() -> wiring.Signature:
    """Column port of a ReusePE: one int8, or two low nibbles (LOW_PAIR)."""
    return wiring.Signature({"b": Out(signed(OPERAND_WIDTH))})


def BaselineRowSignature() -> wiring.Signature:
    """Row port of a BaselinePE: one int8 value and its 3-bit control word (no codes)."""
    return wiring.Signature({"a0": Out(signed(OPERAND_WIDTH)), "ctrl": Out(BaselineCtrlLayout)})


def BaselineColSignature() -> wiring.Signature:
    """Column port of a BaselinePE: one int8 value."""
    return wiring.Signature({"b": Out(signed(OPERAND_WIDTH))})


def DrainSignature(acc_width: int) -> wiring.Signature:
    """One link of the drain shift chain: a valid flag and an accumulator value."""
    return wiring.Signature({"valid": Out(1), "data": Out(signed(acc_width))})
