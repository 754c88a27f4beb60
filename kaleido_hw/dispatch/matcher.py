"""MergeMatcher: pairs compatible channels of a C-token batch into shared issue slots.

Golden model: :func:`golden.dispatch.model.match`; doc: ``docs/dispatch.md``.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from kaleido_hw.bitops import onehot_or
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.dispatch.layouts import Sel, index_width, matcher_batch_layout, matcher_slot_layout
from kaleido_hw.dispatch.scheduler import popcount


__all__ = ["MergeMatcher"]


def _at_or_above_first(bits):
    """Bit j set when some bit at index <= j of ``bits`` is set (a log-depth prefix OR,
    shallower than the ripple carry of ``bits & -bits``)."""
    width, shift = len(bits), 1
    while shift < width:
        bits = bits | (bits << shift)[:width]
        shift *= 2
    return bits[:width]


def _above_first(bits):
    """Bit j set when some bit at index < j of ``bits`` is set."""
    return (_at_or_above_first(bits) << 1)[:len(bits)]


class MergeMatcher(wiring.Component):
    """Greedy merging of two channels into one issue slot for one PE array.

    Parameters
    ----------
    config : KaleidoConfig
        ``cols`` (C tokens per batch), ``matcher_channels`` (M), ``matcher_lookahead`` (L),
        ``token_id_width`` (T).
    held_input : bool
        False (default): the batch is taken into a register when it is accepted. True: the
        matcher has no batch register and reads the batch on ``i`` in place while it issues
        its slots, taking it (``i.ready``) with the last slot; the producer keeps it on ``i``
        meanwhile, as the stream rules already require of a batch not yet taken. For a
        producer whose batch sits in registers anyway (the SlotUnit's column codes).

    Interface
        ``i``: stream of ``matcher_batch_layout``: one batch of C token ids and a 2-bit reuse
        code per (token, channel); work units FULL 0, HALF 1, NONE 2 (code 3 counts as NONE).
        ``o``: stream of ``matcher_slot_layout``: one slot per cycle, the batch's slots in
        issue order with ``first``/``last`` flags; a batch without work issues no slot.

    Algorithm (mirrored exactly by :func:`golden.dispatch.model.match`)
        A channel is live while it has work in some column and has not been issued. Each slot:
        A = the lowest live channel; the pending buffer is A plus the next L-1 live channels;
        B = the first channel of that buffer after A with work(A) + work(B) <= 2 in every
        column (a column port carries 8 bits = 2 units). The slot issues A and B (``merged``)
        or A alone, and a per-column ``sel`` (``Sel``) says what each column consumes.

    Microarchitecture
        The batch sits in one register (on ``i`` with ``held_input``) with a live mask; the
        slot is combinational from it (priority encoders, a per-channel compatibility test
        against A, a popcount that limits B to the lookahead window). One slot per cycle.
        Latency: a batch accepted in cycle c (with ``held_input``: on ``i`` in cycle c while
        the matcher is idle) issues its first slot in cycle c + 1. The next batch is
        accepted in the cycle of the current batch's last slot, so batches stream without a
        bubble; with ``held_input`` the current batch is taken in that cycle and the next
        one starts in the cycle after (one idle cycle between batches). A batch without work
        is taken at once and issues no slot.
    """

    PORT_DOCS = {
        "i__valid": "input batch valid",
        "i__ready": "input batch accepted when valid and ready (in the last slot's cycle or "
                    "when idle)",
        "i__payload": "input batch: C token ids (T bits each, token 0 first), then the 2-bit "
                      "codes, token-major (token c, channel m at bits T*C + 2*(c*M + m))",
        "o__valid": "issue slot valid",
        "o__ready": "issue slot consumed when valid and ready",
        "o__payload": "issue slot: a, b (channel indices), merged, sel (3 bits per column), "
                      "the batch's C token ids, first, last; LSB first",
    }

    def __init__(self, config: KaleidoConfig, held_input: bool = False):
        self.config = config
        self.held_input = held_input
        super().__init__({
            "i": In(stream.Signature(matcher_batch_layout(config))),
            "o": Out(stream.Signature(matcher_slot_layout(config))),
        })

    def elaborate(self, platform):
        cfg = self.config
        C, M, L = cfg.cols, cfg.matcher_channels, cfg.matcher_lookahead
        m = Module()

        batch = self.i.payload if self.held_input else Signal(matcher_batch_layout(cfg))
        live = Signal(M)
        first = Signal()

        def units(code):
            # FULL 0 -> 0, HALF 1 -> 1, NONE 2 (and reserved 3) -> 2.
            return Cat(code[0] & ~code[1], code[1])

        # Every shared intermediate is a Signal: Amaranth would otherwise copy the expression
        # into each use.
        w = [[Signal(2, name=f"w{c}_{j}") for j in range(M)] for c in range(C)]
        for c in range(C):
            m.d.comb += [w[c][j].eq(units(batch.codes[c][j])) for j in range(M)]
        nonempty_in = Signal(M)
        m.d.comb += nonempty_in.eq(Cat(*[
            Cat(*[self.i.payload.codes[c][j] != 0 for c in range(C)]).any() for j in range(M)]))

        above = Signal(M)                  # channels after A (the lowest live channel)
        m.d.comb += above.eq(_above_first(live))
        a_oh = Signal(M)
        m.d.comb += a_oh.eq(live & ~above)
        wa = [Signal(2, name=f"wa{c}") for c in range(C)]
        m.d.comb += [wa[c].eq(onehot_or(a_oh, w[c])) for c in range(C)]
        compat = Signal(M)
        m.d.comb += compat.eq(Cat(*[
            Cat(*[(wa[c] + w[c][j]) <= 2 for c in range(C)]).all() for j in range(M)]))
        cand = Signal(M)
        m.d.comb += cand.eq(live & compat & above)
        after_b = Signal(M)
        m.d.comb += after_b.eq(_above_first(cand))
        b_oh = Signal(M)
        m.d.comb += b_oh.eq(cand & ~after_b)
        merge = Signal()
        if L >= 2:
            # Live channels strictly between A and B; B is in the window if fewer than L-1.
            between = Signal(M)
            m.d.comb += between.eq(live & above & ~(after_b | b_oh))
            m.d.comb += merge.eq(cand.any() & (popcount(between) <= L - 2))
        b_used = Signal(M)
        m.d.comb += b_used.eq(Mux(merge, b_oh, 0))
        wb = [Signal(2, name=f"wb{c}") for c in range(C)]
        m.d.comb += [wb[c].eq(onehot_or(b_used, w[c])) for c in range(C)]

        rest = Signal(M)
        m.d.comb += rest.eq(live & ~a_oh & ~b_used)
        iw = index_width(M)
        o = self.o.payload
        m.d.comb += [
            self.o.valid.eq(live.any()),
            o.a.eq(onehot_or(a_oh, [Const(j, iw) for j in range(M)])),
            o.b.eq(onehot_or(b_used, [Const(j, iw) for j in range(M)])),
            o.merged.eq(merge),
            o.tokens.eq(batch.tokens),
            o.first.eq(first),
            o.last.eq(~rest.any()),
        ]
        for c in range(C):
            a_, b_ = wa[c], wb[c]
            m.d.comb += o.sel[c].eq(Mux(
                b_ == 0,
                Mux(a_ == 2, Sel.BYTE_A, Mux(a_ == 1, Sel.NIB_A, Sel.NONE)),
                Mux(a_ == 0, Mux(b_ == 2, Sel.BYTE_B, Sel.NIB_B), Sel.NIB_AB)))

        with m.If(self.o.valid & self.o.ready):
            m.d.sync += [live.eq(rest), first.eq(0)]
        if self.held_input:
            # Idle: start the batch on ``i`` (take it at once when it has no work); busy:
            # take it with its last slot.
            m.d.comb += self.i.ready.eq(Mux(live.any(), self.o.ready & ~rest.any(),
                                            ~nonempty_in.any()))
            with m.If(~live.any() & self.i.valid):
                m.d.sync += [live.eq(nonempty_in), first.eq(1)]
        else:
            m.d.comb += self.i.ready.eq(~live.any() | (self.o.ready & ~rest.any()))
            with m.If(self.i.valid & self.i.ready):
                m.d.sync += [batch.eq(self.i.payload), live.eq(nonempty_in), first.eq(1)]
        return m
