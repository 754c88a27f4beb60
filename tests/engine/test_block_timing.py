"""The cycle model of an attention block in the engine core (``golden.engine.block_timing``)
and its use in ``golden.engine.core_model``: closed forms where the datapath flows freely,
the softmax's back-pressure where it does not, the finish of a query box, the V LOAD's walk
(words per beat, stalls), and the errors. The model equals the RTL cycle for cycle in
``test_core_attention.py`` (``test_core_attention_cycles``) and on the default build in the
plain Verilog testbench (``make bench-attention-tb``)."""

from __future__ import annotations

import pytest

from golden.engine.block_timing import (FIN_QUIET, O_VALUES_PER_BEAT, RECIP_CYCLES,
                                        BlockDatapath, block_readout, finish_walk)
from golden.engine.core_model import _covered, load_run_cycles
from golden.engine.pv import PvTiming, pv_run_cycles

DEFAULT = BlockDatapath()                     # 4 arrays of 4 x 4, 16 lanes, d = 128
SMALL = BlockDatapath(rows=2, cols=2, arrays=2, lanes=4, row_buffers=5, max_head_dim=16)


@pytest.mark.parametrize("n", [64, 48, 16])
def test_free_flowing_read_out(n):
    """On the default build the softmax keeps up with the read-out (a row of k beats every
    k + 10 cycles against n / 2 cycles of scores), so with rows of whole beats the S row
    packer is done ``n + 7 + n**2 / 2`` cycles after the start: the engine's counters and
    three stages (4), the first row pair's n columns into the reorder buffer and its first
    beat (n + 1), one beat of two scores a cycle, then the packer's register and the
    softmax's input (2)."""
    r = block_readout(DEFAULT, n)
    assert r.s_done == n + 7 + n * n // 2
    # P of a row block is there a little after its rows' scores: rows leave the softmax in
    # order, four to a row block, the last one in the cycle count.
    assert len(r.p_ready) == -(-n // DEFAULT.rows)
    assert list(r.p_ready) == sorted(set(r.p_ready)) and r.p_ready[-1] == r.cycles
    assert r.p_ready[-1] > r.s_done


def test_packer_splits_beats():
    """Rows of 33 keys at 16 lanes end with a beat of one score: where an input beat holds a
    row's 32nd score (a beat's last lane) and its 33rd (the row's end), both would close a
    beat, so the packer takes them in two cycles. That happens in every odd row (the row's
    first score at an odd position), 16 rows of 33: 16 cycles."""
    n = 33
    assert block_readout(DEFAULT, n).s_done == n + 7 + -(-n * n // 2) + 16


def test_softmax_bound_read_out():
    """Rows of 16 keys at 4 lanes: the softmax's output pass (4 + 10 cycles a row) is slower
    than the read-out (8 cycles a row), so the row buffers fill and the read-out waits:
    about 14 cycles a row once they are full, not 8."""
    n = 16
    r = block_readout(SMALL, n)
    free = n + 7 + n * n // 2
    assert r.s_done > free + 30
    # Rows arrive every 14 cycles in the steady state: two row blocks of 2 rows, 28 apart.
    gaps = {b - a for a, b in zip(r.p_ready[2:], r.p_ready[3:])}
    assert gaps == {28}
    # More row buffers take more rows before the first wait.
    assert block_readout(BlockDatapath(**{**SMALL.__dict__, "row_buffers": 8}), n).s_done \
        < r.s_done


def test_latencies_are_the_rtls():
    """The model's FIFO depths and latencies are the RTL's constants (golden/ imports no
    hardware, so they are written there again; this keeps the two together)."""
    from kaleido_hw.vector import block_output, block_softmax
    from kaleido_hw.vector.reciprocal import STEPS_PER_CYCLE
    import golden.engine.block_timing as bt
    assert bt._SOFTMAX_FIFO == block_softmax.OUT_FIFO_DEPTH
    assert bt._OUTPUT_FIFO == block_output.OUT_FIFO_DEPTH
    assert RECIP_CYCLES == -(-block_output.RECIP_BITS_OUT // STEPS_PER_CYCLE)
    assert block_output.FINISH_OVERHEAD == RECIP_CYCLES + 2 + bt._OUTPUT_PIPE
    # The softmax's output pass: k reads, then its pipeline to the FIFO and the state
    # read and write around it, every row.
    assert block_softmax.ROW_OVERHEAD == bt._SOFTMAX_PIPE + 3


def test_read_out_is_cached_and_checked():
    assert block_readout(DEFAULT, 64) is block_readout(DEFAULT, 64)
    with pytest.raises(ValueError, match="n must be"):
        block_readout(DEFAULT, 0)
    with pytest.raises(ValueError, match="lanes must be arrays \\* cols = 16"):
        BlockDatapath(lanes=8)


def test_finish_row_period_and_store():
    """After a query box's last block each row takes its reciprocal and two reads per chunk:
    ``23 + 2 * chunks`` cycles a row when the output is never held (``FINISH_OVERHEAD`` of
    the output unit); O's beats leave through the O packer to the STORE, whose write request
    waits for O's first beat."""
    period = RECIP_CYCLES + 2 + 2 * DEFAULT.chunks + 4
    assert period == 23 + 2 * DEFAULT.chunks
    one, two = (finish_walk(DEFAULT, n, 128, 100, 0) for n in (1, 2))
    assert two.last_in - one.last_in == period
    f = finish_walk(DEFAULT, 64, 128, 100, 0)
    assert f.last_in - one.last_in == 63 * period
    # The first beat: the reciprocal and its hand-over (19), the chunk's second read (1),
    # four stages to the FIFO, and the FIFO's two cycles from a write to its output.
    assert f.first_out == 100 + RECIP_CYCLES + 2 + 1 + 4 + 2
    # A STORE decoded late holds O back: the output FIFO fills, the rows wait.
    late = finish_walk(DEFAULT, 64, 128, 100, 5000)
    assert late.first_out == f.first_out and late.last_in > 5000
    assert late.last_write > f.last_write
    # head_dim past a multiple of the lanes: fewer values, the same rows.
    g = finish_walk(DEFAULT, 4, 100, 0, 0)
    assert g.last_write - g.first_out >= -(-4 * 100 // O_VALUES_PER_BEAT)


def test_pv_run_cycles():
    """P @ V waits for each row block of P, then runs its steps; the end adds the final
    drain step, the output register and the last drain wave."""
    t = PvTiming()
    assert pv_run_cycles([10, 10], 3, 4, 4) == t.load_base + 30 + 1 + t.tail_base + 8
    assert pv_run_cycles([10, 10], 3, 4, 4, p_ready=[1, 100, 101]) == \
        100 + t.load_base - 1 + 20 + 1 + t.tail_base + 8
    assert FIN_QUIET == 5


def test_v_load_walk():
    """A V LOAD writes each beat as ``8 / cols`` words, one a cycle, and waits while a
    running block's P @ V reads its bank."""
    real = (True,) * 8
    one = load_run_cycles(real, 2, 3, 4)
    assert one == 1 + 3 + 16 + 1                   # the first beat's latency, 16 beats
    assert load_run_cycles(real, 2, 3, 4, words=2) == 1 + 3 + 32 + 1
    # Blocked from the walk's first cycle for 50: the writes start 50 cycles later.
    assert load_run_cycles(real, 2, 3, 4, words=2, blocked=((0, 49),)) == 50 + 32 + 1
    pad = (True, False) * 4                        # padding tokens are written as zeros
    assert load_run_cycles(pad, 2, 3, 4, words=4) == 1 + 3 + 64 + 1


def test_covered():
    assert _covered([]) == 0
    assert _covered([(5, 9), (1, 3), (8, 12), (13, 13)]) == 3 + 9
