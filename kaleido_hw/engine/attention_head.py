"""A whole attention head in RTL: ``O = softmax(Q K^T * scale) @ V`` with S kept on chip.

:class:`AttentionHead` chains the blocks that exist (issue 16, item 4):

1. **S** on the :class:`~kaleido_hw.engine.kaleido_engine.KaleidoEngine` (P arrays of ReusePEs
   with the dispatcher): the host writes Q and K into its memories (``wr``), ``start`` runs
   it; S stays in its accumulation buffer;
2. **softmax**: the engine's S read-out streams, row by row, through the
   :class:`~kaleido_hw.engine.s_row_packer.SRowPacker` (two-value beats to rows of
   ``vector_lanes`` scores) into the :class:`~kaleido_hw.vector.softmax_unit.SoftmaxUnit`,
   whose rows of P the :class:`~kaleido_hw.engine.p_transposer.PTransposer` turns into
   row-block words written straight into ``pv_engine``'s P memory;
3. **P @ V** on the :class:`~kaleido_hw.engine.pv_engine.PvEngine` (its own P arrays in P @ V
   mode, V window reuse); V is written beforehand through ``v_in``; O leaves on ``o``.

S never crosses the chip's boundary: it goes from the accumulation buffer through the vector
unit into the P memory. S runs first; then the softmax stage and P @ V run together: P @ V
starts with the S read-out and walks P a row block at a time (row blocks outermost), each
row block once the transposer has written its last word (``pv_engine``'s ``p_blocks``), so
the softmax stage hides behind P @ V but for about its first row block. Each stage's cycles
are counted. Not yet the engine core's command sequence (its P @ V is not a core command,
issue 13): this is the top that chains the engine, the vector unit and P @ V. The blocks'
own models are exact: ``engine_counters``; ``pv_counters`` for every P @ V counter, its
cycles given the cycle each row block of P was written (``p_ready``). The softmax stage's
own timing, and so when P arrives, is measured, not modelled.

Numerics: ``golden.vector.softmax_int(S, mult, shift)`` then
``golden.vector.attention_int(P, V_eff)``, bit-exact (``docs/numerics.md`` section 14).
"""

from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.kaleido_engine import KaleidoEngine
from kaleido_hw.engine.p_transposer import PTransposer, p_blocks_written
from kaleido_hw.engine.p_transposer import ERROR_BITS as P_ERROR_BITS
from kaleido_hw.engine.pv_engine import PvEngine
from kaleido_hw.engine.pv_layouts import pv_v_word_layout
from kaleido_hw.engine.s_row_packer import SRowPacker
from kaleido_hw.engine.shared_arrays import folded_array, share_array
from kaleido_hw.engine.s_row_packer import ERROR_BITS as S_ERROR_BITS
from kaleido_hw.vector.layouts import MULT_BITS, SHIFT_BITS
from kaleido_hw.vector.softmax_unit import SoftmaxUnit


__all__ = ["AttentionHead", "STAGE_COUNTERS", "check_head_config"]

#: Cycle counters of a run: the whole run and each stage (S on the engine; the S read-out
#: through the vector unit into the P memory; P @ V to its ``done``, alongside the softmax
#: stage: ``cycles = s_cycles + max(softmax_cycles, pv_cycles) + 1``).
STAGE_COUNTERS = ("cycles", "s_cycles", "softmax_cycles", "pv_cycles")
_CNT_WIDTH = 40


def check_head_config(config: KaleidoConfig) -> None:
    """Reject a configuration whose rows of S do not fit the vector unit's row buffer."""
    if config.engine_max_tokens > config.vector_max_row:
        raise ValueError(
            f"attention_head needs vector_max_row >= engine_max_tokens (a row of S is one "
            f"head's keys), got vector_max_row = {config.vector_max_row} and "
            f"engine_max_tokens = {config.engine_max_tokens}")


#: Engine configuration bits this top ties off: S only (a linear block has no softmax).
_ENGINE_CFG_TIED = ("linear",)


def _port_docs() -> dict:
    """The engine's and P @ V's port meanings under this top's names, and its own."""
    docs = {}
    for name, text in KaleidoEngine.PORT_DOCS.items():
        group, _, rest = name.partition("__")
        if group == "wr":
            docs[name] = text
        elif group == "cnt" or (group == "cfg" and rest not in _ENGINE_CFG_TIED):
            docs[f"{group}__s__{rest}"] = "S (engine): " + text
    for name, text in PvEngine.PORT_DOCS.items():
        group, _, rest = name.partition("__")
        if group in ("v_in", "o"):
            docs[name] = text
        elif group == "cfg":
            docs[f"cfg__v__{rest}"] = "P @ V: " + text
        elif group == "cnt":
            docs[f"cnt__pv__{rest}"] = "P @ V: " + text
    docs.update({
        "cfg__mult": "softmax scale multiplier, in [2^15, 2^16) (golden.vector.softmax_scale)",
        "cfg__shift": "softmax scale shift, in [1, 47]",
        "start": ("pulse: run the head (ignored while busy and until the last run's O has "
                  "left: its value with last taken)"),
        "busy": "a run is in progress (S, then softmax into P alongside P @ V)",
        "done": ("the last run ended (O streams on o; with error__s or error__pv != 0 it "
                 "stopped there); cleared by start"),
        "error__s": "the engine's rejected-start bits (kaleido_engine ERROR_BITS); 0: S ran",
        "error__score": "a score did not fit vector_score_bits (SRowPacker ERROR_BITS)",
        "error__p": "the P transposer's bits (PTransposer ERROR_BITS: row_length, cfg)",
        "error__softmax": "the vector unit's sticky overflow (a row past vector_max_row)",
        "error__pv": "P @ V's rejected-start bits (pv_engine ERROR_BITS); 0: P @ V ran",
        "cnt__cycles": "cycles of the last run, from start to the cycle done was set",
        "cnt__s_cycles": "of which S on the engine (start to the engine's done), first",
        "cnt__softmax_cycles": ("the S read-out through the vector unit into the P memory "
                                "(the engine's done to the transposer's), alongside P @ V"),
        "cnt__pv_cycles": ("P @ V, from its start with the softmax stage to its done "
                           "(cycles = s_cycles + max(softmax_cycles, pv_cycles) + 1)"),
    })
    return docs


class AttentionHead(wiring.Component):
    """Q, K, V in; O out: the KaleidoEngine, the softmax unit and P @ V, chained on chip.

    Parameters
    ----------
    config : KaleidoConfig
        The engine's parameters (``engine_arrays``, ``rows``, ``cols``, ``engine_max_tokens``,
        ``engine_max_head_dim``, ``engine_dispatcher``, ...), the vector unit's
        (``vector_lanes``, ``vector_max_row`` >= ``engine_max_tokens``, ``vector_score_bits``,
        ``vector_row_buffers``); P @ V runs on ``engine_arrays`` arrays of ``rows`` x ``cols``:
        its own PvArrays, or with ``engine_pe = "reuse-pv"`` the engine's arrays (with the
        P @ V mode), which S and P @ V then share
        (:mod:`kaleido_hw.engine.shared_arrays`).

    Ports
    -----
    ``wr``: the engine's Q/K write port (while idle). ``v_in``: ``pv_engine``'s V write
    stream (while idle). ``cfg`` (valid from ``start`` to ``done``): ``s``, the engine's
    run configuration (grid, head_dim, groups, directions, thresholds, reuse, schedule,
    match); ``v``, V's reuse (``axis``, ``window``, ``reuse``, ``full_bits``, ``half_bits``);
    ``mult``/``shift``, the softmax scale (``golden.vector.softmax_scale``). ``start``
    (pulse; ignored while busy and until the last run's O has left), ``busy``, ``done`` (the
    run ended; O streams on ``o``, row-major, ``last`` on the final value). ``error``: ``s`` the engine's rejected-start bits, ``score``
    a score past ``vector_score_bits``, ``p`` the transposer's bits, ``softmax`` the vector
    unit's sticky overflow, ``pv`` P @ V's rejected-start bits. ``cnt``: ``STAGE_COUNTERS``
    plus the engine's (``s``) and P @ V's (``pv``) own counters.
    """

    PORT_DOCS = _port_docs()

    def __init__(self, config: KaleidoConfig):
        if not isinstance(config, KaleidoConfig):
            raise TypeError(f"AttentionHead takes a KaleidoConfig, got {type(config).__name__}")
        check_head_config(config)
        self.config = config
        # engine_pe "reuse-pv": one set of arrays (with the P @ V mode) for S and P @ V.
        shared = config.engine_pe == "reuse-pv"
        self.engine = KaleidoEngine(config, shared_arrays=shared)
        self.packer = SRowPacker(config)
        self.softmax = SoftmaxUnit(config)
        self.transposer = PTransposer(config)
        self.pv = PvEngine(config, streamed_p=True, shared_arrays=shared)
        self.arrays = []
        if shared:
            cls, _, _ = folded_array(config)
            tag_width = max(self.engine.array_views[0].tag_width,
                            self.pv.array_views[0].tag_width)
            self.arrays = [cls(config, tag_width=tag_width) for _ in range(config.engine_arrays)]
        eng, pv = self.engine.signature.members, self.pv.signature.members
        pv_cfg = pv["cfg"].signature.members
        super().__init__({
            "wr": eng["wr"],
            "v_in": In(stream.Signature(pv_v_word_layout(config))),
            "cfg": In(wiring.Signature({
                "s": Out(wiring.Signature({
                    name: member for name, member in eng["cfg"].signature.flip().members.items()
                    if name not in _ENGINE_CFG_TIED})),
                "v": Out(wiring.Signature({name: Out(pv_cfg[name].shape) for name in
                                           ("axis", "window", "reuse", "full_bits",
                                            "half_bits")})),
                "mult": Out(MULT_BITS), "shift": Out(SHIFT_BITS)})),
            "start": In(1),
            "busy": Out(1),
            "done": Out(1),
            "error": Out(wiring.Signature({
                "s": Out(len(self.engine.error)), "score": Out(len(S_ERROR_BITS)),
                "p": Out(len(P_ERROR_BITS)), "softmax": Out(1), "pv": Out(len(self.pv.error))})),
            "o": pv["o"],
            "cnt": Out(wiring.Signature({
                **{name: Out(_CNT_WIDTH) for name in STAGE_COUNTERS},
                "s": eng["cnt"], "pv": pv["cnt"]})),
        })

    def elaborate(self, platform):
        m = Module()
        eng, pk, sm, tr, pv = self.engine, self.packer, self.softmax, self.transposer, self.pv
        m.submodules.engine = eng
        m.submodules.packer = pk
        m.submodules.softmax = sm
        m.submodules.transposer = tr
        m.submodules.pv = pv
        cfg = self.cfg

        wiring.connect(m, wiring.flipped(self.wr), eng.wr)
        wiring.connect(m, wiring.flipped(self.v_in), pv.v_in)
        wiring.connect(m, eng.s, pk.s)
        wiring.connect(m, pk.o, sm.s)
        wiring.connect(m, sm.p, tr.p)
        wiring.connect(m, tr.o, pv.p_in)
        wiring.connect(m, pv.o, wiring.flipped(self.o))
        for name in eng.cfg.signature.members:
            m.d.comb += getattr(eng.cfg, name).eq(
                0 if name in _ENGINE_CFG_TIED else getattr(cfg.s, name))
        wiring.connect(m, eng.cnt, wiring.flipped(self.cnt.s))
        wiring.connect(m, pv.cnt, wiring.flipped(self.cnt.pv))

        n = Signal(len(pv.cfg.queries))            # tokens of the head: keys = queries
        m.d.comb += [n.eq(cfg.s.t * cfg.s.h * cfg.s.w),
                     pk.cfg.keys.eq(n), pk.cfg.mult.eq(cfg.mult), pk.cfg.shift.eq(cfg.shift),
                     tr.cfg.keys.eq(n), tr.cfg.queries.eq(n),
                     pv.cfg.t.eq(cfg.s.t), pv.cfg.h.eq(cfg.s.h), pv.cfg.w.eq(cfg.s.w),
                     pv.cfg.queries.eq(n), pv.cfg.channels.eq(cfg.s.head_dim),
                     *(getattr(pv.cfg, f).eq(getattr(cfg.v, f))
                       for f in ("axis", "window", "reuse", "full_bits", "half_bits"))]
        m.d.comb += [self.error.score.eq(pk.error), self.error.p.eq(tr.error),
                     self.error.softmax.eq(sm.overflow)]

        # Row blocks of P written so far: P @ V reads a row block once its last word is in;
        # once the transposer is done (also after an error), every row block is open, so
        # that P @ V always ends.
        p_rows = p_blocks_written(m, pv, tr.done, n)

        cnt = self.cnt
        with m.If(self.busy):
            m.d.sync += cnt.cycles.eq(cnt.cycles + 1)
        # One stage register, no FSM: Verilator's -Wall wants every case of a state switch.
        stage = Signal(2)                  # 0 idle, 1 S, 2 softmax into P alongside P @ V
        # Shared arrays: the engine's steps until its run has ended (with its last drain
        # wave, before stage 2), P @ V's from then on.
        for a, arr in enumerate(self.arrays):
            m.submodules[f"array{a}"] = arr
            share_array(m, arr, [eng.array_views[a], pv.array_views[a]], stage == 2)
        # O of the last run still streaming out: pv_engine would ignore a start (and the
        # transposer must not overwrite its P memory), so the head ignores one too.
        o_pending = Signal()
        with m.If(self.o.valid & self.o.ready & self.o.payload.last):
            m.d.sync += o_pending.eq(0)
        with m.If(stage == 0):
            with m.If(self.start & ~o_pending):
                m.d.comb += eng.start.eq(1)
                m.d.sync += [stage.eq(1), self.busy.eq(1), self.done.eq(0), self.error.s.eq(0),
                             self.error.pv.eq(0), cnt.cycles.eq(1), cnt.s_cycles.eq(1),
                             cnt.softmax_cycles.eq(0), cnt.pv_cycles.eq(0)]
        with m.Elif(stage == 1):
            with m.If(eng.done):
                with m.If(eng.error != 0):
                    m.d.sync += [stage.eq(0), self.error.s.eq(eng.error), self.busy.eq(0),
                                 self.done.eq(1)]
                with m.Else():
                    # S streams from the accumulation buffer into the vector unit, P into
                    # P @ V's memory, and P @ V starts at once, a row block behind.
                    m.d.comb += [eng.read.eq(1), pk.start.eq(1), tr.start.eq(1), pv.start.eq(1)]
                    m.d.sync += [stage.eq(2), cnt.softmax_cycles.eq(1), cnt.pv_cycles.eq(1),
                                 p_rows.eq(0)]
            with m.Else():
                m.d.sync += cnt.s_cycles.eq(cnt.s_cycles + 1)
        with m.Else():
            # ``done`` of both is a level from their end to their next start.
            with m.If(~tr.done):
                m.d.sync += cnt.softmax_cycles.eq(cnt.softmax_cycles + 1)
            with m.If(~pv.done):
                m.d.sync += cnt.pv_cycles.eq(cnt.pv_cycles + 1)
            with m.If(tr.done & pv.done):
                m.d.sync += [stage.eq(0), self.error.pv.eq(pv.error), self.busy.eq(0),
                             self.done.eq(1), o_pending.eq(pv.error == 0)]
        return m
