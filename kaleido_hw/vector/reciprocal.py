"""RowReciprocal: ``R = (255 << 32) // total``, two restoring-division steps per cycle.

Golden model: ``recip`` of :func:`golden.vector.softmax_stages`; contract:
``docs/numerics.md`` section 14.
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
CYCLES = -(-RECIP_WIDTH // STEPS_PER_CYCLE)
_STEPS = CYCLES * STEPS_PER_CYCLE
#: The dividend's bits above the quotient's: ``(255 << 32) >> 26 = 255 << 6``, below
#: ``2**15 <= total``, so the quotient's higher bits are zero and long division starts
#: with this remainder.
_START_REMAINDER = (P_ONE << RECIP_BITS) >> _STEPS
assert _START_REMAINDER < 1 << EXP_BITS


class RowReciprocal(wiring.Component):
    """Long division of the constant ``255 * 2**32`` by a row's exponential sum.

    ``start`` (with ``total`` >= 2**15, the sum of E; ``slot_in`` travels along) begins a
    division when ``busy`` is low; :data:`CYCLES` = 13 cycles later ``done`` pulses for one
    cycle with ``recip`` and ``slot``. The dividend's remaining bits are all zero, so each
    step doubles the remainder and subtracts ``total`` when it fits (one quotient bit, MSB
    first); the remainder stays below ``total``.
    """

    def __init__(self, total_width: int, slot_width: int):
        self.total_width = total_width
        super().__init__({
            "start": In(1),
            "total": In(total_width),
            "slot_in": In(slot_width),
            "busy": Out(1),
            "done": Out(1),
            "recip": Out(RECIP_WIDTH),
            "slot": Out(slot_width),
        })

    def elaborate(self, platform):
        m = Module()
        divisor = Signal(self.total_width)
        remainder = Signal(self.total_width)
        quotient = Signal(_STEPS)
        cycles = Signal(range(CYCLES + 1))
        m.d.sync += self.done.eq(0)
        m.d.comb += self.recip.eq(quotient[:RECIP_WIDTH])   # the top bit is always 0

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
                remainder.eq(_START_REMAINDER),
                quotient.eq(0),
                cycles.eq(CYCLES),
                self.busy.eq(1),
                self.slot.eq(self.slot_in),
            ]
        return m
