"""Sequencer of one array of the multi-array engine (``docs/engine.md``, "Arrays and their
work" and section "RTL").

:class:`ArraySequencer` is the single-array loader / double-buffered slot / stepper of
``docs/array.md`` ("Sequencer") with these changes:

* it runs **chunk by chunk**: the engine's controller hands it a chunk (group, list of
  at most W channels, plane) with a ``go`` pulse; the stepper issues only the
  chunk's channels; when the chunk's last step has issued the sequencer reports
  ``chunk_done`` and waits (the barrier);
* array ``a`` of P takes the column blocks ``cb = a, a+P, a+2P, ...`` of the chunk and, for
  each, every row block: quads in the order (cb, rb);
* units are numbered in the grid whose length on the group's direction is halved (row unit
  ``rb*R + s``, column unit ``cb*C + s``), and their tokens come from a **unit walk**
  (:mod:`kaleido_hw.engine.unit_walk`): coordinates and anchor moved by a mixed-radix
  addition of one unit, of ``P*C`` units (the array's next column block) or set to the
  array's first column unit ``a*C`` (per-run constants), never by dividing an index, so an
  array starts at column block ``a`` without walking there; with the scheduler, the chunk's
  order gives each position's unit with its anchor and follower bit (its key), looked up one
  cycle ahead of the memory read;
* with the matcher, pass 3 replays the column block's MergeMatcher slots (an embedded
  SlotUnit) instead of walking the channel bitmap;
* the slots hold only the chunk's channels: each arriving token word (8 * D bits) is
  compacted to its W chunk bytes (byte j = channel ``chunk.chan[j]``) before the CodeUnits
  and the slot registers, so a slot is 2 * (R + C) * 8 * W bits whatever the head
  dimension, and a step picks its byte among W, not D (the quad only ever steps through the
  chunk's channels; bytes past ``chunk.size`` are never issued); the compaction is a shift
  network of ``log2 D`` byte stages (:func:`compact_words`) whose selects, found once from
  the channel list, serve the Q and the K word, rather than a D-to-1 multiplexer per byte;
* in a plain build (``engine_pe = "plain"``) a chunk is W consecutive channels (all
  channels are one group), sliced out of the token word rather than compacted; and there
  are no CodeUnits: every follower is NONE
  (ABSENT for a unit without one), so a unit's codes are its ``has follower`` bit, the
  follower word is stored as read, and a quad's code sets are two bits per side (some real
  unit with / without a follower) instead of four channel bitmaps;
* with C <= R the **anchor** words are single-buffered: the loader keeps the next quad's
  anchor tokens (K's included) in the loading slot, and each anchor register of the
  stepping slot is fetched from memory just after its last use in the running quad
  (:meth:`ArraySequencer._fetch`: Q anchors, used in passes 0-1, from pass 2's first step;
  K anchors, used in passes 0 and 2, from pass 2's last step). A plain build single-buffers
  its **follower** words too, fetched from the swap (K followers are first used in pass 1,
  Q followers in pass 2); a reuse build keeps them double-buffered, since its CodeUnits
  form a follower's codes against its anchor as the loader reads the pair. Every pass
  lasts at least R >= C steps and the loader's 2R reads end before pass 2, so the fetches
  land before the next quad needs the words, never meet the loader's reads, and the timing
  is the double-buffered one; the first quad of a chunk, which no quad runs before, is read
  straight into the stepping slot;
* built with ``engine_window3``, a run with ``cfg.window3`` runs linear window-3 quads
  (``docs/engine.md``, "Linear blocks with windows of 3"): three row words per unit (the
  loader's third phase), codes by a :class:`WindowCodeUnit`, weight rows one per column as
  K followers, passes 0-2 with pass 0 at least 3M steps, the next quad's anchors and
  second followers (``qf2``) fetched from the last steps of passes 0 and 1.
"""

from __future__ import annotations

from contextlib import nullcontext
from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from golden.numerics import HALF, NONE
from kaleido_hw.array.layouts import step_col_layout, step_row_layout, window3_row_layout
from kaleido_hw.bitops import bits_for, lowest_set, popcount
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.dispatch.layouts import Sel
from kaleido_hw.dispatch.merged_cell import merged_col_layout, merged_row_layout
from kaleido_hw.dispatch.order_unit import OrderReadSignature
from kaleido_hw.dispatch.slot_unit import SlotUnit
from kaleido_hw.engine.code_unit import CodeUnit, work_bitmap
from kaleido_hw.engine.window_code_unit import WindowCodeUnit
from kaleido_hw.engine.engine_layouts import (KaleidoGeometry, chunk_layout, engine_run_layout,
                                              engine_tag_layout, walk_constants_layout,
                                              walk_layout)
from kaleido_hw.engine.tile_layouts import COUNTER_WIDTH, counters_layout
from kaleido_hw.engine.unit_walk import (direction_stride, order_key_layout, unit_tokens,
                                         walk_add, walk_has_follower, walk_inc, walk_members3)
from kaleido_hw.stall_inject import array_stream, stall_gate


__all__ = ["ArraySequencer", "compact_words", "load_tap_layout"]


def load_tap_layout(geo: KaleidoGeometry) -> data.StructLayout:
    """A row unit's word read by the loader in the chunk's first column block (registered,
    so aligned with the read data): ``follower`` (else the anchor's word), the unit's row
    ``pos`` in the chunk's order and its order ``key`` (anchor token, follower bit)."""
    return data.StructLayout({"valid": unsigned(1), "follower": unsigned(1),
                              "pos": unsigned(geo.unit_width), "key": order_key_layout(geo)})


class _Slot:
    """One operand slot: what the stepper needs about a tile quad. ``plain``: no per-channel
    codes (a unit's code is NONE, or ABSENT without follower: its ``rhasf``/``chasf`` bit),
    and the code sets FULL/HALF are constant 0, NONE/ABSENT one bit each (the same at every
    channel)."""

    def __init__(self, name: str, geo: KaleidoGeometry, plain: bool = False,
                 anchors: bool = True, followers: bool = True, stepping: bool = False):
        t = geo.tile
        R, C, W = t.rows, t.cols, geo.chunk_width     # the chunk's channels only
        S = lambda shape, n: Signal(shape, name=f"{name}_{n}")  # noqa: E731
        # ``anchors`` / ``followers`` False: those operand words are not held here (a
        # sequencer that fetches them into the stepping slot just in time keeps only their
        # tokens in its loading slot, K's included).
        self.has_anchors, self.has_followers = anchors, followers
        self.qa = [S(8 * W, f"qa{r}") for r in range(R if anchors else 0)]     # Q anchors
        self.qf = [S(8 * W, f"qf{r}") for r in range(R if followers else 0)]   # eff. Q followers
        if plain:
            self.qlo = self.qhi = []
        else:
            self.qlo = [S(W, f"qlo{r}") for r in range(R)]       # code bit 0 per chunk channel
            self.qhi = [S(W, f"qhi{r}") for r in range(R)]       # code bit 1 per chunk channel
        self.ka = [S(8 * W, f"ka{j}") for j in range(C if anchors else 0)]
        self.kf = [S(8 * W, f"kf{j}") for j in range(C if followers else 0)]
        self.ktok_a = [] if anchors else [S(t.tok_width, f"ktok_a{j}") for j in range(C)]
        self.ktok_f = [] if followers else [S(t.tok_width, f"ktok_f{j}") for j in range(C)]
        if plain:
            self.klo = self.khi = []
            self.qs = [Const(0, 1), Const(0, 1), S(1, "qset2"), S(1, "qset3")]
            self.ks = [Const(0, 1), Const(0, 1), S(1, "kset2"), S(1, "kset3")]
        else:
            self.klo = [S(W, f"klo{j}") for j in range(C)]
            self.khi = [S(W, f"khi{j}") for j in range(C)]
            self.qs = [S(W, f"qset{v}") for v in range(4)]      # code v occurs among real rows
            self.ks = [S(W, f"kset{v}") for v in range(4)]
        self.rtok_a = [S(t.tok_width, f"rtok_a{r}") for r in range(R)]
        self.rtok_f = [S(t.tok_width, f"rtok_f{r}") for r in range(R)]
        self.rvalid = S(R, "rvalid")
        self.rhasf = S(R, "rhasf")
        # Linear windows of 3 (``geo.window3``): each row unit's second follower, its code
        # bits per chunk channel, its token and whether it exists, and the channels where
        # some real row's second follower is HALF or NONE (pass 1's work). Its word only in
        # the stepping slot (``stepping``): it is fetched there just in time, never loaded.
        w3 = geo.window3
        self.qf2 = [S(8 * W, f"qf2_{r}") for r in range(R if w3 and stepping else 0)]
        self.qlo2 = [S(W, f"qlo2_{r}") for r in range(R if w3 else 0)]
        self.qhi2 = [S(W, f"qhi2_{r}") for r in range(R if w3 else 0)]
        self.qhn2 = [S(W, "qhn2")] if w3 else []
        self.rtok_f2 = [S(t.tok_width, f"rtok_f2_{r}") for r in range(R if w3 else 0)]
        self.rhasf2 = [S(R, "rhasf2")] if w3 else []
        self.cvalid = S(C, "cvalid")
        self.chasf = S(C, "chasf")
        self.plane = S(geo.plane_width, "plane")
        self.add = S(1, "add")                                  # accumulate onto the plane
        self.cbp = S(geo.local_block_width, "cbp")
        self.first_rb = S(1, "first_rb")                        # row block 0 of its column block
        self.last_rb = S(1, "last_rb")                          # last row block of it

    def sets(self):
        """The code-set registers (the constant ones of a plain slot left out)."""
        return [s for s in self.qs + self.ks + self.qhn2 if isinstance(s, Signal)]

    def fields(self, anchors: bool = True, followers: bool = True):
        q_words = [*(self.qa if anchors else []), *(self.qf if followers else [])]
        k_words = [*(self.ka if anchors else []), *(self.kf if followers else [])]
        return [*q_words, *self.qlo, *self.qhi, *k_words, *self.klo,
                *self.khi, *self.sets(), *self.rtok_a, *self.rtok_f, self.rvalid,
                self.rhasf, *self.qlo2, *self.qhi2, *self.rtok_f2, *self.rhasf2,
                self.cvalid, self.chasf, self.plane, self.add, self.cbp, self.first_rb,
                self.last_rb]

    def copy(self, other: "_Slot"):
        """Take ``other``'s quad; operand words only of the kinds both slots hold."""
        kinds = (self.has_anchors and other.has_anchors,
                 self.has_followers and other.has_followers)
        return [a.eq(b) for a, b in zip(self.fields(*kinds), other.fields(*kinds))]


class ArraySequencer(wiring.Component):
    """Loader, double-buffered operand slot (with C <= R the anchors, and in a plain build
    the followers too, single-buffered and fetched just in time) and pass/channel stepper of
    array ``index``.

    Parameters
    ----------
    config : KaleidoConfig
        ``rows``/``cols`` (R, C), ``engine_max_tokens``, ``engine_max_head_dim``,
        ``engine_arrays`` (P), ``sched_pattern_width``, ``engine_dispatcher``, ``engine_pe``
        ("plain": no CodeUnits, the codes NONE/ABSENT from the units' follower bits).
    index : int
        This array's number a (0..P-1): it takes column blocks ``a, a+P, ...``.

    Ports
    -----
    ``first_col`` (in, constant ``index * C``): the array's first column unit, and
    ``first_pos`` its position per group (:func:`walk_layout`); ``jump``: the position of
    ``P*C`` units per group (both valid from the cycle after ``start``). Ports rather than
    constants so that the P sequencers are one module in the Verilog.
    ``start`` (in): pulse at the start of a run (resets the counters and the state);
    ``cfg``: the run's configuration (valid for the whole run).
    ``go`` (in): pulse: start the chunk in ``chunk`` (held until the next ``go``); the first
    read is in the cycle of ``go``. ``chunk_done`` (out): the chunk's last step has issued (or
    the array has no quad in it) and nothing is in flight; the engine's barrier waits for
    every array's. With ``chunk.last`` the sequencer then emits the final (drain-only) step
    and ``finished`` (registered, one cycle, with that step).
    ``q_*``/``k_*``: synchronous read ports of this array's copy of the Q and K memories.
    ``row``, ``col``, ``tag`` (registered): the step for the PE array (``docs/array.md``;
    ``tag`` = :func:`engine_tag_layout`); with the matcher built
    (``engine_dispatcher`` "matcher" or "full") in the merged layouts of
    :class:`~kaleido_hw.dispatch.merged_cell.MergedCell`. ``merged`` (out): issued two-channel
    slots. ``load_tap`` (out; with the scheduler ordering the Q side alone,
    :func:`load_tap_layout`): the row unit whose word the loader read in the cycle before,
    in the chunk's first column block; the controller's pre-pass snoops array 0's.
    ``stepping`` (out): a step (issued channel or bubble) leaves this cycle.
    ``stalled`` (out): a step was due but the SlotUnit had no slot item for it (the
    dispatcher was not ready; never without stall injection). ``counters``: valid after
    ``finished``.

    Timing within a chunk is the single array's: quad 0's reads start with ``go``, a quad's
    steps follow its swap, a swap needs ``2*max(R, C) + 1`` cycles since the previous one; the
    array's last step is ``T = gap + sum_{n<m} max(s_n, gap) + s_m`` cycles after ``go``.

    Matcher (built with ``engine_dispatcher`` "matcher"/"full", used when ``cfg.match``):
    an embedded :class:`~kaleido_hw.dispatch.slot_unit.SlotUnit`. From the cycle after the swap to
    a column block's first quad, the block's pass-3 classes (the K followers' codes at the
    chunk's channels 0..W-1, bits 0..W-1 of the compacted codes, in the stepping slot) are
    offered to it, and its matcher reads them there (no copy); from the cycle after a
    quad's swap, its request (the real rows' HALF/NONE channels) is. Pass 3 of the quad
    then replays the slot items, one per step, and lasts ``max(count, R)`` steps. The
    SlotUnit's latencies are hidden: the quad's first item can leave ``S + 2 <= n + 2``
    cycles after the offer, and pass 3 starts at least ``max(n, R) + 2R`` cycles after it
    (the argument is in the class docstring of SlotUnit), so the timing is the one of the
    cycle model.
    """

    def __init__(self, config: KaleidoConfig, index: int = 0):
        self.geo = geo = KaleidoGeometry.from_config(config)
        self.config = config
        if not 0 <= index < geo.arrays:
            raise ValueError(f"index must be in 0..{geo.arrays - 1}, got {index}")
        self.index = index
        self.matcher = config.engine_dispatcher in ("matcher", "full")
        self.scheduler = config.engine_dispatcher in ("scheduler", "full")
        self.plain = config.engine_pe == "plain"
        # The Q side's pre-pass snoops array 0's loads (``docs/engine.md``, "Orders").
        self.snoop_tap = self.scheduler and not geo.k_ordered
        ow = bits_for(geo.tile.max_tokens - 1)
        kw = order_key_layout(geo).size
        orders = ({"q_ord": Out(OrderReadSignature(1, ow, kw, natural=True)),
                   **({"k_ord": Out(OrderReadSignature(1, ow, kw, natural=True))}
                      if geo.k_ordered else {}),
                   "next_bank": In(1),
                   **({"load_tap": Out(load_tap_layout(geo))} if self.snoop_tap else {})}
                  if self.scheduler else {})
        t = geo.tile
        R, C, D = t.rows, t.cols, t.max_dim
        row_layout = (merged_row_layout(geo.window3) if self.matcher else
                      window3_row_layout() if geo.window3 else step_row_layout())
        col_layout = merged_col_layout() if self.matcher else step_col_layout()
        super().__init__({
            "first_col": In(geo.unit_width),
            "first_pos": In(data.ArrayLayout(walk_layout(geo), 3)),
            "jump": In(data.ArrayLayout(walk_layout(geo), 3)),
            "start": In(1),
            "cfg": In(engine_run_layout(geo)),
            "go": In(1),
            "chunk": In(chunk_layout(geo)),
            "chunk_done": Out(1),
            "q_addr": Out(t.tok_width), "q_en": Out(1), "q_data": In(8 * D),
            "k_addr": Out(t.tok_width), "k_en": Out(1), "k_data": In(8 * D),
            "row": Out(data.ArrayLayout(row_layout, R)),
            "col": Out(data.ArrayLayout(col_layout, C)),
            "tag": Out(engine_tag_layout(geo)),
            "stepping": Out(1),
            "stalled": Out(1),
            "finished": Out(1),
            "counters": Out(counters_layout()),
            "merged": Out(COUNTER_WIDTH),
            **orders,
        })

    def shared_module_key(self):
        """Equal for sequencers that are the same hardware (``kaleido_hw.flow.shared_modules``):
        the index only reaches the netlist through the stall-injection gates."""
        return (self.config, self.index if self.config.engine_stall_seed else None)

    def elaborate(self, platform):
        m = Module()
        geo, cfg, chunk = self.geo, self.cfg, self.chunk
        t = geo.tile
        R, C, D = t.rows, t.cols, t.max_dim
        M = max(R, C)
        PC = geo.banks
        first_col = self.first_col
        uw = geo.unit_width

        W = geo.chunk_width
        running = Signal()
        loader_done = Signal()
        slot_full = Signal()
        swap = Signal()
        # Units per side: the rows' (the group's) and the columns'; in a window-3 run the
        # columns are the block's weight rows themselves, one per unit.
        W3 = geo.window3
        w3 = cfg.window3 if W3 else Const(0, 1)
        units = Signal(t.size_width)
        k_units = Signal(t.size_width) if W3 else units
        m.d.comb += units.eq(cfg.units[chunk.group])
        if W3:
            m.d.comb += k_units.eq(Mux(w3, cfg.n, units))
        # A quad only ever steps through the chunk's channels: the arriving words are compacted
        # to them (byte j = channel chunk.chan[j]; bytes past chunk.size are never issued), so
        # the slots, code units and step multiplexers are W channels wide, not D.
        self._in_chunk = in_chunk = Signal(W)
        m.d.comb += in_chunk.eq(Cat(*(chunk.size > j for j in range(W))))
        self._q_word, self._k_word = (Signal(8 * W, name=f"{side}_chunk_word")
                                      for side in "qk")
        # The selects are a local copy of chunk.chan, one cycle behind it: the chunk changes in
        # the cycle before its go and its first words arrive the cycle after go. A register
        # of this module, so the standard-cell flow buffers its fanout (hundreds of
        # multiplexer selects) here; the controller's register would drive them unbuffered
        # through the module port.
        chan_sel = Signal.like(chunk.chan, name="chan_sel")
        chan_ok = Signal(W, name="chan_ok")          # byte j is a chunk channel (j < size)
        m.d.sync += [chan_sel.eq(chunk.chan), chan_ok.eq(in_chunk)]
        if self.plain and D % W == 0 and W & (W - 1) == 0:
            # A plain chunk is W consecutive channels from a multiple of W (one group,
            # golden.engine.model.plain_walk): a slice of the word, no gathering network
            # (bytes past the chunk's size are never issued).
            lane = chan_sel[0][bits_for(W - 1):]
            m.d.comb += [self._q_word.eq(self.q_data.word_select(lane, 8 * W)),
                         self._k_word.eq(self.k_data.word_select(lane, 8 * W))]
        else:
            compact_words(m, [(self.q_data, self._q_word), (self.k_data, self._k_word)],
                          [chan_sel[j] for j in range(W)], chan_ok, D)

        # -- loader: quads (cb, rb) of this array, by unit index -------------------------------
        r0 = Signal(uw)                       # first row unit of the row block being loaded
        c0 = Signal(uw)                       # first column unit of the column block
        cbp = Signal(geo.local_block_width)   # local column block: cb // P
        # With C <= R the anchor words are fetched just in time into the stepping slot
        # (:meth:`_fetch`), and in a plain build the follower words too (a reuse build forms
        # a follower's codes against its anchor as the loader reads it); the loading slot
        # then holds only their tokens.
        fetch = C <= R
        fetch_f = fetch and self.plain
        ld = _Slot("ld", geo, self.plain, anchors=not fetch, followers=not fetch_f)
        cp = _Slot("cp", geo, self.plain, stepping=True)

        rd_active = Signal()
        rd_unit = Signal(bits_for(M - 1))
        # 0 anchor, 1 follower (window 3: 2 the second follower)
        rd_phase = Signal(2 if W3 else 1)
        load_go = Signal()
        pend = Signal()
        pend_unit = Signal(bits_for(M - 1))
        pend_phase = Signal(2 if W3 else 1)
        pend_last = Signal()
        pend_q = Signal(3 if W3 else 2)       # (valid, has follower[, has follower 2]) of the row unit
        pend_k = Signal(2)
        has_work = Signal()
        # Window 3: a unit's codes are formed one cycle after its last word arrives (a
        # register stage between the operand memory and the WindowCodeUnit), so the quad's
        # slot is full one cycle after its last word (``code_last``); ``code_busy`` marks
        # that cycle, in which the loader must not start the next quad.
        code_busy, code_last = Signal(name="w3_code_busy"), Signal(name="w3_code_last")
        codes_done = ~code_busy
        load_next = running & ~loader_done & ~rd_active & ~pend & (~slot_full | swap)
        m.d.comb += [
            has_work.eq(first_col < k_units),
            load_go.eq(Mux(self.go, has_work, load_next & codes_done if W3 else load_next)),
        ]

        reading = rd_active | load_go
        unit = Mux(rd_active, rd_unit, 0)
        phase = Mux(rd_active, rd_phase, 0)
        q_pos = Signal(uw)
        k_pos = Signal(uw)
        m.d.comb += [q_pos.eq(r0 + unit), k_pos.eq(c0 + unit)]
        # Unit positions by walking (kaleido_hw.engine.unit_walk): q_at / k_at are the read
        # units' coordinates and anchors. Q walks r0, r0+1, ... (r0 + R caught at row unit
        # R-1 for the next row block; 0 for a new column block); K restarts at c0 (k_base) for
        # every row block, c0 moves by the constant P*C, and a chunk starts at first_col.
        # The chunk group's constants, selected once (an indexed view would be a multiplexer
        # per use).
        wl = walk_layout(geo)
        walk = Signal(walk_constants_layout(geo))
        first_pos, jump = Signal(wl, name="first_pos_g"), Signal(wl, name="jump_g")
        d = Signal(2)
        m.d.comb += [d.eq(cfg.dirs[chunk.group]), walk.eq(cfg.walk[chunk.group]),
                     first_pos.eq(self.first_pos[chunk.group]), jump.eq(self.jump[chunk.group])]
        q_walk, q_next_rb, k_walk, k_base = (
            Signal(wl, name=n) for n in ("q_walk", "q_walk_next_rb", "k_walk", "k_walk_base"))
        q_at, k_at = Signal(wl, name="q_at"), Signal(wl, name="k_at")
        m.d.comb += [q_at.eq(q_walk),
                     k_at.eq(Mux(self.go, first_pos.as_value(), k_walk.as_value()))]
        q_inc = walk_inc(m, geo, q_at, walk, "q_inc")
        k_inc = walk_inc(m, geo, k_at, walk, "k_inc")
        k_jump = walk_add(m, geo, k_base, jump, walk, "k_jump")
        q_valid, k_valid = q_pos < units, k_pos < k_units
        q_tok, q_hf = q_at.tok, walk_has_follower(cfg, d, q_at)
        k_tok, k_hf = k_at.tok, walk_has_follower(cfg, d, k_at)
        if self.scheduler:
            # A scheduled position's unit comes with its anchor and follower bit (the
            # OrderUnit stores them): no index is converted on the read path.
            (q_sched, q_key), (k_sched, k_key) = self._order_lookup(
                m, reading, unit, phase, q_pos, k_pos, r0, c0, units, pend_last, loader_done)
            q_tok, q_hf = Mux(q_sched, q_key.tok, q_tok), Mux(q_sched, q_key.hasf, q_hf)
            if k_key is not None:
                k_tok, k_hf = Mux(k_sched, k_key.tok, k_tok), Mux(k_sched, k_key.hasf, k_hf)
        if W3:
            # A window-3 unit: three tokens along the direction, the second follower one
            # stride past the first; a window-3 column is a weight row, token = unit.
            has1, has2 = walk_members3(cfg, d, q_at)
            q_hf = Mux(w3, has1, q_hf)
        q_anchor, q_follow, q_hasf = unit_tokens(m, geo, cfg, d, q_tok, q_hf, q_valid, "q_unit")
        k_anchor, k_follow, k_hasf = unit_tokens(m, geo, cfg, d, k_tok, k_hf, k_valid, "k_unit")
        follower_phase = phase
        if W3:
            tw = t.tok_width
            q_has2 = Signal(name="q_unit_has2")
            q_follow2 = Signal(tw, name="q_unit_follower2")
            stride = direction_stride(cfg, d)
            m.d.comb += [q_has2.eq(w3 & q_hasf & has2),
                         q_follow2.eq(Mux(q_has2, (q_follow + stride)[:tw], 0))]
            row_k = Signal(tw, name="k_weight_row")
            m.d.comb += row_k.eq(Mux(k_valid, k_pos[:tw], 0))
            k_anchor, k_follow = Mux(w3, row_k, k_anchor), Mux(w3, row_k, k_follow)
            k_hasf = Mux(w3, k_valid, k_hasf)
            follower_phase = phase != 0
        if self.snoop_tap:
            # What the pre-pass snoops (array 0's only): a row unit's word read in the first
            # column block, so the memory's data next cycle is that word.
            tap = self.load_tap
            m.d.sync += [tap.valid.eq(reading & (unit < R) & q_valid & (cbp == 0) & ~w3),
                         tap.follower.eq(follower_phase), tap.pos.eq(q_pos),
                         tap.key.tok.eq(q_anchor), tap.key.hasf.eq(q_hasf)]
        # The follower is read in the cycle after its anchor: registered, off the read path.
        q_follow_r = Signal.like(q_follow, name="q_follow_r")
        k_follow_r = Signal.like(k_follow, name="k_follow_r")
        with m.If(reading & ~follower_phase):
            m.d.sync += [q_follow_r.eq(q_follow), k_follow_r.eq(k_follow)]
        walk_q_addr, walk_k_addr = (Mux(follower_phase, q_follow_r, q_anchor),
                                    Mux(follower_phase, k_follow_r, k_anchor))
        walk_q_en, walk_k_en = reading & (unit < R), reading & (unit < C)
        if W3:
            q_follow2_r = Signal(tw, name="q_follow2_r")
            with m.If(reading & ~follower_phase):
                m.d.sync += q_follow2_r.eq(q_follow2)
            walk_q_addr = Mux(phase == 2, q_follow2_r, walk_q_addr)
            walk_k_en = walk_k_en & (phase != 2)          # one weight row per column unit
        # ``direct``: this quad's fetched words go straight into the stepping slot as the
        # loader reads them (the first quad of a chunk, whose slot nothing steps); otherwise
        # a plain loader reads nothing, a reuse loader only for the CodeUnits and followers.
        direct = Signal()
        if fetch:
            with m.If(load_go):
                m.d.sync += direct.eq(self.go)
        if fetch_f:
            walking = Mux(load_go, self.go, direct)
            walk_q_en, walk_k_en = walk_q_en & walking, walk_k_en & walking
        if not fetch:
            m.d.comb += [self.q_addr.eq(walk_q_addr), self.k_addr.eq(walk_k_addr),
                         self.q_en.eq(walk_q_en), self.k_en.eq(walk_k_en)]
        # the unit's last read: its follower, in a window-3 run its second follower
        unit_end = (phase == 2) | ~w3 if W3 else phase
        last_read = reading & unit_end & (unit == M - 1)
        m.d.sync += [pend.eq(reading), pend_unit.eq(unit), pend_phase.eq(phase),
                     pend_last.eq(last_read),
                     pend_q.eq(Cat(q_valid, q_hasf, *([q_has2] if W3 else []))),
                     pend_k.eq(Cat(k_valid, k_hasf))]
        with m.If(reading):
            with m.If(follower_phase):
                with m.If(unit_end) if W3 else nullcontext():
                    m.d.sync += rd_phase.eq(0)
                    with m.If(unit == M - 1):
                        m.d.sync += rd_active.eq(0)
                    with m.Else():
                        m.d.sync += [rd_active.eq(1), rd_unit.eq(unit + 1),
                                     q_walk.eq(q_inc), k_walk.eq(k_inc)]
                    with m.If(unit == R - 1):
                        m.d.sync += q_next_rb.eq(q_inc)
                if W3:
                    with m.Else():
                        m.d.sync += [rd_active.eq(1), rd_phase.eq(2)]
                    with m.If(phase == 2):
                        for r in range(R):
                            with m.If(unit == r):
                                m.d.sync += ld.rtok_f2[r].eq(q_follow2_r)
                with m.If(phase == 1) if W3 else nullcontext():
                    for r in range(R):
                        with m.If(unit == r):
                            m.d.sync += ld.rtok_f[r].eq(q_follow_r)
                    for j, tok in enumerate(ld.ktok_f):
                        with m.If(unit == j):
                            m.d.sync += tok.eq(k_follow_r)
            with m.Else():
                m.d.sync += [rd_active.eq(1), rd_unit.eq(unit), rd_phase.eq(1),
                             q_walk.eq(q_at), k_walk.eq(k_at)]
                with m.If(self.go):
                    m.d.sync += k_base.eq(k_at)
                for r in range(R):
                    with m.If(unit == r):
                        m.d.sync += [ld.rtok_a[r].eq(q_anchor),
                                     ld.rvalid[r].eq(q_valid), ld.rhasf[r].eq(q_hasf),
                                     *(h[r].eq(q_has2) for h in ld.rhasf2)]
                for j in range(C):
                    with m.If(unit == j):
                        m.d.sync += [ld.cvalid[j].eq(k_valid), ld.chasf[j].eq(k_hasf),
                                     *(tok.eq(k_anchor) for tok in ld.ktok_a[j:j + 1])]
        with m.If(load_go):
            m.d.sync += [ld.plane.eq(chunk.plane), ld.add.eq(chunk.add), ld.cbp.eq(cbp), ld.first_rb.eq(r0 == 0),
                         ld.last_rb.eq(r0 + R >= units)]
            m.d.sync += [s.eq(0) for s in ld.sets()]

        # Arriving words (and, with reuse, their codes), into the loading slot when it holds
        # their kind (the fetch units write the others, a direct quad's too).
        if self.plain:
            self._plain_words(m, ld, pend, pend_unit, pend_phase, pend_q, pend_k)
        else:
            self._code_words(m, ld, pend, pend_unit, pend_phase, pend_q, pend_k,
                             (code_busy, code_last, pend_last))

        # Last word of the quad: the slot is full; move to the next quad of this array:
        # the next row block, else row block 0 of column block cb + P, else the chunk is loaded.
        with m.If(pend_last):
            if W3:
                m.d.sync += slot_full.eq(~w3)
            else:
                m.d.sync += slot_full.eq(1)
            with m.If(r0 + R < units):
                m.d.sync += [r0.eq(r0 + R), q_walk.eq(q_next_rb), k_walk.eq(k_base)]
            with m.Else():
                m.d.sync += [r0.eq(0), q_walk.eq(0)]
                with m.If(c0 + PC < k_units):
                    m.d.sync += [c0.eq(c0 + PC), cbp.eq(cbp + 1), k_base.eq(k_jump),
                                 k_walk.eq(k_jump)]
                with m.Else():
                    m.d.sync += [loader_done.eq(1), c0.eq(first_col), cbp.eq(0)]
        with m.If(self.go):
            m.d.sync += loader_done.eq(~has_work)
        if W3:
            with m.If(code_last):
                m.d.sync += slot_full.eq(1)

        # -- stepper --------------------------------------------------------------------------
        cur_valid = Signal()
        pass_idx = Signal(2)
        first = Signal()
        remaining = Signal(W)
        # a pass lasts at least R steps (a window-3 quad's pass 0 at least 3M: the loader's
        # reads of the next quad end before the anchors' just-in-time fetch starts)
        min_steps = max(D, R, 3 * M) if W3 else max(D, R)
        left = Signal(bits_for(min_steps))
        gmask = Signal(W)
        gsize = Signal(t.dim_width)
        m.d.comb += [gmask.eq(in_chunk), gsize.eq(chunk.size)]
        if self.plain:      # the code sets are single bits: a pass has work at every channel
            work = Array([gmask] + [Mux(work_bitmap(p, cp.qs, cp.ks), gmask, 0)
                                    for p in (1, 2, 3)])
        elif W3:
            # window 3: pass 1 (rows: second followers) and pass 2 (first followers) work
            # where some real row's follower is HALF or NONE (golden.array.window3.WORK3)
            w3_work = {1: cp.qhn2[0], 2: cp.qs[HALF] | cp.qs[NONE]}
            work = Array([gmask] + [Mux(w3, w3_work[p], work_bitmap(p, cp.qs, cp.ks)) & gmask
                                    for p in (1, 2)] + [work_bitmap(3, cp.qs, cp.ks) & gmask])
        else:
            work = Array([gmask] + [work_bitmap(p, cp.qs, cp.ks) & gmask for p in (1, 2, 3)])
        cur = Signal(W)
        m.d.comb += cur.eq(Mux(first, work[pass_idx], remaining))
        chan, ch_issue = lowest_set(m, cur, "chan")
        ch_count = Signal(bits_for(D))
        m.d.comb += ch_count.eq(popcount(cur))
        # Pass 3 with the matcher: the SlotUnit's items replace the channel bitmap.
        slot_pass = Signal()
        need_item = Signal()                # this pass-3 step takes a SlotUnit item
        hold = Signal()                     # ... and none is there: the stepper waits
        issue = Signal()
        count = Signal(bits_for(D))         # steps that carry work in this pass
        carried = Signal(bits_for(D))       # channels they carry (skipped = size - carried)
        step = Signal()
        slot_item = None
        if self.matcher:
            slot_item = self._matcher(m, ld, cp, slot_pass, step, swap, first, need_item)
            m.d.comb += [
                slot_pass.eq(cfg.match & (pass_idx == 3)),
                hold.eq(need_item & ~slot_item.valid),
                issue.eq(Mux(slot_pass, need_item & slot_item.valid & ~slot_item.payload.empty,
                             ch_issue)),
                count.eq(Mux(slot_pass, slot_item.payload.count, ch_count)),
                carried.eq(Mux(slot_pass, slot_item.payload.carried, ch_count)),
            ]
        else:
            m.d.comb += [issue.eq(ch_issue), count.eq(ch_count), carried.eq(ch_count)]
        steps_now = Signal(bits_for(min_steps))
        if W3:
            floor = Mux(w3 & (pass_idx == 0), 3 * M, R)
            m.d.comb += steps_now.eq(Mux(first, Mux(count > floor, count, floor), left))
            last_pass = pass_idx == Mux(w3, 2, 3)     # a window-3 quad runs passes 0-2
        else:
            m.d.comb += steps_now.eq(Mux(first, Mux(count > R, count, R), left))
            last_pass = pass_idx == 3
        last_step = steps_now == 1
        final = Signal()
        done_now = Signal()
        chunk_end = loader_done & ~rd_active & ~pend & ~slot_full & ~cur_valid
        m.d.comb += [
            step.eq(running & cur_valid & ~hold),
            self.stalled.eq(running & cur_valid & hold),
            done_now.eq(chunk_end & codes_done if W3 else chunk_end),
            self.chunk_done.eq(done_now),
            final.eq(running & done_now & chunk.last & ~self.go),
            swap.eq(running & slot_full & (~cur_valid | (step & last_step & last_pass))),
            self.stepping.eq(step),
        ]

        with m.If(step):
            with m.If(last_step):
                m.d.sync += [first.eq(1), pass_idx.eq(pass_idx + 1)]
                with m.If(last_pass):
                    m.d.sync += cur_valid.eq(swap)
                    if W3:
                        m.d.sync += pass_idx.eq(0)
            with m.Else():
                m.d.sync += [first.eq(0), remaining.eq(cur & (cur - 1)), left.eq(steps_now - 1)]
        with m.Elif(swap):
            m.d.sync += [cur_valid.eq(1), pass_idx.eq(0), first.eq(1)]
        with m.If(swap):
            m.d.sync += cp.copy(ld)
            m.d.sync += slot_full.eq(0)
        if fetch:
            # The next quad's words, each into the stepping slot after its register's last
            # use in this quad: Q anchors (read in passes 0-1) from pass 2's first step, K
            # anchors (passes 0 and 2) from pass 2's last step, both sides' followers (passes
            # 1-3; plain only) from the swap. A pass lasts at least R >= C steps, so each
            # side's R or C reads land before the register's first use in the next quad; the
            # loader (2R cycles of reads from the swap) has the next quad's tokens in ``ld``
            # and the memory port free by pass 2.
            #
            # A window-3 quad uses its anchors in pass 0 only, its second followers in pass 1
            # only and its weight rows (``kf``, double-buffered) in every pass: the next
            # quad's anchors are fetched from pass 0's last step, its second followers (into
            # ``qf2``) from pass 1's last step (a word read in a register's last step lands
            # after it). Pass 0 lasts at least 3M steps, so the loader's 3M reads from the
            # swap are done (its last word arrives with pass 0's last step at the earliest:
            # ``pend_last``); passes 1 and 2 last at least R, so the anchors' R reads end
            # before the followers' start, and theirs before the next swap's loader reads.
            q_go, k_go = Signal(name="q_fetch_go"), Signal(name="k_fetch_go")
            in_pass2 = step & slot_full & ~direct & (pass_idx == 2)
            if W3:
                # (the next quad is loaded, or its last word or codes are on their way)
                w3_last = step & last_step & ~direct & w3 & (slot_full | pend_last | code_busy)
                m.d.comb += [q_go.eq(Mux(w3, w3_last & (pass_idx == 0), in_pass2 & first)),
                             k_go.eq(in_pass2 & last_step & ~w3)]
            else:
                m.d.comb += [q_go.eq(in_pass2 & first), k_go.eq(in_pass2 & last_step)]
            # A direct quad's words as they arrive from the loader's reads.
            d_a = Signal(name="direct_anchor")
            m.d.comb += d_a.eq(pend & direct & (pend_phase == 0 if W3 else ~pend_phase))
            followers = d_f = None                      # followers: plain only
            if fetch_f:
                followers, d_f = Signal(name="followers_fetch_go"), Signal(name="direct_follower")
                m.d.comb += [followers.eq(swap & ~direct), d_f.eq(pend & direct & pend_phase)]
            arrivals = (d_a, d_f, pend_unit)
            q_fetch = (ld.rtok_f, cp.qf, followers, arrivals)
            if W3:
                f2_go, d_f2 = Signal(name="follower2_fetch_go"), Signal(name="direct_follower2")
                m.d.comb += [f2_go.eq(w3_last & (pass_idx == 1)),
                             d_f2.eq(pend & direct & (pend_phase == 2))]
                q_fetch = (ld.rtok_f2, cp.qf2, f2_go, (d_a, d_f2, pend_unit))
            toks_f, words_f, q_followers, q_arrivals = q_fetch
            self._fetch(m, "q", ld.rtok_a, toks_f, cp.qa, words_f, self._q_word,
                        anchors=q_go, followers=q_followers, direct=q_arrivals,
                        walk=(walk_q_addr, walk_q_en), port=(self.q_addr, self.q_en))
            self._fetch(m, "k", ld.ktok_a, ld.ktok_f, cp.ka, cp.kf, self._k_word,
                        anchors=k_go, followers=followers, direct=arrivals,
                        walk=(walk_k_addr, walk_k_en), port=(self.k_addr, self.k_en))

        # Drain tags: the tile in R0 at a pass's first step is the previous pass's tile.
        tag_layout = engine_tag_layout(geo)
        t3 = Signal(tag_layout)
        t3_valid = Signal()

        def tile_tag(tile):
            follower_rows = tile in (2, 3)
            follower_cols = tile in (1, 3)
            fields = {
                "plane": cp.plane, "add": cp.add, "cbp": cp.cbp, "kf": int(follower_cols),
                "rtok": Cat(*(cp.rtok_f if follower_rows else cp.rtok_a)),
                "rwe": cp.rvalid & cp.rhasf if follower_rows else cp.rvalid,
                "cwe": cp.cvalid & cp.chasf if follower_cols else cp.cvalid,
            }
            if W3:
                # A window-3 quad's tiles (golden.array.window3.REGISTER_TILE3): T0 anchors,
                # T1 second followers, T2 first followers, on weight-row columns, whose
                # local block takes one word (its low bit in the follower bit's place).
                fields["cbp"] = Mux(w3, cp.cbp[1:], cp.cbp)
                fields["kf"] = Mux(w3, cp.cbp[0], int(follower_cols))
                if tile == 1:
                    fields["rtok"] = Mux(w3, Cat(*cp.rtok_f2), fields["rtok"])
                    fields["rwe"] = Mux(w3, cp.rvalid & cp.rhasf2[0], fields["rwe"])
                if tile in (1, 2):
                    fields["cwe"] = Mux(w3, cp.cvalid, fields["cwe"])
            return fields

        def set_tag(target, fields):
            return [target[k].eq(v) for k, v in fields.items()]

        # -- outputs (registered) -------------------------------------------------------------
        m.d.sync += [self.row.eq(0), self.finished.eq(0)]
        with m.If(step & slot_pass):
            if self.matcher:
                self._slot_step(m, cp, slot_item, first, issue, slot_pass)
        with m.Elif(step):
            for r in range(R):
                value = Mux(pass_idx[1], cp.qf[r].word_select(chan, 8),
                            cp.qa[r].word_select(chan, 8))
                if W3:
                    # window 3: pass 1's rows are the second followers, whose code rides in
                    # qc2 (in a matcher's row: the slot lane's qc1)
                    value = Mux(w3 & (pass_idx == 1), cp.qf2[r].word_select(chan, 8), value)
                    qc2 = self.row[r].qc1 if self.matcher else self.row[r].qc2
                    m.d.sync += [self.row[r].w3.eq(w3),
                                 qc2.eq(Cat(cp.qlo2[r].bit_select(chan, 1),
                                            cp.qhi2[r].bit_select(chan, 1)))]
                qc = (Cat(~cp.rhasf[r], Const(1, 1)) if self.plain else
                      Cat(cp.qlo[r].bit_select(chan, 1), cp.qhi[r].bit_select(chan, 1)))
                m.d.sync += [self.row[r].a.eq(value),
                             self.row[r].qc.eq(qc),
                             self.row[r].valid.eq(cp.rvalid[r]),
                             self.row[r].mode.pass_idx.eq(pass_idx),
                             self.row[r].mode.first.eq(first),
                             self.row[r].mode.issue.eq(issue)]
            for j in range(C):
                # (a window-3 column holds its weight row as its follower word, every pass)
                value = Mux(pass_idx[0] | w3 if W3 else pass_idx[0],
                            cp.kf[j].word_select(chan, 8), cp.ka[j].word_select(chan, 8))
                kc = (Cat(~cp.chasf[j], Const(1, 1)) if self.plain else
                      Cat(cp.klo[j].bit_select(chan, 1), cp.khi[j].bit_select(chan, 1)))
                m.d.sync += [self.col[j].b.eq(value),
                             self.col[j].kc.eq(kc),
                             self.col[j].valid.eq(cp.cvalid[j])]
            if self.matcher:
                m.d.sync += [self.row[r].slot.eq(0) for r in range(R)]
                m.d.sync += [self.col[j].sel.eq(Sel.NONE) for j in range(C)]
        with m.If(step):
            with m.If(first):
                with m.Switch(pass_idx):
                    with m.Case(0):
                        m.d.sync += self.tag.eq(t3)
                        with m.If(~t3_valid):
                            m.d.sync += [self.tag.rwe.eq(0), self.tag.cwe.eq(0)]
                    for p in (1, 2, 3):
                        with m.Case(p):
                            m.d.sync += set_tag(self.tag, tile_tag(p - 1))
                    with m.Default():
                        pass
                with m.If(last_pass):
                    # the tile the next quad's first step (or the final step) drains: T3, a
                    # window-3 quad's T2
                    last_tile = tile_tag(3)
                    if W3:
                        last_tile = {k: Mux(w3, v, last_tile[k]) for k, v in tile_tag(2).items()}
                    m.d.sync += set_tag(t3, last_tile) + [t3_valid.eq(1)]
        with m.Elif(final):
            for r in range(R):
                m.d.sync += [self.row[r].mode.first.eq(1), self.row[r].mode.pass_idx.eq(0)]
            m.d.sync += [self.tag.eq(t3), self.finished.eq(1), running.eq(0)]
            with m.If(~t3_valid):
                m.d.sync += [self.tag.rwe.eq(0), self.tag.cwe.eq(0)]

        # -- counters ---------------------------------------------------------------------------
        cnt = self.counters
        with m.If(step):
            with m.If(issue):
                m.d.sync += cnt.issued[pass_idx].eq(cnt.issued[pass_idx] + 1)
            with m.Else():
                m.d.sync += cnt.bubbles.eq(cnt.bubbles + 1)
            if self.matcher:
                with m.If(slot_pass & issue & slot_item.payload.merged):
                    m.d.sync += self.merged.eq(self.merged + 1)
            with m.If(first):
                m.d.sync += cnt.skipped[pass_idx].eq(cnt.skipped[pass_idx] + gsize - carried)
        with m.If(swap):
            m.d.sync += cnt.quads.eq(cnt.quads + 1)

        # -- run start --------------------------------------------------------------------------
        with m.If(self.start):
            m.d.sync += [running.eq(1), loader_done.eq(1), slot_full.eq(0), cur_valid.eq(0),
                         rd_active.eq(0), t3_valid.eq(0), r0.eq(0), c0.eq(first_col),
                         q_walk.eq(0), cbp.eq(0), cnt.eq(0), self.merged.eq(0)]
        return m

    def _code_words(self, m, ld, pend, pend_unit, pend_phase, pend_q, pend_k, code_stage):
        """Reuse build: the arriving words into the loading slot (anchors only if it holds
        them); anchors are kept for the follower's comparison in a CodeUnit per side, which
        gives the follower's codes, its effective word and the quad's code sets."""
        cfg = self.cfg
        t = self.geo.tile
        R, C, W = t.rows, t.cols, self.geo.chunk_width
        m.submodules.q_codes = qcu = CodeUnit(W)
        m.submodules.k_codes = kcu = CodeUnit(W)
        q_hold = Signal(8 * W)
        k_hold = Signal(8 * W)
        for cu, hold, data_in, pq in ((qcu, q_hold, self._q_word, pend_q),
                                      (kcu, k_hold, self._k_word, pend_k)):
            m.d.comb += [cu.anchor.eq(hold), cu.follower.eq(data_in), cu.present.eq(pq[1]),
                         cu.full_mask.eq(cfg.full_mask), cu.half_mask.eq(cfg.half_mask)]
        # A linear block (cfg.linear): the window rule on X (rows), no codes on W (columns;
        # their window input is then unused, but driven alike: one module for both units).
        q_reuse, k_reuse = Signal(), Signal()
        m.d.comb += [q_reuse.eq(cfg.reuse), k_reuse.eq(cfg.reuse & ~cfg.linear),
                     qcu.reuse.eq(q_reuse), kcu.reuse.eq(k_reuse),
                     qcu.window.eq(cfg.linear), kcu.window.eq(cfg.linear)]
        W3 = self.geo.window3
        # phases of the arriving word: anchor, (first) follower
        ph_a, ph_f = ((pend_phase == 0, pend_phase == 1) if W3 else (~pend_phase, pend_phase))
        pair_codes = Const(1, 1)            # the pair CodeUnit's codes count (not window 3)
        if W3:
            w3 = cfg.window3
            pair_codes = ~w3
        with m.If(pend & ph_a):
            m.d.sync += [q_hold.eq(self._q_word), k_hold.eq(self._k_word)]
        for n, words, fwords, los, his, sets, cu, data_in, pv, side_codes in (
                (R, ld.qa, ld.qf, ld.qlo, ld.qhi, ld.qs, qcu, self._q_word, pend_q, pair_codes),
                (C, ld.ka, ld.kf, ld.klo, ld.khi, ld.ks, kcu, self._k_word, pend_k, 1)):
            for u in range(n):
                # a window-3 row keeps its first follower as read (its FULL channels are
                # idle); its codes come with the second follower
                effective = (Mux(w3, data_in, cu.effective) if W3 and cu is qcu
                             else cu.effective)
                follower = [fwords[u].eq(effective), los[u].eq(cu.code_lo),
                            his[u].eq(cu.code_hi)]
                with m.If(pend & (pend_unit == u)):
                    if words:
                        with m.If(ph_a):
                            m.d.sync += words[u].eq(data_in)
                        with m.Else():
                            m.d.sync += follower
                    else:
                        with m.If(ph_f):
                            m.d.sync += follower
            valid_codes = pend & ph_f & (pend_unit < n) & pv[0]
            with m.If(valid_codes & side_codes if W3 else valid_codes):
                m.d.sync += [sets[v].eq(sets[v] | cu.is_code[v]) for v in range(4)]
        if W3:
            self._window3_codes(m, ld, pend, pend_unit, pend_phase, pend_q, q_hold, code_stage)

    def _window3_codes(self, m, ld, pend, pend_unit, pend_phase, pend_q, q_hold, code_stage):
        """A window-3 run's row codes: the first and second followers are held as they
        arrive, and in the cycle after the second (``code_stage``: ``code_busy``, and
        ``code_last`` after the quad's last word, ``pend_last``) a :class:`WindowCodeUnit`
        gives both followers' codes (``golden.window_masks``, window 3), written into the
        loading slot with the quad's code sets (the first follower's, and the channels where
        a second follower is HALF or NONE). The register stage keeps the window rule's
        squares and sums off the operand memory's read path. The anchor and first follower
        are still held then: the next unit's words arrive from the cycle after."""
        cfg = self.cfg
        t = self.geo.tile
        R, W = t.rows, self.geo.chunk_width
        code_busy, code_last, pend_last = code_stage
        m.submodules.q_codes3 = wcu = WindowCodeUnit(W)
        q_hold1, q_hold2 = Signal(8 * W), Signal(8 * W)
        code_unit = Signal.like(pend_unit, name="w3_code_unit")
        code_q = Signal.like(pend_q, name="w3_code_q")
        arrive = pend & (pend_phase == 2)
        with m.If(pend & (pend_phase == 1)):
            m.d.sync += q_hold1.eq(self._q_word)
        m.d.sync += [code_busy.eq(arrive), code_last.eq(arrive & pend_last)]
        with m.If(arrive):
            m.d.sync += [q_hold2.eq(self._q_word), code_unit.eq(pend_unit), code_q.eq(pend_q)]
        with m.If(self.start):
            m.d.sync += [code_busy.eq(0), code_last.eq(0)]
        m.d.comb += [wcu.m0.eq(q_hold), wcu.m1.eq(q_hold1), wcu.m2.eq(q_hold2),
                     wcu.present1.eq(code_q[1]), wcu.present2.eq(code_q[2]), wcu.w3.eq(1),
                     wcu.reuse.eq(cfg.reuse), wcu.full_limit.eq(cfg.full_limit3),
                     wcu.half_mask.eq(cfg.half_mask)]
        c1 = [wcu.c1[2 * c:2 * c + 2] for c in range(W)]
        c2 = [wcu.c2[2 * c:2 * c + 2] for c in range(W)]
        for u in range(R):
            with m.If(code_busy & (code_unit == u)):
                m.d.sync += [ld.qlo[u].eq(Cat(*(c[0] for c in c1))),
                             ld.qhi[u].eq(Cat(*(c[1] for c in c1))),
                             ld.qlo2[u].eq(Cat(*(c[0] for c in c2))),
                             ld.qhi2[u].eq(Cat(*(c[1] for c in c2)))]
        with m.If(code_busy & (code_unit < R) & code_q[0]):
            m.d.sync += [ld.qs[v].eq(ld.qs[v] | Cat(*(c == v for c in c1))) for v in range(4)]
            m.d.sync += ld.qhn2[0].eq(ld.qhn2[0] | Cat(*((c == HALF) | (c == NONE)
                                                          for c in c2)))

    def _plain_words(self, m, ld, pend, pend_unit, pend_phase, pend_q, pend_k):
        """Plain build: the arriving words as read into the loading slot, when it holds them
        (no CodeUnit: a follower is NONE, or ABSENT when the unit has none); the quad's code
        sets are two bits per side, NONE (some real unit has a follower) and ABSENT (some
        real unit has not)."""
        t = self.geo.tile
        R, C = t.rows, t.cols
        for n, words, fwords, sets, data_in, pv in (
                (R, ld.qa, ld.qf, ld.qs, self._q_word, pend_q),
                (C, ld.ka, ld.kf, ld.ks, self._k_word, pend_k)):
            for u in range(len(words)):
                with m.If(pend & (pend_unit == u)):
                    with m.If(~pend_phase):
                        m.d.sync += words[u].eq(data_in)
                    with m.Else():
                        m.d.sync += fwords[u].eq(data_in)
            with m.If(pend & pend_phase & (pend_unit < n) & pv[0]):
                m.d.sync += [sets[2].eq(sets[2] | pv[1]), sets[3].eq(sets[3] | ~pv[1])]

    def _fetch(self, m, side, toks_a, toks_f, words_a, words_f, data_in, anchors, followers,
               direct, walk, port):
        """Just-in-time operand fetch of one side (C <= R): on ``anchors`` (or ``followers``,
        None when only anchors are fetched), read the next quad's anchor (follower) tokens
        ``toks_*`` one per cycle, and write each arriving word into the stepping slot's
        ``words_*``, as it writes a direct quad's words arriving from the loader's reads
        (``direct``: anchor and follower enables, the follower's None with ``followers``,
        unit). The memory port is the loader's
        (``walk``: address and enable) when no fetch reads; the two never read in the same
        cycle (the loader is done by pass 2) and a direct quad is never fetched."""
        n = len(toks_a)
        d_anchor, d_follower, d_unit = direct
        S = lambda n_, w=1: Signal(w, name=f"{side}_fetch_{n_}")  # noqa: E731
        on, issue, arrive, wr_a = S("on"), S("issue"), S("arrive"), S("write_anchor")
        idx, i_now, arrive_idx = (S(n_, bits_for(n - 1)) for n_ in ("idx", "now", "arrive_idx"))
        wr_idx = S("write_idx", max(len(idx), len(d_unit)))
        addr = S("addr", len(toks_a[0]))
        m.d.comb += [i_now.eq(Mux(on, idx, 0)), wr_idx.eq(Mux(arrive, arrive_idx, d_unit))]
        m.d.sync += [arrive.eq(issue), arrive_idx.eq(i_now)]
        if followers is None:                   # anchors only
            m.d.comb += [issue.eq(on | anchors), addr.eq(Array(toks_a)[i_now]),
                         wr_a.eq(arrive | d_anchor)]
            for u in range(n):
                with m.If(wr_a & (wr_idx == u)):
                    m.d.sync += words_a[u].eq(data_in)
        else:
            fol, f_now, arrive_f = S("follower"), S("follower_now"), S("arrive_follower")
            wr_f = S("write_follower")
            m.d.comb += [issue.eq(on | anchors | followers), f_now.eq(Mux(on, fol, followers)),
                         addr.eq(Mux(f_now, Array(toks_f)[i_now], Array(toks_a)[i_now])),
                         wr_a.eq(arrive & ~arrive_f | d_anchor),
                         wr_f.eq(arrive & arrive_f | d_follower)]
            with m.If(issue):
                m.d.sync += fol.eq(f_now)
            m.d.sync += arrive_f.eq(f_now)
            for u in range(n):
                with m.If(wr_idx == u):
                    with m.If(wr_a):
                        m.d.sync += words_a[u].eq(data_in)
                    with m.If(wr_f):
                        m.d.sync += words_f[u].eq(data_in)
        (walk_addr, walk_en), (p_addr, p_en) = walk, port
        m.d.comb += [p_addr.eq(Mux(issue, addr, walk_addr)), p_en.eq(issue | walk_en)]
        with m.If(issue):
            m.d.sync += [on.eq(i_now != n - 1), idx.eq(i_now + 1)]
        with m.If(self.start):
            m.d.sync += on.eq(0)

    def _order_lookup(self, m, reading, unit, phase, q_pos, k_pos, r0, c0, units, pend_last,
                      loader_done):
        """Scheduler: the unit at order position ``pos`` is read from the chunk's order bank
        one cycle ahead of its memory reads (the position read next cycle is known: the same
        unit after an anchor, the next one after a follower, else unit 0 of the next quad,
        whose base is the one the loader moves to at ``pend_last``). Returns, per side, whether
        the read unit is a scheduled one and its :func:`order_key_layout` (anchor and follower
        bit); a natural order (chunk 0 of a run), positions past the unit count (padding) and
        an unordered K side (``sched_sides = "q"``) use the walked position instead."""
        cfg, chunk = self.cfg, self.chunk
        t = self.geo.tile
        R, PC = t.rows, self.geo.banks
        first_col = self.first_col
        nxt = Mux(reading, Mux(phase, unit + 1, unit), 0)
        r_more = r0 + R < units
        r_next = Mux(pend_last, Mux(r_more, r0 + R, 0), r0)
        c_next = Mux(pend_last, Mux(r_more, c0, Mux(c0 + PC < units, c0 + PC, first_col)), c0)
        # Between chunks the next lookup is for the next chunk (its bank: next_bank).
        bank = Mux(loader_done & ~self.go, self.next_bank, chunk.parity)
        m.d.comb += [self.q_ord.bank.eq(bank), self.q_ord.addr.eq(Mux(reading, r0 + nxt, r_next))]
        if self.geo.k_ordered:
            m.d.comb += [self.k_ord.bank.eq(bank),
                         self.k_ord.addr.eq(Mux(reading, c0 + nxt, c_next))]
        key = order_key_layout(self.geo)
        q_key = key(self.q_ord.data)
        q_sched = Signal(name="q_sched")
        m.d.comb += q_sched.eq(cfg.schedule & ~self.q_ord.natural & (q_pos < units))
        k_side = (None, None)
        if self.geo.k_ordered:
            k_sched = Signal(name="k_sched")
            m.d.comb += k_sched.eq(cfg.schedule & ~self.k_ord.natural & (k_pos < units))
            k_side = (k_sched, key(self.k_ord.data))
        return (q_sched, q_key), k_side

    def _matcher(self, m, ld, cp, slot_pass, step, swap, first, need_item):
        """The SlotUnit and its feeding: a column block's classes (offered from the cycle after
        the swap to its first quad), each quad's request (from the cycle after its swap).
        Sets ``need_item`` (this pass-3 step consumes an item: the first step, and every
        step until the quad's ``last`` item) and returns the item stream as the stepper
        sees it (``valid``, ``payload``).

        Every handshake is honoured: the classes are read from the stepping slot, which
        keeps them until the next swap, and the SlotUnit takes them before that (the quad's
        pass 3 needs the block's slots); the request is held until taken, and the stepper
        waits (``stalled``) when a pass-3 step needs an item that is not there."""
        cfg, chunk, config = self.cfg, self.chunk, self.config
        t = self.geo.tile
        C = t.cols
        W = config.sched_pattern_width
        a = self.index
        m.submodules.slots = su = SlotUnit(config, stall_ids=(array_stream(a, "match_i"),
                                                             array_stream(a, "match_o")))
        self.slot_unit = su                 # for the benches' probes
        gate = {name: stall_gate(m, config, array_stream(a, name), f"slot_{name}")
                for name in ("quad", "o")}

        # The slots hold the chunk's channels compacted: chunk channel j is bit / byte j.
        in_chunk = self._in_chunk

        # Column block: pass-3 class of each column at each chunk channel (FULL/ABSENT 0,
        # HALF 1, NONE 2; padding columns and channels past the chunk 0), from the stepping
        # slot's column codes, which stay there for the whole column block: offered from the
        # cycle after the swap to its first quad until the SlotUnit takes it (at the latest
        # with the last slot of its match, before that quad's pass 3, so before the next swap).
        blk_offer = Signal()
        with m.If(su.blk.valid & su.blk.ready):
            m.d.sync += blk_offer.eq(0)
        with m.If(swap & ld.first_rb & cfg.match):
            m.d.sync += blk_offer.eq(1)
        for c in range(C):
            for j in range(W):
                code = Cat(cp.klo[c][j], cp.khi[c][j])
                m.d.comb += su.blk.payload.codes[c][j].eq(
                    Mux(cp.cvalid[c] & in_chunk[j], Cat(code == 1, code == 2), 0))
        m.d.comb += su.blk.valid.eq(blk_offer)

        # Quad request: channels where some real row has a HALF or NONE Q follower.
        req = Signal()
        with m.If(su.quad.valid & su.quad.ready):
            m.d.sync += req.eq(0)
        m.d.comb += su.quad.valid.eq(req & gate["quad"])
        with m.If(swap & cfg.match):
            m.d.sync += req.eq(1)
        hn = Signal(W)
        m.d.comb += [
            hn.eq(cp.qs[1] | cp.qs[2]),
            su.quad.payload.work.eq(hn & in_chunk),
            su.quad.payload.last.eq(cp.last_rb),
        ]
        # Pass-3 items: the first step takes one (the quad's first slot, or its ``empty``
        # item), then one per step until the item with ``last``; later steps are bubbles.
        more = Signal()                     # the quad has items not yet taken
        item = SimpleNamespace(valid=Signal(name="slot_item_valid"),
                               payload=Signal(su.o.payload.shape(), name="slot_item"))
        m.d.comb += [
            need_item.eq(slot_pass & (first | more)),
            item.valid.eq(su.o.valid & gate["o"]),
            item.payload.eq(su.o.payload),
            su.o.ready.eq(step & need_item & gate["o"]),
        ]
        with m.If(step & need_item):
            m.d.sync += more.eq(~su.o.payload.last)
        with m.If(self.start):
            m.d.sync += more.eq(0)
        return item

    def _slot_step(self, m, cp, item, first, issue, slot_pass):
        """Registered outputs of a pass-3 step replaying slot ``item`` (a bubble when
        ``issue`` is 0): rows carry the Q followers at A and B with both codes, column j
        ``sel[j]`` and the byte of A, of B, or the two low nibbles."""
        t = self.geo.tile
        R, C = t.rows, t.cols
        p = item.payload
        # Chunk channels A and B: the slots' byte / bit indices. Gated by ``slot_pass`` (true
        # whenever these outputs are written: the same values), so that the select lines of
        # the 2 (R + C) byte multiplexers are gates of this module, whose fanout the
        # standard-cell flow buffers; the SlotUnit's output would drive them unbuffered.
        ca = Signal.like(p.a, name="slot_chan_a")
        cb = Signal.like(p.b, name="slot_chan_b")
        m.d.comb += [ca.eq(Mux(slot_pass, p.a, 0)), cb.eq(Mux(slot_pass, p.b, 0))]
        for r in range(R):
            row = self.row[r]
            m.d.sync += [row.a.eq(cp.qf[r].word_select(ca, 8)),
                         row.qc.eq(_code_at(cp.qlo[r], cp.qhi[r], ca)),
                         row.a1.eq(cp.qf[r].word_select(cb, 8)),
                         row.qc1.eq(_code_at(cp.qlo[r], cp.qhi[r], cb)),
                         row.valid.eq(cp.rvalid[r]),
                         row.mode.pass_idx.eq(3), row.mode.first.eq(first),
                         row.mode.issue.eq(issue), row.slot.eq(1)]
        for j in range(C):
            col, sel = self.col[j], p.sel[j]
            byte_a = cp.kf[j].word_select(ca, 8)
            byte_b = cp.kf[j].word_select(cb, 8)
            pair = (sel == Sel.NIB_B) | (sel == Sel.NIB_AB)
            m.d.sync += [col.b.eq(Mux(sel == Sel.BYTE_B, byte_b,
                                      Mux(pair, Cat(byte_a[:4], byte_b[:4]), byte_a))),
                         col.kc.eq(_code_at(cp.klo[j], cp.khi[j], ca)),
                         col.kc1.eq(_code_at(cp.klo[j], cp.khi[j], cb)),
                         col.valid.eq(cp.cvalid[j]),
                         col.sel.eq(Mux(issue, sel.as_value(), Sel.NONE.value))]


def compact_words(m, pairs, chan, ok, D: int):
    """Compact each ``(data_in, word)`` of ``pairs``: byte j of ``word`` (``8*W`` bits) is byte
    ``chan[j]`` of ``data_in`` (``8*D`` bits) where ``ok[j]``, else byte 0 (``chan[j]`` is 0
    past the chunk's size). ``chan[j]`` for the bytes with ``ok`` must be strictly increasing
    in j (the chunk's channels in order), so ``s_j = chan[j] - j`` is non-decreasing.

    Instead of a D-to-1 byte multiplexer per output byte, a shift network in ``L =
    bits_for(D - 1)`` stages: stage b (b = 0 first) moves a byte down by ``2**b`` where
    the select ``c_b[p]`` is set, ``Y_{b+1}[p] = c_b[p] ? Y_b[p + 2**b] : Y_b[p]``, and
    output j is ``Y_L[j]``, so byte ``j + s_j`` reaches j when the selects along its path
    are the bits of ``s_j``. Output j passes level b at position ``j + (s_j >> b << b)``;
    these positions are strictly increasing in j (j is, the high part of ``s_j`` does not
    decrease), so no two outputs share a position and every select is one output's bit.
    Only the positions some output can pass are built (W at the last stage, doubling
    towards the input, at most D). The selects are found once for all pairs by a second,
    narrower network that routes each ``s_j`` (its bits still needed) from the output back
    along its path, with a valid bit."""
    W = len(chan)
    L = bits_for(D - 1)
    # positions needed at each level: need[L] = outputs, need[b] = need[b+1] and + 2**b
    need = [None] * (L + 1)
    need[L] = set(range(W))
    for b in reversed(range(L)):
        need[b] = {q for p in need[b + 1] for q in (p, p + (1 << b)) if q < D}
    # selects: tags (s_j, low bits) and valid bits, routed from the outputs back
    tag = {j: Signal(L, name=f"pack_s{j}") for j in range(W)}
    val = {j: ok[j] for j in range(W)}
    m.d.comb += [tag[j].eq((chan[j] - j)[:L]) for j in range(W)]
    sel = [None] * L
    for b in reversed(range(L)):
        sel[b] = {}
        for q in need[b + 1]:
            c = Signal(name=f"pack_c{b}_{q}")
            m.d.comb += c.eq(val[q] & tag[q][b])
            sel[b][q] = c
        if b == 0:
            break
        ntag, nval = {}, {}
        for p in need[b]:
            lo = p in need[b + 1]               # from p, not moved at stage b
            hi = p - (1 << b) in need[b + 1]    # from p - 2**b, moved at stage b
            t = Signal(b, name=f"pack_t{b}_{p}")
            v = Signal(name=f"pack_v{b}_{p}")
            if lo and hi:
                take = sel[b][p - (1 << b)]
                m.d.comb += [t.eq(Mux(take, tag[p - (1 << b)][:b], tag[p][:b])),
                             v.eq(take | (val[p] & ~tag[p][b]))]
            elif hi:
                m.d.comb += [t.eq(tag[p - (1 << b)][:b]), v.eq(sel[b][p - (1 << b)])]
            else:
                m.d.comb += [t.eq(tag[p][:b]), v.eq(val[p] & ~tag[p][b])]
            ntag[p], nval[p] = t, v
        tag, val = ntag, nval
    # the byte network, per pair
    for k, (data_in, word) in enumerate(pairs):
        y = {p: data_in.word_select(p, 8) for p in need[0]}
        for b in range(L):
            ny = {}
            for q in need[b + 1]:
                v = Signal(8, name=f"pack{k}_y{b + 1}_{q}")
                if q + (1 << b) < D:
                    m.d.comb += v.eq(Mux(sel[b][q], y[q + (1 << b)], y[q]))
                else:
                    m.d.comb += v.eq(y[q])
                ny[q] = v
            y = ny
        byte0 = data_in[:8]
        m.d.comb += word.eq(Cat(*(Mux(ok[j], y[j], byte0) for j in range(W))))


def _code_at(lo, hi, idx):
    """The 2-bit code (FULL 0, HALF 1, NONE 2, ABSENT 3) at channel ``idx`` of a unit whose
    code bits are the bitmaps ``lo`` (bit 0) and ``hi`` (bit 1)."""
    return Cat(lo.bit_select(idx, 1), hi.bit_select(idx, 1))
