"""The KaleidoEngine's matcher array with the P @ V mode folded in (``docs/linear.md``, "P @ V
in the ReusePE"): the array the default engine core (``engine_dispatcher = "full"``) would run
QK^T, linear blocks and P @ V on.

:class:`PvMergedCell` is the :class:`~kaleido_hw.dispatch.merged_cell.MergedCell` (a decoder
that also executes MergeMatcher slots, in front of a ReusePE) with the ReusePE built
``pv=True`` and the P @ V word folded in by :func:`~kaleido_hw.array.pv_tile_cell.fold_pv`.
The matcher's second row byte ``a1`` carries the P lane ``p1`` in a P @ V step, so the row
adds only ``p2``, ``pv`` and the edge's ``s12``. :class:`PvMergedArray` is the
:class:`~kaleido_hw.dispatch.merged_array.MergedArray` with the P @ V column word decoded at the
top edge next to the merged column edge. ``tests/array/test_pv_tile_cell.py`` holds it to the
MergedArray in QK^T steps (matcher slots included) and to the PvArray in P @ V steps.
"""

from __future__ import annotations

from kaleido_hw.array.array import PEArray
from kaleido_hw.array.pv_tile_cell import (FoldedEdges, PvFoldedCell, with_pv_col, with_pv_row,
                                           with_pv_word, with_s12)
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.dispatch.merged_array import MergedArray
from kaleido_hw.dispatch.merged_cell import (MergedDecoder, merged_cell_col_layout,
                                             merged_col_layout, merged_column_edge,
                                             merged_row_layout)


__all__ = ["pv_merged_row_layout", "pv_merged_col_layout", "PvMergedCell", "PvMergedArray",
           "Window3PvMergedCell", "Window3PvMergedArray"]


def pv_merged_row_layout(window3: bool = False):
    """One row of a step: the merged row (``a`` is ``p0`` and ``a1`` is ``p1`` in a P @ V
    step, ``mode.pass_idx`` its kind; ``window3``: with ``w3``), then ``p2`` and ``pv``."""
    return with_pv_row(merged_row_layout(window3), p1=False)


def pv_merged_col_layout():
    """One column of a step: the merged column (``b`` is ``v0`` and ``kc`` is ``c1`` in a
    P @ V step), then ``v1``, ``v2`` and ``c2``."""
    return with_pv_col(merged_col_layout())


class PvMergedCell(PvFoldedCell):
    """A :class:`~kaleido_hw.dispatch.merged_cell.MergedDecoder` and a ReusePE with the P @ V
    mode (:class:`~kaleido_hw.array.pv_tile_cell.PvFoldedCell`); ports as the MergedCell's
    with the P @ V fields.

    Parameters
    ----------
    config : KaleidoConfig
        Passed to the PE (``acc_width``).
    """

    ROW = with_s12(pv_merged_row_layout())
    COL = with_pv_word(merged_cell_col_layout())
    #: The decoder also runs linear window-3 quads (:class:`Window3PvMergedCell`).
    WINDOW3 = False

    def _decode(self, m):
        m.submodules.decoder = dec = MergedDecoder(self.config, window3=self.WINDOW3)
        # The merged fields lead both layouts.
        m.d.comb += [dec.row.eq(self.row.as_value()[:merged_row_layout(self.WINDOW3).size]),
                     dec.col.eq(self.col.as_value()[:merged_cell_col_layout().size])]
        return dec.ctrl, dec.a0, dec.a1, dec.b, self.row.a1


def _docs() -> dict:
    docs = dict(MergedArray.PORT_DOCS)
    row, col = pv_merged_row_layout(), pv_merged_col_layout()
    docs["row"] = (f"the step's R rows, unskewed (row r at bits [r*{row.size}, "
                   f"(r+1)*{row.size})): {merged_row_layout().size} bits as MergedArray, then "
                   f"p2 and pv; P @ V step (pv 1): a = p0, a1 = p1 (uint8), mode.pass_idx = "
                   f"kind (0 A, 1 F1, 2 F2, 3 bubble); qc, qc1, slot ignored")
    docs["col"] = (f"the step's C columns, unskewed (column j at bits [j*{col.size}, "
                   f"(j+1)*{col.size})): {merged_col_layout().size} bits as MergedArray, then "
                   f"v1, v2, c2; P @ V step: b = v0, kc = c1 (FULL 0, HALF 1, NONE 2, ABSENT "
                   f"3); kc1, sel ignored")
    docs["busy_count"] = "PvMergedArray: number of PEs that took a term in the previous cycle"
    return docs


class PvMergedArray(FoldedEdges, PEArray):
    """R x C :class:`PvMergedCell`: the MergedArray (QK^T and linear steps, matcher slots,
    same timing and drain read-out) that also runs the PvArray's P @ V steps, selected per
    step by the row's ``pv`` bit.

    Parameters
    ----------
    config : KaleidoConfig
        ``rows``, ``cols`` and ``acc_width``.
    tag_width : int
        Width of the drain tag (8 for the standalone top).
    """

    PORT_DOCS = _docs()
    P1_FIELD = "a1"              # the slot's second row byte
    CELL = PvMergedCell

    def __init__(self, config: KaleidoConfig, tag_width: int = 8):
        super().__init__(config, tag_width=tag_width, cell=self.CELL,
                         row_layout=pv_merged_row_layout(self.CELL.WINDOW3),
                         col_layout=pv_merged_col_layout())

    def _base_col_edge(self, m, j, step_col, step_row):
        return merged_column_edge(m, step_col, step_row.slot, name=f"col_edge_{j}")


class Window3PvMergedCell(PvMergedCell):
    """A :class:`PvMergedCell` whose decoder also runs linear window-3 quads (the
    Window3MergedCell's: ``w3`` in the row, the second follower's code in ``qc1``)."""
    WINDOW3 = True
    ROW = with_s12(pv_merged_row_layout(window3=True))


class Window3PvMergedArray(PvMergedArray):
    """A :class:`PvMergedArray` of :class:`Window3PvMergedCell`: the arrays of a ``reuse-pv``
    build with ``engine_window3`` and the matcher (the default engine core's with the
    attention path)."""
    CELL = Window3PvMergedCell
