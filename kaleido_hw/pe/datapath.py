"""Datapath blocks of the PEs, one concern each, so that synthesis (``kaleido-hw synth``,
hierarchical mapping) can attribute area to them: the split multiplier, the three
accumulators and the register bank of ``ReusePE``; the multiplier and accumulator of
``BaselinePE``. Semantics: ``golden/pe/model.py`` (``terms``, the cycle models).
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from kaleido_hw.pe.layouts import (OPERAND_WIDTH, REGISTERS, Drain, DrainSignature, Move, Op, Part,
                                   Split)


__all__ = ["ReuseMultiplier", "Accumulator", "AccumulatorBank", "MacMultiplier",
           "MacAccumulator", "TERM0_SHAPE", "TERM1_SHAPE", "PROD_SHAPE", "PV_X_WIDTH",
           "term_shapes"]

#: t0 = int8 x unsigned nibble; t1 = 16 x (int8 x signed nibble) at most; their sum.
TERM0_SHAPE = signed(13)
TERM1_SHAPE = signed(17)
PROD_SHAPE = signed(18)
#: Width of the partial-product rows and carry-save vectors: every value the multiplier
#: forms lies in [-2**16, 2**16), so sums modulo 2**18 are exact.
_PP_WIDTH = 18
#: The P @ V mode's row operands: a pre-added sum of up to three uint8 P (at most 765).
PV_X_WIDTH = 10


def term_shapes(pv: bool = False):
    """``(t0, t1, prod, partial-product width)`` of the multiplier. With the P @ V mode a
    row operand lies in [-128, 1023]: t0 in [-1920, 15345], t1 = 16 * x * signed nibble in
    [-130944, 114576], prod in [-132864, 129921], so one more bit for t0's and t1's range
    and for the partial products."""
    if pv:
        return signed(15), signed(18), signed(19), 19
    return TERM0_SHAPE, TERM1_SHAPE, PROD_SHAPE, _PP_WIDTH


def _csa(m, a, b, c, name, width=_PP_WIDTH):
    """A row of full adders (3:2 compressor): ``a + b + c == sum + carry`` modulo
    ``2**width``. Returns ``(sum, carry)``; bit 0 of ``carry`` is always 0."""
    s = Signal(width, name=f"{name}_s")
    k = Signal(width, name=f"{name}_c")
    m.d.comb += [s.eq(a ^ b ^ c), k.eq(((a & b) | (a & c) | (b & c)) << 1)]
    return s, k


class ReuseMultiplier(wiring.Component):
    """The ReusePE's multiplier: one 8x8 partial-product array cut into two 4x8 halves, with
    operand routing (``golden.pe.model.terms``).

    Half 0 multiplies an int8 ``x0`` by an unsigned nibble ``n0``; half 1 an int8 ``x1`` by a
    nibble ``n1``, signed (the high nibble of a MUL, whose product is weighted by 16) or
    unsigned (lane 1 of LOW and LOW_PAIR, unweighted):

    ======== ===================== ===================== ===========================
    op       split COL             split ROW             outputs
    ======== ===================== ===================== ===========================
    MUL      x = a0, y = b         x = b, y = a0         t0 = x*lo(y), t1 = 16*x*hi(y)
    LOW      a_i * lo(b)           lo(a_i) * b           t0 lane 0, t1 lane 1
    LOW_PAIR a0 * b[3:0], a1 * b[7:4] (split ignored)    t0, t1
    ======== ===================== ===================== ===========================

    and ``prod = t0 + t1`` (the whole 8x8 product for a MUL). For IDLE the outputs are
    don't-cares: the PE lets no register take them.

    Why one array with taps, not two multipliers and an adder: each half's four rows are
    reduced to carry-save form (two levels of 3:2 compressors); ``t0`` and ``t1`` are the
    carry-propagate sums of their own half, and ``prod`` merges both halves' carry-save
    vectors (two more compressor levels) before its own carry-propagate adder. All three
    leave the multiplier at the delay of one 8x8 multiplier, so the registers' selection and
    accumulation follow at the same depth as in the plain MAC. The signed high nibble's top
    row is negative (``-8*x``): it enters inverted, and the two's-complement ``+1`` takes the
    carry vector's always-zero bit 0.

    Parameters
    ----------
    pv : bool
        Build the P @ V mode (``docs/pe.md`` section 3.4): inputs ``pv``, ``x_lo`` and
        ``x_hi`` (unsigned, :data:`PV_X_WIDTH` bits); while ``pv`` is 1 the column-side
        halves multiply ``x_lo`` (half 0) and ``x_hi`` (half 1) instead of ``a0``/``a1``,
        so the row operands are 11 bits signed and the terms one bit wider
        (:func:`term_shapes`). The control word must then split on the column (a MUL of
        split COL, or LOW_PAIR).
    """

    def __init__(self, pv: bool = False):
        self.pv_mode = pv
        t0, t1, prod, _ = term_shapes(pv)
        ports = {
            "op": In(Op),
            "split": In(Split),
            "a0": In(signed(OPERAND_WIDTH)),
            "a1": In(signed(OPERAND_WIDTH)),
            "b": In(signed(OPERAND_WIDTH)),
            "t0": Out(t0),
            "t1": Out(t1),
            "prod": Out(prod),
        }
        if pv:
            ports.update({"pv": In(1), "x_lo": In(PV_X_WIDTH), "x_hi": In(PV_X_WIDTH)})
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        W = term_shapes(self.pv_mode)[3]
        xw = PV_X_WIDTH + 1 if self.pv_mode else 8
        a0, a1, b = self.a0, self.a1, self.b
        is_mul = Signal()
        is_pair = Signal()
        split_col = Signal()
        m.d.comb += [is_mul.eq(self.op == Op.MUL), is_pair.eq(self.op == Op.LOW_PAIR),
                     split_col.eq(self.split == Split.COL)]
        col_side = split_col | is_pair

        # Operand routing. Half 1 takes the high nibble of the split operand for a MUL.
        x0 = Signal(signed(xw))
        n0 = Signal(4)
        x1 = Signal(signed(xw))
        n1 = Signal(4)
        x0_s8 = Mux(col_side, a0, b)
        x1_s8 = Mux(is_mul, Mux(split_col, a0, b), Mux(col_side, a1, b))
        if self.pv_mode:
            # P @ V: the pre-added P sums take the column-side halves' row operands.
            x0_s8 = Mux(self.pv, self.x_lo, x0_s8)
            x1_s8 = Mux(self.pv, self.x_hi, x1_s8)
        m.d.comb += [
            x0.eq(x0_s8),
            n0.eq(Mux(col_side, b[0:4], a0[0:4])),
            x1.eq(x1_s8),
            n1.eq(Mux(is_mul, Mux(split_col, b[4:8], a0[4:8]),
                      Mux(is_pair, b[4:8], Mux(split_col, b[0:4], a1[0:4])))),
        ]
        negative = Signal()   # the signed nibble's top row weighs -8 (MUL only)
        m.d.comb += negative.eq(is_mul & n1[3])

        def row(x, bit, shift, invert=None):
            r = Signal(W, name=f"pp_{x.name}_{shift}")
            wide = Signal(W, name=f"pp_{x.name}_{shift}_x")
            m.d.comb += wide.eq(x.as_signed() << shift)   # sign-extended to W bits
            value = wide if invert is None else wide ^ invert.replicate(W)
            m.d.comb += r.eq(Mux(bit, value, 0))
            return r

        rows0 = [row(x0, n0[i], i) for i in range(4)]
        rows1 = [row(x1, n1[i], i) for i in range(3)] + [row(x1, n1[3], 3, invert=negative)]
        s0a, c0a = _csa(m, *rows0[:3], "h0a", W)
        s0, c0 = _csa(m, s0a, c0a, rows0[3], "h0b", W)
        s1a, c1a = _csa(m, *rows1[:3], "h1a", W)
        s1, c1 = _csa(m, s1a, c1a, rows1[3], "h1b", W)
        c1n = Signal(W)
        m.d.comb += c1n.eq(c1 | negative)   # +1 of the inverted row: carry bit 0 is free

        q1 = Signal(W)
        m.d.comb += [self.t0.eq((s0 + c0)[:W].as_signed()), q1.eq(s1 + c1n)]
        m.d.comb += self.t1.eq(Mux(is_mul, q1 << 4, q1)[:W].as_signed())
        # The product: both halves' carry-save vectors, half 1 weighted by 16 for a MUL.
        s1w, c1w = Signal(W), Signal(W)
        m.d.comb += [s1w.eq(Mux(is_mul, s1 << 4, s1)), c1w.eq(Mux(is_mul, c1n << 4, c1n))]
        spa, cpa = _csa(m, s0, c0, s1w, "pa", W)
        sp, cp = _csa(m, spa, cpa, c1w, "pb", W)
        m.d.comb += self.prod.eq((sp + cp)[:W].as_signed())
        return m


class Accumulator(wiring.Component):
    """One of R0/R1/R2: ``R <= (clear ? 0 : base) + {0, prod, t0, t1}[part]``.

    Parameters
    ----------
    acc_width : int
        Register width (signed; wraps).
    pv : bool
        Terms of the multiplier with the P @ V mode (:func:`term_shapes`).

    ``base`` is what the bank's ``move`` gives this register (its own value, another
    register's, or 0). Each accumulator has its own adder: in a tile-0 step all three take a
    term (the paper's Mode 0), so no adder can be shared without a second cycle.
    """

    def __init__(self, acc_width: int, pv: bool = False):
        self.acc_width = acc_width
        self.shapes = t0, t1, prod, _ = term_shapes(pv)
        super().__init__({
            "base": In(signed(acc_width)),
            "clear": In(1),
            "part": In(Part),
            "t0": In(t0),
            "t1": In(t1),
            "prod": In(prod),
            "value": Out(signed(acc_width)),
        })

    def elaborate(self, platform):
        m = Module()
        term = Signal(self.shapes[2])
        with m.Switch(self.part):
            with m.Case(Part.PROD):
                m.d.comb += term.eq(self.prod)
            with m.Case(Part.LOW):
                m.d.comb += term.eq(self.t0)
            with m.Case(Part.HIGH):
                m.d.comb += term.eq(self.t1)
            with m.Default():
                m.d.comb += term.eq(0)
        m.d.sync += self.value.eq(Mux(self.clear, 0, self.base) + term)
        return m


class AccumulatorBank(wiring.Component):
    """R0/R1/R2 with the pass-change moves and the drain mux.

    Parameters
    ----------
    acc_width : int
        Register width (signed).
    pv : bool
        Terms of the multiplier with the P @ V mode (:func:`term_shapes`).

    ``move`` picks each register's base (``docs/pe.md``: R1_TO_R0 gives R0 <- R1, R1 <- 0;
    R2_TO_R0 R0 <- R2, R2 <- 0; ROTATE R0 <- R1, R1 <- R2, R2 <- 0); then ``clear`` and the
    register's part apply (:class:`Accumulator`). ``drain_out`` takes the pre-update value
    of the drained register (valid 1) or shifts ``drain_in``. (Renaming physical registers
    instead of moving values was measured too: smaller alone, larger in the arrays, whose
    decoders only ever move at a pass's first step; ``docs/pe.md``.)
    """

    def __init__(self, acc_width: int, pv: bool = False):
        self.acc_width = acc_width
        self.pv_mode = pv
        t0, t1, prod, _ = term_shapes(pv)
        super().__init__({
            "t0": In(t0),
            "t1": In(t1),
            "prod": In(prod),
            "part": In(data.ArrayLayout(Part, REGISTERS)),
            "clear": In(unsigned(REGISTERS)),
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
        accs = []
        for k in range(REGISTERS):
            m.submodules[f"r{k}_unit"] = unit = Accumulator(self.acc_width, self.pv_mode)
            m.d.comb += [unit.clear.eq(self.clear[k]), unit.part.eq(self.part[k]),
                         unit.t0.eq(self.t0), unit.t1.eq(self.t1), unit.prod.eq(self.prod),
                         regs[k].eq(unit.value)]
            accs.append(unit)
        # Per move, the register each one starts from (None: 0).
        sources = {Move.NONE: (0, 1, 2), Move.R1_TO_R0: (1, None, 2),
                   Move.R2_TO_R0: (2, 1, None), Move.ROTATE: (1, 2, None)}
        with m.Switch(self.move):
            for move, src in sources.items():
                with m.Case(move) if move != Move.ROTATE else m.Default():
                    m.d.comb += [accs[k].base.eq(0 if src[k] is None else regs[src[k]])
                                 for k in range(REGISTERS)]
        with m.Switch(self.drain):
            with m.Case(Drain.NONE):
                m.d.sync += [self.drain_out.valid.eq(self.drain_in.valid),
                             self.drain_out.data.eq(self.drain_in.data)]
            with m.Case(Drain.R0):
                m.d.sync += [self.drain_out.valid.eq(1), self.drain_out.data.eq(regs[0])]
            with m.Case(Drain.R1):
                m.d.sync += [self.drain_out.valid.eq(1), self.drain_out.data.eq(regs[1])]
            with m.Default():
                m.d.sync += [self.drain_out.valid.eq(1), self.drain_out.data.eq(regs[2])]
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
