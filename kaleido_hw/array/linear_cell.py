"""Per-PE decode of the linear schedule (``docs/linear.md``, "Step kinds and the per-PE decode
table") and the PE cell of the LinearEngine's array.

:class:`LinearDecoder` turns (step kind, the row unit's follower codes ``c1``/``c2``) into the
ReusePE control word; the table is built from ``golden.engine.linear.DECODE`` (the contract's
tables A/F1/F2; ``tests/engine/test_linear_engine.py`` proves every entry exact), so it is written
once. :class:`LinearCell` is a decoder in front of a :class:`~kaleido_hw.pe.pe.ReusePE`, with the
row and column data forwarded registered and undecoded, as the attention engine's ``TileCell``:
every PE decodes with its own row's codes.
"""

from __future__ import annotations

from amaranth.hdl import C, Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from golden.engine.linear import DECODE
from kaleido_hw.array.layouts import linear_col_layout, linear_mode_layout, linear_row_layout
from kaleido_hw.array.tile_cell import cell_ports, hold_drain
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.pe.layouts import CtrlLayout
from kaleido_hw.pe.pe import ReusePE


__all__ = ["LinearDecoder", "LinearCell", "decode_tables"]



def decode_tables() -> dict:
    """``{field: constant}``: per control-word field (``op``, ``split``, ``part0..2``) a
    128-bit table holding the 2-bit value of entry ``i = c2 | c1 << 2 | kind << 4`` at bits
    ``[2i, 2i + 2)`` (kind 3, no channel, is all zeros: idle)."""
    op_t, split_t, part_t = DECODE
    out = {"op": 0, "split": 0, "part0": 0, "part1": 0, "part2": 0}
    for kind in range(3):
        for c1 in range(4):
            for c2 in range(4):
                i = c2 | c1 << 2 | kind << 4
                out["op"] |= int(op_t[kind, c1, c2]) << (2 * i)
                out["split"] |= int(split_t[kind, c1, c2]) << (2 * i)
                for r in range(3):
                    out[f"part{r}"] |= int(part_t[kind, c1, c2, r]) << (2 * i)
    return out


class LinearDecoder(wiring.Component):
    """Combinational decode of one PE's linear step into its ReusePE control word.

    Parameters
    ----------
    config : KaleidoConfig
        Not used for sizes (the decoder is the same for every configuration).

    Inputs: ``mode`` (kind, issue, drain wave, drained register, clear), ``rvalid``/``cvalid``
    (the PE's row unit and column feature are real), ``c1``/``c2`` (the row unit's follower
    codes). The PE computes the table entry of (kind, c1, c2) when the step issues a channel
    and both are real, else idles; ``drain`` and ``clear`` pass through (also in padding PEs,
    where they are harmless). Selector conditions are ANY (the table already looked at the
    codes) and ``move`` is NONE.
    """

    def __init__(self, config: KaleidoConfig | None = None):
        super().__init__({
            "mode": In(linear_mode_layout()),
            "rvalid": In(1),
            "cvalid": In(1),
            "c1": In(2),
            "c2": In(2),
            "ctrl": Out(CtrlLayout),
        })

    def elaborate(self, platform):
        m = Module()
        ctrl, mode = self.ctrl, self.mode
        index = Cat(self.c2, self.c1, mode.kind)
        work = Signal()
        m.d.comb += work.eq(mode.issue & self.rvalid & self.cvalid)
        looked = {}
        # Plain constant shifts, no process (as TileDecoder: an `always @*` over constants
        # would never run in an event-driven simulator).
        for name, table in decode_tables().items():
            value = Signal(2, name=name)
            m.d.comb += value.eq(Mux(work, (Const(table, 128) >> Cat(C(0, 1), index))[:2], 0))
            looked[name] = value
        m.d.comb += [ctrl.op.as_value().eq(looked["op"]),
                     ctrl.split.as_value().eq(looked["split"])]
        m.d.comb += [ctrl.part[k].as_value().eq(looked[f"part{k}"]) for k in range(3)]
        m.d.comb += [ctrl.clear.eq(Mux(mode.clear, 0b111, 0)),
                     ctrl.move.as_value().eq(0),
                     ctrl.drain.as_value().eq(mode.drain)]
        return m


class LinearCell(wiring.Component):
    """A :class:`LinearDecoder` in front of a :class:`~kaleido_hw.pe.pe.ReusePE`: one PE of the
    LinearEngine's array (``kaleido_hw.array.array.PEArray`` builds R x C of them).

    Parameters
    ----------
    config : KaleidoConfig
        Passed to the PE (``acc_width``).

    Row lanes ``a0``/``a1`` go to the PE's ``a0``/``a1``, the weight to ``b``. The PE's drain
    register holds its value (``drain_in = drain_out``): a step with a ``drain`` register
    loads it, and the array's column read-out picks it up within ``rows`` cycles.
    """

    def __init__(self, config: KaleidoConfig):
        self.config = config
        super().__init__(cell_ports(linear_row_layout(), linear_col_layout(),
                                    config.acc_width))

    def elaborate(self, platform):
        m = Module()
        m.submodules.decoder = dec = LinearDecoder(self.config)
        m.submodules.pe = pe = ReusePE(self.config)
        m.d.sync += [self.row_out.eq(self.row), self.col_out.eq(self.col)]
        m.d.comb += [
            dec.mode.eq(self.row.mode), dec.rvalid.eq(self.row.valid),
            dec.cvalid.eq(self.col.valid), dec.c1.eq(self.row.c1), dec.c2.eq(self.row.c2),
            pe.row.a0.eq(self.row.a0), pe.row.a1.eq(self.row.a1),
            pe.row.ctrl.eq(dec.ctrl),
            pe.col.b.eq(self.col.b),
        ]
        hold_drain(m, self, pe)
        return m
