"""Per-PE decode of the tile schedule (``docs/tiling.md``, "What a PE does: the decode table").

Every PE of the array receives, with its row data, the pass and step flags that the whole
row shares, and, with its row and column operands, the codes of its own row and column
followers. :class:`TileDecoder` turns these into the :class:`~kaleido_hw.pe.ReusePE` control
word of that PE; :class:`TileCell` is a decoder in front of a ReusePE, with the row and
column data forwarded (registered) *undecoded*, so that each PE decodes with its own codes.
:class:`BaselineCell` does the same for a :class:`~kaleido_hw.pe.BaselinePE` (dense only).
"""

from __future__ import annotations

from amaranth.hdl import C, Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .config import KaleidoConfig
from .pe import BaselinePE, ReusePE
from .pe_layouts import (BaselineCtrlLayout, ColCond, Drain, DrainSignature, Move, Op, Part,
                         RowCond, Split)
from .tile_layouts import ABSENT, mode_layout, step_col_layout, step_row_layout


__all__ = ["DECODE_TABLE", "PASS_ENTRY", "DecodedLayout", "decode_entry", "work_table",
           "TileDecoder", "TileCell",
           "BaselineDecoder", "BaselineCell"]

FULL, HALF, NONE = 0, 1, 2
_CODES = (FULL, HALF, NONE, ABSENT)

#: The decode table of ``docs/tiling.md``: per pass, one line per row-follower code
#: (FULL, HALF, NONE, ABSENT), one entry per column-follower code (same order). An entry is
#: ``idle`` or ``<op> <R0><R1><R2>`` with op ``MUL/c``, ``MUL/r`` (full product split on the
#: column / row), ``LOWc`` (x*lo(y)), ``LOWr`` (lo(x)*y), and per register ``P`` (the
#: product), ``H`` (high part), ``L`` (low part) or ``-``. ``tests/test_engine.py`` checks it
#: against ``golden.schedule.decode``, which ``tests/test_schedule.py`` proves exact.
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

#: op text -> (PE op, PE split)
_OPS = {"MUL/c": (Op.MUL, Split.COL), "MUL/r": (Op.MUL, Split.ROW),
        "LOWc": (Op.LOW, Split.COL), "LOWr": (Op.LOW, Split.ROW)}
#: register letter -> PE part. For a LOW step the only term used is lane 0 (``Part.LOW``):
#: lane 1 would multiply the unused ``a1``.
_PARTS_MUL = {"P": Part.PROD, "H": Part.HIGH, "L": Part.LOW, "-": Part.NONE}
_PARTS_LOW = {"P": Part.LOW, "-": Part.NONE}

#: First step of a pass: (clear mask, move) that brings the pass's tile into R0
#: (``docs/tiling.md``, "Passes and registers"); every first step also drains R0.
PASS_ENTRY = {0: (0b111, Move.NONE), 1: (0, Move.R1_TO_R0), 2: (0, Move.R2_TO_R0),
              3: (0, Move.R1_TO_R0)}


def decode_entry(pass_idx: int, qc: int, kc: int):
    """``(op, split, (part0, part1, part2))`` of the PE (``Op.IDLE`` for an idle entry)."""
    text = DECODE_TABLE[pass_idx][_CODES.index(qc)].split("|")[_CODES.index(kc)].split()
    if text == ["idle"]:
        return Op.IDLE, Split.COL, (Part.NONE,) * 3
    op, split = _OPS[text[0]]
    parts = _PARTS_MUL if op == Op.MUL else _PARTS_LOW
    return op, split, tuple(parts[ch] for ch in text[1])


def work_table(pass_idx: int):
    """``{(qc, kc)}``: the code pairs whose entry in ``pass_idx`` is not idle."""
    return {(qc, kc) for qc in _CODES for kc in _CODES
            if decode_entry(pass_idx, qc, kc)[0] != Op.IDLE}


#: What the decoder chooses: the fields of the PE's control word (``CtrlLayout``) that the
#: tile schedule uses. The selectors' row/col conditions are always ANY (the decode table
#: already depends on the codes), so :class:`TileCell` ties them to zero.
DecodedLayout = data.StructLayout({
    "op": Op, "split": Split, "part": data.ArrayLayout(Part, 3),
    "clear": unsigned(3), "move": Move, "drain": Drain,
})


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
    when the step issues a channel and both units are real, else it idles. A first step
    additionally drains R0 and clears/moves the registers as ``PASS_ENTRY`` says (also for
    a bubble step, and in padding PEs, where it is harmless).
    """

    def __init__(self, config: KaleidoConfig | None = None):
        super().__init__({
            "mode": In(mode_layout()),
            "rvalid": In(1),
            "cvalid": In(1),
            "qc": In(2),
            "kc": In(2),
            "ctrl": Out(DecodedLayout),
        })

    def elaborate(self, platform):
        m = Module()
        ctrl, mode = self.ctrl, self.mode
        # The table as constants indexed by (pass, qc, kc): plain expressions, no process
        # (a Verilog `always @*` whose inputs never change after time 0 would never run in an
        # event-driven simulator, leaving the PE's control word undefined after reset).
        index = Cat(self.kc, self.qc, mode.pass_idx)
        # entry i = the index value i = kc | qc << 2 | pass << 4
        entries = [decode_entry(p, qc, kc) for p in range(4) for qc in _CODES for kc in _CODES]
        fields = [("op", lambda e: e[0].value), ("split", lambda e: e[1].value)]
        fields += [(f"part{k}", (lambda k: lambda e: e[2][k].value)(k)) for k in range(3)]
        work = Signal()
        m.d.comb += work.eq(mode.issue & self.rvalid & self.cvalid)
        looked = {}
        for name, get in fields:
            table = sum(get(e) << (2 * i) for i, e in enumerate(entries))
            value = Signal(2, name=name)
            m.d.comb += value.eq(Mux(work, (Const(table, 128) >> Cat(C(0, 1), index))[:2], 0))
            looked[name] = value
        m.d.comb += [ctrl.op.as_value().eq(looked["op"]),
                     ctrl.split.as_value().eq(looked["split"])]
        m.d.comb += [ctrl.part[k].as_value().eq(looked[f"part{k}"]) for k in range(3)]
        clears = sum(PASS_ENTRY[p][0] << (3 * p) for p in range(4))
        moves = sum(PASS_ENTRY[p][1].value << (2 * p) for p in range(4))
        m.d.comb += [
            ctrl.clear.eq(Mux(mode.first, (Const(clears, 12) >> (mode.pass_idx * 3))[:3], 0)),
            ctrl.move.as_value().eq(Mux(mode.first,
                                        (Const(moves, 8) >> Cat(C(0, 1), mode.pass_idx))[:2], 0)),
            ctrl.drain.as_value().eq(Mux(mode.first, Drain.R0.value, Drain.NONE.value)),
        ]
        return m


class _CellBase(wiring.Component):
    """Ports shared by both cells: undecoded row/column data in and (registered) out, the
    PE's drain register, and its busy flag."""

    def _ports(self, acc_width):
        return {
            "row": In(step_row_layout()),
            "col": In(step_col_layout()),
            "row_out": Out(step_row_layout()),
            "col_out": Out(step_col_layout()),
            "drain": Out(DrainSignature(acc_width)),
            "busy": Out(1),
        }

    def _forward(self, m):
        m.d.sync += [self.row_out.eq(self.row), self.col_out.eq(self.col)]


class TileCell(_CellBase):
    """A :class:`TileDecoder` in front of a :class:`~kaleido_hw.pe.ReusePE`.

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

    def elaborate(self, platform):
        m = Module()
        m.submodules.decoder = dec = TileDecoder(self.config)
        m.submodules.pe = pe = ReusePE(self.config)
        self._forward(m)
        m.d.comb += [
            dec.mode.eq(self.row.mode), dec.rvalid.eq(self.row.valid),
            dec.cvalid.eq(self.col.valid), dec.qc.eq(self.row.qc), dec.kc.eq(self.col.kc),
            pe.row.a0.eq(self.row.a),
            pe.row.a1.eq(0),
            pe.row.qc0.as_value().eq(self.row.qc),
            pe.row.qc1.as_value().eq(NONE),
            pe.row.ctrl.op.eq(dec.ctrl.op),
            pe.row.ctrl.split.eq(dec.ctrl.split),
            pe.row.ctrl.sel0.part.eq(dec.ctrl.part[0]),
            pe.row.ctrl.sel1.part.eq(dec.ctrl.part[1]),
            pe.row.ctrl.sel2.part.eq(dec.ctrl.part[2]),
            # The selectors' code conditions are unconditional (driven explicitly: an
            # undriven submodule input would be left floating in the Verilog).
            *(getattr(pe.row.ctrl, f"sel{k}").row.eq(RowCond.ANY) for k in range(3)),
            *(getattr(pe.row.ctrl, f"sel{k}").col.eq(ColCond.ANY) for k in range(3)),
            pe.row.ctrl.clear.eq(dec.ctrl.clear),
            pe.row.ctrl.move.eq(dec.ctrl.move),
            pe.row.ctrl.drain.eq(dec.ctrl.drain),
            pe.col.b.eq(self.col.b),
            pe.col.kc0.as_value().eq(self.col.kc),
            pe.col.kc1.as_value().eq(NONE),
            pe.drain_in.valid.eq(pe.drain_out.valid),
            pe.drain_in.data.eq(pe.drain_out.data),
            self.drain.valid.eq(pe.drain_out.valid),
            self.drain.data.eq(pe.drain_out.data),
            self.busy.eq(pe.busy),
        ]
        return m


class BaselineDecoder(wiring.Component):
    """Dense decode for a :class:`~kaleido_hw.pe.BaselinePE`: accumulate the plain product
    when the step issues a channel, both units are real and the pass's tile exists for them
    (pass 1/3 need a column follower, pass 2/3 a row follower); a first step drains R0 and
    starts R0 from zero. This computes every tile of a dense (reuse off) schedule; it
    ignores FULL/HALF codes, so it is not a reuse engine.
    """

    def __init__(self, config: KaleidoConfig | None = None):
        super().__init__({
            "mode": In(mode_layout()),
            "rvalid": In(1),
            "cvalid": In(1),
            "qc": In(2),
            "kc": In(2),
            "ctrl": Out(BaselineCtrlLayout),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.mode.pass_idx
        row_present = (p[1] == 0) | (self.qc != ABSENT)      # passes 2, 3: Q followers
        col_present = (p[0] == 0) | (self.kc != ABSENT)      # passes 1, 3: K followers
        m.d.comb += [
            self.ctrl.acc.eq(self.mode.issue & self.rvalid & self.cvalid
                             & row_present & col_present),
            self.ctrl.clear.eq(self.mode.first),
            self.ctrl.drain.eq(self.mode.first),
        ]
        return m


class BaselineCell(_CellBase):
    """A :class:`BaselineDecoder` in front of a :class:`~kaleido_hw.pe.BaselinePE`, with the
    same ports as :class:`TileCell`."""

    def __init__(self, config: KaleidoConfig):
        self.config = config
        super().__init__(self._ports(config.acc_width))

    def elaborate(self, platform):
        m = Module()
        m.submodules.decoder = dec = BaselineDecoder(self.config)
        m.submodules.pe = pe = BaselinePE(self.config)
        self._forward(m)
        m.d.comb += [
            dec.mode.eq(self.row.mode), dec.rvalid.eq(self.row.valid),
            dec.cvalid.eq(self.col.valid), dec.qc.eq(self.row.qc), dec.kc.eq(self.col.kc),
            pe.row.a0.eq(self.row.a),
            pe.row.ctrl.eq(dec.ctrl),
            pe.col.b.eq(self.col.b),
            pe.drain_in.valid.eq(pe.drain_out.valid),
            pe.drain_in.data.eq(pe.drain_out.data),
            self.drain.valid.eq(pe.drain_out.valid),
            self.drain.data.eq(pe.drain_out.data),
            self.busy.eq(pe.busy),
        ]
        return m
