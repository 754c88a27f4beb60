"""Cycles of a whole attention head on the engine's arrays and vector unit (issue 16, item 4,
at model level; ``docs/vector.md``, "A whole head"): what reuse buys for
``O = softmax(S) @ V`` rather than for ``S = Q K^T`` alone, the analogue of the paper's Fig. 18a
at head level.

The three stages and their exact or stated models:

* **S** on P arrays of R x C: ``golden.engine.model.engine_counters`` (cycle-exact to the
  KaleidoEngine), variant ``dense`` or a reuse variant;
* **softmax** on the vector unit (``vector_lanes`` lanes, ``vector_row_buffers`` row
  buffers): rows of k = ceil(N / lanes) beats leave every ``max(k, 14, (3k + 28) / NB)``
  cycles on average (the bound the vector unit's bench checks; 14 is the reciprocal's
  cycles per row) and a row's last P beat leaves ``3k + 30`` cycles after its first score;
* **P @ V** on the same P arrays: ``golden.engine.pv.pv_counters`` (cycle-exact to the P @ V
  RTL, ``pv_engine``, on P arrays), V reused by the window rule or dense.

The schedule (stated, not built): the queries are cut into B row blocks; the arrays compute
S of row block b + 1 while the vector unit turns row block b into P, then the arrays compute
that block's P @ V (:func:`pipeline_cycles`: S_1, S_2, PV_1, S_3, PV_2, ..., PV_B on the
arrays; each softmax starts when its S is done and the vector unit is free; each P @ V when
its softmax is done and the arrays are free; per-block times are the stage totals / B).
S and P @ V share the arrays, so they add; the vector unit shows only in the pipeline fill
and wherever it is slower than the arrays. Nothing here models memory: S never leaves the
chip (a row block of S, its rows x N scores, sits in the accumulation buffer), and Q, K, V
and O cross the memory port once (``golden.engine.core_model.head_traffic(..., fused=True)``).

Plain numpy on top of the two cycle models; no hardware imports.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from golden.checks import check_int
from golden.engine.model import EngineParams, engine_counters
from golden.engine.pv import pv_counters
from golden.numerics import AXIS_T

__all__ = ["RECIPROCAL_CYCLES", "ROW_HOLD_BASE", "ROW_LATENCY_BASE", "row_period",
           "softmax_cycles", "pipeline_cycles", "HeadCycles", "head_cycles"]

#: Cycles the vector unit's reciprocal spends per row (13 division steps and a register).
RECIPROCAL_CYCLES = 14
#: A row of k beats holds its row buffer for ``3k + ROW_HOLD_BASE`` cycles (three passes,
#: the sum pipeline and the reciprocal).
ROW_HOLD_BASE = 28
#: A lone row of k beats leaves its last P beat ``3k + ROW_LATENCY_BASE`` cycles after its
#: first score beat was accepted (the hold and the output pipeline; held to the RTL in
#: Amaranth's simulator by ``tests/vector/test_softmax_timing.py``).
ROW_LATENCY_BASE = 30


def softmax_cycles(rows: int, row_len: int, lanes: int = 16, buffers: int = 5) -> int:
    """Cycles of the vector unit for ``rows`` rows of ``row_len`` scores streamed back to
    back: ``rows - 1`` periods of ``max(k, 14, (3k + 28) / buffers)`` plus the last row's
    ``3k + 30`` cycles of latency (k = ceil(row_len / lanes) beats)."""
    rows = check_int("rows", rows, 0, 1 << 40)
    row_len = check_int("row_len", row_len, 1, 1 << 40)
    lanes = check_int("lanes", lanes, 1, 1 << 16)
    buffers = check_int("buffers", buffers, 2, 64)
    if rows == 0:
        return 0
    k = -(-row_len // lanes)
    return int(np.ceil((rows - 1) * row_period(k, buffers))) + 3 * k + ROW_LATENCY_BASE


def row_period(beats: int, buffers: int) -> float:
    """Average cycles between rows of ``beats`` beats streamed back to back through the
    vector unit with ``buffers`` row buffers: ``max(k, 14, (3k + 28) / buffers)`` (one beat
    per cycle, the reciprocal's cycles per row, a row's hold of its buffer)."""
    return max(beats, RECIPROCAL_CYCLES, (3 * beats + ROW_HOLD_BASE) / buffers)


def pipeline_cycles(s: float, softmax: float, pv: float, blocks: int) -> int:
    """Cycles of the row-block pipeline of the module docstring for stage totals ``s``,
    ``softmax`` and ``pv`` split evenly over ``blocks`` row blocks."""
    blocks = check_int("blocks", blocks, 1, 1 << 30)
    sb, vb, pb = s / blocks, softmax / blocks, pv / blocks
    arrays = sb                          # S of block 1 done
    s_done = [sb]
    vu = 0.0
    for b in range(blocks):
        vu = max(s_done[b], vu) + vb     # softmax of block b
        if b + 1 < blocks:
            arrays += sb                 # S of block b + 1 while the vector unit works
            s_done.append(arrays)
        arrays = max(arrays, vu) + pb    # P @ V of block b
    return int(np.ceil(arrays))


@dataclass(frozen=True)
class HeadCycles:
    """Cycles of one head: ``s`` (S on the arrays), ``softmax`` (the vector unit, all rows),
    ``pv`` (P @ V on the arrays), ``total`` (the row-block pipeline, :func:`pipeline_cycles`),
    ``row_blocks``; ``exposed_softmax`` = ``total - s - pv``, what the arrays wait for the
    vector unit."""
    s: int
    softmax: int
    pv: int
    total: int
    row_blocks: int

    @property
    def exposed_softmax(self) -> int:
        """Cycles the arrays wait for the vector unit."""
        return self.total - self.s - self.pv

    def as_dict(self) -> dict:
        """The fields (and ``exposed_softmax``) as a JSON-ready dict."""
        return {**asdict(self), "exposed_softmax": self.exposed_softmax}


def head_cycles(q, k, v, p, grid, groups, params: EngineParams = EngineParams(),
                variant: str = "full", v_reuse: bool = True, v_direction: int = AXIS_T,
                window: int = 2, full_bits: int = 5, half_bits: int = 3,
                lanes: int = 16, buffers: int = 5, block_rows: int = 64) -> HeadCycles:
    """Cycles of ``O = P @ V_eff`` with ``P = softmax(S)`` for one head (``p``: the uint8
    probabilities of every query row, (N, N)): S with ``variant`` on ``params``' arrays
    (``dense`` for the baseline), P @ V with V reuse along ``v_direction`` in windows of
    ``window`` (``v_reuse=False``: dense) on the same arrays, the softmax on a vector unit of
    ``lanes`` lanes and ``buffers`` row buffers, row blocks of ``block_rows`` queries."""
    block_rows = check_int("block_rows", block_rows, 1, 1 << 30)
    n = np.asarray(q).shape[0]
    s = int(engine_counters(q, k, grid, groups, params, variant, full_bits, half_bits).cycles)
    pv = int(pv_counters(p, v, grid, v_direction, window, params.rows, params.cols,
                         params.arrays, full_bits, half_bits, reuse=v_reuse).cycles)
    sm = softmax_cycles(n, n, lanes, buffers)
    blocks = -(-n // block_rows)
    return HeadCycles(s, sm, pv, pipeline_cycles(s, sm, pv, blocks), blocks)

