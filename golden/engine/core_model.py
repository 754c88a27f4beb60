"""Cycle model of the streaming engine core (``docs/engine.md``, "Engine core"): the
counters its RTL reports for a program, from the functional interpreter's result
(:func:`golden.engine.program.run_program` with ``engine=True``).

Exact (the RTL must equal them for any memory timing and back-pressure): ``commands``,
``engine_cycles`` and ``chunks`` (sums of the engine's counters over the COMPUTEs), every
per-array work counter summed over COMPUTEs and arrays, and ``compute`` (the cycles the
core spends in COMPUTEs: the engine's cycles plus :data:`COMPUTE_OVERHEAD` per COMPUTE).

Modelled: the core's memory time. The core runs its commands one after another (one bank
per side), so every cycle outside a COMPUTE is a cycle the arrays wait for memory
(``mem_wait``). :func:`memory_cycles` gives the cycles of every LOAD and STORE for a memory
of a given latency and bandwidth; at one beat per cycle and a fixed latency it is a lower
bound of the bench's measurement (the DMA adds its own pipeline stages), and at paper scale
it states what the loads and stores cost against the compute.

Plain numpy; no hardware imports.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["COMPUTE_OVERHEAD", "DECODE_CYCLES", "ARITH_CYCLES", "CORE_COUNTERS",
           "core_counters", "MemoryTiming", "memory_cycles", "core_time"]

#: Cycles a COMPUTE costs beyond the engine's own ``cycles``: the start pulse and the cycle
#: in which the core sees ``done``.
COMPUTE_OVERHEAD = 2
#: Cycles every command spends in the decoder (the cycle it is accepted).
DECODE_CYCLES = 1
#: Cycles of the sequential products / remainders of a STRIDES or LOAD (16-bit operands,
#: one bit per cycle, plus the check).
ARITH_CYCLES = 17

#: The core's counters (``cnt__<name>`` of the Verilog): its own, then the engine's summed.
CORE_COUNTERS = ("cycles", "commands", "compute", "mem_wait", "engine_cycles", "chunks",
                 "busy_pe_cycles", "issued0", "issued1", "issued2", "issued3", "skipped0",
                 "skipped1", "skipped2", "skipped3", "merged", "bubbles", "quads", "idle",
                 "stall")


def core_counters(result) -> dict:
    """The exact counters of a program run with ``engine=True`` (``cycles`` and
    ``mem_wait`` depend on the memory: not included). ``stall`` is 0 (the engine model has
    no dispatcher stalls)."""
    blocks = result.blocks
    if any(b.engine is None for b in blocks):
        raise ValueError("core_counters needs run_program(..., engine=True)")
    out = {"commands": int(sum(result.counters["commands"].values())),
           "engine_cycles": int(sum(b.engine.cycles for b in blocks)),
           "chunks": int(sum(b.engine.chunks for b in blocks)),
           "busy_pe_cycles": int(sum(b.engine.busy_pe_cycles.sum() for b in blocks)),
           "merged": int(sum(b.engine.merged.sum() for b in blocks)),
           "bubbles": int(sum(b.engine.bubbles.sum() for b in blocks)),
           "quads": int(sum(b.engine.quads.sum() for b in blocks)),
           "idle": int(sum(b.engine.idle.sum() for b in blocks)),
           "stall": 0}
    for p in range(4):
        out[f"issued{p}"] = int(sum(b.engine.issued[:, p].sum() for b in blocks))
        out[f"skipped{p}"] = int(sum(b.engine.skipped[:, p].sum() for b in blocks))
    out["compute"] = out["engine_cycles"] + COMPUTE_OVERHEAD * len(blocks)
    return out


@dataclass(frozen=True)
class MemoryTiming:
    """A memory as the core sees it: ``latency`` cycles from a read request to its first
    beat, ``beats_per_cycle`` of 8 bytes (1.0: the 64-bit port's peak)."""
    latency: int = 8
    beats_per_cycle: float = 1.0

    @classmethod
    def from_bandwidth(cls, gbytes_per_s: float, clock_ghz: float, latency: int = 100):
        """A DRAM of ``gbytes_per_s`` seen by a core clocked at ``clock_ghz``."""
        return cls(latency, min(1.0, gbytes_per_s / clock_ghz / 8))


def memory_cycles(result, timing: MemoryTiming = MemoryTiming()) -> dict:
    """Cycles of the LOADs and STOREs of a program (``run_program`` result) with ``timing``:
    a LOAD walks every token of its box (one cycle per token's beat, padding included) after
    the decode and address cycles and the first beat's latency; a STORE takes the engine's
    read-out of one S value per cycle (``box_tokens**2``; its ``box_tokens**2 / 2`` beats
    need half the memory bandwidth). Returns ``load``, ``store`` and ``total``."""
    cfg = result.config
    bt = int(np.prod(cfg.box))
    beats_tok = -(-cfg.head_dim // 8)
    loads = sum(result.counters["loads"].values())
    real_beats = result.counters["bytes_loaded"] // cfg.head_dim * beats_tok
    pad_beats = loads * bt * beats_tok - real_beats
    load = loads * (DECODE_CYCLES + ARITH_CYCLES + timing.latency) \
        + real_beats / timing.beats_per_cycle + pad_beats
    stores = result.counters["stores"]
    store_beats = stores * -(-bt * bt // 2)
    store = stores * (DECODE_CYCLES + 2) + max(stores * bt * bt,
                                               store_beats / timing.beats_per_cycle)
    return {"load": int(round(load)), "store": int(round(store)),
            "total": int(round(load + store))}


def core_time(result, timing: MemoryTiming = MemoryTiming()) -> dict:
    """Compute and memory cycles of a program on this (sequential) core, and the share the
    arrays wait: ``compute``, ``memory``, ``total``, ``wait_share``."""
    comp = core_counters(result)["compute"]
    mem = memory_cycles(result, timing)["total"]
    return {"compute": comp, "memory": mem, "total": comp + mem,
            "wait_share": mem / (comp + mem)}
