"""KaleidoEngine: P reuse-aware PE arrays computing ``S = Q_eff K_eff^T`` chunk by chunk
(``docs/engine.md``; its section "RTL" documents this file).

Blocks: per array a copy of the Q and K memories (host writes go to every copy), an
:class:`~kaleido_hw.engine.array_sequencer.ArraySequencer` and a :class:`~kaleido_hw.array.array.PEArray`;
a chunk controller (cuts each group's channels into chunks of W = ``sched_pattern_width``,
hands them to the arrays, and waits at the barrier between chunks); the
:class:`~kaleido_hw.engine.engine_buffer.EngineBuffer` (``P*C`` banks per plane; a plane per
channel group that its chunks accumulate into, or with ``sched_sides = "qk"`` a plane per
chunk); the host interface and the counters.

Host protocol (:mod:`kaleido_hw.engine.host_port`): write Q and K (``wr``) while idle; drive ``cfg`` and
pulse ``start``; the configuration is checked and latched in that cycle. If it cannot run,
``done`` rises at once with a non-zero ``error`` mask; otherwise ``busy`` stays high until
``done``. Then the counters (``cnt``) are valid and a ``read`` pulse streams S on ``s``:
row-major, signed 32 bits, two values per 64-bit beat (the first in the low half; an odd
count's last beat has a zero high half), the engine core's memory beats.

Variants (``cfg.reuse``, ``cfg.schedule``, ``cfg.match``): dense (reuse 0) and pe (1, 0, 0)
run on every build; the scheduler (an :class:`~kaleido_hw.dispatch.order_unit.OrderUnit` for Q,
a per-chunk pre-pass that snoops array 0's loads of the chunk before, order lookups in the
loaders; with ``sched_sides = "qk"`` a second one for K and its inverse orders in the
read-out, and both pre-passes reading through read ports of their own) and the
matcher (a :class:`~kaleido_hw.dispatch.slot_unit.SlotUnit` per array, MergedCell arrays) are built
per ``engine_dispatcher``; a ``start`` with reuse asking for a block that was not built is
rejected (error bit ``dispatcher``).

Plain build (``engine_pe = "plain"``, with ``engine_dispatcher = "none"``; the generated top
``plain_engine`` is :class:`PlainEngine`): the same engine on
:class:`~kaleido_hw.array.array.BaselineArray` arrays of plain MACs, the dense systolic accelerator the
paper starts from. Its sequencers have no CodeUnits (every code is NONE, or ABSENT for a unit
without follower, as the dense schedule needs) and the top latches no thresholds; it runs
the dense variant only, and a ``start`` with reuse is rejected (error bit ``reuse``). With no
reuse pairs to respect it walks all channels as one group along x, so its chunks are
consecutive channels and all of them accumulate into a single plane (a third of a reuse
build's accumulation SRAM).
"""

from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from kaleido_hw.array.array import BaselineArray, PEArray, Window3PEArray
from golden.numerics import RESULT_CHANNELS, group_channels
from kaleido_hw.bitops import popcount, rank_select
from kaleido_hw.config import KaleidoConfig, check_int
from kaleido_hw.dispatch.merged_array import MergedArray, Window3MergedArray
from kaleido_hw.engine.shared_arrays import ArrayView, check_shared, folded_array
from kaleido_hw.dispatch.order_unit import OrderUnit
from kaleido_hw.engine.array_sequencer import ArraySequencer
from kaleido_hw.engine.code_unit import CodeUnit
from kaleido_hw.engine.engine_buffer import EngineBuffer
from kaleido_hw.engine.engine_layouts import (AXIS_X, KaleidoGeometry, chunk_layout,
                                              engine_run_layout, engine_tag_layout,
                                              plane_info_layout, walk_constants_layout,
                                              walk_layout)
from kaleido_hw.engine.host_port import WRITE_BYTES, check_run, operand_writes
from kaleido_hw.engine.host_port import engine_ports as tile_ports
from kaleido_hw.engine.tile_layouts import COUNTER_WIDTH, S_BEAT_WIDTH
from kaleido_hw.engine.window_code_unit import full_limit
from kaleido_hw.engine.unit_walk import (const_coords, const_position, order_key_layout,
                                         unit_tokens, walk_constants, walk_has_follower,
                                         walk_inc)
from kaleido_hw.stall_inject import STREAM_IDS, stall_gate


__all__ = ["KaleidoEngine", "PlainEngine", "plain_config", "plain_chunk_width", "built_variants", "ERROR_BITS", "ENGINE_COUNTERS", "ARRAY_COUNTERS",
           "engine_ports", "operand_writes", "check_engine_run", "VARIANTS", "counter_names",
           "counters_from_model", "model_counters"]

#: Bits of the ``error`` mask, in order (bit 0 first), and what each rejects.
ERROR_BITS = (
    ("grid", "T, H or W is 0, or T*H*W exceeds engine_max_tokens"),
    ("head_dim", "head_dim is 0 or exceeds engine_max_head_dim"),
    ("group_map", "a channel below head_dim maps to group 3 (groups are 0 t, 1 y, 2 x)"),
    ("bits", "not 3 <= half_bits < full_bits <= 7 with full_bits >= 4"),
    ("directions", "a group's direction is 3 (axes are 0 t, 1 y, 2 x)"),
    ("group_size", "a group has more channels than acc_width sums exactly"),
    ("dispatcher", "reuse with schedule or match asked for a dispatcher block this engine "
                   "does not have, or a window-3 linear block with reuse and schedule or match"),
    ("reuse", "reuse asked of a plain engine (engine_pe = 'plain': BaselinePEs run dense only)"),
)

#: Run-time variants: name -> (reuse, schedule, match) (``docs/engine.md``, "Variants").
VARIANTS = {"dense": (0, 0, 0), "pe": (1, 0, 0), "pe-sh": (1, 1, 0), "pe-m": (1, 0, 1),
            "full": (1, 1, 1)}


def built_variants(config: KaleidoConfig) -> tuple:
    """Variants the KaleidoEngine built from ``config`` runs: dense only on a plain build
    (``engine_pe = "plain"``); otherwise dense and pe always, pe-m with the matcher
    (``engine_dispatcher`` "matcher" or "full"), pe-sh with the scheduler ("scheduler" or
    "full"), full with both."""
    if config.engine_pe == "plain":
        return ("dense",)
    out = ("dense", "pe")
    if config.engine_dispatcher in ("scheduler", "full"):
        out += ("pe-sh",)
    if config.engine_dispatcher in ("matcher", "full"):
        out += ("pe-m",)
    if config.engine_dispatcher == "full":
        out += ("full",)
    return out

#: Engine counters (``cnt__<name>``).
ENGINE_COUNTERS = ("cycles", "chunks")
#: Per-array counters (``cnt__a<k>__<name>``).
ARRAY_COUNTERS = ("busy_pe_cycles", "issued0", "issued1", "issued2", "issued3", "skipped0",
                  "skipped1", "skipped2", "skipped3", "merged", "bubbles", "quads", "idle",
                  "stall")

_ARRAY_COUNTER_DOCS = {
    "busy_pe_cycles": "PE-cycles of array {a} in which some register took a term",
    "issued0": "channel steps issued by array {a} in pass 0, summed over its quads",
    "issued1": "channel steps issued by array {a} in pass 1",
    "issued2": "channel steps issued by array {a} in pass 2",
    "issued3": "channel steps issued by array {a} in pass 3",
    "skipped0": "channel steps of array {a} skipped in pass 0 (always 0)",
    "skipped1": "channel steps of array {a} skipped in pass 1 (no PE had work in the channel)",
    "skipped2": "channel steps of array {a} skipped in pass 2",
    "skipped3": "channel steps of array {a} skipped in pass 3",
    "merged": "issued pass-3 slots of array {a} with two channels (0 without the matcher)",
    "bubbles": "bubble steps of array {a} (a pass lasts at least rows steps)",
    "quads": "tile quads computed by array {a}",
    "idle": "cycles of the run in which array {a} issued no step (loads, barrier, final drain)",
    "stall": ("cycles in which array {a} had a step due but the dispatcher (SlotUnit) had no "
              "item for it (0 but under stall injection)"),
}
#: Arrays whose counter ports PORT_DOCS describes (``engine_arrays`` is at most 64).
_MAX_ARRAYS = 64


def _write_signature(geo: KaleidoGeometry, banks: int = 1) -> wiring.Signature:
    t = geo.tile
    bank = {"bank": Out(range(banks))} if banks > 1 else {}
    return wiring.Signature({
        "en": Out(1), "sel": Out(1), "token": Out(t.tok_width), **bank,
        "lane": Out(max(1, (t.max_dim // WRITE_BYTES - 1).bit_length())),
        "data": Out(8 * WRITE_BYTES),
    })


def _config_signature(geo: KaleidoGeometry) -> wiring.Signature:
    t = geo.tile
    sw = t.size_width
    return wiring.Signature({
        "t": Out(sw), "h": Out(sw), "w": Out(sw),
        "head_dim": Out(t.dim_width),
        "group_map": Out(2 * t.max_dim),
        "directions": Out(6),
        "full_bits": Out(3), "half_bits": Out(3),
        "reuse": Out(1), "linear": Out(1), "schedule": Out(1), "match": Out(1),
        **({"window3": Out(1)} if geo.window3 else {}),
    })


def _counter_signature(arrays: int) -> wiring.Signature:
    members = {name: Out(COUNTER_WIDTH) for name in ENGINE_COUNTERS}
    per_array = wiring.Signature({name: Out(COUNTER_WIDTH) for name in ARRAY_COUNTERS})
    for a in range(arrays):
        members[f"a{a}"] = Out(per_array)
    return wiring.Signature(members)


def _port_docs() -> dict:
    docs = {
        "wr__en": ("host write strobe: write the 8 bytes of wr__data into every array's copy "
                   "(ignored while busy)"),
        "wr__sel": "operand of the write: 0 Q, 1 K",
        "wr__token": "token index of the write (0..engine_max_tokens-1)",
        "wr__bank": ("bank of the write (banks > 1: the engine core's scratchpad); allowed "
                     "while busy into a bank the run does not read"),
        "q_bank": "bank of the Q memory the run reads (banks > 1; sampled at start)",
        "k_bank": "bank of the K memory the run reads (banks > 1; sampled at start)",
        "wr__lane": "8-channel lane of the write: channels 8*lane .. 8*lane+7",
        "wr__data": "8 int8 values, channel 8*lane+b at bits [8b, 8b+8)",
        "cfg__t": "grid frames T (sampled at start)",
        "cfg__h": "grid rows H (sampled at start)",
        "cfg__w": "grid columns W (sampled at start); T*H*W <= engine_max_tokens",
        "cfg__head_dim": "channels per token d (1..engine_max_head_dim)",
        "cfg__group_map": ("channel group per channel, 2 bits each (channel c at [2c, 2c+2)): "
                           "0 t, 1 y, 2 x"),
        "cfg__directions": ("reuse axis per group, 2 bits each (group g at [2g, 2g+2)): "
                            "0 t, 1 y, 2 x"),
        "cfg__full_bits": "FULL threshold: the top 1+full_bits bits agree (4..7)",
        "cfg__half_bits": "HALF threshold: the top 1+half_bits bits agree (3..6, < full_bits)",
        "cfg__reuse": "1: channel-wise reuse; 0: dense, exact Q @ K^T (the baseline)",
        "cfg__linear": ("1: a linear block: Q holds the activation X, K weight rows (row j = "
                        "column j of W); X's codes by the window rule (windows of 2), none "
                        "on W; S = X_eff @ W"),
        "cfg__window3": ("engine_window3 builds: 1 with cfg__linear: windows of 3 tokens "
                         "(quads of window-3 units x single weight rows, passes 0-2; with "
                         "schedule or match rejected, error bit dispatcher)"),
        "cfg__schedule": ("1: cluster units with the scheduler (with reuse; rejected if "
                          "engine_dispatcher built no scheduler)"),
        "cfg__match": ("1: merge pass-3 channels with the matcher (with reuse; rejected if "
                       "engine_dispatcher built no matcher)"),
        "start": "pulse (when not busy and not reading): check and latch cfg, start a run",
        "accumulate": ("with start: add the run's S onto the accumulation buffer's result "
                       "instead of replacing it (the same channel groups as the runs before; "
                       "the channels each group sums over these runs must fit acc_width)"),
        "read": "pulse (after a successful run): stream S on s, row-major, two values per beat",
        "busy": "a run is in progress",
        "done": "the last run finished (or was rejected: error != 0); cleared by start",
        "error": ("reasons the last start was rejected, one bit each (ERROR_BITS: grid, "
                  "head_dim, group_map, bits, directions, group_size, dispatcher, reuse)"),
        "s__valid": "S read-out stream: payload holds two consecutive values of S",
        "s__ready": "S read-out stream: the host takes the payload",
        "s__payload": ("values 2b (bits 31:0) and 2b+1 (63:32) of S flattened row-major (i "
                       "major, k minor), signed 32 bits each; an odd n*n ends with a zero "
                       "high half"),
        "cnt__cycles": "cycles from start to done of the last run",
        "cnt__chunks": "chunks (W-channel pieces of the groups) of the last run",
    }
    for a in range(_MAX_ARRAYS):
        for name, text in _ARRAY_COUNTER_DOCS.items():
            docs[f"cnt__a{a}__{name}"] = text.format(a=a)
    return docs


class KaleidoEngine(wiring.Component):
    """P arrays of R x C reuse-aware PEs with their sequencers, Q/K memory copies, a chunk
    controller with a barrier, a banked accumulation buffer, host interface and counters.

    Parameters
    ----------
    config : KaleidoConfig
        ``rows``/``cols`` (R, C), ``engine_arrays`` (P), ``sched_pattern_width`` (W, the
        chunk width), ``acc_width``, ``engine_max_tokens``, ``engine_max_head_dim``,
        ``engine_dispatcher`` (which dispatcher blocks are built), ``engine_pe`` (ReusePE
        arrays, or "plain": BaselineArrays and no CodeUnits, dense only), ``sched_entries``,
        ``sched_clusters``, ``sched_lfsr_seed``, ``matcher_lookahead``.
    banks : int
        Boxes each Q and K memory holds (the engine core's scratchpad banks, ``core_banks``):
        1, the standalone engine, or up to 4. With more than one, ``wr.bank`` names the
        bank written, ``q_bank``/``k_bank`` (sampled at ``start``) the banks a run reads, and
        a write into a bank the run does not read is taken while the engine is busy.
    shared_arrays : bool
        Build no arrays: drive the :class:`~kaleido_hw.engine.shared_arrays.ArrayView`\\ s in
        ``array_views`` instead, which the owner of the arrays connects
        (:func:`~kaleido_hw.engine.shared_arrays.share_array`; needs ``engine_pe =
        "reuse-pv"``). The engine core with the attention path and ``engine_pe = "reuse-pv"``
        runs S and P @ V on one set of arrays this way.

    The chunk controller keeps the channels of the current group not yet handed out; the
    next chunk is the lowest W of them (a rank select, :func:`~kaleido_hw.bitops.rank_select`),
    else the first channels of the next non-empty group. It hands a chunk to every array with ``go`` and
    waits until every array reports ``chunk_done`` (the barrier, ``docs/engine.md``) and,
    with the scheduler, until both orders of the next chunk are complete; the next ``go``
    follows two cycles after the slowest array's last step, or one after the orders.
    """

    PORT_DOCS = _port_docs()

    def __init__(self, config: KaleidoConfig, banks: int = 1, shared_arrays: bool = False):
        self.geo = geo = KaleidoGeometry.from_config(config)
        self.config = config
        check_int("core_banks", banks, 1, 4)
        self.banks = banks
        self.array_views = None
        if shared_arrays:
            check_shared(config, "KaleidoEngine")
            self.array_views = [ArrayView(config, engine_tag_layout(geo).size, f"s_array{a}")
                                for a in range(geo.arrays)]
        run_banks = ({"q_bank": In(range(banks)), "k_bank": In(range(banks))}
                     if banks > 1 else {})
        super().__init__({
            "wr": In(_write_signature(geo, banks)),
            **run_banks,
            "cfg": In(_config_signature(geo)),
            "start": In(1),
            "accumulate": In(1),
            "read": In(1),
            "busy": Out(1),
            "done": Out(1),
            "error": Out(len(ERROR_BITS)),
            "s": Out(stream.Signature(S_BEAT_WIDTH)),
            "cnt": Out(_counter_signature(geo.arrays)),
        })

    def elaborate(self, platform):
        m = Module()
        geo, cfg = self.geo, self.cfg
        t = geo.tile
        D, N, P = t.max_dim, t.max_tokens, geo.arrays
        R, C = t.rows, t.cols
        W = geo.chunk_width
        matcher = self.config.engine_dispatcher in ("matcher", "full")
        scheduler = self.config.engine_dispatcher in ("scheduler", "full")
        plain = self.config.engine_pe == "plain"
        # Dispatcher blocks of this elaboration (the benches read their probe wires).
        self.order_units, self.sequencers = {}, []

        # -- configuration check -------------------------------------------------------------
        hw = Signal(2 * t.size_width)
        n = Signal(3 * t.size_width)
        m.d.comb += [hw.eq(cfg.h * cfg.w), n.eq(hw * cfg.t)]
        # A linear block with windows of 3 (engine_window3 builds; cfg.window3 means nothing
        # without cfg.linear).
        window3 = None
        if geo.window3:
            window3 = Signal()
            m.d.comb += window3.eq(cfg.window3 & cfg.linear)
        chan = range(D)
        in_head = Signal(D)
        m.d.comb += in_head.eq(Cat(*(cfg.head_dim > c for c in chan)))
        gmap = [cfg.group_map[2 * c:2 * c + 2] for c in chan]
        gmask = [Signal(D, name=f"gmask{g}") for g in range(3)]
        m.d.comb += [gmask[g].eq(Cat(*(in_head[c] & (gmap[c] == g) for c in chan)))
                     for g in range(3)]
        gsize = [Signal(t.dim_width, name=f"gsize{g}") for g in range(3)]
        m.d.comb += [gsize[g].eq(popcount(gmask[g])) for g in range(3)]
        # The groups the chunks are cut from. A plain build has no reuse pairs to keep inside
        # a group: it cuts all channels, in order, into chunks of one group (group 0), so a
        # chunk is W consecutive channels and a sequencer slices it out of a token word
        # (docs/engine.md, "Plain build"); the checks above still see the command's groups.
        if plain:
            wmask = [in_head, Const(0, D), Const(0, D)]
            wsize = [cfg.head_dim, Const(0, t.dim_width), Const(0, t.dim_width)]
        else:
            wmask, wsize = gmask, gsize
        dirs = [cfg.directions[2 * g:2 * g + 2] for g in range(3)]
        err = Signal(len(ERROR_BITS))
        big = t.max_group_channels
        # Channels each accumulation plane sums over the runs of one result (acc): at most
        # what acc_width holds exactly per plane, and in all what the int32 read-out holds.
        total_max = RESULT_CHANNELS
        plane_max = min(group_channels(self.config.acc_width), total_max)
        summed = [Signal(range(total_max + t.max_dim + 1), name=f"summed{g}") for g in range(3)]
        acc_summed = [Signal(range(total_max + 1), name=f"acc_summed{g}") for g in range(3)]
        m.d.comb += [summed[g].eq(Mux(self.accumulate, acc_summed[g], 0) + wsize[g]) for g in range(3)]
        too_many = Signal()
        m.d.comb += too_many.eq(Cat(*(s > plane_max for s in summed)).any()
                                | (summed[0] + summed[1] + summed[2] > total_max))
        dispatcher_error = cfg.reuse & ((cfg.schedule & ~Const(int(scheduler)))
                                        | (cfg.match & ~Const(int(matcher))))
        if geo.window3:
            # a window-3 run takes natural order and has no pass 3
            dispatcher_error = dispatcher_error | (window3 & cfg.reuse & (cfg.schedule | cfg.match))
        m.d.comb += err.eq(Cat(
            (cfg.t == 0) | (cfg.h == 0) | (cfg.w == 0) | (n > N),
            (cfg.head_dim == 0) | (cfg.head_dim > D),
            Cat(*(in_head[c] & (gmap[c] == 3) for c in chan)).any(),
            (cfg.half_bits < 3) | (cfg.full_bits < 4) | (cfg.half_bits >= cfg.full_bits),
            Cat(*(d == 3 for d in dirs)).any(),
            Cat(*(gs > big for gs in gsize)).any() | too_many,
            dispatcher_error,
            cfg.reuse if plain else Const(0, 1),
        ))

        # Halved grid per group (the group's direction halved, rounded up) and unit count;
        # in a window-3 run (engine_window3 builds) the direction's extent in thirds.
        def halve(v):
            if geo.window3:
                return Mux(window3, (v + 2) // 3, (v + 1) >> 1)
            return (v + 1) >> 1

        # A plain build has no reuse pairs to respect: it walks along x, so one accumulation
        # plane serves all chunks (docs/engine.md, "Plain build").
        walk = [Const(AXIS_X, 2)] * 3 if plain else dirs
        run = Signal(engine_run_layout(geo))
        ext = []
        for g in range(3):
            d = walk[g]
            t2 = Mux(d == 0, halve(cfg.t), cfg.t)
            h2 = Mux(d == 1, halve(cfg.h), cfg.h)
            w2 = Mux(d == 2, halve(cfg.w), cfg.w)
            hw2 = Signal(2 * t.size_width, name=f"hw2_{g}")
            units = Signal(3 * t.size_width, name=f"units{g}")
            m.d.comb += [hw2.eq(h2 * w2), units.eq(hw2 * t2)]
            ext.append((w2, h2, units))

        wl = walk_layout(geo)
        jump = Signal(data.ArrayLayout(wl, 3))
        first_pos = [Signal(data.ArrayLayout(wl, 3), name=f"first_pos{a}") for a in range(P)]
        for g in range(3):
            for pos in (jump[g], *(first_pos[a][g] for a in range(1, P))):
                m.d.sync += const_position(geo, pos, run.dirs[g], run)
        # Array 0 starts at unit 0: a register holding 0, not a constant, which Amaranth would
        # fold into the sequencer (the P sequencers are one module in the Verilog).
        m.d.sync += first_pos[0].eq(first_pos[0])

        # -- control -------------------------------------------------------------------------
        kick = Signal()                       # cycle 1 of a run: sequencers reset, chunk 0
        run_acc = Signal()                    # the run adds onto the result before it
        tail = Signal(range(R + C + 1))
        tailing = Signal()
        m.d.sync += kick.eq(0)
        accept = Signal()
        m.submodules.acc = acc = EngineBuffer(self.config)
        m.d.comb += accept.eq(self.start & ~self.busy & ~acc.reading)
        cnt = self.cnt
        B = self.banks
        # The banks the run reads, and each memory address's offset (bank * N): a Mux of
        # constants, not a multiplier.
        run_bank = [Signal(range(B), name=f"run_{s}_bank") for s in "qk"]
        if B > 1:
            with m.If(accept):
                m.d.sync += [run_bank[0].eq(self.q_bank), run_bank[1].eq(self.k_bank)]

        def bank_addr(token, bank):
            if B == 1:
                return token
            off = Const(0, (B * N).bit_length())
            for b in range(1, B):
                off = Mux(bank == b, b * N, off)
            return token + off
        with m.If(accept):
            m.d.sync += [cnt.cycles.eq(0)]
            with m.If(err != 0):
                m.d.sync += [self.error.eq(err), self.done.eq(1)]
            with m.Else():
                m.d.sync += [acc_summed[g].eq(summed[g]) for g in range(3)]
                m.d.sync += run_acc.eq(self.accumulate)
                m.d.sync += [
                    self.error.eq(0), self.done.eq(0), self.busy.eq(1), kick.eq(1),
                    run.t.eq(cfg.t), run.h.eq(cfg.h), run.w.eq(cfg.w), run.hw.eq(hw),
                    run.n.eq(n),
                    # reuse and the threshold masks feed the CodeUnits: a plain build has none
                    *([] if plain else [run.reuse.eq(cfg.reuse), run.linear.eq(cfg.linear)]),
                    *([run.window3.eq(window3),
                       run.full_limit3.eq(full_limit(cfg.full_bits, True))]
                      if geo.window3 else []),
                    run.match.eq(cfg.reuse & cfg.match & Const(int(matcher))),
                    run.schedule.eq(cfg.reuse & cfg.schedule & Const(int(scheduler))),
                    *([] if plain else [
                        run.full_mask.eq(~(Const(0xFF, 8) >> (cfg.full_bits + 1))),
                        run.half_mask.eq(~(Const(0xFF, 8) >> (cfg.half_bits + 1)))]),
                ]
                for g in range(3):
                    w2, h2, units = ext[g]
                    m.d.sync += [run.dirs[g].eq(walk[g]), run.gmask[g].eq(wmask[g]),
                                 run.gsize[g].eq(wsize[g]), run.units[g].eq(units),
                                 *walk_constants(geo, run.walk[g], walk[g], cfg.w, hw, w2, h2,
                                                 window3)]
                    # The positions of the constant unit counts the loaders start at (a*C)
                    # and jump by (P*C): coordinates now, anchors in the next cycle.
                    for pos, k in ((jump[g], P * C), *((first_pos[a][g], a * C)
                                                       for a in range(1, P))):
                        m.d.sync += const_coords(k, w2, h2, pos)

        # -- chunk controller ----------------------------------------------------------------
        chunk = Signal(chunk_layout(geo))
        go = Signal()
        waiting = Signal()                    # chunk handed out; barrier not yet passed
        # The source of the next chunk, registered: group src_g and its channels not yet in a
        # chunk (src_bits), and whether that chunk opens its group (src_first). An issue peels
        # the chunk off src_bits and latches the source of the chunk after it in the same
        # cycle (the rest of the group, or the next group's mask when the rest is empty), so
        # the rank select starts at a register and no zero test of a D-bit mask or choice of
        # group lies in series with it.
        src_g = Signal(2)
        src_bits = Signal(D)
        src_first = Signal()
        chunk_ctr = Signal(range(geo.chunks + 1))
        plane_ctr = Signal(range(geo.planes + 1))   # planes handed out in this run
        planes = Signal(data.ArrayLayout(plane_info_layout(), geo.planes))
        nonempty = [run.gsize[g] != 0 for g in range(3)]
        # The next chunk's channels, lowest first (0 past the chunk's end), what is left of
        # the group after it, its size and whether anything is left: a rank select, so the
        # depth is log(d), not W x d.
        next_chan, after, size, left = rank_select(m, src_bits, W, "chunk", overflow=True)
        more = Signal()                       # a group after src_g has channels
        next_g = Signal(2)                    # ... the first of them
        m.d.comb += [more.eq(Mux(src_g == 0, nonempty[1] | nonempty[2],
                                 Mux(src_g == 1, nonempty[2], 0))),
                     next_g.eq(Mux((src_g == 0) & nonempty[1], 1, 2))]
        # At a run's accept the source is the first group with channels, from the command.
        cfg_any = [wmask[g].any() for g in range(3)]
        first_g = Mux(cfg_any[0], 0, Mux(cfg_any[1], 1, 2))
        first_bits = Mux(cfg_any[0], wmask[0], Mux(cfg_any[1], wmask[1], wmask[2]))

        all_done = Signal()
        issue_chunk = Signal()
        m.d.sync += go.eq(0)
        ord_ok = Signal()                     # the next chunk's orders are ready (or none needed)
        # A chunk never waits for its orders: chunk 0 and every chunk whose pre-pass is not
        # done when it could start run in natural order (``_orders``).
        m.d.comb += issue_chunk.eq(kick | (waiting & ~go & all_done & ~chunk.last))
        with m.If(issue_chunk):
            m.d.sync += [
                go.eq(1), waiting.eq(1),
                chunk.group.eq(src_g), chunk.size.eq(size),
                chunk.chan.eq(Cat(*next_chan)),
                chunk.parity.eq(chunk_ctr[0]), chunk.last.eq(~left & ~more),
                chunk_ctr.eq(chunk_ctr + 1),
            ]
            with m.If(left):
                m.d.sync += [src_bits.eq(after), src_first.eq(0)]
            with m.Else():
                m.d.sync += [src_g.eq(next_g), src_bits.eq(run.gmask[next_g]),
                             src_first.eq(1)]
            # A plane per chunk when the K side is ordered per chunk; else a plane per group,
            # the group's later chunks adding onto the words its first chunk wrote; on a
            # plain build one plane, which every chunk after the run's first adds onto.
            if geo.k_ordered:
                new_plane = Const(1)
            elif geo.planes == 1:
                new_plane = chunk_ctr == 0
            else:
                new_plane = src_first
            with m.If(new_plane):
                # A run with acc adds onto the planes the result before it wrote.
                on_before = Signal(name="plane_on_before")
                m.d.comb += on_before.eq(Cat(*(p.on for p in planes)).bit_select(plane_ctr, 1))
                m.d.sync += [chunk.plane.eq(plane_ctr), chunk.add.eq(run_acc & on_before),
                             plane_ctr.eq(plane_ctr + 1)]
                for k in range(geo.planes):
                    with m.If(plane_ctr == k):
                        m.d.sync += [planes[k].on.eq(1), planes[k].group.eq(src_g)]
            with m.Else():
                m.d.sync += chunk.add.eq(1)
        with m.If(accept & (err == 0)):
            m.d.sync += [src_g.eq(first_g), src_bits.eq(first_bits), src_first.eq(1),
                         chunk_ctr.eq(0), plane_ctr.eq(0), waiting.eq(0), chunk.last.eq(0)]
            with m.If(~self.accumulate):
                m.d.sync += planes.eq(0)
        m.d.comb += [cnt.chunks.eq(chunk_ctr)]

        # -- scheduler: per chunk, a pre-pass per side into an OrderUnit ------------------------
        if scheduler:
            key_width = order_key_layout(geo).size
            q_ou = OrderUnit(self.config, order_ports=P, inverse_ports=1, inverse_banks=2,
                             key_width=key_width,
                             stall_ids=(STREAM_IDS["q_sched_i"], STREAM_IDS["q_sched_o"]))
            m.submodules.q_order = q_ou
            self.order_units = {"q": q_ou}                # for the benches' probes
            k_ou = None
            if geo.k_ordered:
                k_ou = OrderUnit(self.config, order_ports=P, inverse_ports=geo.planes,
                                 inverse_banks=max(2, geo.planes), key_width=key_width,
                                 stall_ids=(STREAM_IDS["k_sched_i"], STREAM_IDS["k_sched_o"]))
                m.submodules.k_order = self.order_units["k"] = k_ou
        else:
            m.d.comb += ord_ok.eq(1)

        # -- arrays ----------------------------------------------------------------------------
        tag_width = engine_tag_layout(geo).size
        lanes = D // WRITE_BYTES
        # A write fills one whole 8-byte lane (channels past head_dim are never read): one
        # write enable per lane, where byte enables gave yosys 8 x as many memory write
        # ports to merge back (minutes of its clean-up passes on the default build).
        lane_en = Cat(*(self.wr.lane == lane for lane in range(lanes)))
        done_bits, fin_now, fin_seen = [], [], []
        pv_mode = self.config.engine_pe == "reuse-pv"
        for a in range(P):
            qmem = memory.Memory(shape=8 * D, depth=B * N, init=[])
            kmem = memory.Memory(shape=8 * D, depth=B * N, init=[])
            m.submodules[f"q_mem{a}"], m.submodules[f"k_mem{a}"] = qmem, kmem
            if a == 0:
                self._pre_mem = {"q": qmem, "k": kmem}
            for sel, mem in ((0, qmem), (1, kmem)):
                port = mem.write_port(granularity=8 * WRITE_BYTES)
                wbank = self.wr.bank if B > 1 else Const(0)
                # Never into a bank the run reads.
                free = (~self.busy | (wbank != run_bank[sel])) if B > 1 else ~self.busy
                m.d.comb += [port.addr.eq(bank_addr(self.wr.token, wbank)),
                             port.data.eq(Cat(*[self.wr.data] * lanes)),
                             port.en.eq(Mux(self.wr.en & free & (self.wr.sel == sel),
                                            lane_en, 0))]
            seq = ArraySequencer(self.config, a)
            self.sequencers.append(seq)
            # A register holding its reset value, not a constant: Amaranth would fold a
            # constant into the submodule, and the P sequencers would differ in the Verilog.
            first_col = Signal.like(seq.first_col, init=a * t.cols, name=f"first_col{a}")
            m.d.sync += first_col.eq(first_col)
            m.d.comb += [seq.first_col.eq(first_col), seq.first_pos.eq(first_pos[a]),
                         seq.jump.eq(jump)]
            if scheduler:
                m.d.comb += seq.next_bank.eq(chunk_ctr[0])
                for side, ou in self.order_units.items():
                    port = getattr(seq, f"{side}_ord")
                    rd = ou.ord_rd[a]
                    m.d.comb += [rd.bank.eq(port.bank), rd.addr.eq(port.addr),
                                 port.data.eq(rd.data), port.natural.eq(rd.natural)]
            if self.array_views:
                arr = self.array_views[a]
            elif plain:
                arr = BaselineArray(self.config, tag_width=tag_width)
            elif pv_mode:
                arr = folded_array(self.config)[0](self.config, tag_width=tag_width)
            elif matcher:
                arr = (Window3MergedArray if geo.window3 else MergedArray)(self.config,
                                                                            tag_width=tag_width)
            elif geo.window3:
                arr = Window3PEArray(self.config, tag_width=tag_width)
            else:
                arr = PEArray(self.config, tag_width=tag_width)
            m.submodules[f"seq{a}"] = seq
            if not self.array_views:
                m.submodules[f"array{a}"] = arr
            if pv_mode:
                # The P @ V fields follow the sequencer's in every row and column: 0, so
                # every step is a QK^T / linear step (pv 0).
                steps = [*(arr.row[i].as_value()[:len(seq.row[i].as_value())].eq(
                              seq.row[i].as_value()) for i in range(t.rows)),
                         *(arr.col[j].as_value()[:len(seq.col[j].as_value())].eq(
                             seq.col[j].as_value()) for j in range(t.cols))]
            else:
                steps = [arr.row.eq(seq.row), arr.col.eq(seq.col)]
            q_rd = qmem.read_port(domain="sync", transparent_for=())
            k_rd = kmem.read_port(domain="sync", transparent_for=())
            m.d.comb += [
                seq.start.eq(kick), seq.cfg.eq(run), seq.go.eq(go), seq.chunk.eq(chunk),
                q_rd.addr.eq(bank_addr(seq.q_addr, run_bank[0])), q_rd.en.eq(seq.q_en),
                seq.q_data.eq(q_rd.data),
                k_rd.addr.eq(bank_addr(seq.k_addr, run_bank[1])), k_rd.en.eq(seq.k_en),
                seq.k_data.eq(k_rd.data),
                *steps, arr.tag.eq(seq.tag),
                acc.wr[a].eq(arr.drain),
            ]
            done_bits.append(seq.chunk_done)
            seen = Signal(name=f"fin_seen{a}")
            with m.If(seq.finished):
                m.d.sync += seen.eq(1)
            with m.If(kick):
                m.d.sync += seen.eq(0)
            fin_now.append(seen | seq.finished)
            fin_seen.append(seen)

            ac = getattr(cnt, f"a{a}")
            sc = seq.counters
            m.d.comb += [ac.bubbles.eq(sc.bubbles), ac.quads.eq(sc.quads),
                         ac.merged.eq(seq.merged)]
            for p in range(4):
                m.d.comb += [getattr(ac, f"issued{p}").eq(sc.issued[p]),
                             getattr(ac, f"skipped{p}").eq(sc.skipped[p])]
            with m.If(accept):
                m.d.sync += [ac.busy_pe_cycles.eq(0), ac.idle.eq(0), ac.stall.eq(0)]
            with m.If(self.busy):
                m.d.sync += [ac.busy_pe_cycles.eq(ac.busy_pe_cycles + arr.busy_count),
                             ac.idle.eq(ac.idle + (~seq.stepping & ~seq.stalled)),
                             ac.stall.eq(ac.stall + seq.stalled)]
        m.d.comb += all_done.eq(Cat(*done_bits).all())
        if scheduler:
            self._orders(m, run, accept, kick, go, chunk, src_g, src_first, size, next_chan,
                         issue_chunk, ord_ok, q_ou, k_ou, run_bank, bank_addr)

        # -- end of the run: every array's final step, then the drain wave -----------------------
        all_fin = Cat(*fin_now).all() & ~Cat(*fin_seen).all()
        with m.If(self.busy & ~tailing & all_fin):
            m.d.sync += [tailing.eq(1), tail.eq(R + C)]
        with m.Elif(tailing):
            m.d.sync += tail.eq(tail - 1)
            with m.If(tail == 1):
                m.d.sync += [tailing.eq(0), self.busy.eq(0), self.done.eq(1)]
        with m.If(self.busy):
            m.d.sync += cnt.cycles.eq(cnt.cycles + 1)

        if geo.k_ordered:
            for k in range(geo.planes):
                rd = k_ou.inv_rd[k]
                m.d.comb += [rd.bank.eq(acc.inv[k].bank), rd.addr.eq(acc.inv[k].addr),
                             acc.inv[k].data.eq(rd.data)]
        m.d.comb += [
            acc.cfg.eq(run), acc.planes.eq(planes),
            acc.read.eq(self.read & self.done & ~self.busy & (self.error == 0)),
        ]
        wiring.connect(m, wiring.flipped(self.s), acc.s)
        return m


    def _orders(self, m, run, accept, kick, go, chunk, src_g, src_first, size, next_chan,
                issue_chunk, ord_ok, q_ou, k_ou, run_bank, bank_addr):
        """The scheduler's pre-pass (``docs/engine.md``, "Orders" and section "RTL").

        The OrderUnits restart at the run's accept. Chunk 0 runs in natural order (both
        OrderUnits' ``natural`` pulse in the kick, the cycle it is issued): its pre-pass
        could not hide behind any work. A later chunk whose orders are not complete when it
        is issued falls back to natural order the same way (``natural`` with ``abort``: the
        pre-pass in progress is dropped), so no chunk ever waits for the scheduler. The
        chunk whose orders are computed is the controller's next one, chunk k+1, latched in
        the cycle chunk k's ``go`` is visible (the controller already points past chunk k
        then). Its units enter the OrderUnit(s) through an output stage ``s_*``, one unit per
        two cycles at most, with their pattern at chunk k+1's channels:

        * Q side alone ordered (``sched_sides = "q"``): the pre-pass *snoops* array 0's
          loads (:meth:`_snoop_units`): in its first column block of chunk k, array 0 reads
          every row unit's anchor and follower words, and a token word holds all D channels,
          so also chunk k+1's, provided chunk k+1 is in chunk k's group (the same units). A
          chunk that opens a group has no pre-pass and runs in natural order.
        * both sides ordered: each side reads unit u's anchor and then its follower through
          one extra read port of its memory copy 0 (:meth:`_read_units`; an array loads only
          its own column blocks' K units).

        ``ord_ok``: the orders of the next chunk are complete (the one in use is released
        when the next chunk is issued)."""
        fallback = Signal()
        m.d.comb += fallback.eq(run.schedule & issue_chunk & ~kick & ~ord_ok)
        geo = self.geo
        W = geo.chunk_width
        m.d.comb += [q_ou.inv_rd[0].bank.eq(0), q_ou.inv_rd[0].addr.eq(0)]

        pre = Signal(chunk_layout(geo))
        latch = Signal()
        m.d.comb += latch.eq(run.schedule & go & ~chunk.last)
        with m.If(latch):
            m.d.sync += [pre.group.eq(src_g), pre.size.eq(size),
                         pre.chan.eq(Cat(*next_chan))]
        chans = list(pre.chan)            # chunk channel j of the pre-pass chunk
        units = Signal(geo.tile.size_width)
        m.d.comb += units.eq(run.units[pre.group])

        # The unit in the output stage (s_*) goes to every OrderUnit (a fork: each side's
        # ``taken`` remembers a handshake done while the other side still waits).
        stage = SimpleNamespace(valid=Signal(name="pre_s_valid"), last=Signal(name="pre_s_last"),
                                unit=Signal(len(q_ou.i.payload.unit), name="pre_s_unit"),
                                key=Signal(order_key_layout(geo), name="pre_s_key"),
                                adv=Signal(name="pre_adv"))

        def pattern_of(side, anchor_word, follower_word, hasf):
            """A unit's pattern at the pre-pass chunk's channels: codes over all D channels,
            then one bit per chunk channel (cheaper than compacting both words first)."""
            cu = CodeUnit(geo.tile.max_dim, codes=False)
            m.submodules[f"{side}_pre_codes"] = cu
            m.d.comb += [cu.anchor.eq(anchor_word), cu.follower.eq(follower_word),
                         cu.present.eq(hasf), cu.reuse.eq(1), cu.window.eq(run.linear),
                         cu.full_mask.eq(run.full_mask), cu.half_mask.eq(run.half_mask)]
            hn = Mux(hasf, ~cu.full, 0)             # HALF or NONE per channel
            return Cat(*[hn.bit_select(chans[j], 1) & (pre.size > j) for j in range(W)])

        if geo.k_ordered:
            pats = self._read_units(m, run, latch, fallback, stage, units, pre, pattern_of,
                                    run_bank, bank_addr)
        else:
            pats = {"q": self._snoop_units(m, latch & ~src_first, fallback, stage, units,
                                           pattern_of)}

        ready, has = [], []
        for side, ou in self.order_units.items():
            gate = stall_gate(m, self.config, STREAM_IDS[f"pre_{side}"], f"pre_{side}")
            taken = Signal(name=f"{side}_pre_taken")
            fire = Signal(name=f"{side}_pre_fire")
            m.d.comb += fire.eq(ou.i.valid & ou.i.ready)
            with m.If(stage.adv):
                m.d.sync += taken.eq(0)
            with m.Elif(fire):
                m.d.sync += taken.eq(1)
            with m.If(latch | fallback):
                m.d.sync += taken.eq(0)
            has.append(taken | fire)
            m.d.comb += [
                ou.start.eq(accept),
                ou.natural.eq(run.schedule & kick | fallback),
                ou.abort.eq(fallback),
                ou.i.valid.eq(stage.valid & ~taken & gate),
                ou.i.payload.unit.eq(stage.unit),
                ou.i.payload.key.eq(stage.key),
                ou.i.payload.last.eq(stage.last),
                ou.i.payload.pattern.eq(pats[side]),
            ]
            # One order is in use from chunk 0's issue (the kick) on; it is released at the
            # next issue.
            held = Signal(name=f"{side}_order_held")
            with m.If(issue_chunk):
                m.d.sync += held.eq(1)
            m.d.comb += ou.release.eq(issue_chunk & held & ~kick)
            ready.append(ou.avail > held)
        m.d.comb += [ord_ok.eq(~run.schedule | Cat(*ready).all()),
                     stage.adv.eq(~stage.valid | Cat(*has).all())]
        # A fallback drops the pre-pass: nothing of it may reach the restarted OrderUnits.
        with m.If(fallback):
            m.d.sync += stage.valid.eq(0)
        return q_ou, k_ou

    def _snoop_units(self, m, start, fallback, stage, units, pattern_of):
        """The Q side's pre-pass from array 0's loads (``docs/engine.md``, "Orders"): from
        ``start`` (chunk k's go, chunk k+1 in the same group) every row unit array 0 reads in
        its first column block enters the output stage two cycles after its follower's word
        arrived, identified by its position in chunk k's row order (positions arrive in
        order, 0 .. U-1; the Q side's inverse order is never read, so any numbering of the
        units will do). Each tapped word is registered first, so that the memory's data
        drives one more register input and not the CodeUnit (the operand memory into the
        loaders is the engine's critical path). A unit that arrives while the stage still
        holds the one before (the OrderUnit back-pressured for two cycles: only under stall
        injection) ends the pre-pass: its order then never completes and chunk k+1 falls
        back. Returns the registered pattern."""
        D = self.geo.tile.max_dim
        tap = self.sequencers[0].load_tap
        word = Signal(8 * D, name="q_pre_word")       # the tapped read's data, registered
        took = Signal.like(tap, name="q_pre_tap")     # ... and what it was
        m.d.sync += took.eq(tap)
        with m.If(tap.valid):
            m.d.sync += word.eq(self.sequencers[0].q_data)
        feeding = Signal(name="pre_feeding")
        anchor_word = Signal(8 * D, name="q_pre_anchor")
        pattern = Signal(self.geo.chunk_width, name="q_pre_pattern")
        arrive = Signal(name="pre_arrive")
        last = Signal(name="pre_arrive_last")
        m.d.comb += [arrive.eq(feeding & took.valid & took.follower),
                     last.eq(took.pos + 1 >= units)]
        with m.If(feeding & took.valid & ~took.follower):
            m.d.sync += anchor_word.eq(word)
        pat = pattern_of("q", anchor_word, word, took.key.hasf)
        with m.If(arrive & stage.adv):
            m.d.sync += [stage.valid.eq(1), stage.last.eq(last), stage.unit.eq(took.pos),
                         stage.key.eq(took.key), pattern.eq(pat)]
        with m.Elif(stage.adv):
            m.d.sync += stage.valid.eq(0)
        with m.If(start):
            m.d.sync += feeding.eq(1)
        with m.Elif(fallback | arrive & (last | ~stage.adv)):
            m.d.sync += feeding.eq(0)
        return pattern

    def _read_units(self, m, run, start, fallback, stage, units, pre, pattern_of, run_bank,
                    bank_addr):
        """Both sides' pre-pass through read ports of their own: from the cycle after
        ``start`` each side reads unit u's anchor and then its follower through one extra
        read port of its memory copy 0, one unit per two cycles; one cycle after the
        follower's read the codes give the unit's pattern at the chunk's channels and the
        unit enters the output stage. The pipeline (unit counter, memory reads, stage)
        advances only when every OrderUnit has the unit. Returns the patterns per side."""
        geo = self.geo
        D = geo.tile.max_dim
        feeding = Signal()
        u = Signal(geo.unit_width)
        last = Signal()
        m.d.comb += last.eq(u + 1 >= units)
        # Unit u's position, walked (kaleido_hw.engine.unit_walk), not divided out of u.
        pos = Signal(walk_layout(geo), name="pre_pos")
        walk = Signal(walk_constants_layout(geo), name="pre_walk")
        d = Signal(2, name="pre_dir")
        m.d.comb += [walk.eq(run.walk[pre.group]), d.eq(run.dirs[pre.group])]
        nxt = walk_inc(m, geo, pos, walk, "pre_inc")
        # Each side reads unit u through one read port of its copy 0, the anchor's word in one
        # cycle (when the output stage can move on) and the follower's in the next (the
        # output stage is empty then); the unit enters the output stage with the follower
        # read, and the anchor's word waits in a register meanwhile. A second read port (a
        # whole copy of the memory in SRAM) would feed a unit per cycle; one per two cycles
        # is hidden as well (``EngineTiming.prepass``).
        ph = Signal(name="pre_follower")          # this cycle's read is the follower's
        rd_anchor = Signal()
        rd_follower = Signal()
        m.d.comb += [rd_anchor.eq(feeding & ~ph & stage.adv & ~start),
                     rd_follower.eq(feeding & ph & ~start)]
        with m.If(start):
            m.d.sync += [feeding.eq(1), u.eq(0), pos.eq(0), ph.eq(0)]
        with m.Elif(rd_follower):
            m.d.sync += [u.eq(u + 1), pos.eq(nxt), ph.eq(0)]
            with m.If(last):
                m.d.sync += feeding.eq(0)
        with m.Elif(rd_anchor):
            m.d.sync += ph.eq(1)
        anchor, follower, hasf = unit_tokens(m, geo, run, d, pos.tok,
                                             walk_has_follower(run, d, pos), 1, "pre_unit")
        with m.If(rd_follower):
            m.d.sync += [stage.valid.eq(1), stage.last.eq(last), stage.unit.eq(u),
                         stage.key.tok.eq(anchor), stage.key.hasf.eq(hasf)]
        with m.Elif(stage.adv):
            m.d.sync += stage.valid.eq(0)
        with m.If(fallback):
            m.d.sync += [feeding.eq(0), ph.eq(0)]
        pats = {}
        for sel, side in enumerate(self.order_units):
            mem = self._pre_mem[side]
            rd = mem.read_port(domain="sync", transparent_for=())
            anchor_word = Signal(8 * D, name=f"{side}_pre_anchor")
            m.d.comb += [rd.addr.eq(bank_addr(Mux(ph, follower, anchor), run_bank[sel])),
                         rd.en.eq(rd_anchor | rd_follower)]
            with m.If(rd_follower):                 # the anchor's word is on the port now
                m.d.sync += anchor_word.eq(rd.data)
            pats[side] = pattern_of(side, anchor_word, rd.data, stage.key.hasf)
        return pats


def plain_chunk_width(rows: int, cols: int) -> int:
    """Channels per chunk of a plain build of R x C arrays: the narrowest chunk (a multiple of
    4, as ``sched_pattern_width``) that costs its schedule no cycle beyond the per-chunk
    overhead. A plain quad issues every channel of the chunk in each of its four passes, and a
    pass lasts at least R steps while a quad's swap needs ``gap = 2 * max(R, C) + 1`` cycles
    (``docs/engine.md``, "Timing"), so a chunk of W >= R channels with ``4 * W >= gap`` keeps
    the arrays busy at every step. The chunk sizes the sequencers' operand slot (``2 * (R +
    C) * 8 * W`` bits; twice that, double-buffered, when C > R): a plain accelerator built to
    compete takes the narrowest (``docs/engine.md``, "Plain build")."""
    need = max(rows, -(-(2 * max(rows, cols) + 1) // 4))
    return min(64, 4 * -(-need // 4))


def plain_config(config: KaleidoConfig) -> KaleidoConfig:
    """``config`` as a plain build: ``engine_pe = "plain"``, ``engine_dispatcher = "none"``,
    chunks of :func:`plain_chunk_width` channels (``sched_pattern_width``, which a plain
    build uses only as its chunk width, with ``matcher_channels`` set alike: no matcher);
    every other key unchanged."""
    width = plain_chunk_width(config.rows, config.cols)
    return config.replace(engine_pe="plain", engine_dispatcher="none",
                          sched_pattern_width=width, matcher_channels=width)


def _plain_port_docs() -> dict:
    docs = dict(_port_docs())
    docs.update({
        "cfg__reuse": ("must be 0: the plain engine computes exact Q @ K^T only (1 is rejected: "
                       "error bit reuse)"),
        "cfg__schedule": "no scheduler in a plain engine: 0 (ignored with cfg__reuse = 0)",
        "cfg__match": "no matcher in a plain engine: 0 (ignored with cfg__reuse = 0)",
        "cfg__linear": ("a linear block (Q the activation X, K weight rows): changes nothing "
                        "in a plain engine, whose products are exact (S = X @ W)"),
        "cfg__directions": ("pairing axis per group, 2 bits each (group g at [2g, 2g+2)): "
                            "checked only (3 is rejected), as cfg__full_bits; the plain engine "
                            "walks all channels as one group along x, into one accumulation plane"),
        "cfg__full_bits": ("FULL threshold of a reuse run (4..7): checked only, so that one host "
                           "contract serves both builds"),
        "cfg__half_bits": ("HALF threshold (3..6, < full_bits): checked only, as cfg__full_bits"),
    })
    for a in range(_MAX_ARRAYS):
        docs[f"cnt__a{a}__busy_pe_cycles"] = (f"PE-cycles of array {a} in which a BaselinePE "
                                              f"accumulated a product")
        docs[f"cnt__a{a}__merged"] = f"always 0 (no matcher in a plain engine; array {a})"
        docs[f"cnt__a{a}__stall"] = f"always 0 (no dispatcher in a plain engine; array {a})"
    return docs


class PlainEngine(KaleidoEngine):
    """The KaleidoEngine built from :func:`plain_config` of ``config``: P BaselineArrays of
    plain 8-bit MACs with the engine's sequencers (without CodeUnits), chunk controller,
    barrier, buffer, host interface and counters, and no dispatcher. It runs the dense
    variant only, with exactly the cycles and counters of ``golden.engine.model.engine_counters``
    (variant ``dense``) on the same configuration; the reference of the iso-area comparison
    (``docs/engine.md``, "Plain build").

    Parameters
    ----------
    config : KaleidoConfig
        As for :class:`KaleidoEngine`; ``engine_pe`` and ``engine_dispatcher`` are replaced by
        "plain" and "none", the chunk width by :func:`plain_chunk_width`.
    """

    PORT_DOCS = _plain_port_docs()

    def __init__(self, config: KaleidoConfig):
        super().__init__(plain_config(config))


# -- host-side helpers (plain Python) ---------------------------------------------------------

def check_engine_run(config: KaleidoConfig, grid, groups, full_bits: int = 5,
                     half_bits: int = 3, variant: str = "pe", *, window3: bool = False):
    """Raise ``ValueError`` naming the parameter if the KaleidoEngine built from ``config``
    cannot run this job (the RTL's ``error`` bits, checked before any simulation).
    ``window3``: a linear block with windows of 3."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    if window3:
        if not config.engine_window3:
            raise ValueError("window3 needs an engine built with engine_window3 = true")
        if variant not in ("dense", "pe"):
            raise ValueError(f"variant must be 'dense' or 'pe' for a window-3 run (natural "
                             f"order, no pass 3 to match), got {variant!r}")
    if config.engine_pe == "plain" and variant != "dense":
        raise ValueError(f"variant {variant!r} needs reuse, which a plain engine does not have "
                         f"(engine_pe='plain': BaselinePEs run the dense variant only); run "
                         f"variant 'dense', or build with engine_pe='reuse'")
    built = built_variants(config)
    if variant not in built:
        raise ValueError(f"variant {variant!r} needs dispatcher hardware this KaleidoEngine "
                         f"does not have (engine_dispatcher={config.engine_dispatcher!r}); "
                         f"built variants: {', '.join(built)}")
    return check_run(config, grid, groups, full_bits, half_bits)


def engine_ports(config: KaleidoConfig, grid, groups, full_bits: int = 5, half_bits: int = 3,
                 variant: str = "pe", *, linear: bool = False, window3: bool = False) -> dict:
    """Values of the ``cfg__*`` ports for one run (after :func:`check_engine_run`): the
    shared encoding (:func:`kaleido_hw.engine.host_port.engine_ports`) plus the dispatcher
    bits of ``variant``, ``cfg__linear`` (a linear block: Q the activation, K weight
    rows) and, on a build with ``engine_window3``, ``cfg__window3`` (``window3``: the
    linear block's windows are 3 tokens long)."""
    if window3 and not linear:
        raise ValueError("window3 is a linear block's window: pass linear=True too")
    check_engine_run(config, grid, groups, full_bits, half_bits, variant, window3=window3)
    reuse, schedule, match = VARIANTS[variant]
    ports = tile_ports(config, grid, groups, full_bits, half_bits, reuse=bool(reuse))
    ports.update({"cfg__schedule": schedule, "cfg__match": match,
                  "cfg__linear": int(bool(linear))})
    if config.engine_window3:
        ports["cfg__window3"] = int(bool(window3))
    return ports


def counter_names(config: KaleidoConfig) -> list[str]:
    """Every counter port of a build from ``config`` without the ``cnt__`` prefix:
    :data:`ENGINE_COUNTERS`, then ``a<k>__<name>`` per array."""
    return [*ENGINE_COUNTERS, *(f"a{a}__{name}" for a in range(config.engine_arrays)
                                for name in ARRAY_COUNTERS)]


def counters_from_model(model, arrays: int) -> dict:
    """``{counter port name: value}`` of a ``golden.engine.model.EngineCounters`` of a build
    with ``arrays`` arrays, in :func:`counter_names` order: what the RTL's ``cnt__*`` ports
    must show (a plain build's model runs ``plain_walk(groups)``). ``stall`` is 0: the
    cycle model has no dispatcher stalls (the SlotUnit's latencies are hidden), and the RTL
    counts them only under stall injection."""
    out = {"cycles": int(model.cycles), "chunks": int(model.chunks)}
    for a in range(arrays):
        vals = {"busy_pe_cycles": model.busy_pe_cycles[a], "merged": model.merged[a],
                "bubbles": model.bubbles[a], "quads": model.quads[a], "idle": model.idle[a],
                "stall": 0}
        for p in range(4):
            vals[f"issued{p}"] = model.issued[a, p]
            vals[f"skipped{p}"] = model.skipped[a, p]
        out.update({f"a{a}__{name}": int(vals[name]) for name in ARRAY_COUNTERS})
    return out


def model_counters(config: KaleidoConfig, q, k, grid, groups, variant: str = "dense",
                   full_bits: int = 5, half_bits: int = 3, *, natural=None,
                   linear: bool = False, window3: bool = False) -> dict:
    """What the ``cnt__*`` ports of a build from ``config`` must show after a run of
    ``variant``: ``golden.engine.model.engine_counters`` under the ports' names
    (:func:`counters_from_model`); a plain build walks every group along x
    (``plain_walk``). ``natural``: the chunks that fell back to natural order in a run with
    stall injection (observed on the probes: the model cannot follow its timing), else the
    model's own. ``linear``: a linear block (``cfg__linear``), ``window3`` with windows of 3
    (``golden.engine.window3.window3_counters``)."""
    from golden.engine.model import EngineParams, engine_counters, plain_walk

    if window3:
        from golden.engine.window3 import window3_counters
        c = window3_counters(q, k, grid, groups, EngineParams.from_config(config), variant,
                             full_bits, half_bits)
        return counters_from_model(c, config.engine_arrays)
    if config.engine_pe == "plain":
        groups = plain_walk(groups)
    c = engine_counters(q, k, grid, groups, EngineParams.from_config(config), variant,
                        full_bits, half_bits, natural=natural, linear=linear)
    return counters_from_model(c, config.engine_arrays)
