"""Accumulation buffer of the multi-array engine (``docs/engine.md``, "Accumulation buffer:
banking").

One *plane* per chunk of the run, each of ``P*C`` *banks* (``amaranth.lib.memory``). Column j
of array a writes only bank ``a*C + j``: the K unit at position ``pos`` of a chunk's column
order sits in column ``pos mod C`` of array ``(pos // C) mod P``, so its bank is
``pos mod (P*C)``. A bank word holds the two Q rows of a row pair ``(2r, 2r+1)`` in two
``acc_width`` lanes (the write port's granularity is one lane, so a drain record writes its
row's lane only), and the score of (Q token i, K unit at ``pos``, follower bit f) is

    word = (i // 2) * KB + 2 * (pos // (P*C)) + f,   lane = i mod 2

(``pos // (P*C)`` is the array's local column block ``cb // P``, which the drain tag
carries). No two array columns share a bank, every (i, k) of a plane is written once per
run: no arbitration, no read-modify-write, no clearing.

Read-out, two S values per cycle: the planes are read by row pair and K token k (row pair
major), one word per plane and cycle, giving ``S[2r][k]`` and ``S[2r+1][k]`` at once. For
each group the unit of k along the group's direction is kept by counters as k advances (no
divider); without a scheduler the position of a unit is the unit itself, with it the
plane's inverse order gives it (one read per plane, one pipeline stage). Every plane reads
the address of its chunk's group in all its banks; the registered bank selects pick the
words, which are registered (a stage between the macros' outputs and the sum), and the sums
over the planes written in this run are the pair's two scores. A
:class:`RowPairReorder` turns the column pairs into row-major beats of two values
(``S_BEAT_WIDTH``: the engine core's DMA beat) on ``s``.
"""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from kaleido_hw.array.layouts import drain_port_layout
from kaleido_hw.bitops import bits_for, onehot_or
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.dispatch.order_unit import OrderReadSignature
from kaleido_hw.engine.engine_layouts import (AXIS_T, AXIS_X, AXIS_Y, KaleidoGeometry,
                                              engine_run_layout, engine_tag_layout,
                                              plane_info_layout)
from kaleido_hw.engine.tile_layouts import S_BEAT_WIDTH, S_WIDTH


__all__ = ["EngineBuffer", "RowPairReorder", "pair_column_layout", "pick"]


def _by_axis(d, values):
    """``values[d]`` for an axis or group index ``d`` (0, 1, 2) known only at run time."""
    return Mux(d == AXIS_T, values[0], Mux(d == AXIS_Y, values[1], values[2]))


def pick(values, index):
    """``values[index]`` as a mux whose case list is complete (the list is padded to
    ``2**len(index)`` entries with its last one, so no index value is left uncovered)."""
    values = list(values)
    width = len(index)
    if width == 0 or len(values) == 1:
        return values[0]
    values += [values[-1]] * ((1 << width) - len(values))
    return Array(values)[index]


def pair_column_layout(max_tokens: int) -> data.StructLayout:
    """One column of a row pair as the planes give it to :class:`RowPairReorder`:
    ``S[2r][col]`` (``top``) and ``S[2r+1][col]`` (``bottom``, meaningless when the pair is
    ``single``: the last row of an odd row count), and whether ``col`` is the pair's last."""
    return data.StructLayout({
        "top": signed(S_WIDTH), "bottom": signed(S_WIDTH),
        "col": unsigned(bits_for(max_tokens - 1)),
        "last": unsigned(1), "single": unsigned(1),
    })


class RowPairReorder(wiring.Component):
    """Column pairs of an ``n x n`` block in, row-major beats of two values out.

    The planes give a row pair ``(2r, 2r+1)`` one column per transfer, ``S[2r][c]`` with
    ``S[2r+1][c]``; memory wants S row-major, two consecutive values per beat (the first in
    the low half). A pair covers the flattened values ``2rn .. 2rn + 2n - 1``, which start
    on a beat, so each pair is exactly ``n`` beats (a single last row of an odd ``n`` is
    ``ceil(n / 2)``, its last beat's high half zero) whatever the parity of ``n``: beat
    ``b`` of a pair is its values ``2b`` and ``2b + 1`` (of ``top`` then ``bottom``), which
    straddle the two rows when ``n`` is odd.

    Storage: two memories (``lane0``, ``lane1``) of two halves (ping-pong: one pair is
    written while the other is read) of ``max_tokens`` words of ``S_WIDTH`` bits. Value f
    of a pair (row ``f // n``, column ``c = f mod n``) is at word ``f // 2`` of memory
    ``(c + row) mod 2``. Then a column's two values go to different memories (one write
    port each) and a beat's two values come from different memories at the same word (one
    read port each); the memory of the beat's first value is ``lane1`` only for a
    bottom-row beat of an even ``n`` (the lanes are swapped back on the way out).

    A pair is read only once its last column is in, so the first beat follows the first
    pair's ``n`` columns; after that the writer fills one half while the reader drains the
    other, both one item per cycle. Ports: ``n`` (tokens per row, held during the
    read-out), ``i`` (column pairs, :func:`pair_column_layout`), ``o`` (beats,
    ``S_BEAT_WIDTH`` bits), ``busy`` (a pair or a beat is held).
    """

    def __init__(self, max_tokens: int):
        self.max_tokens = max_tokens
        super().__init__({
            "n": In(bits_for(max_tokens)),
            "i": In(stream.Signature(pair_column_layout(max_tokens))),
            "o": Out(stream.Signature(S_BEAT_WIDTH)),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        N, n = self.max_tokens, self.n
        lanes = [memory.Memory(shape=unsigned(S_WIDTH), depth=2 * N, init=[]) for _ in range(2)]
        m.submodules.lane0, m.submodules.lane1 = lanes

        def word(half, index):
            return Mux(half, N + index, index)

        full = [Signal(name=f"full{h}") for h in range(2)]        # half h holds a whole pair
        single = [Signal(name=f"single{h}") for h in range(2)]    # ... of one row
        w_half = Signal()
        r_half = Signal()

        # -- writer: top to word c // 2 of memory c mod 2, bottom to word (n + c) // 2 of the other
        col = self.i.payload.col
        m.d.comb += self.i.ready.eq(~Mux(w_half, full[1], full[0]))
        take = self.i.valid & self.i.ready
        w_top = word(w_half, col >> 1)
        w_bottom = word(w_half, (n + col) >> 1)
        for lane, mem in enumerate(lanes):
            wp = mem.write_port()
            top_here = col[0] == lane
            m.d.comb += [wp.en.eq(take),
                         wp.addr.eq(Mux(top_here, w_top, w_bottom)),
                         wp.data.eq(Mux(top_here, self.i.payload.top, self.i.payload.bottom))]

        # -- reader: beat b of the pair in r_half, words b of both memories ---------------------
        beat = Signal(range(N))
        out_valid = Signal()
        swap = Signal()                       # the beat's first value is in lane1
        zero_high = Signal()                  # the beat ends a single odd row
        half_beats = (n + 1) >> 1
        r_full = Mux(r_half, full[1], full[0])
        r_single = Mux(r_half, single[1], single[0])
        last_beat = beat + 1 == Mux(r_single, half_beats, n)
        advance = ~out_valid | self.o.ready
        issue = advance & r_full
        ports = [mem.read_port(domain="sync", transparent_for=()) for mem in lanes]
        for p in ports:
            m.d.comb += [p.addr.eq(word(r_half, beat)), p.en.eq(advance)]
        with m.If(advance):
            m.d.sync += [out_valid.eq(r_full), swap.eq(~n[0] & (beat >= half_beats)),
                         zero_high.eq(r_single & (beat + 1 == half_beats))]
        with m.If(issue):
            m.d.sync += beat.eq(Mux(last_beat, 0, beat + 1))
            with m.If(last_beat):
                m.d.sync += r_half.eq(~r_half)
        low = Mux(swap, ports[1].data, ports[0].data)
        high = Mux(zero_high, 0, Mux(swap, ports[0].data, ports[1].data))
        m.d.comb += [self.o.valid.eq(out_valid), self.o.payload.eq(Cat(low, high)),
                     self.busy.eq(full[0] | full[1] | out_valid)]

        # Halves change hands at a pair's last column (writer) and last beat (reader); the
        # writer only fills a half that is not full and the reader only drains a full one,
        # so the two never name the same half in one cycle.
        with m.If(take & self.i.payload.last):
            m.d.sync += w_half.eq(~w_half)
        for h in range(2):
            with m.If(take & self.i.payload.last & (w_half == h)):
                m.d.sync += [full[h].eq(1), single[h].eq(self.i.payload.single)]
            with m.If(issue & last_beat & (r_half == h)):
                m.d.sync += full[h].eq(0)
        return m


class EngineBuffer(wiring.Component):
    """``planes`` x ``P*C`` banks of partial scores, and the S read-out.

    Parameters
    ----------
    config : KaleidoConfig
        ``rows``/``cols``, ``engine_arrays`` (P), ``acc_width``, ``engine_max_tokens``,
        ``engine_max_head_dim``, ``sched_pattern_width``, ``engine_dispatcher`` and
        ``sched_sides`` (the number of planes: one per group, at most 3, or with the K side
        ordered one per chunk).

    Ports: ``wr`` (per array, its C drain records; tag = :func:`engine_tag_layout`);
    ``cfg`` (the run: grid, directions); ``planes`` (per plane: written in this run, group
    of its chunks); ``read`` (pulse: start the read-out); ``s`` (S row-major in beats of two
    signed 32-bit values, the first in the low half; ``ceil(n*n / 2)`` beats, an odd count's
    last high half zero); ``reading``. A record is written one cycle after it arrives, onto
    the lane's old value when its tag has ``add`` (a plane per group: the group's first chunk
    writes, the later ones accumulate; the bank's read port reads the word meanwhile, the
    read-out having it only while ``reading``). With the K side ordered (``sched_sides =
    "qk"`` and a scheduler built): ``inv[k]`` reads plane k's inverse K order (bank k of the
    K OrderUnit's inverse memory: the position of a unit in chunk k's column order), used
    when ``cfg.schedule``. Read-out pipeline: counters -> inverse read -> bank read -> each
    plane's word picked and registered -> sum into the reorder (:class:`RowPairReorder`) ->
    ``s``; the first four stages advance when the reorder takes a column.
    """

    def __init__(self, config: KaleidoConfig):
        self.geo = geo = KaleidoGeometry.from_config(config)
        self.config = config
        t = geo.tile
        tag_width = engine_tag_layout(geo).size
        port = drain_port_layout(t.acc_width, t.rows, tag_width)
        self.k_ordered = geo.k_ordered
        ow = bits_for(t.max_tokens - 1)
        extra = ({"inv": Out(OrderReadSignature(bits_for(geo.planes - 1), ow, ow)).array(
            geo.planes)} if self.k_ordered else {})
        super().__init__({
            **extra,
            "wr": In(data.ArrayLayout(data.ArrayLayout(port, t.cols), geo.arrays)),
            "cfg": In(engine_run_layout(geo)),
            "planes": In(data.ArrayLayout(plane_info_layout(), geo.planes)),
            "read": In(1),
            "s": Out(stream.Signature(S_BEAT_WIDTH)),
            "reading": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        geo, cfg = self.geo, self.cfg
        t = geo.tile
        C, PC, NP = t.cols, geo.banks, geo.planes
        aw = t.acc_width
        kcb = geo.kb_width - 1                    # bits of the local column block in an address
        tag_layout = engine_tag_layout(geo)

        banks = [[memory.Memory(shape=unsigned(2 * aw), depth=geo.bank_depth, init=[])
                  for _ in range(PC)] for _ in range(NP)]
        for k in range(NP):
            for b in range(PC):
                m.submodules[f"plane{k}_bank{b}"] = banks[k][b]

        # -- read ports: the read-out's, and during a run the accumulation's ------------------
        rports = [[banks[k][b].read_port(domain="sync", transparent_for=()) for b in range(PC)]
                  for k in range(NP)]
        rd_addr = [Signal(geo.bank_depth_width, name=f"rd_addr{k}") for k in range(NP)]
        rd_en = Signal()

        # -- writes: array a, column j -> bank a*C + j of the tag's plane, lane rtok mod 2 -------
        # A record is written one cycle after it arrives: in that cycle its word is read, so a
        # chunk with ``add`` (an earlier chunk of the run wrote the plane) adds onto the lane.
        # No lane is written twice within two cycles (a word gets one record per chunk), so the
        # read never misses a write still in flight.
        accumulate = not geo.k_ordered
        for a in range(geo.arrays):
            for j in range(C):
                b = a * C + j
                rec = self.wr[a][j]
                tag = data.View(tag_layout, rec.tag)
                rtok = pick((tag.rtok[i] for i in range(t.rows)), rec.row)
                we = rec.valid & tag.rwe.bit_select(rec.row, 1) & tag.cwe[j]
                addr = Cat(tag.kf, tag.cbp[:kcb], rtok[1:])
                p_we, p_lane = Signal(name=f"wr{b}_we"), Signal(name=f"wr{b}_lane")
                p_addr = Signal(geo.bank_depth_width, name=f"wr{b}_addr")
                p_plane = Signal(geo.plane_width, name=f"wr{b}_plane")
                p_data = Signal(aw, name=f"wr{b}_data")
                m.d.sync += [p_we.eq(we), p_lane.eq(rtok[0]), p_addr.eq(addr),
                             p_plane.eq(tag.plane), p_data.eq(rec.data)]
                for k in range(NP):
                    m.d.comb += [rports[k][b].addr.eq(Mux(self.reading, rd_addr[k], addr)),
                                 rports[k][b].en.eq(Mux(self.reading, rd_en, we))]
                value = Signal(aw, name=f"wr{b}_value")
                if accumulate:
                    # The old lane: one registered one-hot of (plane, lane), 0 without ``add``,
                    # so the macros' words meet one AND-OR level before the adder, not a plane
                    # multiplexer, a lane multiplexer and a gate in series.
                    p_old = Signal(2 * NP, name=f"wr{b}_old_sel")
                    m.d.sync += p_old.eq(Cat(*(tag.add & (tag.plane == k) & (rtok[0] == lane)
                                               for k in range(NP) for lane in range(2))))
                    old = Signal(aw, name=f"wr{b}_old")
                    m.d.comb += [old.eq(onehot_or(p_old, [
                                     rports[k][b].data[lane * aw:(lane + 1) * aw]
                                     for k in range(NP) for lane in range(2)])),
                                 value.eq(p_data + old)]
                else:
                    m.d.comb += value.eq(p_data)
                for k in range(NP):
                    wp = banks[k][b].write_port(granularity=aw)
                    on = p_we & (p_plane == k)
                    m.d.comb += [wp.addr.eq(p_addr), wp.data.eq(Cat(value, value)),
                                 wp.en.eq(Cat(on & ~p_lane, on & p_lane))]

        m.submodules.reorder = reorder = RowPairReorder(t.max_tokens)
        wiring.connect(m, wiring.flipped(self.s), reorder.o)

        # -- read-out counters: row pair i // 2 (i even), K token k = (tt, y, x) ------------------
        sw = t.size_width
        i = Signal(sw)
        k_col = Signal(range(t.max_tokens))
        tt, y, x = Signal(sw), Signal(sw), Signal(sw)
        u = [Signal(sw, name=f"unit_{a}") for a in "tyx"]
        ut_frame = Signal(sw)
        uy_row = Signal(sw)
        active = Signal()
        valid1 = Signal()                     # stage 1 holds a column's position
        valid2 = Signal()                     # stage 2: the banks' words of that column
        valid3 = Signal()                     # stage 3: each plane's word, picked and held
        advance = Signal()
        m.d.comb += [advance.eq(~valid3 | reorder.i.ready), rd_en.eq(advance),
                     reorder.n.eq(cfg.n),
                     self.reading.eq(active | valid1 | valid2 | valid3 | reorder.busy)]

        row_end = x + 1 == cfg.w
        frame_end = row_end & (y + 1 == cfg.h)
        all_end = frame_end & (tt + 1 == cfg.t)
        coords = [tt, y, x]

        # Stage 0 (counters): per group, the unit of k and the follower bit; each plane asks
        # its inverse order for the unit's position. Stage 1: position -> bank and address.
        bw = bits_for(PC - 1)
        unit1 = [Signal(sw, name=f"rd_unit{g}") for g in range(3)]
        f1 = [Signal(name=f"rd_f{g}") for g in range(3)]
        i1 = Signal(sw)
        col = [Signal(range(t.max_tokens), name=f"rd_col{s}") for s in (1, 2, 3)]
        last = [Signal(name=f"rd_last{s}") for s in (1, 2, 3)]
        single = [Signal(name=f"rd_single{s}") for s in (1, 2, 3)]
        with m.If(advance):
            m.d.sync += [valid1.eq(active), i1.eq(i), valid2.eq(valid1), valid3.eq(valid2),
                         col[0].eq(k_col), last[0].eq(all_end), single[0].eq(i + 1 == cfg.n)]
            for s in (1, 2):
                m.d.sync += [col[s].eq(col[s - 1]), last[s].eq(last[s - 1]),
                             single[s].eq(single[s - 1])]
            for g in range(3):
                d = cfg.dirs[g]
                m.d.sync += [unit1[g].eq(_by_axis(d, u)),
                             f1[g].eq(_by_axis(d, [c[0] for c in coords]))]

        totals = [0, 0]
        for k in range(NP):
            info = self.planes[k]
            pos = Signal(sw, name=f"rd_pos{k}")
            if self.k_ordered:
                inv = self.inv[k]
                m.d.comb += [inv.bank.eq(k), inv.addr.eq(_by_axis(info.group, [
                    _by_axis(cfg.dirs[g], u) for g in range(3)]))]
                # The read port has no enable: keep the position read in the last advance.
                held = Signal(len(inv.data), name=f"rd_inv{k}")
                fresh = Signal(name=f"rd_inv_fresh{k}")
                m.d.sync += fresh.eq(advance)
                with m.If(fresh):
                    m.d.sync += held.eq(inv.data)
                ipos = Mux(fresh, inv.data, held)
                m.d.comb += pos.eq(Mux(cfg.schedule, ipos, _by_axis(info.group, unit1)))
            else:
                m.d.comb += pos.eq(_by_axis(info.group, unit1))
            block = Signal(sw, name=f"rd_block{k}")
            bank = Signal(bw, name=f"rd_bank{k}")
            follower = _by_axis(info.group, f1)
            if self.geo.window3:
                # A window-3 run's K units are the tokens themselves, and a local column
                # block takes one word: its low bit in the follower bit's place.
                pos = Mux(cfg.window3, col[0], pos)
            m.d.comb += [block.eq(pos // Const(PC)), bank.eq(pos % Const(PC))]
            word_block = block
            if self.geo.window3:
                follower = Mux(cfg.window3, block[0], follower)
                word_block = Mux(cfg.window3, block[1:], block)
            m.d.comb += rd_addr[k].eq(Cat(follower, word_block[:kcb], i1[1:t.tok_width]))
            sel = Signal(bw, name=f"bank_sel{k}")
            on = Signal(name=f"plane_on{k}")
            ports = rports[k]
            with m.If(advance):
                m.d.sync += [sel.eq(bank), on.eq(info.on)]
            # The picked word is registered before the sum: the bank select after the macro's
            # clock-to-output, and the sum into the reorder buffer's write, are a cycle each.
            word = Signal(2 * aw, name=f"rd_word{k}")
            with m.If(advance):
                m.d.sync += word.eq(Mux(on, pick((p.data for p in ports), sel), 0))
            for lane in range(2):
                totals[lane] = totals[lane] + word[lane * aw:(lane + 1) * aw].as_signed()
        m.d.comb += [reorder.i.valid.eq(valid3),
                     reorder.i.payload.top.eq(totals[0]), reorder.i.payload.bottom.eq(totals[1]),
                     reorder.i.payload.col.eq(col[2]), reorder.i.payload.last.eq(last[2]),
                     reorder.i.payload.single.eq(single[2])]

        with m.If(advance & active):
            m.d.sync += k_col.eq(Mux(all_end, 0, k_col + 1))
            with m.If(all_end):
                m.d.sync += [tt.eq(0), y.eq(0), x.eq(0), ut_frame.eq(0), uy_row.eq(0),
                             i.eq(i + 2)] + [v.eq(0) for v in u]
                with m.If(i + 2 >= cfg.n):
                    m.d.sync += active.eq(0)
            with m.Elif(frame_end):
                m.d.sync += [x.eq(0), y.eq(0), tt.eq(tt + 1),
                             u[AXIS_X].eq(u[AXIS_X] + 1),
                             u[AXIS_Y].eq(u[AXIS_Y] + 1), uy_row.eq(u[AXIS_Y] + 1)]
                with m.If(~tt[0] & (tt + 1 < cfg.t)):
                    m.d.sync += u[AXIS_T].eq(ut_frame)
                with m.Else():
                    m.d.sync += [u[AXIS_T].eq(u[AXIS_T] + 1), ut_frame.eq(u[AXIS_T] + 1)]
            with m.Elif(row_end):
                m.d.sync += [x.eq(0), y.eq(y + 1), u[AXIS_X].eq(u[AXIS_X] + 1),
                             u[AXIS_T].eq(u[AXIS_T] + 1)]
                with m.If(~y[0] & (y + 1 < cfg.h)):
                    m.d.sync += u[AXIS_Y].eq(uy_row)
                with m.Else():
                    m.d.sync += [u[AXIS_Y].eq(u[AXIS_Y] + 1), uy_row.eq(u[AXIS_Y] + 1)]
            with m.Else():
                m.d.sync += [x.eq(x + 1), u[AXIS_X].eq(u[AXIS_X] + x[0]),
                             u[AXIS_Y].eq(u[AXIS_Y] + 1), u[AXIS_T].eq(u[AXIS_T] + 1)]

        with m.If(self.read & ~self.reading):
            m.d.sync += [active.eq(1), i.eq(0), k_col.eq(0), tt.eq(0), y.eq(0), x.eq(0),
                         ut_frame.eq(0), uy_row.eq(0)] + [v.eq(0) for v in u]
        return m
