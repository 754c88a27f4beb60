"""Datapath blocks of the PEs, one concern each, so that synthesis (``kaleido-hw synth``,
``yosys synth -noflatten``) can attribute area to them: the multipliers, the reuse gate
decoder and the accumulator bank of ``ReusePE``, and the multiplier and accumulator of
``BaselinePE``. Semantics: ``golden/pe_model.py`` (``terms``, ``gates``, the cycle model).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .pe_layouts import (Code, ColCond, Drain, DrainSignature, Move, Op, OPERAND_WIDTH, Part,
                         RowCond, SelLayout)


__all__ = ["ReuseMultipliers", "ReuseGates", "AccumulatorBank", "MacMultiplier",
           "MacAccumulator", "TERM0_SHAPE", "TERM1_SHAPE"]

#: t0 = int8 x unsigned nibble; t1 = 16 x (int8 x signed nibble) at most.
TERM0_SHAPE = signed(13)
TERM1_SHAPE = signed(17)


class ReuseMultipliers(wiring.Component):
    """Two 4x8 multipliers with operand routing (``golden.pe_model.terms``).

    Multiplier 0 always multiplies an int8 by an unsigned low nibble: ``a0*lo(b)`` on the
    column side (split COL, LOW_PAIR) or ``b*lo(a0)`` on the row side. Multiplier 1 takes a
    signed high nibble for MUL (``a0*hi(b)`` or ``b*hi(a0)``, shifted by 4 into ``t1``), else
    an unsigned low nibble: lane 1 of LOW (``a1*lo(b)`` / ``b*lo(a1)``) or ``a1*b[7:4]``.
    """

    def __init__(self):
        super().__init__({
            "op": In(Op),
            "split_col": In(1),
            "a0": In(signed(OPERAND_WIDTH)),
            "a1": In(signed(OPERAND_WIDTH)),
            "b": In(signed(OPERAND_WIDTH)),
            "t0": Out(TERM0_SHAPE),
            "t1": Out(TERM1_SHAPE),
        })

    def elaborate(self, platform):
        m = Module()
        is_mul = self.op == Op.MUL
        is_pair = self.op == Op.LOW_PAIR
        a0, a1, b, split_col = self.a0, self.a1, self.b, self.split_col
        col_side = split_col | is_pair
        x0 = Mux(col_side, a0, b)
        n0 = Mux(col_side, b[0:4], a0[0:4])
        x1 = Mux(is_mul, Mux(split_col, a0, b), Mux(col_side, a1, b))
        nib1 = Mux(is_mul, Mux(split_col, b[4:8], a0[4:8]),
                   Mux(is_pair, b[4:8], Mux(split_col, b[0:4], a1[0:4])))
        n1 = Cat(nib1, is_mul & nib1[3]).as_signed()   # sign-extend only a high nibble
        p1 = Signal(signed(13))
        m.d.comb += [
            self.t0.eq(x0 * n0),
            p1.eq(x1 * n1),
            self.t1.eq(Mux(is_mul, p1 << 4, p1)),
        ]
        return m


class ReuseGates(wiring.Component):
    """Reuse gate decoder (``golden.pe_model.gates``): which register takes which term.

    ``gates`` bit ``2*k + j`` is 1 when register ``R_k`` takes term ``t_j``. A term is
    *shared* with a follower of code FULL always, of code HALF when it is a MUL's HIGH part
    and the split is on the follower's side; SHARE/REST select the shared terms / the others.
    The row code of a MUL's terms is ``qc0`` (both parts are lane 0), of LOW/LOW_PAIR lane j
    ``qc_j``; the column code is ``kc_j`` for LOW_PAIR lane j, else ``kc0``.
    """

    def __init__(self):
        super().__init__({
            "op": In(Op),
            "split_col": In(1),
            "sel0": In(SelLayout),
            "sel1": In(SelLayout),
            "sel2": In(SelLayout),
            "qc0": In(Code),
            "qc1": In(Code),
            "kc0": In(Code),
            "kc1": In(Code),
            "gates": Out(unsigned(6)),
        })

    def elaborate(self, platform):
        m = Module()
        is_mul = self.op == Op.MUL
        is_pair = self.op == Op.LOW_PAIR
        split_col = self.split_col

        def flags(code):
            return code == Code.FULL, code == Code.HALF
        q0f, q0h = flags(self.qc0)
        q1f, q1h = flags(self.qc1)
        k0f, k0h = flags(self.kc0)
        k1f, k1h = flags(self.kc1)
        shares = []
        for j in (0, 1):
            part_high = is_mul if j == 1 else 0
            rf, rh = (q0f, q0h) if j == 0 else (Mux(is_mul, q0f, q1f), Mux(is_mul, q0h, q1h))
            cf, ch = (k0f, k0h) if j == 0 else (Mux(is_pair, k1f, k0f), Mux(is_pair, k1h, k0h))
            share = Signal(3, name=f"share_t{j}")   # row, row1, col
            m.d.comb += share.eq(Cat(rf | (rh & part_high & ~split_col),
                                     q1f | (q1h & part_high & ~split_col),
                                     cf | (ch & part_high & split_col)))
            shares.append(share)

        bits = []
        for k in range(3):
            sel = getattr(self, f"sel{k}")
            for j, share in enumerate(shares):
                share_row, share_row1, share_col = share[0], share[1], share[2]
                g_part = (sel.part == Part.PROD) | (sel.part == (Part.LOW if j == 0 else Part.HIGH))
                g_row = ((sel.row == RowCond.ANY) | ((sel.row == RowCond.SHARE) & share_row)
                         | ((sel.row == RowCond.REST) & ~share_row)
                         | ((sel.row == RowCond.SHARE1) & share_row1))
                g_col = ((sel.col == ColCond.ANY) | ((sel.col == ColCond.SHARE) & share_col)
                         | ((sel.col == ColCond.REST) & ~share_col))
                bits.append(g_part & g_row & g_col & (self.op != Op.IDLE))
        m.d.comb += self.gates.eq(Cat(*bits))
        return m


class AccumulatorBank(wiring.Component):
    """R0/R1/R2 with move, clear, gated accumulation and the drain mux.

    Parameters
    ----------
    acc_width : int
        Register width (signed).

    ``R_k <= (clear[k] ? 0 : base_k) + {0, t0, t1, t0+t1}[gates[2k+1:2k]]`` where ``base``
    comes from ``move``. ``drain_out`` takes the pre-update value of the drained register
    (valid 1) or shifts ``drain_in``.
    """

    def __init__(self, acc_width: int):
        self.acc_width = acc_width
        super().__init__({
            "t0": In(TERM0_SHAPE),
            "t1": In(TERM1_SHAPE),
            "gates": In(unsigned(6)),
            "clear": In(unsigned(3)),
            "move": In(Move),
            "drain": In(Drain),
            "drain_in": In(DrainSignature(acc_width)),
            "drain_out": Out(DrainSignature(acc_width)),
            "r0": Out(signed(acc_width)),
            "r1": Out(signed(acc_width)),
            "r2": Out(signed(acc_width)),
        })

    def elaborate(self, platform):
        m = Module()
        regs = [self.r0, self.r1, self.r2]
        base = [Signal(signed(self.acc_width), name=f"base{k}") for k in range(3)]
        with m.Switch(self.move):
            with m.Case(Move.NONE):
                m.d.comb += [base[0].eq(self.r0), base[1].eq(self.r1), base[2].eq(self.r2)]
            with m.Case(Move.R1_TO_R0):
                m.d.comb += [base[0].eq(self.r1), base[1].eq(0), base[2].eq(self.r2)]
            with m.Case(Move.R2_TO_R0):
                m.d.comb += [base[0].eq(self.r2), base[1].eq(self.r1), base[2].eq(0)]
            with m.Default():   # ROTATE
                m.d.comb += [base[0].eq(self.r1), base[1].eq(self.r2), base[2].eq(0)]

        both = Signal(signed(18))
        m.d.comb += both.eq(self.t0 + self.t1)   # one shared adder for "take both terms"
        for k, reg in enumerate(regs):
            g0, g1 = self.gates[2 * k], self.gates[2 * k + 1]
            contribution = Mux(g1, Mux(g0, both, self.t1), Mux(g0, self.t0, 0))
            m.d.sync += reg.eq(Mux(self.clear[k], 0, base[k]) + contribution)

        with m.Switch(self.drain):
            with m.Case(Drain.NONE):
                m.d.sync += [self.drain_out.valid.eq(self.drain_in.valid),
                             self.drain_out.data.eq(self.drain_in.data)]
            with m.Case(Drain.R0):
                m.d.sync += [self.drain_out.valid.eq(1), self.drain_out.data.eq(self.r0)]
            with m.Case(Drain.R1):
                m.d.sync += [self.drain_out.valid.eq(1), self.drain_out.data.eq(self.r1)]
            with m.Default():   # R2
                m.d.sync += [self.drain_out.valid.eq(1), self.drain_out.data.eq(self.r2)]
        return m


class MacMultiplier(wiring.Component):
    """One signed 8x8 multiplier (the baseline MAC's)."""

    def __init__(self):
        super().__init__({
            "a": In(signed(OPERAND_WIDTH)),
            "b": In(signed(OPERAND_WIDTH)),
            "product": Out(signed(2 * OPERAND_WIDTH)),
        })

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.product.eq(self.a * self.b)
        return m


class MacAccumulator(wiring.Component):
    """The baseline MAC's R0: ``R0 <= (clear ? 0 : R0) + (acc ? product : 0)``, and its drain.

    Parameters
    ----------
    acc_width : int
        Register width (signed).
    """

    def __init__(self, acc_width: int):
        self.acc_width = acc_width
        super().__init__({
            "product": In(signed(2 * OPERAND_WIDTH)),
            "acc": In(1),
            "clear": In(1),
            "drain": In(1),
            "drain_in": In(DrainSignature(acc_width)),
            "drain_out": Out(DrainSignature(acc_width)),
            "r0": Out(signed(acc_width)),
        })

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.r0.eq(Mux(self.clear, 0, self.r0) + Mux(self.acc, self.product, 0))
        with m.If(self.drain):
            m.d.sync += [self.drain_out.valid.eq(1), self.drain_out.data.eq(self.r0)]
        with m.Else():
            m.d.sync += [self.drain_out.valid.eq(self.drain_in.valid),
                         self.drain_out.data.eq(self.drain_in.data)]
        return m
