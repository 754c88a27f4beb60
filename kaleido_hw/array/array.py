"""The output-stationary PE array of the engines (``docs/array.md``, "Drain path and
its cost").

:class:`PEArray` is R x C :class:`~kaleido_hw.array.tile_cell.TileCell` (decoder + ReusePE);
:class:`BaselineArray` the same with :class:`~kaleido_hw.array.tile_cell.BaselineCell`
(BaselinePE), the dense reference, with the same ports and timing. The BaselineArray decodes
each row and column once, at its edge (a plain systolic array forwards no reuse codes).

Data flow. A *step* (one channel of one pass, or a bubble) enters all rows and columns in
the same cycle, unskewed; row r passes r skew registers and column j passes j, so PE (r, j)
executes the step r + j cycles after it entered. Rows move right and columns down through
the cells' forwarding registers, each cell decoding the step with its own codes.

Drain path. The first step of a pass loads every PE's drain register with R0 (the tile the
previous pass finished); the register then holds (``drain_in = drain_out``). Column j has one
read-out port: ``j + 1`` cycles after the first step entered, it takes row 0, then one row
per cycle, and presents them registered on ``drain[j]`` with the step's ``tag`` (the
accumulation-buffer address information). PE (i, j)'s value is ready at ``i + j + 1`` and
read at ``j + 1 + i``; it must survive until then, so first steps must be at least R cycles
apart (a pass lasts at least R steps). A value reaches ``drain[j]`` ``i + j + 2`` cycles
after its first step entered the array.
"""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from kaleido_hw.array.layouts import (baseline_col_layout, baseline_row_layout, describe_layout,
                                      drain_port_layout, step_col_layout, step_row_layout,
                                      window3_row_layout)
from kaleido_hw.array.tile_cell import (BaselineCell, TileCell, Window3TileCell, col_present,
                                        row_present)
from kaleido_hw.bitops import bits_for, popcount
from kaleido_hw.config import KaleidoConfig


__all__ = ["PEArray", "Window3PEArray", "BaselineArray"]


def _array_docs(cls_name: str) -> dict:
    row, col = step_row_layout(), step_col_layout()
    drain = drain_port_layout(24, 4, 8)
    return {
        "row": (f"the step's R rows, unskewed (row r at bits [r*{row.size}, (r+1)*{row.size})): "
                f"{describe_layout(row)}; qc 3 = ABSENT"),
        "col": (f"the step's C columns, unskewed (column j at bits [j*{col.size}, "
                f"(j+1)*{col.size})): {describe_layout(col)}; kc 3 = ABSENT"),
        "tag": "tag of the step (tag_width bits), read out with the tile its first step drains",
        "drain": ("per column j a read-out record, column 0 at bit 0: valid, row (index i), data "
                  "(R0 of PE (i, j), signed acc_width), tag; " + describe_layout(drain).replace(
                      "[", "e.g. [") + " for acc_width 24, 4 rows, tag_width 8"),
        "busy_count": f"{cls_name}: number of PEs that multiplied in the previous cycle",
    }


class _ArrayBase(wiring.Component):
    """Shared structure of both arrays; subclasses choose the cell class."""

    CELL = None

    def __init__(self, config: KaleidoConfig, tag_width: int = 8, cell=None,
                 row_layout=None, col_layout=None):
        self.config = config
        # The cell class and its step layouts (the multi-array engine's MergedCell has wider
        # ones whose leading fields are the TileCell's).
        self.cell = cell or self.CELL
        self.row_layout = row_layout or step_row_layout()
        self.col_layout = col_layout or step_col_layout()
        self.rows, self.cols = R, C = config.rows, config.cols
        self.acc_width = config.acc_width
        self.tag_width = tag_width
        super().__init__({
            "row": In(data.ArrayLayout(self.row_layout, R)),
            "col": In(data.ArrayLayout(self.col_layout, C)),
            "tag": In(tag_width),
            "drain": Out(data.ArrayLayout(drain_port_layout(config.acc_width, R, tag_width), C)),
            "busy_count": Out(bits_for(R * C)),
        })

    def shared_module_key(self):
        """Equal for arrays that are the same hardware (``kaleido_hw.flow.shared_modules``):
        the configuration, the cell and the step layouts and tag width (the signature)."""
        return self.config, self.cell, repr(self.signature)

    def elaborate(self, platform):
        m = Module()
        R, C = self.rows, self.cols
        cells = [[self.cell(self.config) for _ in range(C)] for _ in range(R)]
        for i in range(R):
            for j in range(C):
                m.submodules[f"pe_{i}_{j}"] = cells[i][j]

        # Edge: what the cells need of each row and column (computed once per row/column),
        # then the skew: row r is delayed r cycles, column j is delayed j cycles.
        step = self.row[0]         # every row of a step carries the same mode (and slot)
        for i in range(R):
            src = self._row_edge(m, i, self.row[i])
            for s in range(i):
                reg = Signal(self._cell_row_layout(), name=f"row_skew_{i}_{s}")
                m.d.sync += reg.eq(src)
                src = reg
            m.d.comb += cells[i][0].row.eq(src)
        for j in range(C):
            src = self._col_edge(m, j, self.col[j], step)
            for s in range(j):
                reg = Signal(self._cell_col_layout(), name=f"col_skew_{j}_{s}")
                m.d.sync += reg.eq(src)
                src = reg
            m.d.comb += cells[0][j].col.eq(src)
        for i in range(R):
            for j in range(C):
                if j + 1 < C:
                    m.d.comb += cells[i][j + 1].row.eq(cells[i][j].row_out)
                if i + 1 < R:
                    m.d.comb += cells[i + 1][j].col.eq(cells[i][j].col_out)

        # Drain read-out: the first-step flag and the tag travel along a register chain,
        # one stage per column; column j starts reading when its stage fires.
        first = Signal(name="drain_first_0")
        tag = Signal(self.tag_width, name="drain_tag_0")
        m.d.sync += [first.eq(self.row[0].mode.first), tag.eq(self.tag)]
        rw = bits_for(R - 1)
        for j in range(C):
            if j:
                nf = Signal(name=f"drain_first_{j}")
                nt = Signal(self.tag_width, name=f"drain_tag_{j}")
                m.d.sync += [nf.eq(first), nt.eq(tag)]
                first, tag = nf, nt
            held_tag = Signal(self.tag_width, name=f"drain_held_tag_{j}")
            count = Signal(rw, name=f"drain_row_{j}")
            active = Signal(name=f"drain_active_{j}")
            values = Array(cells[i][j].drain.data for i in range(R))
            out = self.drain[j]
            row_now = Signal(rw, name=f"drain_now_{j}")
            m.d.comb += row_now.eq(0)
            with m.If(first):
                m.d.sync += [held_tag.eq(tag), out.valid.eq(1), out.row.eq(0),
                             out.data.eq(values[0]), out.tag.eq(tag)]
                if R > 1:
                    m.d.sync += [count.eq(1), active.eq(1)]
            with m.Elif(active):
                m.d.sync += [out.valid.eq(1), out.row.eq(count), out.data.eq(values[count]),
                             out.tag.eq(held_tag), count.eq(count + 1)]
                with m.If(count == R - 1):
                    m.d.sync += active.eq(0)
            with m.Else():
                m.d.sync += out.valid.eq(0)

        m.d.comb += self.busy_count.eq(
            popcount(Cat(*(cells[i][j].busy for i in range(R) for j in range(C)))))
        return m

    def _cell_row_layout(self):
        """Layout of what a cell receives of a row (default: the step row itself)."""
        return self.row_layout

    def _cell_col_layout(self):
        """Layout of what a cell receives of a column (default: the step column itself)."""
        return self.col_layout

    def _row_edge(self, m, i, step_row):
        """What the cells of row ``i`` receive of the step's row (default: all of it)."""
        return step_row

    def _col_edge(self, m, j, step_col, step_row):
        """What the cells of column ``j`` receive of the step's column (default: all of it);
        ``step_row`` is the step's row 0 (its mode, and a matcher slot's ``slot`` bit, are the
        same in every row)."""
        return step_col


class PEArray(_ArrayBase):
    """R x C reuse-aware PEs (``config.rows`` x ``config.cols``), output-stationary.

    Parameters
    ----------
    config : KaleidoConfig
        ``rows``, ``cols`` and ``acc_width``.
    tag_width : int
        Width of the tag that a first step carries to the drain read-out (the engine passes
        its accumulation-buffer address information; 8 for the standalone top).
    cell, row_layout, col_layout : optional
        The cell class and its row / column step layouts (default TileCell with
        ``step_row_layout`` / ``step_col_layout``; the KaleidoEngine's matcher passes
        :class:`~kaleido_hw.dispatch.merged_cell.MergedCell` with its merged layouts).

    Ports: ``row`` (R step rows), ``col`` (C step columns), ``tag``; ``drain`` (C read-out
    records); ``busy_count``. See the module docstring for the timing.
    """

    CELL = TileCell
    PORT_DOCS = _array_docs("PEArray")


class Window3PEArray(PEArray):
    """A :class:`PEArray` of :class:`~kaleido_hw.array.tile_cell.Window3TileCell`: it also
    runs linear window-3 quads (``golden.array.window3``; rows
    :func:`~kaleido_hw.array.layouts.window3_row_layout`, ``w3`` set in every row of such a
    step). Same ports and timing otherwise.

    Parameters
    ----------
    config : KaleidoConfig
        ``rows``, ``cols`` and ``acc_width``.
    tag_width : int
        As for :class:`PEArray`.
    """

    def __init__(self, config: KaleidoConfig, tag_width: int = 8):
        super().__init__(config, tag_width, cell=Window3TileCell,
                         row_layout=window3_row_layout())


class BaselineArray(_ArrayBase):
    """R x C plain 8-bit MACs with the ports and timing of :class:`PEArray`: the dense
    reference (it computes a reuse-off schedule; see
    :class:`~kaleido_hw.array.tile_cell.BaselineCell`).

    Parameters
    ----------
    config : KaleidoConfig
        ``rows``, ``cols`` and ``acc_width``.
    tag_width : int
        As for :class:`PEArray`.
    """

    CELL = BaselineCell
    PORT_DOCS = _array_docs("BaselineArray")

    # A plain systolic array carries no reuse codes through its PEs: the edge turns each
    # row's step into "accumulate / first step" and each column's into "present"
    # (row_present / col_present), once per row and column, so a cell forwards 10 + 9 bits.
    def _cell_row_layout(self):
        return baseline_row_layout()

    def _cell_col_layout(self):
        return baseline_col_layout()

    def _row_edge(self, m, i, step_row):
        edge = Signal(baseline_row_layout(), name=f"row_edge_{i}")
        m.d.comb += [edge.a.eq(step_row.a), edge.first.eq(step_row.mode.first),
                     edge.acc.eq(step_row.mode.issue & step_row.valid
                                 & row_present(step_row.mode.pass_idx, step_row.qc))]
        return edge

    def _col_edge(self, m, j, step_col, step_row):
        edge = Signal(baseline_col_layout(), name=f"col_edge_{j}")
        m.d.comb += [edge.b.eq(step_col.b),
                     edge.present.eq(step_col.valid
                                     & col_present(step_row.mode.pass_idx, step_col.kc))]
        return edge
