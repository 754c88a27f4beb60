"""Accumulation buffer of the LinearEngine: per-group planes of Y and the Y read-out
(``docs/linear.md``, "RTL").

One *plane* per channel group (t, y, x), each of P x C *banks* (``amaranth.lib.memory``,
``acc_width`` bits); bank (a, j) takes the drain records of column j of array a, so the P*C
columns write in parallel. Every (token, output feature) of a non-empty group's plane is
written exactly once per run (by the drain wave of the register that holds it: each token is
one member of one unit), so there is no read-modify-write and no clearing. Address of
(token i, feature f) in column block ``cb = f // C``: bank (``cb mod P``, ``f mod C``), word
``Cat(cb // P, i)`` (C a power of two; the array sends ``cb // P`` as its tag's ``slot``).
The read-out streams ``Y[i][f] = sum of the non-empty planes`` row-major (i, then f) on
``y`` with valid/ready.
"""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Module, Mux, Signal, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from kaleido_hw.array.layouts import drain_port_layout
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.linear_layouts import LinearGeometry, linear_run_layout, linear_tag_layout
from kaleido_hw.engine.tile_layouts import S_WIDTH


__all__ = ["LinearBuffer", "Y_WIDTH"]

#: Width of the Y read-out stream (signed), as the attention engine's S.
Y_WIDTH = S_WIDTH


class LinearBuffer(wiring.Component):
    """Three planes of P x C banks holding the per-group partial outputs, and the Y read-out.

    Parameters
    ----------
    config : KaleidoConfig
        ``rows``/``cols`` (C a power of two), ``acc_width``, ``engine_max_tokens``,
        ``linear_max_out``, ``engine_arrays`` (P).

    Ports: ``wr`` (the P*C drain records of the arrays, array a's column j at ``a*C + j``,
    tag = :func:`linear_tag_layout`);
    ``cfg`` (the run's configuration); ``read`` (pulse: start the read-out; ignored while one
    runs); ``y`` (stream of signed 32-bit values, row-major); ``reading``.
    """

    def __init__(self, config: KaleidoConfig):
        self.geo = geo = LinearGeometry.from_config(config)
        self.config = config
        tag_width = linear_tag_layout(geo).size
        super().__init__({
            "wr": In(data.ArrayLayout(drain_port_layout(geo.acc_width, geo.rows, tag_width),
                                      geo.arrays * geo.cols)),
            "cfg": In(linear_run_layout(geo)),
            "read": In(1),
            "y": Out(stream.Signature(signed(Y_WIDTH))),
            "reading": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        geo, cfg = self.geo, self.cfg
        C, P = geo.cols, geo.arrays
        B = P * C                              # banks per plane, bank a*C + j
        cbits = (C - 1).bit_length()
        depth = geo.max_tokens << geo.slot_width
        tag_layout = linear_tag_layout(geo)
        banks = [[memory.Memory(shape=signed(geo.acc_width), depth=depth, init=[])
                  for _ in range(B)] for _ in range(3)]
        for g in range(3):
            for b in range(B):
                m.submodules[f"plane{g}_bank{b}"] = banks[g][b]

        # -- writes: column j of array a -> bank a*C + j of the tag's plane --------------------
        for b in range(B):
            j = b % C
            rec = self.wr[b]
            tag = data.View(tag_layout, rec.tag)
            rtok = Array(tag.rtok[i] for i in range(geo.rows))[rec.row]
            we = rec.valid & tag.rwe.bit_select(rec.row, 1) & tag.cwe[j]
            addr = Cat(tag.slot, rtok)
            for g in range(3):
                port = banks[g][b].write_port()
                m.d.comb += [port.addr.eq(addr), port.data.eq(rec.data),
                             port.en.eq(we & (tag.plane == g))]

        # -- read-out: token i, feature f = (fb, fj); fb = fq*P + fa ---------------------------
        # Three stages that move together (``advance``: the output register is empty or
        # taken): the banks' read (data held by the read enable while the stream stalls); each
        # plane's word picked by the registered bank select into a register; their sum into
        # the output register. So the macros' clock-to-output, the bank multiplexer and the
        # sum are not one path, as in the engine's S read-out.
        i = Signal(geo.size_width)
        fb = Signal(geo.cb_width + 1)
        fj = Signal(max(1, cbits))
        fa = Signal(range(max(P, 2)))
        fq = Signal(geo.slot_width + 1)
        active = Signal()
        read_valid = Signal()                  # the banks' outputs hold a value
        pick_valid = Signal()                  # the picked plane words hold a value
        out_valid = Signal()
        out_data = Signal(signed(Y_WIDTH))
        advance = Signal()
        m.d.comb += [advance.eq(~out_valid | self.y.ready), self.y.valid.eq(out_valid),
                     self.y.payload.eq(out_data),
                     self.reading.eq(active | read_valid | pick_valid | out_valid)]
        f = Signal(geo.out_width + 1)
        m.d.comb += f.eq((fb << cbits) | (fj if cbits else 0))
        ports = [[banks[g][b].read_port(domain="sync", transparent_for=()) for b in range(B)]
                 for g in range(3)]
        bank_sel = Signal(range(max(B, 2)))
        plane_on = Signal(3)
        picked = [Signal(signed(geo.acc_width), name=f"picked{g}") for g in range(3)]
        for g in range(3):
            for b in range(B):
                m.d.comb += [ports[g][b].addr.eq(Cat(fq[:geo.slot_width], i[:geo.tok_width])),
                             ports[g][b].en.eq(advance)]
        with m.If(advance):
            m.d.sync += [bank_sel.eq(fa * C + (fj if cbits else 0)),
                         plane_on.eq(Cat(*(cfg.gsize[g] != 0 for g in range(3)))),
                         read_valid.eq(active), pick_valid.eq(read_valid),
                         out_valid.eq(pick_valid),
                         out_data.eq(picked[0] + picked[1] + picked[2])]
            for g in range(3):
                word = Array(p.data for p in ports[g])[bank_sel]
                m.d.sync += picked[g].eq(Mux(plane_on[g], word, 0))

        with m.If(advance):
            with m.If(active):
                with m.If(f + 1 == cfg.c_out):
                    m.d.sync += [fb.eq(0), fa.eq(0), fq.eq(0), i.eq(i + 1)]
                    if cbits:
                        m.d.sync += fj.eq(0)
                    with m.If(i + 1 == cfg.n):
                        m.d.sync += active.eq(0)
                elif_ = m.Elif(fj == C - 1) if cbits else m.Elif(1)
                with elif_:
                    m.d.sync += fb.eq(fb + 1)
                    with m.If(fa == P - 1):
                        m.d.sync += [fa.eq(0), fq.eq(fq + 1)]
                    with m.Else():
                        m.d.sync += fa.eq(fa + 1)
                    if cbits:
                        m.d.sync += fj.eq(0)
                if cbits:
                    with m.Else():
                        m.d.sync += fj.eq(fj + 1)

        with m.If(self.read & ~self.reading):
            m.d.sync += [active.eq(1), i.eq(0), fb.eq(0), fj.eq(0), fa.eq(0), fq.eq(0)]
        return m
