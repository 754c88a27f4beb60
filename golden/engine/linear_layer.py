"""Cycles of a whole linear layer on the engine core, without running its program.

A linear layer ``Y = X_eff W`` runs on the core as a program (``kaleido_hw.engine.host.
plan_linear``): X cut into boxes of the grid (the Q side), W^T into blocks of ``box_tokens``
weight rows (the K side), the input channels into slices of ``head_dim``; every (box, weight
block, slice) is one COMPUTE of kind linear. The program's interpreter
(``golden.engine.program.run_program(..., engine=True)``) runs every COMPUTE through the
engine's functional and cycle models, which is exact but slow at report scale (a 512 x 512
layer on 2,048 tokens: about a minute).

What a COMPUTE costs depends only on its Q box and slice: weight rows are never reused, so
their codes do not depend on their values (every loaded row is NONE, ``golden.array.
schedule.side_codes(..., linear=True, k_side=True)``), and a weight block always holds
``box_tokens`` rows (the rows past ``c_out`` are zeros in memory). So
:func:`linear_layer_counters` runs the cycle model once per (box, slice) and counts it once
per weight block: the counters of ``golden.engine.core_model.core_counters`` of the program's
run, equal to them (``tests/engine/test_linear_layer.py`` holds it to the interpreter), in a
second or two per layer.

Plain numpy on the engine's cycle models; no hardware imports.
"""

from __future__ import annotations

import numpy as np

from golden.checks import as_int8, check_int
from golden.engine.core_model import COMPUTE_OVERHEAD
from golden.engine.model import EngineParams, engine_counters, plain_walk
from golden.engine.program import box_counts, box_on_grid, box_origin, box_tokens
from golden.engine.window3 import window3_counters
from golden.numerics import ChannelGroups, VideoGrid, as_grid

__all__ = ["LAYER_COUNTERS", "linear_layer_counters"]

#: The keys :func:`linear_layer_counters` returns (``core_counters``' but ``commands``).
LAYER_COUNTERS = ("engine_cycles", "chunks", "busy_pe_cycles", "merged", "bubbles", "quads",
                  "idle", "stall", "issued0", "skipped0", "issued1", "skipped1", "issued2",
                  "skipped2", "issued3", "skipped3", "compute", "computes")


def linear_layer_counters(x, grid, c_out: int, box, groups: ChannelGroups,
                          params: EngineParams = EngineParams(), variant: str = "pe",
                          full_bits: int = 5, half_bits: int = 3, window: int = 2,
                          plain: bool = False) -> dict:
    """Exact counters of the COMPUTEs of a linear layer's program on the core.

    ``x``: (N, c_in) int8 activation on ``grid``; ``c_out`` output features; ``box`` the
    program's box ``(bt, bh, bw)``; ``groups`` the channel groups of one slice (what CONFIG
    and GROUPS give the core: ``head_dim`` channels; c_in is cut into ``ceil(c_in /
    head_dim)`` slices, the last padded with zeros); ``params``, ``variant``, thresholds as
    the core's CONFIG; ``window`` 2 or 3 (COMPUTE's ``window3``); ``plain``: a core of plain
    PEs (its engine walks all channels as one group, ``plain_walk``).

    Returns :data:`LAYER_COUNTERS`: the sums over COMPUTEs of the engine counters,
    ``computes`` and ``compute`` (engine cycles + ``COMPUTE_OVERHEAD`` per COMPUTE: the
    cycles the core spends in COMPUTEs, memory waits not included).
    """
    grid = as_grid(grid)
    x = as_int8(x, "x")
    if x.ndim != 2 or x.shape[0] != grid.n:
        raise ValueError(f"x must be an (N, c_in) int8 array with N = {grid.n} tokens of grid "
                         f"{grid}, got shape {x.shape}")
    c_out = check_int("c_out", c_out, 1, 1 << 40)
    if window not in (2, 3) or isinstance(window, bool):
        raise ValueError(f"window must be 2 or 3, got {window!r}")
    box = tuple(int(b) for b in box)
    if len(box) != 3 or min(box) < 1:
        raise ValueError(f"box must be three extents >= 1, got {box!r}")
    if window == 3 and plain:
        raise ValueError("window = 3 runs on ReusePEs: a plain core (plain=True) has no "
                         "window-3 blocks")
    head_dim = groups.head_dim
    n_s = -(-x.shape[1] // head_dim)
    xp = np.zeros((grid.n, n_s * head_dim), np.int8)
    xp[:, :x.shape[1]] = x
    n = box_tokens(box)
    n_k = -(-c_out // n)
    local = VideoGrid(*box)
    walk = plain_walk(groups) if plain else groups
    w_rows = np.zeros((n, head_dim), np.int8)       # the counters do not depend on them
    sums = dict.fromkeys(LAYER_COUNTERS, 0)
    counts = box_counts(grid, box)
    origins = [box_origin(i, counts, box) for i in range(int(np.prod(counts)))]
    for origin in origins:
        token, real = box_on_grid(origin, box, grid)
        for s in range(n_s):
            q = np.zeros((n, head_dim), np.int8)
            q[real] = xp[token, s * head_dim:(s + 1) * head_dim]
            if window == 3:
                c = window3_counters(q, w_rows, local, groups, params, variant, full_bits,
                                     half_bits)
            else:
                c = engine_counters(q, w_rows, local, walk, params, variant, full_bits,
                                    half_bits, linear=True)
            part = {"engine_cycles": c.cycles, "chunks": c.chunks,
                    "busy_pe_cycles": c.busy_pe_cycles.sum(), "merged": c.merged.sum(),
                    "bubbles": c.bubbles.sum(), "quads": c.quads.sum(), "idle": c.idle.sum()}
            for p in range(4):
                part[f"issued{p}"] = c.issued[:, p].sum()
                part[f"skipped{p}"] = c.skipped[:, p].sum()
            for key, value in part.items():
                sums[key] += int(value) * n_k
    sums["computes"] = len(origins) * n_s * n_k
    sums["compute"] = sums["engine_cycles"] + COMPUTE_OVERHEAD * sums["computes"]
    return sums
