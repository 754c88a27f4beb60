"""The attention output's beats -> memory beats of a STORE of O (``docs/engine.md``,
"Attention commands").

:class:`~kaleido_hw.engine.block_attention.BlockAttention` gives O of a query box a row at a
time, each row as ``ceil(engine_max_head_dim / L)`` beats of ``L = vector_lanes`` int16
channels (channels past the run's ``head_dim`` zero). Memory holds O as ``n x head_dim`` int16,
row-major without gaps: four values per 64-bit beat, a row straddling beats when ``head_dim``
is not a multiple of 4, and the last beat's values past O zero. :class:`OPacker` keeps the
beat it unpacks in a register that shifts down by the values taken, and moves up to four of
them per cycle into the memory beat being filled (as many as the beat has room for), so a
row of ``head_dim`` values leaves in about ``head_dim / 4`` cycles, the memory's rate.
Channels past ``head_dim`` are dropped without a cycle of their own beyond their beat's.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from kaleido_hw.bitops import bits_for
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.vector.layouts import OUT_BITS, output_beat_layout

__all__ = ["OPacker", "VALUES_PER_BEAT", "o_beats"]

#: int16 values of O in one 64-bit memory beat.
VALUES_PER_BEAT = 4


class OPacker(wiring.Component):
    """Packs O's row beats into 64-bit memory beats (module docstring).

    Parameters
    ----------
    config : KaleidoConfig
        ``vector_lanes`` (L), ``engine_max_tokens`` (rows), ``engine_max_head_dim``.

    Ports
    -----
    ``i`` (in stream, ``output_beat_layout``): O's beats, rows in order; the beat of row
    ``cfg.rows - 1`` with ``last`` ends an O (the memory beat being filled leaves then).
    ``o`` (out stream, 64 bits): value ``4b + j`` of O in bits ``[16j, 16j + 16)`` of beat b,
    ``ceil(rows * channels / 4)`` beats an O.
    ``cfg`` (in, stable while an O passes): ``rows`` and ``channels`` (head_dim).
    """

    def __init__(self, config: KaleidoConfig):
        if not isinstance(config, KaleidoConfig):
            raise TypeError(f"OPacker takes a KaleidoConfig, got {type(config).__name__}")
        self.config = config
        super().__init__({
            "i": In(stream.Signature(output_beat_layout(config))),
            "o": Out(stream.Signature(VALUES_PER_BEAT * OUT_BITS)),
            "cfg": In(wiring.Signature({
                "rows": Out(bits_for(config.engine_max_tokens)),
                "channels": Out(bits_for(config.engine_max_head_dim))})),
        })

    def elaborate(self, platform):
        m = Module()
        L, V = self.config.vector_lanes, VALUES_PER_BEAT
        beat = self.i.payload
        held = Signal(data.ArrayLayout(signed(OUT_BITS), L))   # the beat being unpacked
        avail = Signal(range(L + 1))        # its values not yet taken (held[0] is the next)
        final = Signal()                    # it ends an O: the memory beat leaves after it
        fill = Signal(range(V))             # values in the memory beat being filled
        part = Signal(data.ArrayLayout(signed(OUT_BITS), V - 1))
        out = Signal(V * OUT_BITS)
        out_v = Signal()

        take = Signal(range(V + 1))         # values moved this cycle: min(4 - fill, avail)
        room = V - fill
        m.d.comb += take.eq(Mux(avail < room, avail, room))
        new_fill = fill + take
        ends = final & (avail == take)      # O's last value moves now (or has moved)
        emit = (new_fill == V) | (ends & (new_fill != 0))
        # Slot j of the memory beat: a value filled before, else held[j - fill] if it moves
        # now (the index wraps when j < fill: that choice is not taken), else 0.
        flat = held.as_value()
        merged = []
        for j in range(V):
            moved = Mux(new_fill > j, flat.word_select((Const(j, 2) - fill)[:2], OUT_BITS), 0)
            # (fill is at most V - 1: the last slot is never filled before.)
            merged.append(Mux(fill > j, part[j].as_unsigned(), moved)[:OUT_BITS]
                          if j < V - 1 else moved)
        go = ~out_v | self.o.ready

        m.d.comb += [self.o.valid.eq(out_v), self.o.payload.eq(out)]
        with m.If(self.o.ready):
            m.d.sync += out_v.eq(0)
        # Values of the incoming beat: up to the run's channels, none past them.
        first_ch = beat.chunk * L
        left = self.cfg.channels - first_ch
        count = Mux(first_ch >= self.cfg.channels, 0, Mux(left > L, L, left))
        m.d.comb += self.i.ready.eq(go & (avail == take))
        with m.If(go):
            with m.If(emit):
                m.d.sync += [out.eq(Cat(*merged)), out_v.eq(1), fill.eq(0)]
            with m.Else():
                m.d.sync += fill.eq(new_fill)
                for j in range(V - 1):
                    m.d.sync += part[j].eq(merged[j])
            for j in range(L):
                # Shift the held beat down by the values taken.
                m.d.sync += held[j].eq(flat.word_select(j + take, OUT_BITS) if j + V < L else
                                       Mux(j + take < L, flat.word_select(j + take, OUT_BITS), 0))
            m.d.sync += avail.eq(avail - take)
            with m.If(ends):
                m.d.sync += final.eq(0)
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [held.eq(beat.values), avail.eq(count),
                         final.eq(beat.last & (beat.row == self.cfg.rows - 1))]
        return m


def o_beats(rows, channels):
    """Memory beats of an O of ``rows x channels`` int16 (ints, or Amaranth values: the
    core's STORE of O computes it from its registers)."""
    return (rows * channels + VALUES_PER_BEAT - 1) // VALUES_PER_BEAT

