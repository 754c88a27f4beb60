"""SlotUnit: one array's MergeMatcher with a slot store that replays the slot
sequence of a column block in pass 3 of each of its quads (``docs/engine.md``, "Matcher:
pass 3 with two channels per step").

Golden model: :func:`golden.dispatch.model.match` (the slot sequence) plus the skip rule below.
"""

from __future__ import annotations

import dataclasses

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from kaleido_hw.bitops import bits_for, masked_or
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.dispatch.layouts import Sel, index_width
from kaleido_hw.dispatch.matcher import MergeMatcher
from kaleido_hw.dispatch.scheduler import popcount
from kaleido_hw.stall_inject import probe_wires, stall_gate


__all__ = ["slot_block_layout", "slot_quad_layout", "slot_step_layout", "SlotUnit"]


def slot_block_layout(config: KaleidoConfig) -> data.StructLayout:
    """A column block's pass-3 classes: ``codes[c][m]`` of column c at chunk channel m,
    0 (K follower FULL or ABSENT, padding column, or m past the chunk's end), 1 (HALF),
    2 (NONE)."""
    C, W = config.cols, config.sched_pattern_width
    return data.StructLayout({"codes": data.ArrayLayout(data.ArrayLayout(unsigned(2), W), C)})


def slot_quad_layout(config: KaleidoConfig) -> data.StructLayout:
    """One quad's request for its pass-3 slots: ``work`` bit m = some real row unit of the
    quad has a Q follower HALF or NONE at chunk channel m; ``last`` = last quad of the
    column block (its slots are released after this replay)."""
    return data.StructLayout({"work": unsigned(config.sched_pattern_width), "last": unsigned(1)})


def slot_step_layout(config: KaleidoConfig) -> data.StructLayout:
    """One pass-3 step: a slot (``a``, ``b``, ``merged``, ``sel[c]`` as on the matcher's
    port), or, when ``empty``, no slot (the quad issues none). ``count``: the quad's issued
    slots and ``carried``: the channels they carry (count + merged slots), the same on every
    item of the quad; ``last``: last item of the quad."""
    C, W = config.cols, config.sched_pattern_width
    return data.StructLayout({
        "a": unsigned(index_width(W)),
        "b": unsigned(index_width(W)),
        "merged": unsigned(1),
        "sel": data.ArrayLayout(Sel, C),
        "count": unsigned(bits_for(W)),
        "carried": unsigned(bits_for(W)),
        "empty": unsigned(1),
        "last": unsigned(1),
    })


def _lowest(bits):
    """One-hot of the lowest set bit (0 when none), by a log-depth prefix OR."""
    width, acc, shift = len(bits), bits, 1
    while shift < width:
        acc = acc | (acc << shift)[:width]
        shift *= 2
    return bits & ~(acc << 1)[:width]


def _highest(bits):
    """One-hot of the highest set bit (0 when none), by a log-depth suffix OR."""
    width, acc, shift = len(bits), bits, 1
    while shift < width:
        acc = acc | (acc >> shift)
        shift *= 2
    return bits & ~(acc >> 1)


def _onehot_index(onehot):
    """Binary index of a one-hot vector (0 when none is set)."""
    width = len(onehot)
    bits = [Cat(*[onehot[j] for j in range(width) if (j >> k) & 1]).any()
            for k in range(max(1, (width - 1).bit_length()))]
    return Cat(*bits)


class SlotUnit(wiring.Component):
    """Pass-3 slot sequence of one PE array: match once per column block, replay per quad.

    Parameters
    ----------
    config : KaleidoConfig
        ``cols`` (C, columns of a block), ``sched_pattern_width`` (W, channels of a chunk;
        the matcher runs with M = W), ``matcher_lookahead`` (L).
    stall_ids : tuple of two ints
        Verification only (``engine_stall_seed``): stream ids of the matcher's input and
        output for :func:`~kaleido_hw.stall_inject.stall_gate` (no logic when the seed is 0).

    Interface
        ``blk`` (stream of :func:`slot_block_layout`): one column block's pass-3 classes,
        in the order the array walks its column blocks. The matcher reads a block in place
        while it matches it and takes it with its last slot (a block without work at once),
        so the producer needs no copy of it: it keeps the block on ``blk`` until taken, as
        the stream rules require anyway.
        ``quad`` (stream of :func:`slot_quad_layout`): one request per quad of those
        blocks, in order; ``last`` on each block's last quad.
        ``o`` (stream of :func:`slot_step_layout`): per quad, its issued slots in matcher
        order (``last`` on the final one), or one ``empty`` item when it issues none; every
        item carries the quad's ``count`` (issued slots: pass 3 lasts ``max(count, R)``)
        and ``carried`` (channels in them: ``skipped[3] += n - carried``).

    Algorithm
        The block goes through a :class:`~kaleido_hw.dispatch.matcher.MergeMatcher` (C columns,
        M = W channels, lookahead L, ``held_input``: no batch register); its slots are stored
        in the bank, slot j in entry j. A quad replays the bank's slots in order, skipping
        every slot with neither ``work[a]`` nor (merged and) ``work[b]`` set (no real row of
        the quad would do anything in it); so the quad's pass 3 lasts ``max(count, R)`` steps.
        A block without work (every class 0) bypasses the matcher and stores no slot.

    Timing (one cycle = one clock; no stall on ``o``)
        One bank of W slots. A block starts (cycle x) when it is on ``blk`` and the bank is
        free; its S slots are written at the ends of cycles x+1 .. x+S, the block is taken
        (``blk`` handshake) in cycle x+S with its last slot, and the bank can be replayed
        from cycle x+S+1 (a block without work is taken in cycle x, replayable from x+1). A
        quad is accepted (cycle y) when the previous quad's replay is over and the bank is
        complete; its items leave at y+1 .. y+max(count, 1), one per cycle, and the next quad
        can be accepted at y+max(count, 1)+1. The bank is released after the replay of a quad
        with ``last``, and the next block can start in the cycle after. In the engine that is
        early enough: the sequencer offers a block from the cycle after the swap to its first quad (the
        column codes are then in the stepping slot's registers, where they stay for the
        whole column block), after the release; that quad's pass 3 starts at least
        ``max(n, R) + 2R`` cycles after the offer (pass 0 issues all n channels of the chunk,
        passes 1 and 2 at least R steps), and its first item can leave ``S + 2 <= n + 2``
        cycles after the offer. So a second bank, to match a block while the one before is
        replayed, would never save a cycle (``docs/engine.md``, "Matcher in the
        datapath").
        Storage: the skip search reads the whole bank at once, so what it needs is in
        flip-flops, per channel rather than per slot (a channel is carried by at most one
        slot): the index of the slot that carries each channel (W x ceil(log2 W) bits), the
        carried channels (W bits) and the slots' merged bits (W bits, for ``carried``); a
        quad keeps slot j iff some channel with a ``work`` bit is carried by j. ``sel`` (3*C
        bits) is in ``sel_store``, an SRAM of W words (entry j = slot j) with one write port
        and one registered read port. Its read address is the slot that ``o`` will carry in
        the next cycle (the quad's first kept slot when the quad is accepted, the next kept
        slot after an item is taken, otherwise the same slot), so the read data is the sel
        of the item on ``o`` in every cycle, with no added latency; the item's ``a``, ``b``
        and ``merged`` (the lowest and the highest channel carried by that slot) are
        registered from the same lookahead.
    """

    def __init__(self, config: KaleidoConfig, stall_ids: tuple = (11, 12)):
        self.config = config
        self.stall_ids = stall_ids
        super().__init__({
            "blk": In(stream.Signature(slot_block_layout(config))),
            "quad": In(stream.Signature(slot_quad_layout(config))),
            "o": Out(stream.Signature(slot_step_layout(config))),
        })

    def matcher_config(self) -> KaleidoConfig:
        """The configuration of the embedded matcher: M = W channels, 1-bit (unused) ids."""
        return dataclasses.replace(self.config,
                                   matcher_channels=self.config.sched_pattern_width,
                                   token_id_width=1)

    def elaborate(self, platform):
        cfg = self.config
        C, W = cfg.cols, cfg.sched_pattern_width
        iw = index_width(W)
        m = Module()
        m.submodules.matcher = mm = MergeMatcher(self.matcher_config(), held_input=True)

        # A quad's skip search looks at the whole bank at once. It needs, per channel, the slot
        # that carries it (a channel is in at most one slot): W slot indices, the carried
        # channels, and the slots' merged bits (for the carried count). The column selects are
        # needed only for the slot issued in each cycle: an SRAM with a registered read port
        # (``sel_store``, entry j = slot j).
        chan_slot = [Signal(iw, name=f"chan_slot{c}") for c in range(W)]
        chan_live = Signal(W)
        slot_merged = Signal(W)
        m.submodules.sel_store = store = Memory(shape=data.ArrayLayout(Sel, C), depth=W, init=[])
        st_w = store.write_port()
        st_r = store.read_port()
        full = Signal()                                          # bank complete, not released

        # -- fill: block -> matcher -> bank -------------------------------------------------
        # The matcher reads the block in place (``held_input``): the producer keeps it on
        # ``blk`` until the matcher takes it with its last slot. A block starts when the bank
        # is free; one without work bypasses the matcher and is taken at once.
        wcount = Signal(range(W))
        inflight = Signal()                                      # the matcher holds the block
        nonempty = Signal()
        m.d.comb += nonempty.eq(Cat(*[self.blk.payload.codes[c].as_value() != 0
                                      for c in range(C)]).any())
        start = Signal()
        # Stall injection (test builds only): the gates delay a block's start and withhold the
        # slots' handshakes; a started block stays on the matcher's input until it is taken.
        gate_i = stall_gate(m, cfg, self.stall_ids[0], "match_i")
        gate_o = stall_gate(m, cfg, self.stall_ids[1], "match_o")
        m.d.comb += [
            start.eq(self.blk.valid & ~full & ~inflight & gate_i),
            mm.i.payload.codes.eq(self.blk.payload.codes),
            mm.i.valid.eq(self.blk.valid & nonempty & (inflight | start)),
            self.blk.ready.eq(Mux(nonempty, mm.i.ready & mm.i.valid, start)),
            # The bank is free whenever the matcher holds a block: ready but for stalls.
            mm.o.ready.eq(gate_o),
        ]
        with m.If(start):
            m.d.sync += [wcount.eq(0), chan_live.eq(0)]
            with m.If(nonempty):
                m.d.sync += inflight.eq(1)
            with m.Else():
                m.d.sync += full.eq(1)

        s = mm.o.payload
        m.d.comb += [st_w.addr.eq(wcount), st_w.data.eq(s.sel),
                     st_w.en.eq(mm.o.valid & mm.o.ready)]
        with m.If(mm.o.valid & mm.o.ready):
            m.d.sync += [wcount.eq(wcount + 1), slot_merged.bit_select(wcount, 1).eq(s.merged)]
            for c in range(W):
                with m.If((s.a == c) | (s.merged & (s.b == c))):
                    m.d.sync += [chan_slot[c].eq(wcount), chan_live[c].eq(1)]
            with m.If(s.last):
                m.d.sync += [inflight.eq(0), full.eq(1)]

        # Probes (plain wires) for the engine benches' invariants: blocks in, slots out.
        self.probes = probe_wires(m, {
            "probe_blk_fire": start,
            "probe_blk_codes": self.blk.payload.as_value(),
            "probe_slot_fire": mm.o.valid & mm.o.ready, "probe_slot_a": s.a,
            "probe_slot_b": s.b, "probe_slot_merged": s.merged,
            "probe_slot_sel": s.sel.as_value(), "probe_slot_last": s.last})

        # -- replay: per quad, the bank's slots that hit its work mask -----------------------
        active = Signal()
        remain = Signal(W)
        count = Signal(bits_for(W))
        carried = Signal(bits_for(W))
        qlast = Signal()
        # Slot j is issued iff the quad's rows have work at one of its channels (A, or B when
        # merged): the OR, over the carried channels with work, of the slot that carries them.
        # Each channel's slot index is decoded once (from registers, off the paths) for the
        # skip search and for the issued slot's channels below.
        work = self.quad.payload.work
        owner = [Signal(W, name=f"owner{c}") for c in range(W)]         # one-hot slot of c
        m.d.comb += [o.eq((Const(1, W) << index)[:W]) for o, index in zip(owner, chan_slot)]
        live = Signal(W)
        m.d.comb += live.eq(chan_live & work)
        keep = Signal(W)
        m.d.comb += keep.eq(masked_or(live, owner))
        m.d.comb += self.quad.ready.eq(~active & full)
        with m.If(self.quad.valid & self.quad.ready):
            m.d.sync += [active.eq(1), remain.eq(keep), count.eq(popcount(keep)),
                         carried.eq(popcount(keep) + popcount(keep & slot_merged)),
                         qlast.eq(self.quad.payload.last)]

        pick = Signal(W)
        rest = Signal(W)
        m.d.comb += rest.eq(remain & ~pick)
        # The sel store is read one cycle ahead: the address is the slot that ``remain`` will
        # pick in the next cycle (the quad's first kept slot, the next after an issue, or the
        # same one while ``o`` waits), so st_r.data is the sel of ``pick`` in every cycle.
        # ``pick`` itself (the lowest slot of ``remain``) is registered from the same lookahead:
        # the priority chain is off the path from ``remain`` into the sequencer's step.
        nxt = Signal(W)
        nxt_pick = Signal(W)
        with m.If(self.quad.valid & self.quad.ready):
            m.d.comb += nxt.eq(keep)
        with m.Elif(self.o.valid & self.o.ready):
            m.d.comb += nxt.eq(rest)
        with m.Else():
            m.d.comb += nxt.eq(remain)
        m.d.comb += [nxt_pick.eq(_lowest(nxt)),
                     st_r.addr.eq(_onehot_index(nxt_pick))]
        m.d.sync += pick.eq(nxt_pick)
        # The issued slot's A, B and merged are registered from the same lookahead: the
        # channels the slot ``nxt_pick`` carries (A the lower, B the higher when merged), so
        # the sequencer's operand selects start at registers.
        hit = Signal(W)
        m.d.comb += hit.eq(chan_live & Cat(*[(owner[c] & nxt_pick).any() for c in range(W)]))
        slot_a, slot_b = Signal(iw), Signal(iw)
        slot_m = Signal()
        nxt_merged = Signal()
        m.d.comb += nxt_merged.eq((slot_merged & nxt_pick).any())
        hit_lo, hit_hi = Signal(W), Signal(W)
        m.d.comb += [hit_lo.eq(_lowest(hit)), hit_hi.eq(_highest(hit))]
        m.d.sync += [slot_a.eq(_onehot_index(hit_lo)),
                     slot_b.eq(Mux(nxt_merged, _onehot_index(hit_hi), 0)),
                     slot_m.eq(nxt_merged)]
        o = self.o.payload
        m.d.comb += [
            self.o.valid.eq(active),
            o.a.eq(slot_a),
            o.b.eq(slot_b),
            o.merged.eq(slot_m),
            o.sel.eq(Mux(remain.any(), st_r.data.as_value(), 0)),
            o.count.eq(count),
            o.carried.eq(carried),
            o.empty.eq(~remain.any()),
            o.last.eq(~rest.any()),
        ]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += remain.eq(rest)
            with m.If(~rest.any()):
                m.d.sync += active.eq(0)
                with m.If(qlast):
                    m.d.sync += full.eq(0)
        return m
