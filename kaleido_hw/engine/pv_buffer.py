"""O buffer of ``pv_engine`` (``docs/linear.md``, "RTL of P @ V"): the drained outputs of the
P @ V arrays in, ``O`` out as a row-major stream.

One bank (``amaranth.lib.memory``) per column j of array a holds the channels ``cb*C + j``
of the column blocks ``cb = l*P + a`` that array runs, word ``l * Q + query`` (Q the power
of two above ``max_queries - 1``): no two array columns share a bank. A drain record of
column j of array a (row i of the block its tag names: valid bit, row block, the array's
own column-block index l) writes ``O[rb*R + i, (l*P + a)*C + j]`` when the query is real;
padding columns write words nobody reads. After ``start`` the read-out walks queries, then
channels (column j, then array a, then l), one value per cycle while
the consumer takes them: a read is issued only when the output register is free or being
taken (the read port's enable holds its data otherwise), so back-pressure loses nothing.

With ``beat`` the read-out gives a row's ``P * C`` consecutive channels ``l*P*C ..`` per
cycle instead (every bank read at the same word ``(l, query)``: bank ``a*C + j`` holds
channel ``(l*P + a)*C + j``), queries outer and ``l`` inner over every column-block index
of the build (``ceil(ceil(max_channels / C) / P)`` beats a row), channels past the run's as
0: ``P * C`` times the rate, for a consumer of whole rows of beats (the block output
unit).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from kaleido_hw.array.layouts import drain_port_layout
from kaleido_hw.bitops import bits_for


__all__ = ["PvOutBuffer", "out_beat_layout"]


def out_beat_layout(acc_width: int, lanes: int, max_queries: int, max_channels: int,
                    arrays: int, cols: int) -> data.StructLayout:
    """A beat of the wide read-out: ``lanes`` = P * C channels of one query, the query
    (``row``), the beat's index ``chunk`` (l) within the row, ``last`` (the run's final
    beat)."""
    column_blocks = -(-max_channels // cols)
    chunks = -(-column_blocks // arrays)             # column blocks of one array
    return data.StructLayout({"values": data.ArrayLayout(signed(acc_width), lanes),
                              "row": unsigned(bits_for(max_queries - 1)),
                              "chunk": unsigned(bits_for(chunks - 1)),
                              "last": unsigned(1)})


class PvOutBuffer(wiring.Component):
    """Drain records in, O out (module docstring).

    Parameters
    ----------
    rows, cols : int
        R and C of an array.
    arrays : int
        P, the arrays whose drains come in.
    acc_width : int
        Width of an O value (signed).
    max_queries, max_channels : int
        Largest run.
    block_width : int
        Bits of a row- or column-block index in the tag (``valid | rb << 1 | l << (1 +
        block_width)``).
    beat : bool
        Read out ``P * C`` channels per beat (module docstring): ``o`` carries ``values``
        (``P * C`` signed), ``row`` (the query), ``chunk`` (``l``) and ``last``.

    Ports: ``drain`` (the arrays' C read-out records each, array-major),
    ``queries``/``channels`` (the run's
    sizes, stable while it runs and reads out), ``start`` (begin the read-out), ``reading``,
    ``o`` (stream: ``data`` signed, ``last`` on the final value).
    """

    def __init__(self, rows: int, cols: int, acc_width: int, max_queries: int,
                 max_channels: int, block_width: int, arrays: int = 1, beat: bool = False):
        self.rows, self.cols, self.acc_width, self.arrays = rows, cols, acc_width, arrays
        self.max_queries, self.max_channels = max_queries, max_channels
        self.bw, self.beat = block_width, beat
        self.qw, self.cw = bits_for(max_queries), bits_for(max_channels)
        super().__init__({
            "drain": In(data.ArrayLayout(drain_port_layout(acc_width, rows, 1 + 2 * block_width),
                                         arrays * cols)),
            "queries": In(self.qw), "channels": In(self.cw),
            "start": In(1), "reading": Out(1),
            "o": Out(stream.Signature(
                out_beat_layout(acc_width, arrays * cols, max_queries, max_channels, arrays,
                                cols) if beat else
                data.StructLayout({"data": signed(acc_width), "last": unsigned(1)}))),
        })

    def elaborate(self, platform):
        m = Module()
        R, C, P, bw = self.rows, self.cols, self.arrays, self.bw
        qk = bits_for(self.max_queries - 1)
        ncb_max = -(-self.max_channels // C)
        ncbl_max = -(-ncb_max // P)                    # column blocks of one array
        lk = bits_for(ncbl_max - 1)
        banks = [memory.Memory(shape=signed(self.acc_width), depth=ncbl_max << qk, init=[])
                 for _ in range(P * C)]
        for b, bank in enumerate(banks):
            m.submodules[f"obank{b}"] = bank
            wp = bank.write_port()
            rec = self.drain[b]
            tag_valid = rec.tag[0]
            tag_rb = rec.tag[1:1 + bw]
            tag_l = rec.tag[1 + bw:1 + 2 * bw]
            q = Signal(bw + bits_for(R), name=f"drain_q{b}")
            m.d.comb += [q.eq(tag_rb * R + rec.row),
                         wp.en.eq(rec.valid & tag_valid & (q < self.queries)),
                         wp.addr.eq(Cat(q[:qk], tag_l[:lk])), wp.data.eq(rec.data)]

        rports = [bank.read_port(domain="sync", transparent_for=()) for bank in banks]
        if self.beat:
            self._beat_readout(m, rports, qk, lk, ncbl_max)
            return m

        # Read-out, row-major: channel rc = (l*P + a)*C + j.
        rq = Signal(self.qw)
        rc = Signal(self.cw)
        rj, ra, rl = Signal(range(C)), Signal(range(P)), Signal(max(lk, 1))
        with m.If(self.start):
            m.d.sync += [self.reading.eq(1), rq.eq(0), rc.eq(0), rj.eq(0), ra.eq(0), rl.eq(0)]
        out = self.o
        sel = Signal(range(P * C))
        last = Signal()
        advance = ~out.valid | out.ready
        more = self.reading & (rq < self.queries)
        for rp in rports:
            m.d.comb += [rp.en.eq(advance), rp.addr.eq(Cat(rq[:qk], rl[:lk]))]
        m.d.comb += out.payload.data.eq(rports[0].data)
        for b in range(1, P * C):
            with m.If(sel == b):
                m.d.comb += out.payload.data.eq(rports[b].data)
        m.d.comb += out.payload.last.eq(last)
        with m.If(advance):
            m.d.sync += [out.valid.eq(more), sel.eq(ra * C + rj)]
            with m.If(more):
                last_c = rc + 1 == self.channels
                m.d.sync += last.eq(last_c & (rq + 1 == self.queries))
                with m.If(last_c):
                    m.d.sync += [rc.eq(0), rq.eq(rq + 1), rj.eq(0), ra.eq(0), rl.eq(0)]
                with m.Else():
                    m.d.sync += rc.eq(rc + 1)
                    with m.If(rj != C - 1):
                        m.d.sync += rj.eq(rj + 1)
                    with m.Else():
                        m.d.sync += rj.eq(0)
                        with m.If(ra != P - 1):
                            m.d.sync += ra.eq(ra + 1)
                        with m.Else():
                            m.d.sync += [ra.eq(0), rl.eq(rl + 1)]
            with m.Elif(self.reading & ~more):
                m.d.sync += self.reading.eq(0)
        return m

    def _beat_readout(self, m, rports, qk: int, lk: int, chunks: int):
        """The wide read-out (``beat``): word ``(l, query)`` of every bank per beat, queries
        outer, ``l`` inner over ``chunks`` = every column-block index of the build (those
        past the run's channels as zeros: a consumer with a fixed number of beats per row);
        a read only when the output register is free or being taken."""
        C, P = self.cols, self.arrays
        rq, rl = Signal(self.qw), Signal(max(lk, 1))
        with m.If(self.start):
            m.d.sync += [self.reading.eq(1), rq.eq(0), rl.eq(0)]
        out = self.o
        advance = ~out.valid | out.ready
        more = self.reading & (rq < self.queries)
        for rp in rports:
            m.d.comb += [rp.en.eq(advance), rp.addr.eq(Cat(rq[:qk], rl[:lk]))]
        base = Signal(self.cw + 1)               # the beat's first channel, as read
        for b, rp in enumerate(rports):
            m.d.comb += out.payload.values[b].eq(Mux(base + b < self.channels, rp.data, 0))
        with m.If(advance):
            m.d.sync += out.valid.eq(more)
            with m.If(more):
                last_l = rl + 1 == chunks
                m.d.sync += [out.payload.row.eq(rq), out.payload.chunk.eq(rl),
                             base.eq(rl * (P * C)),
                             out.payload.last.eq(last_l & (rq + 1 == self.queries))]
                with m.If(last_l):
                    m.d.sync += [rl.eq(0), rq.eq(rq + 1)]
                with m.Else():
                    m.d.sync += rl.eq(rl + 1)
            with m.Elif(self.reading & ~more):
                m.d.sync += self.reading.eq(0)
