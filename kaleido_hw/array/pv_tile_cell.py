"""The PE array of the attention datapath with a P @ V mode (``docs/linear.md``, "P @ V in
the ReusePE").

P @ V first ran on arrays of its own (:class:`~kaleido_hw.array.pv_cell.PvArray`), because
the ReusePE multiplies int8 by int8 while P @ V with V reuse multiplies a pre-added sum of
uint8 P (up to 10 bits) by an int8 V. :class:`PvTileCell` folds that mode into the cell of
the engine's arrays, so that one array runs QK^T, linear blocks and P @ V (``engine_pe =
"reuse-pv"`` builds the engines on such arrays):

* the :class:`~kaleido_hw.pe.pe.ReusePE` is built with ``pv=True``: while a step's ``pv`` bit
  is set, its multiplier's column-side halves take the P sums ``x_lo``/``x_hi`` (11 bits
  signed) as row operands, its terms are one bit wider;
* the cell forms ``x_lo``/``x_hi`` with the P @ V cell's two pre-adders
  (:func:`~kaleido_hw.array.pv_cell.pv_pre_add`) and, in P @ V steps, replaces the
  TileDecoder's control word by the P @ V one: the column word's op (MUL or LOW_PAIR, split
  on the column), the product into R0 when the PE works, and at a first step R0 drained and
  restarted (what :class:`~kaleido_hw.array.pv_cell.PvCell` does with its one accumulator);
* :class:`PvPEArray` decodes each column's P @ V word at the top edge
  (:func:`~kaleido_hw.array.pv_cell.pv_column_word`) and adds ``s12 = p1 + p2`` at the left
  edge, as the PvArray does, and otherwise is the :class:`~kaleido_hw.array.array.PEArray`.

The step layouts extend the PEArray's, leading fields first: a row's ``a`` is the query's P
at the unit's anchor (``p0``, read unsigned) in a P @ V step, ``mode.pass_idx`` the step's
kind (0 A, 1 F1, 2 F2, 3 bubble); a column's ``b`` and ``kc`` are ``v0`` and ``c1``. So a
step of either mode enters through the same ports, and modes may alternate from one step to
the next (the ``pv`` bit travels with the row). ``tests/array/test_pv_tile_cell.py`` holds
the array to the PEArray in QK^T steps and to the PvArray in P @ V steps, cycle by cycle.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring

from golden.engine.pv import OP_IDLE
from kaleido_hw.array.array import _ArrayBase, _array_docs
from kaleido_hw.array.layouts import (describe_layout, step_col_layout, step_row_layout,
                                      window3_row_layout)
from kaleido_hw.array.pv_cell import pv_column_word, pv_pre_add
from kaleido_hw.array.tile_cell import TileDecoder, cell_ports, hold_drain
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.pe.layouts import CtrlLayout, Drain, Move, Part, Split
from kaleido_hw.pe.pe import ReusePE


__all__ = ["with_pv_row", "with_s12", "with_pv_col", "with_pv_word", "pv_tile_row_layout",
           "pv_tile_col_layout", "fold_pv", "pv_row_edge", "pv_col_edge", "PvFoldedCell",
           "PvTileCell", "FoldedEdges", "PvPEArray", "Window3PvTileCell", "Window3PvPEArray"]


def _fields(layout) -> dict:
    return {name: field.shape for name, field in layout}


def with_pv_row(layout, p1: bool = True) -> data.StructLayout:
    """A step row ``layout`` (leading fields unchanged) with the P @ V lanes: ``p1`` (unless
    the layout already carries a second row byte that takes it), ``p2`` and ``pv``."""
    extra = {"p1": unsigned(8)} if p1 else {}
    return data.StructLayout({**_fields(layout), **extra, "p2": unsigned(8), "pv": unsigned(1)})


def with_s12(layout) -> data.StructLayout:
    """What a cell receives of its row: the step row plus ``s12 = p1 + p2`` (the left edge's
    one adder per row, so that each pre-adder is a 2-input adder)."""
    return data.StructLayout({**_fields(layout), "s12": unsigned(9)})


def with_pv_col(layout) -> data.StructLayout:
    """A step column ``layout`` (``b`` is ``v0`` and ``kc`` is ``c1`` in a P @ V step) with
    ``v1``, ``v2`` and ``c2``."""
    return data.StructLayout({**_fields(layout), "v1": signed(8), "v2": signed(8),
                              "c2": unsigned(2)})


def with_pv_word(layout) -> data.StructLayout:
    """A cell column ``layout`` (``b`` is the byte the P @ V word selects in a P @ V step)
    with the decoded word: ``op``, ``lo_sel``, ``hi_sel``."""
    return data.StructLayout({**_fields(layout), "op": unsigned(2), "lo_sel": unsigned(3),
                              "hi_sel": unsigned(3)})


def pv_tile_row_layout(window3: bool = False) -> data.StructLayout:
    """One row of a :class:`PvPEArray` step at the left edge: the PEArray's row (``a`` is
    ``p0`` in a P @ V step, ``mode.pass_idx`` its kind), then ``p1``, ``p2`` and ``pv``;
    ``window3``: the Window3PEArray's row (``qc2``, ``w3`` added) in its place."""
    return with_pv_row(window3_row_layout() if window3 else step_row_layout())


def pv_tile_col_layout() -> data.StructLayout:
    """One column of a :class:`PvPEArray` step at the top edge: the PEArray's column, then
    ``v1``, ``v2`` and ``c2``."""
    return with_pv_col(step_col_layout())


def fold_pv(m, pe, row, col, p1, s_ctrl):
    """Wire the P @ V mode into a cell: ``pe`` a ``ReusePE(pv=True)``, ``row``/``col`` the
    cell's inputs (:func:`with_s12`, :func:`with_pv_word`), ``p1`` the row's second P lane,
    ``s_ctrl`` the control word of the cell's own decoder. In a P @ V step (``row.pv``) the
    PE's word is the column word's op (golden OP_MUL 1 is the PE's MUL 1, OP_PAIR 2 its
    LOW_PAIR 3), split on the column, the product into R0 where the PE works (a real row, an
    issued step, an op), and at a first step R0 cleared and drained; ``x_lo``/``x_hi`` are
    the pre-added P lanes the word selects. The caller wires the PE's ``a0``/``a1``/``b``
    (ignored by a P @ V word but for ``b``, which must be the selected byte)."""
    pv_ctrl = Signal(CtrlLayout, name="pv_ctrl")
    work = Signal(name="pv_work")
    m.d.comb += work.eq(row.valid & row.mode.issue & (col.op != OP_IDLE))
    m.d.comb += [
        pv_ctrl.op.as_value().eq(Cat(col.op != OP_IDLE, col.op[1])),
        pv_ctrl.split.eq(Split.COL),
        pv_ctrl.part[0].eq(Mux(work, Part.PROD, Part.NONE)),
        pv_ctrl.part[1].eq(Part.NONE),
        pv_ctrl.part[2].eq(Part.NONE),
        pv_ctrl.clear.eq(Mux(row.mode.first, 0b001, 0)),
        pv_ctrl.move.eq(Move.NONE),
        pv_ctrl.drain.as_value().eq(Mux(row.mode.first, Drain.R0.value, Drain.NONE.value)),
    ]
    p0 = row.a.as_unsigned()
    p1 = p1.as_unsigned()
    m.d.comb += [
        pe.pv.eq(row.pv),
        pe.x_lo.eq(pv_pre_add(col.lo_sel, p0, p1, row.p2, row.s12)),
        pe.x_hi.eq(pv_pre_add(col.hi_sel, p0, p1, row.p2, row.s12)),
        pe.row.ctrl.eq(Mux(row.pv, pv_ctrl.as_value(), s_ctrl.as_value())),
    ]


def pv_row_edge(m, i, step_row, p1, layout):
    """Row ``i``'s cell row (``layout``, :func:`with_s12`): the step row and ``s12``."""
    out = Signal(layout, name=f"row_edge_{i}")
    m.d.comb += [getattr(out, name).eq(getattr(step_row, name))
                 for name, _ in layout if name != "s12"]
    m.d.comb += out.s12.eq(p1.as_unsigned() + step_row.p2)
    return out


def pv_col_edge(m, j, step_col, step_row, base, layout):
    """Column ``j``'s cell column (``layout``, :func:`with_pv_word`): the fields of ``base``
    (the array's own edge decode of the column, or the step column itself) with ``b``
    replaced by the selected byte in a P @ V step, and the P @ V word decoded once per
    column (:func:`~kaleido_hw.array.pv_cell.pv_column_word`)."""
    mode = step_row.mode
    b, looked = pv_column_word(m, j, mode.pass_idx, step_col.valid & mode.issue, step_col.kc,
                               step_col.c2, (step_col.b, step_col.v1, step_col.v2))
    out = Signal(layout, name=f"col_word_{j}")
    m.d.comb += [getattr(out, name).eq(getattr(base, name)) for name, _ in layout
                 if name not in ("b", *looked)]
    m.d.comb += [out.b.eq(Mux(step_row.pv, b, base.b)), out.op.eq(looked["op"]),
                 out.lo_sel.eq(looked["lo_sel"]), out.hi_sel.eq(looked["hi_sel"])]
    return out


class PvFoldedCell(wiring.Component):
    """An array cell with a ReusePE built with the P @ V mode: the shared part of
    :class:`PvTileCell` and :class:`~kaleido_hw.dispatch.pv_merged_cell.PvMergedCell`. Row
    and column data are forwarded registered, undecoded; the PE's drain register holds its
    value (:func:`~kaleido_hw.array.tile_cell.hold_drain`). A subclass gives the layouts
    ``ROW`` / ``COL`` and ``_decode``, its own decoder in front of the PE.

    Parameters
    ----------
    config : KaleidoConfig
        Passed to the PE (``acc_width``).
    """

    ROW = COL = None

    def __init__(self, config: KaleidoConfig):
        self.config = config
        super().__init__(cell_ports(self.ROW, self.COL, config.acc_width))

    def _decode(self, m):
        """Build the cell's decoder; return the QK^T step's ``(ctrl, a0, a1, b)`` for the
        PE and the row field that carries ``p1``."""
        raise NotImplementedError

    def elaborate(self, platform):
        m = Module()
        row, col = self.row, self.col
        ctrl, a0, a1, b, p1 = self._decode(m)
        m.submodules.pe = pe = ReusePE(self.config, pv=True)
        m.d.sync += [self.row_out.eq(row), self.col_out.eq(col)]
        fold_pv(m, pe, row, col, p1, ctrl)
        m.d.comb += [pe.row.a0.eq(a0), pe.row.a1.eq(a1), pe.col.b.eq(b)]
        hold_drain(m, self, pe)
        return m


class PvTileCell(PvFoldedCell):
    """A :class:`~kaleido_hw.array.tile_cell.TileDecoder` and a ReusePE with the P @ V mode
    (module docstring, :func:`fold_pv`): the TileCell of the PEArray with the mode.

    Parameters
    ----------
    config : KaleidoConfig
        Passed to the PE (``acc_width``).
    """

    ROW = with_s12(pv_tile_row_layout())
    COL = with_pv_word(step_col_layout())

    #: The decoder also runs linear window-3 quads (:class:`Window3PvTileCell`).
    WINDOW3 = False

    def _decode(self, m):
        row, col = self.row, self.col
        m.submodules.decoder = dec = TileDecoder(self.config, window3=self.WINDOW3)
        m.d.comb += [dec.mode.eq(row.mode), dec.rvalid.eq(row.valid), dec.cvalid.eq(col.valid),
                     dec.qc.eq(row.qc), dec.kc.eq(col.kc)]
        if self.WINDOW3:
            m.d.comb += [dec.w3.eq(row.w3), dec.qc2.eq(row.qc2)]
        return dec.ctrl, row.a, 0, col.b, row.p1


class Window3PvTileCell(PvTileCell):
    """A :class:`PvTileCell` whose decoder also runs linear window-3 quads: its row is the
    Window3TileCell's (``qc2``, ``w3``) with the P @ V lanes."""
    WINDOW3 = True
    ROW = with_s12(pv_tile_row_layout(window3=True))


def _docs() -> dict:
    docs = _array_docs("PvPEArray")
    row, col = pv_tile_row_layout(), pv_tile_col_layout()
    docs["row"] = (f"the step's R rows, unskewed (row r at bits [r*{row.size}, "
                   f"(r+1)*{row.size})): {describe_layout(row)}; QK^T / linear step (pv 0): "
                   f"as PEArray (qc 3 = ABSENT, p1/p2 ignored); P @ V step (pv 1): a = p0 "
                   f"(uint8), mode.pass_idx = kind (0 A, 1 F1, 2 F2, 3 bubble), qc ignored")
    docs["col"] = (f"the step's C columns, unskewed (column j at bits [j*{col.size}, "
                   f"(j+1)*{col.size})): {describe_layout(col)}; QK^T step: as PEArray (v1, "
                   f"v2, c2 ignored); P @ V step: b = v0, kc = c1 (FULL 0, HALF 1, NONE 2, "
                   f"ABSENT 3)")
    return docs


class FoldedEdges:
    """The array edges of an array with the P @ V mode, mixed in before its array class:
    the left edge adds ``s12 = p1 + p2`` (``p1`` is the row field :attr:`P1_FIELD`), the top
    edge decodes each column's P @ V word after the array's own column edge
    (:meth:`_base_col_edge`, default the step column itself); the cells' layouts are the
    cell class's ``ROW`` / ``COL``."""

    #: The step row's field that carries the P lane ``p1`` in a P @ V step.
    P1_FIELD = "p1"

    def _cell_row_layout(self):
        return self.cell.ROW

    def _row_edge(self, m, i, step_row):
        return pv_row_edge(m, i, step_row, getattr(step_row, self.P1_FIELD), self.cell.ROW)

    def _cell_col_layout(self):
        return self.cell.COL

    def _base_col_edge(self, m, j, step_col, step_row):
        return step_col

    def _col_edge(self, m, j, step_col, step_row):
        base = self._base_col_edge(m, j, step_col, step_row)
        return pv_col_edge(m, j, step_col, step_row, base, self.cell.COL)


class PvPEArray(FoldedEdges, _ArrayBase):
    """R x C :class:`PvTileCell`: the :class:`~kaleido_hw.array.array.PEArray` (QK^T and
    linear steps, same timing and drain read-out) that also runs the
    :class:`~kaleido_hw.array.pv_cell.PvArray`'s P @ V steps, selected per step by the row's
    ``pv`` bit.

    Parameters
    ----------
    config : KaleidoConfig
        ``rows``, ``cols`` and ``acc_width``.
    tag_width : int
        Width of the tag a first step carries to the drain read-out.
    """

    CELL = PvTileCell
    PORT_DOCS = _docs()

    def __init__(self, config: KaleidoConfig, tag_width: int = 8):
        super().__init__(config, tag_width, row_layout=pv_tile_row_layout(self.CELL.WINDOW3),
                         col_layout=pv_tile_col_layout())


class Window3PvPEArray(PvPEArray):
    """A :class:`PvPEArray` of :class:`Window3PvTileCell`: the arrays of a ``reuse-pv``
    build with ``engine_window3`` and no matcher."""
    CELL = Window3PvTileCell
