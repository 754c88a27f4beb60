"""The tile sequencer of the single-array engine (``docs/array.md``, "Sequencer").

:class:`TileSequencer` walks the run in the contract's order (group -> row block -> column
block -> pass 0..3 -> channel steps) and feeds the PE array one step per cycle. Two halves
work concurrently on a double-buffered operand slot:

* the **loader** reads the R row units' Q tokens and the C column units' K tokens of the next
  tile quad (anchor, then follower: ``2 * max(R, C)`` reads per memory), forms the reuse
  codes and effective followers with a :class:`~kaleido_hw.engine.code_unit.CodeUnit` per operand,
  and ORs the codes of the real units into per-channel code sets;
* the **stepper** runs the four passes of the quad in the compute slot: per pass the channel
  bitmap with work (:func:`~kaleido_hw.engine.code_unit.work_bitmap` of the code sets, within the
  group's channels; pass 0: every channel of the group), then one channel per cycle through a
  priority encoder, lowest channel first; skipped channels cost no cycle. A pass lasts at
  least R steps (bubbles), so the array's drain read-out keeps up.

Tokens are walked with coordinate counters (no multiplier or divider on the walk): a unit's
anchor is ``rowtok + x`` with ``rowtok = t*H*W + y*W`` kept by additions; its follower is the
anchor plus the stride of the group's direction (1, W or H*W).
"""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from kaleido_hw.array.layouts import step_col_layout, step_row_layout
from kaleido_hw.bitops import bits_for, lowest_set, popcount
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.code_unit import CodeUnit, work_bitmap
from kaleido_hw.engine.tile_layouts import EngineGeometry, drain_tag_layout, run_config_layout


__all__ = ["TileSequencer", "COUNTER_WIDTH", "counters_layout", "group_walk"]

AXIS_T, AXIS_Y, AXIS_X = 0, 1, 2
COUNTER_WIDTH = 32


def counters_layout() -> data.StructLayout:
    """The sequencer's counters: channel steps issued / skipped per pass, bubbles, quads."""
    w = unsigned(COUNTER_WIDTH)
    return data.StructLayout({"issued": data.ArrayLayout(w, 4), "skipped": data.ArrayLayout(w, 4),
                              "bubbles": w, "quads": w})


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


class _Walker:
    """Coordinates of one unit of the current group (its anchor token) and the step to the
    next unit in token order of the anchors; along the group's direction ``D`` the
    coordinate moves by 2 (anchors sit at even coordinates)."""

    def __init__(self, name: str, geo: EngineGeometry):
        sw = geo.size_width
        self.tokw = geo.tok_width
        self.t = Signal(sw, name=f"{name}_t")
        self.y = Signal(sw, name=f"{name}_y")
        self.x = Signal(sw, name=f"{name}_x")
        self.rowtok = Signal(sw, name=f"{name}_rowtok")      # t*H*W + y*W
        self.frametok = Signal(sw, name=f"{name}_frametok")  # t*H*W
        self.end = Signal(name=f"{name}_end")                # walked past the last unit

    def fields(self):
        return [self.t, self.y, self.x, self.rowtok, self.frametok, self.end]

    def reset(self):
        return [f.eq(0) for f in self.fields()]

    def copy(self, other: "_Walker"):
        return [a.eq(b) for a, b in zip(self.fields(), other.fields())]

    def tok(self):
        return (self.rowtok + self.x)[:self.tokw]

    def has_follower(self, d, cfg):
        return Mux(d == AXIS_X, self.x + 1 < cfg.w,
                   Mux(d == AXIS_Y, self.y + 1 < cfg.h, self.t + 1 < cfg.t))

    def follower_tok(self, d, cfg):
        stride = Mux(d == AXIS_X, 1, Mux(d == AXIS_Y, cfg.w, cfg.hw))
        return (self.rowtok + self.x + stride)[:self.tokw]

    def advance(self, m, d, cfg):
        """Sync statements (under the caller's condition) that move to the next unit."""
        sx = Mux(d == AXIS_X, 2, 1)
        sy = Mux(d == AXIS_Y, 2, 1)
        st = Mux(d == AXIS_T, 2, 1)
        with m.If(~self.end):
            with m.If(self.x + sx < cfg.w):
                m.d.sync += self.x.eq(self.x + sx)
            with m.Elif(self.y + sy < cfg.h):
                m.d.sync += [self.x.eq(0), self.y.eq(self.y + sy),
                             self.rowtok.eq(self.rowtok + Mux(d == AXIS_Y, cfg.w << 1, cfg.w))]
            with m.Elif(self.t + st < cfg.t):
                step = Mux(d == AXIS_T, cfg.hw << 1, cfg.hw)
                m.d.sync += [self.x.eq(0), self.y.eq(0), self.t.eq(self.t + st),
                             self.frametok.eq(self.frametok + step),
                             self.rowtok.eq(self.frametok + step)]
            with m.Else():
                m.d.sync += self.end.eq(1)


class _Slot:
    """One operand slot: what the stepper needs about a tile quad."""

    def __init__(self, name: str, geo: EngineGeometry):
        R, C, D = geo.rows, geo.cols, geo.max_dim
        S = lambda shape, n: Signal(shape, name=f"{name}_{n}")  # noqa: E731
        self.qa = [S(8 * D, f"qa{r}") for r in range(R)]        # Q anchors
        self.qf = [S(8 * D, f"qf{r}") for r in range(R)]        # effective Q followers
        self.qlo = [S(D, f"qlo{r}") for r in range(R)]           # code bit 0 per channel
        self.qhi = [S(D, f"qhi{r}") for r in range(R)]           # code bit 1 per channel
        self.ka = [S(8 * D, f"ka{j}") for j in range(C)]
        self.kf = [S(8 * D, f"kf{j}") for j in range(C)]
        self.klo = [S(D, f"klo{j}") for j in range(C)]
        self.khi = [S(D, f"khi{j}") for j in range(C)]
        self.qs = [S(D, f"qset{v}") for v in range(4)]          # code v occurs among real rows
        self.ks = [S(D, f"kset{v}") for v in range(4)]
        self.rtok_a = [S(geo.tok_width, f"rtok_a{r}") for r in range(R)]
        self.rtok_f = [S(geo.tok_width, f"rtok_f{r}") for r in range(R)]
        self.rvalid = S(R, "rvalid")
        self.rhasf = S(R, "rhasf")
        self.cvalid = S(C, "cvalid")
        self.chasf = S(C, "chasf")
        self.group = S(2, "group")
        self.cb = S(geo.cb_width, "cb")

    def fields(self):
        return [*self.qa, *self.qf, *self.qlo, *self.qhi, *self.ka, *self.kf, *self.klo,
                *self.khi, *self.qs,
                *self.ks, *self.rtok_a, *self.rtok_f, self.rvalid, self.rhasf, self.cvalid,
                self.chasf, self.group, self.cb]

    def copy(self, other: "_Slot"):
        return [a.eq(b) for a, b in zip(self.fields(), other.fields())]


class TileSequencer(wiring.Component):
    """Loader, double-buffered operand slot and pass/channel stepper of one PE array.

    Parameters
    ----------
    config : KaleidoConfig
        ``rows``/``cols`` (R, C; powers of two), ``engine_max_tokens``,
        ``engine_max_head_dim`` (D).

    Ports
    -----
    ``start`` (in): one-cycle pulse; ``cfg`` (the run's configuration, latched by the
    engine) must be valid from that cycle to the end of the run.
    ``q_addr``/``q_en``/``q_data``, ``k_addr``/``k_en``/``k_data``: synchronous read ports of
    the Q and K memories (one word of D int8 per token, one cycle latency).
    ``row``, ``col``, ``tag`` (out, registered): the step for the array (rows and columns
    unskewed; a cycle without a step has mode 0); ``tag`` is the drain tag of the step, valid
    on a first step (the tile it drains: the previous pass's).
    ``finished`` (out, registered): one-cycle pulse with the run's final step (it drains the
    last quad's tile 3). ``counters`` (out): valid after ``finished``.

    Timing (cycle 0 = ``start``): the first quad's loads start at cycle 1 and take
    ``2*max(R, C)`` cycles plus one for the last word; the quad is handed to the stepper
    (a *swap*) when its slot is full and the stepper is free; the next quad's loads start in
    the cycle of the swap. Quad n's steps follow its swap without a gap, and a swap needs
    ``2*max(R, C) + 1`` cycles since the previous one; ``golden.array.schedule.Timing`` is the
    resulting cycle formula.
    """

    def __init__(self, config: KaleidoConfig):
        self.geo = geo = EngineGeometry.from_config(config)
        self.config = config
        R, C, D = geo.rows, geo.cols, geo.max_dim
        super().__init__({
            "start": In(1),
            "cfg": In(run_config_layout(geo)),
            "q_addr": Out(geo.tok_width), "q_en": Out(1), "q_data": In(8 * D),
            "k_addr": Out(geo.tok_width), "k_en": Out(1), "k_data": In(8 * D),
            "row": Out(data.ArrayLayout(step_row_layout(), R)),
            "col": Out(data.ArrayLayout(step_col_layout(), C)),
            "tag": Out(drain_tag_layout(geo)),
            "finished": Out(1),
            "counters": Out(counters_layout()),
        })

    def elaborate(self, platform):
        m = Module()
        geo, cfg = self.geo, self.cfg
        R, C, D = geo.rows, geo.cols, geo.max_dim
        M = max(R, C)

        running = Signal()
        loader_done = Signal()
        slot_full = Signal()
        swap = Signal()

        # -- groups -------------------------------------------------------------------------
        group = Signal(2)                      # group being loaded
        first_group, has_next, next_group = group_walk(m, cfg.gsize, group)
        direction = Signal(2)
        m.d.comb += direction.eq(cfg.dirs[group])

        # -- loader ---------------------------------------------------------------------------
        rw_ = _Walker("row_walk", geo)       # current row unit
        rs_ = _Walker("row_block", geo)      # first unit of the current row block
        cw_ = _Walker("col_walk", geo)       # current column unit
        cb = Signal(geo.cb_width)
        ld = _Slot("ld", geo)
        cp = _Slot("cp", geo)

        rd_active = Signal()
        rd_unit = Signal(bits_for(M - 1))
        rd_phase = Signal()                  # 0 anchor, 1 follower
        load_go = Signal()
        # A read's word arrives one cycle later ("pending").
        pend = Signal()
        pend_unit = Signal(bits_for(M - 1))
        pend_phase = Signal()
        pend_last = Signal()
        pend_q = Signal(2)                   # (valid, has follower) of the row unit
        pend_k = Signal(2)
        m.d.comb += load_go.eq(running & ~loader_done & ~rd_active & ~pend
                               & (~slot_full | swap))

        reading = rd_active | load_go
        unit = Mux(rd_active, rd_unit, 0)
        phase = Mux(rd_active, rd_phase, 0)
        m.d.comb += [
            self.q_addr.eq(Mux(phase, rw_.follower_tok(direction, cfg), rw_.tok())),
            self.k_addr.eq(Mux(phase, cw_.follower_tok(direction, cfg), cw_.tok())),
            self.q_en.eq(reading & (unit < R)),
            self.k_en.eq(reading & (unit < C)),
        ]
        last_read = reading & phase & (unit == M - 1)
        m.d.sync += [pend.eq(reading), pend_unit.eq(unit), pend_phase.eq(phase),
                     pend_last.eq(last_read),
                     pend_q.eq(Cat(~rw_.end, rw_.has_follower(direction, cfg) & ~rw_.end)),
                     pend_k.eq(Cat(~cw_.end, cw_.has_follower(direction, cfg) & ~cw_.end))]
        with m.If(reading):
            with m.If(phase):
                m.d.sync += rd_phase.eq(0)
                with m.If(unit == M - 1):
                    m.d.sync += rd_active.eq(0)
                with m.Else():
                    m.d.sync += [rd_active.eq(1), rd_unit.eq(unit + 1)]
                with m.If(unit < R):
                    rw_.advance(m, direction, cfg)
                with m.If(unit < C):
                    cw_.advance(m, direction, cfg)
            with m.Else():
                m.d.sync += [rd_active.eq(1), rd_unit.eq(unit), rd_phase.eq(1)]
                for r in range(R):
                    with m.If(unit == r):
                        m.d.sync += [ld.rtok_a[r].eq(rw_.tok()),
                                     ld.rtok_f[r].eq(rw_.follower_tok(direction, cfg)),
                                     ld.rvalid[r].eq(~rw_.end),
                                     ld.rhasf[r].eq(rw_.has_follower(direction, cfg) & ~rw_.end)]
                for j in range(C):
                    with m.If(unit == j):
                        m.d.sync += [ld.cvalid[j].eq(~cw_.end),
                                     ld.chasf[j].eq(cw_.has_follower(direction, cfg) & ~cw_.end)]
        with m.If(load_go):
            m.d.sync += [ld.group.eq(group), ld.cb.eq(cb)]
            m.d.sync += [s.eq(0) for s in ld.qs + ld.ks]

        # Arriving words: anchors are kept for the follower's comparison.
        m.submodules.q_codes = qcu = CodeUnit(D)
        m.submodules.k_codes = kcu = CodeUnit(D)
        q_hold = Signal(8 * D)
        k_hold = Signal(8 * D)
        for cu, hold, data_in, pq in ((qcu, q_hold, self.q_data, pend_q),
                                      (kcu, k_hold, self.k_data, pend_k)):
            m.d.comb += [cu.anchor.eq(hold), cu.follower.eq(data_in), cu.present.eq(pq[1]),
                         cu.reuse.eq(cfg.reuse), cu.full_mask.eq(cfg.full_mask),
                         cu.half_mask.eq(cfg.half_mask)]
        with m.If(pend & ~pend_phase):
            m.d.sync += [q_hold.eq(self.q_data), k_hold.eq(self.k_data)]
        for n, words, fwords, los, his, sets, cu, data_in, pv in (
                (R, ld.qa, ld.qf, ld.qlo, ld.qhi, ld.qs, qcu, self.q_data, pend_q),
                (C, ld.ka, ld.kf, ld.klo, ld.khi, ld.ks, kcu, self.k_data, pend_k)):
            for u in range(n):
                with m.If(pend & (pend_unit == u)):
                    with m.If(~pend_phase):
                        m.d.sync += words[u].eq(data_in)
                    with m.Else():
                        m.d.sync += [fwords[u].eq(cu.effective), los[u].eq(cu.code_lo),
                                     his[u].eq(cu.code_hi)]
            with m.If(pend & pend_phase & (pend_unit < n) & pv[0]):
                m.d.sync += [sets[v].eq(sets[v] | cu.is_code[v]) for v in range(4)]

        # Last word of the quad: the slot is full; move the walkers to the next quad.
        with m.If(pend_last):
            m.d.sync += slot_full.eq(1)
            with m.If(cw_.end):                       # last column block: next row block
                m.d.sync += cw_.reset() + [cb.eq(0)]
                with m.If(rw_.end):                   # last row block: next group
                    m.d.sync += rw_.reset() + rs_.reset()
                    with m.If(has_next):
                        m.d.sync += group.eq(next_group)
                    with m.Else():
                        m.d.sync += loader_done.eq(1)
                with m.Else():
                    m.d.sync += rs_.copy(rw_)
            with m.Else():
                m.d.sync += [cb.eq(cb + 1)] + rw_.copy(rs_)

        # -- stepper --------------------------------------------------------------------------
        cur_valid = Signal()                 # the compute slot holds a quad being stepped
        pass_idx = Signal(2)
        first = Signal()
        remaining = Signal(D)
        left = Signal(bits_for(max(D, R)))   # steps of the pass after the current one
        gmask = Signal(D)
        gsize = Signal(geo.dim_width)
        m.d.comb += [gmask.eq(cfg.gmask[cp.group]), gsize.eq(cfg.gsize[cp.group])]
        work = Array([gmask] + [work_bitmap(p, cp.qs, cp.ks) & gmask for p in (1, 2, 3)])
        cur = Signal(D)
        m.d.comb += cur.eq(Mux(first, work[pass_idx], remaining))
        chan, issue = lowest_set(m, cur, "chan")
        count = Signal(bits_for(D))
        m.d.comb += count.eq(popcount(cur))
        steps_now = Signal(bits_for(max(D, R)))
        m.d.comb += steps_now.eq(Mux(first, Mux(count > R, count, R), left))
        last_step = steps_now == 1
        step = Signal()                      # a step is emitted this cycle
        final = Signal()                     # the run's final (drain-only) step
        m.d.comb += [
            step.eq(running & cur_valid),
            final.eq(running & ~cur_valid & ~slot_full & loader_done),
            swap.eq(running & slot_full & (~cur_valid | (step & last_step & (pass_idx == 3)))),
        ]

        with m.If(step):
            with m.If(last_step):
                m.d.sync += [first.eq(1), pass_idx.eq(pass_idx + 1)]
                with m.If(pass_idx == 3):
                    m.d.sync += cur_valid.eq(swap)
            with m.Else():
                m.d.sync += [first.eq(0), remaining.eq(cur & (cur - 1)), left.eq(steps_now - 1)]
        with m.Elif(swap):
            m.d.sync += [cur_valid.eq(1), pass_idx.eq(0), first.eq(1)]
        with m.If(swap):
            m.d.sync += cp.copy(ld)
            m.d.sync += slot_full.eq(0)

        # Drain tags: the tile in R0 at a pass's first step is the previous pass's tile.
        tag_layout = drain_tag_layout(geo)
        t3 = Signal(tag_layout)              # tile 3 of the quad in flight (drained later)
        t3_valid = Signal()

        def tile_tag(tile):
            follower_rows = tile in (2, 3)
            follower_cols = tile in (1, 3)
            return {
                "plane": cp.group, "cb": cp.cb, "kf": int(follower_cols),
                "rtok": Cat(*(cp.rtok_f if follower_rows else cp.rtok_a)),
                "rwe": cp.rvalid & cp.rhasf if follower_rows else cp.rvalid,
                "cwe": cp.cvalid & cp.chasf if follower_cols else cp.cvalid,
            }

        def set_tag(target, fields):
            return [target[k].eq(v) for k, v in fields.items()]

        # -- outputs (registered) -------------------------------------------------------------
        m.d.sync += [self.row.eq(0), self.finished.eq(0)]
        with m.If(step):
            for r in range(R):
                value = Mux(pass_idx[1], cp.qf[r].word_select(chan, 8),
                            cp.qa[r].word_select(chan, 8))
                m.d.sync += [self.row[r].a.eq(value),
                             self.row[r].qc.eq(Cat(cp.qlo[r].bit_select(chan, 1),
                                                   cp.qhi[r].bit_select(chan, 1))),
                             self.row[r].valid.eq(cp.rvalid[r]),
                             self.row[r].mode.pass_idx.eq(pass_idx),
                             self.row[r].mode.first.eq(first),
                             self.row[r].mode.issue.eq(issue)]
            for j in range(C):
                value = Mux(pass_idx[0], cp.kf[j].word_select(chan, 8),
                            cp.ka[j].word_select(chan, 8))
                m.d.sync += [self.col[j].b.eq(value),
                             self.col[j].kc.eq(Cat(cp.klo[j].bit_select(chan, 1),
                                                   cp.khi[j].bit_select(chan, 1))),
                             self.col[j].valid.eq(cp.cvalid[j])]
            with m.If(first):
                with m.Switch(pass_idx):
                    with m.Case(0):
                        m.d.sync += self.tag.eq(t3)
                        with m.If(~t3_valid):
                            m.d.sync += [self.tag.rwe.eq(0), self.tag.cwe.eq(0)]
                    for p in (1, 2, 3):
                        with m.Case(p):
                            m.d.sync += set_tag(self.tag, tile_tag(p - 1))
                    with m.Default():
                        pass
                with m.If(pass_idx == 3):
                    m.d.sync += set_tag(t3, tile_tag(3)) + [t3_valid.eq(1)]
        with m.Elif(final):
            for r in range(R):
                m.d.sync += [self.row[r].mode.first.eq(1), self.row[r].mode.pass_idx.eq(0)]
            m.d.sync += [self.tag.eq(t3), self.finished.eq(1), running.eq(0)]

        # -- counters ---------------------------------------------------------------------------
        cnt = self.counters
        with m.If(step):
            with m.If(issue):
                m.d.sync += cnt.issued[pass_idx].eq(cnt.issued[pass_idx] + 1)
            with m.Else():
                m.d.sync += cnt.bubbles.eq(cnt.bubbles + 1)
            with m.If(first):
                m.d.sync += cnt.skipped[pass_idx].eq(cnt.skipped[pass_idx] + gsize - count)
        with m.If(swap):
            m.d.sync += cnt.quads.eq(cnt.quads + 1)

        # -- run start --------------------------------------------------------------------------
        with m.If(self.start):
            m.d.sync += [running.eq(1), loader_done.eq(0), slot_full.eq(0), cur_valid.eq(0),
                         rd_active.eq(0), t3_valid.eq(0), group.eq(first_group), cb.eq(0),
                         cnt.eq(0)]
            m.d.sync += rw_.reset() + rs_.reset() + cw_.reset()
        return m
