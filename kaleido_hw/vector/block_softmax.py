"""BlockSoftmaxUnit: the vector unit's softmax of one key block at a time, with a running
maximum and weight per query row (``docs/numerics.md`` section 15, ``docs/vector.md``,
"Long heads: the block softmax unit").

Golden model: :func:`golden.vector.online_stages` with ``trace=True`` (per block: ``p``,
``factor``, ``weight``).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out

from golden.vector.softmax import EXP_BITS, EXP_ONE, P_ONE
from kaleido_hw.bitops import onehot_or, tree
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.vector.credited_output import CreditedOutput
from kaleido_hw.vector.exp_lane import ExpLane
from kaleido_hw.vector.layouts import (EXP_WIDTH, MULT_BITS, SHIFT_BITS, WEIGHT_BITS,
                                       block_prob_beat_layout, block_score_beat_layout,
                                       lane_index_width, state_row_width)
from kaleido_hw.vector.row_input import FREE, LOADED, build_row_input


__all__ = ["BlockSoftmaxUnit", "ROW_OVERHEAD"]

#: Output beats the P FIFO holds: the beats in flight in the output pipeline (7) and the
#: FIFO's own output stages, so that a consumer that takes a beat every cycle never stalls the
#: reads.
OUT_FIFO_DEPTH = 10
#: Cycles a row of k beats takes in the output pass beyond its k beats, when the output is
#: never held: the state read (2), the pipeline from a read to the FIFO (7) and the state
#: write (1). Rows of k beats leave every ``k + ROW_OVERHEAD`` cycles.
ROW_OVERHEAD = 10


class BlockSoftmaxUnit(wiring.Component):
    """Section 15's softmax of one key block per query row, over ``vector_lanes`` lanes.

    Parameters (from ``config``)
        vector_lanes (L), vector_max_row (longest block row, a multiple of L),
        vector_score_bits (B, signed score width), vector_row_buffers (NB),
        engine_max_tokens (query rows kept in the state: the engine core's box).

    Interface
        ``s``: stream of ``block_score_beat_layout``: the scores of one query row in one key
        block, in beats of L as the :class:`~kaleido_hw.vector.softmax_unit.SoftmaxUnit`
        takes them (``last``, ``tail``), and from the row's first beat its scale
        (``mult``/``shift``), the query ``row`` and ``first`` (the row's first block).
        ``p``: stream of ``block_prob_beat_layout``: the block row's P in the same beats,
        each with the ``row`` and its rescale ``factor`` F; the last beat also carries the
        row's ``weight`` L after the block. Rows leave in input order.
        ``overflow``: sticky; a block row had more than ``vector_max_row`` scores.
        ``weight_overflow``: sticky; a row's weight reached ``2**28`` (more than about 2**20
        keys at the running maximum).

    Algorithm (bit-exact to :func:`golden.vector.online_stages`)
        Per query row the unit keeps its running maximum M and weight L in a small memory
        (``amaranth.lib.memory``, one word per row). A block row goes through two passes:

        1. *input* (:func:`~kaleido_hw.vector.row_input.build_row_input`): the beats into a
           free row buffer, folding their scores into the block row's maximum;
        2. *output*: read the row's M and L; ``M' = max(M, block max)`` (the block max alone
           when ``first``); F = ``exp_fixed(y(M' - M))`` in one more :class:`ExpLane`, and
           ``L = (L * F + 2**14) >> 15``; then each beat read back through L ExpLanes
           (``d = M' - s``), ``P = (E * 255 + 2**14) >> 15`` (a shift and a subtraction, no
           multiplier), summed into L; at the row's last beat M' and L are written back.

        The output pass takes one block row at a time (the next row's state read waits for
        this row's state write, so consecutive blocks of the same query row need no
        forwarding); the input pass fills the next buffers meanwhile. The output FIFO's
        free space is credited against the reads in flight, so back-pressure loses nothing.

    Timing
        Input: one beat per cycle while a buffer is free. Output: a block row of k beats
        every ``k + ROW_OVERHEAD`` cycles (10 + k; 64 keys at 16 lanes: 14 cycles, against
        the 32 cycles the engine core's S read-out takes for them at two scores per cycle).
    """

    PORT_DOCS = {
        "s__valid": "score beat valid",
        "s__ready": "score beat accepted when valid and ready (a row buffer is free)",
        "s__payload": "score beat: L signed scores (B bits each, lane 0 first), tail (valid "
                      "lanes of a last beat minus one), last, mult (16), shift (6), row (query "
                      "row of the state), first (the row's first key block); LSB first",
        "p__valid": "probability beat valid",
        "p__ready": "probability beat consumed when valid and ready",
        "p__payload": "probability beat: L uint8 P (scale 1/255 of the running maximum, lane 0 "
                      "first), tail, last, row, factor (16: the row's rescale F, 2^15 = none), "
                      "weight (28: the row's L after the block, on the last beat); LSB first",
        "overflow": "sticky: a block row had more than vector_max_row scores (extra beats "
                    "dropped)",
        "weight_overflow": "sticky: a row's weight L reached 2^28 (stored truncated)",
    }

    def __init__(self, config: KaleidoConfig):
        self.config = config
        super().__init__({
            "s": In(stream.Signature(block_score_beat_layout(config))),
            "p": Out(stream.Signature(block_prob_beat_layout(config))),
            "overflow": Out(1),
            "weight_overflow": Out(1),
        })

    def elaborate(self, platform):
        cfg = self.config
        L, B, NB = cfg.vector_lanes, cfg.vector_score_bits, cfg.vector_row_buffers
        W = cfg.vector_max_row // L
        TW, RW = lane_index_width(L), state_row_width(cfg)
        m = Module()

        ri = build_row_input(m, cfg, self.s, self.overflow, block_score_beat_layout(cfg),
                             {"mult": MULT_BITS, "shift": SHIFT_BITS, "row": RW, "first": 1})
        pick = ri.pick

        # -- the rows' state: running maximum and weight ---------------------------------
        state_mem = memory.Memory(shape=B + WEIGHT_BITS, depth=1 << RW, init=[])
        m.submodules.state_mem = state_mem
        st_r = state_mem.read_port()
        st_w = state_mem.write_port()

        # -- pass 2: one block row at a time -----------------------------------------------
        ptr = Signal(range(NB))             # buffer of the row in (or next for) the pass
        row_max = Signal(signed(B))         # M' of the row
        row_mult = Signal(MULT_BITS)
        row_shift = Signal(SHIFT_BITS)
        row_idx = Signal(RW)
        row_first = Signal()
        row_beats = Signal(range(W + 1))
        row_tail = Signal(TW)
        old_max = Signal(signed(B))
        old_weight = Signal(WEIGHT_BITS)
        rise = Signal(B)                    # M' - M (0 on a first block)
        addr = Signal(range(max(W, 2)))
        last_read = Signal()
        m.d.comb += last_read.eq(addr == row_beats - 1)

        # The pass's state, decoded by an If chain (an m.FSM of five states emits incomplete
        # cases, which Verilator -Wall rejects).
        IDLE, STATE, MAX, READ, DRAIN = range(5)
        phase = Signal(range(5), name="pass_state")
        p_layout = block_prob_beat_layout(cfg)
        p_out = CreditedOutput(m, "p_fifo", self.p, OUT_FIFO_DEPTH)
        issue = Signal()
        m.d.comb += issue.eq((phase == READ) & p_out.room)
        row_written = Signal()              # the row's last beat reached the FIFO

        m.d.comb += st_r.addr.eq(pick(ri.fields["row"], ptr))
        with m.If(phase == IDLE):
            # The state read is issued now (address from the buffer's registers) and lands
            # at the next edge.
            with m.If(pick(ri.state, ptr) == LOADED):
                m.d.sync += [
                    row_max.eq(pick(ri.max, ptr)),
                    row_mult.eq(pick(ri.fields["mult"], ptr)),
                    row_shift.eq(pick(ri.fields["shift"], ptr)),
                    row_idx.eq(pick(ri.fields["row"], ptr)),
                    row_first.eq(pick(ri.fields["first"], ptr)),
                    row_beats.eq(pick(ri.beats, ptr)),
                    row_tail.eq(pick(ri.tail, ptr)),
                    phase.eq(STATE),
                ]
        with m.Elif(phase == STATE):
            m.d.sync += [old_max.eq(st_r.data[:B].as_signed()), old_weight.eq(st_r.data[B:]),
                         phase.eq(MAX)]
        with m.Elif(phase == MAX):
            new_max = Mux(row_first | (row_max > old_max), row_max, old_max)
            m.d.sync += [row_max.eq(new_max),
                         rise.eq(Mux(row_first, 0, (new_max - old_max)[:B])),
                         old_weight.eq(Mux(row_first, 0, old_weight)),
                         addr.eq(0), phase.eq(READ)]
        with m.Elif(phase == READ):
            with m.If(issue):
                m.d.sync += addr.eq(addr + 1)
                with m.If(last_read):
                    # The last read lands at this edge: the buffer is free.
                    m.d.sync += [ptr.eq(ri.next_buffer(ptr)), phase.eq(DRAIN)]
                    for j in range(NB):
                        with m.If(ptr == j):
                            m.d.sync += ri.state[j].eq(FREE)
        with m.Else():                      # DRAIN: until the row's state is written
            with m.If(row_written):
                m.d.sync += phase.eq(IDLE)

        # The row's rescale factor: its own ExpLane, fed from MAX on (rise is held for the
        # row), F four cycles later, the rescaled weight one after: before the first beat's
        # P (seven cycles after its read).
        f_lane = ExpLane(B)
        m.submodules.exp_factor = f_lane
        m.d.comb += [f_lane.d.eq(rise), f_lane.mult.eq(row_mult), f_lane.shift.eq(row_shift)]
        factor = f_lane.e
        scaled_weight = Signal(WEIGHT_BITS)
        m.d.sync += scaled_weight.eq((old_weight * factor + (1 << (EXP_BITS - 1))) >> EXP_BITS)

        # Beat pipeline: 0 read issued -> 1 word arrives (select registered at 0) -> 2 word
        # registered -> 3 d = M' - s -> ExpLane (3) -> 6 E -> 7 P and its lane sum
        # registered -> FIFO with the weight.
        depth = 7
        bv = [Signal(name=f"bv{k}") for k in range(depth + 1)]
        blast = [Signal(name=f"blast{k}") for k in range(depth + 1)]
        m.d.comb += [bv[0].eq(issue), blast[0].eq(last_read)]
        for k in range(depth):
            m.d.sync += [bv[k + 1].eq(bv[k]), blast[k + 1].eq(blast[k])]
        sel = Signal(NB)
        m.d.sync += sel.eq(Cat(*[ptr == j for j in range(NB)]))
        word = Signal(L * B)
        word2 = Signal(L * B)
        m.d.comb += word.eq(onehot_or(sel, [p.data for p in ri.rports]))
        m.d.sync += word2.eq(word)
        p_lanes = []
        for i in range(L):
            lane = ExpLane(B)
            m.submodules[f"exp{i}"] = lane
            d = Signal(B, name=f"d{i}")
            m.d.sync += d.eq((row_max - word2[i * B:(i + 1) * B].as_signed())[:B])
            m.d.comb += [lane.d.eq(d), lane.mult.eq(row_mult), lane.shift.eq(row_shift)]
            keep = ~blast[6] | (row_tail >= i) if i else Const(1)      # past the row: 0
            p = Signal(8, name=f"p{i}")
            # (E * 255 + 2**14) >> 15 with E * 255 = (E << 8) - E.
            m.d.comb += p.eq(Mux(keep, (((lane.e << 8) - lane.e + (1 << (EXP_BITS - 1)))
                                        >> EXP_BITS)[:8], 0))
            p_lanes.append(p)
        assert P_ONE == 255 and EXP_ONE == 1 << EXP_BITS
        p_word = Signal(8 * L)
        beat_sum = Signal((255 * L).bit_length())
        m.d.sync += [p_word.eq(Cat(*p_lanes)), beat_sum.eq(tree(p_lanes, lambda a, b: a + b))]

        # Stage 7: the weight so far (the rescaled weight on the row's first beat).
        row_sum = Signal(WEIGHT_BITS + 1)
        first_beat = Signal(init=1)         # the next beat to reach stage 7 is the row's first
        with m.If(bv[depth]):
            m.d.sync += first_beat.eq(blast[depth])
        total = Signal(WEIGHT_BITS + 1)
        m.d.comb += total.eq(Mux(first_beat, scaled_weight, row_sum) + beat_sum)
        with m.If(bv[depth]):
            m.d.sync += row_sum.eq(total)
        out = Signal(p_layout)
        m.d.comb += [
            out.p.as_value().eq(p_word), out.tail.eq(Mux(blast[depth], row_tail, L - 1)),
            out.last.eq(blast[depth]), out.row.eq(row_idx), out.factor.eq(factor),
            out.weight.eq(Mux(blast[depth], total[:WEIGHT_BITS], 0)),
        ]
        p_out.track(issue, bv[depth], out.as_value())
        m.d.comb += row_written.eq(bv[depth] & blast[depth])
        m.d.comb += [st_w.addr.eq(row_idx), st_w.data.eq(Cat(row_max, total[:WEIGHT_BITS])),
                     st_w.en.eq(row_written)]
        with m.If(row_written & total[WEIGHT_BITS]):
            m.d.sync += self.weight_overflow.eq(1)

        # -- row buffer ports: the input writes, the output pass reads ---------------------
        write_en = Signal(NB)
        m.d.sync += write_en.eq(Cat(*[ri.accept & (ri.in_ptr == j) & (ri.in_count < W)
                                      for j in range(NB)]))
        for j in range(NB):
            m.d.comb += [
                ri.wports[j].addr.eq(ri.beat_addr),
                ri.wports[j].data.eq(ri.beat.scores.as_value()),
                ri.wports[j].en.eq(write_en[j]),
                ri.rports[j].addr.eq(addr),
                ri.rports[j].en.eq(1),
            ]
        return m
