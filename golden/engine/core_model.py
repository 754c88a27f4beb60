"""Cycle model of the streaming engine core (``docs/engine.md``, "Engine core"): the
counters its RTL reports for a program, from the functional interpreter's result
(:func:`golden.engine.program.run_program` with ``engine=True``).

Exact (the RTL must equal them for any memory timing and back-pressure): ``commands``,
``engine_cycles`` and ``chunks`` (sums of the engine's counters over the COMPUTEs), every
per-array work counter summed over COMPUTEs and arrays, and ``compute`` (the cycles the
core spends in COMPUTEs: the engine's cycles plus :data:`COMPUTE_OVERHEAD` per COMPUTE).

Exact for the bench's memory: ``cycles`` and ``mem_wait`` (:func:`core_cycles`, event by
event :func:`core_schedule`; attention blocks with the block datapath's cycle model,
:mod:`golden.engine.block_timing`, and then ``compute`` too) for commands offered back to
back against a memory of fixed
latency that returns one beat per cycle with a limit of requests in flight
(:class:`BenchMemory`: the behavioural memory of the Amaranth bench, and with
:meth:`BenchMemory.axi_ram` the AxiDma against cocotbext-axi's AxiRam without pauses). The
controller decodes commands in order; a LOAD's walk runs in the load unit while the
controller goes on (a COMPUTE on the other bank, say), so ``cycles`` is not a sum of
per-command cycles. ``mem_wait`` (``cycles - compute``) counts every cycle outside a COMPUTE:
the cycles the arrays wait for memory.

Modelled: the memory time for a stated bandwidth (:func:`memory_cycles`, :func:`core_time`,
``MemoryTiming.from_bandwidth``): what the loads and stores of a head cost against the
compute at paper scale, where a DRAM's bandwidth, not one beat per cycle, bounds them.

Plain numpy; no hardware imports.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from golden.checks import check_int

__all__ = ["COMPUTE_OVERHEAD", "DECODE_CYCLES", "ARITH_CYCLES", "CORE_COUNTERS",
           "ATTENTION_COUNTERS",
           "core_counters", "MemoryTiming", "memory_cycles", "core_time", "STORE_OVERHEAD",
           "store_readout_cycles",
           "FENCE_CYCLES", "AXI_RAM_LATENCY", "BenchMemory", "load_run_cycles",
           "LOAD_ISSUE_CYCLES", "CommandTiming", "core_schedule", "command_cycles", "core_cycles",
           "PAPER_DRAM_GBPS", "PAPER_CLOCK_GHZ",
           "head_traffic", "dram_cycles"]

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
#: Counters a core with the attention path adds (``core_attention``): P @ V's work in the
#: attention blocks (``golden.engine.pv.pv_counters`` but ``cycles``), summed over blocks.
ATTENTION_COUNTERS = ("pv_busy_pe_cycles", "pv_issued_a", "pv_issued_f1", "pv_issued_f2",
                      "pv_skipped_f1", "pv_skipped_f2", "pv_bubbles", "pv_blocks", "pv_steps")


def core_counters(result) -> dict:
    """The exact counters of a program run with ``engine=True`` (``cycles`` and
    ``mem_wait`` depend on the memory: not included). ``stall`` is 0 (the engine model has
    no dispatcher stalls). A program with attention blocks (COMPUTE kind 2) adds
    :data:`ATTENTION_COUNTERS` and has no ``compute``: a block's softmax and P @ V run on
    behind the next commands, so its compute cycles depend on the memory's timing
    (:func:`core_cycles` gives them for :class:`BenchMemory`)."""
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
    pv = [b.pv for b in blocks if getattr(b, "pv", None) is not None]
    if pv:
        # Attention blocks: P @ V's work counters. ``compute`` depends on when loads, blocks
        # and their S meet: core_cycles gives it for the bench's memory.
        out.update({"pv_busy_pe_cycles": sum(int(c.busy_pe_cycles) for c in pv),
                    "pv_issued_a": sum(int(c.issued[0]) for c in pv),
                    "pv_issued_f1": sum(int(c.issued[1]) for c in pv),
                    "pv_issued_f2": sum(int(c.issued[2]) for c in pv),
                    "pv_skipped_f1": sum(int(c.skipped[1]) for c in pv),
                    "pv_skipped_f2": sum(int(c.skipped[2]) for c in pv),
                    "pv_bubbles": sum(int(c.bubbles) for c in pv),
                    "pv_blocks": sum(int(c.blocks) for c in pv),
                    "pv_steps": sum(int(c.steps) for c in pv)})
    else:
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
    read-out of one beat (two S values) per cycle after the first row pair
    (:func:`store_readout_cycles`), or longer when the memory takes fewer beats per cycle.
    Returns ``load``, ``store`` and ``total``. An estimate
    for any bandwidth: it leaves out the limit of requests in flight and a few cycles per
    command that :func:`command_cycles` counts exactly for one beat per cycle."""
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
    store = stores * (DECODE_CYCLES + 2) + max(stores * store_readout_cycles(bt),
                                               store_beats / timing.beats_per_cycle)
    return {"load": int(round(load)), "store": int(round(store)),
            "total": int(round(load + store))}


def core_time(result, timing: MemoryTiming = MemoryTiming()) -> dict:
    """Compute and memory cycles of a program run one command after another (a core with one
    bank per side: no load overlaps a compute), and the share the arrays wait:
    ``compute``, ``memory``, ``total``, ``wait_share``."""
    comp = core_counters(result)["compute"]
    mem = memory_cycles(result, timing)["total"]
    return {"compute": comp, "memory": mem, "total": comp + mem,
            "wait_share": mem / (comp + mem)}


# -- exact cycles for the bench's memory -------------------------------------------------------

#: Cycles of a STORE beyond its decode and the engine's read-out
#: (:func:`store_readout_cycles`): the write request, the three-cycle pipeline from the
#: read-out counters to the planes' registered words, and the cycle that returns to idle.
STORE_OVERHEAD = 5


def store_readout_cycles(box_tokens: int) -> int:
    """Cycles the engine's S read-out of an ``n x n`` block (``n = box_tokens``) adds to a
    STORE with ``ready`` always high, beyond the pipeline of :data:`STORE_OVERHEAD`: the
    planes give a row pair in ``n`` cycles (both rows of one K token per cycle) and the
    reorder buffer emits a pair only once it is whole, so the first pair's ``n`` columns and
    the cycle that reads its first beat from the buffer come first; then one beat per
    cycle, ``ceil(n**2 / 2)`` in all (an odd count's half-empty last beat included)."""
    return box_tokens + 1 + -(-box_tokens * box_tokens // 2)
#: Latency of the AxiDma + cocotbext-axi AxiRam read path without pauses, as the bench
#: measures it (:meth:`BenchMemory.axi_ram`).
AXI_RAM_LATENCY = 2
#: Cycles of a FENCE when nothing is in flight: the decode and one cycle in FENCE.
FENCE_CYCLES = 2


@dataclass(frozen=True)
class BenchMemory:
    """The memory of the core's Amaranth bench (``tests/engine/core_harness.py`` without
    random gaps or stalls), for which :func:`core_cycles` is exact: the first beat of a read
    request accepted in cycle ``i`` is valid in cycle ``i + 1 + latency``, then one beat per
    cycle in request order; at most ``outstanding`` requests are in flight (a request stops
    counting the cycle after its last beat); write requests and write beats are always
    accepted, and the DMA is idle as soon as the last write beat is taken."""
    latency: int = 3
    outstanding: int = 4

    @classmethod
    def axi_ram(cls, config) -> "BenchMemory":
        """The core's AxiDma against cocotbext-axi's ``AxiRam`` without pauses (the cocotb
        bench ``sim/engine/core`` with ``pause=0``), measured: it behaves as latency 2 with
        ``axi_max_outstanding`` requests in flight while every token's request is one burst
        and a request never waits for a burst slot (``head_dim <= 8 * axi_max_burst``, the
        DMA defaults 16 / 4; the bench's ``test_timing`` checks it). Smaller bursts or fewer
        outstanding bursts add DMA cycles this model does not have."""
        return cls(AXI_RAM_LATENCY, config.axi_max_outstanding)

    def __post_init__(self):
        check_int("BenchMemory.latency", self.latency, 0, 1 << 20)
        check_int("BenchMemory.outstanding", self.outstanding, 1, 1 << 10)


@lru_cache(maxsize=4096)
def load_run_cycles(real: tuple, beats_per_token: int, latency: int, outstanding: int,
                    words: int = 1, blocked: tuple = ()) -> int:
    """Cycles of a LOAD's walk (in the core's load unit) over a box whose tokens, in box order, are
    inside the grid where ``real`` is true: the request walker asks for one request of
    ``beats_per_token`` beats per inside token (when fewer than ``outstanding`` are in
    flight) and steps over a padding token in one cycle; the write walker takes one beat per
    cycle of an inside token when the memory has it, and writes a padding token's
    ``beats_per_token`` zero beats in as many cycles. The walk ends the cycle after the last
    write. One loop iteration per cycle (the walk is at most a few thousand cycles; boxes of
    one shape share the result).

    ``words``: cycles a beat takes to write (a V LOAD hands each beat to the V memory as
    ``8 / cols`` words, one a cycle); ``blocked``: (first, last) cycles of the walk, counted
    from its first, in which no word can be written (a running block's P @ V reads the V
    bank)."""
    n = len(real)
    reads = deque()                       # [beats left, cycle of the first valid beat]
    rk = wk = lane = word = 0
    cycle = 0
    while wk < n:
        new = None
        if rk < n:
            if not real[rk]:
                rk += 1
            elif len(reads) < outstanding:
                new = [beats_per_token, cycle + 1 + latency]
                rk += 1
        there = not real[wk] or (bool(reads) and reads[0][1] <= cycle)
        take = popped = False
        if there and not any(lo <= cycle <= hi for lo, hi in blocked):
            word += 1
            if word == words:
                word, take, popped = 0, True, bool(real[wk])
        if take:
            lane += 1
            if lane == beats_per_token:
                lane, wk = 0, wk + 1
        if new is not None:
            reads.append(new)
        if popped:
            reads[0][0] -= 1
            if reads[0][0] == 0:
                reads.popleft()
        cycle += 1
    return cycle + 1


#: Cycles from a LOAD's decode to its hand-off to the load unit when the unit is free: the
#: decode, the origin's address and remainders (:data:`ARITH_CYCLES`) and the hand-off.
LOAD_ISSUE_CYCLES = DECODE_CYCLES + ARITH_CYCLES + 1


@dataclass(frozen=True)
class CommandTiming:
    """When one command ran on the core (cycles from the first command's decode, 0):
    ``arrive`` (the controller is ready for it), ``decode`` (it is taken: later than
    ``arrive`` while it waits for the load unit), ``end`` (the controller is ready for the
    next one) and, for a LOAD, ``walk``: the first and last cycle of its walk in the load
    unit (else None)."""
    name: str
    arrive: int
    decode: int
    end: int
    walk: tuple | None = None


def core_schedule(commands, result, memory: BenchMemory = BenchMemory(),
                  datapath=None) -> list:
    """:class:`CommandTiming` of every command of a program that ran without error
    (``result`` of ``run_program(commands, ..., engine=True)``) on the core with
    :class:`BenchMemory` ``memory`` and commands offered back to back.

    The controller takes one command at a time, in order. CONFIG, STRIDES and STORE wait
    until the load unit is idle (its queued walk done too), and a COMPUTE until the walks of
    the banks it reads are done;
    then CONFIG and ATTENTION take 1 cycle, GROUPS ``1 + count``, STRIDES ``1 + 17``,
    COMPUTE ``1 +`` engine ``cycles`` ``+ 2`` and STORE ``1 + 5 +``
    :func:`store_readout_cycles` (``box_tokens + 1 + ceil(box_tokens**2 / 2)``). A LOAD
    takes :data:`LOAD_ISSUE_CYCLES` to its hand-off; while the load unit walks, the LOAD
    is queued instead (the controller goes on) and its walk starts the cycle after the walk
    before ends; a LOAD that finds the queue full waits until the queued walk has started.
    The load unit walks the box for :func:`load_run_cycles` cycles from the cycle after the
    hand-off while the controller goes on. FENCE takes its decode and waits in a
    second cycle until the load unit is idle (2 cycles when it is). The memory serves one
    transfer at a time: no STORE runs during a walk and a walk starts only when the STORE
    before it has ended.

    Attention blocks (COMPUTE kind 2; ``datapath``, a
    :class:`~golden.engine.block_timing.BlockDatapath`, is then required): the COMPUTE runs
    its S as above (on shared arrays once the block before has left them), then waits until
    the block datapath is idle, starts the block and ends the cycle after the S row packer
    is done (:func:`~golden.engine.block_timing.block_readout`); the block's P @ V
    (:func:`golden.engine.pv.pv_run_cycles` with the read-out's ``p_ready``) and the
    partials' read-out into the output unit run on meanwhile. A V LOAD writes ``8 / cols``
    words a beat and stalls while a running block's P @ V reads its bank. After a query box's
    last block its STORE of O waits for O's first beat and takes O as the output unit
    finishes it (:func:`~golden.engine.block_timing.finish_walk`); FENCE waits for a running
    block too."""
    return _schedule(commands, result, memory, datapath)[0]


def _schedule(commands, result, memory, datapath):
    """:func:`core_schedule`'s commands and the cycles the block datapath keeps the core
    busy: ``(commands, compute intervals, last busy cycle)``."""
    from golden.engine.block_timing import (FIN_QUIET, PARTIALS_DONE, block_readout,
                                            finish_walk)
    from golden.engine.commands import KIND_PV, Command, decode
    from golden.engine.pv import pv_run_cycles
    from golden.engine.program import box_coords

    blocks = iter(result.blocks)
    cfg = None
    out = []
    spans = []                            # cycles counted as compute: (first, last)
    t = 0                                 # the controller is ready for the next command
    walks = []                            # the LOADs' walks: (hand-off, last cycle, (side, bank))
    busy_end = 0                          # first cycle the block datapath is idle
    running_end = 0                       # first cycle no block counts as running
    pv_busy = []                          # (V bank, first, last): a P @ V reads the bank
    box_end = None                        # a query box's last block waiting for its STORE
    dp = datapath
    for cmd in commands:
        c = decode(cmd.encode() if isinstance(cmd, Command) else cmd)
        name = c.NAME
        ld_end = walks[-1][1] if walks else -1
        reads = ()
        if name == "COMPUTE":
            reads = ((0, c.q_bank), (1, c.k_bank)) + (
                ((2, c.v_bank),) if c.kind == KIND_PV else ())
        # Held until the walks are done (CONFIG, STRIDES, STORE) or the walks of the banks
        # it reads (a COMPUTE); walks end in order.
        d = t
        if name in ("CONFIG", "STRIDES", "STORE"):
            d = max(t, ld_end + 1)
        elif reads:
            d = max([t] + [last + 1 for _, last, sb in walks if sb in reads])
        walk = None
        if name in ("CONFIG", "ATTENTION"):
            cfg = c if name == "CONFIG" else cfg
            end = d + DECODE_CYCLES
        elif name == "GROUPS":
            end = d + DECODE_CYCLES + len(c.groups)
        elif name == "STRIDES":
            end = d + DECODE_CYCLES + ARITH_CYCLES
        elif name == "LOAD":
            coords = box_coords(c.origin, cfg.box)
            # A rows LOAD reads every token of the bank; a box's padding is not read.
            real = tuple(bool(c.rows) or bool(r)
                         for r in (coords < np.asarray(cfg.grid)[None, :]).all(axis=1))
            # LD_WAIT from cycle a: the walk starts at once when the load unit is free, else
            # it is queued (the controller goes on) and starts as the walk before ends; a
            # queue still full waits until its walk has started.
            a = d + LOAD_ISSUE_CYCLES - 1
            end = a + 1
            h = a                                               # the hand-off cycle
            if walks and walks[-1][1] >= a:
                prev_h, prev_last, _ = walks[-1]
                if prev_h >= a:
                    end = prev_h + 2
                h = prev_last + 1
            words, blocked = 1, ()
            if c.side == 2:
                words = 8 // _need(dp).cols
                pv_busy = [p for p in pv_busy if p[2] > h]    # hand-offs only move on
                blocked = tuple((lo - h - 1, hi - h - 1) for bank, lo, hi in pv_busy
                                if dp.v_banks == 1 or bank == c.bank)
            n = load_run_cycles(real, -(-cfg.head_dim // 8), memory.latency,
                                memory.outstanding, words, blocked)
            walk = (h + 1, h + n)
            # At most two walks are ever live (the load unit's and the queued one), and walks
            # end in order: older ones cannot hold or delay anything.
            walks = walks[-1:] + [(h, h + n, (c.side, c.bank))]
        elif name == "COMPUTE":
            b = next(blocks)
            if b.engine is None:
                raise ValueError("core_schedule needs run_program(..., engine=True)")
            # The engine starts the cycle after the decode; on arrays shared with the
            # block datapath, once the block before has left them.
            go = d + DECODE_CYCLES
            if dp is not None and dp.shared_arrays:
                go = max(go, running_end)
            if c.kind != KIND_PV:
                end = go + int(b.engine.cycles) + COMPUTE_OVERHEAD
            else:
                dp = _need(dp)
                n_tok = int(np.prod(cfg.box))
                r0 = max(go + int(b.engine.cycles) + COMPUTE_OVERHEAD, busy_end)
                ro = block_readout(dp, n_tok)
                end = r0 + ro.s_done + 1
                pv = pv_run_cycles(b.pv.rb_steps, b.pv.row_blocks, dp.rows, dp.cols,
                                   ro.p_ready)
                pv_busy.append((c.v_bank, r0 + 1, r0 + pv - 1))
                last_beat = r0 + pv + n_tok * dp.chunks     # the partials' last beat in
                if c.last:
                    box_end = (r0, last_beat + FIN_QUIET, n_tok)
                    busy_end = running_end = 1 << 62       # until the STORE of O
                else:
                    busy_end = last_beat + PARTIALS_DONE
                    running_end = busy_end + 1
                    spans.append((r0 + 1, running_end - 1))
            spans.append((d + 1, end - 1))
        elif name == "STORE":
            if box_end is not None:
                r0, start, n_tok = box_end
                f = finish_walk(_need(dp), n_tok, cfg.head_dim, start, d)
                end = f.last_write + 2
                busy_end, running_end = f.last_in + 2, f.first_out + 1
                spans.append((r0 + 1, f.first_out))
                box_end = None
            else:
                n = int(np.prod(cfg.box))
                end = d + DECODE_CYCLES + STORE_OVERHEAD + store_readout_cycles(n)
        else:                             # FENCE
            end = max(d + FENCE_CYCLES, ld_end + 2, running_end + 1)
        out.append(CommandTiming(name, t, d, end, walk))
        t = end
    if box_end is not None:
        raise ValueError("the program's last query box has no STORE of O")
    return out, spans, running_end - 1


def _need(datapath):
    if datapath is None:
        raise ValueError("a program with attention blocks (COMPUTE kind 2) needs the "
                         "datapath (golden.engine.block_timing.BlockDatapath.from_config)")
    return datapath


def _covered(spans) -> int:
    """Cycles in the union of inclusive ``(first, last)`` spans."""
    total, reach = 0, -1
    for lo, hi in sorted(spans):
        if hi > reach:
            total += hi - max(lo, reach + 1) + 1
            reach = hi
    return total


def command_cycles(commands, result, memory: BenchMemory = BenchMemory()) -> list[int]:
    """Cycles the controller spends on every command (:func:`core_schedule`: from its
    arrival, waits for the load unit included, to the next command's arrival). With one
    bank per side and a FENCE at the end (the host's programs) their sum is the core's
    ``cycles``; in general a walk may outlast the last command (:func:`core_cycles`)."""
    return [c.end - c.arrive for c in core_schedule(commands, result, memory)]


def core_cycles(commands, result, memory: BenchMemory = BenchMemory(),
                datapath=None) -> dict:
    """The core's ``cycles``, ``compute`` and ``mem_wait`` counters, exact for a program
    run back to back against :class:`BenchMemory` (:func:`core_schedule`: ``cycles`` from
    the first command's decode until the controller, the load unit and the block datapath
    are idle; ``compute`` the cycles in which a COMPUTE runs or an attention block does).
    ``datapath``: for programs with attention blocks (``BlockDatapath.from_config``)."""
    sched, spans, running = _schedule(commands, result, memory, datapath)
    total = max([sched[-1].end] + [c.walk[1] + 1 for c in sched if c.walk]
                + [running + 1]) if sched else 0
    comp = _covered(spans)
    return {"cycles": total, "compute": comp, "mem_wait": total - comp}


# -- DRAM at paper scale -------------------------------------------------------------------------

#: The paper's off-chip memory (Sec. 6): 16 DDR5-6400 channels of 64 bits,
#: 16 * 6.4e9 transfers/s * 8 bytes = 819.2 GB/s at peak.
PAPER_DRAM_GBPS = 16 * 6.4 * 8
#: The paper's clock (GHz).
PAPER_CLOCK_GHZ = 1.0


def head_traffic(n_tokens: int, head_dim: int, *, fused: bool) -> dict:
    """DRAM bytes of one attention head whose operands each cross the memory port once
    (they fit the on-chip buffers: at 720p, N = 118,800 and d = 128, Q, K and V are 15.2 MB
    each against the paper's 64 MB global buffer).

    ``fused=False`` is what this core's programs do: Q and K in (int8), every S value out
    (int32, ``N**2 * 4`` bytes). ``fused=True`` is a whole head with S kept on chip (row
    blocks of S through softmax into P @ V, issue 16): Q, K, V in, O out as int32.
    Returns ``read``, ``written`` and ``total`` bytes."""
    for name, v in (("n_tokens", n_tokens), ("head_dim", head_dim)):
        if not (isinstance(v, (int, np.integer)) and v >= 1):
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    n, d = int(n_tokens), int(head_dim)
    read = (3 if fused else 2) * n * d
    written = n * d * 4 if fused else n * n * 4
    return {"read": read, "written": written, "total": read + written}


def dram_cycles(nbytes: int, gbytes_per_s: float = PAPER_DRAM_GBPS,
                clock_ghz: float = PAPER_CLOCK_GHZ) -> int:
    """Cycles at ``clock_ghz`` that ``nbytes`` need at a sustained ``gbytes_per_s`` (the
    peak: a lower bound of the real transfer time)."""
    if gbytes_per_s <= 0 or clock_ghz <= 0:
        raise ValueError(f"gbytes_per_s and clock_ghz must be > 0, got {gbytes_per_s}, "
                         f"{clock_ghz}")
    return int(np.ceil(nbytes / gbytes_per_s * clock_ghz))
