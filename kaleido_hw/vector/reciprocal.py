"""RowReciprocal: ``R = C // total`` for a constant C, two restoring-division steps per
cycle: ``(255 << 32) // sum`` of section 14 (golden: ``recip`` of
:func:`golden.vector.softmax_stages`), ``2**40 // L`` of section 15 (``recip`` of
:func:`golden.vector.online_stages`); contract: ``docs/numerics.md``.
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from golden.vector.softmax import EXP_BITS, P_ONE, RECIP_BITS
from kaleido_hw.vector.layouts import RECIP_WIDTH


__all__ = ["RowReciprocal", "STEPS_PER_CYCLE", "CYCLES"]

#: Quotient bits per cycle: two compare-subtracts in series keep the path near one
#: multiplier's while the division (13 cycles) stays shorter than a 16-beat row.
STEPS_PER_CYCLE = 2
#: Cycles of the default division. Its dividend's bits above the quotient's, ``(255 << 32)
#: >> 26 = 255 << 6``, are below ``2**15 <= total``, so the quotient's higher bits are zero
#: and long division starts with that remainder.
CYCLES = -(-RECIP_WIDTH // STEPS_PER_CYCLE)


class RowReciprocal(wiring.Component):
    """Long division of a constant by a row's sum: by default ``255 * 2**32`` by the
    exponential sum of section 14.

    ``start`` (with ``total`` >= ``min_total``; ``slot_in`` travels along) begins a division
    when ``busy`` is low; ``self.cycles`` (:data:`CYCLES` = 13 by default) cycles later
    ``done`` pulses for one cycle with ``recip`` and ``slot``. The dividend's remaining bits
    are all zero, so each step doubles the remainder and subtracts ``total`` when it fits
    (one quotient bit, MSB first); the remainder stays below ``total``.

    ``numerator``, ``quotient_width``, ``min_total``: another constant (its low quotient bits
    zero), the quotient's width and the smallest total (section 15's ``2**40 // L``: 33
    bits, ``L >= 255``).
    """

    def __init__(self, total_width: int, slot_width: int, *,
                 numerator: int = P_ONE << RECIP_BITS, quotient_width: int = RECIP_WIDTH,
                 min_total: int = 1 << EXP_BITS):
        self.total_width = total_width
        self.cycles = -(-quotient_width // STEPS_PER_CYCLE)
        self.steps = self.cycles * STEPS_PER_CYCLE
        self.start_remainder = numerator >> self.steps
        # The quotient's higher bits are zero and the dropped dividend bits too.
        assert self.start_remainder < min_total and not numerator & ((1 << self.steps) - 1)
        super().__init__({
            "start": In(1),
            "total": In(total_width),
            "slot_in": In(slot_width),
            "busy": Out(1),
            "done": Out(1),
            "recip": Out(quotient_width),
            "slot": Out(slot_width),
        })

    def elaborate(self, platform):
        m = Module()
        divisor = Signal(self.total_width)
        remainder = Signal(self.total_width)
        quotient = Signal(self.steps)
        cycles = Signal(range(self.cycles + 1))
        m.d.sync += self.done.eq(0)
        m.d.comb += self.recip.eq(quotient[:len(self.recip)])   # the top bits are always 0

        rem, bits = remainder, []
        for k in range(STEPS_PER_CYCLE):
            doubled = Signal(self.total_width + 1, name=f"doubled{k}")
            m.d.comb += doubled.eq(rem << 1)
            fits = Signal(name=f"fits{k}")
            m.d.comb += fits.eq(doubled >= divisor)
            nxt = Signal(self.total_width, name=f"rem{k}")
            m.d.comb += nxt.eq(Mux(fits, doubled - divisor, doubled))
            rem = nxt
            bits.append(fits)
        with m.If(self.busy):
            m.d.sync += [remainder.eq(rem), cycles.eq(cycles - 1)]
            m.d.sync += quotient.eq((quotient << STEPS_PER_CYCLE) |
                                    sum(b << (STEPS_PER_CYCLE - 1 - k) for k, b in enumerate(bits)))
            with m.If(cycles == 1):
                m.d.sync += [self.busy.eq(0), self.done.eq(1)]
        with m.Elif(self.start):
            m.d.sync += [
                divisor.eq(self.total),
                remainder.eq(self.start_remainder),
                quotient.eq(0),
                cycles.eq(self.cycles),
                self.busy.eq(1),
                self.slot.eq(self.slot_in),
            ]
        return m
