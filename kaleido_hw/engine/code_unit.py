"""On-chip reuse codes and per-pass work bitmaps (``docs/array.md``, "Channel steps and
skipping"; codes: ``docs/numerics.md``).

:class:`CodeUnit` compares a follower token's word with its anchor's word, all channels at
once: the follower is FULL at a channel when the top ``1 + full_bits`` bits of the two int8
values agree, else HALF when the top ``1 + half_bits`` bits agree, else NONE; with the XOR
of the two bytes that is ``(a ^ f) & mask == 0`` for the masks ``0xFF << (7 - bits)``. It
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

    Inputs: ``anchor``, ``follower`` (``8*lanes`` bits, channel c at bits ``8c..8c+7``),
    ``present`` (the unit has a follower; else every code is ABSENT), ``reuse`` (0: every
    present follower is NONE, the dense baseline), ``full_mask``/``half_mask``
    (:func:`code_mask` of full_bits/half_bits). Outputs, one bit per channel: the code as
    two bit planes ``code_lo``/``code_hi`` (code = ``2*hi + lo``: 0 FULL, 1 HALF, 2 NONE,
    3 ABSENT) and one-hot planes ``is_code[v]`` (bit c set iff channel c has code v), which
    the sequencer ORs into a quad's code sets; and ``effective``, the follower word with FULL
    channels replaced by the anchor's value.

    The compare is done on whole words: XOR, AND with the byte mask repeated per channel,
    then an OR of each byte's bits folded into its bit 0 by three shifts (shifting right by
    at most 7 never carries a higher byte into bit 0 of a byte).
    """

    def __init__(self, lanes: int):
        self.lanes = lanes
        super().__init__({
            "anchor": In(8 * lanes),
            "follower": In(8 * lanes),
            "present": In(1),
            "reuse": In(1),
            "full_mask": In(8),
            "half_mask": In(8),
            "code_lo": Out(lanes),
            "code_hi": Out(lanes),
            "is_code": Out(data.ArrayLayout(lanes, 4)),
            "effective": Out(8 * lanes),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.lanes
        diff = Signal(8 * n)
        m.d.comb += diff.eq(self.anchor ^ self.follower)

        def differs(mask, name):
            """Lane c set iff the bytes differ somewhere under ``mask``."""
            x = Signal(8 * n, name=f"{name}_x")
            y = Signal(8 * n, name=f"{name}_y")
            z = Signal(8 * n, name=f"{name}_z")
            w = Signal(8 * n, name=f"{name}_w")
            out = Signal(n, name=name)
            m.d.comb += [
                x.eq(diff & Cat(*[mask] * n)),
                y.eq(x | (x >> 4)),
                z.eq(y | (y >> 2)),
                w.eq(z | (z >> 1)),
                out.eq(Cat(*(w[8 * c] for c in range(n)))),
            ]
            return out

        full_diff = differs(self.full_mask, "full_differs")
        half_diff = differs(self.half_mask, "half_differs")
        on = Signal(n)
        full, half, none, absent = (Signal(n, name=v) for v in ("full", "half", "none", "absent"))
        m.d.comb += [
            on.eq(Mux(self.present & self.reuse, (1 << n) - 1, 0)),
            full.eq(on & ~full_diff),
            half.eq(on & full_diff & ~half_diff),
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
