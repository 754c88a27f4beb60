"""ExpLane: ``E = 2**(-d * scale * log2(e))`` of one score in fixed point, three stages.

Golden model: :func:`golden.vector.exp_fixed` after ``y = (d * mult + 2**(shift-1)) >> shift``
(``golden.vector.softmax_stages``); contract: ``docs/numerics.md`` section 14.
"""

from __future__ import annotations

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from golden.vector.softmax import EXP_LUT, EXP_ZERO_SHIFT, Y_FRAC_BITS
from kaleido_hw.vector.layouts import EXP_WIDTH, MULT_BITS, SHIFT_BITS


__all__ = ["ExpLane", "table_lookup"]


def table_lookup(values, index, width):
    """``values[index]`` as a balanced tree of 2:1 multiplexers on the bits of ``index``.

    Continuous assignments, not a ``case`` in an ``always @*`` block: Icarus never runs such
    a block when its selector keeps its initial value, so the first lookup of entry 0
    would read X.
    """
    level = [Const(int(v), width) for v in values]
    for bit in range(len(index)):
        level = [Mux(index[bit], level[j + 1], level[j]) for j in range(0, len(level), 2)]
    return level[0]


class ExpLane(wiring.Component):
    """One lane's exponential, pipelined over three registers.

    ``d`` (unsigned, ``score_bits``) is ``max - s``; ``mult``, ``shift`` the row's scale.

    1. ``prod = d * mult`` (registered);
    2. ``y = ((prod >> (shift - 1)) + 1) >> 1``, which equals
       ``(prod + 2**(shift-1)) >> shift`` without a variable rounding constant; only
       ``y``'s low 12 bits and "``y >= 16 * 256``" are kept (registered);
    3. ``e = EXP_LUT[y & 255] >> (y >> 8)``, 0 when ``y >= 16 * 256`` (registered).

    ``e`` is valid three cycles after ``d``; the lane has no enable (the caller tracks which
    cycles carry data).
    """

    LATENCY = 3

    def __init__(self, score_bits: int):
        self.score_bits = score_bits
        super().__init__({
            "d": In(score_bits),
            "mult": In(MULT_BITS),
            "shift": In(SHIFT_BITS),
            "e": Out(EXP_WIDTH),
        })

    def elaborate(self, platform):
        m = Module()
        prod = Signal(self.score_bits + MULT_BITS)
        m.d.sync += prod.eq(self.d * self.mult)

        # The shift travels with the product so a new row's scale may arrive behind it.
        shift_1 = Signal(SHIFT_BITS)
        m.d.sync += shift_1.eq(self.shift)
        halved = Signal(len(prod))
        m.d.comb += halved.eq(prod >> (shift_1 - 1)[:SHIFT_BITS])   # shift 0 (not allowed) wraps to 63
        y = Signal(len(prod))
        m.d.comb += y.eq((halved + 1) >> 1)
        frac = Signal(Y_FRAC_BITS)
        whole = Signal(4)
        vanishes = Signal()
        m.d.sync += [
            frac.eq(y[:Y_FRAC_BITS]),
            whole.eq(y[Y_FRAC_BITS:Y_FRAC_BITS + 4]),
            vanishes.eq(y[Y_FRAC_BITS + 4:].any()),     # y >> 8 >= 16: E = 0
        ]
        assert EXP_ZERO_SHIFT == 16
        entry = Signal(EXP_WIDTH)
        m.d.comb += entry.eq(table_lookup(EXP_LUT, frac, EXP_WIDTH))
        m.d.sync += self.e.eq(Mux(vanishes, 0, entry >> whole))
        return m
