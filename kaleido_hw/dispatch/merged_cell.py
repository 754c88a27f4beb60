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
from kaleido_hw.array.tile_cell import TileDecoder, cell_ports, hold_drain
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.dispatch.layouts import Sel
from kaleido_hw.pe.layouts import CtrlLayout, Op, Part
from kaleido_hw.pe.pe import ReusePE


__all__ = ["merged_row_layout", "merged_col_layout", "merged_cell_col_layout",
           "merged_column_edge", "MergedDecoder", "MergedCell", "Window3MergedCell"]

FULL, HALF, NONE = 0, 1, 2


def merged_row_layout(window3: bool = False) -> data.StructLayout:
    """One row of a step: ``step_row_layout`` (same fields, same bits) followed by the
    second lane of a matcher slot.

    ``a``/``qc``: the row value and follower code (channel A of a slot); ``valid``: real row
    unit; ``mode``: pass, first, issue; ``a1``/``qc1``: the Q follower value and code at
    channel B (slots only); ``slot``: this step is a matcher slot (pass 3 only; the columns'
    ``sel`` says what each column does). ``window3``: then ``w3``, the step belongs to a
    linear window-3 quad (``golden.array.window3``), whose ``qc`` is the row's first
    follower's code and ``qc1`` its second's (a window-3 quad runs no slots)."""
    fields = {"a": signed(8), "qc": unsigned(2), "valid": unsigned(1), "mode": mode_layout(),
              "a1": signed(8), "qc1": unsigned(2), "slot": unsigned(1)}
    if window3:
        fields["w3"] = unsigned(1)
    return data.StructLayout(fields)


def merged_col_layout() -> data.StructLayout:
    """One column of a step: ``step_col_layout`` (same fields, same bits) followed by the
    slot fields: ``kc1`` (the column follower's code at channel B) and ``sel``
    (:class:`~kaleido_hw.dispatch.layouts.Sel`). In a slot ``b`` is the byte of A
    (BYTE_A), of B (BYTE_B), or the low nibbles ``lo(K_f[A]) | lo(K_f[B]) << 4`` (NIB_*;
    for NIB_A the byte of A works as well: only its low nibble is used); ``kc`` is the
    code at A."""
    return data.StructLayout({"b": signed(8), "kc": unsigned(2), "valid": unsigned(1),
                              "kc1": unsigned(2), "sel": Sel})


def merged_cell_col_layout() -> data.StructLayout:
    """What a MergedCell receives of a column: the step column decoded once, at the array's
    edge (:func:`merged_column_edge`), so that the cells' decode starts from registers.

    ``b``: the column byte; ``kc``: the code the single-channel table decodes (the code at B
    for a BYTE_B slot, else at A); ``valid``: real column; ``byte``: the step goes through the
    table (every unmerged step, and BYTE_A / BYTE_B slots); ``swap``: BYTE_B (the PE
    multiplies the row's channel-B value); ``nib``: a nibble slot (NIB_A / NIB_B / NIB_AB);
    ``lane0`` / ``lane1``: that nibble lane is selected, the column is real and its follower
    code there is HALF (the column half of the LOWc rule); ``pair``: a slot without swap
    (the row's second value reaches the PE's ``a1``)."""
    return data.StructLayout({"b": signed(8), "kc": unsigned(2), "valid": unsigned(1),
                              "byte": unsigned(1), "swap": unsigned(1), "nib": unsigned(1),
                              "lane0": unsigned(1), "lane1": unsigned(1), "pair": unsigned(1)})


def merged_column_edge(m: Module, col, slot, name: str = "col_edge"):
    """The cell column (:func:`merged_cell_col_layout`) of step column ``col``
    (:func:`merged_col_layout`) in a step whose row ``slot`` bit is ``slot`` (the same in
    every row): combinational, once per column at the array's edge, before the column's skew
    registers. Returns the signal."""
    edge = Signal(merged_cell_col_layout(), name=name)
    sel = col.sel
    swap = slot & (sel == Sel.BYTE_B)
    nib = slot & ((sel == Sel.NIB_A) | (sel == Sel.NIB_B) | (sel == Sel.NIB_AB))
    m.d.comb += [
        edge.b.eq(col.b), edge.valid.eq(col.valid),
        edge.kc.eq(Mux(swap, col.kc1, col.kc)),
        edge.byte.eq(~slot | (sel == Sel.BYTE_A) | (sel == Sel.BYTE_B)),
        edge.swap.eq(swap), edge.nib.eq(nib),
        edge.lane0.eq(nib & col.valid & ((sel == Sel.NIB_A) | (sel == Sel.NIB_AB))
                      & (col.kc == HALF)),
        edge.lane1.eq(nib & col.valid & ((sel == Sel.NIB_B) | (sel == Sel.NIB_AB))
                      & (col.kc1 == HALF)),
        edge.pair.eq(slot & ~swap),
    ]
    return edge


class MergedDecoder(wiring.Component):
    """Combinational decode of one step into the ReusePE's row and column inputs.

    Parameters
    ----------
    config : KaleidoConfig
        Not used for sizes; taken so that every block is built the same way.

    Inputs ``row`` (:func:`merged_row_layout`) and ``col`` (the edge-decoded
    :func:`merged_cell_col_layout`); outputs the PE's ports ``a0``, ``a1``, ``ctrl``
    (resolved for this PE's codes) and ``b``.

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

    ``window3``: the row also carries ``w3``; a step with it decodes the window-3 table of
    (pass, ``qc``, ``qc1``) (:class:`~kaleido_hw.array.tile_cell.TileDecoder` with
    ``window3``).

    Why the column arrives decoded: everything that depends on the column and the step alone
    (which code the table reads, byte / nibble / swap, the column half of the LOWc rule) is
    the same for the R cells of a column, so the array computes it once at its edge and the
    cells start from registered bits; in the cell only the row's codes remain to combine.
    """

    def __init__(self, config: KaleidoConfig | None = None, window3: bool = False):
        self.config, self.window3 = config, window3
        super().__init__({
            "row": In(merged_row_layout(window3)),
            "col": In(merged_cell_col_layout()),
            "a0": Out(signed(8)), "a1": Out(signed(8)),
            "ctrl": Out(CtrlLayout),
            "b": Out(signed(8)),
        })

    def elaborate(self, platform):
        m = Module()
        row, col = self.row, self.col
        m.submodules.table = dec = TileDecoder(self.config, window3=self.window3)
        if self.window3:
            # a window-3 row's second follower code rides in the slot lane's code
            m.d.comb += [dec.w3.eq(row.w3), dec.qc2.eq(row.qc1)]

        # Byte steps (and every unmerged step) go through the single-channel table.
        m.d.comb += [
            dec.mode.pass_idx.eq(row.mode.pass_idx),
            dec.mode.first.eq(row.mode.first),
            dec.mode.issue.eq(row.mode.issue & col.byte),
            dec.rvalid.eq(row.valid), dec.cvalid.eq(col.valid),
            dec.qc.eq(Mux(col.swap, row.qc1, row.qc)),
            dec.kc.eq(col.kc),
        ]

        # Nibble slots: the row half of the per-lane LOWc gate (qc HALF or NONE).
        def row_low(qc):
            return (qc == HALF) | (qc == NONE)

        take0, take1 = Signal(), Signal()
        work = Signal()
        m.d.comb += [
            work.eq(row.mode.issue & row.valid),
            take0.eq(work & col.lane0 & row_low(row.qc)),
            take1.eq(work & col.lane1 & row_low(row.qc1)),
        ]
        part0 = Signal(Part)
        m.d.comb += part0.eq(Mux(take0, Mux(take1, Part.PROD, Part.LOW),
                                 Mux(take1, Part.HIGH, Part.NONE)))

        ctrl = self.ctrl
        m.d.comb += [
            # A nibble slot is LOW_PAIR whether or not a lane is taken (no part taken: the PE
            # adds nothing and is not busy), so the op waits only for registered bits.
            ctrl.op.eq(Mux(col.nib, Op.LOW_PAIR, dec.ctrl.op)),
            ctrl.split.eq(dec.ctrl.split),
            ctrl.part[0].eq(Mux(col.nib, part0, dec.ctrl.part[0])),
            ctrl.part[1].eq(dec.ctrl.part[1]),
            ctrl.part[2].eq(dec.ctrl.part[2]),
            ctrl.clear.eq(dec.ctrl.clear),
            ctrl.move.eq(dec.ctrl.move),
            ctrl.drain.eq(dec.ctrl.drain),
            self.a0.eq(Mux(col.swap, row.a1, row.a)),
            self.a1.eq(Mux(col.pair, row.a1, 0)),
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
    ``row_out``/``col_out``, ``drain``, ``busy``) with the layouts :func:`merged_row_layout`
    (whose leading fields are those of the TileCell's: a step with ``slot`` 0 behaves exactly
    like a TileCell step) and :func:`merged_cell_col_layout` (the column as the array's edge
    decoded it, :func:`merged_column_edge`). Timing: the decode is combinational between the
    cell's input registers (a neighbour's forwarding register or the array's skew register)
    and the PE, as in the TileCell; the row and column inputs are forwarded one cycle later. ``busy`` is the PE's (a
    LOW_PAIR slot with both lanes taken is one busy PE-cycle).
    """

    #: The decoder also runs linear window-3 quads (:class:`Window3MergedCell`).
    WINDOW3 = False

    def __init__(self, config: KaleidoConfig):
        self.config = config
        super().__init__(cell_ports(merged_row_layout(self.WINDOW3), merged_cell_col_layout(),
                                    config.acc_width))

    def elaborate(self, platform):
        m = Module()
        m.submodules.decoder = dec = MergedDecoder(self.config, window3=self.WINDOW3)
        m.submodules.pe = pe = ReusePE(self.config)
        m.d.sync += [self.row_out.eq(self.row), self.col_out.eq(self.col)]
        m.d.comb += [
            dec.row.eq(self.row), dec.col.eq(self.col),
            pe.row.a0.eq(dec.a0), pe.row.a1.eq(dec.a1),
            pe.row.ctrl.eq(dec.ctrl),
            pe.col.b.eq(dec.b),
        ]
        hold_drain(m, self, pe)
        return m


class Window3MergedCell(MergedCell):
    """A :class:`MergedCell` that also runs linear window-3 quads (``golden.array.window3``):
    its row is ``merged_row_layout(window3=True)`` (``w3`` added; ``qc1`` the second
    follower's code in a window-3 step) and its decoder has the window-3 table."""
    WINDOW3 = True
