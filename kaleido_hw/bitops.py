"""Small bit helpers of the blocks: the width of a field, and (combinational) balanced
reductions (population count, masked OR), the index of the lowest set bit (a priority
encoder) and the indices of the lowest few set bits (a rank select)."""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Mux, Signal, Value


__all__ = ["bits_for", "tree", "popcount", "lowest_set", "rank_select", "masked_or",
           "onehot_or"]


def bits_for(value: int) -> int:
    """Bits of an unsigned field that holds ``0..value`` (at least 1)."""
    return max(1, int(value).bit_length())


def tree(values, combine):
    """``values`` reduced with ``combine(a, b)`` as a balanced tree (log depth, not a chain):
    neighbours pair up level by level, an odd last value moving up unpaired."""
    values = list(values)
    while len(values) > 1:
        values = [combine(values[j], values[j + 1]) for j in range(0, len(values) - 1, 2)] + (
            [values[-1]] if len(values) % 2 else [])
    return values[0]


def popcount(value) -> Value:
    """Number of set bits of ``value``."""
    value = Value.cast(value)
    if not len(value):
        return Const(0, 1)
    return tree((value[j] for j in range(len(value))), lambda a, b: a + b)


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


def rank_select(m, value, count: int, name: str = "rank", block: int = 8,
                overflow: bool = False):
    """``(indices, rest, taken)``: the positions of the ``count`` lowest set bits of ``value``,
    as signals of module ``m``. ``indices[s]`` is the index of the set bit of rank ``s`` (the
    (s+1)-th lowest; 0 when fewer than s+1 bits are set, as :func:`lowest_set` gives for an
    empty word), ``rest`` is ``value`` without those bits and ``taken`` is
    ``min(popcount(value), count)``. With ``overflow`` a fourth signal, ``more``, is
    ``popcount(value) > count`` (``rest`` is not zero): the block sums then saturate at
    ``count + 1``, so ``more`` comes out of the prefix adders, not out of a zero test of
    ``rest`` in series with the ranks.

    Peeling the lowest bit ``count`` times (``x & (x - 1)``) puts ``count`` carry chains in
    series. Here every bit learns its **rank**, the number of set bits below it, at once:
    ranks are counted within blocks of ``block`` bits, the block totals are summed by a
    parallel prefix (log2 of the block count adder levels), and each bit adds its block's
    offset. Block sums saturate at ``count`` (a bit of rank ``count`` or more is not taken,
    whatever its rank), so the prefix adders are ``bits_for(count)`` wide. A bit is taken
    when it is set and its rank is below ``count``: then its one-hot rank has a bit;
    ``indices[s]`` ORs the positions of the bits of rank ``s`` (at most one). The depth grows
    with log(width), not with ``count`` x width."""
    value = Value.cast(value)
    width = len(value)
    top = count + 1 if overflow else count
    rw = bits_for(top)

    def sat(x):
        return Mux(x > top, top, x)[:rw]

    # exclusive rank within the block (a running sum: blocks are short), each block's total
    nblocks = (width + block - 1) // block
    local, totals = [], []
    for b in range(nblocks):
        bits = value[b * block:min(width, (b + 1) * block)]
        run = Const(0, 1)
        for j in range(len(bits)):
            local.append(run)
            run = run + bits[j]
        totals.append(Signal(rw, name=f"{name}_total{b}"))
        m.d.comb += totals[-1].eq(sat(run))
    # inclusive prefix of the totals (Kogge-Stone: at step d block b adds block b - d)
    incl = totals
    d = 1
    while d < nblocks:
        nxt = [Signal(rw, name=f"{name}_pre{d}_{b}") for b in range(nblocks)]
        for b in range(nblocks):
            m.d.comb += nxt[b].eq(sat(incl[b] + incl[b - d]) if b >= d else incl[b])
        incl, d = nxt, 2 * d
    offsets = [Const(0, rw)] + incl[:-1]
    taken = Signal(bits_for(count), name=f"{name}_taken")
    # With overflow the block sums reach count + 1 (that is ``more``); taken stops at count.
    m.d.comb += taken.eq(Mux(incl[-1] > count, count, incl[-1]) if overflow else incl[-1])

    # Offsets saturate at count (or count + 1) and a block adds fewer than block, so a rank of
    # count or more (not taken) needs no second saturation: the one-hot below simply has no
    # bit for it.
    nbits = max(1, (width - 1).bit_length())
    hits = [[] for _ in range(count)]        # per rank, the one-hot of the bit holding it
    kept = []
    for c in range(width):
        rank = Signal(bits_for(count + block), name=f"{name}_r{c}")
        m.d.comb += rank.eq(offsets[c // block] + local[c])
        onehot = Signal(count, name=f"{name}_oh{c}")
        m.d.comb += onehot.eq(Mux(value[c], Const(1, count) << rank, 0))
        for s in range(count):
            hits[s].append(onehot[s])
        kept.append(~onehot.any())
    rest = Signal(width, name=f"{name}_rest")
    m.d.comb += rest.eq(value & Cat(*kept))
    indices = []
    for s in range(count):
        hit = Cat(*hits[s])
        idx = Signal(nbits, name=f"{name}_idx{s}")
        m.d.comb += idx.eq(Cat(*[(hit & Const(sum(1 << p for p in range(width) if p >> k & 1),
                                                width)).any() for k in range(nbits)]))
        indices.append(idx)
    if overflow:
        more = Signal(name=f"{name}_more")
        m.d.comb += more.eq(incl[-1] > count)
        return indices, rest, taken, more
    return indices, rest, taken


def masked_or(mask, values) -> Value:
    """OR of the ``values`` whose bit of ``mask`` is set, as a balanced OR tree rather than a
    chain."""
    return tree((Mux(mask[j], v, 0) for j, v in enumerate(values)), lambda a, b: a | b)


def onehot_or(onehot, values) -> Value:
    """The value selected by ``onehot`` (at most one bit set): an AND-OR multiplexer,
    :func:`masked_or`."""
    return masked_or(onehot, values)
