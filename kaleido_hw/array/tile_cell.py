"""Per-PE decode of the tile schedule (``docs/array.md``, "What a PE does: the decode table").

Every PE of the array receives, with its row data, the pass and step flags that the whole
row shares, and, with its row and column operands, the codes of its own row and column
followers. :class:`TileDecoder` turns these into the :class:`~kaleido_hw.pe.pe.ReusePE` control
word of that PE; :class:`TileCell` is a decoder in front of a ReusePE, with the row and
column data forwarded (registered) *undecoded*, so that each PE decodes with its own codes.
:class:`BaselineCell` is a :class:`~kaleido_hw.pe.pe.BaselinePE` with the little a plain
systolic array forwards (dense only; the ``BaselineArray`` decodes its rows and columns at
the edge with :func:`row_present` / :func:`col_present`).
"""

from __future__ import annotations

from amaranth.hdl import C, Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from golden.array.schedule import Op as GOp
from golden.array.schedule import Sel
from golden.array.window3 import decode3
from kaleido_hw.array.layouts import (ABSENT, baseline_col_layout, baseline_row_layout,
                                      mode_layout, step_col_layout, step_row_layout,
                                      window3_row_layout)
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.pe.layouts import CtrlLayout, Drain, DrainSignature, Move, Op, Part, Split
from kaleido_hw.pe.pe import BaselinePE, ReusePE


__all__ = ["DECODE_TABLE", "PASS_ENTRY", "decode_entry", "decode3_entry", "work_table",
           "cell_ports", "hold_drain", "TileDecoder", "TileCell", "Window3TileCell",
           "row_present", "col_present", "BaselineCell"]

FULL, HALF, NONE = 0, 1, 2
_CODES = (FULL, HALF, NONE, ABSENT)

#: The decode table of ``docs/array.md``: per pass, one line per row-follower code
#: (FULL, HALF, NONE, ABSENT), one entry per column-follower code (same order). An entry is
#: ``idle`` or ``<op> <R0><R1><R2>`` with op ``MUL/c``, ``MUL/r`` (full product split on the
#: column / row), ``LOWc`` (x*lo(y)), ``LOWr`` (lo(x)*y), and per register ``P`` (the
#: product), ``H`` (high part), ``L`` (low part) or ``-``. ``tests/engine/test_engine.py`` checks it
#: against ``golden.array.schedule.decode``, which ``tests/array/test_schedule.py`` proves exact.
DECODE_TABLE = {
    0: ("MUL/r PPP | MUL/c PHP | MUL/r P-P | MUL/r P-P",
        "MUL/r PPH | MUL/c PH- | MUL/r P-H | MUL/r P-H",
        "MUL/r PP- | MUL/c PH- | MUL/r P-- | MUL/r P--",
        "MUL/r PP- | MUL/c PH- | MUL/r P-- | MUL/r P--"),
    1: ("MUL/r -P- | MUL/c LP- | MUL/r PP- | idle",
        "idle      | LOWc P--  | MUL/r PH- | idle",
        "idle      | LOWc P--  | MUL/r P-- | idle",
        "idle      | LOWc P--  | MUL/r P-- | idle"),
    2: ("idle      | idle      | idle      | idle",
        "MUL/r LP- | MUL/c PH- | LOWr P--  | LOWr P--",
        "MUL/r PP- | MUL/c PH- | MUL/r P-- | MUL/r P--",
        "idle      | idle      | idle      | idle"),
    3: ("idle      | idle      | idle      | idle",
        "idle      | LOWc P--  | LOWr P--  | idle",
        "idle      | LOWc P--  | MUL/r P-- | idle",
        "idle      | idle      | idle      | idle"),
}

#: op text -> PE split. Every entry is a MUL for the PE: ``LOWc`` (``x*lo(y)``) is the low
#: half ``t0`` of a column-split MUL, ``LOWr`` (``lo(x)*y``) that of a row-split MUL.
_SPLITS = {"MUL/c": Split.COL, "MUL/r": Split.ROW, "LOWc": Split.COL, "LOWr": Split.ROW}
#: register letter -> PE part (``L`` and a LOW entry's ``P`` are both the term t0).
_PARTS_MUL = {"P": Part.PROD, "H": Part.HIGH, "L": Part.LOW, "-": Part.NONE}
_PARTS_LOW = {"P": Part.LOW, "-": Part.NONE}

#: First step of a pass: (clear mask, move) that brings the pass's tile into R0
#: (``docs/array.md``, "Passes and registers"); every first step also drains R0.
PASS_ENTRY = {0: (0b111, Move.NONE), 1: (0, Move.R1_TO_R0), 2: (0, Move.R2_TO_R0),
              3: (0, Move.R1_TO_R0)}


def decode_entry(pass_idx: int, qc: int, kc: int):
    """``(op, split, (part0, part1, part2))`` of the PE: op MUL, or ``Op.IDLE`` (no part)
    for an idle entry. The split of every entry that works is COL exactly when the column
    follower is HALF (``tests/engine/test_engine.py`` checks it), which the decoder uses."""
    text = DECODE_TABLE[pass_idx][_CODES.index(qc)].split("|")[_CODES.index(kc)].split()
    if text == ["idle"]:
        return Op.IDLE, Split.COL, (Part.NONE,) * 3
    parts = _PARTS_LOW if text[0].startswith("LOW") else _PARTS_MUL
    return Op.MUL, _SPLITS[text[0]], tuple(parts[ch] for ch in text[1])


#: golden select -> PE part, for a MUL and for a LOW entry of the golden tables.
_SEL_PARTS_MUL = {Sel.NONE: Part.NONE, Sel.PROD: Part.PROD, Sel.HIGH: Part.HIGH,
                  Sel.LOWPART: Part.LOW}
_SEL_PARTS_LOW = {Sel.NONE: Part.NONE, Sel.PROD: Part.LOW}


def decode3_entry(pass_idx: int, c1: int, c2: int):
    """``(op, split, parts)`` of the PE in pass ``pass_idx`` (0-3) of a linear window-3 quad
    (``golden.array.window3.decode3``; pass 3 does not run and is idle), as
    :func:`decode_entry`: every entry that works is a row-split MUL (``LOWr`` is the low
    half of one)."""
    if pass_idx == 3:
        return Op.IDLE, Split.ROW, (Part.NONE,) * 3
    u = decode3(pass_idx, c1, c2)
    if u.op == GOp.IDLE:
        return Op.IDLE, Split.ROW, (Part.NONE,) * 3
    parts = _SEL_PARTS_LOW if u.op == GOp.LOW_ROW else _SEL_PARTS_MUL
    return Op.MUL, Split.ROW, tuple(parts[int(s)] for s in u.sel)


def work_table(pass_idx: int):
    """``{(qc, kc)}``: the code pairs whose entry in ``pass_idx`` is not idle."""
    return {(qc, kc) for qc in _CODES for kc in _CODES
            if decode_entry(pass_idx, qc, kc)[0] != Op.IDLE}


class TileDecoder(wiring.Component):
    """Combinational decode of one PE's step into its ReusePE control word.

    Parameters
    ----------
    config : KaleidoConfig
        Not used for sizes (the decoder is the same for every configuration); taken so that
        every block is built the same way.

    Inputs: ``mode`` (pass, first step of the pass, channel issued), ``rvalid``/``cvalid``
    (the PE's row and column units are real, not padding), ``qc``/``kc`` (codes of the row
    and column followers, 3 = ABSENT). The PE computes the table entry of (pass, qc, kc)
    when the step issues a channel and both units are real, else it takes nothing. A first
    step additionally drains R0 and clears/moves the registers as ``PASS_ENTRY`` says (also
    for a bubble step, and in padding PEs, where it is harmless).

    ``window3``: the decoder also runs linear window-3 quads (``golden.array.window3``):
    inputs ``w3`` (the row's step belongs to one) and ``qc2`` (the row's second follower
    code); with ``w3`` the table is that of :func:`decode3_entry`, indexed by (pass, ``qc``
    = follower 1's code, ``qc2``), and the split is ROW.

    Only the register parts come from the table. The op is always MUL (see ``_SPLITS``) and
    the split is COL exactly when ``kc`` is HALF (and the step is not a window-3 one), so the operand routing in front of the
    multiplier waits for one code compare, not for the table lookup and the work gating:
    those only select what the registers take, in parallel with the multiplier.
    """

    def __init__(self, config: KaleidoConfig | None = None, window3: bool = False):
        self.window3 = window3
        ports = {
            "mode": In(mode_layout()),
            "rvalid": In(1),
            "cvalid": In(1),
            "qc": In(2),
            "kc": In(2),
            "ctrl": Out(CtrlLayout),
        }
        if window3:
            ports.update({"w3": In(1), "qc2": In(2)})
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        ctrl, mode = self.ctrl, self.mode
        # The table as constants indexed by (pass, qc, kc): plain expressions, no process
        # (a Verilog `always @*` whose inputs never change after time 0 would never run in an
        # event-driven simulator, leaving the PE's control word undefined after reset).
        # entry i = the index value i = kc | qc << 2 | pass << 4 [| w3 << 6: the window-3
        # table, (c2, c1, pass) in the places of (kc, qc, pass)]
        entries = [decode_entry(p, qc, kc) for p in range(4) for qc in _CODES for kc in _CODES]
        col_half = self.kc == HALF
        if self.window3:
            # A window-3 row's second follower code takes the column code's place: a
            # window-3 column is a weight row without follower (ABSENT) and splits nothing.
            index = Cat(Mux(self.w3, self.qc2, self.kc), self.qc, mode.pass_idx, self.w3)
            entries += [decode3_entry(p, c1, c2)
                        for p in range(4) for c1 in _CODES for c2 in _CODES]
            col_half = col_half & ~self.w3
        else:
            index = Cat(self.kc, self.qc, mode.pass_idx)
        size = 2 * len(entries)
        work = Signal()
        m.d.comb += work.eq(mode.issue & self.rvalid & self.cvalid)
        for k in range(3):
            table = sum(e[2][k].value << (2 * i) for i, e in enumerate(entries))
            part = Signal(2, name=f"part{k}")
            m.d.comb += part.eq(Mux(work, (Const(table, size) >> Cat(C(0, 1), index))[:2], 0))
            m.d.comb += ctrl.part[k].as_value().eq(part)
        m.d.comb += [ctrl.op.eq(Op.MUL),
                     ctrl.split.eq(Mux(col_half, Split.COL, Split.ROW))]
        clears = sum(PASS_ENTRY[p][0] << (3 * p) for p in range(4))
        moves = sum(PASS_ENTRY[p][1].value << (2 * p) for p in range(4))
        m.d.comb += [
            ctrl.clear.eq(Mux(mode.first, (Const(clears, 12) >> (mode.pass_idx * 3))[:3], 0)),
            ctrl.move.as_value().eq(Mux(mode.first,
                                        (Const(moves, 8) >> Cat(C(0, 1), mode.pass_idx))[:2], 0)),
            ctrl.drain.as_value().eq(Mux(mode.first, Drain.R0.value, Drain.NONE.value)),
        ]
        return m


def cell_ports(row_layout, col_layout, acc_width: int) -> dict:
    """The ports of an array cell: row and column data in (``row``, ``col``) and forwarded
    registered (``row_out``, ``col_out``), the PE's drain register (``drain``) and its busy
    flag (``busy``)."""
    return {
        "row": In(row_layout),
        "col": In(col_layout),
        "row_out": Out(row_layout),
        "col_out": Out(col_layout),
        "drain": Out(DrainSignature(acc_width)),
        "busy": Out(1),
    }


def hold_drain(m, cell, pe):
    """Wire the PE's drain register to hold its value (``drain_in = drain_out``: a first step
    loads it, the array's column read-out picks it up within ``rows`` cycles) and show it and
    the PE's busy flag on the cell's ports."""
    m.d.comb += [
        pe.drain_in.valid.eq(pe.drain_out.valid),
        pe.drain_in.data.eq(pe.drain_out.data),
        cell.drain.valid.eq(pe.drain_out.valid),
        cell.drain.data.eq(pe.drain_out.data),
        cell.busy.eq(pe.busy),
    ]


class _CellBase(wiring.Component):
    """Ports shared by both cells: undecoded row/column data in and (registered) out, the
    PE's drain register, and its busy flag."""

    def _ports(self, acc_width):
        return cell_ports(step_row_layout(), step_col_layout(), acc_width)

    def _forward(self, m):
        m.d.sync += [self.row_out.eq(self.row), self.col_out.eq(self.col)]


class TileCell(_CellBase):
    """A :class:`TileDecoder` in front of a :class:`~kaleido_hw.pe.pe.ReusePE`.

    Parameters
    ----------
    config : KaleidoConfig
        Passed to the PE (``acc_width``).

    The decoder sits between the registers that hold this PE's inputs (the neighbours'
    forwarding registers, or the array's skew registers) and the PE; the cell forwards the
    undecoded row and column data itself. The PE's drain register is wired to hold its
    value (``drain_in = drain_out``): a first step loads it with R0, and the array's column
    read-out port picks it up within the next ``rows`` cycles.
    """

    def __init__(self, config: KaleidoConfig):
        self.config = config
        super().__init__(self._ports(config.acc_width))

    #: The decoder also runs linear window-3 quads (:class:`Window3TileCell`).
    WINDOW3 = False

    def elaborate(self, platform):
        m = Module()
        m.submodules.decoder = dec = TileDecoder(self.config, window3=self.WINDOW3)
        m.submodules.pe = pe = ReusePE(self.config)
        self._forward(m)
        if self.WINDOW3:
            m.d.comb += [dec.qc2.eq(self.row.qc2), dec.w3.eq(self.row.w3)]
        m.d.comb += [
            dec.mode.eq(self.row.mode), dec.rvalid.eq(self.row.valid),
            dec.cvalid.eq(self.col.valid), dec.qc.eq(self.row.qc), dec.kc.eq(self.col.kc),
            pe.row.a0.eq(self.row.a),
            pe.row.a1.eq(0),
            pe.row.ctrl.eq(dec.ctrl),
            pe.col.b.eq(self.col.b),
        ]
        hold_drain(m, self, pe)
        return m


class Window3TileCell(TileCell):
    """A :class:`TileCell` that also runs linear window-3 quads (``golden.array.window3``):
    its row is :func:`~kaleido_hw.array.layouts.window3_row_layout` and its decoder the
    :class:`TileDecoder` with ``window3`` (a step with ``w3`` decodes (pass, ``qc``, ``qc2``)
    by the window-3 table; a step without is a TileCell step).

    Parameters
    ----------
    config : KaleidoConfig
        Passed to the PE (``acc_width``).
    """

    WINDOW3 = True

    def _ports(self, acc_width):
        return cell_ports(window3_row_layout(), step_col_layout(), acc_width)


def row_present(pass_idx, qc):
    """The row's tile exists in this pass: passes 2 and 3 need a Q follower."""
    return (pass_idx[1] == 0) | (qc != ABSENT)


def col_present(pass_idx, kc):
    """The column's tile exists in this pass: passes 1 and 3 need a K follower."""
    return (pass_idx[0] == 0) | (kc != ABSENT)


class BaselineCell(wiring.Component):
    """A :class:`~kaleido_hw.pe.pe.BaselinePE` with what a plain systolic array forwards: the
    Q value with ``acc``/``first`` along the row, the K value with ``present`` down the
    column (``BaselineArray`` derives them at its edge, once per row and column, from the
    step: a row accumulates when a channel issues, the row is real and its tile exists in
    the pass; a column is present when it is real and its tile exists). The PE accumulates
    the plain product when ``acc & present``; a first step drains R0 and starts R0 from 0.
    This computes every tile of a dense (reuse off) schedule; it ignores FULL/HALF codes.

    Parameters
    ----------
    config : KaleidoConfig
        Passed to the PE (``acc_width``).
    """

    def __init__(self, config: KaleidoConfig):
        self.config = config
        super().__init__(cell_ports(baseline_row_layout(), baseline_col_layout(),
                                    config.acc_width))

    def elaborate(self, platform):
        m = Module()
        m.submodules.pe = pe = BaselinePE(self.config)
        m.d.sync += [self.row_out.eq(self.row), self.col_out.eq(self.col)]
        m.d.comb += [
            pe.row.a0.eq(self.row.a),
            pe.row.ctrl.acc.eq(self.row.acc & self.col.present),
            pe.row.ctrl.clear.eq(self.row.first),
            pe.row.ctrl.drain.eq(self.row.first),
            pe.col.b.eq(self.col.b),
        ]
        hold_drain(m, self, pe)
        return m
