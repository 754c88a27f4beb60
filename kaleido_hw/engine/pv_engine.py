"""``pv_engine``: ``O = P @ V_eff`` on P = ``engine_arrays`` R x C arrays in P @ V mode
(``docs/linear.md``, "P @ V on the PE arrays"; golden schedule and counters
``golden.engine.pv``).

The host writes P and V through two streams, sets ``cfg`` and pulses ``start``; per array the
block computes the window codes of V on chip
(:class:`~kaleido_hw.engine.window_code_unit.WindowCodeUnit`, one lane per column) and walks
its blocks (:class:`~kaleido_hw.engine.pv_sequencer.PvSequencer`) on a
:class:`~kaleido_hw.array.pv_cell.PvArray`: column block cb (channels ``cb*C ..``) runs on
array ``cb mod P``, which takes every row block of it. The arrays share no barrier (their
column blocks write disjoint channels of O) and run from the same ``start``; the run ends
with the last array's last drain wave. Each array's walk is pipelined (read, fetch,
current unit: the sequencer's docstring): a unit's window codes and work bits are computed
while the unit before it steps and then held in unit registers with its operands, so no path
runs from the memories through the codes into the next read. The drained outputs go to the
O buffer
(:class:`~kaleido_hw.engine.pv_buffer.PvOutBuffer`), which then streams O out row-major on
``o`` (valid/ready). One run covers one direction group: every channel of V reuses along
``cfg.axis`` (a head with several directions is one run per group, each on its channels).

Storage (``amaranth.lib.memory``): P is ``R`` queries per word (word ``rb * K + key``, K the
power of two above ``engine_max_tokens - 1``), one memory with three read ports per array (a
unit's members: every array reads every row block); V ``C`` channels per word, one bank per
array holding its column blocks (word ``(cb // P) * K + key``), three read ports each. O: one
bank per array column (``pv_buffer``).

Counters (``cnt``, reset at ``start``) equal ``golden.engine.pv.pv_counters(...,
arrays=P)``: cycles from the accepting ``start`` (cycle 0) to the cycle ``done`` is first 1,
busy PE-cycles, issued / skipped steps per kind, bubbles, blocks, steps; per array
(``cnt.a<k>``) its busy PE-cycles and steps.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from kaleido_hw.array.pv_cell import PvArray
from kaleido_hw.bitops import bits_for
from kaleido_hw.config import ConfigError, KaleidoConfig
from kaleido_hw.engine.host_port import (ARRAY_COUNTER_NAMES, array_counter_names,
                                         array_counter_values)
from kaleido_hw.engine.pv_buffer import PvOutBuffer, out_beat_layout
from kaleido_hw.engine.pv_layouts import pv_p_word_layout, pv_v_word_layout
from kaleido_hw.engine.pv_sequencer import PvSequencer
from kaleido_hw.engine.shared_arrays import ArrayView, check_shared, folded_array
from kaleido_hw.engine.window_code_unit import WindowCodeUnit, full_limit


__all__ = ["PvEngine", "ERROR_BITS", "COUNTERS", "counter_names", "counters_from_model"]

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
#: Arrays whose counter ports PORT_DOCS describes (``engine_arrays`` is at most 64).
_MAX_ARRAYS = 64


def counter_names(arrays: int) -> tuple:
    """Every counter port of a build with ``arrays`` arrays, without the ``cnt__`` prefix:
    :data:`COUNTERS`, then ``a<k>__<name>`` per array."""
    return array_counter_names(COUNTERS, arrays)


def counters_from_model(model) -> dict:
    """``{counter port name: value}`` of a ``golden.engine.pv.PvCounters`` computed with
    ``arrays`` = the build's ``engine_arrays``, in :func:`counter_names` order: what the
    RTL's ``cnt__*`` ports must show."""
    out = {"cycles": model.cycles, "busy_pe_cycles": model.busy_pe_cycles,
           "issued_a": model.issued[0], "issued_f1": model.issued[1],
           "issued_f2": model.issued[2], "skipped_f1": model.skipped[1],
           "skipped_f2": model.skipped[2], "bubbles": model.bubbles, "blocks": model.blocks,
           "steps": model.steps}
    out.update(array_counter_values(model))
    return out


class PvEngine(wiring.Component):
    """P @ V block top (module docstring).

    Parameters
    ----------
    config : KaleidoConfig
        ``engine_arrays`` (P), ``rows``, ``cols``, ``acc_width``; ``engine_max_tokens``
        bounds the keys (T*H*W) and the queries, ``engine_max_head_dim`` the channels.
    streamed_p : bool
        False (the ``pv_engine`` top): P is written before ``start``. True (inside
        :class:`~kaleido_hw.engine.block_attention.BlockAttention`): P streams in while the run goes, a row block at a time; the
        ``p_blocks`` input says how many row blocks of P are written (their words in any
        order; raised only after a block's last write), the arrays read a row block's units
        only once it is written (waiting, not stepping, until then), and ``p_in`` is ready
        while busy too.
    shared_arrays : bool
        Build no arrays: drive the :class:`~kaleido_hw.engine.shared_arrays.ArrayView`\\ s in
        ``array_views`` (the KaleidoEngine's arrays with the P @ V mode, owned and connected
        by the engine core; needs ``engine_pe = "reuse-pv"``).
    beat_out : bool
        ``o`` gives ``engine_arrays * cols`` channels of one query per beat
        (``pv_buffer.out_beat_layout``: ``values``, ``row``, ``chunk``, ``last``) instead of
        one value (the block output unit's feed, ``block_attention``).
    v_banks : int
        Boxes of V the V memories hold (1..4). With more than one, ``v_in_bank`` names the
        bank ``v_in`` writes and ``v_bank`` (read at ``start``) the one a run reads, and
        ``v_in`` is ready while a run is busy too, for the banks it does not read: the next
        key box's V loads while a block runs (the engine core's double buffering).
    """

    def __init__(self, config: KaleidoConfig, streamed_p: bool = False,
                 shared_arrays: bool = False, beat_out: bool = False, v_banks: int = 1):
        if not isinstance(config, KaleidoConfig):
            raise TypeError(f"PvEngine takes a KaleidoConfig, got {type(config).__name__}")
        if v_banks not in (1, 2, 3, 4):
            raise ConfigError(f"v_banks must be in [1, 4], got {v_banks!r}")
        self.config, self.streamed_p, self.beat_out = config, streamed_p, beat_out
        self.v_banks = v_banks
        R, C = config.rows, config.cols
        self.arrays = config.engine_arrays
        self.max_keys = self.max_queries = config.engine_max_tokens
        self.max_channels = config.engine_max_head_dim
        self.key_width = bits_for(self.max_keys - 1)
        self.nrb_max = -(-self.max_queries // R)
        self.ncb_max = -(-self.max_channels // C)
        #: Column blocks one array holds at most (its V bank's and O banks' depth), and the
        #: bits of an index among them.
        self.ncbl_max = -(-self.ncb_max // self.arrays)
        self.lcb_width = bits_for(self.ncbl_max - 1)
        self.bw = bits_for(max(self.nrb_max, self.ncb_max))
        self.array_views = None
        if shared_arrays:
            check_shared(config, "PvEngine")
            self.array_views = [ArrayView(config, 1 + 2 * self.bw, f"pv_array{a}")
                                for a in range(self.arrays)]
        self.sw = bits_for(self.max_keys)
        self.qw = bits_for(self.max_queries)
        self.cw = bits_for(self.max_channels)
        cfg = wiring.Signature({
            "t": Out(self.sw), "h": Out(self.sw), "w": Out(self.sw), "axis": Out(2),
            "window": Out(2), "queries": Out(self.qw), "channels": Out(self.cw),
            "reuse": Out(1), "full_bits": Out(3), "half_bits": Out(3)})
        super().__init__({
            "p_in": In(stream.Signature(pv_p_word_layout(config))),
            "v_in": In(stream.Signature(pv_v_word_layout(config))),
            "cfg": In(cfg),
            "start": In(1),
            "busy": Out(1),
            "done": Out(1),
            "error": Out(len(ERROR_BITS)),
            "o": Out(stream.Signature(
                out_beat_layout(config.acc_width, self.arrays * C, self.max_queries,
                                self.max_channels, self.arrays, C) if beat_out else
                data.StructLayout({"data": signed(config.acc_width), "last": unsigned(1)}))),
            "cnt": Out(wiring.Signature({
                **{n: Out(_CNT_WIDTH) for n in COUNTERS},
                **{f"a{a}": Out(wiring.Signature({n: Out(_CNT_WIDTH)
                                                  for n in ARRAY_COUNTER_NAMES}))
                   for a in range(self.arrays)}})),
            **({"p_blocks": In(self.bw)} if streamed_p else {}),
            **({"v_in_bank": In(range(v_banks)), "v_bank": In(range(v_banks))}
               if v_banks > 1 else {}),
        })

    PORT_DOCS = {
        "p_in__valid": "P write stream: a word is offered",
        "p_in__ready": "P write stream: accepted (1 unless a run is busy)",
        "p_in__payload": ("P write: rb (row block), key, p (the uint8 P of queries rb*R+i at "
                          "bits [8i, 8i+8), R lanes), LSB first in that order"),
        "v_in__valid": "V write stream: a word is offered",
        "v_in__ready": ("V write stream: accepted (1 unless a run is busy; with v_banks > 1, "
                        "unless a run reads v_in_bank)"),
        "v_in_bank": "V bank v_in writes (v_banks > 1)",
        "v_bank": "V bank a run reads (read at start; v_banks > 1)",
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
        **{f"cnt__a{a}__{n}": f"counter {n} of array {a} in the last run "
           f"(golden.engine.pv.pv_counters: array_{n.split('_')[0]})"
           for a in range(_MAX_ARRAYS) for n in ARRAY_COUNTER_NAMES},
    }

    def elaborate(self, platform):
        m = Module()
        cfgc = self.config
        R, C, P, aw = cfgc.rows, cfgc.cols, self.arrays, cfgc.acc_width
        kw, bw, sw = self.key_width, self.bw, self.sw
        arrays, seqs, codes = [], [], []
        # engine_pe "reuse-pv": the KaleidoEngine's arrays with the P @ V mode folded in run
        # the P @ V steps (every step pv 1), instead of PvArrays.
        array_cls = self._folded() or PvArray
        for a in range(P):
            arrays.append(self.array_views[a] if self.array_views else
                          array_cls(cfgc, tag_width=1 + 2 * bw))
            seqs.append(PvSequencer(R, C, sw, bw, P))
            codes.append(WindowCodeUnit(C))
            if not self.array_views:
                m.submodules[f"array{a}"] = arrays[a]
            m.submodules[f"seq{a}"] = seqs[a]
            m.submodules[f"codes{a}"] = codes[a]

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
        cfg_ncb = Signal(bw)
        m.d.comb += cfg_ncb.eq((cfg.channels + (C - 1)) // C)
        reading = Signal()
        accept = self.start & ~self.busy & ~reading
        # Arrays of the run (array a has column blocks when a < ncb), and those whose last
        # drain wave has left.
        started, ended = Signal(P), Signal(P)
        cnt = self.cnt
        with m.If(accept):
            m.d.sync += [getattr(cnt, n).eq(0) for n in COUNTERS]
            m.d.sync += [getattr(getattr(cnt, f"a{a}"), n).eq(0)
                         for a in range(P) for n in ARRAY_COUNTER_NAMES]
            m.d.sync += cnt.cycles.eq(1)
            with m.If(err != 0):
                m.d.sync += [self.error.eq(err), self.done.eq(1)]
            with m.Else():
                m.d.sync += [
                    self.error.eq(0), self.done.eq(0), self.busy.eq(1),
                    run.t.eq(cfg.t), run.h.eq(cfg.h), run.w.eq(cfg.w),
                    run.hw.eq(cfg.h * cfg.w), run.axis.eq(cfg.axis), run.w3.eq(cfg.window == 3),
                    run.queries.eq(cfg.queries), run.channels.eq(cfg.channels),
                    run.nrb.eq((cfg.queries + (R - 1)) // R),
                    run.ncb.eq(cfg_ncb),
                    run.reuse.eq(cfg.reuse),
                    run.full_limit.eq(full_limit(cfg.full_bits, cfg.window == 3)),
                    run.half_mask.eq(~(Const(0xFF, 8) >> (cfg.half_bits + 1))),
                    started.eq(Cat(*(cfg_ncb > a for a in range(P)))), ended.eq(0),
                ]
        for a, seq in enumerate(seqs):
            m.d.comb += [seq.start.eq(accept & (err == 0) & (cfg_ncb > a)), seq.first_cb.eq(a),
                         seq.p_blocks.eq(self.p_blocks if self.streamed_p else run.nrb),
                         seq.t.eq(run.t), seq.h.eq(run.h), seq.w.eq(run.w), seq.hw.eq(run.hw),
                         seq.axis.eq(run.axis), seq.w3.eq(run.w3), seq.nrb.eq(run.nrb),
                         seq.ncb.eq(run.ncb)]
            with m.If(seq.finished):
                m.d.sync += ended[a].eq(1)
        finished = Signal()
        m.d.comb += finished.eq(self.busy & ((ended | Cat(*(q.finished for q in seqs)))
                                             | ~started).all())

        # -- P and V memories: one write port each (host streams), three read ports per array
        # and per V bank --------------------------------------------------------------------
        pmem = memory.Memory(shape=unsigned(8 * R), depth=self.nrb_max << kw, init=[])
        m.submodules.pmem = pmem
        vmems = [memory.Memory(shape=unsigned(8 * C),
                               depth=(self.ncbl_max << kw) * self.v_banks, init=[])
                 for _ in range(P)]
        for a, vm in enumerate(vmems):
            m.submodules[f"vmem{a}"] = vm
        pw = pmem.write_port()
        vin = self.v_in.payload
        p_open = 1 if self.streamed_p else ~self.busy
        # V bank of the words written, and of the run's reads (the top address bits).
        w_bank, r_bank = [], []
        v_open = ~self.busy
        if self.v_banks > 1:
            run_bank = Signal.like(self.v_bank)
            with m.If(accept):
                m.d.sync += run_bank.eq(self.v_bank)
            w_bank, r_bank = [self.v_in_bank], [run_bank]
            v_open = ~self.busy | (self.v_in_bank != run_bank)
        m.d.comb += [self.p_in.ready.eq(p_open), self.v_in.ready.eq(v_open),
                     pw.en.eq(self.p_in.valid & p_open),
                     pw.addr.eq(Cat(self.p_in.payload.key, self.p_in.payload.rb)),
                     pw.data.eq(self.p_in.payload.p)]
        for a, vm in enumerate(vmems):
            vw = vm.write_port()
            m.d.comb += [vw.en.eq(self.v_in.valid & v_open & (vin.cb % P == a)),
                         vw.addr.eq(Cat(vin.key, self._lcb(vin.cb // P), *w_bank)),
                         vw.data.eq(vin.v)]
        for a, (arr, seq, cu, vm) in enumerate(zip(arrays, seqs, codes, vmems)):
            self._array_path(m, a, arr, seq, cu, pmem, vm, run, r_bank)

        # -- O buffer: the drained outputs in, O out ---------------------------------------------
        m.submodules.obuf = obuf = PvOutBuffer(R, C, aw, self.max_queries, self.max_channels,
                                               bw, P, beat=self.beat_out)
        for a, arr in enumerate(arrays):
            for j in range(C):
                m.d.comb += obuf.drain[a * C + j].eq(arr.drain[j])
        m.d.comb += [obuf.queries.eq(run.queries), obuf.channels.eq(run.channels),
                     obuf.start.eq(finished), reading.eq(obuf.reading)]
        wiring.connect(m, wiring.flipped(self.o), obuf.o)

        # -- end of run, counters -----------------------------------------------------------------
        with m.If(self.busy):
            steps = [seq.step & ~(seq.first & ~seq.issue) for seq in seqs]
            m.d.sync += [cnt.cycles.eq(cnt.cycles + 1),
                         cnt.busy_pe_cycles.eq(cnt.busy_pe_cycles
                                               + sum(arr.busy_count for arr in arrays)),
                         cnt.issued_a.eq(cnt.issued_a + sum(q.inc_issued[0] for q in seqs)),
                         cnt.issued_f1.eq(cnt.issued_f1 + sum(q.inc_issued[1] for q in seqs)),
                         cnt.issued_f2.eq(cnt.issued_f2 + sum(q.inc_issued[2] for q in seqs)),
                         cnt.skipped_f1.eq(cnt.skipped_f1 + sum(q.inc_skip1 for q in seqs)),
                         cnt.skipped_f2.eq(cnt.skipped_f2 + sum(q.inc_skip2 for q in seqs)),
                         cnt.bubbles.eq(cnt.bubbles + sum(q.inc_bubble for q in seqs)),
                         cnt.blocks.eq(cnt.blocks + sum(q.inc_block for q in seqs)),
                         cnt.steps.eq(cnt.steps + sum(steps))]
            for a, arr in enumerate(arrays):
                ac = getattr(cnt, f"a{a}")
                m.d.sync += [ac.busy_pe_cycles.eq(ac.busy_pe_cycles + arr.busy_count),
                             ac.steps.eq(ac.steps + steps[a])]
        with m.If(finished):
            m.d.sync += [self.busy.eq(0), self.done.eq(1)]
        return m

    def _folded(self):
        """The class of the engine's arrays with the P @ V mode that this build runs on
        (``engine_pe = "reuse-pv"``), else None (PvArrays)."""
        return folded_array(self.config)[0] if self.config.engine_pe == "reuse-pv" else None

    def _lcb(self, cb):
        """A column block's index in its array's V bank, exactly ``lcb_width`` bits wide (the
        bank bits of the address follow it)."""
        lk = self.lcb_width
        return cb[:lk] if len(cb) >= lk else Cat(cb, Const(0, lk - len(cb)))

    def _array_path(self, m, a, arr, seq, cu, pmem, vmem, run, v_bank=()):
        """Array ``a``'s reads of P and of its V bank, the window codes and work bits of the
        fetched unit, the unit registers and the register stage in front of the array."""
        R, C = self.config.rows, self.config.cols
        kw, sw = self.key_width, self.sw
        preads = [pmem.read_port(domain="sync", transparent_for=()) for _ in range(3)]
        vreads = [vmem.read_port(domain="sync", transparent_for=()) for _ in range(3)]
        for k in range(3):
            tok = Signal(sw, name=f"a{a}_rd_tok{k}")
            m.d.comb += tok.eq(seq.rd_tok0 + k * seq.rd_stride)
            m.d.comb += [preads[k].en.eq(seq.rd_en), vreads[k].en.eq(seq.rd_en),
                         preads[k].addr.eq(Cat(tok[:kw], seq.rd_rb)),
                         vreads[k].addr.eq(Cat(tok[:kw], self._lcb(seq.rd_cb), *v_bank))]
        read_present = Signal(2, name=f"a{a}_rd_present")
        with m.If(seq.rd_en):
            m.d.sync += read_present.eq(Cat(seq.rd_present1, seq.rd_present2))

        # -- fetch registers (the sequencer's stage 1): a unit's P and V words as read, so
        # that the memories' clock-to-output and the window codes are not one path ---------
        fetch_p = [Signal(8 * R, name=f"a{a}_f_p{k}") for k in range(3)]
        fetch_v = [Signal(8 * C, name=f"a{a}_f_v{k}") for k in range(3)]
        present = Signal(2, name=f"a{a}_present")
        with m.If(seq.load1):
            m.d.sync += [present.eq(read_present)]
            m.d.sync += [fetch_p[k].eq(preads[k].data) for k in range(3)]
            m.d.sync += [fetch_v[k].eq(vreads[k].data) for k in range(3)]

        # -- the fetched unit: codes and the work bits of its block's real columns ----------
        cvalid = Signal(C, name=f"a{a}_cvalid")
        m.d.comb += cvalid.eq(Cat(*((seq.f_cb * C + j) < run.channels for j in range(C))))
        m.d.comb += [cu.m0.eq(fetch_v[0]), cu.m1.eq(fetch_v[1]),
                     cu.m2.eq(fetch_v[2]), cu.present1.eq(present[0]),
                     cu.present2.eq(present[1]), cu.w3.eq(run.w3), cu.reuse.eq(run.reuse),
                     cu.full_limit.eq(run.full_limit), cu.half_mask.eq(run.half_mask),
                     seq.work1.eq((cu.work1 & cvalid).any()),
                     seq.work2.eq((cu.work2 & cvalid).any())]

        # -- unit registers: the current unit's operands and codes, loaded at ``take`` -------
        # (the sequencer's work bits are registered with them), so that the memories' read
        # and the window codes end in registers: the read ports move on to the next unit
        # while this one's steps run. An absent member's word was never written (X in a
        # 4-state simulator): it is zeroed, as its P lanes, so that no product ever sees it
        # (even 0 * X is X there).
        unit_row = [[Signal(8, name=f"a{a}_u_p{k}_{i}") for k in range(3)] for i in range(R)]
        unit_row_valid = Signal(R, name=f"a{a}_u_rvalid")
        unit_col = [[Signal(8, name=f"a{a}_u_v{k}_{j}") for k in range(3)] for j in range(C)]
        unit_codes = [[Signal(2, name=f"a{a}_u_c{k}_{j}") for k in (1, 2)] for j in range(C)]
        unit_col_valid = Signal(C, name=f"a{a}_u_cvalid")
        with m.If(seq.take):
            for i in range(R):
                lanes = [fetch_p[k][8 * i:8 * i + 8] for k in range(3)]
                m.d.sync += [unit_row[i][0].eq(lanes[0]),
                             unit_row[i][1].eq(Mux(present[0], lanes[1], 0)),
                             unit_row[i][2].eq(Mux(present[1], lanes[2], 0)),
                             unit_row_valid[i].eq((seq.f_rb * R + i) < run.queries)]
            for j in range(C):
                lanes = [fetch_v[k][8 * j:8 * j + 8] for k in range(3)]
                m.d.sync += [unit_col[j][0].eq(lanes[0]),
                             unit_col[j][1].eq(Mux(present[0], lanes[1], 0)),
                             unit_col[j][2].eq(Mux(present[1], lanes[2], 0)),
                             unit_codes[j][0].eq(cu.c1[2 * j:2 * j + 2]),
                             unit_codes[j][1].eq(cu.c2[2 * j:2 * j + 2])]
            m.d.sync += unit_col_valid.eq(cvalid)

        # -- the array, behind one register stage ---------------------------------------------
        # The step (the unit's rows and columns with their codes, the mode, the tag) is
        # registered before the array, so that the sequencer's step decision and the array's
        # column decode and multiply are not one path; every step reaches the array one
        # cycle after the sequencer presents it (``PvTiming.load_base`` = 5).
        folded = self._folded()
        for i in range(R):
            row = arr.row[i]
            if folded:
                # A P @ V step of the folded array: p0 in ``a``, the kind in the pass field,
                # p1 in its P1_FIELD (the matcher's ``a1``, or ``p1``).
                p0, p1, kind = row.a, getattr(row, folded.P1_FIELD), row.mode.pass_idx
                m.d.sync += row.pv.eq(1)
            else:
                p0, p1, kind = row.p0, row.p1, row.mode.kind
            m.d.sync += [p0.eq(unit_row[i][0]), p1.eq(unit_row[i][1]),
                         row.p2.eq(unit_row[i][2]), row.valid.eq(unit_row_valid[i]),
                         kind.eq(seq.kind),
                         row.mode.first.eq(seq.step & seq.first),
                         row.mode.issue.eq(seq.step & seq.issue)]
        for j in range(C):
            col = arr.col[j]
            v0, c1 = (col.b, col.kc) if folded else (col.v0, col.c1)
            m.d.sync += [v0.eq(unit_col[j][0]), col.v1.eq(unit_col[j][1]),
                         col.v2.eq(unit_col[j][2]), c1.eq(unit_codes[j][0]),
                         col.c2.eq(unit_codes[j][1]), col.valid.eq(unit_col_valid[j])]
        m.d.sync += arr.tag.eq(Cat(seq.tag_valid, seq.tag_rb, seq.tag_cb))
