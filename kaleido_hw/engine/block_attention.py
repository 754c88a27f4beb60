"""One key block of attention by key blocks on the P @ V arrays: the datapath of the engine
core's COMPUTE kind 2 after its S (``docs/engine.md``, "Attention commands";
``docs/vector.md``, "The head on the engine core", steps 2, 4 and 5).

:class:`BlockAttention` takes the S block of a (query box, key box) pair row by row and
keeps, per query row of the box, section 15's running state (``docs/numerics.md``):

1. **softmax** (:class:`~kaleido_hw.vector.block_softmax.BlockSoftmaxUnit`): each row of S
   (the box's ``n`` keys, padding keys given as the most negative score, so that their P is
   0 and the maximum is the real keys') against the row's running maximum: P (uint8), the
   rescale factor F of the row's output, the row's new weight L;
2. **P to the arrays** (:class:`~kaleido_hw.engine.p_transposer.PTransposer`): P's rows
   into row-block words written into P @ V's P memory, while
3. **P @ V** (:class:`~kaleido_hw.engine.pv_engine.PvEngine`, V of the key box written
   beforehand through ``v_in``, V reuse by the window rule) runs a row block behind; its
   drained outputs leave as beats of ``P * C`` channels of one query;
4. **output** (:class:`~kaleido_hw.vector.block_output.BlockOutputUnit`): each beat with
   its row's F (a FIFO of the rows' F, in row order, as the softmax gave them) rescales and
   adds into the query box's O; after the box's ``last`` block every row is finished with
   its weight (a second FIFO) and O leaves on ``out``, a row at a time.

A run is one block (``start`` with ``first`` / ``last``); the box's rows keep their state
between runs. ``done`` (a level until the next ``start``) once the block's partial outputs
are in the output unit and, after a ``last`` block, O has left. The arrays are the
PvEngine's own, or (``shared_arrays``) the engine's with the P @ V mode, which the caller
connects (``array_views``).

Numerics: :func:`golden.vector.online.online_block` per block,
:func:`~golden.vector.online.online_finish` after the last, on P @ V_eff of the key box as
a grid of its own: COMPUTE kind 2 of ``golden.engine.program``. Requires ``vector_lanes ==
engine_arrays * cols`` (a P @ V beat is an output-unit beat) and ``vector_max_row >=
engine_max_tokens``.
"""

from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from kaleido_hw.config import ConfigError, KaleidoConfig
from kaleido_hw.engine.p_transposer import ERROR_BITS as P_ERROR_BITS
from kaleido_hw.engine.p_transposer import PTransposer, p_blocks_written
from kaleido_hw.engine.pv_engine import ERROR_BITS as PV_ERROR_BITS
from kaleido_hw.engine.pv_engine import PvEngine
from kaleido_hw.engine.pv_layouts import pv_v_word_layout
from kaleido_hw.vector.block_output import BlockOutputUnit
from kaleido_hw.vector.block_softmax import BlockSoftmaxUnit
from kaleido_hw.vector.layouts import (EXP_WIDTH, MULT_BITS, SHIFT_BITS, WEIGHT_BITS,
                                       output_beat_layout, score_beat_layout)


__all__ = ["BlockAttention", "check_block_attention_config"]

_CNT_WIDTH = 40


def check_block_attention_config(config: KaleidoConfig) -> None:
    """Reject a configuration :class:`BlockAttention` cannot be built from."""
    lanes = config.engine_arrays * config.cols
    if config.vector_lanes != lanes:
        raise ConfigError(f"block attention needs vector_lanes = engine_arrays * cols = "
                          f"{lanes} (a P @ V beat is an output beat), got vector_lanes = "
                          f"{config.vector_lanes}")
    if config.vector_max_row < config.engine_max_tokens:
        raise ConfigError(f"block attention needs vector_max_row >= engine_max_tokens (a row "
                          f"of an S block is a box's keys), got vector_max_row = "
                          f"{config.vector_max_row} and engine_max_tokens = "
                          f"{config.engine_max_tokens}")


def _port_docs() -> dict:
    """Port meanings: P @ V's V stream and counters under this block's names, and its own."""
    docs = {}
    for name, text in PvEngine.PORT_DOCS.items():
        group, _, rest = name.partition("__")
        if group == "v_in":
            docs[name] = text
        elif group == "cnt":
            docs[f"cnt__pv__{rest}"] = "P @ V: " + text
        elif group == "cfg" and rest not in ("queries",):
            docs[name] = ("the key box: " if rest in ("t", "h", "w") else "V: ") + text
    docs.update({
        "s__valid": "S rows: a beat is offered",
        "s__ready": "S rows: the softmax takes it (only while a block runs)",
        "s__payload": ("S beat: vector_lanes scores (signed vector_score_bits; padding keys "
                       "the most negative), tail (last valid lane of a last beat), last (the "
                       "row's end), mult and shift (ignored: cfg's)"),
        "cfg__mult": "softmax scale multiplier, in [2^15, 2^16) (golden.vector.softmax_scale)",
        "cfg__shift": "softmax scale shift, in [1, 47]",
        "cfg__v_bank": "V bank the block reads (v_banks > 1)",
        "v_in_bank": "V bank v_in writes (v_banks > 1)",
        "start": "pulse: run one key block (taken when idle)",
        "first": "with start: the query box's first key block (its rows' state starts afresh)",
        "last": "with start: its last key block (O of the box leaves on out after it)",
        "busy": "a block is in progress",
        "done": "the last block ended (after a last block: O has left); cleared by start",
        "out__valid": "O: a beat is offered (after a last block)",
        "out__ready": "O: the consumer takes it",
        "out__payload": ("O beat: vector_lanes int16 values (8 fractional bits, V's units), "
                         "row, chunk, last (the row's last chunk)"),
        "error__p": "the P transposer's sticky bits (PTransposer ERROR_BITS)",
        "error__softmax": "the block softmax unit's sticky overflow",
        "error__pv": "P @ V's rejected-start bits (pv_engine ERROR_BITS)",
        "error__weight": "the block output unit's sticky bad-weight flag",
        "cnt__cycles": "cycles of the last block, from start to the cycle done was set",
    })
    return docs


class BlockAttention(wiring.Component):
    """Section 15 of one key block on the P @ V arrays (module docstring).

    Parameters
    ----------
    config : KaleidoConfig
        ``engine_arrays`` x (``rows`` x ``cols``) arrays, ``engine_max_tokens`` (the box:
        queries and keys of a block), ``engine_max_head_dim``, ``acc_width``, the vector
        unit's ``vector_lanes`` (= ``engine_arrays * cols``), ``vector_max_row``,
        ``vector_score_bits``, ``vector_row_buffers``.
    shared_arrays : bool
        P @ V on ``array_views`` (the engine's arrays with the P @ V mode; needs
        ``engine_pe = "reuse-pv"``) instead of arrays of its own.
    v_banks : int
        Key boxes of V held (``PvEngine``'s ``v_banks``): with more than one, ``v_in_bank``
        names the bank ``v_in`` writes and ``cfg.v_bank`` the one a block reads, and V of the
        next key box may be written while a block runs on another bank.

    Ports
    -----
    ``s`` (in stream, ``score_beat_layout``): the block's rows of S, query 0 first, each
    ``ceil(n / vector_lanes)`` beats (``last``, ``tail``; ``mult``/``shift`` ignored: the
    ``cfg``'s are used), n = t*h*w keys in box-local order. ``v_in``: ``pv_engine``'s V write
    stream (while idle): the key box's V. ``cfg`` (stable from ``start`` to ``done``): the
    box ``t``, ``h``, ``w``, ``channels`` (head_dim), the softmax ``mult``/``shift``, V's
    ``axis``, ``window``, ``reuse``, ``full_bits``, ``half_bits``. ``start`` (pulse, taken
    when idle) with ``first`` (the query box's first block) and ``last`` (its last).
    A row beyond the block's n is not taken (it waits for the next run).
    ``busy``; ``done``. ``out`` (out stream, ``output_beat_layout``): after a ``last`` block,
    O of the box's rows, ``ceil(engine_max_head_dim / vector_lanes)`` beats a row (channels
    past ``channels`` 0), rows in order.
    ``error``: ``p`` the transposer's bits, ``softmax`` the unit's sticky overflow, ``pv``
    P @ V's rejected-start bits, ``weight`` the output unit's bad-weight flag. ``cnt``:
    ``cycles`` of the last run (``start`` to ``done``) and P @ V's counters.
    """

    PORT_DOCS = _port_docs()

    def __init__(self, config: KaleidoConfig, shared_arrays: bool = False, v_banks: int = 1):
        if not isinstance(config, KaleidoConfig):
            raise TypeError(f"BlockAttention takes a KaleidoConfig, got {type(config).__name__}")
        check_block_attention_config(config)
        self.config = config
        self.softmax = BlockSoftmaxUnit(config)
        self.transposer = PTransposer(config)
        self.pv = PvEngine(config, streamed_p=True, shared_arrays=shared_arrays, beat_out=True,
                           v_banks=v_banks)
        banked = {"v_bank": Out(range(v_banks))} if v_banks > 1 else {}
        self.output = BlockOutputUnit(config)
        self.array_views = self.pv.array_views
        pv = self.pv.signature.members
        pv_cfg = pv["cfg"].signature.members
        super().__init__({
            "s": In(stream.Signature(score_beat_layout(config))),
            "v_in": In(stream.Signature(pv_v_word_layout(config))),
            "cfg": In(wiring.Signature({
                **{name: Out(pv_cfg[name].shape) for name in
                   ("t", "h", "w", "channels", "axis", "window", "reuse", "full_bits",
                    "half_bits")},
                "mult": Out(MULT_BITS), "shift": Out(SHIFT_BITS), **banked})),
            **({"v_in_bank": In(range(v_banks))} if v_banks > 1 else {}),
            "start": In(1), "first": In(1), "last": In(1),
            "busy": Out(1), "done": Out(1),
            "out": Out(stream.Signature(output_beat_layout(config))),
            "error": Out(wiring.Signature({
                "p": Out(len(P_ERROR_BITS)), "softmax": Out(1), "pv": Out(len(PV_ERROR_BITS)),
                "weight": Out(1)})),
            "cnt": Out(wiring.Signature({"cycles": Out(_CNT_WIDTH), "pv": pv["cnt"]})),
        })

    def elaborate(self, platform):
        m = Module()
        cfg_k = self.config
        sm, tr, pv, bo = self.softmax, self.transposer, self.pv, self.output
        m.submodules.softmax, m.submodules.transposer = sm, tr
        m.submodules.pv, m.submodules.output = pv, bo
        n_max = cfg_k.engine_max_tokens
        m.submodules.factors = factors = fifo.SyncFIFOBuffered(width=EXP_WIDTH, depth=n_max)
        m.submodules.weights = weights = fifo.SyncFIFOBuffered(width=WEIGHT_BITS, depth=n_max)
        cfg = self.cfg

        n = Signal(len(pv.cfg.queries))              # keys of a block = queries of the box
        m.d.comb += [n.eq(cfg.t * cfg.h * cfg.w),
                     tr.cfg.keys.eq(n), tr.cfg.queries.eq(n),
                     pv.cfg.queries.eq(n),
                     *(getattr(pv.cfg, f).eq(getattr(cfg, f)) for f in
                       ("t", "h", "w", "channels", "axis", "window", "reuse", "full_bits",
                        "half_bits"))]
        wiring.connect(m, wiring.flipped(self.v_in), pv.v_in)
        if pv.v_banks > 1:
            m.d.comb += [pv.v_in_bank.eq(self.v_in_bank), pv.v_bank.eq(cfg.v_bank)]
        wiring.connect(m, tr.o, pv.p_in)
        wiring.connect(m, wiring.flipped(self.out), bo.out)
        wiring.connect(m, pv.cnt, wiring.flipped(self.cnt.pv))
        m.d.comb += [self.error.p.eq(tr.error), self.error.softmax.eq(sm.overflow),
                     self.error.pv.eq(pv.error), self.error.weight.eq(bo.bad_weight)]

        first, last = Signal(), Signal()             # the run's flags
        stage = Signal(2)        # 0 idle, 1 softmax + P @ V, 2 partials in, 3 O out
        # -- S rows into the softmax, with the run's row index, first flag and scale -------
        row = Signal(range(n_max + 1))
        s_in = sm.s.payload
        # The block's n rows only: a beat past them waits for the next run.
        taking = (stage == 1) & (row < n)
        m.d.comb += [sm.s.valid.eq(self.s.valid & taking),
                     self.s.ready.eq(sm.s.ready & taking),
                     s_in.scores.eq(self.s.payload.scores), s_in.tail.eq(self.s.payload.tail),
                     s_in.last.eq(self.s.payload.last), s_in.mult.eq(cfg.mult),
                     s_in.shift.eq(cfg.shift), s_in.row.eq(row), s_in.first.eq(first)]
        with m.If(sm.s.valid & sm.s.ready & self.s.payload.last):
            m.d.sync += row.eq(row + 1)

        # -- P to the transposer; each row's F (and after the last block its weight) to the
        # FIFOs at the row's last beat -------------------------------------------------------
        p_out = sm.p.payload
        row_end = p_out.last
        m.d.comb += [tr.p.payload.p.eq(p_out.p), tr.p.payload.tail.eq(p_out.tail),
                     tr.p.payload.last.eq(row_end),
                     tr.p.valid.eq(sm.p.valid & factors.w_rdy & weights.w_rdy),
                     sm.p.ready.eq(tr.p.ready & factors.w_rdy & weights.w_rdy),
                     factors.w_data.eq(p_out.factor), weights.w_data.eq(p_out.weight)]
        took = sm.p.valid & sm.p.ready & row_end
        m.d.comb += [factors.w_en.eq(took), weights.w_en.eq(took & last)]
        p_rows = p_blocks_written(m, pv, tr.done, n)

        # -- P @ V's beats, with their row's F, into the output unit ------------------------
        # Beats per row: P @ V's and the output unit's, ceil(engine_max_head_dim / lanes)
        # whatever the run's channels (those past them are zeros).
        chunks = -(-cfg_k.engine_max_head_dim // cfg_k.vector_lanes)
        beat = pv.o.payload
        o_in = bo.o.payload
        m.d.comb += [o_in.values.eq(beat.values), o_in.row.eq(beat.row),
                     o_in.chunk.eq(beat.chunk), o_in.first.eq(first),
                     o_in.factor.eq(factors.r_data),
                     bo.o.valid.eq(pv.o.valid & factors.r_rdy),
                     pv.o.ready.eq(bo.o.ready & factors.r_rdy),
                     factors.r_en.eq(bo.o.valid & bo.o.ready & (beat.chunk == chunks - 1))]
        partials_in = Signal()                       # P @ V's last beat is in the output unit
        with m.If(pv.o.valid & pv.o.ready & beat.last):
            m.d.sync += partials_in.eq(1)

        # -- after the last block: each row's finish request with its weight, in order; the
        # rows' O beats counted out -----------------------------------------------------------
        fin_row = Signal(range(n_max + 1))
        out_left = Signal(range(n_max * chunks + 1))
        m.d.comb += [bo.fin.payload.row.eq(fin_row), bo.fin.payload.weight.eq(weights.r_data),
                     bo.fin.valid.eq((stage == 3) & weights.r_rdy & (fin_row < n)),
                     weights.r_en.eq(bo.fin.valid & bo.fin.ready)]
        with m.If(bo.fin.valid & bo.fin.ready):
            m.d.sync += fin_row.eq(fin_row + 1)
        with m.If(self.out.valid & self.out.ready):
            m.d.sync += out_left.eq(out_left - 1)

        cnt = self.cnt
        with m.If(self.busy):
            m.d.sync += cnt.cycles.eq(cnt.cycles + 1)
        with m.If(stage == 0):
            with m.If(self.start):
                m.d.comb += [tr.start.eq(1), pv.start.eq(1)]
                m.d.sync += [stage.eq(1), self.busy.eq(1), self.done.eq(0), first.eq(self.first),
                             last.eq(self.last), row.eq(0), p_rows.eq(0), partials_in.eq(0),
                             cnt.cycles.eq(1)]
        with m.Elif(stage == 1):
            # Softmax into P alongside P @ V, to P @ V's end (at once if it rejected the
            # start: then nothing is read out and the run ends).
            with m.If(tr.done & pv.done):
                with m.If(pv.error != 0):
                    m.d.sync += [stage.eq(0), self.busy.eq(0), self.done.eq(1)]
                with m.Else():
                    m.d.sync += stage.eq(2)
        with m.Elif(stage == 2):
            # P @ V's beats into the output unit, to the last one.
            with m.If(partials_in):
                with m.If(last):
                    m.d.sync += [stage.eq(3), fin_row.eq(0), out_left.eq(n * chunks)]
                with m.Else():
                    m.d.sync += [stage.eq(0), self.busy.eq(0), self.done.eq(1)]
        with m.Else():
            with m.If((fin_row == n) & (out_left == 0)):
                m.d.sync += [stage.eq(0), self.busy.eq(0), self.done.eq(1)]
        return m
