"""A TileCell that can also execute a MergeMatcher slot in pass 3 (``docs/engine.md``,
"Matcher: pass 3 with two channels per step").

:class:`MergedDecoder` turns one step (unmerged, or a matcher slot) into the ReusePE's row and
column inputs; :class:`MergedCell` is that decoder in front of a
:class:`~kaleido_hw.pe.pe.ReusePE`, with the same forwarding, drain and busy ports as
:class:`~kaleido_hw.array.tile_cell.TileCell`.
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from kaleido_hw.array.layouts import mode_layout
from kaleido_hw.array.tile_cell import TileDecoder
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.dispatch.layouts import Sel
from kaleido_hw.pe.layouts import CtrlLayout, DrainSignature, Op, Part
from kaleido_hw.pe.pe import ReusePE


__all__ = ["merged_row_layout", "merged_col_layout", "MergedDecoder", "MergedCell"]

FULL, HALF, NONE = 0, 1, 2


def merged_row_layout() -> data.StructLayout:
    """One row of a step: ``step_row_layout`` (same fields, same bits) followed by the
    second lane of a matcher slot.

    ``a``/``qc``: the row value and follower code (channel A of a slot); ``valid``: real row
    unit; ``mode``: pass, first, issue; ``a1``/``qc1``: the Q follower value and code at
    channel B (slots only); ``slot``: this step is a matcher slot (pass 3 only; the columns'
    ``sel`` says what each column does)."""
    return data.StructLayout({"a": signed(8), "qc": unsigned(2), "valid": unsigned(1),
                              "mode": mode_layout(), "a1": signed(8), "qc1": unsigned(2),
                              "slot": unsigned(1)})


def merged_col_layout() -> data.StructLayout:
    """One column of a step: ``step_col_layout`` (same fields, same bits) followed by the
    slot fields: ``kc1`` (the column follower's code at channel B) and ``sel``
    (:class:`~kaleido_hw.dispatch.layouts.Sel`). In a slot ``b`` is the byte of A
    (BYTE_A), of B (BYTE_B), or the low nibbles ``lo(K_f[A]) | lo(K_f[B]) << 4`` (NIB_*;
    for NIB_A the byte of A works as well: only its low nibble is used); ``kc`` is the
    code at A."""
    return data.StructLayout({"b": signed(8), "kc": unsigned(2), "valid": unsigned(1),
                              "kc1": unsigned(2), "sel": Sel})


class MergedDecoder(wiring.Component):
    """Combinational decode of one step into the ReusePE's row and column inputs.

    Parameters
    ----------
    config : KaleidoConfig
        Not used for sizes; taken so that every block is built the same way.

    Inputs ``row`` (:func:`merged_row_layout`) and ``col`` (:func:`merged_col_layout`);
    outputs the PE's ports ``a0``, ``a1``, ``ctrl`` (resolved for this PE's codes) and ``b``.

    * Unmerged step (``slot`` 0): exactly :class:`~kaleido_hw.array.tile_cell.TileCell`'s
      decode: the table entry of (pass, qc, kc) on ``a``/``b`` (``a1`` = 0).
    * Slot, ``sel`` NONE: idle. BYTE_A: the pass-3 entry of (qc, kc) on (a, b), as an
      unmerged step of channel A. BYTE_B: the pass-3 entry of (qc1, kc1) with the row lanes
      swapped (the PE multiplies ``a1``, channel B's value).
    * Slot, ``sel`` NIB_A / NIB_B / NIB_AB: op LOW_PAIR (``t0 = a*b[3:0]``,
      ``t1 = a1*b[7:4]``); lane j goes into R0 iff its channel is selected and its pass-3
      entry (qc_j, kc_j) is ``LOWc`` (kc_j HALF, qc_j HALF or NONE): ``part0`` PROD (both
      lanes), LOW (lane 0 only) or HIGH (lane 1 only). That is the LOWc term ``x*lo(y)`` of
      each selected channel, so the slot adds what the unmerged steps of A and B add.

    Padding rows/columns (``valid`` 0) and bubbles (``issue`` 0) idle; a first step drains
    R0 and enters the pass (``PASS_ENTRY``) whatever the step carries.
    """

    def __init__(self, config: KaleidoConfig | None = None):
        self.config = config
        super().__init__({
            "row": In(merged_row_layout()),
            "col": In(merged_col_layout()),
            "a0": Out(signed(8)), "a1": Out(signed(8)),
            "ctrl": Out(CtrlLayout),
            "b": Out(signed(8)),
        })

    def elaborate(self, platform):
        m = Module()
        row, col = self.row, self.col
        m.submodules.table = dec = TileDecoder(self.config)

        slot, sel = Signal(), Signal(Sel)
        swap, byte, nib = Signal(), Signal(), Signal()
        m.d.comb += [
            slot.eq(row.slot), sel.eq(col.sel),
            swap.eq(slot & (sel == Sel.BYTE_B)),
            byte.eq(~slot | (sel == Sel.BYTE_A) | (sel == Sel.BYTE_B)),
            nib.eq(slot & ((sel == Sel.NIB_A) | (sel == Sel.NIB_B) | (sel == Sel.NIB_AB))),
        ]
        # Byte steps (and every unmerged step) go through the single-channel table.
        m.d.comb += [
            dec.mode.pass_idx.eq(row.mode.pass_idx),
            dec.mode.first.eq(row.mode.first),
            dec.mode.issue.eq(row.mode.issue & byte),
            dec.rvalid.eq(row.valid), dec.cvalid.eq(col.valid),
            dec.qc.eq(Mux(swap, row.qc1, row.qc)),
            dec.kc.eq(Mux(swap, col.kc1, col.kc)),
        ]

        # Nibble slots: per-lane LOWc gate (pass-3 entry LOWc <=> kc HALF, qc HALF or NONE).
        def lowc(qc, kc):
            return (kc == HALF) & ((qc == HALF) | (qc == NONE))

        take0, take1 = Signal(), Signal()
        work = Signal()
        m.d.comb += [
            work.eq(nib & row.mode.issue & row.valid & col.valid),
            take0.eq(work & ((sel == Sel.NIB_A) | (sel == Sel.NIB_AB)) & lowc(row.qc, col.kc)),
            take1.eq(work & ((sel == Sel.NIB_B) | (sel == Sel.NIB_AB)) & lowc(row.qc1, col.kc1)),
        ]
        part0 = Signal(Part)
        m.d.comb += part0.eq(Mux(take0, Mux(take1, Part.PROD, Part.LOW),
                                 Mux(take1, Part.HIGH, Part.NONE)))

        ctrl = self.ctrl
        m.d.comb += [
            ctrl.op.eq(Mux(take0 | take1, Op.LOW_PAIR, dec.ctrl.op)),
            ctrl.split.eq(dec.ctrl.split),
            ctrl.part[0].eq(Mux(nib, part0, dec.ctrl.part[0])),
            ctrl.part[1].eq(dec.ctrl.part[1]),
            ctrl.part[2].eq(dec.ctrl.part[2]),
            ctrl.clear.eq(dec.ctrl.clear),
            ctrl.move.eq(dec.ctrl.move),
            ctrl.drain.eq(dec.ctrl.drain),
            self.a0.eq(Mux(swap, row.a1, row.a)),
            self.a1.eq(Mux(slot & ~swap, row.a1, 0)),
            self.b.eq(col.b),
        ]
        return m


class MergedCell(wiring.Component):
    """A :class:`MergedDecoder` in front of a :class:`~kaleido_hw.pe.pe.ReusePE`: the PE-array
    cell of the multi-array engine.

    Parameters
    ----------
    config : KaleidoConfig
        Passed to the PE (``acc_width``).

    Ports as :class:`~kaleido_hw.array.tile_cell.TileCell` (``row``, ``col``, registered
    ``row_out``/``col_out``, ``drain``, ``busy``) with the wider layouts
    :func:`merged_row_layout` / :func:`merged_col_layout`, whose leading fields are those of
    the TileCell's: a step with ``slot`` 0 behaves exactly like a TileCell step. Timing:
    the decode is combinational between the cell's input registers (a neighbour's
    forwarding register or the array's skew register) and the PE, as in the TileCell; the
    row and column inputs are forwarded undecoded one cycle later. ``busy`` is the PE's (a
    LOW_PAIR slot with both lanes taken is one busy PE-cycle).
    """

    def __init__(self, config: KaleidoConfig):
        self.config = config
        super().__init__({
            "row": In(merged_row_layout()),
            "col": In(merged_col_layout()),
            "row_out": Out(merged_row_layout()),
            "col_out": Out(merged_col_layout()),
            "drain": Out(DrainSignature(config.acc_width)),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.decoder = dec = MergedDecoder(self.config)
        m.submodules.pe = pe = ReusePE(self.config)
        m.d.sync += [self.row_out.eq(self.row), self.col_out.eq(self.col)]
        m.d.comb += [
            dec.row.eq(self.row), dec.col.eq(self.col),
            pe.row.a0.eq(dec.a0), pe.row.a1.eq(dec.a1),
            pe.row.ctrl.eq(dec.ctrl),
            pe.col.b.eq(dec.b),
            pe.drain_in.valid.eq(pe.drain_out.valid),
            pe.drain_in.data.eq(pe.drain_out.data),
            self.drain.valid.eq(pe.drain_out.valid),
            self.drain.data.eq(pe.drain_out.data),
            self.busy.eq(pe.busy),
        ]
        return m
