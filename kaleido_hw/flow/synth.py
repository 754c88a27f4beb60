"""``kaleido-hw synth`` (``make synth``): standard-cell area, timing and power of the small tops,
and their iCE40 LUT count and fmax.

For each top (default :data:`SYNTH_TOPS`: both PEs, both arrays, the two dispatcher blocks),
from a fresh generation with the given configuration:

* Standard cells (:mod:`kaleido_hw.flow.stdcell`): Debian yosys maps the flattened top onto the
  OSU 0.18 um cells (``qflow-tech-osu018``) with buffering and gate sizing; OpenSTA gives the
  worst register/port path at a 10 ns clock (inputs and outputs 0 ns from the clock edge: a
  systolic cell between its neighbours' registers) and the vectorless power at 100 MHz with
  10% switching activity. Reported: area (um2), cells, flip-flops, minimum clock period (ns)
  with the path's start and end, fmax (MHz) and power (mW). A top's memories (the
  ClusterScheduler's string queue and output banks) are SRAM macros, as in the engine flow
  (:mod:`kaleido_hw.flow.sram_macros`: area from the GF180MCU density, black-box timing with
  the macro's clock-to-output), not flip-flops; their area is part of the top's and also
  given on its own.
* Per-unit breakdown of the PEs (:data:`UNIT_TOPS`): the same mapping without ``-flatten``,
  one row per Amaranth submodule (multipliers, gate decoder, accumulator bank; the top's own
  row holds the forwarding registers and the split decode); the rows sum to the hierarchical
  total.
* iCE40 (``--no-ice40`` skips it): ``synth_ice40`` LUT4 / flip-flop / carry counts of the bare
  top, and the ``nextpnr-ice40`` fmax (median over placement seeds) of the top wrapped in a
  shift-register ring (:class:`IORing`) so that its hundreds of ports fit the device's pins.
  A top with more LUT4s or flip-flops than the device has logic cells is not placed.

Ratios (:data:`RATIOS`) compare each Kaleido block with its plain counterpart; the dispatcher
blocks are also given in "arrays' worth" of :data:`ARRAY_REFERENCE`. A missing tool gives a
``skipped`` row with the reason, and the command still exits 0. ``--engine`` runs
:mod:`kaleido_hw.flow.engine_area` instead (``make synth-engine``).
"""

from __future__ import annotations

import json
import math
import shutil
import statistics
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from kaleido_hw.config import ConfigError, KaleidoConfig
from kaleido_hw.flow import sram_macros, stdcell
from kaleido_hw.flow.generate import TOPS, build_top, emit_verilog
from kaleido_hw.flow.stdcell import StdCellResult, run_yosys, synth_stdcell


__all__ = ["SYNTH_TOPS", "RATIOS", "ARRAY_REFERENCE", "ARRAY_WORTH_TOPS", "UNIT_TOPS", "DEVICES",
           "Ice40Result", "SynthResult", "IORing", "synth_top", "parse_ice40_stat",
           "format_report", "results_json"]

#: Tops that ``kaleido-hw synth`` reports by default (add a block's top here).
SYNTH_TOPS = ["kaleido_pe", "baseline_pe", "pe_array", "baseline_array", "cluster_scheduler",
              "merge_matcher"]
#: (Kaleido block, its plain counterpart) pairs whose ratios are printed.
RATIOS = [("kaleido_pe", "baseline_pe"), ("pe_array", "baseline_array")]
#: The dispatcher blocks are also priced in "arrays' worth" of this top.
ARRAY_REFERENCE = "pe_array"
ARRAY_WORTH_TOPS = ("cluster_scheduler", "merge_matcher")
#: Tops whose per-unit breakdown (hierarchical map) is reported.
UNIT_TOPS = ("kaleido_pe", "baseline_pe")
#: iCE40 devices: nextpnr flag, package, logic cells (one LUT4 + one flip-flop each; Lattice
#: iCE40 UltraPlus data sheet: UP5K 5,280; iCE40 LP/HX data sheet: HX8K 7,680).
DEVICES = {"up5k": ("--up5k", "sg48", 5280), "hx8k": ("--hx8k", "ct256", 7680)}


@dataclass
class Ice40Result:
    """iCE40 figures of one top; ``None`` where a tool was missing, failed or the top does not
    fit (see ``notes``)."""
    luts: int | None = None
    ffs: int | None = None
    carries: int | None = None
    fmax_mhz: float | None = None
    fmax_runs: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class SynthResult:
    """Everything ``kaleido-hw synth`` measures of one top."""
    top: str
    stdcell: StdCellResult
    ice40: Ice40Result | None = None      # None with --no-ice40
    seconds: float = 0.0                  # wall clock of this top's runs


def parse_ice40_stat(text: str) -> tuple[int, int, int]:
    """``stat`` after ``synth_ice40`` -> (LUT4s, flip-flops, carry cells) of the top."""
    top = next(iter(stdcell.parse_stat(text).values()))
    types = top.types
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


# -- iCE40 -----------------------------------------------------------------------------------

def _ice40(top_name: str, config: KaleidoConfig, device: str, seeds: list[int]) -> Ice40Result:
    """LUT4/FF/carry counts of the bare top and the nextpnr fmax of the top in an IORing."""
    res = Ice40Result()
    if shutil.which("yosys") is None:
        res.notes.append("skipped: yosys not found ('sudo apt-get install yosys')")
        return res
    tops = {t.module: t for t in TOPS}
    flag, package, logic_cells = DEVICES[device]
    with tempfile.TemporaryDirectory(prefix="kaleido-ice40-") as tmp:
        work = Path(tmp)
        (work / f"{top_name}.v").write_text(emit_verilog(build_top(tops[top_name], config),
                                                         top_name))
        try:
            run_yosys(f"read_verilog {top_name}.v\nsynth_ice40 -flatten -top {top_name}\n"
                      f"tee -q -o ice_stat.txt stat\n", work)
            res.luts, res.ffs, res.carries = parse_ice40_stat((work / "ice_stat.txt").read_text())
            if max(res.luts, res.ffs) > logic_cells:
                res.notes.append(f"fmax skipped: {res.luts} LUT4 / {res.ffs} FFs do not fit the "
                                 f"{device}'s {logic_cells} logic cells")
                return res
            if shutil.which("nextpnr-ice40") is None:
                res.notes.append("fmax skipped: nextpnr-ice40 not found "
                                 "('sudo apt-get install nextpnr-ice40')")
                return res
            (work / "ring.v").write_text(emit_verilog(IORing(build_top(tops[top_name], config)),
                                                      "ring"))
            run_yosys("read_verilog ring.v\nsynth_ice40 -flatten -top ring -json ring.json\n",
                      work)
            runs = []
            for s in seeds:   # placement is seed-dependent: report the median of a few seeds
                report = work / f"report{s}.json"
                r = subprocess.run(["nextpnr-ice40", flag, "--package", package, "--json",
                                    "ring.json", "--pcf-allow-unconstrained", "--seed", str(s),
                                    "--report", report.name, "--timing-allow-fail", "-q"],
                                   cwd=work, capture_output=True, text=True, timeout=1800)
                if r.returncode != 0 or not report.exists():
                    res.notes.append(f"fmax failed: nextpnr-ice40: "
                                     f"{(r.stderr or r.stdout).strip()[-300:]}")
                    return res
                fmax = json.loads(report.read_text()).get("fmax", {})
                achieved = [v["achieved"] for k, v in fmax.items() if "clk" in k]
                if not achieved:
                    res.notes.append(f"fmax failed: no clock in the nextpnr report ({sorted(fmax)})")
                    return res
                runs.append(min(achieved))
            res.fmax_runs = [round(f, 1) for f in runs]
            res.fmax_mhz = round(statistics.median(runs), 1)
        except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
            res.notes.append(f"failed: {e}")
    return res


def synth_top(top_name: str, config: KaleidoConfig, *, ice40: bool = True, device: str = "up5k",
              seeds=(1, 2, 3), units: bool | None = None, verilog: str | None = None) -> SynthResult:
    """Measure one top: standard cells (with the per-unit breakdown for :data:`UNIT_TOPS`, or
    as ``units`` says) and, with ``ice40``, the iCE40 figures. ``verilog``: use this source
    instead of a fresh generation (then there are no iCE40 figures: the ring needs the
    Amaranth component)."""
    t0 = time.monotonic()
    if units is None:
        units = top_name in UNIT_TOPS
    std = synth_stdcell(top_name, config, units=units, verilog=verilog)
    ice = None
    if ice40:
        ice = (_ice40(top_name, config, device, list(seeds)) if verilog is None else
               Ice40Result(notes=["skipped: the iCE40 ring needs a generated top"]))
    return SynthResult(top_name, std, ice, round(time.monotonic() - t0, 1))


# -- report -----------------------------------------------------------------------------------

def _fmt(v, spec=""):
    return "-" if v is None else format(v, spec)


def _ratio(a, b):
    return "-" if a is None or b in (None, 0) else f"{a / b:.2f}x"


def _table(rows: list[tuple]) -> list[str]:
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(str(c).rjust(w) if i else str(c).ljust(w)
                       for i, (c, w) in enumerate(zip(row, widths))) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def format_report(results: list[SynthResult], device: str = "up5k") -> str:
    """The figures as text: the table, the critical paths, the ratios of :data:`RATIOS`, the
    dispatcher blocks in arrays' worth, the per-unit breakdowns, then the notes."""
    ice = any(r.ice40 is not None for r in results)
    cols = ("top", "area um2", "of it SRAM", "cells", "FFs", "path ns", "fmax MHz", "power mW")
    if ice:
        cols += ("LUT4", "SB_FF", "carry", f"{device} MHz")
    rows = [cols]
    for r in results:
        s = r.stdcell
        row = (r.top, "skipped" if s.area_um2 is None else f"{s.area_um2:,.0f}",
               f"{s.sram_um2:,.0f}" if s.sram_um2 else "-", _fmt(s.cells, ","), _fmt(s.ffs, ","), _fmt(s.path_ns, ".2f"),
               _fmt(s.fmax_mhz, ".1f"), _fmt(s.power_mw, ".2f"))
        if ice:
            i = r.ice40 or Ice40Result()
            row += (_fmt(i.luts, ","), _fmt(i.ffs, ","), _fmt(i.carries, ","),
                    _fmt(i.fmax_mhz, ".1f"))
        rows.append(row)
    lines = _table(rows)
    lines += ["", f"standard cells: {stdcell.liberty_path()} (OSU 0.18 um, typical, 1.8 V), "
              f"yosys synth -flatten + dfflibmap + abc (buffering, sizing); path = OpenSTA worst "
              f"arrival + endpoint setup, inputs/outputs 0 ns from the clock edge, no wire load; "
              f"power at {1000 / stdcell.CLOCK_PERIOD_NS:g} MHz, activity "
              f"{stdcell.SWITCHING_ACTIVITY:g}, duty {stdcell.DUTY:g}; memories as SRAM "
              f"macros ({sram_macros.SRAM_UM2_PER_BIT:.2f} um2 per bit and read port, "
              f"kaleido_hw/flow/sram_macros.py)"]
    if ice:
        lines.append("iCE40: synth_ice40 counts of the bare top; fmax = nextpnr median over the "
                     "placement seeds, top inside an I/O shift-register ring")
    paths = [r for r in results if r.stdcell.startpoint]
    if paths:
        lines += ["", "critical paths (start -> end, arrival + setup):"]
        lines += [f"  {r.top:<18} {r.stdcell.startpoint} -> {r.stdcell.endpoint}  "
                  f"({r.stdcell.arrival_ns:.3f} + {r.stdcell.path_ns - r.stdcell.arrival_ns:.3f} ns)"
                  for r in paths]
    by_top = {r.top: r for r in results}
    ratio_lines = []
    for num, den in RATIOS:
        a, b = by_top.get(num), by_top.get(den)
        if a is None or b is None or a.stdcell.area_um2 is None or b.stdcell.area_um2 is None:
            continue
        sa, sb = a.stdcell, b.stdcell
        text = (f"  {num} / {den}: area {_ratio(sa.area_um2, sb.area_um2)}, cells "
                f"{_ratio(sa.cells, sb.cells)}, FFs {_ratio(sa.ffs, sb.ffs)}, path "
                f"{_ratio(sa.path_ns, sb.path_ns)}, fmax {_ratio(sa.fmax_mhz, sb.fmax_mhz)}, "
                f"power {_ratio(sa.power_mw, sb.power_mw)}")
        if a.ice40 is not None and b.ice40 is not None:
            text += (f"; iCE40 LUT4 {_ratio(a.ice40.luts, b.ice40.luts)}, fmax "
                     f"{_ratio(a.ice40.fmax_mhz, b.ice40.fmax_mhz)}")
        ratio_lines.append(text)
    ref = by_top.get(ARRAY_REFERENCE)
    if ref is not None and ref.stdcell.area_um2:
        for top in ARRAY_WORTH_TOPS:
            r = by_top.get(top)
            if r is None or r.stdcell.area_um2 is None:
                continue
            sram = (f" ({r.stdcell.logic_um2 / ref.stdcell.area_um2:.2f} in logic, "
                    f"{r.stdcell.sram_um2 / ref.stdcell.area_um2:.2f} in SRAM)"
                    if r.stdcell.sram_um2 else "")
            ratio_lines.append(
                f"  {top}: {r.stdcell.area_um2 / ref.stdcell.area_um2:.2f} {ARRAY_REFERENCE}s' "
                f"worth of area{sram}, {_ratio(r.stdcell.power_mw, ref.stdcell.power_mw)} its "
                f"power, {_ratio(r.stdcell.ffs, ref.stdcell.ffs)} its flip-flops")
    if ratio_lines:
        lines += ["", "ratios (standard cells unless marked iCE40):"] + ratio_lines
    for num, den in RATIOS:
        a, b = by_top.get(num), by_top.get(den)
        if a is None or b is None or not a.stdcell.units or not b.stdcell.units:
            continue
        lines += ["", f"{num} vs {den}: area by unit (hierarchical map, without -flatten)"]
        ua = {u.path: u for u in a.stdcell.units}
        ub = {u.path: u for u in b.stdcell.units}
        ta = sum(u.area_um2 for u in ua.values())
        tb = sum(u.area_um2 for u in ub.values())
        extra = ta - tb
        rows = [("unit", f"{num} um2", "FFs", f"{den} um2", "FFs", "extra um2", "share of extra")]
        for path in list(ua) + [p for p in ub if p not in ua]:
            x, y = ua.get(path), ub.get(path)
            ax, ay = (x.area_um2 if x else 0.0), (y.area_um2 if y else 0.0)
            rows.append((path or "(own logic)", f"{ax:,.0f}" if x else "-",
                         _fmt(x.ffs if x else None), f"{ay:,.0f}" if y else "-",
                         _fmt(y.ffs if y else None), f"{ax - ay:+,.0f}",
                         f"{100 * (ax - ay) / extra:.0f}%" if extra else "-"))
        rows.append(("total", f"{ta:,.0f}", _fmt(sum(u.ffs for u in ua.values())), f"{tb:,.0f}",
                     _fmt(sum(u.ffs for u in ub.values())), f"{extra:+,.0f}", ""))
        lines += ["  " + line for line in _table(rows)]
    for r in results:
        if r.stdcell.units and not any(r.top in pair for pair in RATIOS
                                       if all(by_top.get(t) and by_top[t].stdcell.units
                                              for t in pair)):
            total = sum(u.area_um2 for u in r.stdcell.units) or 1.0
            lines += ["", f"{r.top}: area by unit (hierarchical map)"]
            lines += [f"  {u.path or '(own logic)':<28} {u.area_um2:>10,.0f} um2  FFs {u.ffs:>5}  "
                      f"({100 * u.area_um2 / total:4.1f}%)" for u in r.stdcell.units]
    notes = [f"{r.top}: {n}" for r in results for n in r.stdcell.notes]
    notes += [f"{r.top}: iCE40 {n}" for r in results if r.ice40 for n in r.ice40.notes]
    if notes:
        lines += [""] + notes
    return "\n".join(lines)


def results_json(results: list[SynthResult]) -> dict:
    """Every figure of a ``kaleido-hw synth`` run, with the method's constants."""
    return {"method": {"liberty": str(stdcell.liberty_path()),
                       "clock_period_ns": stdcell.CLOCK_PERIOD_NS,
                       "switching_activity": stdcell.SWITCHING_ACTIVITY,
                       "duty": stdcell.DUTY, "abc_script": stdcell.ABC_SCRIPT,
                       "sram_um2_per_bit": sram_macros.SRAM_UM2_PER_BIT},
            "tops": [asdict(r) for r in results]}


# -- CLI ----------------------------------------------------------------------------------------

def add_arguments(parser):
    """Options of ``kaleido-hw synth``."""
    parser.add_argument("--config", metavar="FILE",
                        help="TOML file with KaleidoConfig keys (default: built-in defaults)")
    parser.add_argument("--top", action="append", metavar="MODULE",
                        help=f"measure this top (repeatable); default: {', '.join(SYNTH_TOPS)}")
    parser.add_argument("--verilog", metavar="FILE",
                        help="measure the --top module(s) of this Verilog file instead of a "
                             "generation (clock port clk; standard cells only)")
    parser.add_argument("--device", choices=sorted(DEVICES), default="up5k",
                        help="iCE40 device for nextpnr (default: up5k)")
    parser.add_argument("--seeds", type=int, default=3, metavar="N",
                        help="nextpnr placement seeds 1..N; fmax is their median (default: 3)")
    parser.add_argument("--no-ice40", action="store_true", help="skip the iCE40 LUT/fmax runs")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument("--engine", action="store_true",
                        help="instead of the tops: standard-cell area, timing and power of the "
                             "whole engine per block (long: make synth-engine; cached in "
                             "build/engine_area.json)")
    parser.add_argument("--engine-default", action="store_true",
                        help="with --engine: the default build (the configuration as given, "
                             "KaleidoConfig's defaults without --config: its own P and "
                             "dispatcher) instead of the smaller comparison builds")
    parser.add_argument("--engine-arrays", metavar="LIST",
                        help="with --engine: comma-separated array counts P (default: 1,4; "
                             "with --engine-default the configuration's engine_arrays)")
    parser.add_argument("--engine-variants", metavar="LIST",
                        help="with --engine: comma-separated variants, of plain, none, scheduler, "
                             "matcher, full (default: plain,none,full, plain only where the "
                             "configuration has engine_pe; with --engine-default the "
                             "configuration's engine_dispatcher)")
    parser.add_argument("--engine-top", metavar="MODULE", choices=("kaleido_core",),
                        help="with --engine: map this top the same way instead of the engine: "
                             "kaleido_core (the engine core with its DMA and controller; with "
                             "core_attention = true in --config also the attention path)")
    parser.add_argument("--engine-shape", metavar="RxC",
                        help="with --engine: arrays of R x C PEs instead of the configuration's "
                             "rows x cols, and by default as many arrays as keep the PE count "
                             "(make synth-engine-compare: 2x2, 16 arrays of the comparison "
                             "builds' 64 PEs, for the iso-area report)")
    parser.add_argument("--engine-chunk-width", metavar="W", type=int,
                        help="with --engine: reuse builds with chunks of W channels "
                             "(sched_pattern_width; matcher_channels cut to divide it) instead "
                             "of the configuration's (make synth-engine-compare: 8, for the "
                             "iso-area report); a plain build always takes its own width "
                             "(plain_chunk_width)")


def run(args) -> int:
    """``kaleido-hw synth``: measure the selected tops, print (and optionally save) the figures."""
    if args.engine:
        return _run_engine(args)
    given = [o for o, v in (("--engine-default", args.engine_default),
                            ("--engine-arrays", args.engine_arrays),
                            ("--engine-variants", args.engine_variants),
                            ("--engine-shape", args.engine_shape),
                            ("--engine-chunk-width", args.engine_chunk_width),
                            ("--engine-top", args.engine_top)) if v]
    if given:
        raise ValueError(f"{', '.join(given)} only apply with --engine")
    config = KaleidoConfig.from_toml(args.config) if args.config else KaleidoConfig()
    if args.seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {args.seeds}")
    verilog = None
    if args.verilog:
        if not args.top:
            raise ValueError("--verilog needs --top MODULE (the top module(s) of the file)")
        verilog = Path(args.verilog).read_text()
        names = args.top
    else:
        known = [t.module for t in TOPS]
        names = args.top or SYNTH_TOPS
        unknown = [t for t in names if t not in known]
        if unknown:
            raise ValueError(f"--top must be one of {', '.join(known)}, got {', '.join(unknown)}")
    why = stdcell.stdcell_available()
    if why:
        print(f"standard cells skipped: {why}", flush=True)
    t0 = time.monotonic()
    results = []
    for name in names:
        print(f"synthesizing {name} ...", flush=True)
        results.append(synth_top(name, config, ice40=not args.no_ice40, device=args.device,
                                 seeds=range(1, args.seeds + 1), verilog=verilog))
        print(f"  {results[-1].seconds:.0f} s", flush=True)
    print()
    print(format_report(results, args.device))
    print(f"\n({time.monotonic() - t0:.0f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(results_json(results), indent=2) + "\n")
    return 0


def _parse_list(text: str, option: str, allowed=None, cast=str) -> list:
    try:
        items = [cast(x.strip()) for x in text.split(",") if x.strip()]
    except ValueError:
        items = []
    bad = [x for x in items if allowed is not None and x not in allowed]
    if not items or bad:
        want = f"of {', '.join(allowed)}" if allowed is not None else "of integers"
        raise ValueError(f"{option} must be a comma-separated list {want}, got {text!r}")
    return items


def _shaped(base: KaleidoConfig, text: str) -> tuple[KaleidoConfig, int]:
    """``base`` with the arrays of ``--engine-shape`` ``text`` ("RxC"), and the array count
    that keeps ``base``'s PEs (engine_arrays x rows x cols)."""
    r, sep, c = text.lower().partition("x")
    if not (sep and r.isdigit() and c.isdigit()):
        raise ValueError(f"--engine-shape must be RxC with integers R and C (e.g. 2x2), "
                         f"got {text!r}")
    shaped = base.replace(rows=int(r), cols=int(c))   # KaleidoConfig checks the ranges
    pes = base.engine_arrays * base.rows * base.cols
    if pes % (shaped.rows * shaped.cols) or pes // (shaped.rows * shaped.cols) > 64:
        raise ValueError(f"--engine-shape {text}: {pes} PEs ({base.engine_arrays} arrays of "
                         f"{base.rows}x{base.cols}) are not a whole number of at most 64 "
                         f"{shaped.rows}x{shaped.cols} arrays")
    return shaped, pes // (shaped.rows * shaped.cols)


def _chunked(base: KaleidoConfig, width: int, variants: list[str]) -> KaleidoConfig:
    """``base`` with chunks of ``--engine-chunk-width`` ``width`` channels (its
    ``matcher_channels`` cut to the largest divisor of both); reuse builds only."""
    if "plain" in variants:
        from kaleido_hw.engine.kaleido_engine import plain_chunk_width
        raise ValueError(f"--engine-chunk-width applies to reuse builds only: a plain build "
                         f"takes its own chunk width (plain_chunk_width: "
                         f"{plain_chunk_width(base.rows, base.cols)} channels on "
                         f"{base.rows}x{base.cols} arrays); leave plain out of "
                         f"--engine-variants")
    try:
        return base.replace(sched_pattern_width=width,
                            matcher_channels=math.gcd(base.matcher_channels, width))
    except ConfigError as e:
        raise ValueError(f"--engine-chunk-width {width}: {e}") from None


def _run_engine(args) -> int:
    """``kaleido-hw synth --engine``: the builds of :mod:`kaleido_hw.flow.engine_area`."""
    from kaleido_hw.flow import engine_area as ea

    if args.config:
        base = KaleidoConfig.from_toml(args.config)
    else:
        base = KaleidoConfig() if args.engine_default else ea.AREA_CONFIG
    default_arrays, default_variants = (
        (str(base.engine_arrays), base.engine_dispatcher) if args.engine_default else
        (",".join(map(str, ea.DEFAULT_ARRAYS)), ",".join(ea.DEFAULT_VARIANTS)))
    if args.engine_shape:
        base, same_pes = _shaped(base, args.engine_shape)
        default_arrays = str(same_pes)
    text = args.engine_arrays or default_arrays
    arrays = _parse_list(text, "--engine-arrays", cast=int)
    if any(not 1 <= a <= 64 for a in arrays):
        raise ValueError(f"--engine-arrays must be a comma-separated list of integers in "
                         f"[1, 64], got {text!r}")
    variants = _parse_list(args.engine_variants or default_variants, "--engine-variants",
                           allowed=ea.VARIANTS)
    if args.engine_chunk_width is not None:
        base = _chunked(base, args.engine_chunk_width, variants)
    t0 = time.monotonic()
    results = ea.run_builds(base, ea.default_builds(arrays, variants), top=args.engine_top,
                            log=lambda line: print(line, flush=True))
    print()
    print(ea.format_engine_report(results))
    print(f"\n(all builds: {time.monotonic() - t0:.0f} s)")
    if any(r.ok for r in results):
        ea.save_cache(results, base, top=args.engine_top)
        print(f"\n(saved to {ea.ENGINE_CACHE} for 'kaleido-hw report --only area')")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    return 0
