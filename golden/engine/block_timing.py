"""Cycle model of one attention block in the engine core's block datapath (``docs/engine.md``,
"The attention path in the core"; RTL ``kaleido_hw.engine.block_attention``).

A kind 2 COMPUTE runs its S on the engine, then, in the cycle its AT_READ state finds the
block datapath idle (cycle 0 below), starts three things at once: the engine's S read-out,
the S row packer and the block (softmax, P transposer, P @ V). From there the block's
timing depends on its data only through P @ V's steps, so the model has two parts:

* :func:`block_readout`, data-independent and cached per (datapath, box tokens): a
  cycle-by-cycle walk of the read-out chain, register for register as the RTL has it:

  1. the engine's read-out counters and its three pipeline stages, which advance when the
     row-pair reorder buffer takes a column; the reorder buffer (two halves: a row pair's
     ``n`` columns in, then its ``n`` beats of two scores out);
  2. the S row packer (two scores a cycle into beats of ``L`` lanes, one output beat a
     cycle; a row's end closes a beat);
  3. the block softmax's input pass (a free row buffer, LOADED two cycles after the row's
     last beat) and its output pass (state read, maximum, ``k`` reads gated by the output
     FIFO's credit, seven pipeline stages to the FIFO, the state write before the next row),
     its ten-entry ``SyncFIFOBuffered`` (an entry written in cycle t is readable in t + 2);
  4. the P transposer (rows into two halves of ``R`` rows; a full half read out one key per
     cycle into P @ V's P memory), which gives ``p_ready``: the cycle from which P @ V may
     read each row block.

  It returns the cycle the row packer's ``done`` rises (the COMPUTE ends the cycle after)
  and ``p_ready``.
* the rest in closed form or a short walk: P @ V's cycles from its steps and ``p_ready``
  (:func:`golden.engine.pv.pv_run_cycles`), then the partials' read-out into the output
  unit (one beat of ``P * C`` channels a cycle, ``ceil(max_head_dim / L)`` beats a row); after
  a query box's last block, :func:`finish_walk`: each row's reciprocal (17 cycles), its two
  reads per chunk through the output FIFO (seven entries, credited), the O packer (four
  int16 per 64-bit beat) and the STORE that writes them.

Plain Python; no hardware imports. :func:`golden.engine.core_model.core_schedule` uses it
for programs with attention blocks.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from functools import lru_cache

from golden.checks import check_int

__all__ = ["BlockDatapath", "BlockReadout", "block_readout", "FinishTiming", "finish_walk",
           "PARTIALS_DONE", "FIN_QUIET", "RECIP_CYCLES", "O_VALUES_PER_BEAT"]

#: Cycles from the partials' last beat into the output unit to the block's end: the cycle
#: ``partials_in`` is registered and the one the block's ``done`` is (``busy`` low after).
PARTIALS_DONE = 2
#: Cycles from the last partial beat to the first finish request taken: the output unit's
#: four pipeline stages must be empty.
FIN_QUIET = 5
#: The output unit's reciprocal ``2**40 // L``: 33 quotient bits at two a cycle, and the
#: cycle that hands it to the reads.
RECIP_CYCLES = 17
#: int16 values of O per memory beat (the O packer).
O_VALUES_PER_BEAT = 4

_SOFTMAX_FIFO = 10          # block_softmax OUT_FIFO_DEPTH
_SOFTMAX_PIPE = 7           # a read to its entry at the FIFO
_OUTPUT_FIFO = 7            # block_output OUT_FIFO_DEPTH
_OUTPUT_PIPE = 4            # a read to its output entry


@dataclass(frozen=True)
class BlockDatapath:
    """What the block datapath's timing depends on (``KaleidoConfig`` keys): ``rows`` R,
    ``cols`` C, ``arrays`` P, ``lanes`` (``vector_lanes`` = P * C), ``row_buffers``
    (``vector_row_buffers``), ``max_head_dim`` (``engine_max_head_dim``: the beats of a
    row of partials and of O), ``shared_arrays`` (``engine_pe = "reuse-pv"``: a COMPUTE's S
    waits until the block before has left the arrays), ``v_banks`` (``core_banks``: a V
    LOAD waits only for a running block's P @ V on its own bank)."""
    rows: int = 4
    cols: int = 4
    arrays: int = 4
    lanes: int = 16
    row_buffers: int = 5
    max_head_dim: int = 128
    shared_arrays: bool = False
    v_banks: int = 2

    def __post_init__(self):
        for name in ("rows", "cols", "arrays", "lanes", "row_buffers", "max_head_dim",
                     "v_banks"):
            check_int(name, getattr(self, name), 1, 1 << 12)
        if self.lanes != self.arrays * self.cols:
            raise ValueError(f"lanes must be arrays * cols = {self.arrays * self.cols} (a P @ V "
                             f"beat is an output beat), got {self.lanes}")

    @classmethod
    def from_config(cls, config) -> "BlockDatapath":
        """From a ``KaleidoConfig`` (duck-typed)."""
        return cls(config.rows, config.cols, config.engine_arrays, config.vector_lanes,
                   config.vector_row_buffers, config.engine_max_head_dim,
                   config.engine_pe == "reuse-pv", config.core_banks)

    @property
    def chunks(self) -> int:
        """Beats of one row of partials (and of O) into and out of the output unit."""
        return -(-self.max_head_dim // self.lanes)


@dataclass(frozen=True)
class BlockReadout:
    """The data-independent part of a block (cycles from the one that starts it, 0):
    ``s_done``, the first cycle the S row packer's ``done`` is high (the COMPUTE leaves
    AT_BLOCK then, and the controller takes the next command a cycle later); ``p_ready``,
    per row block of P @ V the first cycle it may read it; ``cycles``, the cycles the walk
    took (the transposer's last word)."""
    s_done: int
    p_ready: tuple
    cycles: int


class _SyncFifoBuffered:
    """Timing of ``amaranth.lib.fifo.SyncFIFOBuffered`` (depth > 1): an inner memory FIFO of
    ``depth - 1`` entries and an output register; ``level`` counts both."""

    def __init__(self, depth: int):
        self.depth, self.inner, self.head = depth, deque(), None

    @property
    def r_rdy(self) -> bool:
        return self.head is not None

    @property
    def level(self) -> int:
        return len(self.inner) + (self.head is not None)

    def step(self, w_en: bool, item, r_en: bool) -> None:
        """One clock edge: write ``item`` when ``w_en``; ``r_en`` is the reader's ready."""
        assert not w_en or len(self.inner) < self.depth - 1, "FIFO overflow"
        if self.inner and (self.head is None or r_en):
            self.head = self.inner.popleft()
        elif r_en:
            self.head = None
        if w_en:
            self.inner.append(item)


@lru_cache(maxsize=256)
def block_readout(dp: BlockDatapath, n: int) -> BlockReadout:
    """Walk the read-out chain of an ``n x n`` block cycle by cycle (module docstring)."""
    n = check_int("n", n, 1, 1 << 16)
    R, L, NB = dp.rows, dp.lanes, dp.row_buffers
    k = -(-n // L)                        # beats of a row of S (and of P)
    FREE, LOADED = 0, 1
    IDLE, STATE, MAX, READ, DRAIN = range(5)

    # Engine read-out: counters (row pair, column) and stages 1-3 with (last, single).
    active, pair, kcol = True, 0, 0
    stage = [None, None, None]            # (last, single) per stage, None: empty
    # Row-pair reorder buffer.
    full, single = [False, False], [False, False]
    w_half = r_half = beat = 0
    rb_valid = False
    # S row packer.
    sp_busy, held_v, half, col, row, lane = True, False, False, 0, 0, 0
    sp_out_v, sp_out_last, rows_out = False, False, 0
    s_done = None
    # Softmax input pass.
    state = [FREE] * NB
    in_ptr = 0
    bt = None                             # beat stage: (last, buffer)
    mx = None                             # maximum stage: (last, buffer)
    # Softmax output pass.
    phase, ptr, addr = IDLE, 0, 0
    pipe = deque([None] * _SOFTMAX_PIPE)  # reads in flight: last flag or None
    in_flight = 0
    p_fifo = _SyncFifoBuffered(_SOFTMAX_FIFO)
    # P transposer.
    tr_busy = True
    wr_half = wr_q = wr_rows = 0
    t_full, read_all = [False, False], [False, False]
    iss_half, iss_base = 0, 0
    port_v, cur_v, t_lane, key, out_half, out_rows = False, False, 0, 0, 0, 0
    p_ready = []

    c = 1                                 # cycle 0 started every part
    while tr_busy:
        if c > 64 * n * n + 10_000:
            raise AssertionError("block_readout: the walk does not end")
        # -- combinational, downstream first --------------------------------------------
        writing = tr_busy and wr_rows < n and not t_full[wr_half]
        last_key = key == n - 1
        send = cur_v
        consumed = (not cur_v) or t_lane == L - 1 or last_key
        taking = port_v and consumed
        issue_t = tr_busy and t_full[iss_half] and not read_all[iss_half] and (
            not port_v or taking)
        p_take = p_fifo.r_rdy and writing
        p_last = p_fifo.head if p_take else False
        ptr_loaded = state[ptr] == LOADED
        room = p_fifo.level + in_flight < _SOFTMAX_FIFO
        issue_s = phase == READ and room
        last_read = addr == k - 1
        arrived = pipe[-1]
        pending = [(bt is not None and bt[0] and bt[1] == j) or
                   (mx is not None and mx[0] and mx[1] == j) for j in range(NB)]
        sm_ready = state[in_ptr] == FREE and not pending[in_ptr]
        blk_ready = sm_ready and rows_out < n      # the block takes its n rows only
        # S row packer.
        row_end_a = col == n - 1
        run_end_a = row_end_a and row == n - 1
        beat_end_a = lane == L - 1 or row_end_a
        lane_b = 0 if beat_end_a else lane + 1
        col_b = 0 if row_end_a else col + 1
        row_b = row + 1 if row_end_a else row
        row_end_b = col_b == n - 1
        beat_end_b = lane_b == L - 1 or row_end_b
        two = not half and not run_end_a and not (beat_end_a and beat_end_b)
        advance = held_v and (not sp_out_v or blk_ready)
        held_done = advance and (two or half or run_end_a)
        sp_ready = sp_busy and row < n and (not held_v or held_done)
        # Reorder buffer and engine.
        i_ready = not full[w_half]
        r_full, r_single = full[r_half], single[r_half]
        last_beat = beat + 1 == ((n + 1) >> 1 if r_single else n)
        rb_adv = not rb_valid or sp_ready
        rb_issue = rb_adv and r_full
        rb_take = stage[2] is not None and i_ready
        e_adv = stage[2] is None or i_ready

        # -- clock edge --------------------------------------------------------------------
        s3 = stage[2]
        # Engine read-out.
        if e_adv:
            all_end = kcol == n - 1
            new0 = (all_end, pair + 1 == n) if active else None
            stage = [new0, stage[0], stage[1]]
            if active:
                kcol = 0 if all_end else kcol + 1
                if all_end:
                    pair += 2
                    active = pair < n
        # Reorder buffer: a pair's last column fills its half; its last beat empties it.
        if rb_take and s3[0]:
            full[w_half], single[w_half] = True, s3[1]
            w_half ^= 1
        sp_fire = rb_valid and sp_ready
        new_rb_valid = r_full if rb_adv else rb_valid
        if rb_issue:
            if last_beat:
                full[r_half] = False
                r_half ^= 1
                beat = 0
            else:
                beat += 1
        rb_valid = new_rb_valid
        # S row packer (its output beat as it was in this cycle goes to the softmax).
        sm_fire, fire_last = sp_out_v and blk_ready, sp_out_last
        half_before = half
        if sp_fire:
            held_v, half = True, False
        elif held_done:
            held_v = False
        if sm_fire:
            sp_out_v = False
            if sp_out_last:
                rows_out += 1
                if rows_out == n:
                    sp_busy = False
                    s_done = c + 1
        if advance:
            b_in_out = two and not beat_end_a and beat_end_b
            if not two:
                half = not half_before
            if beat_end_a or b_in_out:
                sp_out_v, sp_out_last = True, (row_end_b if b_in_out else row_end_a)
                lane = 1 if (two and beat_end_a) else 0
            else:
                lane += 2 if two else 1
            if two:
                if row_end_b:
                    col, row = 0, row_b + 1
                else:
                    col, row = col_b + 1, row_b
            elif row_end_a:
                col, row = 0, row + 1
            else:
                col += 1
        # Softmax input pass.
        if mx is not None and mx[0]:
            state[mx[1]] = LOADED
        mx = bt
        if sm_fire:
            bt = (fire_last, in_ptr)
            if fire_last:
                in_ptr = 0 if in_ptr == NB - 1 else in_ptr + 1
        else:
            bt = None
        # Softmax output pass.
        if phase == IDLE:
            if ptr_loaded:
                phase = STATE
        elif phase == STATE:
            phase = MAX
        elif phase == MAX:
            phase, addr = READ, 0
        elif phase == READ:
            if issue_s:
                addr += 1
                if last_read:
                    state[ptr] = FREE
                    ptr = 0 if ptr == NB - 1 else ptr + 1
                    phase = DRAIN
        elif arrived is not None and arrived:          # DRAIN: the row's state written
            phase = IDLE
        pipe.pop()
        pipe.appendleft(last_read if issue_s else None)
        in_flight += int(issue_s) - int(arrived is not None)
        p_fifo.step(arrived is not None, arrived, writing)
        # P transposer: write side.
        if p_take and p_last:
            left = n - (wr_rows - wr_q)
            block_rows = min(left, R)
            wr_rows += 1
            if wr_q + 1 == block_rows:
                wr_q = 0
                t_full[wr_half] = True
                done_half = wr_half
                wr_half ^= 1
            else:
                wr_q += 1
                done_half = None
        else:
            done_half = None
        # Read side.
        if issue_t:
            if iss_base + L >= n:
                read_all[iss_half] = True
                iss_half ^= 1
                iss_base = 0
            else:
                iss_base += L
        if done_half is not None:
            read_all[done_half] = False
        port_v = issue_t or (port_v and not taking)
        if taking:
            cur_v, t_lane = True, 0
        else:
            if consumed:
                cur_v = False
            if send:
                t_lane += 1
        if send:
            key += 1
            if last_key:
                p_ready.append(c + 1)
                key = 0
                t_full[out_half] = False
                out_half ^= 1
                out_rows += R
                if out_rows >= n:
                    tr_busy = False
        c += 1
    if s_done is None:
        raise AssertionError("block_readout: the row packer did not finish")
    return BlockReadout(s_done, tuple(p_ready), c)


@dataclass(frozen=True)
class FinishTiming:
    """A query box's finish (absolute cycles): ``first_out``, the first cycle O is offered
    (the block stops counting as running the cycle after); ``last_in``, the cycle O's last
    beat leaves the output unit (the block datapath is idle two cycles later);
    ``last_write``, the cycle the STORE's last memory beat is taken (the STORE ends two
    cycles later)."""
    first_out: int
    last_in: int
    last_write: int


def finish_walk(dp: BlockDatapath, n: int, head_dim: int, start: int,
                store_decode: int) -> FinishTiming:
    """Walk a query box's finish cycle by cycle from ``start``, the cycle its first row's
    finish request is taken, against a STORE of O decoded in cycle ``store_decode``: each
    of the ``n`` rows takes its reciprocal, then two reads per chunk of ``L`` channels,
    issued while the seven-entry output FIFO has room for them and the reads in flight; the
    next row's request is taken once the four pipeline stages are empty. The O packer
    moves up to four values a cycle into a memory beat; the STORE takes its beats from the
    cycle after its write request, which waits for O's first beat."""
    L, chunks = dp.lanes, dp.chunks
    total = -(-n * head_dim // O_VALUES_PER_BEAT)
    V = O_VALUES_PER_BEAT
    fin_row, finishing, reading, chunk, second = 0, False, False, 0, False
    recip_done = None
    pipe = deque([None] * _OUTPUT_PIPE)       # reads in flight: True for an output entry
    in_flight, made, taken = 0, 0, 0
    out = _SyncFifoBuffered(_OUTPUT_FIFO)
    avail = fill = 0
    final = out_v = False
    first_out = last_in = ready_from = None
    written = 0
    c = start
    while True:
        if c > start + 64 * n * (chunks + 32) + 10_000:
            raise AssertionError("finish_walk: the walk does not end")
        quiet = all(v is None for v in pipe)
        fin_go = fin_row < n and not finishing and quiet
        issue = reading and out.level + in_flight < _OUTPUT_FIFO
        arrived = pipe[-1]
        if first_out is None and out.r_rdy:
            first_out = c
            ready_from = max(store_decode, c) + 2
        take = min(avail, V - fill)
        ends = final and avail == take
        emit = fill + take == V or (ends and fill + take != 0)
        o_ready = ready_from is not None and c >= ready_from and written < total
        go = not out_v or o_ready
        i_ready = go and avail == take
        got = out.head if (out.r_rdy and i_ready) else None
        # -- clock edge ----------------------------------------------------------------------
        if out_v and o_ready:
            written += 1
            if written == total:
                return FinishTiming(first_out, last_in, c)
            out_v = False
        if go:
            if emit:
                out_v, fill = True, 0
            else:
                fill += take
            avail -= take
            if ends:
                final = False
        if got is not None:
            row, ch = got
            avail = max(0, min(L, head_dim - ch * L))
            final = ch == chunks - 1 and row == n - 1
            taken += 1
            if taken == n * chunks:
                last_in = c
        if fin_go:
            fin_row += 1
            finishing = True
            recip_done = c + RECIP_CYCLES + 1
        if c == recip_done:
            reading, chunk, second = True, 0, False
        gives = issue and second          # a chunk's second read gives an output entry
        if issue:
            if second:
                if chunk == chunks - 1:
                    reading = finishing = False
                chunk += 1
            second = not second
        pipe.pop()
        pipe.appendleft(gives if issue else None)
        entry = None
        if arrived:
            entry = (made // chunks, made % chunks)
            made += 1
        in_flight += int(gives) - int(bool(arrived))
        out.step(entry is not None, entry, i_ready)
        c += 1
