"""On-chip follower codes of one linear-layer unit (``docs/numerics.md`` section 8, the window
rule; ``golden.window_masks``, ``golden.engine.linear.linear_plans``).

:class:`WindowCodeUnit` takes the words of a unit's members (anchor, follower 1, follower 2;
one int8 per input channel) and gives, per channel, the codes ``c1``/``c2`` of the two
followers (FULL 0, HALF 1, NONE 2, ABSENT 3) and whether the unit has F1 / F2 work there
(``golden.engine.linear.WORK``).

FULL is decided per window from its spread: ``w*sum(a*a) - sum(a)**2`` equals the sum of the
squared pairwise differences (``(a-b)**2`` for w = 2, ``(a-b)**2 + (b-c)**2 + (a-c)**2`` for
w = 3), and the window is FULL when that is below ``(w*theta1)**2`` (``full_limit``, at most
576 for full_bits >= 4). A difference of 24 or more already reaches 576 alone, so each
absolute difference is clamped to 31 before squaring: a 5x5-bit square per pair instead of
8x8 squares of the values, and the comparison stays exact. A follower of a non-FULL window is
HALF when its byte agrees with the anchor's under ``half_mask``, else NONE. A trailing
incomplete window (its last member missing) has NONE followers (missing ones ABSENT); with
``reuse`` = 0 every present follower is NONE (the dense baseline).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from golden.engine.linear import WORK


__all__ = ["WindowCodeUnit", "work_constant", "full_limit"]

_FULL, _HALF, _NONE, _ABSENT = 0, 1, 2, 3


def full_limit(full_bits, window3):
    """The unit's ``full_limit``, ``(w * theta1)**2`` with ``theta1 = 2**(7 - full_bits)``
    (``full_bits`` a value, at least 4): ``w`` 3 where ``window3`` (a value, or True),
    else 2. Its engines latch it with the run's configuration."""
    square = (Mux(window3, Const(9, 4), Const(4, 4)) if isinstance(window3, Value)
              else Const(9 if window3 else 4, 4))
    return square << Cat(Const(0, 1), 7 - full_bits)          # shift 2 * (7 - full_bits)


def work_constant(kind: int) -> int:
    """16-bit table of ``WORK[kind]``: bit ``c1*4 + c2`` set iff a PE with codes (c1, c2)
    has work in a step of ``kind``."""
    return sum(int(bool(WORK[kind, c1, c2])) << (4 * c1 + c2)
               for c1 in range(4) for c2 in range(4))


class WindowCodeUnit(wiring.Component):
    """Codes and F1/F2 work of one unit, ``lanes`` channels at once (combinational).

    Parameters
    ----------
    lanes : int
        Channels per word (int8 each, channel c at bits ``8c..8c+7``).

    Inputs: ``m0``/``m1``/``m2`` (member words), ``present1``/``present2`` (the member
    exists), ``w3`` (window 3; else member 2 is ignored and ``c2`` is ABSENT), ``reuse``,
    ``full_limit``, ``half_mask``. Outputs per channel: ``c1``/``c2`` (2 bits each, channel c
    at bits ``2c..2c+1``), ``work1``/``work2`` (one bit each).
    """

    def __init__(self, lanes: int):
        self.lanes = lanes
        super().__init__({
            "m0": In(8 * lanes), "m1": In(8 * lanes), "m2": In(8 * lanes),
            "present1": In(1), "present2": In(1), "w3": In(1), "reuse": In(1),
            "full_limit": In(10), "half_mask": In(8),
            "c1": Out(2 * lanes), "c2": Out(2 * lanes),
            "work1": Out(lanes), "work2": Out(lanes),
        })

    def elaborate(self, platform):
        m = Module()
        has2 = Signal()
        complete = Signal()
        m.d.comb += [has2.eq(self.w3 & self.present2),
                     complete.eq(Mux(self.w3, self.present2, self.present1))]
        work = [Const(work_constant(k), 16) for k in (1, 2)]

        def square_clamped(x, y, name):
            diff = Signal(signed(9), name=f"{name}_d")
            mag = Signal(unsigned(9), name=f"{name}_m")
            sq = Signal(unsigned(10), name=f"{name}_sq")
            m.d.comb += [diff.eq(x - y), mag.eq(Mux(diff < 0, -diff, diff))]
            small = Mux(mag > 31, 31, mag[:5])
            m.d.comb += sq.eq(small * small)
            return sq

        c1s, c2s, w1s, w2s = [], [], [], []
        for c in range(self.lanes):
            a = self.m0[8 * c:8 * c + 8]
            b = self.m1[8 * c:8 * c + 8]
            d = self.m2[8 * c:8 * c + 8]
            sab = square_clamped(a.as_signed(), b.as_signed(), f"ab{c}")
            sbd = square_clamped(b.as_signed(), d.as_signed(), f"bc{c}")
            sad = square_clamped(a.as_signed(), d.as_signed(), f"ac{c}")
            spread = Signal(12, name=f"spread{c}")
            m.d.comb += spread.eq(sab + Mux(self.w3, sbd + sad, 0))
            full = Signal(name=f"full{c}")
            m.d.comb += full.eq(complete & self.reuse & (spread < self.full_limit))
            on = complete & self.reuse

            def code(present, member, name):
                sig = Signal(2, name=name)
                half = ((a ^ member) & self.half_mask) == 0
                m.d.comb += sig.eq(Mux(~present, _ABSENT,
                                       Mux(full, _FULL, Mux(on & half, _HALF, _NONE))))
                return sig
            k1 = code(self.present1, b, f"c1_{c}")
            k2 = code(has2, d, f"c2_{c}")
            idx = Cat(k2, k1)
            c1s.append(k1)
            c2s.append(k2)
            w1s.append(work[0].bit_select(idx, 1))
            w2s.append(work[1].bit_select(idx, 1))
        m.d.comb += [self.c1.eq(Cat(*c1s)), self.c2.eq(Cat(*c2s)),
                     self.work1.eq(Cat(*w1s)), self.work2.eq(Cat(*w2s))]
        return m
