"""The input pass of the vector unit's softmax units: rows of S into row buffers, with the
row's maximum (``docs/vector.md``, "Algorithm").

:func:`build_row_input` builds, inside the caller's module, ``NB`` row buffers (one
``amaranth.lib.memory`` each, one word of L scores per beat) with their per-row registers,
and the logic that accepts a row's beats into a free buffer while it folds the beats' scores
into the row's maximum. A buffer turns LOADED two cycles after the row's last beat (the
beat and maximum stages); the caller's later passes take LOADED buffers in rotation and
free them. Used by :class:`~kaleido_hw.vector.softmax_unit.SoftmaxUnit` (section 14) and
:class:`~kaleido_hw.vector.block_softmax.BlockSoftmaxUnit` (section 15), which differ only
in the per-row fields taken from a row's first beat.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Cat, Const, Mux, Signal, signed
from amaranth.lib import memory

from kaleido_hw.bitops import tree
from kaleido_hw.vector.layouts import lane_index_width


__all__ = ["FREE", "LOADED", "SUMMING", "SUMMED", "RowInput", "build_row_input"]

# Row buffer states: written by the input, being worked on, done (read out next).
FREE, LOADED, SUMMING, SUMMED = 0, 1, 2, 3


@dataclass
class RowInput:
    """What :func:`build_row_input` built: the buffers' memories and ports, their per-row
    registers (``fields[name][j]``: a first-beat field of the row in buffer j), the input
    handshake (``accept``), the beat being written (``beat``, ``beat_addr``) and the
    write-side pointers (``in_ptr``, ``in_count``)."""
    nb: int
    words: int
    wports: list
    rports: list
    state: list
    beats: list
    tail: list
    max: list
    fields: dict
    accept: Signal
    in_ptr: Signal
    in_count: Signal
    beat: Signal
    beat_addr: Signal

    def next_buffer(self, ptr):
        """The buffer after ``ptr`` in rotation."""
        return Mux(ptr == self.nb - 1, 0, ptr + 1)

    @staticmethod
    def pick(signals, index):
        """``signals[index]`` as an AND-OR multiplexer."""
        return tree([Mux(index == j, s, 0) for j, s in enumerate(signals)], lambda a, b: a | b)


def build_row_input(m, cfg, s, overflow, beat_layout, fields: dict) -> RowInput:
    """Row buffers and the input pass in module ``m``.

    ``cfg``: vector_lanes (L), vector_max_row, vector_score_bits (B), vector_row_buffers
    (NB). ``s``: the input stream (``beat_layout``: ``scores``, ``tail``, ``last`` and every
    name of ``fields``). ``overflow``: set (sticky) when a row has more than vector_max_row
    scores (the beats past the buffer are dropped). ``fields``: name -> width of the per-row
    fields taken from a row's first beat (the scale pair, ...).
    """
    L, B, NB = cfg.vector_lanes, cfg.vector_score_bits, cfg.vector_row_buffers
    W = cfg.vector_max_row // L                      # words (beats) per row buffer
    TW = lane_index_width(L)

    # -- row buffers and their per-row registers -----------------------------------------
    wports, rports = [], []
    for j in range(NB):
        mem = memory.Memory(shape=L * B, depth=W, init=[])
        m.submodules[f"row{j}"] = mem
        wports.append(mem.write_port())
        rports.append(mem.read_port())
    state = [Signal(2, name=f"state{j}") for j in range(NB)]
    row_beats = [Signal(range(W + 1), name=f"beats{j}") for j in range(NB)]
    row_tail = [Signal(TW, name=f"tail{j}") for j in range(NB)]
    row_max = [Signal(signed(B), name=f"max{j}") for j in range(NB)]
    row_fields = {f: [Signal(w, name=f"{f}{j}") for j in range(NB)] for f, w in fields.items()}
    ri = RowInput(NB, W, wports, rports, state, row_beats, row_tail, row_max, row_fields,
                  None, None, None, None, None)

    # -- pass 1: input ----------------------------------------------------------------
    in_ptr = Signal(range(NB))          # buffer of the row being accepted
    in_first = Signal(init=1)           # the next accepted beat starts a row
    in_count = Signal(range(W + 1))     # beats of the row accepted so far (saturating)
    # A row's buffer turns LOADED two cycles after its last beat is accepted (beat and
    # maximum stages); until then the rows in those stages hold their buffers.
    pending = Signal(NB)
    m.d.comb += s.ready.eq((ri.pick(state, in_ptr) == FREE) & ~pending.bit_select(in_ptr, 1))
    accept = s.valid & s.ready

    # The accepted beat is registered; the next cycle writes it and folds it into the
    # maximum (so no comparator tree hangs on the input port).
    beat = Signal(beat_layout)
    beat_valid, beat_first, beat_keep = Signal(), Signal(), Signal()
    beat_buf = Signal(range(NB))
    beat_addr = Signal(range(W + 1))    # W: a beat past the buffer (dropped)
    m.d.sync += beat_valid.eq(accept)
    with m.If(accept):
        m.d.sync += [
            beat.eq(s.payload), beat_first.eq(in_first), beat_buf.eq(in_ptr),
            beat_addr.eq(in_count), beat_keep.eq(in_count < W),
            in_first.eq(s.payload.last),
            in_count.eq(Mux(s.payload.last, 0, Mux(in_count < W, in_count + 1, W))),
        ]
        with m.If(s.payload.last):
            m.d.sync += in_ptr.eq(ri.next_buffer(in_ptr))

    lowest = Const(-(1 << (B - 1)), signed(B))
    lane_ok = [Const(1)] + [(~beat.last) | (beat.tail >= i) for i in range(1, L)]   # lane 0 always
    # The beat's maximum over its lanes is registered before it is folded into the row's
    # (the comparator tree and the fold would not fit one cycle of the arrays' clock).
    beat_max = Signal(signed(B))
    m.d.sync += beat_max.eq(tree(
        [Mux(lane_ok[i], beat.scores[i], lowest) for i in range(L)],
        lambda a, b: Mux(a >= b, a, b)))
    mx_valid, mx_first, mx_keep, mx_last = Signal(), Signal(), Signal(), Signal()
    mx_buf = Signal(range(NB))
    mx_addr = Signal(range(W + 1))
    mx_tail = Signal(TW)
    mx_fields = {f: Signal(w, name=f"mx_{f}") for f, w in fields.items()}
    m.d.sync += [mx_valid.eq(beat_valid), mx_first.eq(beat_first), mx_keep.eq(beat_keep),
                 mx_last.eq(beat.last), mx_buf.eq(beat_buf), mx_addr.eq(beat_addr),
                 mx_tail.eq(beat.tail)]
    m.d.sync += [mx_fields[f].eq(getattr(beat, f)) for f in fields]
    run_max = Signal(signed(B))
    run_fields = {f: Signal(w, name=f"run_{f}") for f, w in fields.items()}
    new_max = Signal(signed(B))
    m.d.comb += new_max.eq(Mux(mx_first | (mx_keep & (beat_max > run_max)),
                               beat_max, run_max))
    with m.If(mx_valid):
        m.d.sync += run_max.eq(new_max)
        with m.If(mx_first):
            m.d.sync += [run_fields[f].eq(mx_fields[f]) for f in fields]
        with m.If(~mx_keep):
            m.d.sync += overflow.eq(1)
    row_done_in = mx_valid & mx_last
    m.d.comb += pending.eq(Cat(*[(beat_valid & beat.last & (beat_buf == j)) |
                                 (row_done_in & (mx_buf == j)) for j in range(NB)]))
    for j in range(NB):
        with m.If(row_done_in & (mx_buf == j)):
            m.d.sync += [
                state[j].eq(LOADED),
                row_beats[j].eq(mx_addr + mx_keep),
                row_tail[j].eq(Mux(mx_keep, mx_tail, L - 1)),
                row_max[j].eq(new_max),
            ]
            m.d.sync += [row_fields[f][j].eq(Mux(mx_first, mx_fields[f], run_fields[f]))
                         for f in fields]
    ri.accept, ri.in_ptr, ri.in_count, ri.beat, ri.beat_addr = (accept, in_ptr, in_count, beat,
                                                                beat_addr)
    return ri
