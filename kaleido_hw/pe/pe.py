"""The reuse-aware processing element (``ReusePE``) of the Kaleido PE array and the plain
8-bit MAC (``BaselinePE``) it is measured against. Contract: ``docs/pe.md``; cycle model:
``golden/pe/model.py``.
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from kaleido_hw.config import KaleidoConfig
from kaleido_hw.pe.datapath import (PV_X_WIDTH, AccumulatorBank, MacAccumulator, MacMultiplier,
                                    ReuseMultiplier)
from kaleido_hw.pe.layouts import (REGISTERS, BaselineColSignature, BaselineRowSignature,
                                   ColSignature, DrainSignature, Op, Part, RowSignature)


__all__ = ["ReusePE", "BaselinePE"]


def _check_config(cls, config):
    if not isinstance(config, KaleidoConfig):
        raise TypeError(f"{cls.__name__} takes a KaleidoConfig, got {type(config).__name__}")


def _forward(m, src, dst, names):
    """Registered copy of interface members (one cycle per PE: systolic forwarding)."""
    for name in names:
        m.d.sync += getattr(dst, name).eq(getattr(src, name))


def _drain_docs(prefix, direction):
    return {
        f"{prefix}__valid": f"drain chain {direction}: the data word is a drained register value",
        f"{prefix}__data": f"drain chain {direction}: accumulator value (signed, acc_width bits)",
    }


class ReusePE(wiring.Component):
    """Reuse-aware MAC: an 8x8 multiplier cut into two 4x8 halves, three accumulators
    R0/R1/R2 (paper Fig. 13).

    Parameters
    ----------
    config : KaleidoConfig
        ``config.acc_width`` sets the width of R0/R1/R2 and of the drain chain (signed; the
        configuration guarantees it is exact for the preset's largest channel group).
    pv : bool
        Build the P @ V mode (``docs/pe.md`` section 3.4): inputs ``pv``, ``x_lo``,
        ``x_hi``; while ``pv`` is 1 the multiplier's column-side halves take the unsigned
        10-bit ``x_lo``/``x_hi`` (pre-added P, formed by the cell) as row operands. Default
        False: the PE of ``rtl_out/kaleido_pe.v``.

    Every cycle the PE reads its row port (``a0``, ``a1``, control word ``ctrl``) and column
    port (``b``) and:

    1. forms, on its multiplier, two terms and their sum (``ctrl.op``/``ctrl.split``): a MUL
       splits one operand ``y`` into nibbles and gives ``t0 = x*lo(y)``, ``t1 = 16*x*hi(y)``
       and the product ``t0 + t1``; LOW and LOW_PAIR give two unshifted low-nibble lanes;
    2. adds to each register the part its field of ``ctrl.part`` names (nothing, the
       product, t0 or t1). The control word is *resolved*: which part a register takes in
       this PE was decided from the PE's follower codes by the cell's decoder (or by
       ``golden.pe.model.Ctrl.resolve`` for a schedule-level word), so one array step acts
       differently in every PE without the codes ever entering the PE;
    3. applies the pass-change fields first: ``move`` hands values between registers,
       ``clear`` zeroes registers, ``drain`` puts the pre-update value of a register on
       ``drain_out`` (else ``drain_in`` shifts through);
    4. forwards row and column ports, registered, to ``row_out``/``col_out``.

    ``busy`` (registered) is 1 in the cycle after a step in which some register took a term.
    """

    PORT_DOCS = {
        "row__a0": "row operand 0, int8 (Q or activation value of the row token, or channel 0)",
        "row__a1": "row operand 1, int8 (second row token or second channel; LOW/LOW_PAIR lane 1)",
        "row__ctrl": ("resolved control word, 16 bits: op [1:0], split [2], part of R0 [4:3], "
                      "R1 [6:5], R2 [8:7], clear [11:9], move [13:12], drain [15:14] "
                      "(docs/pe.md)"),
        "col__b": "column operand: one int8, or two low nibbles b[3:0], b[7:4] for LOW_PAIR",
        **_drain_docs("drain_in", "input from the neighbour"),
        "row_out__a0": "row__a0 registered (to the right neighbour)",
        "row_out__a1": "row__a1 registered",
        "row_out__ctrl": "row__ctrl registered (the control word travels with the row data)",
        "col_out__b": "col__b registered (to the lower neighbour)",
        **_drain_docs("drain_out", "output"),
        "r0": "accumulator R0 (signed acc_width; the current tile)",
        "r1": "accumulator R1 (signed acc_width; a reusing tile's partial sum)",
        "r2": "accumulator R2 (signed acc_width; a reusing tile's partial sum)",
        "busy": "1 in the cycle after a step in which some register took a product term",
        # P @ V mode only (pv=True)
        "pv": "P @ V mode: the column-side multiplier halves take x_lo / x_hi as row operands",
        "x_lo": "P @ V mode: row operand of half 0, unsigned (a sum of up to three uint8 P)",
        "x_hi": "P @ V mode: row operand of half 1, unsigned",
    }

    def __init__(self, config: KaleidoConfig, pv: bool = False):
        _check_config(type(self), config)
        self.config = config
        self.pv_mode = pv
        self.acc_width = w = config.acc_width
        pv_ports = {"pv": In(1), "x_lo": In(PV_X_WIDTH), "x_hi": In(PV_X_WIDTH)} if pv else {}
        super().__init__({
            **pv_ports,
            "row": In(RowSignature()),
            "col": In(ColSignature()),
            "drain_in": In(DrainSignature(w)),
            "row_out": Out(RowSignature()),
            "col_out": Out(ColSignature()),
            "drain_out": Out(DrainSignature(w)),
            "r0": Out(signed(w)),
            "r1": Out(signed(w)),
            "r2": Out(signed(w)),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        row, col, ctrl = self.row, self.col, self.row.ctrl
        m.submodules.mul_unit = mult = ReuseMultiplier(self.pv_mode)
        m.submodules.acc_unit = acc = AccumulatorBank(self.acc_width, self.pv_mode)
        if self.pv_mode:
            m.d.comb += [mult.pv.eq(self.pv), mult.x_lo.eq(self.x_lo), mult.x_hi.eq(self.x_hi)]

        _forward(m, row, self.row_out, ("a0", "a1", "ctrl"))
        _forward(m, col, self.col_out, ("b",))
        m.d.comb += [
            mult.op.eq(ctrl.op), mult.split.eq(ctrl.split),
            mult.a0.eq(row.a0), mult.a1.eq(row.a1), mult.b.eq(col.b),
            acc.t0.eq(mult.t0), acc.t1.eq(mult.t1), acc.prod.eq(mult.prod),
            # IDLE: no register takes anything, whatever the parts say.
            *(acc.part[k].eq(Mux(ctrl.op == Op.IDLE, Part.NONE, ctrl.part[k]))
              for k in range(REGISTERS)),
            acc.clear.eq(ctrl.clear), acc.move.eq(ctrl.move),
            acc.drain.eq(ctrl.drain),
            acc.drain_in.valid.eq(self.drain_in.valid), acc.drain_in.data.eq(self.drain_in.data),
            self.drain_out.valid.eq(acc.drain_out.valid),
            self.drain_out.data.eq(acc.drain_out.data),
            self.r0.eq(acc.r0), self.r1.eq(acc.r1), self.r2.eq(acc.r2),
        ]
        takes = (ctrl.part[0] != Part.NONE) | (ctrl.part[1] != Part.NONE) | \
            (ctrl.part[2] != Part.NONE)
        m.d.sync += self.busy.eq((ctrl.op != Op.IDLE) & takes)
        return m


class BaselinePE(wiring.Component):
    """Plain 8-bit MAC: one 8x8 multiplier and one accumulator R0, with the same systolic
    forwarding and drain chain as :class:`ReusePE`. The area/timing reference.

    Parameters
    ----------
    config : KaleidoConfig
        ``config.acc_width`` sets the width of R0 and of the drain chain.

    Each cycle: ``R0 <= (ctrl.clear ? 0 : R0) + (ctrl.acc ? a0*b : 0)``; with ``ctrl.drain``
    the pre-update R0 enters ``drain_out``, else ``drain_in`` shifts through. ``busy`` is 1
    in the cycle after an accumulating step.
    """

    PORT_DOCS = {
        "row__a0": "row operand, int8",
        "row__ctrl": "control word: bit 0 acc (add a0*b), bit 1 clear (R0 from 0), bit 2 drain R0",
        "col__b": "column operand, int8",
        **_drain_docs("drain_in", "input from the neighbour"),
        "row_out__a0": "row__a0 registered (to the right neighbour)",
        "row_out__ctrl": "row__ctrl registered",
        "col_out__b": "col__b registered (to the lower neighbour)",
        **_drain_docs("drain_out", "output"),
        "r0": "accumulator R0 (signed acc_width)",
        "busy": "1 in the cycle after an accumulating step",
    }

    def __init__(self, config: KaleidoConfig):
        _check_config(type(self), config)
        self.config = config
        self.acc_width = w = config.acc_width
        super().__init__({
            "row": In(BaselineRowSignature()),
            "col": In(BaselineColSignature()),
            "drain_in": In(DrainSignature(w)),
            "row_out": Out(BaselineRowSignature()),
            "col_out": Out(BaselineColSignature()),
            "drain_out": Out(DrainSignature(w)),
            "r0": Out(signed(w)),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        ctrl = self.row.ctrl
        m.submodules.mul_unit = mult = MacMultiplier()
        m.submodules.acc_unit = acc = MacAccumulator(self.acc_width)
        _forward(m, self.row, self.row_out, ("a0", "ctrl"))
        _forward(m, self.col, self.col_out, ("b",))
        m.d.comb += [
            mult.a.eq(self.row.a0), mult.b.eq(self.col.b),
            acc.product.eq(mult.product),
            acc.acc.eq(ctrl.acc), acc.clear.eq(ctrl.clear), acc.drain.eq(ctrl.drain),
            acc.drain_in.valid.eq(self.drain_in.valid), acc.drain_in.data.eq(self.drain_in.data),
            self.drain_out.valid.eq(acc.drain_out.valid),
            self.drain_out.data.eq(acc.drain_out.data),
            self.r0.eq(acc.r0),
        ]
        m.d.sync += self.busy.eq(ctrl.acc)
        return m
