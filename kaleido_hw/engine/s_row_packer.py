"""The engine's S read-out -> rows of score beats for the vector unit.

The KaleidoEngine streams S row-major, two int32 values per beat (``docs/architecture.md``,
``kaleido_engine``: an odd ``n*n`` ends with a zero high half). The softmax unit
(``docs/vector.md``) takes a row of ``n`` scores as ``ceil(n / L)`` beats of ``L =
vector_lanes`` signed ``vector_score_bits``-bit lanes, the last beat with ``last`` and
``tail``, and the row's scale pair on its first beat. :class:`SRowPacker` regroups the one
into the other at two scores per cycle, the read-out's rate: it fills a beat lane by lane and
hands it to its output register when the beat is full or the row ends (when both scores of
an input beat would end a beat, as with rows of one score or one lane, it takes them one per
cycle: the output register takes one beat per cycle). A score that does not fit the lanes' width
sets an error bit (the lanes keep its low bits): with the defaults (24-bit lanes, int8
operands) any head of up to 128 channels fits. Built with ``key_mask`` (the engine core's
attention blocks), a key whose bit of ``cfg.real`` is clear (a padding token of an edge K box)
gives the most negative score instead of its S, so that the softmax gives it a P of 0.
"""

from __future__ import annotations

from amaranth.hdl import Const, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from kaleido_hw.bitops import bits_for
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.host_port import run_control_members
from kaleido_hw.vector.layouts import MULT_BITS, SHIFT_BITS, score_beat_layout


__all__ = ["SRowPacker", "ERROR_BITS", "S_VALUE_BITS"]

#: Width of one S value in the engine's read-out beat (two per beat).
S_VALUE_BITS = 32

#: ``error`` bits, sticky until the next ``start``.
ERROR_BITS = {"score_range": 0}     # a score outside the signed vector_score_bits range


class SRowPacker(wiring.Component):
    """Regroups the engine's two-value S beats into the vector unit's row beats.

    Parameters
    ----------
    config : KaleidoConfig
        ``vector_lanes`` (L), ``vector_score_bits`` (B), ``engine_max_tokens`` (the longest
        row and the most rows).

    Ports
    -----
    ``s`` (in stream, 64 bits): S row-major, values ``2b`` and ``2b + 1`` in bits 31:0 and
    63:32 of beat b; ``n*n`` values in all, then the run ends (an odd count's last high half
    is dropped).
    ``o`` (out stream, ``score_beat_layout``): ``n`` rows of ``ceil(n / L)`` beats, lanes past
    a row's end 0, every beat with the run's ``mult`` and ``shift``.
    ``cfg`` (in): ``keys`` (n), ``mult``, ``shift``, sampled at ``start``; with ``key_mask``
    also ``real`` (bit k: key k is a token of the grid), read while the run goes.
    ``start`` (in): one-cycle pulse that begins a run (ignored while ``busy``).
    ``busy`` (out); ``done`` (out): high after the run's last beat left, to the next
    ``start``. ``error`` (out): ``ERROR_BITS``, cleared by ``start``.
    """

    def __init__(self, config: KaleidoConfig, key_mask: bool = False):
        if not isinstance(config, KaleidoConfig):
            raise TypeError(f"SRowPacker takes a KaleidoConfig, got {type(config).__name__}")
        self.config, self.key_mask = config, key_mask
        self.lanes, self.score_bits = config.vector_lanes, config.vector_score_bits
        self.max_tokens = config.engine_max_tokens
        super().__init__({
            "s": In(stream.Signature(2 * S_VALUE_BITS)),
            "o": Out(stream.Signature(score_beat_layout(config))),
            "cfg": In(wiring.Signature({
                "keys": Out(bits_for(self.max_tokens)), "mult": Out(MULT_BITS),
                "shift": Out(SHIFT_BITS),
                **({"real": Out(self.max_tokens)} if key_mask else {})})),
            **run_control_members(len(ERROR_BITS)),
        })

    def elaborate(self, platform):
        m = Module()
        L, B = self.lanes, self.score_bits
        tw = bits_for(self.max_tokens)
        busy = self.busy

        keys = Signal(tw)
        mult = Signal(MULT_BITS)
        shift = Signal(SHIFT_BITS)
        held = Signal(2 * S_VALUE_BITS)            # the input beat being unpacked
        held_v = Signal()
        half = Signal()                            # its value taken next
        col = Signal(tw)                           # of the value taken next
        row = Signal(tw)
        lane = Signal(bits_for(L - 1))
        lanes = Signal(data.ArrayLayout(signed(B), L))   # the beat being filled
        out = Signal(score_beat_layout(self.config))
        out_v = Signal()
        rows_out = Signal(tw)                      # rows whose last beat left

        # Value a (the held beat's next one) at (row, col, lane); value b (the beat's high
        # half, when a is the low one and not the run's last) right after it.
        va = Signal(signed(S_VALUE_BITS))
        vb = Signal(signed(S_VALUE_BITS))
        raw_a = Mux(half, held[S_VALUE_BITS:], held[:S_VALUE_BITS])
        raw_b = held[S_VALUE_BITS:]
        row_end_a = col == keys - 1
        run_end_a = row_end_a & (row == keys - 1)
        beat_end_a = (lane == L - 1) | row_end_a
        lane_b = Mux(beat_end_a, 0, lane + 1)
        col_b = Mux(row_end_a, 0, col + 1)
        if self.key_mask:
            # A padding key's score: the lanes' most negative value.
            lowest = Const(-(1 << (B - 1)), signed(S_VALUE_BITS))
            real = self.cfg.real
            m.d.comb += [va.eq(Mux(real.bit_select(col, 1), raw_a, lowest)),
                         vb.eq(Mux(real.bit_select(col_b, 1), raw_b, lowest))]
        else:
            m.d.comb += [va.eq(raw_a), vb.eq(raw_b)]
        row_b = Mux(row_end_a, row + 1, row)
        row_end_b = col_b == keys - 1
        beat_end_b = (lane_b == L - 1) | row_end_b
        # Both values in this cycle unless that would complete two beats (the output register
        # takes one per cycle): then a alone, b in the next cycle.
        two = ~half & ~run_end_a & ~(beat_end_a & beat_end_b)
        advance = held_v & (~out_v | self.o.ready)       # the output register can take a beat
        held_done = advance & (two | half | run_end_a)
        m.d.comb += self.s.ready.eq(busy & (row < keys) & (~held_v | held_done))
        with m.If(self.s.valid & self.s.ready):
            m.d.sync += [held.eq(self.s.payload), held_v.eq(1), half.eq(0)]
        with m.Elif(held_done):
            m.d.sync += held_v.eq(0)

        def out_of_range(v):
            return (v >> (B - 1) != 0) & (v >> (B - 1) != -1)

        b_in_out = two & ~beat_end_a & beat_end_b        # a and b end the same beat
        with m.If(out_v & self.o.ready):
            m.d.sync += out_v.eq(0)
        with m.If(advance):
            with m.If(~two):
                m.d.sync += half.eq(~half)
            with m.If(out_of_range(va) | (two & out_of_range(vb))):
                m.d.sync += self.error[ERROR_BITS["score_range"]].eq(1)
            with m.If(beat_end_a | b_in_out):
                m.d.sync += [out_v.eq(1), out.tail.eq(Mux(b_in_out, lane + 1, lane)),
                             out.last.eq(Mux(b_in_out, row_end_b, row_end_a)),
                             out.mult.eq(mult), out.shift.eq(shift)]
                for j in range(L):
                    # Lanes below `lane` were filled, the ones above are past the row's end.
                    filled = Mux(lane > j, lanes[j], 0) if j < L - 1 else 0
                    m.d.sync += out.scores[j].eq(
                        Mux(lane == j, va[:B], Mux(b_in_out & (lane + 1 == j), vb[:B], filled)))
                with m.If(two & beat_end_a):             # b starts the next beat
                    m.d.sync += [lanes[0].eq(vb[:B]), lane.eq(1)]
                with m.Else():
                    m.d.sync += lane.eq(0)
            with m.Else():
                for j in range(L):
                    m.d.sync += lanes[j].eq(Mux(lane == j, va[:B],
                                                Mux(two & (lane + 1 == j), vb[:B], lanes[j])))
                m.d.sync += lane.eq(Mux(two, lane + 2, lane + 1))
            with m.If(two):
                with m.If(row_end_b):
                    m.d.sync += [col.eq(0), row.eq(row_b + 1)]
                with m.Else():
                    m.d.sync += [col.eq(col_b + 1), row.eq(row_b)]
            with m.Elif(row_end_a):
                m.d.sync += [col.eq(0), row.eq(row + 1)]
            with m.Else():
                m.d.sync += col.eq(col + 1)
        m.d.comb += [self.o.valid.eq(out_v), self.o.payload.eq(out)]
        with m.If(out_v & self.o.ready & out.last):
            m.d.sync += rows_out.eq(rows_out + 1)
            with m.If(rows_out + 1 == keys):
                m.d.sync += [busy.eq(0), self.done.eq(1)]

        with m.If(self.start & ~busy):
            m.d.sync += [keys.eq(self.cfg.keys), mult.eq(self.cfg.mult),
                         shift.eq(self.cfg.shift), held_v.eq(0), half.eq(0), col.eq(0),
                         row.eq(0), lane.eq(0), out_v.eq(0), rows_out.eq(0),
                         self.error.eq(0), self.done.eq(0)]
            with m.If(self.cfg.keys == 0):
                m.d.sync += self.done.eq(1)
            with m.Else():
                m.d.sync += busy.eq(1)
        return m
