"""The P @ V mode of the PE array (``docs/linear.md``, "P @ V on the PE arrays").

``O = P @ V_eff`` output stationary: PE (i, j) accumulates ``O[query, channel]`` in one
register. In a step of unit u every row carries the three P lanes ``p0, p1, p2`` of its query
(the unit's anchor and followers), every column the unit's three V values of its channel and
their follower codes ``c1``/``c2``. What a PE does depends on its *column's* codes only, so
the word is decoded once per column at the top edge (:class:`PvArray`, from
``golden.engine.pv.PV_DECODE``) and travels down the column with the byte ``b`` it selects;
the cell (:class:`PvCell`) has no decoder:

* pre-adders: ``x_lo`` / ``x_hi`` = sum of the p lanes selected by ``lo_sel`` / ``hi_sel``
  (unsigned, 10 bits: up to 3 * 255); the left edge adds a fourth lane ``s12 = p1 + p2``
  once per row, so that each pre-adder is one 2-input adder (``p0`` or 0, plus ``s12``,
  ``p1``, ``p2`` or 0);
* the ReusePE's two 4-bit multiplier halves with the row operand widened to 10 unsigned bits:
  ``t0 = x_lo * b[3:0]``; ``t1 = 16 * x_hi * signed(b[7:4])`` (MUL) or ``x_hi * b[7:4]``
  (PAIR: a second unsigned low nibble);
* one accumulator R0 (``acc_width``, wrapping) and a drain register: a step with
  ``mode.first`` loads the drain register with R0 and restarts R0 from the step's term.
  R0 takes ``base + t0 + t1`` in one expression (base R0 or 0), not ``t0 + t1`` first: the
  synthesis then merges the two additions (0.9 ns shorter in the 4 x 4 array).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from golden.engine.pv import OP_IDLE, OP_MUL, PV_DECODE
from kaleido_hw.array.array import _ArrayBase
from kaleido_hw.array.layouts import describe_layout, drain_port_layout
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.pe.layouts import DrainSignature


__all__ = ["pv_mode_layout", "pv_row_layout", "pv_cell_row_layout", "pv_col_layout",
           "pv_cell_col_layout",
           "pv_decode_tables", "pv_pre_add", "pv_column_word", "PvCell", "PvArray"]

#: ``mode.kind`` of a step that issues no unit (a bubble or the final drain step).
PV_BUBBLE = 3


def pv_mode_layout() -> data.StructLayout:
    """What every PE of a row does in a step: ``kind`` (0 A, 1 F1, 2 F2, 3 bubble), ``first``
    (drain R0 and restart it: the block's first step, or the final drain step), ``issue``
    (a unit step, else a bubble)."""
    return data.StructLayout({"kind": unsigned(2), "first": unsigned(1), "issue": unsigned(1)})


def pv_row_layout() -> data.StructLayout:
    """One row of a step: the query's P at the unit's members (0 where absent), valid (0: a
    padding row) and the mode."""
    return data.StructLayout({"p0": unsigned(8), "p1": unsigned(8), "p2": unsigned(8),
                              "valid": unsigned(1), "mode": pv_mode_layout()})


def pv_cell_row_layout() -> data.StructLayout:
    """What a cell receives of its row: the step row plus ``s12 = p1 + p2`` (the left edge's
    one adder per row)."""
    return data.StructLayout({"p0": unsigned(8), "p1": unsigned(8), "p2": unsigned(8),
                              "s12": unsigned(9), "valid": unsigned(1),
                              "mode": pv_mode_layout()})


def pv_col_layout() -> data.StructLayout:
    """One column of a step at the top edge: the channel's V at the unit's members, the
    followers' codes (FULL 0, HALF 1, NONE 2, ABSENT 3), valid (0: a padding column)."""
    return data.StructLayout({"v0": signed(8), "v1": signed(8), "v2": signed(8),
                              "c1": unsigned(2), "c2": unsigned(2), "valid": unsigned(1)})


def pv_cell_col_layout() -> data.StructLayout:
    """What a cell receives of its column: the selected byte and the decoded word."""
    return data.StructLayout({"b": unsigned(8), "op": unsigned(2), "lo_sel": unsigned(3),
                              "hi_sel": unsigned(3)})


def pv_decode_tables() -> dict:
    """``{field: (constant, width)}``: per word field a table holding the value of entry
    ``i = c2 | c1 << 2 | kind << 4`` at bits ``[4i, 4i + width)`` (kind 3: idle)."""
    names = ("op", "lo_sel", "hi_sel", "bsel")
    out = {name: 0 for name in names}
    for f, name in enumerate(names):
        for kind in range(3):
            for c1 in range(4):
                for c2 in range(4):
                    out[name] |= int(PV_DECODE[f, kind, c1, c2]) << (4 * (c2 | c1 << 2 |
                                                                          kind << 4))
    widths = {"op": 2, "lo_sel": 3, "hi_sel": 3, "bsel": 2}
    return {name: (out[name], widths[name]) for name in names}


def pv_pre_add(sel, p0, p1, p2, s12):
    """A pre-adder of the P @ V mode: the sum of the P lanes ``sel`` names (bit j: lane
    ``p_j``), as one 2-input adder thanks to the row edge's ``s12 = p1 + p2``."""
    rest = Mux(sel[1], Mux(sel[2], s12, p1), Mux(sel[2], p2, 0))
    return Mux(sel[0], p0, 0) + rest


def pv_column_word(m, j, kind, on, c1, c2, values):
    """Decode column ``j``'s P @ V word at the array's top edge, once per column: ``(b,
    {field: signal})`` with the byte ``b`` it selects from the unit's V ``values`` (v0, v1,
    v2, or their packed low nibbles) and ``op``/``lo_sel``/``hi_sel``/``bsel`` from
    ``golden.engine.pv.PV_DECODE`` at (``kind``, ``c1``, ``c2``); all 0 (IDLE) unless
    ``on`` (a real column in a step that issues a unit)."""
    tables = pv_decode_tables()
    index = Cat(c2, c1, kind)
    on_sig = Signal(name=f"col_on_{j}")
    m.d.comb += on_sig.eq(on)
    looked = {}
    for name, (table, width) in tables.items():
        value = Signal(width, name=f"col_{name}_{j}")
        m.d.comb += value.eq(Mux(on_sig, (Const(table, 256) >> Cat(Const(0, 2), index))[:width],
                                 0))
        looked[name] = value
    v0, v1, v2 = values
    pack = Cat(v1[:4], v2[:4])
    bytes_ = (v0, v1, v2, pack)
    b = Signal(8, name=f"col_b_{j}")
    sel = looked["bsel"]
    m.d.comb += b.eq(Mux(sel[1], Mux(sel[0], bytes_[3], bytes_[2]),
                         Mux(sel[0], bytes_[1], bytes_[0])))
    return b, looked


class PvCell(wiring.Component):
    """One PE of the P @ V array (module docstring): pre-adders, a 10 x 8 split multiplier,
    R0 and its drain register. Row and column data are forwarded registered.

    Parameters
    ----------
    config : KaleidoConfig
        ``acc_width``: width of R0 and of the drain register (signed, wrapping).
    """

    def __init__(self, config: KaleidoConfig):
        self.config = config
        super().__init__({
            "row": In(pv_cell_row_layout()),
            "col": In(pv_cell_col_layout()),
            "row_out": Out(pv_cell_row_layout()),
            "col_out": Out(pv_cell_col_layout()),
            "drain": Out(DrainSignature(config.acc_width)),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        row, col = self.row, self.col
        aw = self.config.acc_width
        m.d.sync += [self.row_out.eq(row), self.col_out.eq(col)]
        x_lo = Signal(unsigned(10))
        x_hi = Signal(unsigned(10))

        m.d.comb += [x_lo.eq(pv_pre_add(col.lo_sel, row.p0, row.p1, row.p2, row.s12)),
                     x_hi.eq(pv_pre_add(col.hi_sel, row.p0, row.p1, row.p2, row.s12))]
        mul = col.op == OP_MUL
        t0 = Signal(unsigned(14))
        t1 = Signal(signed(16))
        nib = Signal(signed(5))          # b[7:4], signed for MUL, unsigned for PAIR
        m.d.comb += [
            t0.eq(x_lo * col.b[:4]),
            nib.eq(Mux(mul, col.b[4:].as_signed(), col.b[4:])),
            t1.eq(x_hi * nib),
        ]
        work = Signal()
        m.d.comb += work.eq(row.valid & row.mode.issue & (col.op != OP_IDLE))
        t0g = Signal(unsigned(14))
        t1g = Signal(signed(20))
        m.d.comb += [t0g.eq(Mux(work, t0, 0)), t1g.eq(Mux(work, Mux(mul, t1 << 4, t1), 0))]
        r0 = Signal(signed(aw))
        drained = Signal(signed(aw))
        m.d.sync += r0.eq(Mux(row.mode.first, 0, r0) + t0g + t1g)
        with m.If(row.mode.first):
            m.d.sync += drained.eq(r0)
        m.d.sync += self.busy.eq(work)
        m.d.comb += [self.drain.valid.eq(1), self.drain.data.eq(drained)]
        return m


def _array_docs() -> dict:
    row, col = pv_row_layout(), pv_col_layout()
    drain = drain_port_layout(24, 4, 8)
    return {
        "row": (f"the step's R rows, unskewed (row r at bits [r*{row.size}, (r+1)*{row.size})): "
                f"{describe_layout(row)}"),
        "col": (f"the step's C columns, unskewed (column j at bits [j*{col.size}, "
                f"(j+1)*{col.size})): {describe_layout(col)}; codes FULL 0, HALF 1, NONE 2, "
                f"ABSENT 3"),
        "tag": "tag of the step (tag_width bits), read out with the block its first step drains",
        "drain": ("per column j a read-out record, column 0 at bit 0: valid, row (index i), data "
                  "(R0 of PE (i, j), signed acc_width), tag; " + describe_layout(drain).replace(
                      "[", "e.g. [") + " for acc_width 24, 4 rows, tag_width 8"),
        "busy_count": "number of PEs that took a product term in the previous cycle",
    }


class PvArray(_ArrayBase):
    """R x C :class:`PvCell` with the PEArray's edge skew and drain read-out
    (``kaleido_hw/array/array.py``); the top edge decodes each column's word once, the left
    edge adds ``p1 + p2`` once per row.

    Parameters
    ----------
    config : KaleidoConfig
        ``rows``, ``cols`` and ``acc_width``.
    tag_width : int
        Width of the tag a first step carries to the drain read-out.
    """

    CELL = PvCell
    PORT_DOCS = _array_docs()

    def __init__(self, config: KaleidoConfig, tag_width: int = 8):
        super().__init__(config, tag_width, row_layout=pv_row_layout(),
                         col_layout=pv_col_layout())

    def _cell_row_layout(self):
        return pv_cell_row_layout()

    def _row_edge(self, m, i, step_row):
        out = Signal(pv_cell_row_layout(), name=f"row_edge_{i}")
        m.d.comb += [out.p0.eq(step_row.p0), out.p1.eq(step_row.p1), out.p2.eq(step_row.p2),
                     out.s12.eq(step_row.p1 + step_row.p2), out.valid.eq(step_row.valid),
                     out.mode.eq(step_row.mode)]
        return out

    def _cell_col_layout(self):
        return pv_cell_col_layout()

    def _col_edge(self, m, j, step_col, step_row):
        mode = step_row.mode
        b, looked = pv_column_word(m, j, mode.kind, step_col.valid & mode.issue, step_col.c1,
                                   step_col.c2, (step_col.v0, step_col.v1, step_col.v2))
        out = Signal(pv_cell_col_layout(), name=f"col_word_{j}")
        m.d.comb += [out.b.eq(b), out.op.eq(looked["op"]), out.lo_sel.eq(looked["lo_sel"]),
                     out.hi_sel.eq(looked["hi_sel"])]
        return out
