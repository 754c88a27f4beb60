"""The block sequencer of the LinearEngine (``docs/linear.md``: units, blocks, step kinds,
drain waves, timing).

:class:`LinearSequencer` walks a run in the contract's order (group t, y, x -> column block
-> row block -> A / F1 / F2 channel steps, then bubbles) and feeds the PE array one step per
cycle. Two halves work concurrently on a double-buffered slot:

* the **loader** reads the ``w`` member tokens of the block's R units (``w*R`` reads, one X
  word each: anchor, follower 1, follower 2 of unit 0, then unit 1, ...), and when a unit's
  last member arrives a :class:`~kaleido_hw.engine.window_code_unit.WindowCodeUnit` forms its
  follower codes and F1/F2 work per channel; the work of the real rows is ORed into the
  block's F1/F2 channel bitmaps;
* the **stepper** runs the block in the compute slot: the A steps (every channel of the
  group), then the F1 and F2 channels with work (lowest channel first; the others are
  skipped at no cost), then bubbles up to the block length ``s`` of
  ``golden.engine.linear.block_steps``. Drain waves: at step 0 the previous block's last
  register (R1 for window 2, R2 for window 3), at ``d0 = max(n, R)`` R0, and (window 3) at
  ``d1 = max(n + f1, d0 + R)`` R1. Step 0 also clears R0-R2 (the drain takes the pre-update
  value). The weight row ``W[c, cb*C ..]`` is read from the W memory in the step's cycle.

Timing (cycle 0 = ``start``; ``golden.engine.linear.LinearTiming``): a group's first loads
start at its ``start`` (run: cycle 2); a block's loads take ``w*R + 2`` cycles (``gap``:
its reads, the read port's cycle, and the arrival register in front of the window codes);
the loaded block is handed to the stepper (a *swap*) when the stepper is free, and the next
block's loads start in the cycle of the swap, so block starts are ``max(s, gap)`` apart. The
last block of a group is loaded before the group ends; the next group's loads wait until
two cycles after the group's last step on every array (the engine's ``barrier`` pulse).
With P arrays, array a runs column blocks a, a + P, ... (``index``). After the run's last
step one final step drains the last register.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from kaleido_hw.array.layouts import linear_col_layout, linear_row_layout
from kaleido_hw.bitops import bits_for, lowest_set, popcount
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.engine_layouts import AXIS_T, AXIS_X, AXIS_Y
from kaleido_hw.engine.linear_layouts import (BUBBLE, LinearGeometry, linear_run_layout,
                                              linear_tag_layout)
from kaleido_hw.engine.tile_layouts import COUNTER_WIDTH
from kaleido_hw.engine.window_code_unit import WindowCodeUnit
from kaleido_hw.pe.layouts import Drain


__all__ = ["LinearSequencer", "linear_counters_layout"]


def group_walk(m: Module, gsize, group: Signal):
    """The walk over channel groups 0, 1, 2 (t, y, x) that skips empty ones: ``(first_group,
    has_next, next_group)`` for the group register ``group``, from the group sizes ``gsize``
    of the run (``first_group`` is 2 when every group is empty)."""
    nonempty = [gsize[g] != 0 for g in range(3)]
    first_group = Mux(nonempty[0], 0, Mux(nonempty[1], 1, 2))
    has_next = Signal()
    next_group = Signal(2)
    with m.Switch(group):
        with m.Case(0):
            m.d.comb += [has_next.eq(nonempty[1] | nonempty[2]),
                         next_group.eq(Mux(nonempty[1], 1, 2))]
        with m.Case(1):
            m.d.comb += [has_next.eq(nonempty[2]), next_group.eq(2)]
        with m.Default():
            m.d.comb += [has_next.eq(0), next_group.eq(2)]
    return first_group, has_next, next_group


def linear_counters_layout() -> data.StructLayout:
    """The sequencer's counters: channel steps issued / skipped per kind (A, F1, F2),
    bubbles, blocks, groups."""
    w = unsigned(COUNTER_WIDTH)
    return data.StructLayout({"issued": data.ArrayLayout(w, 3), "skipped": data.ArrayLayout(w, 3),
                              "bubbles": w, "blocks": w, "groups": w})


class _UnitWalker:
    """Anchor coordinates of the current unit of a group whose axis is ``d``; the next unit
    in token order of the anchors is ``window`` tokens further along ``d``."""

    def __init__(self, geo: LinearGeometry):
        sw = geo.size_width
        self.tokw = geo.tok_width
        self.t, self.y, self.x = (Signal(sw, name=f"unit_{a}") for a in "tyx")
        self.rowtok = Signal(sw, name="unit_rowtok")        # t*H*W + y*W
        self.frametok = Signal(sw, name="unit_frametok")    # t*H*W
        self.end = Signal(name="unit_end")                  # walked past the last unit

    def reset(self):
        return [f.eq(0) for f in (self.t, self.y, self.x, self.rowtok, self.frametok, self.end)]

    def member_tok(self, member, d, cfg):
        """Token of member ``member`` (0..2) of the unit."""
        stride = Mux(d == AXIS_X, 1, Mux(d == AXIS_Y, cfg.w, cfg.hw))
        offset = Mux(member == 0, 0, Mux(member == 1, stride, stride << 1))
        return (self.rowtok + self.x + offset)[:self.tokw]

    def present(self, member, d, cfg):
        """The unit's member ``member`` exists (within the grid on axis ``d``)."""
        coord = Mux(d == AXIS_X, self.x, Mux(d == AXIS_Y, self.y, self.t))
        length = Mux(d == AXIS_X, cfg.w, Mux(d == AXIS_Y, cfg.h, cfg.t))
        return ~self.end & (coord + member < length)

    def advance(self, m, d, cfg):
        """Sync statements (under the caller's condition) that move to the next unit."""
        win = Mux(cfg.w3, 3, 2)
        sx = Mux(d == AXIS_X, win, 1)
        sy = Mux(d == AXIS_Y, win, 1)
        st = Mux(d == AXIS_T, win, 1)
        wstep = Mux(d == AXIS_Y, Mux(cfg.w3, (cfg.w << 1) + cfg.w, cfg.w << 1), cfg.w)
        fstep = Mux(d == AXIS_T, Mux(cfg.w3, (cfg.hw << 1) + cfg.hw, cfg.hw << 1), cfg.hw)
        with m.If(~self.end):
            with m.If(self.x + sx < cfg.w):
                m.d.sync += self.x.eq(self.x + sx)
            with m.Elif(self.y + sy < cfg.h):
                m.d.sync += [self.x.eq(0), self.y.eq(self.y + sy),
                             self.rowtok.eq(self.rowtok + wstep)]
            with m.Elif(self.t + st < cfg.t):
                m.d.sync += [self.x.eq(0), self.y.eq(0), self.t.eq(self.t + st),
                             self.frametok.eq(self.frametok + fstep),
                             self.rowtok.eq(self.frametok + fstep)]
            with m.Else():
                m.d.sync += self.end.eq(1)


class _Slot:
    """What the stepper needs about one block."""

    def __init__(self, name: str, geo: LinearGeometry):
        R, D = geo.rows, geo.max_in
        S = lambda shape, n: Signal(shape, name=f"{name}_{n}")  # noqa: E731
        self.xw = [[S(8 * D, f"x{r}_{j}") for j in range(3)] for r in range(R)]   # member words
        self.c1 = [S(2 * D, f"c1_{r}") for r in range(R)]
        self.c2 = [S(2 * D, f"c2_{r}") for r in range(R)]
        self.rtok = [[S(geo.tok_width, f"tok{j}_{r}") for r in range(R)] for j in range(3)]
        self.rpres = [S(R, f"pres{j}") for j in range(3)]     # member j exists, per row
        self.f1map = S(D, "f1map")
        self.f2map = S(D, "f2map")
        self.group = S(2, "group")
        self.cb = S(geo.cbi_width, "cb")
        self.slot = S(geo.slot_width, "slot")                 # cb // arrays
        self.gfirst = S(1, "gfirst")                          # first block of its group
        self.glast = S(1, "glast")                            # last block of its group

    def fields(self):
        return [*(w for row in self.xw for w in row), *self.c1, *self.c2,
                *(t for member in self.rtok for t in member), *self.rpres, self.f1map,
                self.f2map, self.group, self.cb, self.slot, self.gfirst, self.glast]

    def copy(self, other: "_Slot"):
        return [a.eq(b) for a, b in zip(self.fields(), other.fields())]


class LinearSequencer(wiring.Component):
    """Loader, double-buffered block slot and A/F1/F2 stepper of one PE array running
    ``Y = X_eff @ W``.

    Parameters
    ----------
    config : KaleidoConfig
        ``rows``/``cols`` (R, C; C a power of two), ``engine_max_tokens``,
        ``linear_max_in`` (D), ``linear_max_out``, ``engine_arrays`` (P).
    index : int
        This array's number a (0..P-1): it runs column blocks a, a + P, a + 2P, ... of every
        group. The engine starts it only when the layer has more than a column blocks.

    Ports
    -----
    ``start`` (in): one-cycle pulse; ``cfg`` (the run's configuration, latched by the engine)
    must be valid from that cycle to the end of the run.
    ``x_addr``/``x_en``/``x_data``: synchronous read port of the X memory (one word of D int8
    per token). ``w_addr``/``w_en``/``w_data``: of the W memory (one word of
    ``linear_max_out`` int8 per input channel); both one cycle of latency.
    ``row``, ``tag`` (out, registered) and ``col`` (out, valid registered, ``b`` from the W
    read port in the same cycle): the step for the array (a cycle without a step has mode 0).
    ``finished`` (out): one-cycle pulse with the run's final (drain-only) step.
    ``group_end`` (out, combinational): the step that ends this array's share of a group.
    ``barrier`` (in): one-cycle pulse from the engine, the cycle after the last array's
    ``group_end``; the next group's loads start in the cycle after it.
    ``counters`` (out): valid after ``finished``.

    See the module docstring for the algorithm and the timing.
    """

    def __init__(self, config: KaleidoConfig, index: int = 0):
        self.geo = geo = LinearGeometry.from_config(config)
        self.config = config
        if not 0 <= index < geo.arrays:
            raise ValueError(f"index must be in [0, engine_arrays = {geo.arrays}), got {index}")
        self.index = index
        R, C, D = geo.rows, geo.cols, geo.max_in
        super().__init__({
            "start": In(1),
            "cfg": In(linear_run_layout(geo)),
            "x_addr": Out(geo.tok_width), "x_en": Out(1), "x_data": In(8 * D),
            "w_addr": Out(bits_for(D - 1)), "w_en": Out(1), "w_data": In(8 * geo.max_out),
            "row": Out(data.ArrayLayout(linear_row_layout(), R)),
            "col": Out(data.ArrayLayout(linear_col_layout(), C)),
            "tag": Out(linear_tag_layout(geo)),
            "finished": Out(1),
            "group_end": Out(1),
            "barrier": In(1),
            "counters": Out(linear_counters_layout()),
        })

    def elaborate(self, platform):
        m = Module()
        geo, cfg = self.geo, self.cfg
        R, C, D = geo.rows, geo.cols, geo.max_in
        cbits = (C - 1).bit_length()

        running = Signal()
        loader_done = Signal()
        slot_full = Signal()
        swap = Signal()
        gwait = Signal()             # the loader waits for the group barrier
        barrier = self.barrier       # the cycle after the group's last step on every array
        P, a = geo.arrays, self.index

        # -- groups (group g = the input channels whose direction is axis g) ----------------
        group = Signal(2)                      # group being loaded
        first_group, has_next, next_group = group_walk(m, cfg.gsize, group)
        gstart = Signal()                      # the next block loaded is its group's first

        # -- loader -----------------------------------------------------------------------------
        walk = _UnitWalker(geo)
        cb = Signal(geo.cbi_width)             # column block: a, a + P, a + 2P, ...
        slot = Signal(geo.slot_width)          # cb // P
        ld = _Slot("ld", geo)
        cp = _Slot("cp", geo)

        rd_active = Signal()
        rd_unit = Signal(bits_for(R - 1))
        rd_member = Signal(2)
        pend = Signal()
        pend_unit = Signal(bits_for(R - 1))
        pend_member = Signal(2)
        pend_lastm = Signal()
        pend_last = Signal()
        pend_real = Signal()
        pend_p = Signal(2)                     # members 1, 2 exist
        load_go = Signal()
        arr = Signal()                         # the word read two cycles ago, registered
        arr_unit = Signal(bits_for(R - 1))
        arr_member = Signal(2)
        arr_lastm = Signal()
        arr_last = Signal()
        arr_real = Signal()
        arr_p = Signal(2)
        arr_data = Signal(8 * D)
        m.d.comb += load_go.eq(running & ~loader_done & ~gwait & ~rd_active & ~pend & ~arr
                               & (~slot_full | swap))
        reading = rd_active | load_go
        unit = Mux(rd_active, rd_unit, 0)
        member = Mux(rd_active, rd_member, 0)
        last_member = member == Mux(cfg.w3, 2, 1)
        direction = group                      # the group's axis
        m.d.comb += [self.x_addr.eq(walk.member_tok(member, direction, cfg)),
                     self.x_en.eq(reading & walk.present(member, direction, cfg))]
        m.d.sync += [pend.eq(reading), pend_unit.eq(unit), pend_member.eq(member),
                     pend_lastm.eq(reading & last_member),
                     pend_last.eq(reading & last_member & (unit == R - 1)),
                     pend_real.eq(~walk.end),
                     pend_p.eq(Cat(walk.present(1, direction, cfg),
                                   walk.present(2, direction, cfg) & cfg.w3))]
        with m.If(reading):
            with m.If(last_member):
                m.d.sync += rd_member.eq(0)
                with m.If(unit == R - 1):
                    m.d.sync += rd_active.eq(0)
                with m.Else():
                    m.d.sync += [rd_active.eq(1), rd_unit.eq(unit + 1)]
                walk.advance(m, direction, cfg)
            with m.Else():
                m.d.sync += [rd_active.eq(1), rd_unit.eq(unit), rd_member.eq(member + 1)]
            for r in range(R):
                with m.If(unit == r):
                    for j in range(3):
                        with m.If(member == j):
                            m.d.sync += [
                                ld.rtok[j][r].eq(walk.member_tok(j, direction, cfg)),
                                ld.rpres[j][r].eq(walk.present(j, direction, cfg)
                                                  & (cfg.w3 if j == 2 else 1)),
                            ]
        with m.If(load_go):
            m.d.sync += [ld.group.eq(group), ld.cb.eq(cb), ld.slot.eq(slot), ld.f1map.eq(0),
                         ld.f2map.eq(0), ld.gfirst.eq(gstart), gstart.eq(0)]

        # Arriving words go into a register first (``arr``), so the X memory's
        # clock-to-output and the window codes are separate paths; the unit's codes are
        # formed from that register when its last member is there.
        m.d.sync += [arr.eq(pend), arr_unit.eq(pend_unit), arr_member.eq(pend_member),
                     arr_lastm.eq(pend_lastm), arr_last.eq(pend_last), arr_real.eq(pend_real),
                     arr_p.eq(pend_p)]
        with m.If(pend):
            m.d.sync += arr_data.eq(self.x_data)
        m.submodules.codes = cu = WindowCodeUnit(D)
        hold0 = Signal(8 * D)
        hold1 = Signal(8 * D)
        with m.If(arr & (arr_member == 0)):
            m.d.sync += hold0.eq(arr_data)
        with m.If(arr & (arr_member == 1)):
            m.d.sync += hold1.eq(arr_data)
        m.d.comb += [cu.m0.eq(hold0), cu.m1.eq(Mux(arr_member == 1, arr_data, hold1)),
                     cu.m2.eq(arr_data), cu.present1.eq(arr_p[0]),
                     cu.present2.eq(arr_p[1]), cu.w3.eq(cfg.w3), cu.reuse.eq(cfg.reuse),
                     cu.full_limit.eq(cfg.full_limit), cu.half_mask.eq(cfg.half_mask)]
        for r in range(R):
            with m.If(arr & (arr_unit == r)):
                for j in range(3):
                    with m.If(arr_member == j):
                        m.d.sync += ld.xw[r][j].eq(arr_data)
                with m.If(arr_lastm):
                    m.d.sync += [ld.c1[r].eq(cu.c1), ld.c2[r].eq(cu.c2)]
        with m.If(arr_lastm & arr_real):
            m.d.sync += [ld.f1map.eq(ld.f1map | cu.work1), ld.f2map.eq(ld.f2map | cu.work2)]

        # Last word of the block: the slot is full; move on (column block, then group).
        with m.If(arr_last):
            m.d.sync += [slot_full.eq(1), ld.glast.eq(0)]
            with m.If(walk.end):
                m.d.sync += walk.reset()
                with m.If(cb + P >= cfg.ncb):
                    m.d.sync += [ld.glast.eq(1), cb.eq(a), slot.eq(0)]
                    with m.If(has_next):
                        m.d.sync += [group.eq(next_group), gwait.eq(1), gstart.eq(1)]
                    with m.Else():
                        m.d.sync += loader_done.eq(1)
                with m.Else():
                    m.d.sync += [cb.eq(cb + P), slot.eq(slot + 1)]
        with m.If(barrier):
            m.d.sync += gwait.eq(0)

        # -- stepper ----------------------------------------------------------------------------
        cur_valid = Signal()
        k = Signal(bits_for(3 * D + 3 * R))
        phase = Signal(2)                      # kind being issued; BUBBLE after the F steps
        remaining = Signal(D)
        gmask = Signal(D)
        f1m, f2m = Signal(D), Signal(D)
        m.d.comb += [gmask.eq(cfg.gmask[cp.group]),
                     f1m.eq(cp.f1map & gmask), f2m.eq(cp.f2map & gmask)]
        kw = len(k)

        def smax(a, b, name):
            sig = Signal(kw, name=name)
            m.d.comb += sig.eq(Mux(a > b, a, b))
            return sig

        # The block's channel counts, drain points and length
        # (``golden.engine.linear.block_steps``) are computed from the loaded slot and
        # registered at the swap, so that the popcounts and comparisons are not one path
        # with the step count, the swap and the next block's X reads.
        ln = Signal(geo.in_width)
        lf1, lf2 = Signal(geo.in_width), Signal(geo.in_width)
        lgmask = Signal(D)
        m.d.comb += [lgmask.eq(cfg.gmask[ld.group]), ln.eq(cfg.gsize[ld.group]),
                     lf1.eq(popcount(ld.f1map & lgmask)), lf2.eq(popcount(ld.f2map & lgmask))]
        ld_d0 = smax(ln, R, "ld_d0")
        ld_d1 = smax(ln + lf1, ld_d0 + R, "ld_d1")
        ld_s2 = smax(ln + lf1, ld_d0 + R, "ld_s2")
        ld_s3 = smax(ln + lf1 + lf2, ld_d1 + R, "ld_s3")
        d0, d1, s = Signal(kw, name="d0"), Signal(kw, name="d1"), Signal(kw, name="s")
        n = Signal(geo.in_width)                                 # the block's channels
        f1, f2 = Signal(geo.in_width), Signal(geo.in_width)       # ... with F1 / F2 work

        chan, _ = lowest_set(m, remaining, "chan")
        issue = phase != BUBBLE
        step = Signal()
        final = Signal()
        last_step = k == s - 1
        m.d.comb += [
            step.eq(running & cur_valid),
            final.eq(running & ~cur_valid & ~slot_full & loader_done),
            swap.eq(running & slot_full & (~cur_valid | (step & last_step))),
        ]
        rest = remaining & (remaining - 1)
        with m.If(step):
            m.d.sync += k.eq(k + 1)
            with m.If(issue & (rest == 0)):
                with m.If((phase == 0) & (f1m != 0)):
                    m.d.sync += [phase.eq(1), remaining.eq(f1m)]
                with m.Elif((phase != 2) & (f2m != 0)):
                    m.d.sync += [phase.eq(2), remaining.eq(f2m)]
                with m.Else():
                    m.d.sync += [phase.eq(BUBBLE), remaining.eq(0)]
            with m.Else():
                m.d.sync += remaining.eq(rest)
            with m.If(last_step):
                m.d.sync += cur_valid.eq(0)
        m.d.comb += self.group_end.eq(step & last_step & cp.glast)
        with m.If(swap):
            m.d.sync += cp.copy(ld)
            m.d.sync += [slot_full.eq(0), cur_valid.eq(1), k.eq(0), phase.eq(0),
                         remaining.eq(lgmask), d0.eq(ld_d0), d1.eq(ld_d1),
                         s.eq(Mux(cfg.w3, ld_s3, ld_s2)), n.eq(ln), f1.eq(lf1), f2.eq(lf2)]

        # Drain tags: member j of the block's rows.
        tag_layout = linear_tag_layout(geo)
        cwe = Signal(C)
        m.d.comb += cwe.eq(Cat(*(((cp.cb << cbits) + j) < cfg.c_out for j in range(C))))

        def member_tag(j):
            return {"plane": cp.group, "slot": cp.slot, "rtok": Cat(*cp.rtok[j]),
                    "rwe": cp.rpres[j], "cwe": cwe}

        def set_tag(target, fields):
            return [target[key].eq(v) for key, v in fields.items()]

        last_tag = Signal(tag_layout)          # the previous block's last register
        last_valid = Signal()
        last_reg = Mux(cfg.w3, Drain.R2.value, Drain.R1.value)

        # -- outputs --------------------------------------------------------------------------
        col_cb = Signal(geo.cbi_width)
        m.d.comb += [self.w_addr.eq(chan), self.w_en.eq(step)]
        m.d.sync += [self.row.eq(0), self.finished.eq(0)]
        m.d.sync += [self.col[j].valid.eq(0) for j in range(C)]
        for j in range(C):
            index = Cat(Const(j, cbits), col_cb) if cbits else col_cb
            m.d.comb += self.col[j].b.eq(self.w_data.word_select(index, 8))
        wave_last = k == 0
        wave0 = k == d0
        wave1 = cfg.w3 & (k == d1)
        with m.If(step):
            for r in range(R):
                words = [cp.xw[r][j].word_select(chan, 8) for j in range(3)]
                row = self.row[r]
                # Lane 0 carries member `kind` (bubbles: the anchor; the PEs idle).
                m.d.sync += [row.a0.eq(Mux(phase == 1, words[1],
                                           Mux(phase == 2, words[2], words[0]))),
                             row.a1.eq(words[2]),
                             row.c1.eq(cp.c1[r].word_select(chan, 2)),
                             row.c2.eq(cp.c2[r].word_select(chan, 2)),
                             row.valid.eq(cp.rpres[0][r]),
                             row.mode.kind.eq(phase), row.mode.issue.eq(issue),
                             row.mode.clear.eq(wave_last),
                             row.mode.first.eq(wave_last | wave0 | wave1),
                             row.mode.drain.eq(Mux(wave_last, last_reg,
                                                   Mux(wave0, Drain.R0.value,
                                                       Mux(wave1, Drain.R1.value, 0))))]
            m.d.sync += [self.col[j].valid.eq(cwe[j]) for j in range(C)]
            m.d.sync += col_cb.eq(cp.cb)
            with m.If(wave_last):
                m.d.sync += self.tag.eq(last_tag)
                with m.If(~last_valid):
                    m.d.sync += [self.tag.rwe.eq(0), self.tag.cwe.eq(0)]
                with m.If(cfg.w3):
                    m.d.sync += set_tag(last_tag, member_tag(2))
                with m.Else():
                    m.d.sync += set_tag(last_tag, member_tag(1))
                m.d.sync += last_valid.eq(1)
            with m.Elif(wave0):
                m.d.sync += set_tag(self.tag, member_tag(0))
            with m.Elif(wave1):
                m.d.sync += set_tag(self.tag, member_tag(1))
        with m.Elif(final):
            for r in range(R):
                m.d.sync += [self.row[r].mode.first.eq(1), self.row[r].mode.drain.eq(last_reg),
                             self.row[r].mode.kind.eq(BUBBLE)]
            m.d.sync += [self.tag.eq(last_tag), self.finished.eq(1), running.eq(0)]
            with m.If(~last_valid):
                m.d.sync += [self.tag.rwe.eq(0), self.tag.cwe.eq(0)]

        # -- counters ---------------------------------------------------------------------------
        cnt = self.counters
        with m.If(step):
            for kind in range(3):
                with m.If(phase == kind):
                    m.d.sync += cnt.issued[kind].eq(cnt.issued[kind] + 1)
            with m.If(~issue):
                m.d.sync += cnt.bubbles.eq(cnt.bubbles + 1)
            with m.If(wave_last):
                m.d.sync += [cnt.blocks.eq(cnt.blocks + 1),
                             cnt.skipped[1].eq(cnt.skipped[1] + n - f1)]
                with m.If(cfg.w3):
                    m.d.sync += cnt.skipped[2].eq(cnt.skipped[2] + n - f2)
                with m.If(cp.gfirst):
                    m.d.sync += cnt.groups.eq(cnt.groups + 1)

        # -- run start --------------------------------------------------------------------------
        with m.If(self.start):
            m.d.sync += [running.eq(1), loader_done.eq(0), slot_full.eq(0), cur_valid.eq(0),
                         rd_active.eq(0), last_valid.eq(0), group.eq(first_group), cb.eq(a),
                         slot.eq(0), gwait.eq(0), gstart.eq(1), cnt.eq(0)]
            m.d.sync += walk.reset()
        return m
