"""Data layouts of the PE arrays' ports and cells (``docs/array.md``, ``docs/linear.md``):
what a step carries along a row and down a column (attention tile steps, the plain array's
compact bits, linear steps), and a column's drain read-out record.

Layouts pack from bit 0 in declaration order (``amaranth.lib.data``), so a packed port can be
decoded by hand from the tables in the docs.
"""

from __future__ import annotations

from amaranth.hdl import signed, unsigned
from amaranth.lib import data

from kaleido_hw.bitops import bits_for


__all__ = ["ABSENT", "describe_layout", "mode_layout", "step_row_layout", "window3_row_layout",
           "step_col_layout",
           "baseline_row_layout", "baseline_col_layout", "drain_port_layout",
           "linear_mode_layout", "linear_row_layout", "linear_col_layout"]

#: Code of a unit without follower (an unpaired token) on the wires of the array: the PE's
#: 2-bit code encoding 3, which the PE treats like NONE and the decoder as "no follower".
ABSENT = 3


def describe_layout(layout, prefix: str = "") -> str:
    """``"a [0:8], qc [8:10], ..."``: every leaf field of a StructLayout with its bit range."""
    parts = []
    for name, field in layout:
        shape = field.shape
        if isinstance(shape, data.StructLayout):
            inner = describe_layout(shape, f"{prefix}{name}.")
            parts.append(", ".join(f"{p.split(' [')[0]} [{_shift(p, field.offset)}]"
                                   for p in inner.split(", ")))
        else:
            parts.append(f"{prefix}{name} [{field.offset}:{field.offset + field.width}]")
    return ", ".join(parts)


def _shift(part: str, offset: int) -> str:
    lo, hi = part.split(" [")[1].rstrip("]").split(":")
    return f"{int(lo) + offset}:{int(hi) + offset}"


def mode_layout() -> data.StructLayout:
    """What every PE of a row does in a step: the pass, whether it is the pass's first step
    (drain R0, bring the pass's tile into R0) and whether a channel is issued (else a bubble)."""
    return data.StructLayout({"pass_idx": unsigned(2), "first": unsigned(1), "issue": unsigned(1)})


def step_row_layout() -> data.StructLayout:
    """One row of a step at the array's left edge: the Q value, the code of the row unit's
    follower (FULL/HALF/NONE/ABSENT), the row valid bit (0: padding row) and the mode."""
    return data.StructLayout({"a": signed(8), "qc": unsigned(2), "valid": unsigned(1),
                              "mode": mode_layout()})


def window3_row_layout() -> data.StructLayout:
    """A row of a step on an array that also runs linear window-3 quads
    (``golden.array.window3``): ``step_row_layout`` (same fields, same bits; ``qc`` is
    follower 1's code in a window-3 step) followed by ``qc2`` (follower 2's code) and ``w3``
    (the step belongs to a window-3 quad)."""
    return data.StructLayout({"a": signed(8), "qc": unsigned(2), "valid": unsigned(1),
                              "mode": mode_layout(), "qc2": unsigned(2), "w3": unsigned(1)})


def step_col_layout() -> data.StructLayout:
    """One column of a step at the array's top edge: K value, follower code, valid bit."""
    return data.StructLayout({"b": signed(8), "kc": unsigned(2), "valid": unsigned(1)})


def baseline_row_layout() -> data.StructLayout:
    """What a BaselinePE of a row receives: the Q value, ``acc`` (the step issues a channel
    and the row unit's tile exists in this pass) and ``first`` (the pass's first step)."""
    return data.StructLayout({"a": signed(8), "acc": unsigned(1), "first": unsigned(1)})


def baseline_col_layout() -> data.StructLayout:
    """What a BaselinePE of a column receives: the K value and ``present`` (a real column
    whose tile exists in this pass)."""
    return data.StructLayout({"b": signed(8), "present": unsigned(1)})


def drain_port_layout(acc_width: int, rows: int, tag_width: int) -> data.StructLayout:
    """One column's read-out of the drain path: row ``row`` of the tile tagged ``tag``."""
    return data.StructLayout({"valid": unsigned(1), "row": unsigned(bits_for(rows - 1)),
                              "data": signed(acc_width), "tag": unsigned(tag_width)})


def linear_mode_layout() -> data.StructLayout:
    """What every PE of a row does in a step: ``kind`` (0 A, 1 F1, 2 F2, 3 no channel),
    ``issue`` (a channel is issued), ``first`` (the step starts a drain wave: the array's
    read-out trigger, named as in the tile mode), ``drain`` (the register it drains, a
    ``Drain`` value), ``clear`` (the block's first step: R0-R2 start from zero)."""
    return data.StructLayout({"kind": unsigned(2), "issue": unsigned(1), "first": unsigned(1),
                              "drain": unsigned(2), "clear": unsigned(1)})


def linear_row_layout() -> data.StructLayout:
    """One row of a step at the array's left edge: lanes ``a0``/``a1`` (int8, per the step
    kind), the row unit's follower codes ``c1``/``c2`` at the channel (3 = ABSENT), ``valid``
    (0: padding row) and the mode."""
    return data.StructLayout({"a0": signed(8), "a1": signed(8), "c1": unsigned(2),
                              "c2": unsigned(2), "valid": unsigned(1),
                              "mode": linear_mode_layout()})


def linear_col_layout() -> data.StructLayout:
    """One column of a step at the array's top edge: the weight and its valid bit."""
    return data.StructLayout({"b": signed(8), "valid": unsigned(1)})
