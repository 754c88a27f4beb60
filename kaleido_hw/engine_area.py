"""Area of the whole KaleidoEngine (``kaleido-hw synth --engine``; ``docs/engine.md``,
"Area of the engine").

Flow, per build (P arrays, ``engine_dispatcher`` "none" or "full", at :data:`AREA_CONFIG`):

1. Generate the engine's Verilog and drop the memories' ``initial`` blocks (all-zero words;
   an SRAM has no reset contents, and Debian yosys 0.23 parses 10^5 init assignments
   slowly).
2. Debian ``yosys``: ``synth -run begin:fine`` (hierarchy kept), then the rest of ``synth``
   *without* ``memory_map`` (except for the sequencers' 2-entry SlotUnit-block FIFOs, which
   are flip-flops): ``opt -fast -full; techmap; opt -fast; abc -fast; opt -fast``.
   Memories stay ``$mem_v2`` cells: ``stat -tech cmos`` does not price them, so the
   transistor figures are logic + flip-flops only (:data:`~kaleido_hw.synth.FF_TRANSISTORS`
   per flip-flop, as ``kaleido-hw synth``), and the memories are reported apart as SRAM bits.
3. ``stat -tech cmos`` per module (every Amaranth submodule is its own Verilog module, each
   instantiated once) and the yosys ``design hierarchy`` total; ``dump t:$mem_v2`` for the
   memories (width x words).

Each module is attributed to a block by its hierarchical name (:func:`block_of`); the sum of
the blocks must equal the yosys total (checked, :data:`SUM_TOLERANCE`). With a "none" and a
"full" build at the same P, the dispatcher's cost is given two ways: the modules that exist
only for it (OrderUnits with their ClusterSchedulers, the pre-pass code units, the SlotUnits
with their MergeMatchers) plus the MergedCell arrays' overhead over the TileCell arrays
(array area full minus none), and the whole-engine difference full minus none (which adds
the glue in the sequencers, the controller and the buffer's read-out).

Results are cached in :data:`ENGINE_CACHE` (keyed by configuration, yosys version and a hash
of the engine's Python sources) so that ``kaleido-hw report --only area`` can show them
without re-synthesizing.
"""

from __future__ import annotations

import hashlib
import json
import re
import resource
import shutil
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .config import KaleidoConfig
from .engine_layouts import KaleidoGeometry
from .synth import FF_TRANSISTORS, parse_stat


__all__ = ["AREA_CONFIG", "ENGINE_BUILDS", "ENGINE_CACHE", "MEMORY_KINDS", "BLOCKS",
           "SUM_TOLERANCE", "EngineArea", "strip_memory_inits", "parse_memories",
           "parse_hierarchy_total", "block_of", "memory_kind", "expected_memory_bits",
           "synth_engine", "dispatcher_share", "format_engine_report", "source_hash",
           "save_cache", "load_cache"]

#: The configuration the engine area is measured at: the defaults (R = C = 4, W = 16,
#: E = 64, acc_width 24, hunyuanvideo) with engine_max_tokens 16 and engine_max_head_dim 32
#: instead of 64 and 128. Memory depth (tokens) changes only address widths in the logic;
#: head_dim sizes the channel masks, the CodeUnits (per array and for the pre-pass) and the
#: configuration check, so the control and sequencer figures grow with it (the PE arrays,
#: SlotUnits and OrderUnits do not). The default build takes well over half an hour of
#: yosys on two shared cores (its sequencer alone is 0.9 MB of Verilog).
AREA_CONFIG = KaleidoConfig(engine_max_tokens=16, engine_max_head_dim=32)
#: (arrays, engine_dispatcher) of the builds ``kaleido-hw synth --engine`` runs by default.
ENGINE_BUILDS = ((1, "none"), (1, "full"), (4, "none"), (4, "full"))
#: Where ``kaleido-hw synth --engine`` keeps its results for the report (relative to the
#: working directory, like ``make``'s other outputs).
ENGINE_CACHE = Path("build") / "engine_area.json"
#: Largest allowed |sum of the blocks - yosys total| / total (only rounding-free sums of
#: integers are compared, so anything but 0 means a module was missed or counted twice).
SUM_TOLERANCE = 0.0

#: Memory kinds, in report order.
MEMORY_KINDS = ("operands", "order memories", "scheduler batches", "accumulation planes")
#: Blocks of the breakdown, in report order ("array k" and "sequencer k" per array).
BLOCKS = ("PE arrays", "sequencers", "dispatcher: OrderUnits", "dispatcher: pre-pass codes",
          "dispatcher: SlotUnits", "control", "buffer logic")

_YOSYS_SCRIPT = (
    "read_verilog {vfile}; "
    "synth -top {top} -run begin:fine; "
    # The sequencers' 2-entry SlotUnit-block FIFOs are flip-flops, not SRAM: map them here.
    "memory_map *blk_fifo*; "
    "opt -fast -full; techmap; opt -fast; abc -fast; opt -fast; "
    "tee -q -o stat.txt stat -tech cmos; "
    "tee -q -o mems.txt dump t:$mem_v2")


@dataclass
class ModuleArea:
    """Logic of one module (its own cells, not its submodules')."""
    path: str            # hierarchical name below the top ("" for the top's own logic)
    block: str           # :func:`block_of`
    cells: int           # gate and flip-flop cells (no memories, no submodule instances)
    ffs: int
    transistors: int     # logic + FF_TRANSISTORS per flip-flop


@dataclass
class MemoryBits:
    """One memory that yosys kept as a memory."""
    path: str            # module below the top ("" for the top)
    name: str
    kind: str            # :func:`memory_kind`
    width: int
    words: int

    @property
    def bits(self) -> int:
        """Capacity in bits."""
        return self.width * self.words


def _block_key(name: str):
    """Sort key of a block name: :data:`BLOCKS` order, per-array rows by array."""
    base = re.sub(r" \d+$", "", name)
    base = {"array": "PE arrays", "sequencer": "sequencers"}.get(base, base)
    num = re.search(r"(\d+)$", name)
    return (BLOCKS.index(base) if base in BLOCKS else len(BLOCKS),
            int(num.group(1)) if num else -1, name)


@dataclass
class EngineArea:
    """Figures of one engine build (see the module docstring)."""
    arrays: int
    dispatcher: str
    config: dict
    modules: list[ModuleArea] = field(default_factory=list)
    memories: list[MemoryBits] = field(default_factory=list)
    total_cells: int | None = None        # yosys "design hierarchy" figures
    total_transistors: int | None = None  # logic only, as stat prints it
    seconds: float = 0.0                  # wall clock: generation + yosys
    yosys_cpu_seconds: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the synthesis ran and gave figures."""
        return bool(self.modules)

    @property
    def transistors(self) -> int:
        """Logic + flip-flop transistors of the whole engine (sum over its modules)."""
        return sum(m.transistors for m in self.modules)

    @property
    def ffs(self) -> int:
        """Flip-flops of the whole engine."""
        return sum(m.ffs for m in self.modules)

    @property
    def cells(self) -> int:
        """Gate and flip-flop cells of the whole engine."""
        return sum(m.cells for m in self.modules)

    def blocks(self, per_array: bool = False) -> dict[str, dict]:
        """{block: {"cells", "ffs", "transistors"}} in :data:`BLOCKS` order; with
        ``per_array`` the arrays and sequencers get one row each ("array 0", ...)."""
        out: dict[str, dict] = {}
        for m in self.modules:
            name = m.block
            if not per_array:
                name = re.sub(r"^array \d+$", "PE arrays", name)
                name = re.sub(r"^sequencer \d+$", "sequencers", name)
            row = out.setdefault(name, {"cells": 0, "ffs": 0, "transistors": 0})
            row["cells"] += m.cells
            row["ffs"] += m.ffs
            row["transistors"] += m.transistors
        return {k: out[k] for k in sorted(out, key=_block_key)}

    def memory_bits(self) -> dict[str, int]:
        """SRAM bits per kind (:data:`MEMORY_KINDS` order), as yosys kept them."""
        out = {k: 0 for k in MEMORY_KINDS}
        for mem in self.memories:
            out[mem.kind] = out.get(mem.kind, 0) + mem.bits
        return out


# -- text processing -------------------------------------------------------------------------

_INIT_BLOCK = re.compile(r"^[ \t]*initial begin\n(?:[ \t]*[^\s\[]+\[\d+\] = [^;\n]+;\n)+[ \t]*end\n",
                         re.M)


def strip_memory_inits(verilog: str) -> str:
    """``verilog`` without the memories' ``initial`` blocks (``mem[i] = value;`` lines only)."""
    return _INIT_BLOCK.sub("", verilog)


def parse_memories(dump: str, top: str) -> list[tuple[str, str, int, int]]:
    """``dump t:$mem_v2`` output -> [(module below ``top``, memory name, width, words)]."""
    out = []
    module = None
    cell = None
    params: dict[str, int] = {}

    def flush():
        if cell is not None:
            if "WIDTH" not in params or "SIZE" not in params:
                raise ValueError(f"memory {cell} in {module}: no WIDTH/SIZE in the yosys dump")
            out.append((module, cell, params["WIDTH"], params["SIZE"]))

    for line in dump.splitlines():
        s = line.strip()
        if s.startswith("module "):
            flush()
            cell, params = None, {}
            name = s.split(None, 1)[1].lstrip("\\")
            module = "" if name == top else name[len(top) + 1:] if name.startswith(top + ".") \
                else name
        elif s.startswith("cell $mem_v2 ") or s.startswith("cell $mem "):
            flush()
            cell, params = s.split()[2].lstrip("\\"), {}
        elif s.startswith("parameter \\") and cell is not None:
            parts = s.split()
            if parts[1] in ("\\WIDTH", "\\SIZE") and re.fullmatch(r"-?\d+", parts[2]):
                params[parts[1][1:]] = int(parts[2])
        elif s == "end":
            flush()
            cell, params = None, {}
    flush()
    return out


def parse_hierarchy_total(stat: str) -> tuple[int, int]:
    """(cells, logic transistors) of the ``=== design hierarchy ===`` block of ``stat``."""
    _, sep, tail = stat.partition("=== design hierarchy ===")
    if not sep:
        raise ValueError("no 'design hierarchy' block in the yosys stat output")
    cells = re.search(r"Number of cells:\s+(\d+)", tail)
    tr = re.search(r"Estimated number of transistors:\s+(\d+)", tail)
    if cells is None or tr is None:
        raise ValueError("the yosys 'design hierarchy' block has no cell or transistor count")
    return int(cells.group(1)), int(tr.group(1))


def block_of(path: str) -> str:
    """The breakdown block of the module at ``path`` (below the top; "" is the top):

    * ``arrayK...`` -> "array K" (PEs, their decoders, forwarding and drain registers);
    * ``seqK.slots...`` -> "dispatcher: SlotUnits"; other ``seqK...`` -> "sequencer K";
    * ``q_order...``, ``k_order...`` -> "dispatcher: OrderUnits" (with their schedulers);
    * ``q_pre_codes``, ``k_pre_codes`` -> "dispatcher: pre-pass codes";
    * ``acc...`` -> "buffer logic"; the top itself -> "control" (configuration check,
      chunk controller and barrier, pre-pass control, counters, host interface).
    """
    parts = path.split(".") if path else []
    if not parts:
        return "control"
    head = parts[0]
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


def memory_kind(path: str, name: str) -> str:
    """The SRAM kind of memory ``name`` in the module at ``path`` (see :data:`MEMORY_KINDS`)."""
    if path == "" and re.fullmatch(r"[qk]_mem\d+", name):
        return "operands"
    if path in ("q_order", "k_order") and name in ("order", "inverse"):
        return "order memories"
    if path in ("q_order.sched", "k_order.sched") and name in ("queue", "banks"):
        return "scheduler batches"
    if path == "acc" and re.fullmatch(r"plane\d+_bank\d+", name):
        return "accumulation planes"
    raise ValueError(f"memory {name!r} in module {path!r} is of no known kind")


def expected_memory_bits(config: KaleidoConfig) -> dict[str, int]:
    """SRAM bits per kind that ``config`` implies (``docs/engine.md``, "RTL"):

    * operands: a Q and a K copy per array, ``N_max`` words of ``8 * D_max`` bits;
    * accumulation planes: ``planes`` x ``P*C`` banks of ``bank_depth`` x ``acc_width``;
    * with the scheduler, per side an OrderUnit: its order (2 banks of ``2**uw`` words of
      ``uw`` bits, ``uw`` = bits of a unit) and a ClusterScheduler with a queue (E entries)
      and an output memory (2E entries) of ``uw + 1 + W`` bits; the K side's inverse order
      (``max(2, planes)`` banks of ``2**uw`` x ``uw``) feeds the buffer's read-out. The Q
      side's inverse is never read, and yosys removes it.
    """
    geo = KaleidoGeometry.from_config(config)
    t = geo.tile
    P = geo.arrays
    out = {k: 0 for k in MEMORY_KINDS}
    out["operands"] = 2 * P * t.max_tokens * 8 * t.max_dim
    out["accumulation planes"] = geo.planes * geo.banks * geo.bank_depth * t.acc_width
    if config.engine_dispatcher in ("scheduler", "full"):
        uw = max(1, (config.engine_max_tokens - 1).bit_length())
        depth = 1 << uw
        out["order memories"] = 2 * (2 * depth * uw) + max(2, geo.planes) * depth * uw
        entry = uw + 1 + config.sched_pattern_width
        out["scheduler batches"] = 2 * (3 * config.sched_entries * entry)
    return out


# -- running ---------------------------------------------------------------------------------

def engine_config(base: KaleidoConfig, arrays: int, dispatcher: str) -> KaleidoConfig:
    """``base`` with ``engine_arrays`` and ``engine_dispatcher`` set (validated)."""
    return base.replace(engine_arrays=arrays, engine_dispatcher=dispatcher)


def _yosys_version() -> str:
    if shutil.which("yosys") is None:
        return "none"
    r = subprocess.run(["yosys", "-V"], capture_output=True, text=True, timeout=60)
    return r.stdout.strip()


def synth_engine(config: KaleidoConfig, *, timeout: int = 7200, keep: Path | None = None,
                 log=None) -> EngineArea:
    """Synthesize the KaleidoEngine built from ``config`` (see the module docstring).

    ``keep``: a folder that receives the Verilog, the yosys stat and memory dump;
    ``log``: a callable taking progress lines. A missing yosys or a failed run gives a
    result without modules and a note.
    """
    from .generate import emit_verilog
    from .kaleido_engine import KaleidoEngine

    top = "kaleido_engine"
    res = EngineArea(config.engine_arrays, config.engine_dispatcher, config.to_dict())
    if shutil.which("yosys") is None:
        res.notes.append("skipped: yosys not found ('sudo apt-get install yosys')")
        return res
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kaleido-engine-area-") as tmp:
        work = Path(keep) if keep is not None else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        vfile = work / f"{top}.v"
        vfile.write_text(strip_memory_inits(emit_verilog(KaleidoEngine(config), top)))
        if log:
            log(f"  Verilog written ({vfile.stat().st_size // 1000} kB, "
                f"{time.monotonic() - t0:.0f} s); yosys ...")
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            r = subprocess.run(["yosys", "-q", "-p", _YOSYS_SCRIPT.format(vfile=vfile.name,
                                                                          top=top)],
                               cwd=work, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            res.notes.append(f"failed: yosys took more than {timeout} s")
            return res
        if r.returncode != 0:
            res.notes.append(f"failed: yosys: {(r.stderr or r.stdout).strip()[-400:]}")
            return res
        cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        res.yosys_cpu_seconds = round(cpu1.ru_utime + cpu1.ru_stime
                                      - cpu0.ru_utime - cpu0.ru_stime, 1)
        stat = (work / "stat.txt").read_text()
        dump = (work / "mems.txt").read_text()
    res.seconds = round(time.monotonic() - t0, 1)
    _fill(res, stat, dump, top)
    return res


def _fill(res: EngineArea, stat: str, dump: str, top: str) -> None:
    """Fill ``res`` from the yosys outputs; raises ValueError on a mismatch of the sums."""
    for name, s in parse_stat(stat).items():
        path = "" if name == top else name[len(top) + 1:]
        types = s["types"]
        cells = sum(n for t, n in types.items() if not t.startswith("$mem"))
        res.modules.append(ModuleArea(path, block_of(path), cells, s["ffs"],
                                      s["logic_transistors"] + FF_TRANSISTORS * s["ffs"]))
    res.memories = [MemoryBits(p, n, memory_kind(p, n), w, d)
                    for p, n, w, d in parse_memories(dump, top)]
    res.total_cells, res.total_transistors = parse_hierarchy_total(stat)
    logic = res.transistors - FF_TRANSISTORS * res.ffs
    # yosys' total counts the memories as cells (and submodule instances not).
    cells = res.cells + len(res.memories)
    for what, got, want in (("logic transistors", logic, res.total_transistors),
                            ("cells", cells, res.total_cells)):
        if abs(got - want) > SUM_TOLERANCE * want:
            raise ValueError(f"engine area: the modules' {what} sum to {got}, "
                             f"yosys' total is {want}")


# -- combining builds ----------------------------------------------------------------------------

def dispatcher_share(full: EngineArea, none: EngineArea | None = None) -> dict:
    """The dispatcher's cost in a "full" build (transistors, logic + flip-flops).

    ``modules``: OrderUnits + pre-pass code units + SlotUnits, plus (with ``none``, the
    "none" build at the same P) the MergedCell arrays' overhead over the TileCell arrays.
    ``delta``: whole engine full minus none. Shares are of the full build's total.
    """
    b = full.blocks()
    tr = {k: v["transistors"] for k, v in b.items()}
    own = sum(v for k, v in tr.items() if k.startswith("dispatcher:"))
    out = {"total": full.transistors, "dispatcher_modules": own,
           "order_units": tr.get("dispatcher: OrderUnits", 0),
           "prepass_codes": tr.get("dispatcher: pre-pass codes", 0),
           "slot_units": tr.get("dispatcher: SlotUnits", 0)}
    if none is not None:
        nb = {k: v["transistors"] for k, v in none.blocks().items()}
        overhead = tr.get("PE arrays", 0) - nb.get("PE arrays", 0)
        out.update({
            "merged_cell_overhead": overhead,
            "merged_cell_overhead_pct_of_arrays": 100 * overhead / nb["PE arrays"],
            "modules_with_cells": own + overhead,
            "modules_with_cells_pct": 100 * (own + overhead) / full.transistors,
            "delta": full.transistors - none.transistors,
            "delta_pct": 100 * (full.transistors - none.transistors) / full.transistors,
            "sequencers_delta": tr.get("sequencers", 0) - nb.get("sequencers", 0),
            "control_delta": tr.get("control", 0) - nb.get("control", 0),
            "buffer_delta": tr.get("buffer logic", 0) - nb.get("buffer logic", 0),
        })
    out["dispatcher_modules_pct"] = 100 * own / full.transistors
    return out


def _pairs(results: list[EngineArea]) -> list[tuple[EngineArea, EngineArea | None]]:
    """(full, none-or-None) per P, for every "full" build."""
    by = {(r.arrays, r.dispatcher): r for r in results if r.ok}
    return [(r, by.get((r.arrays, "none"))) for r in results
            if r.ok and r.dispatcher == "full"]


def _fmt_s(v):
    return "-" if v is None else f"{v:.0f} s"


def format_engine_report(results: list[EngineArea]) -> str:
    """The engine builds as text: per build the block breakdown and the SRAM bits, then the
    dispatcher's share per P."""
    lines = []
    ok = [r for r in results if r.ok]
    if ok:
        cfg = KaleidoConfig.from_dict(ok[0].config)
        lines.append(f"KaleidoEngine area (yosys generic gates, hierarchy kept, memories kept as "
                     f"memories): R x C = {cfg.rows} x {cfg.cols}, W = {cfg.sched_pattern_width}, "
                     f"engine_max_tokens {cfg.engine_max_tokens}, engine_max_head_dim "
                     f"{cfg.engine_max_head_dim}, acc_width {cfg.acc_width}")
        lines.append(f"transistors = 'stat -tech cmos' logic + {FF_TRANSISTORS} per flip-flop "
                     "(memories excluded); the blocks sum to yosys' total exactly")
    for r in ok:
        lines.append("")
        lines.append(f"P = {r.arrays}, engine_dispatcher = {r.dispatcher!r}: "
                     f"{r.transistors:,} transistors, {r.cells:,} cells, {r.ffs:,} FFs "
                     f"({r.seconds:.0f} s, yosys CPU {_fmt_s(r.yosys_cpu_seconds)})")
        for name, v in r.blocks().items():
            lines.append(f"  {name:<28} cells {v['cells']:>7,}  FFs {v['ffs']:>6,}  "
                         f"transistors {v['transistors']:>9,}  "
                         f"({100 * v['transistors'] / r.transistors:5.1f}%)")
        if r.arrays > 1:
            per = {k: v["transistors"] for k, v in r.blocks(per_array=True).items()
                   if k.startswith("array ")}
            lines.append(f"  per array: " + ", ".join(f"{k} {v:,}" for k, v in per.items()))
        bits = r.memory_bits()
        lines.append("  SRAM bits: " + ", ".join(f"{k} {v:,}" for k, v in bits.items() if v)
                     + f" (total {sum(bits.values()):,})")
    for full, none in _pairs(results):
        d = dispatcher_share(full, none)
        lines.append("")
        lines.append(f"dispatcher share, P = {full.arrays}: its own modules (OrderUnits "
                     f"{d['order_units']:,}, pre-pass codes {d['prepass_codes']:,}, SlotUnits "
                     f"{d['slot_units']:,}) = {d['dispatcher_modules_pct']:.1f}% of the engine")
        if none is not None:
            lines.append(f"  + MergedCell overhead over TileCell {d['merged_cell_overhead']:,} "
                         f"({d['merged_cell_overhead_pct_of_arrays']:.1f}% of the TileCell "
                         f"arrays) = {d['modules_with_cells_pct']:.1f}%; whole engine full - "
                         f"none = {d['delta']:,} = {d['delta_pct']:.1f}% (sequencers "
                         f"{d['sequencers_delta']:+,}, control {d['control_delta']:+,}, buffer "
                         f"{d['buffer_delta']:+,})")
    notes = [f"P = {r.arrays} {r.dispatcher}: {n}" for r in results for n in r.notes]
    if notes:
        lines.append("")
        lines.extend(notes)
    return "\n".join(lines)


# -- cache for the report ------------------------------------------------------------------------

def source_hash() -> str:
    """SHA-256 (16 hex digits) of the Python sources the KaleidoEngine is built from: the
    modules reachable from ``kaleido_hw/kaleido_engine.py`` by relative or ``golden``
    imports."""
    root = Path(__file__).resolve().parent
    repo = root.parent
    todo, seen = [root / "kaleido_engine.py"], set()
    while todo:
        f = todo.pop()
        if f in seen or not f.exists():
            continue
        seen.add(f)
        text = f.read_text()
        base = f.parent
        for mod in re.findall(r"^from \.(\w+) import", text, re.M):
            todo.append(base / f"{mod}.py")
        for mod in re.findall(r"^from golden\.(\w+) import", text, re.M):
            todo.append(repo / "golden" / f"{mod}.py")
    h = hashlib.sha256()
    for f in sorted(seen):
        h.update(f.relative_to(repo).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def _key(config: KaleidoConfig) -> dict:
    return {"config": config.to_dict(), "yosys": _yosys_version(), "sources": source_hash()}


def save_cache(results: list[EngineArea], base: KaleidoConfig, path: Path = ENGINE_CACHE) -> None:
    """Write ``results`` (builds of ``base``) with their cache key to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"key": _key(base), "builds": [asdict(r) for r in results]},
                               indent=1) + "\n")


def load_cache(base: KaleidoConfig = AREA_CONFIG, path: Path = ENGINE_CACHE):
    """The cached builds of ``base``, or (None, reason) when there are none or they are
    stale (other configuration, yosys or engine sources)."""
    path = Path(path)
    if not path.exists():
        return None, f"no {path} (run 'kaleido-hw synth --engine')"
    try:
        data = json.loads(path.read_text())
        if shutil.which("yosys") is None:
            return None, "yosys not found"
        if data["key"] != _key(base):
            return None, f"{path} is stale (configuration, yosys or engine sources changed)"
        results = []
        for b in data["builds"]:
            mods = [ModuleArea(**m) for m in b.pop("modules")]
            mems = [MemoryBits(**m) for m in b.pop("memories")]
            results.append(EngineArea(**b, modules=mods, memories=mems))
    except (ValueError, KeyError, TypeError) as e:
        return None, f"{path} is unreadable ({e})"
    return results, ""


# -- the report's area section ---------------------------------------------------------------

def report_rows(results: list[EngineArea]) -> list[dict]:
    """One row per (build, block) plus one per build ("whole engine") with SRAM bits."""
    rows = []
    for r in results:
        build = f"engine P={r.arrays} {r.dispatcher}"
        for name, v in r.blocks().items():
            rows.append({"top": f"{build}: {name}", "cells": v["cells"], "flipflops": v["ffs"],
                         "transistors": v["transistors"]})
        rows.append({"top": f"{build}: whole engine", "cells": r.cells, "flipflops": r.ffs,
                     "transistors": r.transistors, "sram_bits": sum(r.memory_bits().values())})
    return rows


def report_table(results: list[EngineArea]) -> str:
    """Markdown: transistors per block and build, the SRAM bits and the dispatcher share."""
    builds = [r for r in results if r.ok]
    names = sorted({n for r in builds for n in r.blocks()}, key=_block_key)
    head = ["block"] + [f"P={r.arrays} {r.dispatcher}" for r in builds]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for n in names:
        lines.append(f"| {n} | " + " | ".join(
            f"{r.blocks().get(n, {}).get('transistors', 0):,}" for r in builds) + " |")
    lines.append("| **whole engine (logic + FFs)** | " + " | ".join(
        f"**{r.transistors:,}**" for r in builds) + " |")
    for k in MEMORY_KINDS:
        lines.append(f"| SRAM bits: {k} | " + " | ".join(
            f"{r.memory_bits().get(k, 0):,}" for r in builds) + " |")
    shares = []
    for full, none in _pairs(results):
        d = dispatcher_share(full, none)
        s = (f"P={full.arrays}: dispatcher modules {d['dispatcher_modules_pct']:.1f}%")
        if none is not None:
            s += (f", with the MergedCell overhead {d['modules_with_cells_pct']:.1f}%, "
                  f"full - none {d['delta_pct']:.1f}% of the full engine")
        shares.append(s)
    return "\n".join(lines) + ("\n\nDispatcher share: " + "; ".join(shares) if shares else "")


def plot_engine_area(results: list[EngineArea], plt):
    """Stacked bars: transistors per block for every build."""
    builds = [r for r in results if r.ok]
    names = sorted({n for r in builds for n in r.blocks()}, key=_block_key)
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    x = range(len(builds))
    bottom = [0] * len(builds)
    for n in names:
        vals = [r.blocks().get(n, {}).get("transistors", 0) / 1e3 for r in builds]
        ax.bar(x, vals, bottom=bottom, label=n)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(list(x), [f"P={r.arrays}\n{r.dispatcher}" for r in builds])
    ax.set_ylabel("thousand transistors (logic + FFs)")
    cfg = KaleidoConfig.from_dict(builds[0].config)
    ax.set_title(f"KaleidoEngine area by block ({cfg.rows}x{cfg.cols} PEs per array, memories "
                 f"excluded)", fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    return fig
