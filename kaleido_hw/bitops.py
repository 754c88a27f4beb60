"""Small bit helpers of the blocks: the width of a field, and (combinational) population count
and the index of the lowest set bit (a priority encoder), both as balanced trees (log2(width)
levels)."""

from __future__ import annotations

from amaranth.hdl import Const, Mux, Signal, Value


__all__ = ["bits_for", "popcount", "lowest_set", "set_bit_indices"]


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
    whether any bit is set, as signals of module ``m``. Recursive halving: the low half wins
    when it has a set bit (each node is a signal, so no subtree is emitted twice)."""
    value = Value.cast(value)
    width = len(value)
    if width == 1:
        return Const(0, 1), value[0]
    half = 1 << ((width - 1).bit_length() - 1)     # largest power of two below width
    lo_idx, lo_any = lowest_set(m, value[:half], name + "_l")
    hi_idx, hi_any = lowest_set(m, value[half:], name + "_h")
    idx = Signal((width - 1).bit_length(), name=name + "_idx")
    any_ = Signal(name=name + "_any")
    m.d.comb += [idx.eq(Mux(lo_any, lo_idx, hi_idx + half)), any_.eq(lo_any | hi_any)]
    return idx, any_


def set_bit_indices(m, mask, count: int, name: str) -> list[Value]:
    """Indices of the ``count`` lowest set bits of ``mask``, lowest first, as signals of module
    ``m`` (entry j is 0 when ``mask`` has j or fewer set bits): one :func:`lowest_set` per
    entry, each on the mask with the lower set bits cleared (``{name}_ch{j}``,
    ``{name}_rest{j}``)."""
    mask = Value.cast(mask)
    out, rest = [], mask
    for j in range(count):
        idx, _ = lowest_set(m, rest, f"{name}_ch{j}")
        out.append(idx)
        nxt = Signal(len(mask), name=f"{name}_rest{j}")
        m.d.comb += nxt.eq(rest & (rest - 1))
        rest = nxt
    return out
