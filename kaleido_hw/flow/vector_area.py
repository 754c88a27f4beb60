"""Standard-cell area and critical path of the vector unit (``docs/vector.md``, "Area").

The engine's flow (:mod:`kaleido_hw.flow.engine_area`), hierarchical, not ``make synth``'s
flat one (which maps memories as SRAM macros too, but whose flattened netlist keeps a
combinational net of 4.6 pF unbuffered: a 10.6 ns path against 9.5 ns here): yosys maps every module of the unit on its own onto the OSU 0.18
um cells with the memories kept (:func:`kaleido_hw.flow.stdcell.map_script`), every memory
becomes a black-box SRAM macro priced and timed by :mod:`kaleido_hw.flow.sram_macros`, buffer trees go on register and macro outputs, and
OpenSTA times the netlist (10 ns clock, ports 0 ns from the edge). The two small FIFOs (P
out, row totals) are mapped to flip-flops, as an SRAM macro would be absurd for them.

``make synth-vector`` (``python -m kaleido_hw.flow.vector_area [--json FILE]``) measures the
default configuration; ``--top block_softmax`` and ``--top block_output`` measure the units
of long heads (``docs/vector.md``, "Long heads"), whose row-state and accumulator memories
become SRAM macros too.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

from kaleido_hw.config import KaleidoConfig
from kaleido_hw.flow import sram_macros as sm
from kaleido_hw.flow import stdcell
from kaleido_hw.flow.sram_macros import join_macro_clocks, macro_script, parse_memories


__all__ = ["TOP", "TOPS_MEASURED", "REGISTER_MEMORIES", "synth_vector_unit"]

TOP = "vector_unit"
#: The vector unit's tops this flow measures.
TOPS_MEASURED = ("vector_unit", "block_softmax", "block_output")
#: Memories mapped to flip-flops (yosys name patterns): the output FIFOs and the row-total
#: FIFO, a few entries each.
REGISTER_MEMORIES = "*p_fifo* *totals* *out_fifo*"


def synth_vector_unit(config: KaleidoConfig, *, keep: Path | None = None,
                      timeout: int = 7200, mapped: bool = False, top_name: str = TOP) -> dict:
    """Area (logic, SRAM, total, um2), flip-flops, critical path (ns) with its ends, and
    the memories of the vector unit's top ``top_name`` (:data:`TOPS_MEASURED`) built from
    ``config``.

    ``mapped``: ``keep`` already holds this configuration's mapping (``mapped.il``,
    ``mems.txt``): only the macro, buffering and timing steps run again.
    """
    from kaleido_hw.flow.generate import TOPS, build_top, emit_verilog

    if top_name not in TOPS_MEASURED:
        raise ValueError(f"top must be one of {', '.join(TOPS_MEASURED)}, got {top_name!r}")
    why = stdcell.stdcell_available()
    if why:
        return {"notes": [f"skipped: {why}"]}
    t0 = time.monotonic()
    top = next(t for t in TOPS if t.module == top_name)
    lib = stdcell.liberty_path()
    cells, sequential = stdcell.liberty_cells(lib.read_text())
    result: dict = {"top": top_name, "config": {k: v for k, v in config.to_dict().items()
                                           if k.startswith("vector_")}, "notes": []}
    with tempfile.TemporaryDirectory(prefix="kaleido-vector-area-") as tmp:
        work = Path(keep) if keep is not None else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        try:
            if not mapped:
                verilog = emit_verilog(build_top(top, config), top_name)
                (work / f"{top_name}.v").write_text(verilog)
                stdcell.run_yosys(stdcell.map_script(top_name, f"{top_name}.v", str(lib),
                                                     register_memories=REGISTER_MEMORIES),
                                  work, timeout=timeout)
            memories = parse_memories((work / "mems.txt").read_text(), top_name)
            macro_lib = work / "sram_macros.lib"
            macro_lib.write_text(sm.macro_liberty(m.shape for m in memories))
            stdcell.run_yosys(macro_script(memories, top_name, str(lib), macro_lib.name), work,
                              timeout=timeout)
            macro_cells, _ = stdcell.liberty_cells(macro_lib.read_text())
            stdcell.buffered(work, lib.read_text() + macro_lib.read_text(),
                             sequential | macro_cells, json_in="macros.json",
                             macros=macro_cells)
            netlist = work / f"{top_name}.net.v"
            stdcell.run_yosys(stdcell.finish_script(top_name, "buffered.json",
                                                    [str(lib), macro_lib.name],
                                                    netlist_file=netlist.name),
                              work, timeout=timeout)
            netlist.write_text(join_macro_clocks(netlist.read_text()))
            stat = (work / "stat.txt").read_text()
            stats = stdcell.parse_stat(stat)
            _, total = stdcell.parse_hierarchy(stat)
            if total is None:
                total = stats[top_name].area_um2 or 0.0
            if any(t.startswith("$") for s in stats.values() for t in s.types):
                raise ValueError("cells without a library area are left in the netlist")
            sram = sum(sm.macro_area_um2(m.shape) for m in memories)
            result.update({
                "area_um2": round(total, 1), "sram_um2": round(sram, 1),
                "logic_um2": round(total - sram, 1),
                "ffs": sum(sum(k for t, k in s.types.items() if t in sequential)
                           for s in stats.values()),
                "memories": [{"name": m.name, "width": m.shape.width, "words": m.shape.words,
                              "read_ports": m.shape.read_ports} for m in memories],
            })
            index = stdcell.NetlistIndex(netlist.read_text(), cells, sequential)
            timing = stdcell.time_netlist(top_name, netlist, [lib, macro_lib], work,
                                          index=index, timeout=timeout)
            result["notes"] += timing.pop("notes")
            result.update(timing)
        except subprocess.TimeoutExpired:
            result["notes"].append(f"failed: a tool took more than {timeout} s")
        except (RuntimeError, ValueError) as e:
            result["notes"].append(f"failed: {e}")
    result["seconds"] = round(time.monotonic() - t0, 1)
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument("--top", default=TOP, choices=TOPS_MEASURED,
                        help=f"the top to measure (default: {TOP})")
    parser.add_argument("--keep", metavar="DIR", help="keep the work folder")
    parser.add_argument("--mapped", action="store_true",
                        help="--keep DIR already holds the mapping: redo the later steps only")
    args = parser.parse_args(argv)
    if args.mapped and not args.keep:
        raise SystemExit("--mapped needs --keep DIR (the folder of an earlier run)")
    result = synth_vector_unit(KaleidoConfig(), keep=Path(args.keep) if args.keep else None,
                               mapped=args.mapped, top_name=args.top)
    text = json.dumps(result, indent=2, default=str)
    print(text)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
