"""``pv_engine``: ``O = P @ V_eff`` on one R x C array in P @ V mode (``docs/linear.md``,
"P @ V on the PE arrays"; golden schedule and counters ``golden.engine.pv``).

The host writes P and V through two streams, sets ``cfg`` and pulses ``start``; the block
computes the window codes of V on chip (:class:`~kaleido_hw.engine.window_code_unit.WindowCodeUnit`,
one lane per column), walks the blocks (:class:`~kaleido_hw.engine.pv_sequencer.PvSequencer`)
on a :class:`~kaleido_hw.array.pv_cell.PvArray`; the drained outputs go to the O buffer
(:class:`~kaleido_hw.engine.pv_buffer.PvOutBuffer`), which then streams O out row-major on
``o`` (valid/ready). One run covers one direction group:
every channel of V reuses along ``cfg.axis`` (a head with several directions is one run per
group, each on its channels).

Storage (``amaranth.lib.memory``): P is ``R`` queries per word (word ``rb * K + key``, K the
power of two above ``engine_max_tokens - 1``), V ``C`` channels per word (``cb * K + key``);
each has three read ports (a unit's members). O: one bank per column (``pv_buffer``).

Counters (``cnt``, reset at ``start``) equal ``golden.engine.pv.pv_counters(...,
arrays=1)``: cycles from the accepting ``start`` (cycle 0) to the cycle ``done`` is first 1,
busy PE-cycles, issued / skipped steps per kind, bubbles, blocks, steps.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from kaleido_hw.array.pv_cell import PvArray
from kaleido_hw.bitops import bits_for
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.pv_buffer import PvOutBuffer
from kaleido_hw.engine.pv_sequencer import PvSequencer
from kaleido_hw.engine.window_code_unit import WindowCodeUnit


__all__ = ["PvEngine", "ERROR_BITS", "COUNTERS"]

#: Error bits (``error``), checked at ``start`` before anything runs.
ERROR_BITS = {
    "window": "cfg.window is not 2 or 3",
    "axis": "cfg.axis is not 0 (t), 1 (y) or 2 (x)",
    "grid": "cfg.t, cfg.h, cfg.w: a zero length, or more than engine_max_tokens keys",
    "queries": "cfg.queries is 0 or more than engine_max_tokens",
    "channels": "cfg.channels is 0 or more than engine_max_head_dim",
    "bits": "cfg.full_bits not in [4, 7] or cfg.half_bits not in [3, full_bits - 1]",
}
#: Counter ports (``cnt__<name>``), 40 bits each.
COUNTERS = ("cycles", "busy_pe_cycles", "issued_a", "issued_f1", "issued_f2", "skipped_f1",
            "skipped_f2", "bubbles", "blocks", "steps")
_CNT_WIDTH = 40


class PvEngine(wiring.Component):
    """P @ V block top (module docstring).

    Parameters
    ----------
    config : KaleidoConfig
        ``rows``, ``cols``, ``acc_width``; ``engine_max_tokens`` bounds the keys (T*H*W) and
        the queries, ``engine_max_head_dim`` the channels.
    """

    def __init__(self, config: KaleidoConfig):
        if not isinstance(config, KaleidoConfig):
            raise TypeError(f"PvEngine takes a KaleidoConfig, got {type(config).__name__}")
        self.config = config
        R, C = config.rows, config.cols
        self.max_keys = self.max_queries = config.engine_max_tokens
        self.max_channels = config.engine_max_head_dim
        self.key_width = bits_for(self.max_keys - 1)
        self.nrb_max = -(-self.max_queries // R)
        self.ncb_max = -(-self.max_channels // C)
        self.bw = bits_for(max(self.nrb_max, self.ncb_max))
        self.sw = bits_for(self.max_keys)
        self.qw = bits_for(self.max_queries)
        self.cw = bits_for(self.max_channels)
        cfg = wiring.Signature({
            "t": Out(self.sw), "h": Out(self.sw), "w": Out(self.sw), "axis": Out(2),
            "window": Out(2), "queries": Out(self.qw), "channels": Out(self.cw),
            "reuse": Out(1), "full_bits": Out(3), "half_bits": Out(3)})
        super().__init__({
            "p_in": In(stream.Signature(data.StructLayout({
                "rb": unsigned(bits_for(self.nrb_max - 1)), "key": unsigned(self.key_width),
                "p": unsigned(8 * R)}))),
            "v_in": In(stream.Signature(data.StructLayout({
                "cb": unsigned(bits_for(self.ncb_max - 1)), "key": unsigned(self.key_width),
                "v": unsigned(8 * C)}))),
            "cfg": In(cfg),
            "start": In(1),
            "busy": Out(1),
            "done": Out(1),
            "error": Out(len(ERROR_BITS)),
            "o": Out(stream.Signature(data.StructLayout({
                "data": signed(config.acc_width), "last": unsigned(1)}))),
            "cnt": Out(wiring.Signature({n: Out(_CNT_WIDTH) for n in COUNTERS})),
        })

    PORT_DOCS = {
        "p_in__valid": "P write stream: a word is offered",
        "p_in__ready": "P write stream: accepted (1 unless a run is busy)",
        "p_in__payload": ("P write: rb (row block), key, p (the uint8 P of queries rb*R+i at "
                          "bits [8i, 8i+8), R lanes), LSB first in that order"),
        "v_in__valid": "V write stream: a word is offered",
        "v_in__ready": "V write stream: accepted (1 unless a run is busy)",
        "v_in__payload": ("V write: cb (column block), key, v (the int8 V of channels cb*C+j "
                          "at bits [8j, 8j+8), C lanes), LSB first in that order"),
        "cfg__t": "run configuration (read at start): grid length along t",
        "cfg__h": "run configuration: grid length along y",
        "cfg__w": "run configuration: grid length along x (keys = t*h*w)",
        "cfg__axis": "run configuration: V's reuse direction, 0 t, 1 y, 2 x",
        "cfg__window": "run configuration: window of the V rule, 2 or 3",
        "cfg__queries": "run configuration: rows of P (queries), 1..engine_max_tokens",
        "cfg__channels": "run configuration: channels of V, 1..engine_max_head_dim",
        "cfg__reuse": "run configuration: 1 V reuse, 0 dense (every follower NONE)",
        "cfg__full_bits": "run configuration: FULL threshold bits, 4..7",
        "cfg__half_bits": "run configuration: HALF threshold bits, 3..full_bits-1",
        "start": "start a run (accepted when neither busy nor streaming O)",
        "busy": "a run is in progress",
        "done": "the last run finished (its O streams out on o); with error != 0 it did not run",
        "error": ("error bits of the last start, bit k: " + "; ".join(
            f"{k} {name}: {text}" for k, (name, text) in enumerate(ERROR_BITS.items()))),
        "o__valid": "O read-out stream: a value is offered",
        "o__ready": "O read-out stream: the consumer takes it",
        "o__payload": ("O value (signed acc_width) and last (the final one), row-major over "
                       "queries then channels"),
        **{f"cnt__{n}": f"counter {n} of the last run (golden.engine.pv.pv_counters)"
           for n in COUNTERS},
    }

    def elaborate(self, platform):
        m = Module()
        cfgc = self.config
        R, C, aw = cfgc.rows, cfgc.cols, cfgc.acc_width
        kw, bw, sw = self.key_width, self.bw, self.sw
        m.submodules.array = arr = PvArray(cfgc, tag_width=1 + 2 * bw)
        m.submodules.seq = seq = PvSequencer(R, C, sw, bw)
        m.submodules.codes = cu = WindowCodeUnit(C)

        # -- run configuration, checked at start ----------------------------------------------
        cfg = self.cfg
        run = Signal(data.StructLayout({
            "t": unsigned(sw), "h": unsigned(sw), "w": unsigned(sw), "hw": unsigned(sw),
            "axis": unsigned(2), "w3": unsigned(1), "queries": unsigned(self.qw),
            "channels": unsigned(self.cw), "nrb": unsigned(bw), "ncb": unsigned(bw),
            "reuse": unsigned(1), "full_limit": unsigned(10), "half_mask": unsigned(8)}))
        n_keys = Signal(3 * sw)
        m.d.comb += n_keys.eq(cfg.t * cfg.h * cfg.w)
        err = Signal(len(ERROR_BITS))
        m.d.comb += err.eq(Cat(
            (cfg.window != 2) & (cfg.window != 3),
            cfg.axis == 3,
            (cfg.t == 0) | (cfg.h == 0) | (cfg.w == 0) | (n_keys > self.max_keys),
            (cfg.queries == 0) | (cfg.queries > self.max_queries),
            (cfg.channels == 0) | (cfg.channels > self.max_channels),
            (cfg.full_bits < 4) | (cfg.half_bits < 3) | (cfg.half_bits >= cfg.full_bits)))
        reading = Signal()
        accept = self.start & ~self.busy & ~reading
        cnt = self.cnt
        with m.If(accept):
            m.d.sync += [getattr(cnt, n).eq(0) for n in COUNTERS]
            m.d.sync += cnt.cycles.eq(1)
            with m.If(err != 0):
                m.d.sync += [self.error.eq(err), self.done.eq(1)]
            with m.Else():
                shift = Cat(Const(0, 1), 7 - cfg.full_bits)        # 2 * (7 - full_bits)
                m.d.sync += [
                    self.error.eq(0), self.done.eq(0), self.busy.eq(1),
                    run.t.eq(cfg.t), run.h.eq(cfg.h), run.w.eq(cfg.w),
                    run.hw.eq(cfg.h * cfg.w), run.axis.eq(cfg.axis), run.w3.eq(cfg.window == 3),
                    run.queries.eq(cfg.queries), run.channels.eq(cfg.channels),
                    run.nrb.eq((cfg.queries + (R - 1)) // R),
                    run.ncb.eq((cfg.channels + (C - 1)) // C),
                    run.reuse.eq(cfg.reuse),
                    run.full_limit.eq(Mux(cfg.window == 3, Const(9, 4), Const(4, 4)) << shift),
                    run.half_mask.eq(~(Const(0xFF, 8) >> (cfg.half_bits + 1))),
                ]
        m.d.comb += [seq.start.eq(accept & (err == 0)), seq.t.eq(run.t), seq.h.eq(run.h),
                     seq.w.eq(run.w), seq.hw.eq(run.hw), seq.axis.eq(run.axis),
                     seq.w3.eq(run.w3), seq.nrb.eq(run.nrb), seq.ncb.eq(run.ncb)]

        # -- P and V memories: one write port (host streams), three read ports ---------------
        pmem = memory.Memory(shape=unsigned(8 * R), depth=self.nrb_max << kw, init=[])
        vmem = memory.Memory(shape=unsigned(8 * C), depth=self.ncb_max << kw, init=[])
        m.submodules.pmem, m.submodules.vmem = pmem, vmem
        pw, vw = pmem.write_port(), vmem.write_port()
        m.d.comb += [self.p_in.ready.eq(~self.busy), self.v_in.ready.eq(~self.busy),
                     pw.en.eq(self.p_in.valid & ~self.busy),
                     pw.addr.eq(Cat(self.p_in.payload.key, self.p_in.payload.rb)),
                     pw.data.eq(self.p_in.payload.p),
                     vw.en.eq(self.v_in.valid & ~self.busy),
                     vw.addr.eq(Cat(self.v_in.payload.key, self.v_in.payload.cb)),
                     vw.data.eq(self.v_in.payload.v)]
        preads = [pmem.read_port(domain="sync", transparent_for=()) for _ in range(3)]
        vreads = [vmem.read_port(domain="sync", transparent_for=()) for _ in range(3)]
        for k in range(3):
            tok = Signal(sw, name=f"rd_tok{k}")
            m.d.comb += tok.eq(seq.rd_tok0 + k * seq.rd_stride)
            m.d.comb += [preads[k].en.eq(seq.rd_en), vreads[k].en.eq(seq.rd_en),
                         preads[k].addr.eq(Cat(tok[:kw], seq.rd_rb)),
                         vreads[k].addr.eq(Cat(tok[:kw], seq.rd_cb))]
        present = Signal(2)
        with m.If(seq.rd_en):
            m.d.sync += present.eq(Cat(seq.rd_present1, seq.rd_present2))

        # -- codes and the issue decision ---------------------------------------------------
        cvalid = Signal(C)
        m.d.comb += cvalid.eq(Cat(*((seq.cb * C + j) < run.channels for j in range(C))))
        m.d.comb += [cu.m0.eq(vreads[0].data), cu.m1.eq(vreads[1].data),
                     cu.m2.eq(vreads[2].data), cu.present1.eq(present[0]),
                     cu.present2.eq(present[1]), cu.w3.eq(run.w3), cu.reuse.eq(run.reuse),
                     cu.full_limit.eq(run.full_limit), cu.half_mask.eq(run.half_mask),
                     seq.work1.eq((cu.work1 & cvalid).any()),
                     seq.work2.eq((cu.work2 & cvalid).any())]

        # -- the array, behind one register stage ---------------------------------------------
        # The step (rows, columns with their codes, tag) is registered before the array, so
        # that the memories' read, the window codes and the array's column decode and
        # multiply are not one path; every step reaches the array one cycle after the
        # sequencer presents it (``PvTiming.load_base`` = 3).
        for i in range(R):
            row = arr.row[i]
            lanes = [preads[k].data[8 * i:8 * i + 8] for k in range(3)]
            m.d.sync += [row.p0.eq(lanes[0]),
                         row.p1.eq(Mux(present[0], lanes[1], 0)),
                         row.p2.eq(Mux(present[1], lanes[2], 0)),
                         row.valid.eq((seq.rb * R + i) < run.queries),
                         row.mode.kind.eq(seq.kind),
                         row.mode.first.eq(seq.step & seq.first),
                         row.mode.issue.eq(seq.step & seq.issue)]
        for j in range(C):
            col = arr.col[j]
            # An absent member's word was never written (X in a 4-state simulator): zero it,
            # as its P lanes, so that no product ever sees it (even 0 * X is X there).
            m.d.sync += [col.v0.eq(vreads[0].data[8 * j:8 * j + 8]),
                         col.v1.eq(Mux(present[0], vreads[1].data[8 * j:8 * j + 8], 0)),
                         col.v2.eq(Mux(present[1], vreads[2].data[8 * j:8 * j + 8], 0)),
                         col.c1.eq(cu.c1[2 * j:2 * j + 2]), col.c2.eq(cu.c2[2 * j:2 * j + 2]),
                         col.valid.eq(cvalid[j])]
        m.d.sync += arr.tag.eq(Cat(seq.tag_valid, seq.tag_rb, seq.tag_cb))

        # -- O buffer: the drained outputs in, O out ---------------------------------------------
        m.submodules.obuf = obuf = PvOutBuffer(R, C, aw, self.max_queries, self.max_channels,
                                               bw)
        m.d.comb += [obuf.drain.eq(arr.drain), obuf.queries.eq(run.queries),
                     obuf.channels.eq(run.channels), obuf.start.eq(seq.finished),
                     reading.eq(obuf.reading)]
        wiring.connect(m, wiring.flipped(self.o), obuf.o)

        # -- end of run, counters -----------------------------------------------------------------
        with m.If(self.busy):
            m.d.sync += [cnt.cycles.eq(cnt.cycles + 1),
                         cnt.busy_pe_cycles.eq(cnt.busy_pe_cycles + arr.busy_count),
                         cnt.issued_a.eq(cnt.issued_a + seq.inc_issued[0]),
                         cnt.issued_f1.eq(cnt.issued_f1 + seq.inc_issued[1]),
                         cnt.issued_f2.eq(cnt.issued_f2 + seq.inc_issued[2]),
                         cnt.skipped_f1.eq(cnt.skipped_f1 + seq.inc_skip1),
                         cnt.skipped_f2.eq(cnt.skipped_f2 + seq.inc_skip2),
                         cnt.bubbles.eq(cnt.bubbles + seq.inc_bubble),
                         cnt.blocks.eq(cnt.blocks + seq.inc_block),
                         cnt.steps.eq(cnt.steps + (seq.step & ~(seq.first & ~seq.issue)))]
        with m.If(seq.finished):
            m.d.sync += [self.busy.eq(0), self.done.eq(1)]
        return m
