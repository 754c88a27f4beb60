"""Accumulation buffer of the multi-array engine (``docs/engine.md``, "Accumulation buffer:
banking").

One *plane* per chunk of the run, each of ``P*C`` *banks* (``amaranth.lib.memory``,
``acc_width`` bits). Column j of array a writes only bank ``a*C + j``: the K unit at
position ``pos`` of a chunk's column order sits in column ``pos mod C`` of array
``(pos // C) mod P``, so its bank is ``pos mod (P*C)``, and its words are

    address = i * KB + 2 * (pos // (P*C)) + f

(``pos // (P*C)`` is the array's local column block ``cb // P``, which the drain tag
carries). No two array columns share a bank, every word of a plane is written once per run:
no arbitration, no read-modify-write, no clearing.

Read-out: S streams row-major (Q token i, then K token k) on ``s``. For each group the unit
of k along the group's direction is kept by counters as k advances (no divider);
without a scheduler the position of a unit is the unit itself, with it the plane's
inverse order gives it (one read per plane, one pipeline stage). Every plane reads the
address of its chunk's group in all its banks; the registered bank selects pick the words,
and the sum over the planes written in this run is ``s.payload``.
"""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from kaleido_hw.array.layouts import drain_port_layout
from kaleido_hw.bitops import bits_for
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.dispatch.order_unit import OrderReadSignature
from kaleido_hw.engine.engine_layouts import (KaleidoGeometry, engine_run_layout,
                                              engine_tag_layout, plane_info_layout)
from kaleido_hw.engine.tile_layouts import S_WIDTH


__all__ = ["EngineBuffer", "pick"]

AXIS_T, AXIS_Y, AXIS_X = 0, 1, 2


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


class EngineBuffer(wiring.Component):
    """``planes`` x ``P*C`` banks of per-chunk partial scores, and the S read-out.

    Parameters
    ----------
    config : KaleidoConfig
        ``rows``/``cols``, ``engine_arrays`` (P), ``acc_width``, ``engine_max_tokens``,
        ``engine_max_head_dim`` and ``sched_pattern_width`` (the number of planes).

    Ports: ``wr`` (per array, its C drain records; tag = :func:`engine_tag_layout`);
    ``cfg`` (the run: grid, directions); ``planes`` (per plane: written in this run, group
    of its chunk); ``read`` (pulse: start the read-out); ``s`` (signed 32-bit S, row-major);
    ``reading``. With the scheduler built (``engine_dispatcher`` "scheduler" or "full"):
    ``inv[k]`` reads plane k's inverse K order (bank k of the K OrderUnit's inverse memory:
    the position of a unit in chunk k's column order), used when ``cfg.schedule``.
    Read-out pipeline: counters -> inverse read -> bank read -> ``s``, every stage
    advancing when ``s`` is not stalled.
    """

    def __init__(self, config: KaleidoConfig):
        self.geo = geo = KaleidoGeometry.from_config(config)
        self.config = config
        t = geo.tile
        tag_width = engine_tag_layout(geo).size
        port = drain_port_layout(t.acc_width, t.rows, tag_width)
        self.scheduler = config.engine_dispatcher in ("scheduler", "full")
        ow = bits_for(t.max_tokens - 1)
        extra = ({"inv": Out(OrderReadSignature(bits_for(geo.planes - 1), ow, ow)).array(
            geo.planes)} if self.scheduler else {})
        super().__init__({
            **extra,
            "wr": In(data.ArrayLayout(data.ArrayLayout(port, t.cols), geo.arrays)),
            "cfg": In(engine_run_layout(geo)),
            "planes": In(data.ArrayLayout(plane_info_layout(), geo.planes)),
            "read": In(1),
            "s": Out(stream.Signature(signed(S_WIDTH))),
            "reading": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        geo, cfg = self.geo, self.cfg
        t = geo.tile
        C, PC, NP = t.cols, geo.banks, geo.planes
        kcb = geo.kb_width - 1                    # bits of the local column block in an address
        tag_layout = engine_tag_layout(geo)

        banks = [[memory.Memory(shape=signed(t.acc_width), depth=geo.bank_depth, init=[])
                  for _ in range(PC)] for _ in range(NP)]
        for k in range(NP):
            for b in range(PC):
                m.submodules[f"plane{k}_bank{b}"] = banks[k][b]

        # -- writes: array a, column j -> bank a*C + j of the tag's plane ----------------------
        for a in range(geo.arrays):
            for j in range(C):
                rec = self.wr[a][j]
                tag = data.View(tag_layout, rec.tag)
                rtok = pick((tag.rtok[i] for i in range(t.rows)), rec.row)
                we = rec.valid & tag.rwe.bit_select(rec.row, 1) & tag.cwe[j]
                addr = Cat(tag.kf, tag.cbp[:kcb], rtok)
                for k in range(NP):
                    wp = banks[k][a * C + j].write_port()
                    m.d.comb += [wp.addr.eq(addr), wp.data.eq(rec.data),
                                 wp.en.eq(we & (tag.plane == k))]

        # -- read-out counters ------------------------------------------------------------------
        sw = t.size_width
        i = Signal(sw)
        tt, y, x = Signal(sw), Signal(sw), Signal(sw)
        u = [Signal(sw, name=f"unit_{a}") for a in "tyx"]
        ut_frame = Signal(sw)
        uy_row = Signal(sw)
        active = Signal()
        out_valid = Signal()
        valid1 = Signal()                     # stage 1 holds a word's position
        advance = Signal()
        m.d.comb += [advance.eq(~out_valid | self.s.ready), self.s.valid.eq(out_valid),
                     self.reading.eq(active | valid1 | out_valid)]

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
        with m.If(advance):
            m.d.sync += [valid1.eq(active), i1.eq(i)]
            for g in range(3):
                d = cfg.dirs[g]
                m.d.sync += [unit1[g].eq(_by_axis(d, u)),
                             f1[g].eq(_by_axis(d, [c[0] for c in coords]))]

        total = 0
        for k in range(NP):
            info = self.planes[k]
            pos = Signal(sw, name=f"rd_pos{k}")
            if self.scheduler:
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
            m.d.comb += [block.eq(pos // Const(PC)), bank.eq(pos % Const(PC))]
            addr = Cat(_by_axis(info.group, f1), block[:kcb], i1[:t.tok_width])
            sel = Signal(bw, name=f"bank_sel{k}")
            on = Signal(name=f"plane_on{k}")
            ports = [banks[k][b].read_port(domain="sync", transparent_for=()) for b in range(PC)]
            for p in ports:
                m.d.comb += [p.addr.eq(addr), p.en.eq(advance)]
            with m.If(advance):
                m.d.sync += [sel.eq(bank), on.eq(info.on)]
            word = pick((p.data for p in ports), sel)
            total = total + Mux(on, word, 0)
        m.d.comb += self.s.payload.eq(total)

        with m.If(advance):
            m.d.sync += out_valid.eq(valid1)
            with m.If(active):
                with m.If(all_end):
                    m.d.sync += [tt.eq(0), y.eq(0), x.eq(0), ut_frame.eq(0), uy_row.eq(0),
                                 i.eq(i + 1)] + [v.eq(0) for v in u]
                    with m.If(i + 1 == cfg.n):
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

        with m.If(self.read & ~active & ~valid1 & ~out_valid):
            m.d.sync += [active.eq(1), i.eq(0), tt.eq(0), y.eq(0), x.eq(0), ut_frame.eq(0),
                         uy_row.eq(0)] + [v.eq(0) for v in u]
        return m
