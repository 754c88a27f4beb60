"""``kaleido-hw synth``: area and timing estimates of generated tops (``make synth``).

For each top (default :data:`SYNTH_TOPS`), from a fresh generation with the given
configuration:

* Generic gates, Debian ``yosys``: ``synth -flatten -top X; stat -tech cmos; ltp -noff``. Reported:
  cells, flip-flops, a transistor estimate and the longest topological path in cells.
  ``stat -tech cmos`` prices logic gates but not flip-flops (it prints ``N+``), so the
  estimate adds :data:`FF_TRANSISTORS` per flip-flop (Yosys' own ``$_DFF_P_`` price, 16,
  plus an ``$_ANDNOT_``, 6, for the synchronous reset).
* Per-unit breakdown: the same without ``-flatten``, one row per submodule (the PE's
  multipliers, gate decoder and accumulator bank; the top module's own row holds, for the
  PEs, the forwarding registers and the split decode).
* iCE40: ``synth_ice40`` LUT4 / flip-flop / carry counts of the bare top, and the
  ``nextpnr-ice40`` fmax (median over placement seeds) of the top wrapped in a shift-register ring (:class:`IORing`) so
  that its hundreds of ports fit the device's pins: four pins plus the clock.

A missing tool gives a ``skipped`` row with the reason, and the command still exits 0.
``--engine`` runs :mod:`kaleido_hw.engine_area` instead (the whole KaleidoEngine's area
breakdown; ``make synth-engine``).
:data:`RATIOS` lists the pairs whose ratios are printed (``ReusePE / BaselinePE``).
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .config import KaleidoConfig
from .generate import TOPS, build_top, emit_verilog


__all__ = ["SYNTH_TOPS", "RATIOS", "FF_TRANSISTORS", "SynthResult", "IORing", "synth_top",
           "parse_stat", "parse_ltp", "parse_ice40_stat", "format_report"]

#: Tops that ``kaleido-hw synth`` reports by default (add a block's top here).
SYNTH_TOPS = ["kaleido_pe", "baseline_pe", "cluster_scheduler", "merge_matcher"]
#: (numerator, denominator) pairs whose ratios are printed.
RATIOS = [("kaleido_pe", "baseline_pe")]
#: Transistors counted per flip-flop (see the module docstring).
FF_TRANSISTORS = 16 + 6
DEVICES = {"up5k": ("--up5k", "sg48"), "hx8k": ("--hx8k", "ct256")}


@dataclass
class UnitArea:
    """Area of one submodule of a top (from ``synth`` without ``-flatten``)."""
    module: str
    cells: int
    ffs: int
    transistors: int


@dataclass
class SynthResult:
    """Figures of one top; ``None`` where a tool was missing or failed (see ``notes``)."""
    top: str
    cells: int | None = None
    ffs: int | None = None
    transistors: int | None = None
    longest_path: int | None = None
    units: list[UnitArea] = field(default_factory=list)
    ice40_luts: int | None = None
    ice40_ffs: int | None = None
    ice40_carries: int | None = None
    fmax_mhz: float | None = None
    fmax_runs: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# -- parsers of the tools' text output --------------------------------------------------------

def parse_stat(text: str) -> dict[str, dict]:
    """``stat -tech cmos`` output -> {module: {"cells", "ffs", "logic_transistors", "types"}}.

    Only the per-module blocks (``=== name ===``) are read; the hierarchy summary is not.
    """
    modules = {}
    blocks = re.split(r"^=== (.+?) ===\s*$", text, flags=re.M)
    for name, body in zip(blocks[1::2], blocks[2::2]):
        if name.strip() == "design hierarchy":   # the summary over all modules
            continue
        cells = re.search(r"Number of cells:\s+(\d+)", body)
        if cells is None:
            continue
        types = {t: int(n) for t, n in re.findall(r"^\s+(\$\S+|SB_\S+|\\\S+)\s+(\d+)\s*$", body, re.M)}
        tr = re.search(r"Estimated number of transistors:\s+(\d+)", body)
        ffs = sum(n for t, n in types.items() if "DFF" in t or "DLATCH" in t)
        modules[name.strip().lstrip("\\")] = {
            "cells": int(cells.group(1)), "ffs": ffs,
            "logic_transistors": int(tr.group(1)) if tr else 0, "types": types}
    if not modules:
        raise ValueError("no module statistics found in the yosys stat output")
    return modules


def parse_ltp(text: str) -> int:
    """``ltp -noff`` output -> longest topological path length (cells)."""
    lengths = [int(n) for n in re.findall(r"Longest topological path in \S+ \(length=(\d+)\)", text)]
    if not lengths:
        raise ValueError("no 'Longest topological path' line in the yosys ltp output")
    return max(lengths)


def parse_ice40_stat(text: str) -> tuple[int, int, int]:
    """``stat`` after ``synth_ice40`` -> (LUT4s, flip-flops, carry cells) of the top."""
    top = next(iter(parse_stat(text).values()))
    types = top["types"]
    luts = types.get("SB_LUT4", 0)
    ffs = sum(n for t, n in types.items() if t.startswith("SB_DFF"))
    return luts, ffs, types.get("SB_CARRY", 0)


# -- the I/O ring for place and route ---------------------------------------------------------

class IORing(wiring.Component):
    """Wraps a component so its ports fit an FPGA: a shift register feeds every input bit
    (``sin``, one bit per cycle) and a loadable shift register captures every output bit
    (``load`` high: capture, else shift out on ``sout``). Every input and output of the inner
    component stays live and registered on both sides, so the place-and-route fmax is the
    inner design's register-to-register timing (plus one ring hop at its edges).

    Parameters
    ----------
    inner : wiring.Component
        The component to wrap (its ``clk``/``rst`` come from this ring's domain).
    """

    def __init__(self, inner: wiring.Component):
        self.inner = inner
        super().__init__({"sin": In(1), "load": In(1), "sout": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.inner = inner = self.inner
        ins, outs = [], []
        for _, member, value in inner.signature.flatten(inner):
            value = value.as_value() if hasattr(value, "as_value") else value
            (ins if member.flow == wiring.In else outs).append(value)
        n_in, n_out = sum(len(v) for v in ins), sum(len(v) for v in outs)
        feed = Signal(n_in)
        grab = Signal(n_out)
        m.d.sync += feed.eq(Cat(self.sin, feed[:-1]))
        offset = 0
        for v in ins:
            m.d.comb += v.eq(feed[offset:offset + len(v)])
            offset += len(v)
        with m.If(self.load):
            m.d.sync += grab.eq(Cat(*outs))
        with m.Else():
            m.d.sync += grab.eq(grab[1:])
        m.d.comb += self.sout.eq(grab[0])
        return m


# -- running the tools ------------------------------------------------------------------------

def _yosys(script: str, workdir: Path, timeout: int = 900) -> str:
    r = subprocess.run(["yosys", "-q", "-p", script], cwd=workdir, capture_output=True,
                       text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"yosys failed: {(r.stderr or r.stdout).strip()[-400:]}")
    return r.stdout


def _generic(result: SynthResult, vfile: Path, work: Path):
    top = result.top
    _yosys(f"read_verilog {vfile.name}; synth -flatten -top {top}; "
           f"tee -q -o flat_stat.txt stat -tech cmos; tee -q -o ltp.txt ltp -noff", work)
    flat = parse_stat((work / "flat_stat.txt").read_text())[top]
    result.cells, result.ffs = flat["cells"], flat["ffs"]
    result.transistors = flat["logic_transistors"] + FF_TRANSISTORS * flat["ffs"]
    result.longest_path = parse_ltp((work / "ltp.txt").read_text())
    _yosys(f"read_verilog {vfile.name}; synth -top {top}; "
           f"tee -q -o hier_stat.txt stat -tech cmos", work)
    for name, s in parse_stat((work / "hier_stat.txt").read_text()).items():
        unit = name[len(top) + 1:] if name.startswith(top + ".") else "(top module's own logic)"
        result.units.append(UnitArea(unit, s["cells"], s["ffs"],
                                     s["logic_transistors"] + FF_TRANSISTORS * s["ffs"]))


def _ice40(result: SynthResult, vfile: Path, ring_file: Path, work: Path, device: str,
           seeds: list[int]):
    top = result.top
    _yosys(f"read_verilog {vfile.name}; synth_ice40 -flatten -top {top}; "
           f"tee -q -o ice_stat.txt stat",
           work)
    result.ice40_luts, result.ice40_ffs, result.ice40_carries = parse_ice40_stat(
        (work / "ice_stat.txt").read_text())
    if shutil.which("nextpnr-ice40") is None:
        result.notes.append("fmax skipped: nextpnr-ice40 not found "
                            "('sudo apt-get install nextpnr-ice40')")
        return
    _yosys(f"read_verilog {ring_file.name}; synth_ice40 -flatten -top ring -json ring.json",
           work)
    flag, package = DEVICES[device]
    runs = []
    for s in seeds:   # placement is seed-dependent: report the median of a few seeds
        report = work / f"report{s}.json"
        r = subprocess.run(["nextpnr-ice40", flag, "--package", package, "--json", "ring.json",
                            "--pcf-allow-unconstrained", "--seed", str(s), "--report",
                            report.name, "--timing-allow-fail", "-q"],
                           cwd=work, capture_output=True, text=True, timeout=1800)
        if r.returncode != 0 or not report.exists():
            result.notes.append(f"fmax failed: nextpnr-ice40: "
                                f"{(r.stderr or r.stdout).strip()[-300:]}")
            return
        fmax = json.loads(report.read_text()).get("fmax", {})
        achieved = [v["achieved"] for k, v in fmax.items() if "clk" in k]
        if not achieved:
            result.notes.append(f"fmax failed: no clock in the nextpnr report ({sorted(fmax)})")
            return
        runs.append(min(achieved))
    result.fmax_runs = [round(f, 1) for f in runs]
    result.fmax_mhz = round(statistics.median(runs), 1)


def synth_top(top_name: str, config: KaleidoConfig, *, ice40: bool = True, device="up5k",
              seeds=(1, 2, 3)) -> SynthResult:
    """Synthesize one top (from a fresh generation) and return its figures."""
    tops = {t.module: t for t in TOPS}
    result = SynthResult(top_name)
    if shutil.which("yosys") is None:
        result.notes.append("skipped: yosys not found ('sudo apt-get install yosys'; "
                            "make install does it where apt is available)")
        return result
    with tempfile.TemporaryDirectory(prefix="kaleido-synth-") as tmp:
        work = Path(tmp)
        vfile = work / f"{top_name}.v"
        vfile.write_text(emit_verilog(build_top(tops[top_name], config), top_name))
        try:
            _generic(result, vfile, work)
            if ice40:
                ring = work / "ring.v"
                ring.write_text(emit_verilog(IORing(build_top(tops[top_name], config)), "ring"))
                _ice40(result, vfile, ring, work, device, list(seeds))
        except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
            result.notes.append(f"failed: {e}")
    return result


# -- report -----------------------------------------------------------------------------------

def _fmt(v, suffix=""):
    return "-" if v is None else f"{v}{suffix}"


def _ratio(a, b):
    return "-" if a is None or b in (None, 0) else f"{a / b:.2f}x"


def format_report(results: list[SynthResult], device: str = "up5k") -> str:
    """The synthesis results as a table, followed by the ratios of :data:`RATIOS`."""
    cols = ("top", "cells", "FFs", "transistors", "path", f"LUT4", "SB_FF", "carry",
            f"fmax {device} MHz")
    rows = [cols]
    for r in results:
        rows.append((r.top, _fmt(r.cells), _fmt(r.ffs), _fmt(r.transistors),
                     _fmt(r.longest_path), _fmt(r.ice40_luts), _fmt(r.ice40_ffs),
                     _fmt(r.ice40_carries), _fmt(r.fmax_mhz)))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(cols))]
    lines = ["  ".join(str(c).rjust(w) if i else str(c).ljust(w)
                       for i, (c, w) in enumerate(zip(row, widths))) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    lines.append(f"transistors = yosys 'stat -tech cmos' logic + {FF_TRANSISTORS} per flip-flop; "
                 "path = 'ltp -noff' length in cells")
    by_top = {r.top: r for r in results}
    for num, den in RATIOS:
        a, b = by_top.get(num), by_top.get(den)
        if a is None or b is None:
            continue
        lines.append(f"{num} / {den}: cells {_ratio(a.cells, b.cells)}, "
                     f"transistors {_ratio(a.transistors, b.transistors)}, "
                     f"FFs {_ratio(a.ffs, b.ffs)}, path {_ratio(a.longest_path, b.longest_path)}, "
                     f"LUT4 {_ratio(a.ice40_luts, b.ice40_luts)}, "
                     f"fmax {_ratio(a.fmax_mhz, b.fmax_mhz)}")
    for r in results:
        if len(r.units) > 1:   # a flat top has nothing to break down
            lines.append("")
            lines.append(f"{r.top}: area by unit (synth without -flatten)")
            total = sum(u.transistors for u in r.units) or 1
            for u in r.units:
                lines.append(f"  {u.module:<28} cells {u.cells:>5}  FFs {u.ffs:>4}  "
                             f"transistors {u.transistors:>6}  ({100 * u.transistors / total:4.1f}%)")
    notes = [f"{r.top}: {n}" for r in results for n in r.notes]
    if notes:
        lines.append("")
        lines.extend(notes)
    return "\n".join(lines)


# -- CLI ----------------------------------------------------------------------------------------

def add_arguments(parser):
    """Options of ``kaleido-hw synth``."""
    parser.add_argument("--config", metavar="FILE",
                        help="TOML file with KaleidoConfig keys (default: built-in defaults)")
    parser.add_argument("--top", action="append", metavar="MODULE",
                        help=f"synthesize this top (repeatable); default: {', '.join(SYNTH_TOPS)}")
    parser.add_argument("--device", choices=sorted(DEVICES), default="up5k",
                        help="iCE40 device for nextpnr (default: up5k)")
    parser.add_argument("--seeds", type=int, default=3, metavar="N",
                        help="nextpnr placement seeds 1..N; fmax is their median (default: 3)")
    parser.add_argument("--no-ice40", action="store_true", help="skip the iCE40 LUT/fmax runs")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument("--engine", action="store_true",
                        help="instead of the tops: area breakdown of the whole KaleidoEngine "
                             "(long: make synth-engine; cached in build/engine_area.json)")
    parser.add_argument("--engine-arrays", default="1,4", metavar="LIST",
                        help="with --engine: comma-separated array counts P (default: 1,4)")


def run(args) -> int:
    """``kaleido-hw synth``: synthesize the selected tops, print (and optionally save) the figures."""
    if args.engine:
        return _run_engine(args)
    config = KaleidoConfig.from_toml(args.config) if args.config else KaleidoConfig()
    if args.seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {args.seeds}")
    known = [t.module for t in TOPS]
    names = args.top or SYNTH_TOPS
    unknown = [t for t in names if t not in known]
    if unknown:
        raise ValueError(f"--top must be one of {', '.join(known)}, got {', '.join(unknown)}")
    results = []
    for name in names:
        print(f"synthesizing {name} ...", flush=True)
        results.append(synth_top(name, config, ice40=not args.no_ice40, device=args.device,
                                 seeds=range(1, args.seeds + 1)))
    print()
    print(format_report(results, args.device))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    return 0


def _run_engine(args) -> int:
    """``kaleido-hw synth --engine``: the builds of :mod:`kaleido_hw.engine_area`."""
    from . import engine_area as ea

    base = KaleidoConfig.from_toml(args.config) if args.config else ea.AREA_CONFIG
    try:
        arrays = [int(a) for a in args.engine_arrays.split(",")]
    except ValueError:
        arrays = []
    if not arrays or any(not 1 <= a <= 64 for a in arrays):
        raise ValueError(f"--engine-arrays must be a comma-separated list of integers in "
                         f"[1, 64], got {args.engine_arrays!r}")
    results = []
    for p in arrays:
        for disp in ("none", "full"):
            cfg = ea.engine_config(base, p, disp)
            print(f"synthesizing kaleido_engine, P = {p}, engine_dispatcher {disp!r} ...",
                  flush=True)
            results.append(ea.synth_engine(cfg, log=lambda line: print(line, flush=True)))
    print()
    print(ea.format_engine_report(results))
    if all(r.ok for r in results):
        ea.save_cache(results, base)
        print(f"\n(saved to {ea.ENGINE_CACHE} for 'kaleido-hw report --only area')")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    return 0
