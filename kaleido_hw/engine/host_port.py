"""The host side of the engines' operand-write and configuration ports (``kaleido_engine``,
``plain_engine``): plain Python that encodes a run for the benches and rejects what the
hardware cannot do before any simulation starts.

An operand (Q, K, X or W) is written token by token in lanes of :data:`WRITE_BYTES` bytes
(``wr``: token, lane, data; a write fills the whole lane, the last lane of a token padded
with zeros past d) while the engine is idle; the run's grid, channel
groups, directions and thresholds go on the ``cfg`` ports (:func:`engine_ports`), checked
by :func:`check_run` with the conditions of the RTL's ``error`` bits.
"""

from __future__ import annotations

import numpy as np
from amaranth.lib.wiring import In, Out

from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.tile_layouts import EngineGeometry


__all__ = ["WRITE_BYTES", "ARRAY_COUNTER_NAMES", "array_counter_names", "array_counter_values",
           "check_run", "engine_ports", "operand_writes", "run_control_members", "s_beat_count",
           "unpack_s_beats"]

#: Bytes per host write (one lane of the token word; one 64-bit memory beat of the core).
WRITE_BYTES = 8
#: Per-array counter ports of ``pv_engine`` (``cnt__a<k>__<name>``;
#: golden ``array_busy``, ``array_steps`` of ``LinearCounters`` / ``PvCounters``).
ARRAY_COUNTER_NAMES = ("busy_pe_cycles", "steps")


def array_counter_names(totals, arrays: int) -> tuple:
    """Every counter port of a build with ``arrays`` arrays, without the ``cnt__`` prefix:
    the ``totals``, then ``a<k>__<name>`` per array (:data:`ARRAY_COUNTER_NAMES`)."""
    return tuple(totals) + tuple(f"a{a}__{name}" for a in range(arrays)
                                 for name in ARRAY_COUNTER_NAMES)


def array_counter_values(model) -> dict:
    """``{"a<k>__<name>": value}``: the per-array counters of a golden ``LinearCounters`` or
    ``PvCounters``, as the RTL's per-array counter ports must show them."""
    out = {}
    for a, (busy, steps) in enumerate(zip(model.array_busy, model.array_steps)):
        out[f"a{a}__busy_pe_cycles"] = busy
        out[f"a{a}__steps"] = steps
    return out


def check_run(config: KaleidoConfig, grid, groups, full_bits: int = 5, half_bits: int = 3):
    """Raise ``ValueError`` naming the parameter if an engine built from ``config`` cannot
    run this job (the conditions of the RTL's ``error`` bits: grid, head_dim, bits, group
    size); returns the grid and groups as ``VideoGrid`` / ``ChannelGroups``."""
    from golden.numerics import _as_groups, as_grid
    geo = EngineGeometry.from_config(config)
    grid, groups = as_grid(grid), _as_groups(groups)
    if grid.n > geo.max_tokens:
        raise ValueError(f"grid {grid} has {grid.n} tokens; this engine holds at most "
                         f"engine_max_tokens = {geo.max_tokens}")
    if max(grid.shape) >= 1 << geo.size_width:
        raise ValueError(f"grid {grid}: every length must be below {1 << geo.size_width}")
    if groups.head_dim > geo.max_dim:
        raise ValueError(f"head_dim {groups.head_dim} exceeds engine_max_head_dim = {geo.max_dim}")
    if not (3 <= half_bits < full_bits <= 7 and full_bits >= 4):
        raise ValueError(f"full_bits/half_bits must satisfy 3 <= half_bits < full_bits <= 7, "
                         f"full_bits >= 4; got {full_bits}/{half_bits}")
    too_big = [s for s in groups.sizes if s > geo.max_group_channels]
    if too_big:
        raise ValueError(f"a channel group of {max(too_big)} channels exceeds the "
                         f"{geo.max_group_channels} that acc_width = {geo.acc_width} sums exactly")
    return grid, groups


def engine_ports(config: KaleidoConfig, grid, groups, full_bits: int = 5, half_bits: int = 3,
                 reuse: bool = True) -> dict:
    """Values of the ``cfg__*`` ports shared by the engines for one run (after
    :func:`check_run`): grid, head_dim, the 2-bit group of every channel, the 2-bit
    direction of every group, the thresholds and the reuse bit."""
    grid, groups = check_run(config, grid, groups, full_bits, half_bits)
    gmap = sum(int(g) << (2 * c) for c, g in enumerate(groups.group_of))
    dirs = sum(int(d) << (2 * g) for g, d in enumerate(groups.directions))
    return {"cfg__t": grid.t, "cfg__h": grid.h, "cfg__w": grid.w,
            "cfg__head_dim": groups.head_dim, "cfg__group_map": gmap,
            "cfg__directions": dirs, "cfg__full_bits": full_bits,
            "cfg__half_bits": half_bits, "cfg__reuse": int(bool(reuse))}


def operand_writes(x) -> list[tuple[int, int, int, int]]:
    """Host writes of one int8 operand (N x d): ``(token, lane, data)`` tuples, the last lane
    of a token zero past channel d (the engines write whole lanes)."""
    x = np.asarray(x)
    if x.dtype != np.int8 or x.ndim != 2:
        raise ValueError(f"operand must be an (N, d) int8 array, got {x.dtype} {x.shape}")
    out = []
    u = x.view(np.uint8)
    for tok in range(x.shape[0]):
        for lane in range(-(-x.shape[1] // WRITE_BYTES)):
            chunk = u[tok, lane * WRITE_BYTES:(lane + 1) * WRITE_BYTES]
            value = int.from_bytes(bytes(chunk), "little")
            out.append((tok, lane, value))
    return out


def s_beat_count(values: int) -> int:
    """Beats of an S read-out of ``values`` int32 (two per beat)."""
    return -(-values // 2)


def unpack_s_beats(beats, values: int) -> np.ndarray:
    """The ``values`` signed 32-bit scores carried by the S read-out ``beats`` (unsigned
    64-bit integers: value ``2b`` in bits 31:0 of beat b, ``2b + 1`` in bits 63:32), as
    int64. Raises ``ValueError`` on a wrong beat count or a non-zero high half after an odd
    count's last value (the memory image must be exactly the block)."""
    beats = [int(b) for b in beats]
    if len(beats) != s_beat_count(values):
        raise ValueError(f"{len(beats)} beats for {values} values, "
                         f"expected {s_beat_count(values)}")
    if values % 2 and beats and beats[-1] >> 32:
        raise ValueError(f"the last beat's high half is {beats[-1] >> 32:#x}, not 0")
    halves = np.array([[b & 0xFFFF_FFFF, b >> 32 & 0xFFFF_FFFF] for b in beats],
                      np.int64).reshape(-1)[:values]
    return np.where(halves >= 1 << 31, halves - (1 << 32), halves)


def run_control_members(error_bits: int) -> dict:
    """Signature members of a block that runs on a ``start`` pulse: ``start`` (in), ``busy``,
    ``done`` (high from the run's end to the next ``start``) and ``error`` (``error_bits``
    sticky bits, cleared by ``start``)."""
    return {"start": In(1), "busy": Out(1), "done": Out(1), "error": Out(error_bits)}
