"""Block sequencer of the P @ V array (``docs/linear.md``, "P @ V on the PE arrays").

Walks column blocks, then row blocks, then the units of V's direction group, and per unit
issues its A step and, where some column of the block needs them, its F1 and F2 steps
(``work1``/``work2``: an OR over the block's real columns, computed by the top from the
unit's codes). A block shorter than R steps is padded with bubbles; after the last block one
final drain step, then ``R + C + 1`` cycles for the top's register stage and the last drain
wave.

Units are walked in token order without a division: the unit's anchor coordinates
``(ct, cy, cx)`` step by ``window`` along the group's axis and by 1 on the others. The read
of a unit (its three members' P and V words) is issued the cycle before its first step and
held (read enable low) until its last step; so a unit's steps follow the previous unit's back
to back. The first step is presented two cycles after ``start``; the top registers every
step once before the array, so it reaches the array in cycle 3 (``PvTiming.load_base``).
"""

from __future__ import annotations

from amaranth.hdl import Mux, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from kaleido_hw.array.pv_cell import PV_BUBBLE
from kaleido_hw.bitops import bits_for


__all__ = ["PvSequencer"]


class PvSequencer(wiring.Component):
    """The step walk of one P @ V run.

    Parameters
    ----------
    rows, cols : int
        R and C of the array (bubbles pad a block to R steps; the final wait is R + C + 1).
    size_width : int
        Bits of a grid length or token count.
    block_width : int
        Bits of a row- or column-block count.

    Inputs: ``start`` (one cycle; the run's ``t``, ``h``, ``w``, ``hw`` = h*w, ``axis``,
    ``w3``, ``nrb``, ``ncb`` must be stable from then on), ``work1``/``work2`` (some real
    column of the block has F1 / F2 work at the unit whose data is read).
    Outputs: the read of a unit (``rd_en``, ``rd_tok0``, ``rd_stride``, ``rd_present1/2``,
    ``rd_rb``, ``rd_cb``); the step presented this cycle (``step``, ``issue``, ``first``,
    ``kind``, ``rb``, ``cb``); the block the drain wave of a first step carries (``tag_valid``,
    ``tag_rb``, ``tag_cb``); ``finished`` (one cycle when the last drain wave has left);
    counter pulses ``inc_issued`` (3 bits, by kind), ``inc_skip1``, ``inc_skip2``,
    ``inc_bubble``, ``inc_block``.
    """

    def __init__(self, rows: int, cols: int, size_width: int, block_width: int):
        self.rows, self.cols = rows, cols
        self.sw, self.bw = size_width, block_width
        sw, bw = size_width, block_width
        super().__init__({
            "start": In(1), "t": In(sw), "h": In(sw), "w": In(sw), "hw": In(sw),
            "axis": In(2), "w3": In(1), "nrb": In(bw), "ncb": In(bw),
            "work1": In(1), "work2": In(1),
            "rd_en": Out(1), "rd_tok0": Out(sw), "rd_stride": Out(sw),
            "rd_present1": Out(1), "rd_present2": Out(1), "rd_rb": Out(bw), "rd_cb": Out(bw),
            "step": Out(1), "issue": Out(1), "first": Out(1), "kind": Out(2),
            "rb": Out(bw), "cb": Out(bw),
            "tag_valid": Out(1), "tag_rb": Out(bw), "tag_cb": Out(bw),
            "finished": Out(1),
            "inc_issued": Out(3), "inc_skip1": Out(1), "inc_skip2": Out(1),
            "inc_bubble": Out(1), "inc_block": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        R, C, sw, bw = self.rows, self.cols, self.sw, self.bw
        win = Mux(self.w3, 3, 2)
        # The unit whose data is (being) read, and its block.
        ct, cy, cx = (Signal(sw, name=n) for n in ("ct", "cy", "cx"))
        rb, cb = Signal(bw, name="cur_rb"), Signal(bw, name="cur_cb")
        kind = Signal(2)
        bstep = Signal(bits_for(R))          # steps of the block so far (saturating at R)
        first_pending = Signal()
        bubbles = Signal(bits_for(R))
        tail = Signal(bits_for(R + C + 1))
        m.d.comb += [self.rb.eq(rb), self.cb.eq(cb)]

        # Next unit in token order (the axis coordinate steps by the window).
        step_x = Mux(self.axis == 2, win, 1)
        step_y = Mux(self.axis == 1, win, 1)
        step_t = Mux(self.axis == 0, win, 1)
        nx, ny, nt = (Signal(sw + 1, name=n) for n in ("nx", "ny", "nt"))
        m.d.comb += [nx.eq(cx + step_x), ny.eq(cy + step_y), nt.eq(ct + step_t)]
        wrap_x = nx >= self.w
        wrap_y = ny >= self.h
        wrap_t = nt >= self.t
        block_end = wrap_x & wrap_y & wrap_t
        next_x = Mux(wrap_x, 0, nx)
        next_y = Mux(wrap_x, Mux(wrap_y, 0, ny), cy)
        next_t = Mux(wrap_x & wrap_y, Mux(wrap_t, 0, nt), ct)
        last_rb = rb + 1 == self.nrb
        last_block = last_rb & (cb + 1 == self.ncb)
        next_rb = Mux(last_rb, 0, rb + 1)
        next_cb = Mux(last_rb, cb + 1, cb)

        # Read address of a unit (the anchor token, the axis stride and the members present).
        def read(t_, y_, x_, rb_, cb_):
            coord = Mux(self.axis == 0, t_, Mux(self.axis == 1, y_, x_))
            length = Mux(self.axis == 0, self.t, Mux(self.axis == 1, self.h, self.w))
            m.d.comb += [
                self.rd_en.eq(1),
                self.rd_tok0.eq(t_ * self.hw + y_ * self.w + x_),
                self.rd_stride.eq(Mux(self.axis == 0, self.hw, Mux(self.axis == 1, self.w, 1))),
                self.rd_present1.eq(coord + 1 < length),
                self.rd_present2.eq(self.w3 & (coord + 2 < length)),
                self.rd_rb.eq(rb_), self.rd_cb.eq(cb_),
            ]

        def present(issue, first, kind_):
            m.d.comb += [self.step.eq(1), self.issue.eq(issue), self.first.eq(first),
                         self.kind.eq(kind_)]

        # The state, decoded by an If chain (an m.FSM of 6 states emits incomplete cases,
        # which Verilator -Wall rejects).
        names = ("IDLE", "LOAD", "STEP", "BUBBLE", "FINAL", "TAIL")
        ST = {n: k for k, n in enumerate(names)}
        state = Signal(range(len(names)), name="seq_state")

        def goto(name):
            m.d.sync += state.eq(ST[name])

        def end_block():
            """After a block's last issued step (this cycle) or its last bubble."""
            with m.If(last_block):
                goto("FINAL")
            with m.Else():
                read(0, 0, 0, next_rb, next_cb)
                m.d.sync += [ct.eq(0), cy.eq(0), cx.eq(0), rb.eq(next_rb), cb.eq(next_cb),
                             kind.eq(0), bstep.eq(0), first_pending.eq(1)]
                goto("STEP")

        with m.If(state == ST["IDLE"]):
            with m.If(self.start):
                m.d.sync += [ct.eq(0), cy.eq(0), cx.eq(0), rb.eq(0), cb.eq(0), kind.eq(0),
                             bstep.eq(0), first_pending.eq(1), self.tag_valid.eq(0)]
                goto("LOAD")
        with m.Elif(state == ST["LOAD"]):
            read(ct, cy, cx, rb, cb)
            goto("STEP")
        with m.Elif(state == ST["STEP"]):
            first = first_pending & (kind == 0)
            present(1, first, kind)
            m.d.comb += self.inc_issued.eq(1 << kind)
            with m.If(first):
                m.d.comb += self.inc_block.eq(1)
                m.d.sync += [first_pending.eq(0), self.tag_valid.eq(1),
                             self.tag_rb.eq(rb), self.tag_cb.eq(cb)]
            with m.If(kind == 0):
                m.d.comb += [self.inc_skip1.eq(~self.work1),
                             self.inc_skip2.eq(self.w3 & ~self.work2)]
            unit_done = Mux(kind == 0, ~self.work1 & ~self.work2,
                            Mux(kind == 1, ~self.work2, 1))
            steps = Signal(bits_for(R), name="steps_now")
            m.d.comb += steps.eq(Mux(bstep == R, R, bstep + 1))
            m.d.sync += bstep.eq(steps)
            with m.If(~unit_done):
                m.d.sync += kind.eq(Mux((kind == 0) & self.work1, 1, 2))
            with m.Elif(~block_end):
                read(next_t, next_y, next_x, rb, cb)
                m.d.sync += [ct.eq(next_t), cy.eq(next_y), cx.eq(next_x), kind.eq(0)]
            with m.Elif(steps < R):
                m.d.sync += bubbles.eq(R - steps)
                goto("BUBBLE")
            with m.Else():
                end_block()
        with m.Elif(state == ST["BUBBLE"]):
            present(0, 0, PV_BUBBLE)
            m.d.comb += self.inc_bubble.eq(1)
            m.d.sync += bubbles.eq(bubbles - 1)
            with m.If(bubbles == 1):
                end_block()
        with m.Elif(state == ST["FINAL"]):
            present(0, 1, PV_BUBBLE)            # drains the last block
            # The array sees it a cycle later (the top's register stage), then the wave.
            m.d.sync += tail.eq(R + C + 1)
            goto("TAIL")
        with m.Elif(state == ST["TAIL"]):
            m.d.sync += tail.eq(tail - 1)
            with m.If(tail == 0):
                m.d.comb += self.finished.eq(1)
                goto("IDLE")
        return m
