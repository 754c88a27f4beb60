"""Standard-cell area, timing and power of the whole KaleidoEngine, block by block
(``make synth-engine`` = ``kaleido-hw synth --engine``; ``docs/engine.md``, "Area of the engine").

A build is ``(arrays, variant)`` (:func:`default_builds`): P PE arrays and one of
:data:`VARIANTS`: "none", "scheduler", "matcher", "full" (``engine_dispatcher``: which
dispatcher hardware is built) or "plain" (the same engine on BaselinePEs, no dispatcher:
``engine_pe = "plain"``; built only where :class:`KaleidoConfig` has that key). The
comparison builds are made from :data:`AREA_CONFIG` by :func:`variant_config`; the default
build (``--engine-default``) is :class:`KaleidoConfig`'s defaults as they are.

Flow, per build (:func:`synth_engine`):

1. Generate the engine's Verilog (:func:`~kaleido_hw.flow.generate.emit_verilog`: memories
   without initial contents) with identical modules shared
   (:func:`~kaleido_hw.flow.dedup.share_identical_modules`: the 4 arrays' 64 PEs become 4
   PE modules, the 4 sequencers one), so that each distinct module is mapped once.
2. Debian yosys maps it onto the OSU 0.18 um cells with the hierarchy kept
   (:func:`kaleido_hw.flow.stdcell.map_script`): ``synth -run begin:fine`` (``memory -nomap``: memories stay
   ``$mem_v2`` cells), ``opt -fast -full; techmap; opt -fast``, then the mapping of
   :mod:`kaleido_hw.flow.stdcell` (``dfflibmap``; ``abc`` with buffering and sizing) on every
   module.
3. Every remaining memory becomes a black-box SRAM macro (:mod:`kaleido_hw.flow.sram_macros`:
   area from the GF180MCU 180 nm SRAM density, 30.4 um2 per bit and read port; clock-to-Q
   4.48 ns, setup 0.70 ns), one Liberty cell per shape (:func:`kaleido_hw.flow.sram_macros.macro_script`);
   flip-flop and macro outputs, the nets into the macros, every submodule's input ports
   (its clock excepted) and the nets its output ports drive get buffer trees (:mod:`kaleido_hw.flow.buffer_tree`);
   ``stat -liberty`` with both libraries gives every module's own area and the total.
4. OpenSTA times the hierarchical netlist (clock 10 ns, ports 0 ns from the edge, as
   ``make synth``) and estimates its power at 100 MHz, activity 0.1 (the macros have no
   power model: the power is the logic's).

Every instance path (:func:`~kaleido_hw.flow.dedup.instance_modules`) gets its module's
figures and is attributed to a block by that path (:func:`block_of`), so a shared module
counts once per instance; the blocks' logic area plus the SRAM macros' area must equal yosys'
hierarchical total (checked, :data:`SUM_TOLERANCE`). Sharing changes no module's logic, but
the shared module's invented names (``$12``) are renamed, and ABC's choices depend on names
(yosys orders signals by them): a module maps within about 2% of its unshared copies,
which already differed by about 1% from each other, and the whole engine's logic within a
few tenths of a percent (``share=False`` maps every copy, as before; ``docs/engine.md``). With a "none" and a "full" build at the same P, the dispatcher's cost
is given two ways: the modules that exist only for it (OrderUnits with their
ClusterSchedulers, the pre-pass code units, the SlotUnits with their MergeMatchers) plus the
MergedCell arrays' overhead over the TileCell arrays, and the whole-engine difference full
minus none. With a "plain" build at the same P, every build is also given as a ratio to it.

Results are cached in :data:`ENGINE_CACHE` (keyed by configuration, yosys version, library,
the SRAM model and a hash of the engine's Python sources) so that ``kaleido-hw report --only
area`` can show them without re-synthesizing.
"""

from __future__ import annotations

import dataclasses
import json
import re
import resource
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.engine_layouts import KaleidoGeometry
from kaleido_hw.engine.tile_layouts import S_WIDTH
from kaleido_hw.flow import sram_macros as sm
from kaleido_hw.flow import stdcell
from kaleido_hw.flow.dedup import instance_modules, module_texts
from kaleido_hw.flow.sources import REPO, sources_hash


__all__ = ["AREA_CONFIG", "VARIANTS", "DEFAULT_ARRAYS", "DEFAULT_VARIANTS", "ENGINE_CACHE",
           "CORE_TOP", "TOP_NAMES", "MEMORY_KINDS", "ENGINE_MEMORY_KINDS", "BLOCKS",
           "ENGINE_BLOCKS", "SUM_TOLERANCE", "ModuleArea", "MemoryBits",
           "EngineArea", "block_of", "memory_kind",
           "expected_memory_bits", "plain_available", "variant_config", "default_builds",
           "synth_engine", "run_builds", "dispatcher_share",
           "plain_ratios", "format_engine_report", "source_hash", "save_cache", "load_cache",
           "report_rows", "report_table", "plot_engine_area"]

#: The configuration the engine is measured at: the defaults (R = C = 4, W = 16, E = 64,
#: acc_width 24, hunyuanvideo) with engine_max_tokens 16 and engine_max_head_dim 32 instead
#: of 64 and 128. Memory depth (tokens) changes only address widths in the logic; head_dim
#: sizes the channel masks, the CodeUnits (per array and for the pre-pass) and the
#: configuration check, so the control and sequencer figures grow with it (the PE arrays,
#: SlotUnits and OrderUnits do not). Six builds of it compare the variants; the default
#: build is measured on its own (``--engine-default``).
AREA_CONFIG = KaleidoConfig(engine_max_tokens=16, engine_max_head_dim=32)
#: Engine variants a build can have (see the module docstring).
VARIANTS = ("plain", "none", "scheduler", "matcher", "full")
#: What ``make synth-engine`` builds: every variant of DEFAULT_VARIANTS at every P of
#: DEFAULT_ARRAYS ("plain" only where the configuration has ``engine_pe``).
DEFAULT_ARRAYS = (1, 4)
DEFAULT_VARIANTS = ("plain", "none", "full")
#: Verilog top module of a variant's build (default "kaleido_engine").
TOP_NAMES = {"plain": "plain_engine"}
#: Where ``kaleido-hw synth --engine`` keeps its results for the report (relative to the
#: working directory, like ``make``'s other outputs).
ENGINE_CACHE = Path("build") / "engine_area.json"
#: Largest allowed |blocks + SRAM - yosys total| / total: yosys prints every area with six
#: decimals and the macros' areas have three, so only rounding may differ.
SUM_TOLERANCE = 1e-6
#: Parallel yosys runs that map the modules (step 2), each a share of the modules.
MAP_JOBS = 2
#: Version of the flow in the cache key (a cache of another flow is stale; 3: buffer trees on
#: the submodules' input ports; 4: and on the nets the instances' output ports drive).
FLOW = "osu018-stdcell+gf180-sram-4"

#: Memory kinds, in report order (the engine's, then the engine core's: ``--engine-top
#: kaleido_core``, with ``core_attention`` the block datapath's).
ENGINE_MEMORY_KINDS = ("operands", "order memories", "scheduler batches",
                       "accumulation planes", "S reorder buffer", "slot stores")
MEMORY_KINDS = ENGINE_MEMORY_KINDS + (
    "DMA FIFOs", "P @ V: P memory", "P @ V: V banks", "P @ V: output banks",
    "attention: O accumulators", "attention: softmax buffers and FIFOs")
#: The memory kinds that only the dispatcher has.
DISPATCHER_MEMORIES = ("order memories", "scheduler batches", "slot stores")
#: Blocks of the breakdown, in report order ("array k" and "sequencer k" per array).
ENGINE_BLOCKS = ("PE arrays", "sequencers", "dispatcher: OrderUnits",
                 "dispatcher: pre-pass codes", "dispatcher: SlotUnits", "control",
                 "buffer logic")
BLOCKS = ENGINE_BLOCKS + (
    "core: controller", "core: DMA", "attention: S row packer", "attention: softmax unit",
    "attention: P transposer", "attention: P @ V arrays",
    "attention: P @ V sequencers and buffer", "attention: output unit",
    "attention: FIFOs and control", "attention: O packer")
#: Tops the flow can map besides the engines (``--engine-top``): the engine core, whose
#: paths below ``ctrl.engine`` are the engine's.
CORE_TOP = "kaleido_core"


@dataclass
class ModuleArea:
    """Standard-cell logic of one module (its own cells: no memories, no submodules)."""
    path: str            # hierarchical name below the top ("" for the top's own logic)
    block: str           # :func:`block_of`
    cells: int           # library cells (gates and flip-flops)
    ffs: int
    area_um2: float


@dataclass
class MemoryBits:
    """One memory, kept as an SRAM macro."""
    path: str            # module below the top ("" for the top)
    name: str
    kind: str            # :func:`memory_kind`
    width: int
    words: int
    read_ports: int = 1
    area_um2: float = 0.0    # sram_macros.macro_area_um2

    @property
    def bits(self) -> int:
        """Capacity in bits."""
        return self.width * self.words


def _block_key(name: str):
    """Sort key of a block name: :data:`BLOCKS` order, per-array rows by array, SRAM last."""
    base = re.sub(r" \d+$", "", name)
    base = {"array": "PE arrays", "sequencer": "sequencers"}.get(base, base)
    num = re.search(r"(\d+)$", name)
    if name.startswith("SRAM: "):
        return (len(BLOCKS) + 1, MEMORY_KINDS.index(name[6:]) if name[6:] in MEMORY_KINDS
                else len(MEMORY_KINDS), name)
    return (BLOCKS.index(base) if base in BLOCKS else len(BLOCKS),
            int(num.group(1)) if num else -1, name)


@dataclass
class EngineArea:
    """Figures of one engine build (see the module docstring)."""
    arrays: int
    variant: str
    config: dict
    top: str = "kaleido_engine"
    modules: list[ModuleArea] = field(default_factory=list)
    memories: list[MemoryBits] = field(default_factory=list)
    total_area_um2: float | None = None   # yosys' hierarchical total (logic + SRAM macros)
    path_ns: float | None = None          # minimum clock period (stdcell.StdCellResult.path_ns)
    arrival_ns: float | None = None
    startpoint: str | None = None
    endpoint: str | None = None
    fmax_mhz: float | None = None
    power_mw: float | None = None         # logic only, at 100 MHz, activity 0.1
    seconds: float = 0.0                  # wall clock: generation + yosys + OpenSTA
    yosys_cpu_seconds: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the mapping ran and gave figures."""
        return bool(self.modules)

    @property
    def logic_area_um2(self) -> float:
        """Standard-cell area of the whole engine (sum over its modules)."""
        return sum(m.area_um2 for m in self.modules)

    @property
    def sram_area_um2(self) -> float:
        """Area of the SRAM macros."""
        return sum(m.area_um2 for m in self.memories)

    @property
    def area_um2(self) -> float:
        """Logic + SRAM macros."""
        return self.logic_area_um2 + self.sram_area_um2

    @property
    def ffs(self) -> int:
        """Flip-flops of the whole engine."""
        return sum(m.ffs for m in self.modules)

    @property
    def cells(self) -> int:
        """Standard cells of the whole engine."""
        return sum(m.cells for m in self.modules)

    def blocks(self, per_array: bool = False, sram: bool = False) -> dict[str, dict]:
        """{block: {"cells", "ffs", "area_um2"}} in :data:`BLOCKS` order; with ``per_array``
        the arrays and sequencers get one row each ("array 0", ...); with ``sram`` one row per
        memory kind ("SRAM: operands", ...) follows, and the rows sum to :attr:`area_um2`."""
        out: dict[str, dict] = {}
        for m in self.modules:
            name = m.block
            if not per_array:
                name = re.sub(r"^array \d+$", "PE arrays", name)
                name = re.sub(r"^sequencer \d+$", "sequencers", name)
            row = out.setdefault(name, {"cells": 0, "ffs": 0, "area_um2": 0.0})
            row["cells"] += m.cells
            row["ffs"] += m.ffs
            row["area_um2"] += m.area_um2
        if sram:
            for mem in self.memories:
                row = out.setdefault(f"SRAM: {mem.kind}", {"cells": 0, "ffs": 0, "area_um2": 0.0})
                row["cells"] += 1
                row["area_um2"] += mem.area_um2
        return {k: out[k] for k in sorted(out, key=_block_key)}

    def memory_bits(self) -> dict[str, int]:
        """SRAM bits per kind (:data:`MEMORY_KINDS` order: every engine kind, the others
        where the build has them)."""
        out = {k: 0 for k in ENGINE_MEMORY_KINDS}
        for mem in self.memories:
            out[mem.kind] = out.get(mem.kind, 0) + mem.bits
        return {k: out[k] for k in MEMORY_KINDS if k in out}


# -- text processing -------------------------------------------------------------------------

def block_of(path: str) -> str:
    """The breakdown block of the module at ``path`` (below the top; "" is the top):

    * ``arrayK...`` -> "array K" (PEs, their decoders, forwarding and drain registers);
    * ``seqK.slots...`` -> "dispatcher: SlotUnits"; other ``seqK...`` -> "sequencer K";
    * ``q_order...``, ``k_order...`` -> "dispatcher: OrderUnits" (with their schedulers);
    * ``q_pre_codes``, ``k_pre_codes`` -> "dispatcher: pre-pass codes";
    * ``acc...`` -> "buffer logic"; the top itself -> "control" (configuration check,
      chunk controller and barrier, pre-pass control, counters, host interface).

    In the engine core (``kaleido_core``): ``ctrl.engine...`` is the engine (its top
    "control", with the core top's own wiring), ``ctrl.arrayK...`` the arrays the core owns
    with ``engine_pe = "reuse-pv"`` ("array K"), ``ctrl`` "core: controller" (decode, box
    walkers, counters), ``dma...`` "core: DMA", and with ``core_attention`` ``ctrl.s_rows``,
    ``ctrl.o_packer`` and ``ctrl.block...`` the block datapath's units ("attention: ...").
    """
    parts = path.split(".") if path else []
    if not parts:
        return "control"
    head = parts[0]
    if head == "dma":
        return "core: DMA"
    if head == "ctrl":
        sub = parts[1] if len(parts) > 1 else None
        if sub is None:
            return "core: controller"
        if sub == "engine":
            return block_of(".".join(parts[2:]))
        if re.fullmatch(r"array\d+", sub):
            return block_of(".".join(parts[1:]))
        if sub in ("s_rows", "o_packer", "block"):
            return _attention_block(parts[1:])
        raise ValueError(f"module {path!r} belongs to no block of the core breakdown")
    if m := re.fullmatch(r"array(\d+)", head):
        return f"array {m.group(1)}"
    if m := re.fullmatch(r"seq(\d+)", head):
        return "dispatcher: SlotUnits" if "slots" in parts[1:2] else f"sequencer {m.group(1)}"
    if head in ("q_order", "k_order"):
        return "dispatcher: OrderUnits"
    if head in ("q_pre_codes", "k_pre_codes"):
        return "dispatcher: pre-pass codes"
    if head == "acc":
        return "buffer logic"
    raise ValueError(f"module {path!r} belongs to no block of the engine breakdown")


def _attention_block(parts: list[str]) -> str:
    """The block of a module of the core's block datapath (``parts`` below ``ctrl``)."""
    if parts[0] == "s_rows":
        return "attention: S row packer"
    if parts[0] == "o_packer":
        return "attention: O packer"
    unit = parts[1] if len(parts) > 1 else None
    if unit == "softmax":
        return "attention: softmax unit"
    if unit == "output":
        return "attention: output unit"
    if unit == "transposer":
        return "attention: P transposer"
    if unit == "pv":
        arrays = len(parts) > 2 and re.fullmatch(r"array\d+", parts[2])
        return "attention: P @ V arrays" if arrays else "attention: P @ V sequencers and buffer"
    return "attention: FIFOs and control"


def memory_kind(path: str, name: str) -> str:
    """The SRAM kind of memory ``name`` in the module at ``path`` (see :data:`MEMORY_KINDS`)."""
    if path == "ctrl.engine" or path.startswith("ctrl.engine."):
        return memory_kind(path[len("ctrl.engine."):], name)
    if path == "dma" or path.startswith("dma."):
        return "DMA FIFOs"
    if path == "ctrl.block.pv" and name == "pmem":
        return "P @ V: P memory"
    if path == "ctrl.block.pv" and re.fullmatch(r"vmem\d+", name):
        return "P @ V: V banks"
    if path == "ctrl.block.pv.obuf" and re.fullmatch(r"obank\d+", name):
        return "P @ V: output banks"
    if path == "ctrl.block.output" and name == "acc":
        return "attention: O accumulators"
    if path == "ctrl.block" or path.startswith("ctrl.block."):
        return "attention: softmax buffers and FIFOs"
    if path == "" and re.fullmatch(r"[qk]_mem\d+", name):
        return "operands"
    if path in ("q_order", "k_order") and name in ("order", "inverse", "keys"):
        return "order memories"
    if path in ("q_order.sched", "k_order.sched") and name in ("string_queue", "banks"):
        return "scheduler batches"
    if path == "acc" and re.fullmatch(r"plane\d+_bank\d+", name):
        return "accumulation planes"
    if path == "acc.reorder" and re.fullmatch(r"lane[01]", name):
        return "S reorder buffer"
    if re.fullmatch(r"seq\d+\.slots", path) and name == "sel_store":
        return "slot stores"
    raise ValueError(f"memory {name!r} in module {path!r} is of no known kind")


def expected_memory_bits(config: KaleidoConfig) -> dict[str, int]:
    """SRAM bits per kind that ``config`` implies (``docs/engine.md``, "RTL"):

    * operands: a Q and a K copy per array, ``N_max`` words of ``8 * D_max`` bits;
    * accumulation planes: ``planes`` x ``P*C`` banks of ``bank_depth`` words of two
      ``acc_width`` lanes (a Q row pair);
    * S reorder buffer (the read-out's row pairs to row-major beats): two lanes of two
      halves of ``N_max`` words of 32 bits;
    * with the scheduler, per ordered side (Q; Q and K with ``sched_sides = "qk"``) an
      OrderUnit: its order (2 banks of ``2**uw`` keys, ``uw`` = bits of a unit; a key is a
      token and a follower bit), its key memory (``2**uw`` keys) and a ClusterScheduler with a
      queue of E entries of ``uw + 1 + W`` bits (an id and its pattern) and output banks of
      2E ids (``uw + 1`` bits); the K side's inverse order (``max(2, planes)`` banks
      of ``2**uw`` x ``uw``) feeds the buffer's read-out. The Q side's inverse is never
      read, and yosys removes it;
    * with the matcher, per array the SlotUnit's slot store: W slots' column
      selects (3*C bits each).
    """
    geo = KaleidoGeometry.from_config(config)
    t = geo.tile
    P = geo.arrays
    out = {k: 0 for k in ENGINE_MEMORY_KINDS}
    out["operands"] = 2 * P * t.max_tokens * 8 * t.max_dim
    out["accumulation planes"] = geo.planes * geo.banks * geo.bank_depth * 2 * t.acc_width
    out["S reorder buffer"] = 2 * 2 * t.max_tokens * S_WIDTH
    if config.engine_dispatcher in ("scheduler", "full"):
        uw = max(1, (config.engine_max_tokens - 1).bit_length())
        depth = 1 << uw
        sides = len(config.ordered_sides)
        key = t.tok_width + 1
        out["order memories"] = sides * (3 * depth * key) + (
            max(2, geo.planes) * depth * uw if geo.k_ordered else 0)
        # The string queue holds E entries (id and pattern); the two output banks hold 2E
        # ids (the order needs no pattern).
        E = config.sched_entries
        out["scheduler batches"] = sides * (E * (uw + 1 + config.sched_pattern_width)
                                            + 2 * E * (uw + 1))
    if config.engine_dispatcher in ("matcher", "full"):
        out["slot stores"] = P * config.sched_pattern_width * 3 * config.cols
    return out


# -- builds ------------------------------------------------------------------------------------

def plain_available(config: KaleidoConfig) -> bool:
    """True when the configuration can describe the plain engine (has ``engine_pe``)."""
    return any(f.name == "engine_pe" for f in dataclasses.fields(config))


def variant_config(base: KaleidoConfig, arrays: int, variant: str) -> KaleidoConfig:
    """``base`` with ``engine_arrays`` = arrays and the variant's keys: "plain" ->
    :func:`~kaleido_hw.engine.kaleido_engine.plain_config` (``engine_pe = "plain"``, no
    dispatcher, the plain build's own chunk width); otherwise ``engine_dispatcher`` = variant
    (validated by :class:`KaleidoConfig`)."""
    if variant not in VARIANTS:
        raise ValueError(f"engine variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    if variant == "plain":
        if not plain_available(base):
            raise ValueError("the plain engine needs the KaleidoConfig key engine_pe, which "
                             "this version does not have")
        from kaleido_hw.engine.kaleido_engine import plain_config
        return plain_config(base.replace(engine_arrays=arrays))
    return base.replace(engine_arrays=arrays, engine_dispatcher=variant)


def default_builds(arrays=DEFAULT_ARRAYS, variants=DEFAULT_VARIANTS) -> list[tuple[int, str]]:
    """(arrays, variant) of every build: each variant at each P, in that order."""
    for v in variants:
        if v not in VARIANTS:
            raise ValueError(f"engine variant must be one of {', '.join(VARIANTS)}, got {v!r}")
    return [(p, v) for p in arrays for v in variants]


def _component(config: KaleidoConfig, top: str):
    """The engine of ``config``: the generator's top of that name if there is one, else a
    KaleidoEngine."""
    from kaleido_hw.flow.generate import TOPS, build_top

    for t in TOPS:
        if t.module == top:
            return build_top(t, config)
    from kaleido_hw.engine.kaleido_engine import KaleidoEngine
    return KaleidoEngine(config)


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def synth_engine(config: KaleidoConfig, *, variant: str | None = None, timeout: int = 14400,
                 keep: Path | None = None, log=None, share: bool = True,
                 jobs: int = MAP_JOBS, top: str | None = None) -> EngineArea:
    """Map, measure and time the engine built from ``config`` (see the module docstring).

    ``variant``: the build's name (default: ``config.engine_dispatcher``); it picks the top
    module's name (:data:`TOP_NAMES`). ``keep``: a folder that receives the Verilog, the
    scripts, the stat output and the netlist; ``log``: a callable taking progress lines;
    ``share=False``: map every instance's copy of a module on its own (the figures are the
    same up to ABC's name-dependent choices, see the module docstring); ``jobs``: parallel
    yosys runs of the mapping (:func:`_map`); ``top``: another top of the generator to map
    instead of the engine (:data:`CORE_TOP`, the engine core with its DMA and, with
    ``core_attention``, its block datapath). A missing tool or a failed run gives a result
    without modules and a note.
    """
    variant = variant or config.engine_dispatcher
    top = top or TOP_NAMES.get(variant, "kaleido_engine")
    res = EngineArea(config.engine_arrays, variant, config.to_dict(), top)
    why = stdcell.stdcell_available()
    if why:
        res.notes.append(f"skipped: {why}")
        return res
    from kaleido_hw.flow.generate import emit_verilog

    t0 = time.monotonic()
    lib = stdcell.liberty_path()
    cells, sequential = stdcell.liberty_cells(lib.read_text())
    with tempfile.TemporaryDirectory(prefix="kaleido-engine-area-") as tmp:
        work = Path(keep) if keep is not None else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        vfile = work / f"{top}.v"
        text = emit_verilog(_component(config, top), top, share=share)
        vfile.write_text(text)
        instances = instance_modules(text, top)
        if log:
            log(f"  Verilog written ({vfile.stat().st_size // 1000} kB, "
                f"{len(set(instances.values()))} modules for {len(instances)} instances, "
                f"{time.monotonic() - t0:.0f} s); yosys ...")
        cpu0 = _cpu()
        try:
            _map(top, vfile.name, str(lib), _partition(text, jobs), work, timeout)
            memories = sm.parse_memories((work / "mems.txt").read_text(), top)
            (work / "sram_macros.lib").write_text(sm.macro_liberty(m.shape for m in memories))
            netlist = work / f"{top}.net.v"
            macro_lib = work / "sram_macros.lib"
            stdcell.run_yosys(sm.macro_script(memories, top, str(lib), macro_lib.name), work,
                              timeout=timeout)
            # Register outputs get buffer trees (kaleido_hw.flow.buffer_tree); a macro's read data
            # is a register output too, and the nets into the macros and the submodules' input
            # ports (the clock excepted) get trees as well.
            macro_cells, _ = stdcell.liberty_cells(macro_lib.read_text())
            stdcell.buffered(work, lib.read_text() + macro_lib.read_text(),
                             sequential | macro_cells, json_in="macros.json",
                             macros=macro_cells)
            stdcell.run_yosys(stdcell.finish_script(top, "buffered.json",
                                                    [str(lib), macro_lib.name],
                                                    netlist_file=netlist.name),
                              work, timeout=timeout)
            res.yosys_cpu_seconds = round(_cpu() - cpu0, 1)
            netlist.write_text(sm.join_macro_clocks(netlist.read_text()))
            _fill(res, (work / "stat.txt").read_text(), memories, cells, sequential, instances)
            if log:
                log(f"  mapped: {res.area_um2 / 1e6:.3f} mm2 ({time.monotonic() - t0:.0f} s, "
                    f"yosys CPU {res.yosys_cpu_seconds:.0f} s); OpenSTA ...")
            index = stdcell.NetlistIndex(netlist.read_text(), cells, sequential)
            timing = stdcell.time_netlist(top, netlist, [lib, work / "sram_macros.lib"], work,
                                          index=index, timeout=timeout)
            res.notes += timing.pop("notes")
            for key, value in timing.items():
                setattr(res, key, value)
        except subprocess.TimeoutExpired:
            res.notes.append(f"failed: a tool took more than {timeout} s")
        except (RuntimeError, ValueError) as e:
            res.notes.append(f"failed: {e}")
    res.seconds = round(time.monotonic() - t0, 1)
    if log:
        log(f"  done in {res.seconds:.0f} s" + (f" ({'; '.join(res.notes)})" if res.notes else ""))
    return res


def _partition(text: str, jobs: int) -> list[list[str]]:
    """The modules of ``text`` (yosys-written Verilog) in at most ``jobs`` groups of about equal
    Verilog size, the largest modules placed first, each in the smallest group so far."""
    sizes = {name: len(body) for name, body in module_texts(text).items()}
    groups: list[list[str]] = [[] for _ in range(max(1, min(jobs, len(sizes))))]
    load = [0] * len(groups)
    for name in sorted(sizes, key=lambda n: (-sizes[n], n)):
        k = load.index(min(load))
        groups[k].append(name)
        load[k] += sizes[name]
    return groups


def _map(top: str, verilog_file: str, liberty: str, groups: list[list[str]], work: Path,
         timeout: int) -> None:
    """Step 2: map ``groups`` of modules (:func:`_partition`) in parallel yosys runs, one per
    group, each leaving the other groups' modules as black boxes, and join them into
    ``mapped.il`` and ``mems.txt`` (one run when there is one group)."""
    if len(groups) == 1:
        stdcell.run_yosys(stdcell.map_script(top, verilog_file, liberty), work,
                          timeout=timeout)
        return
    everything = [m for g in groups for m in g]

    def run(k: int) -> str:
        others = [m for m in everything if m not in groups[k]]
        return stdcell.run_yosys(
            stdcell.map_script(top, verilog_file, liberty, blackbox=others,
                               il_file=f"mapped{k}.il"),
            work, timeout=timeout, script_file=f"map{k}.ys")

    with ThreadPoolExecutor(len(groups)) as pool:
        list(pool.map(run, range(len(groups))))
    stdcell.run_yosys(stdcell.join_script(top, [f"mapped{k}.il" for k in range(len(groups))]),
                      work, timeout=timeout, script_file="join.ys")


def _fill(res: EngineArea, stat: str, memories: list[sm.MemoryCell], cells: frozenset[str],
          sequential: frozenset[str], instances: dict[str, str] | None = None) -> None:
    """Fill ``res`` from ``stat -liberty`` (both libraries) and the memory cells: one
    :class:`ModuleArea` and one :class:`MemoryBits` per instance path, a shared module's
    figures repeated for each of its instances. ``instances``: {instance path: module}
    (:func:`~kaleido_hw.flow.dedup.instance_modules`; default: every module instantiated once,
    at the path its name gives). Raises ValueError when a module or memory has no instance
    path or blocks + SRAM do not sum to yosys' total (which counts a module once per
    instance)."""
    top = res.top
    stats = stdcell.parse_stat(stat)
    counts, total = stdcell.parse_hierarchy(stat)
    if instances is None:
        instances = {("" if n == top else n[len(top) + 1:]): n for n in {**counts, **stats}}
    paths_of: dict[str, list[str]] = {}
    for path, module in instances.items():
        paths_of.setdefault(module, []).append(path)
    macro_area = {sm.macro_name(m.shape): sm.macro_area_um2(m.shape) for m in memories}
    for name, s in stats.items():
        if name != top and not name.startswith(top + "."):
            raise ValueError(f"module {name} is not below the top {top}")
        paths = paths_of.get(name)
        if not paths:
            raise ValueError(f"module {name} is at no instance path below the top {top}")
        macros = sum(k * macro_area[t] for t, k in s.types.items() if t in macro_area)
        for path in paths:
            res.modules.append(ModuleArea(
                path, block_of(path), sum(k for t, k in s.types.items() if t in cells),
                sum(k for t, k in s.types.items() if t in sequential),
                (s.area_um2 or 0.0) - macros))
    order = {path: i for i, path in enumerate(instances)}
    res.modules.sort(key=lambda m: order[m.path])
    res.memories = []
    for m in memories:
        paths = paths_of.get(top if m.path == "" else f"{top}.{m.path}")
        if not paths:
            raise ValueError(f"memory {m.name} is in module {m.path!r}, which has no instance")
        res.memories += [MemoryBits(path, m.name, memory_kind(path, m.name), m.shape.width,
                                    m.shape.words, m.shape.read_ports,
                                    sm.macro_area_um2(m.shape)) for path in paths]
    if total is None:
        total = stats[top].area_um2 or 0.0
    res.total_area_um2 = total
    if abs(res.area_um2 - total) > SUM_TOLERANCE * max(total, 1.0):
        raise ValueError(f"engine area: blocks + SRAM sum to {res.area_um2:.1f} um2, yosys' "
                         f"total is {total:.1f} um2")


def run_builds(base: KaleidoConfig, builds, *, log=None, **kw) -> list[EngineArea]:
    """:func:`synth_engine` for every (arrays, variant) of ``builds``; a build the
    configuration cannot describe (plain without ``engine_pe``) gives a result with a note."""
    results = []
    top = kw.get("top")
    for arrays, variant in builds:
        if log:
            log(f"synthesizing {top or 'the engine'}, P = {arrays}, variant {variant!r} ...")
        try:
            cfg = variant_config(base, arrays, variant)
        except ValueError as e:
            res = EngineArea(arrays, variant, base.to_dict(),
                             top or TOP_NAMES.get(variant, "kaleido_engine"))
            res.notes.append(f"skipped: {e}")
            if log:
                log(f"  skipped: {e}")
            results.append(res)
            continue
        results.append(synth_engine(cfg, variant=variant, log=log, **kw))
    return results


# -- combining builds ----------------------------------------------------------------------------

def dispatcher_share(full: EngineArea, none: EngineArea | None = None) -> dict:
    """The dispatcher's cost in a "full" build (standard-cell logic, um2; shares of the full
    build's logic, SRAM excluded, and of its total with SRAM).

    ``modules``: OrderUnits + pre-pass code units + SlotUnits, plus (with ``none``, the
    "none" build at the same P) the MergedCell arrays' overhead over the TileCell arrays.
    ``delta``: whole engine full minus none (logic; ``sram_delta`` the SRAM difference).
    ``of_arrays_pct``: as the paper measures it (its Table 2), the dispatcher against the PE
    arrays it feeds: its modules plus its SRAM, that is its own memories (order and key
    memories, scheduler batches, slot stores) and the pre-pass's read ports on the operand
    copies (``prepass_ports``: a memory with R read ports is R copies, and every port past
    the first of an operand memory is there for the scheduler's pre-pass).
    """
    a = {k: v["area_um2"] for k, v in full.blocks().items()}
    own = sum(v for k, v in a.items() if k.startswith("dispatcher:"))
    logic = full.logic_area_um2
    own_sram = sum(m.area_um2 for m in full.memories if m.kind in DISPATCHER_MEMORIES)
    prepass_ports = sum(m.area_um2 * (m.read_ports - 1) / m.read_ports
                        for m in full.memories if m.kind == "operands" and m.read_ports > 1)
    arrays = a.get("PE arrays", 0.0)
    with_sram = own + own_sram + prepass_ports
    out = {"logic": logic, "total": full.area_um2, "dispatcher_modules": own,
           "order_units": a.get("dispatcher: OrderUnits", 0.0),
           "prepass_codes": a.get("dispatcher: pre-pass codes", 0.0),
           "slot_units": a.get("dispatcher: SlotUnits", 0.0),
           "dispatcher_modules_pct": 100 * own / logic,
           "dispatcher_sram": own_sram, "prepass_ports": prepass_ports,
           "with_sram": with_sram,
           "of_arrays_pct": 100 * with_sram / arrays if arrays else None}
    if none is not None:
        nb = {k: v["area_um2"] for k, v in none.blocks().items()}
        overhead = a.get("PE arrays", 0.0) - nb.get("PE arrays", 0.0)
        out.update({
            "merged_cell_overhead": overhead,
            "merged_cell_overhead_pct_of_arrays": 100 * overhead / nb["PE arrays"],
            "modules_with_cells": own + overhead,
            "modules_with_cells_pct": 100 * (own + overhead) / logic,
            "delta": logic - none.logic_area_um2,
            "delta_pct": 100 * (logic - none.logic_area_um2) / logic,
            "sram_delta": full.sram_area_um2 - none.sram_area_um2,
            "total_delta_pct": 100 * (full.area_um2 - none.area_um2) / full.area_um2,
            "sequencers_delta": a.get("sequencers", 0.0) - nb.get("sequencers", 0.0),
            "control_delta": a.get("control", 0.0) - nb.get("control", 0.0),
            "buffer_delta": a.get("buffer logic", 0.0) - nb.get("buffer logic", 0.0),
        })
    return out


def _by_build(results: list[EngineArea]) -> dict[tuple[int, str], EngineArea]:
    return {(r.arrays, r.variant): r for r in results if r.ok}


def _pairs(results: list[EngineArea]) -> list[tuple[EngineArea, EngineArea | None]]:
    """(full, none-or-None) per P, for every "full" build."""
    by = _by_build(results)
    return [(r, by.get((r.arrays, "none"))) for r in results if r.ok and r.variant == "full"]


def _ratio(a, b):
    return None if a is None or not b else a / b


def plain_ratios(results: list[EngineArea]) -> dict[str, dict]:
    """{"P=4 full": {"area", "logic", "fmax", "power"}} of every build over the "plain" build
    at the same P (where there is one)."""
    by = _by_build(results)
    out = {}
    for r in results:
        plain = by.get((r.arrays, "plain"))
        if not r.ok or plain is None or r is plain:
            continue
        out[f"P={r.arrays} {r.variant}"] = {
            "area": _ratio(r.area_um2, plain.area_um2),
            "logic": _ratio(r.logic_area_um2, plain.logic_area_um2),
            "fmax": _ratio(r.fmax_mhz, plain.fmax_mhz),
            "power": _ratio(r.power_mw, plain.power_mw)}
    return out


def _fmt_ratio(v):
    return "-" if v is None else f"{v:.2f}x"


def _fmt(v, spec):
    return "-" if v is None else format(v, spec)


def format_engine_report(results: list[EngineArea]) -> str:
    """The engine builds as text: per build its figures and the block breakdown (logic, then
    the SRAM macros), then the dispatcher's share per P and the ratios to the plain engine."""
    lines = []
    ok = [r for r in results if r.ok]
    width = None
    if ok:
        # The header's chunk width is the reuse builds' (a plain build takes its own).
        cfg = KaleidoConfig.from_dict(next((r for r in ok if r.variant != "plain"),
                                           ok[0]).config)
        width = cfg.sched_pattern_width
        lines.append(f"Engine on the OSU 0.18 um cells (hierarchy kept, memories as SRAM "
                     f"macros): R x C = {cfg.rows} x {cfg.cols}, W = {cfg.sched_pattern_width}, "
                     f"engine_max_tokens {cfg.engine_max_tokens}, engine_max_head_dim "
                     f"{cfg.engine_max_head_dim}, acc_width {cfg.acc_width}")
        lines.append(f"SRAM: {sm.SRAM_UM2_PER_BIT:.2f} um2 per bit and read port (GF180MCU: "
                     f"{sm.BITCELL_UM2} um2 6T cell / {100 * sm.ARRAY_EFFICIENCY:.0f}% array "
                     f"efficiency), clock-to-Q {sm.CLOCK_TO_Q_NS:.2f} ns, setup "
                     f"{sm.SETUP_NS:.2f} ns; blocks + SRAM = yosys' total (checked); power at "
                     f"{1000 / stdcell.CLOCK_PERIOD_NS:g} MHz, activity "
                     f"{stdcell.SWITCHING_ACTIVITY:g}, logic only")
    for r in ok:
        lines.append("")
        top = f" ({r.top})" if r.top == CORE_TOP else ""
        w = r.config.get("sched_pattern_width")
        top += f" (W = {w})" if w != width else ""
        lines.append(f"P = {r.arrays}, {r.variant}{top}: {r.area_um2 / 1e6:.3f} mm2 (logic "
                     f"{r.logic_area_um2 / 1e6:.3f}, SRAM {r.sram_area_um2 / 1e6:.3f}), "
                     f"{r.cells:,} cells, {r.ffs:,} FFs; path {_fmt(r.path_ns, '.2f')} ns "
                     f"({_fmt(r.fmax_mhz, '.1f')} MHz), power {_fmt(r.power_mw, '.1f')} mW "
                     f"({r.seconds:.0f} s, yosys CPU {_fmt(r.yosys_cpu_seconds, '.0f')} s)")
        if r.startpoint:
            lines.append(f"  critical path: {r.startpoint} -> {r.endpoint}")
        for name, v in r.blocks(sram=True).items():
            lines.append(f"  {name:<30} {v['area_um2']:>12,.0f} um2  FFs {v['ffs']:>6,}  "
                         f"({100 * v['area_um2'] / r.area_um2:5.1f}%)")
        if r.arrays > 1:
            per = {k: v["area_um2"] for k, v in r.blocks(per_array=True).items()
                   if k.startswith("array ")}
            lines.append("  per array: " + ", ".join(f"{k} {v:,.0f}" for k, v in per.items()))
        bits = r.memory_bits()
        lines.append("  SRAM bits: " + ", ".join(f"{k} {v:,}" for k, v in bits.items() if v)
                     + f" (total {sum(bits.values()):,})")
    for full, none in _pairs(results):
        d = dispatcher_share(full, none)
        lines.append("")
        lines.append(f"dispatcher share, P = {full.arrays}: its own modules (OrderUnits "
                     f"{d['order_units']:,.0f}, pre-pass codes {d['prepass_codes']:,.0f}, "
                     f"SlotUnits {d['slot_units']:,.0f} um2) = {d['dispatcher_modules_pct']:.1f}% "
                     f"of the engine's logic")
        if d["of_arrays_pct"] is not None:
            lines.append(f"  against the PE arrays it feeds (the paper's measure), with its "
                         f"SRAM (own memories {d['dispatcher_sram']:,.0f}, the pre-pass's read "
                         f"ports on the operand copies {d['prepass_ports']:,.0f} um2): "
                         f"{d['with_sram']:,.0f} um2 = {d['of_arrays_pct']:.1f}% of the PE arrays")
        if none is not None:
            lines.append(f"  + MergedCell overhead over TileCell {d['merged_cell_overhead']:,.0f} "
                         f"({d['merged_cell_overhead_pct_of_arrays']:.1f}% of the TileCell "
                         f"arrays) = {d['modules_with_cells_pct']:.1f}%; whole engine full - "
                         f"none = {d['delta']:,.0f} um2 logic = {d['delta_pct']:.1f}% "
                         f"(sequencers {d['sequencers_delta']:+,.0f}, control "
                         f"{d['control_delta']:+,.0f}, buffer {d['buffer_delta']:+,.0f}), SRAM "
                         f"{d['sram_delta']:+,.0f}; with SRAM {d['total_delta_pct']:.1f}% of "
                         f"the total")
    ratios = plain_ratios(results)
    if ratios:
        lines.append("")
        lines.append("over the plain engine (BaselinePEs, no dispatcher) at the same P:")
        for name, v in ratios.items():
            lines.append(f"  {name}: area {_fmt_ratio(v['area'])} (logic "
                         f"{_fmt_ratio(v['logic'])}), fmax {_fmt_ratio(v['fmax'])}, power "
                         f"{_fmt_ratio(v['power'])}")
    notes = [f"P = {r.arrays} {r.variant}: {n}" for r in results for n in r.notes]
    if notes:
        lines.append("")
        lines.extend(notes)
    return "\n".join(lines)


# -- cache for the report ------------------------------------------------------------------------

def source_hash(top: str | None = None) -> str:
    """SHA-256 (16 hex digits) of the Python sources the KaleidoEngine is built from: the
    modules reachable from ``kaleido_hw/engine/kaleido_engine.py`` by ``kaleido_hw`` or
    ``golden`` imports (:func:`kaleido_hw.flow.sources.sources_hash`; the flow itself is
    versioned by :data:`FLOW`); with ``top`` (:data:`CORE_TOP`) from that top's module."""
    if top is None:
        return sources_hash([REPO / "kaleido_hw" / "engine" / "kaleido_engine.py"])
    from kaleido_hw.flow.generate import TOPS
    from kaleido_hw.flow.sources import module_file
    return sources_hash(module_file(next(t for t in TOPS if t.module == top).python_module))


def _yosys_version() -> str:
    if shutil.which("yosys") is None:
        return "none"
    r = subprocess.run(["yosys", "-V"], capture_output=True, text=True, timeout=60)
    return r.stdout.strip()


def _key(config: KaleidoConfig, top: str | None = None) -> dict:
    """The cache key of the builds of ``config`` (``top``: another top than the engines,
    :func:`synth_engine`'s; an entry without one is the engines')."""
    key = {"config": config.to_dict(), "yosys": _yosys_version(), "flow": FLOW,
           "liberty": str(stdcell.liberty_path()),
           "sram": [sm.SRAM_UM2_PER_BIT, sm.CLOCK_TO_Q_NS, sm.SETUP_NS],
           "sources": source_hash(top)}
    if top is not None:
        key["top"] = top
    return key


def _same_builds(entry_key: dict, key: dict) -> bool:
    """``entry_key`` names the same configuration and top as ``key`` (maybe stale)."""
    return entry_key["config"] == key["config"] and entry_key.get("top") == key.get("top")


def _entries(path: Path) -> list[dict]:
    """The cache's entries ({"key", "builds"}, one per base configuration)."""
    data = json.loads(path.read_text())
    return data["entries"] if "entries" in data else [data]


def save_cache(results: list[EngineArea], base: KaleidoConfig, path: Path = ENGINE_CACHE,
               top: str | None = None) -> None:
    """Write ``results`` (builds of ``base``; ``top`` as for :func:`synth_engine`) with their
    cache key to ``path``, replacing the entry of the same base configuration and top and
    keeping the others (the small builds of :data:`AREA_CONFIG`, the default build and the
    core's builds live side by side)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    key = _key(base, top)
    try:
        entries = [e for e in _entries(path) if not _same_builds(e["key"], key)]
    except (OSError, ValueError, KeyError, TypeError):
        entries = []
    entries.append({"key": key, "builds": [asdict(r) for r in results]})
    path.write_text(json.dumps({"entries": entries}, indent=1) + "\n")


def load_cache(base: KaleidoConfig = AREA_CONFIG, path: Path = ENGINE_CACHE,
               top: str | None = None):
    """The cached builds of ``base`` (``top`` as for :func:`synth_engine`) that ran, or (None,
    reason) when there are none or they are stale (other yosys, library, SRAM model, flow or
    engine sources)."""
    path = Path(path)
    if not path.exists():
        return None, f"no {path} (run 'kaleido-hw synth --engine')"
    try:
        if shutil.which("yosys") is None:
            return None, "yosys not found"
        key = _key(base, top)
        mine = [e for e in _entries(path) if _same_builds(e["key"], key)]
        if not mine:
            return None, f"{path} has no build of this configuration"
        if mine[0]["key"] != key:
            return None, (f"{path} is stale (yosys, library, SRAM model, flow or engine "
                          f"sources changed)")
        results = []
        for b in mine[0]["builds"]:
            b = dict(b)
            mods = [ModuleArea(**m) for m in b.pop("modules")]
            mems = [MemoryBits(**m) for m in b.pop("memories")]
            results.append(EngineArea(**b, modules=mods, memories=mems))
    except (ValueError, KeyError, TypeError) as e:
        return None, f"{path} is unreadable ({e})"
    results = [r for r in results if r.ok]
    if not results:
        return None, f"{path} has no build that ran"
    return results, ""


# -- the report's area section ---------------------------------------------------------------

def report_rows(results: list[EngineArea]) -> list[dict]:
    """One row per (build, block) plus one per build ("whole engine") with SRAM figures."""
    rows = []
    for r in results:
        build = f"engine P={r.arrays} {r.variant}"
        for name, v in r.blocks(sram=True).items():
            rows.append({"top": f"{build}: {name}", "cells": v["cells"], "flipflops": v["ffs"],
                         "area_um2": round(v["area_um2"], 1)})
        rows.append({"top": f"{build}: whole engine", "cells": r.cells, "flipflops": r.ffs,
                     "area_um2": round(r.area_um2, 1), "sram_area_um2": round(r.sram_area_um2, 1),
                     "sram_bits": sum(r.memory_bits().values()), "path_ns": r.path_ns,
                     "fmax_mhz": r.fmax_mhz, "power_mw": r.power_mw})
    return rows


def report_table(results: list[EngineArea]) -> str:
    """Markdown: area per block (um2) and build, the totals in mm2, timing, power, the
    dispatcher share and the ratios to the plain engine."""
    builds = [r for r in results if r.ok]
    names = sorted({n for r in builds for n in r.blocks(sram=True)}, key=_block_key)
    head = ["block (um2)"] + [f"P={r.arrays} {r.variant}" for r in builds]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for n in names:
        lines.append(f"| {n} | " + " | ".join(
            f"{r.blocks(sram=True).get(n, {}).get('area_um2', 0.0):,.0f}" for r in builds) + " |")
    lines.append("| **whole engine (mm2)** | " + " | ".join(
        f"**{r.area_um2 / 1e6:.3f}**" for r in builds) + " |")
    lines.append("| flip-flops | " + " | ".join(f"{r.ffs:,}" for r in builds) + " |")
    lines.append("| critical path (ns) | " + " | ".join(_fmt(r.path_ns, ".2f") for r in builds)
                 + " |")
    lines.append("| power at 100 MHz (mW, logic) | " + " | ".join(
        _fmt(r.power_mw, ".1f") for r in builds) + " |")
    ratios = plain_ratios(results)
    if ratios:
        lines.append("| area / plain engine | " + " | ".join(
            _fmt_ratio(ratios.get(f"P={r.arrays} {r.variant}", {}).get("area"))
            if r.variant != "plain" else "1.00x" for r in builds) + " |")
    shares = []
    for full, none in _pairs(results):
        d = dispatcher_share(full, none)
        s = f"P={full.arrays}: dispatcher modules {d['dispatcher_modules_pct']:.1f}% of the logic"
        if d["of_arrays_pct"] is not None:
            s += (f", with its SRAM and the pre-pass's operand read ports "
                  f"{d['of_arrays_pct']:.1f}% of the PE arrays")
        if none is not None:
            s += (f", with the MergedCell overhead {d['modules_with_cells_pct']:.1f}%, "
                  f"full - none {d['delta_pct']:.1f}% of the full engine's logic")
        shares.append(s)
    return "\n".join(lines) + ("\n\nDispatcher share: " + "; ".join(shares) if shares else "")


def plot_engine_area(results: list[EngineArea], plt):
    """Stacked bars: area per block (SRAM macros on top) for every build."""
    builds = [r for r in results if r.ok]
    names = sorted({n for r in builds for n in r.blocks(sram=True)}, key=_block_key)
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    x = range(len(builds))
    bottom = [0.0] * len(builds)
    for i, n in enumerate(names):
        vals = [r.blocks(sram=True).get(n, {}).get("area_um2", 0.0) / 1e6 for r in builds]
        ax.bar(x, vals, bottom=bottom, label=n, color=plt.cm.tab20(i % 20),
               hatch="//" if n.startswith("SRAM") else None)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(list(x), [f"P={r.arrays}\n{r.variant}" for r in builds])
    ax.set_ylabel("mm2 (OSU 0.18 um cells + SRAM macros)")
    cfg = KaleidoConfig.from_dict(builds[0].config)
    ax.set_title(f"Engine area by block ({cfg.rows}x{cfg.cols} PEs per array)", fontsize=10)
    ax.legend(fontsize=6, loc="upper left")
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    return fig
