"""On-chip reuse codes and per-pass work bitmaps (``docs/array.md``, "Channel steps and
skipping"; codes: ``docs/numerics.md``).

:class:`CodeUnit` compares a follower token's word with its anchor's word, all channels at
once: the follower is FULL at a channel when the top ``1 + full_bits`` bits of the two int8
values agree, else HALF when the top ``1 + half_bits`` bits agree, else NONE; with the XOR
of the two bytes that is ``(a ^ f) & mask == 0`` for the masks ``0xFF << (7 - bits)``. For a
linear block (``window``) FULL is the window rule of ``docs/numerics.md`` section 8 with
windows of 2: ``|a - f| < 2^(8 - full_bits)`` (for two values the rule's ``w*S2 - S1^2 <
(w*theta1)^2`` is ``(a - f)^2 < (2*theta1)^2``); HALF is the same test in both rules. It
also forms the effective follower (the anchor's value where FULL). :func:`work_bitmap` tells,
per channel, whether any PE of a tile quad has work in a pass, from the sets of codes that
occur among the quad's row units and among its column units.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, Value
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from kaleido_hw.array.tile_cell import work_table


__all__ = ["CodeUnit", "code_mask", "work_bitmap"]


def code_mask(bits: int) -> int:
    """Byte mask of the top ``1 + bits`` bits: two int8 values agree there iff
    ``(a ^ b) & code_mask(bits) == 0``."""
    return (0xFF << (7 - bits)) & 0xFF


class CodeUnit(wiring.Component):
    """Reuse codes of one follower word against its anchor word, ``lanes`` channels at once.

    Parameters
    ----------
    lanes : int
        Channels per word (int8 each).
    codes : bool
        Build the code planes and the effective word (the sequencers); without them only
        ``full`` (the scheduler's pre-pass, whose pattern bits are the channels not FULL).

    Inputs: ``anchor``, ``follower`` (``8*lanes`` bits, channel c at bits ``8c..8c+7``),
    ``present`` (the unit has a follower; else every code is ABSENT), ``reuse`` (0: every
    present follower is NONE, the dense baseline), ``window`` (FULL by the window rule of a
    linear block instead of the top bits), ``full_mask``/``half_mask``
    (:func:`code_mask` of full_bits/half_bits). Outputs, one bit per channel: ``full`` (the
    follower is FULL: present, reuse on and the rule met); with ``codes``, the code as
    two bit planes ``code_lo``/``code_hi`` (code = ``2*hi + lo``: 0 FULL, 1 HALF, 2 NONE,
    3 ABSENT) and one-hot planes ``is_code[v]`` (bit c set iff channel c has code v), which
    the sequencer ORs into a quad's code sets; and ``effective``, the follower word with FULL
    channels replaced by the anchor's value.

    The compare is done on whole words: XOR, AND with the byte mask repeated per channel,
    then an OR of each byte's bits folded into its bit 0 by three shifts (shifting right by
    at most 7 never carries a higher byte into bit 0 of a byte). The window rule's distance
    too, without a borrow chain through the high bits: on the offset-binary bytes ``x = a ^
    0x80``, ``y = f ^ 0x80`` split at bit ``s`` (high parts X, Y; low parts), ``|x - y| <
    2^s`` iff X = Y, or X = Y + 1 and x's low part is below y's, or Y = X + 1 and the reverse.
    X and Y are adjacent iff their XOR ``d`` is one run of bits starting at bit ``s`` (no
    hole: no bit of ``d`` above a clear one) and the larger one holds exactly the run's top
    bit; the low parts (at most 4 bits) are compared by a subtraction with the byte's top bit
    forced, so that no borrow crosses a byte.
    """

    def __init__(self, lanes: int, codes: bool = True):
        self.lanes, self.codes = lanes, codes
        outputs = {"full": Out(lanes)}
        if codes:
            outputs.update({"code_lo": Out(lanes), "code_hi": Out(lanes),
                            "is_code": Out(data.ArrayLayout(lanes, 4)),
                            "effective": Out(8 * lanes)})
        super().__init__({
            "anchor": In(8 * lanes),
            "follower": In(8 * lanes),
            "present": In(1),
            "reuse": In(1),
            "window": In(1),
            "full_mask": In(8),
            "half_mask": In(8),
            **outputs,
        })

    def elaborate(self, platform):
        m = Module()
        n = self.lanes

        def word(name, value):
            # Every word operation through a signal: a slice of an expression is emitted
            # as the whole expression.
            sig = Signal(8 * n, name=name)
            m.d.comb += sig.eq(value)
            return sig

        def fold(value, name):
            """Bit 0 of each byte: the OR of the byte's bits (bits 1..7 are don't-care)."""
            f4 = word(f"{name}_f4", value | (value >> 4))
            f2 = word(f"{name}_f2", f4 | (f4 >> 2))
            return word(f"{name}_f1", f2 | (f2 >> 1))

        def lanes(value, name):
            """The lane bits (bit 0 of every byte) of a folded word."""
            out = Signal(n, name=name)
            m.d.comb += out.eq(Cat(*(value[8 * c] for c in range(n))))
            return out

        diff = word("diff", self.anchor ^ self.follower)
        full_masks = word("full_masks", Cat(*[self.full_mask] * n))
        full_far = fold(diff & full_masks, "full_differs")

        # Window rule: |a - f| < 2^s, s = 8 - full_bits (1..4), byte-wise on whole words
        # and without a borrow chain through the high bits: on the offset-binary bytes x, y
        # the high parts (bits >= s) are equal, or adjacent with the low parts (bits < s)
        # ordered the other way. The byte constants come from a register that never changes
        # (synthesis folds it): with a constant operand Amaranth emits every word operation
        # below slice by slice, about 10 kB of Verilog each.
        top8 = Signal(8, init=0x80)
        m.d.sync += top8.eq(top8)
        top = word("top", Cat(*[top8] * n))                      # 0x80 per byte
        one = word("one", top >> 7)                               # 0x01 per byte
        # Bits >= s per byte: full_mask << 1 (bits 4..7 always, bit 0 never: s is 1..4).
        high = word("high", ((full_masks << 1) | top | (top >> 1) | (top >> 2) | (top >> 3))
                    & ~one)
        low = word("low", ~high & ~top)                           # bits < s
        x = word("x", self.anchor ^ top)
        y = word("y", self.follower ^ top)
        d = word("d", diff & high)                                # where the high parts differ
        # Adjacent high parts (X = Y + 1 or Y = X + 1): d is one run of bits from bit s up,
        # and the larger one has exactly the run's top bit.
        d_down = word("d_down", (d >> 1) & ~top)                  # bit i: d[i + 1]
        hole = word("hole", d_down & ~d & high)
        lowest = word("lowest", high & ~((high << 1) & ~one))     # bit s
        run_top = word("run_top", d & ~d_down)
        starts = fold(d & lowest, "starts")
        x_low_less = word("x_low_less", ~(((x & low) | top) - (y & low)) >> 7)
        y_low_less = word("y_low_less", ~(((y & low) | top) - (x & low)) >> 7)
        x_above = word("x_above", starts & ~fold(hole | ((x & d) ^ run_top), "x_run")
                       & x_low_less)
        y_above = word("y_above", starts & ~fold(hole | ((y & d) ^ run_top), "y_run")
                       & y_low_less)
        window_far = word("window_far", fold(d, "high_differs") & ~x_above & ~y_above)
        not_full = lanes(word("not_full_w", Mux(self.window, window_far, full_far)), "not_full")
        on = Signal(n)
        m.d.comb += [on.eq(Mux(self.present & self.reuse, (1 << n) - 1, 0)),
                     self.full.eq(on & ~not_full)]
        if not self.codes:
            return m
        full = self.full
        half_diff = lanes(fold(diff & Cat(*[self.half_mask] * n), "half_differs"),
                          "half_differs")
        half, none, absent = (Signal(n, name=v) for v in ("half", "none", "absent"))
        m.d.comb += [
            half.eq(on & not_full & ~half_diff),
            absent.eq(Mux(self.present, 0, (1 << n) - 1)),
            none.eq(~full & ~half & ~absent),
            self.code_lo.eq(half | absent),
            self.code_hi.eq(none | absent),
        ]
        take = Signal(8 * n)                  # all ones in the bytes of FULL channels
        m.d.comb += [
            take.eq(Cat(*(full[c].replicate(8) for c in range(n)))),
            self.effective.eq((self.anchor & take) | (self.follower & ~take)),
        ]
        m.d.comb += [self.is_code[v].eq(p) for v, p in enumerate((full, half, none, absent))]
        return m


def work_bitmap(pass_idx: int, qsets, ksets) -> Value:
    """Channels where some PE of the quad has a non-idle entry in ``pass_idx``.

    ``qsets[u]`` (``ksets[v]``) is a bitmap over channels: bit c set iff some real row
    (column) unit of the quad has code ``u`` (``v``) at channel c. A channel has work iff
    some pair (u, v) present at it has a non-idle decode entry: an OR of ANDs, per channel.
    """
    pairs = work_table(pass_idx)
    terms = []
    for u in range(4):
        vs = [v for v in range(4) if (u, v) in pairs]
        if not vs:
            continue
        kv = ksets[vs[0]]
        for v in vs[1:]:
            kv = kv | ksets[v]
        terms.append(qsets[u] & kv)
    if not terms:
        return Value.cast(0)
    out = terms[0]
    for t in terms[1:]:
        out = out | t
    return out
