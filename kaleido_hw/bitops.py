"""Small bit helpers of the blocks: the width of a field, and (combinational) population count
(a balanced adder tree) and the index of the lowest set bit (a priority encoder)."""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Signal, Value


__all__ = ["bits_for", "popcount", "lowest_set"]


def bits_for(value: int) -> int:
    """Bits of an unsigned field that holds ``0..value`` (at least 1)."""
    return max(1, int(value).bit_length())


def popcount(value) -> Value:
    """Number of set bits of ``value``."""
    value = Value.cast(value)
    terms = [value[j] for j in range(len(value))]
    if not terms:
        return Const(0, 1)
    while len(terms) > 1:
        nxt = [terms[j] + terms[j + 1] for j in range(0, len(terms) - 1, 2)]
        if len(terms) % 2:
            nxt.append(terms[-1])
        terms = nxt
    return terms[0]


def lowest_set(m, value, name: str = "lowest") -> tuple[Value, Value]:
    """``(index, any)``: index of the lowest set bit of ``value`` (0 when none is set) and
    whether any bit is set, as signals of module ``m``.

    The lowest set bit is isolated as a one-hot word, ``value & ~(value - 1)`` (the borrow
    of ``value - 1`` stops at that bit), and index bit b is the OR of the one-hot bits whose
    position has bit b set: a few wide operators instead of a tree of ``width`` muxes, so the
    generated Verilog stays small (synthesis maps the borrow chain to a log-depth prefix)."""
    value = Value.cast(value)
    width = len(value)
    if width == 1:
        return Const(0, 1), value[0]
    onehot = Signal(width, name=name + "_onehot")
    m.d.comb += onehot.eq(value & ~(value - 1)[:width])
    nbits = (width - 1).bit_length()
    idx = Signal(nbits, name=name + "_idx")
    any_ = Signal(name=name + "_any")
    position_bits = [Const(sum(1 << p for p in range(width) if p >> b & 1), width)
                     for b in range(nbits)]
    m.d.comb += [idx.eq(Cat(*[(onehot & bits).any() for bits in position_bits])),
                 any_.eq(value.any())]
    return idx, any_
