"""The PE array of the KaleidoEngine with the matcher, as a top of its own (``merged_array``).

:class:`MergedArray` is the :class:`~kaleido_hw.array.array.PEArray` that the engine builds per
array when ``engine_dispatcher`` is "matcher" or "full": R x C
:class:`~kaleido_hw.dispatch.merged_cell.MergedCell`\\ s (a decoder that also executes MergeMatcher
slots in pass 3, in front of a ReusePE) with the merged row and column step layouts. It is
generated on its own so that its area and critical path can be measured next to
``pe_array`` and ``baseline_array`` (the iso-area report, ``kaleido-hw report --only
iso-area``); its tag is the standalone arrays' 8 bits (the engine passes its own tag width).
"""

from __future__ import annotations

from kaleido_hw.array.array import PEArray
from kaleido_hw.array.layouts import describe_layout, drain_port_layout
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.dispatch.merged_cell import (MergedCell, Window3MergedCell,
                                             merged_cell_col_layout, merged_col_layout,
                                             merged_column_edge, merged_row_layout)


__all__ = ["MergedArray", "Window3MergedArray"]


def _docs() -> dict:
    row, col = merged_row_layout(), merged_col_layout()
    drain = drain_port_layout(24, 4, 8)
    return {
        "row": (f"the step's R rows, unskewed (row r at bits [r*{row.size}, (r+1)*{row.size})): "
                f"{describe_layout(row)}; qc/qc1 3 = ABSENT; a1, qc1 and slot carry the second "
                f"channel of a matcher slot"),
        "col": (f"the step's C columns, unskewed (column j at bits [j*{col.size}, "
                f"(j+1)*{col.size})): {describe_layout(col)}; kc/kc1 3 = ABSENT; sel says what "
                f"the column does in a slot (0 none, byte of A or B, low nibbles)"),
        "tag": "tag of the step (8 bits), read out with the tile its first step drains",
        "drain": ("per column j a read-out record, column 0 at bit 0: valid, row (index i), data "
                  "(R0 of PE (i, j), signed acc_width), tag; " + describe_layout(drain).replace(
                      "[", "e.g. [") + " for acc_width 24, 4 rows"),
        "busy_count": "MergedArray: number of PEs that took a term in the previous cycle",
    }


class MergedArray(PEArray):
    """R x C MergedCells (decoder + ReusePE) with the merged step layouts: the KaleidoEngine's
    array when the matcher is built. Each column's step is decoded once at the edge
    (:func:`~kaleido_hw.dispatch.merged_cell.merged_column_edge`) and travels down the column
    decoded.

    Parameters
    ----------
    config : KaleidoConfig
        ``rows``, ``cols`` and ``acc_width``.
    tag_width : int
        Width of the drain tag (8 for the standalone top).
    """

    PORT_DOCS = _docs()
    #: The cell (:class:`Window3MergedArray`: with the window-3 table).
    CELL = MergedCell

    def __init__(self, config: KaleidoConfig, tag_width: int = 8):
        super().__init__(config, tag_width=tag_width, cell=self.CELL,
                         row_layout=merged_row_layout(self.CELL.WINDOW3),
                         col_layout=merged_col_layout())

    # The column's slot decode (which code the table reads, byte / nibble / swap, the column
    # half of the LOWc rule) is the same for all R cells of a column: done once here, before
    # the skew registers, so the cells start from registered bits.
    def _cell_col_layout(self):
        return merged_cell_col_layout()

    def _col_edge(self, m, j, step_col, step_row):
        return merged_column_edge(m, step_col, step_row.slot, name=f"col_edge_{j}")


class Window3MergedArray(MergedArray):
    """A :class:`MergedArray` of Window3MergedCells
    (:class:`~kaleido_hw.dispatch.merged_cell.Window3MergedCell`): the KaleidoEngine's array
    with the matcher in a build with ``engine_window3``; a row's ``w3`` bit selects the
    window-3 table (its ``qc1`` the second follower's code)."""
    CELL = Window3MergedCell
