"""Block sequencer of one P @ V array (``docs/linear.md``, "P @ V on the PE arrays").

Walks the row blocks of P and, for each, its own column blocks (of P arrays, array ``a``
takes column blocks ``a, a + P, a + 2P, ...``: ``first_cb`` = a, stride P), then the units
of V's direction group, and per unit issues its A step and, where some column of the block
needs them, its F1 and F2 steps (``work1``/``work2``: an OR over the block's real columns,
computed by the top from the unit's codes). A block shorter than R steps is padded with
bubbles; after the last block one final drain step, then ``R + C + 1`` cycles for the top's
register stage and the last drain wave. Row blocks outermost, so that P can stream in while
the run goes (``p_blocks``: a row block's units are read once it is written; the steps then
wait, presenting nothing, and the array holds its state); the order changes no count,
every block costs what it costs in any order.

Units are walked in token order without a division: the unit's anchor coordinates
``(ct, cy, cx)`` step by ``window`` along the group's axis and by 1 on the others.

The walk is a pipeline, so that no path runs from the memories' read data through the
window codes into the next read (the decision whether a unit has follower steps comes from
a register), nor from the memories' clock-to-output through the codes:

* **read**: the read pointer's unit (its three members' P and V words) is read when stage 0
  is free at the end of the cycle;
* **stage 0**: the read ports hold the unit's words (read enable low) until ``load1`` moves
  them into the top's fetch registers;
* **stage 1**: the top's fetch registers hold the words; the top computes the window codes
  and ``work1``/``work2`` from them; ``take`` (the current unit's last step is presented, or
  there is no current unit) moves words, codes and work bits into the top's unit registers
  and the block information into this sequencer's;
* **current**: the unit whose steps are presented, one per cycle, from registered work bits.

A stage moves when the one after it is free at the end of the cycle, so the next unit's codes
are ready when the current one's last step is presented, and steps follow each other back to
back, across blocks too (the next block's first unit is taken during the bubbles). The first
step is presented four cycles after ``start`` (read, stage 0, stage 1, then the step); the
top registers every step once before the array, so it reaches the array in cycle 5
(``PvTiming.load_base``).
"""

from __future__ import annotations

from amaranth.hdl import Mux, Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from kaleido_hw.array.pv_cell import PV_BUBBLE
from kaleido_hw.bitops import bits_for


__all__ = ["PvSequencer"]


class PvSequencer(wiring.Component):
    """The step walk of one P @ V run on one array.

    Parameters
    ----------
    rows, cols : int
        R and C of the array (bubbles pad a block to R steps; the final wait is R + C + 1).
    size_width : int
        Bits of a grid length or token count.
    block_width : int
        Bits of a row- or column-block count.
    arrays : int
        P: the stride of the column-block walk.

    Inputs: ``start`` (one cycle; the run's ``t``, ``h``, ``w``, ``hw`` = h*w, ``axis``,
    ``w3``, ``nrb``, ``ncb`` must be stable from then on; start only when ``first_cb <
    ncb``), ``first_cb`` (the array's index, an input so that the P sequencers are one
    module), ``work1``/``work2`` (some real column of the fetched unit's block has F1 / F2
    work at that unit), ``p_blocks`` (row blocks of P written so far: a unit of row block
    ``rb`` is read only once ``rb < p_blocks``; ``nrb`` when P was written before start).
    Outputs: the read of a unit (``rd_en``, ``rd_tok0``, ``rd_stride``, ``rd_present1/2``,
    ``rd_rb``, ``rd_cb``: the array's own column-block index, ``cb // P``); ``load1`` (the
    read ports' words go to the fetch registers); the block of the unit in the fetch
    registers (``f_rb``, ``f_cb``: the column block of the run) and ``take``; the step
    presented this cycle (``step``, ``issue``, ``first``, ``kind``); the block the drain wave
    of a first step carries (``tag_valid``, ``tag_rb``, ``tag_cb``, the array's own index);
    ``finished`` (one cycle when the last drain wave has left); counter pulses
    ``inc_issued`` (3 bits, by kind), ``inc_skip1``, ``inc_skip2``, ``inc_bubble``,
    ``inc_block``.
    """

    def __init__(self, rows: int, cols: int, size_width: int, block_width: int,
                 arrays: int = 1):
        self.rows, self.cols, self.arrays = rows, cols, arrays
        self.sw, self.bw = size_width, block_width
        sw, bw = size_width, block_width
        super().__init__({
            "start": In(1), "first_cb": In(bw), "t": In(sw), "h": In(sw), "w": In(sw),
            "hw": In(sw), "axis": In(2), "w3": In(1), "nrb": In(bw), "ncb": In(bw),
            "work1": In(1), "work2": In(1), "p_blocks": In(bw),
            "rd_en": Out(1), "rd_tok0": Out(sw), "rd_stride": Out(sw),
            "rd_present1": Out(1), "rd_present2": Out(1), "rd_rb": Out(bw), "rd_cb": Out(bw),
            "load1": Out(1), "f_rb": Out(bw), "f_cb": Out(bw), "take": Out(1),
            "step": Out(1), "issue": Out(1), "first": Out(1), "kind": Out(2),
            "tag_valid": Out(1), "tag_rb": Out(bw), "tag_cb": Out(bw),
            "finished": Out(1),
            "inc_issued": Out(3), "inc_skip1": Out(1), "inc_skip2": Out(1),
            "inc_bubble": Out(1), "inc_block": Out(1),
        })

    def shared_module_key(self):
        """Equal for sequencers that are the same hardware (``kaleido_hw.flow.shared_modules``):
        every constructor argument (the array's index is the ``first_cb`` port)."""
        return type(self), self.rows, self.cols, self.sw, self.bw, self.arrays

    def elaborate(self, platform):
        m = Module()
        R, C, sw, bw, P = self.rows, self.cols, self.sw, self.bw, self.arrays
        win = Mux(self.w3, 3, 2)

        # -- read pointer: the next unit to read, its block (of the run and the array's own)
        ct, cy, cx = (Signal(sw, name=n) for n in ("ct", "cy", "cx"))
        rb, cb, lcb = (Signal(bw, name=n) for n in ("rd_rb_q", "rd_cb_q", "rd_lcb_q"))
        more = Signal()                      # the pointer is at a unit of the run
        step_x = Mux(self.axis == 2, win, 1)
        step_y = Mux(self.axis == 1, win, 1)
        step_t = Mux(self.axis == 0, win, 1)
        nx, ny, nt = (Signal(sw + 1, name=n) for n in ("nx", "ny", "nt"))
        m.d.comb += [nx.eq(cx + step_x), ny.eq(cy + step_y), nt.eq(ct + step_t)]
        wrap_x = nx >= self.w
        wrap_y = ny >= self.h
        wrap_t = nt >= self.t
        block_end = wrap_x & wrap_y & wrap_t
        last_rb = rb + 1 == self.nrb
        last_cb = cb + P >= self.ncb         # the array's last column block of a row block
        last_block = last_rb & last_cb
        coord = Mux(self.axis == 0, ct, Mux(self.axis == 1, cy, cx))
        length = Mux(self.axis == 0, self.t, Mux(self.axis == 1, self.h, self.w))
        m.d.comb += [
            self.rd_tok0.eq(ct * self.hw + cy * self.w + cx),
            self.rd_stride.eq(Mux(self.axis == 0, self.hw, Mux(self.axis == 1, self.w, 1))),
            self.rd_present1.eq(coord + 1 < length),
            self.rd_present2.eq(self.w3 & (coord + 2 < length)),
            self.rd_rb.eq(rb), self.rd_cb.eq(lcb),
        ]

        # -- the unit at the read ports (stage 0) and in the top's fetch registers (stage 1):
        # its block, and whether it is its block's first or last unit and the run's last ----
        info = data.StructLayout({"first": 1, "last": 1, "final": 1, "rb": bw, "cb": bw,
                                  "lcb": bw})
        v0, v1 = Signal(name="s0_valid"), Signal(name="s1_valid")
        i0, i1 = Signal(info, name="s0_info"), Signal(info, name="s1_info")
        # -- current unit: its block information, work bits, the step kind -----------------
        cur = Signal(info, name="cur_info")
        c_w1, c_w2 = Signal(name="c_w1"), Signal(name="c_w2")
        kind = Signal(2)
        bstep = Signal(bits_for(R))          # steps of the block so far (saturating at R)
        bubbles = Signal(bits_for(R))
        final_next = Signal()                # the bubbles end the run's last block
        tail = Signal(bits_for(R + C + 1))
        next_taken = Signal()                # the unit after the bubbles is in ``cur``

        names = ("IDLE", "FILL", "STEP", "BUBBLE", "FINAL", "TAIL")
        ST = {n: k for k, n in enumerate(names)}
        state = Signal(range(len(names)), name="seq_state")

        def goto(name):
            m.d.sync += state.eq(ST[name])

        def present(issue, first, kind_):
            m.d.comb += [self.step.eq(1), self.issue.eq(issue), self.first.eq(first),
                         self.kind.eq(kind_)]

        # The pipeline moves when its next stage is free at the end of the cycle: the
        # current unit's last step is presented (``unit_ends``, set in STEP below), or a
        # stage is empty.
        unit_ends = Signal()
        # The last bubble of a block whose next unit came too late for ``unit_ends``.
        bubble_take = Signal()
        take, load1, reading = Signal(), Signal(), Signal()
        m.d.comb += [take.eq(v1 & ((state == ST["FILL"]) | unit_ends | bubble_take)),
                     load1.eq(v0 & (~v1 | take)),
                     reading.eq(more & (state != ST["IDLE"]) & (~v0 | load1)
                                & (rb < self.p_blocks)),
                     self.take.eq(take), self.load1.eq(load1), self.rd_en.eq(reading),
                     self.f_rb.eq(i1.rb), self.f_cb.eq(i1.cb)]
        with m.If(reading):
            m.d.sync += [v0.eq(1), i0.rb.eq(rb), i0.cb.eq(cb), i0.lcb.eq(lcb),
                         i0.first.eq((ct == 0) & (cy == 0) & (cx == 0)),
                         i0.last.eq(block_end), i0.final.eq(block_end & last_block)]
            with m.If(~block_end):
                m.d.sync += [cx.eq(Mux(wrap_x, 0, nx)),
                             cy.eq(Mux(wrap_x, Mux(wrap_y, 0, ny), cy)),
                             ct.eq(Mux(wrap_x & wrap_y, Mux(wrap_t, 0, nt), ct))]
            with m.Else():
                m.d.sync += [ct.eq(0), cy.eq(0), cx.eq(0)]
                with m.If(last_cb):
                    m.d.sync += [rb.eq(rb + 1), cb.eq(self.first_cb), lcb.eq(0)]
                with m.Else():
                    m.d.sync += [cb.eq(cb + P), lcb.eq(lcb + 1)]
                with m.If(last_block):
                    m.d.sync += more.eq(0)
        with m.Elif(load1):
            m.d.sync += v0.eq(0)
        with m.If(load1):
            m.d.sync += [v1.eq(1), i1.eq(i0)]
        with m.Elif(take):
            m.d.sync += v1.eq(0)
        with m.If(take):
            m.d.sync += [cur.eq(i1), c_w1.eq(self.work1), c_w2.eq(self.work2)]

        with m.If(state == ST["IDLE"]):
            with m.If(self.start):
                m.d.sync += [ct.eq(0), cy.eq(0), cx.eq(0), rb.eq(0), cb.eq(self.first_cb),
                             lcb.eq(0), more.eq(1), v0.eq(0), v1.eq(0), kind.eq(0),
                             bstep.eq(0),
                             self.tag_valid.eq(0)]
                goto("FILL")
        with m.Elif(state == ST["FILL"]):
            with m.If(take):
                goto("STEP")
        with m.Elif(state == ST["STEP"]):
            first = cur.first & (kind == 0)
            present(1, first, kind)
            m.d.comb += self.inc_issued.eq(1 << kind)
            with m.If(first):
                m.d.comb += self.inc_block.eq(1)
                m.d.sync += [self.tag_valid.eq(1), self.tag_rb.eq(cur.rb),
                             self.tag_cb.eq(cur.lcb)]
            with m.If(kind == 0):
                m.d.comb += [self.inc_skip1.eq(~c_w1), self.inc_skip2.eq(self.w3 & ~c_w2)]
            done = Mux(kind == 0, ~c_w1 & ~c_w2, Mux(kind == 1, ~c_w2, 1))
            steps = Signal(bits_for(R), name="steps_now")
            m.d.comb += steps.eq(Mux(first, 1, Mux(bstep == R, R, bstep + 1)))
            m.d.sync += bstep.eq(steps)
            with m.If(~done):
                m.d.sync += kind.eq(Mux((kind == 0) & c_w1, 1, 2))
            with m.Else():
                m.d.comb += unit_ends.eq(1)
                m.d.sync += kind.eq(0)
                with m.If(cur.last & (steps < R)):
                    m.d.sync += [bubbles.eq(R - steps), final_next.eq(cur.final),
                                 next_taken.eq(v1)]
                    goto("BUBBLE")
                with m.Elif(cur.final):
                    goto("FINAL")
                with m.Elif(~v1):
                    goto("FILL")             # the next unit waits for its row block of P
        with m.Elif(state == ST["BUBBLE"]):
            present(0, 0, PV_BUBBLE)
            m.d.comb += [self.inc_bubble.eq(1),
                         bubble_take.eq((bubbles == 1) & ~final_next & ~next_taken)]
            m.d.sync += bubbles.eq(bubbles - 1)
            with m.If(bubbles == 1):
                with m.If(final_next):
                    goto("FINAL")
                with m.Elif(next_taken | v1):
                    goto("STEP")
                with m.Else():
                    goto("FILL")             # the next unit waits for its row block of P
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
