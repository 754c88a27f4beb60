"""BlockOutputUnit: the output accumulators of attention by key blocks, their rescale and the
final normalisation (``docs/numerics.md`` section 15, ``docs/vector.md``, "Long heads").

Golden model: :func:`golden.vector.online_stages` with ``trace=True`` (per block
``partial`` and ``factor``; at the end ``acc``, ``recip`` and ``out``).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, signed
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out

from golden.vector.online import NORM_BITS, O_FRAC_BITS
from golden.vector.softmax import EXP_BITS, P_ONE
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.vector.layouts import (EXP_WIDTH, O_BITS, OUT_BITS, WEIGHT_BITS, chunk_width,
                                       finish_layout, output_beat_layout, partial_beat_layout,
                                       state_row_width)
from kaleido_hw.vector.credited_output import CreditedOutput
from kaleido_hw.vector.reciprocal import RowReciprocal


__all__ = ["BlockOutputUnit", "RECIP_BITS_OUT", "FINISH_OVERHEAD"]

#: ``R = 2**40 // L <= 2**40 / 255``: 33 bits.
RECIP_BITS_OUT = ((1 << NORM_BITS) // P_ONE).bit_length()
#: R's low part (the first pass of a read-out); F (at most 2**15) fits it too.
SPLIT = 17
assert (1 << EXP_BITS) < 1 << SPLIT and RECIP_BITS_OUT - SPLIT <= SPLIT
#: Output beats the FIFO holds: the reads in flight (4) and the FIFO's own output stages.
OUT_FIFO_DEPTH = 7
#: Cycles a row's read-out takes beyond its two reads per chunk when requests wait and the
#: output is never held: the division with its start and hand-over into the reads (19) and
#: the drain of the row's reads before the next request is taken (4).
FINISH_OVERHEAD = 23


class BlockOutputUnit(wiring.Component):
    """Section 15's output side: O per query row and channel, rescaled and accumulated block by
    block, then normalised.

    Parameters (from ``config``)
        vector_lanes (L: channels per beat), engine_max_head_dim (channels per row, in
        ``ceil(d / L)`` chunks), engine_max_tokens (query rows: the engine core's box),
        acc_width (the partial products' width).

    Interface
        ``o``: stream of ``partial_beat_layout``: L channels of one query row's ``P @ V`` of
        one key block, with ``row``, ``chunk``, ``first`` (the row's first block) and the
        row's rescale ``factor`` F of that block (``block_softmax`` gives it). Each beat does
        ``O = (O * F + 2**14) >> 15 + partial`` (``O = partial`` when ``first``) on its L
        accumulators (``O_BITS`` = 36 bits, signed, in an ``amaranth.lib.memory``).
        ``fin``: stream of ``finish_layout``: a row to read out with its final weight L
        (``block_softmax``'s last beat of the row's last block). The unit divides ``R =
        2**40 // L`` (:class:`RowReciprocal`, 17 cycles), then reads the row's chunks:
        ``clamp((O * R + 2**31) >> 32)``, int16 with 8 fractional bits.
        ``out``: stream of ``output_beat_layout``: a finished row's chunks in order.
        ``bad_weight``: sticky; a ``fin`` had a weight below 255, which no row of section 15
        has (its output is then meaningless).

    Algorithm
        One datapath for both: read a word (L accumulators), register it twice, multiply each
        by one operand (the same L multipliers of ``O_BITS`` x 18 bits: F when accumulating;
        when finishing, R's low 17 bits on a first read of the word and its high 16 on a
        second), register the products, then either round, add the partial and write back,
        or keep the first read's products and, on the second, form ``O * R``, round, clamp
        and push into the output FIFO. A write lands four cycles
        after its read; the read port is transparent to it, and a beat whose word is still in
        the first three stages waits (so consecutive beats of one word are exact). A ``fin``
        waits until no accumulating beat is in flight and holds ``o`` until its row is read
        out; the output FIFO's free space is credited against the reads in flight.

    Timing
        Accumulation: one beat per cycle. Read-out: ``FINISH_OVERHEAD`` + 2 x chunks cycles
        per row when the output is never held.
    """

    PORT_DOCS = {
        "o__valid": "partial beat valid",
        "o__ready": "partial beat accepted when valid and ready",
        "o__payload": "partial beat: L signed P @ V values (acc_width bits each, lane 0 first), "
                      "row, chunk (channel chunk of L), first (the row's first key block), "
                      "factor (16: the row's rescale F of the block); LSB first",
        "fin__valid": "finish request valid",
        "fin__ready": "finish request accepted when valid and ready",
        "fin__payload": "finish request: row, weight (28: the row's final L); LSB first",
        "out__valid": "output beat valid",
        "out__ready": "output beat consumed when valid and ready",
        "out__payload": "output beat: L int16 outputs (8 fractional bits, V's units, lane 0 "
                        "first), row, chunk, last (the row's last chunk); LSB first",
        "bad_weight": "sticky: a finish request had a weight below 255",
    }

    def __init__(self, config: KaleidoConfig):
        self.config = config
        super().__init__({
            "o": In(stream.Signature(partial_beat_layout(config))),
            "fin": In(stream.Signature(finish_layout(config))),
            "out": Out(stream.Signature(output_beat_layout(config))),
            "bad_weight": Out(1),
        })

    def elaborate(self, platform):
        cfg = self.config
        L, PW = cfg.vector_lanes, cfg.acc_width
        chunks = -(-cfg.engine_max_head_dim // L)
        RW, CW = state_row_width(cfg), chunk_width(cfg)
        # The multipliers' operand (signed): F (16 bits) or half of R, whose 33 bits are
        # taken in two passes of SPLIT and RECIP_BITS_OUT - SPLIT bits.
        KW = SPLIT + 1
        m = Module()

        acc = memory.Memory(shape=L * O_BITS, depth=1 << (RW + CW), init=[])
        m.submodules.acc = acc
        wp = acc.write_port()
        rp = acc.read_port(transparent_for=(wp,))

        recip = RowReciprocal(WEIGHT_BITS, 1, numerator=1 << NORM_BITS,
                              quotient_width=RECIP_BITS_OUT, min_total=P_ONE)
        m.submodules.recip = recip

        out_layout = output_beat_layout(cfg)
        out_buf = CreditedOutput(m, "out_fifo", self.out, OUT_FIFO_DEPTH)

        # -- the pipeline: stage 0 read, 1 the word arrives (registered), 2 registered again,
        # 3 products, 4 write or output. The second register keeps the SRAM's clock-to-output
        # out of the multipliers (synthesis merges the first into the macro's read port).
        S = 4                                                 # the last stage
        v = [Signal(name=f"v{k}") for k in range(S + 1)]      # a beat in stage k
        norm = [Signal(name=f"norm{k}") for k in range(S + 1)]  # it is a read-out
        first = [Signal(name=f"first{k}") for k in range(S + 1)]
        last = [Signal(name=f"last{k}") for k in range(S + 1)]
        addr = [Signal(RW + CW, name=f"addr{k}") for k in range(S + 1)]
        factor = [Signal(EXP_WIDTH, name=f"factor{k}") for k in range(S)]
        part = [Signal(L * PW, name=f"part{k}") for k in range(S + 1)]
        high = [Signal(name=f"high{k}") for k in range(S + 1)]  # a read-out's second pass
        for k in range(S):
            m.d.sync += [v[k + 1].eq(v[k]), norm[k + 1].eq(norm[k]), first[k + 1].eq(first[k]),
                         last[k + 1].eq(last[k]), addr[k + 1].eq(addr[k]),
                         part[k + 1].eq(part[k]), high[k + 1].eq(high[k])]
        m.d.sync += [factor[k + 1].eq(factor[k]) for k in range(S - 1)]

        # -- finishing a row: division, then two reads per chunk (R's low part, then its high
        # part: the finish comes once per row and head, so half-width multipliers do) -----
        fin_row = Signal(RW)
        recip_r = Signal(RECIP_BITS_OUT)
        finishing = Signal()                 # from the accepted fin to the row's last read
        reading = Signal()
        chunk = Signal(range(max(chunks, 2)))
        second = Signal()                    # the chunk's second read (R's high part)
        issue = Signal()
        m.d.comb += issue.eq(reading & out_buf.room)
        quiet = ~Cat(*v[1:]).any()           # no beat in flight
        # (The division runs only while a row is being finished.)
        m.d.comb += self.fin.ready.eq(~finishing & quiet)
        fin_go = self.fin.valid & self.fin.ready
        m.d.comb += [recip.start.eq(fin_go), recip.total.eq(self.fin.payload.weight),
                     recip.slot_in.eq(0)]
        with m.If(fin_go):
            m.d.sync += [finishing.eq(1), fin_row.eq(self.fin.payload.row)]
            with m.If(self.fin.payload.weight < P_ONE):
                m.d.sync += self.bad_weight.eq(1)
        with m.If(recip.done):
            m.d.sync += [recip_r.eq(recip.recip), reading.eq(1), chunk.eq(0), second.eq(0)]
        last_chunk = chunk == chunks - 1
        with m.If(issue):
            m.d.sync += second.eq(~second)
            with m.If(second):
                m.d.sync += chunk.eq(chunk + 1)
                with m.If(last_chunk):
                    m.d.sync += [reading.eq(0), finishing.eq(0)]

        # -- accumulating beats: held while a row waits to be finished or is, and while
        # their word is in stages 1 to S - 1 (its write is still to come) ----------------
        op = self.o.payload
        o_addr = Cat(op.chunk, op.row)
        hazard = Cat(*[v[k] & ~norm[k] & (addr[k] == o_addr) for k in range(1, S)]).any()
        m.d.comb += self.o.ready.eq(~finishing & ~self.fin.valid & ~hazard)
        o_go = self.o.valid & self.o.ready

        m.d.comb += [
            v[0].eq(o_go | issue), norm[0].eq(issue), first[0].eq(op.first),
            last[0].eq(last_chunk), high[0].eq(second),
            addr[0].eq(Mux(issue, Cat(chunk, fin_row), o_addr)),
            factor[0].eq(op.factor), part[0].eq(op.values.as_value()),
            rp.addr.eq(addr[0]), rp.en.eq(1),
        ]
        word1 = Signal(L * O_BITS)
        word = Signal(L * O_BITS)
        m.d.sync += [word1.eq(rp.data), word.eq(word1)]      # stages 1 and 2
        operand = Signal(signed(KW))
        m.d.comb += operand.eq(Mux(norm[S - 1], Mux(high[S - 1], recip_r[SPLIT:],
                                                     recip_r[:SPLIT]), factor[S - 1]))
        prods = [Signal(signed(O_BITS + KW), name=f"prod{i}") for i in range(L)]
        for i in range(L):                      # stage 3: the products, registered
            m.d.sync += prods[i].eq(word[i * O_BITS:(i + 1) * O_BITS].as_signed() * operand)

        # Stage S: accumulate and write back, or (a read-out) keep the low part's products,
        # then add the high part's and normalise into the FIFO.
        new = []
        outs = []
        for i in range(L):
            low = Signal(signed(O_BITS + KW), name=f"low{i}")
            with m.If(v[S] & norm[S] & ~high[S]):
                m.d.sync += low.eq(prods[i])
            whole = Signal(signed(O_BITS + RECIP_BITS_OUT + 1), name=f"whole{i}")   # O * R
            m.d.comb += whole.eq((prods[i] << SPLIT) + low)
            partial = part[S][i * PW:(i + 1) * PW].as_signed()
            scaled = (prods[i] + (1 << (EXP_BITS - 1))) >> EXP_BITS
            n = Signal(signed(O_BITS), name=f"new{i}")
            m.d.comb += n.eq(Mux(first[S], partial, scaled + partial))
            new.append(n)
            y = Signal(signed(len(whole)), name=f"y{i}")
            m.d.comb += y.eq((whole + (1 << (NORM_BITS - O_FRAC_BITS - 1)))
                             >> (NORM_BITS - O_FRAC_BITS))
            lo, hi = -(1 << (OUT_BITS - 1)), (1 << (OUT_BITS - 1)) - 1
            o16 = Signal(signed(OUT_BITS), name=f"out{i}")
            m.d.comb += o16.eq(Mux(y < lo, lo, Mux(y > hi, hi, y)))
            outs.append(o16)
        m.d.comb += [wp.addr.eq(addr[S]), wp.data.eq(Cat(*new)), wp.en.eq(v[S] & ~norm[S])]
        beat = Signal(out_layout)
        m.d.comb += [beat.values.as_value().eq(Cat(*outs)), beat.row.eq(addr[S][CW:]),
                     beat.chunk.eq(addr[S][:CW]), beat.last.eq(last[S])]
        # Only a chunk's second read gives an output beat.
        out_buf.track(issue & second, v[S] & norm[S] & high[S], beat.as_value())
        return m
