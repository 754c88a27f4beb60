"""Accumulation buffer of the TileEngine (``docs/array.md``, "Accumulation buffer
layout").

One *plane* per channel group, each of C *banks* (``amaranth.lib.memory``, ``acc_width``
bits); bank j takes the results of array column j, so the C columns write in parallel
without conflicts. Every (Q token i, K token k) of a plane is written exactly once per run
(by the tile of the quad that covers it), so there is no read-modify-write and no clearing;
the read-out adds the planes of the non-empty groups: ``S = sum over groups``.

Address of (i, k) in plane g: bank ``u mod C`` and word ``i*KB + 2*(u // C) + f``, with
``u = unit_g(k)``, ``f`` = k is a follower along the group's direction, ``KB`` a power of
two >= ``2*ceil(engine_max_tokens / C)`` (so ``u mod C``, ``u // C`` and ``i*KB`` are bit
fields). A drain record of column j carries the Q token of its row and the column block
``cb = u // C`` of its quad: its word is ``Cat(kf, cb, rtok)``.

Read-out: after ``read`` pulses, S streams in row-major order (i, then k) on ``s`` with
valid/ready. The unit index of k along each axis is kept by counters as k advances (an add,
or a return to the row's / frame's first unit when the next row / frame holds the
followers of the current one), so there is no divider.
"""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Module, Mux, Signal, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from kaleido_hw.array.layouts import drain_port_layout
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.tile_layouts import EngineGeometry, drain_tag_layout, run_config_layout


__all__ = ["AccumulationBuffer", "S_WIDTH"]

AXIS_T, AXIS_Y, AXIS_X = 0, 1, 2
#: Width of the S read-out stream (signed).
S_WIDTH = 32


def _by_axis(d, values):
    """``values[d]`` for an axis ``d`` (0 t, 1 y, 2 x) known only at run time."""
    return Mux(d == AXIS_T, values[0], Mux(d == AXIS_Y, values[1], values[2]))


class AccumulationBuffer(wiring.Component):
    """Three planes of C banks holding the per-group partial scores, and the S read-out.

    Parameters
    ----------
    config : KaleidoConfig
        ``rows``/``cols`` (powers of two), ``acc_width`` (word width),
        ``engine_max_tokens`` (depth: ``engine_max_tokens * KB`` words per bank).

    Ports: ``wr`` (the PE array's C drain records, tag = :func:`drain_tag_layout`);
    ``cfg`` (the run's configuration: grid, directions, group sizes); ``read`` (pulse: start
    the read-out; ignored while one is running); ``s`` (stream of signed 32-bit S values,
    row-major); ``reading`` (a read-out is in progress).
    """

    def __init__(self, config: KaleidoConfig):
        self.geo = geo = EngineGeometry.from_config(config)
        self.config = config
        tag_width = drain_tag_layout(geo).size
        super().__init__({
            "wr": In(data.ArrayLayout(drain_port_layout(geo.acc_width, geo.rows, tag_width),
                                      geo.cols)),
            "cfg": In(run_config_layout(geo)),
            "read": In(1),
            "s": Out(stream.Signature(signed(S_WIDTH))),
            "reading": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        geo, cfg = self.geo, self.cfg
        C = geo.cols
        cbits = (C - 1).bit_length()
        kcb = geo.kb_width - 1                    # bits of the column block in an address
        tag_layout = drain_tag_layout(geo)

        banks = [[memory.Memory(shape=signed(geo.acc_width), depth=geo.bank_depth, init=[])
                  for _ in range(C)] for _ in range(3)]
        for g in range(3):
            for j in range(C):
                m.submodules[f"plane{g}_bank{j}"] = banks[g][j]

        # -- writes: column j -> bank j of the tag's plane --------------------------------------
        for j in range(C):
            rec = self.wr[j]
            tag = data.View(tag_layout, rec.tag)
            rtok = Array(tag.rtok[i] for i in range(geo.rows))[rec.row]
            we = rec.valid & tag.rwe.bit_select(rec.row, 1) & tag.cwe[j]
            addr = Cat(tag.kf, tag.cb[:kcb], rtok)
            for g in range(3):
                port = banks[g][j].write_port()
                m.d.comb += [port.addr.eq(addr), port.data.eq(rec.data),
                             port.en.eq(we & (tag.plane == g))]

        # -- read-out counters --------------------------------------------------------------
        sw = geo.size_width
        i = Signal(sw)                            # Q token (row of S)
        t, y, x = Signal(sw), Signal(sw), Signal(sw)   # coordinates of the K token
        u = [Signal(sw, name=f"unit_{a}") for a in "tyx"]   # unit of k along each axis
        ut_frame = Signal(sw)                     # unit of the frame's first token (axis t)
        uy_row = Signal(sw)                       # unit of the row's first token (axis y)
        active = Signal()
        out_valid = Signal()
        advance = Signal()
        m.d.comb += [advance.eq(~out_valid | self.s.ready), self.s.valid.eq(out_valid),
                     self.reading.eq(active | out_valid)]

        row_end = x + 1 == cfg.w
        frame_end = row_end & (y + 1 == cfg.h)
        all_end = frame_end & (t + 1 == cfg.t)
        coords = [t, y, x]

        bank_sel = [Signal(max(1, cbits), name=f"bank_sel{g}") for g in range(3)]
        plane_on = [Signal(name=f"plane_on{g}") for g in range(3)]
        ports = [[banks[g][j].read_port(domain="sync", transparent_for=()) for j in range(C)]
                 for g in range(3)]
        for g in range(3):
            d = cfg.dirs[g]
            unit = _by_axis(d, u)
            f = _by_axis(d, [c[0] for c in coords])
            addr = Cat(f, (unit >> cbits)[:kcb], i[:geo.tok_width])
            for j in range(C):
                m.d.comb += [ports[g][j].addr.eq(addr), ports[g][j].en.eq(advance)]
            with m.If(advance):
                m.d.sync += [bank_sel[g].eq(unit[:cbits] if cbits else 0),
                             plane_on[g].eq(cfg.gsize[g] != 0)]
        total = 0
        for g in range(3):
            word = Array(p.data for p in ports[g])[bank_sel[g]]
            total = total + Mux(plane_on[g], word, 0)
        m.d.comb += self.s.payload.eq(total)

        with m.If(advance):
            m.d.sync += out_valid.eq(active)
            with m.If(active):
                with m.If(all_end):
                    m.d.sync += [t.eq(0), y.eq(0), x.eq(0), ut_frame.eq(0), uy_row.eq(0),
                                 i.eq(i + 1)] + [v.eq(0) for v in u]
                    with m.If(i + 1 == cfg.n):
                        m.d.sync += active.eq(0)
                with m.Elif(frame_end):
                    m.d.sync += [x.eq(0), y.eq(0), t.eq(t + 1),
                                 u[AXIS_X].eq(u[AXIS_X] + 1),
                                 u[AXIS_Y].eq(u[AXIS_Y] + 1), uy_row.eq(u[AXIS_Y] + 1)]
                    # The next frame holds the followers along t of this one: same units.
                    with m.If(~t[0] & (t + 1 < cfg.t)):
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

        with m.If(self.read & ~active & ~out_valid):
            m.d.sync += [active.eq(1), i.eq(0), t.eq(0), y.eq(0), x.eq(0), ut_frame.eq(0),
                         uy_row.eq(0)] + [v.eq(0) for v in u]
        return m
