"""SoftmaxUnit: the vector unit's row-wise integer softmax, streaming rows of S in and P out.

Golden model: :func:`golden.vector.softmax_int`; contract: ``docs/numerics.md`` section 14;
doc: ``docs/vector.md``.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from golden.vector.softmax import EXP_ONE, RECIP_BITS
from kaleido_hw.bitops import onehot_or, tree
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.vector.credited_output import CreditedOutput
from kaleido_hw.vector.exp_lane import ExpLane
from kaleido_hw.vector.layouts import (EXP_WIDTH, MULT_BITS, RECIP_WIDTH, SHIFT_BITS,
                                       lane_index_width, prob_beat_layout, score_beat_layout)
from kaleido_hw.vector.reciprocal import RowReciprocal
from kaleido_hw.vector.row_input import FREE, LOADED, SUMMED, SUMMING, build_row_input


__all__ = ["SoftmaxUnit"]

# Row buffer states (kaleido_hw.vector.row_input): written by the input, being summed,
# reciprocal known (read out next).
#: Output beats the P FIFO holds; more than the beats in flight in the output pipeline (4),
#: so that a beat is issued every cycle while the consumer takes one every cycle.
OUT_FIFO_DEPTH = 8


class SoftmaxUnit(wiring.Component):
    """Row-wise integer softmax over ``vector_lanes`` lanes with ``vector_row_buffers`` row
    buffers.

    Parameters (from ``config``)
        vector_lanes (L), vector_max_row (longest row, a multiple of L), vector_score_bits
        (B, signed score width), vector_row_buffers (NB).

    Interface
        ``s``: stream of ``score_beat_layout``: a row is ``ceil(n / L)`` beats of L scores,
        the last with ``last`` set and ``tail`` = its valid lanes minus one (lanes above it
        are ignored); ``mult``/``shift`` of a row's first beat are its scale.
        ``p``: stream of ``prob_beat_layout``: the row's P in the same beats (lanes above
        ``tail`` of the last beat are 0), rows in input order.
        ``overflow``: sticky; a row had more than ``vector_max_row`` scores (the beats past
        the buffer were dropped).

    Algorithm (bit-exact to :func:`golden.vector.softmax_int`)
        Three passes over a row, each a walk over its buffer, by three units that work on
        different rows at once, in row order:

        1. *input*: stores the beats in a free row buffer (one ``amaranth.lib.memory``
           per buffer, one word of L scores per beat) and keeps the running row maximum;
        2. *sum*: reads the row back through L :class:`ExpLane` s (``d = max - s`` to E),
           writes E over the scores and adds the lanes' E into the row sum; then the
           :class:`RowReciprocal` divides ``255 << 32`` by the sum (13 cycles) while the
           sum unit goes on with the next row;
        3. *output*: reads E back, ``P = (E * R + 2**31) >> 32`` per lane, into a small FIFO
           whose free space the read issue is credited against (so the pipeline never
           stalls and nothing is lost under back-pressure).

        A buffer is FREE, LOADED (after pass 1), SUMMING or SUMMED (reciprocal known).
        Each unit takes buffers in rotation, so rows leave in order.

    Timing
        Input and output take one beat per cycle. The reciprocal takes 14 cycles per row and
        a row of k beats holds its buffer for about 3k + 28 cycles, so rows leave on average
        every max(k, 14, (3k + 28) / NB) cycles: one beat per cycle for rows of at least 14
        beats at NB = 5. A lone row's first P beat leaves 2k + 31 cycles after its first
        score beat, its last 3k + 30 (``docs/vector.md``, "Timing").
    """

    PORT_DOCS = {
        "s__valid": "score beat valid",
        "s__ready": "score beat accepted when valid and ready (a row buffer is free)",
        "s__payload": "score beat: L signed scores (B bits each, lane 0 first), tail (valid "
                      "lanes of a last beat minus one), last, mult (16), shift (6); LSB first",
        "p__valid": "probability beat valid",
        "p__ready": "probability beat consumed when valid and ready",
        "p__payload": "probability beat: L uint8 P (scale 1/255, lane 0 first), tail, last; "
                      "LSB first",
        "overflow": "sticky: a row had more than vector_max_row scores (extra beats dropped)",
    }

    def __init__(self, config: KaleidoConfig):
        self.config = config
        super().__init__({
            "s": In(stream.Signature(score_beat_layout(config))),
            "p": Out(stream.Signature(prob_beat_layout(config))),
            "overflow": Out(1),
        })

    def elaborate(self, platform):
        cfg = self.config
        L, B, NB = cfg.vector_lanes, cfg.vector_score_bits, cfg.vector_row_buffers
        W = cfg.vector_max_row // L                      # words (beats) per row buffer
        TW = lane_index_width(L)
        total_width = (cfg.vector_max_row * EXP_ONE).bit_length()
        m = Module()

        ri = build_row_input(m, cfg, self.s, self.overflow, score_beat_layout(cfg),
                             {"mult": MULT_BITS, "shift": SHIFT_BITS})
        next_buffer, pick = ri.next_buffer, ri.pick
        state, row_beats, row_tail, row_max = ri.state, ri.beats, ri.tail, ri.max
        row_mult, row_shift = ri.fields["mult"], ri.fields["shift"]
        rports, wports = ri.rports, ri.wports
        accept, in_ptr, in_count, beat, beat_addr = (ri.accept, ri.in_ptr, ri.in_count,
                                                     ri.beat, ri.beat_addr)
        row_recip = [Signal(RECIP_WIDTH, name=f"recip{j}") for j in range(NB)]

        # -- pass 2: exp and sum ----------------------------------------------------------
        # The sum unit issues one read per cycle; the row's scale, maximum, buffer and tail
        # travel with each beat, so the next row's reads follow the last without a gap.
        sum_ptr = Signal(range(NB))         # buffer being read
        sum_issuing = Signal()
        sum_addr = Signal(range(max(W, 2)))
        sum_beats = Signal(range(W + 1))
        sum_tail = Signal(TW)
        sum_max = Signal(signed(B))
        sum_mult = Signal(MULT_BITS)
        sum_shift = Signal(SHIFT_BITS)
        sum_first = Signal()
        sum_last = Signal()
        m.d.comb += sum_last.eq(sum_addr == sum_beats - 1)
        recip = RowReciprocal(total_width, len(sum_ptr))
        m.submodules.recip = recip
        sum_next = Signal(range(NB))        # buffer of the next row to read
        m.d.comb += sum_next.eq(Mux(sum_issuing, next_buffer(sum_ptr), sum_ptr))
        # (sum_ptr moves on at a row's last read, so when idle it names the next buffer.)
        sum_start = Signal()
        m.d.comb += sum_start.eq((~sum_issuing | sum_last) & (pick(state, sum_next) == LOADED))
        with m.If(sum_issuing):
            m.d.sync += sum_addr.eq(sum_addr + 1)
            with m.If(sum_last):
                m.d.sync += [sum_issuing.eq(0), sum_ptr.eq(next_buffer(sum_ptr))]
        with m.If(sum_issuing):
            m.d.sync += sum_first.eq(0)
        with m.If(sum_start):
            m.d.sync += [
                sum_issuing.eq(1), sum_addr.eq(0), sum_ptr.eq(sum_next), sum_first.eq(1),
                sum_beats.eq(pick(row_beats, sum_next)), sum_tail.eq(pick(row_tail, sum_next)),
                sum_max.eq(pick(row_max, sum_next)), sum_mult.eq(pick(row_mult, sum_next)),
                sum_shift.eq(pick(row_shift, sum_next)),
            ]
            for j in range(NB):
                with m.If(sum_next == j):
                    m.d.sync += state[j].eq(SUMMING)

        # Pipeline: 0 issue (read) -> 1 word arrives -> 2 word registered -> 3 d -> ExpLane
        # (3) -> 6 E, written back and summed over the lanes -> 7 row total. The register
        # after the buffers' AND-OR keeps a macro's clock-to-output out of the subtraction.
        depth = 3 + ExpLane.LATENCY
        sv = [Signal(name=f"sum_v{k}") for k in range(depth + 1)]
        sfirst = [Signal(name=f"sum_first{k}") for k in range(depth + 1)]
        slast = [Signal(name=f"sum_last{k}") for k in range(depth + 1)]
        saddr = [Signal(range(max(W, 2)), name=f"sum_a{k}") for k in range(depth + 1)]
        sbuf = [Signal(range(NB), name=f"sum_b{k}") for k in range(depth + 1)]
        stail = [Signal(TW, name=f"sum_t{k}") for k in range(depth + 1)]
        m.d.comb += [sv[0].eq(sum_issuing), sfirst[0].eq(sum_first), slast[0].eq(sum_last),
                     saddr[0].eq(sum_addr), sbuf[0].eq(sum_ptr), stail[0].eq(sum_tail)]
        for k in range(depth):
            m.d.sync += [sv[k + 1].eq(sv[k]), sfirst[k + 1].eq(sfirst[k]),
                         slast[k + 1].eq(slast[k]), saddr[k + 1].eq(saddr[k]),
                         sbuf[k + 1].eq(sbuf[k]), stail[k + 1].eq(stail[k])]
        max1, max2 = Signal(signed(B)), Signal(signed(B))
        mult1, mult2, mult3 = Signal(MULT_BITS), Signal(MULT_BITS), Signal(MULT_BITS)
        shift1, shift2, shift3 = Signal(SHIFT_BITS), Signal(SHIFT_BITS), Signal(SHIFT_BITS)
        m.d.sync += [max1.eq(sum_max), max2.eq(max1),
                     mult1.eq(sum_mult), mult2.eq(mult1), mult3.eq(mult2),
                     shift1.eq(sum_shift), shift2.eq(shift1), shift3.eq(shift2)]
        sum_word = Signal(L * B)
        sum_word2 = Signal(L * B)
        # One-hot selects straight from registers: each fans out to L * B gates, and only a
        # register output gets a buffer tree in the standard-cell flow.
        sum_sel = Signal(NB)
        m.d.sync += sum_sel.eq(Cat(*[sbuf[0] == j for j in range(NB)]))
        m.d.comb += sum_word.eq(onehot_or(sum_sel, [p.data for p in rports]))
        m.d.sync += sum_word2.eq(sum_word)                              # stage 1 -> 2
        lanes_e = []
        for i in range(L):
            lane = ExpLane(B)
            m.submodules[f"exp{i}"] = lane
            d = Signal(B, name=f"d{i}")
            score = sum_word2[i * B:(i + 1) * B].as_signed()
            m.d.sync += d.eq((max2 - score)[:B])                # stage 2 -> 3
            m.d.comb += [lane.d.eq(d), lane.mult.eq(mult3), lane.shift.eq(shift3)]
            keep = ~slast[depth] | (stail[depth] >= i) if i else Const(1)  # past the row: 0
            e = Signal(EXP_WIDTH, name=f"e{i}")
            m.d.comb += e.eq(Mux(keep, lane.e, 0))
            lanes_e.append(e)
        # Stage `depth`: E of the beat at saddr[depth], written back over its scores.
        e_word = Cat(*[Cat(e, Const(0, B - EXP_WIDTH)) for e in lanes_e])
        beat_sum = Signal((L * EXP_ONE).bit_length())
        acc_valid, acc_first, acc_last = Signal(), Signal(), Signal()
        acc_buf = Signal(range(NB))
        m.d.sync += [beat_sum.eq(tree(lanes_e, lambda a, b: a + b)), acc_valid.eq(sv[depth]),
                     acc_first.eq(sfirst[depth]), acc_last.eq(slast[depth]),
                     acc_buf.eq(sbuf[depth])]
        row_sum = Signal(total_width)
        total = Signal(total_width)
        m.d.comb += total.eq(Mux(acc_first, 0, row_sum) + beat_sum)
        # Row totals wait for the reciprocal unit in a FIFO of one entry per buffer: a row
        # with a pending total holds its buffer, so the FIFO can never overflow.
        totals = fifo.SyncFIFO(width=total_width + len(sum_ptr), depth=NB)
        m.submodules.totals = totals
        m.d.comb += [totals.w_data.eq(Cat(total, acc_buf)), totals.w_en.eq(acc_valid & acc_last),
                     recip.total.eq(totals.r_data[:total_width]),
                     recip.slot_in.eq(totals.r_data[total_width:]),
                     recip.start.eq(totals.r_rdy & ~recip.busy), totals.r_en.eq(recip.start)]
        with m.If(acc_valid):
            m.d.sync += row_sum.eq(total)
        for j in range(NB):
            with m.If(recip.done & (recip.slot == j)):
                m.d.sync += [state[j].eq(SUMMED), row_recip[j].eq(recip.recip)]

        # -- pass 3: output ----------------------------------------------------------------
        out_ptr = Signal(range(NB))
        out_busy = Signal()
        out_addr = Signal(range(max(W, 2)))
        out_beats = Signal(range(W + 1))
        out_tail = Signal(TW)
        out_recip = Signal(RECIP_WIDTH)
        p_layout = prob_beat_layout(cfg)
        p_out = CreditedOutput(m, "p_fifo", self.p, OUT_FIFO_DEPTH)
        issue = Signal()
        m.d.comb += issue.eq(out_busy & p_out.room)
        out_last = Signal()
        m.d.comb += out_last.eq(out_addr == out_beats - 1)
        out_next = Signal(range(NB))        # buffer of the next row to read out
        m.d.comb += out_next.eq(Mux(out_busy, next_buffer(out_ptr), out_ptr))
        # (out_ptr moves on at a row's last read, so when idle it names the next buffer.)
        with m.If(issue):
            m.d.sync += out_addr.eq(out_addr + 1)
            with m.If(out_last):
                # The buffer is read out: free it (the read itself lands at this edge; a
                # new row's first write comes two cycles later at the earliest).
                m.d.sync += [out_busy.eq(0), out_ptr.eq(next_buffer(out_ptr))]
                for j in range(NB):
                    with m.If(out_ptr == j):
                        m.d.sync += state[j].eq(FREE)
        with m.If((~out_busy | (issue & out_last)) & (pick(state, out_next) == SUMMED)):
            m.d.sync += [out_busy.eq(1), out_addr.eq(0), out_ptr.eq(out_next),
                         out_beats.eq(pick(row_beats, out_next)),
                         out_tail.eq(pick(row_tail, out_next)),
                         out_recip.eq(pick(row_recip, out_next))]

        # Stage 1: the read word arrives and is registered (no macro clock-to-output in
        # front of the multipliers). Stage 2: E * R per lane. Stage 3: rounded P into the
        # FIFO.
        o1_valid, o1_last = Signal(), Signal()
        o1_tail, o1_recip = Signal(TW), Signal(RECIP_WIDTH)
        m.d.sync += [o1_valid.eq(issue), o1_last.eq(out_last),
                     o1_tail.eq(out_tail), o1_recip.eq(out_recip)]
        out_word = Signal(L * B)
        out_sel = Signal(NB)
        m.d.sync += out_sel.eq(Cat(*[out_ptr == j for j in range(NB)]))
        m.d.comb += out_word.eq(onehot_or(out_sel, [p.data for p in rports]))
        o2_valid, o2_last, o2_tail = Signal(), Signal(), Signal(TW)
        o2_recip = Signal(RECIP_WIDTH)
        out_e = Signal(L * EXP_WIDTH)
        m.d.sync += [o2_valid.eq(o1_valid), o2_last.eq(o1_last), o2_tail.eq(o1_tail),
                     o2_recip.eq(o1_recip),
                     out_e.eq(Cat(*[out_word[i * B:i * B + EXP_WIDTH] for i in range(L)]))]
        o3_valid, o3_last, o3_tail = Signal(), Signal(), Signal(TW)
        prods = [Signal(EXP_WIDTH + RECIP_WIDTH, name=f"er{i}") for i in range(L)]
        m.d.sync += [o3_valid.eq(o2_valid), o3_last.eq(o2_last), o3_tail.eq(o2_tail)]
        for i in range(L):
            m.d.sync += prods[i].eq(out_e[i * EXP_WIDTH:(i + 1) * EXP_WIDTH] * o2_recip)
        p_beat = Signal(p_layout)
        for i in range(L):
            m.d.comb += p_beat.p[i].eq((prods[i] + (1 << (RECIP_BITS - 1))) >> RECIP_BITS)
        m.d.comb += [p_beat.tail.eq(o3_tail), p_beat.last.eq(o3_last)]
        p_out.track(issue, o3_valid, p_beat.as_value())

        # -- row buffer ports: each buffer serves the unit that owns it --------------------
        # The write enable and the input-or-E select of each buffer are registers decided a
        # cycle ahead: they drive every bit of the word (L * B loads).
        write_en = Signal(NB)
        write_in = Signal(NB)
        m.d.sync += [
            write_en.eq(Cat(*[(accept & (in_ptr == j) & (in_count < W)) |
                              (sv[depth - 1] & (sbuf[depth - 1] == j)) for j in range(NB)])),
            write_in.eq(Cat(*[accept & (in_ptr == j) for j in range(NB)])),
        ]
        for j in range(NB):
            m.d.comb += [
                wports[j].addr.eq(Mux(write_in[j], beat_addr, saddr[depth])),
                wports[j].data.eq(Mux(write_in[j], beat.scores.as_value(), e_word)),
                wports[j].en.eq(write_en[j]),
                rports[j].addr.eq(Mux(out_busy & (out_ptr == j), out_addr, sum_addr)),
                rports[j].en.eq(1),
            ]
        return m
