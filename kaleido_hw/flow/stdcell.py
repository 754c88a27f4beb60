"""Standard-cell area, timing and power of a generated top (``make synth``, ``docs/integration.md``).

One concern: map a top onto a real 0.18 um standard-cell library and time it, so that the
area and speed figures are square micrometres and nanoseconds instead of gate counts.

Library
    The OSU 0.18 um cells (Oklahoma State University, drawn on the MOSIS SCMOS SUBM rules,
    lambda = 0.1 um, for TSMC 0.18 um, 1.8 V, typical corner) as Debian's
    ``qflow-tech-osu018`` installs them: :data:`DEFAULT_LIBERTY`. ``KALEIDO_LIBERTY=/path/x.lib``
    selects another Liberty file (it must have a buffer, an inverter and a D flip-flop).
    :func:`stdcell_available` says what is missing, naming the Debian package.

Mapping (:func:`yosys_script`, Debian yosys 0.23)
    ``synth -flatten``, flip-flops onto the library's (``dfflibmap``), logic with ABC
    (:data:`ABC_SCRIPT`): structural hashing, choice computation, delay-oriented mapping,
    then buffering of every net with more than :data:`BUFFER_FANOUT` sinks and gate up- and
    down-sizing against the library's delay tables. Without the buffering and sizing, the
    high-fanout nets (a control bit that steers 24 accumulator bits) stay on minimum-size
    cells and their paths come out absurdly long (over 1 us). ``stat -liberty`` gives the
    area (the sum of the cells' Liberty areas: no routing, no placement density). The netlist
    is written with ``-simple-lhs`` (OpenSTA's Verilog reader rejects concatenations on the
    left of an ``assign``). ABC buffers the nets of the logic it maps but not flip-flop
    outputs (its primary inputs): :func:`buffered` then gives every flip-flop output with more
    than :data:`BUFFER_FANOUT` loads a tree of the library's strongest buffer
    (:mod:`kaleido_hw.flow.buffer_tree`), as a placed flow would; with the hierarchy kept (the
    per-unit breakdown below, the engine and vector-unit flows) so does every input port bit
    of a submodule but its clock, which ABC takes as an ideal driver too, and every net an
    instance's output port drives in its parent (an ideal driver to ABC there). A path with a stage that still
    drives more than :data:`HIGH_LOAD_PF` gets a note.

Timing (:func:`sta_script`, OpenSTA 2.0)
    One clock ``clk`` of period :data:`CLOCK_PERIOD_NS`; every other input arrives 0 ns after
    the clock edge and every output is required 0 ns before the next one. That models a
    systolic cell whose inputs come from its neighbours' registers and whose outputs go to
    them (the PE and the array), with no extra margin at the ports. The reported path is
    OpenSTA's worst setup path; :attr:`StdCellResult.path_ns` = its arrival + the setup time
    of its endpoint (0 for an output port) is the minimum clock period, and ``fmax_mhz`` is
    its inverse. No wire load (the library has no wire-load model and nothing is placed) and
    an ideal clock: the figures are pre-layout.

Power (OpenSTA ``report_power``, vectorless)
    Every top at the same clock, :data:`CLOCK_PERIOD_NS` (100 MHz), so that the milliwatts
    compare as energy per cycle (``mW / 100 MHz = 10 pJ per cycle``); every net toggles with
    probability :data:`SWITCHING_ACTIVITY` per cycle and is high half of the time
    (:data:`DUTY`); the clock net toggles twice a cycle. Internal (cell) + switching (pin
    capacitance) + leakage; no wire capacitance, no clock tree.

Per-unit breakdown (``units=True``)
    The same mapping without ``-flatten``: every Amaranth submodule stays its own Verilog
    module and is mapped on its own, so ``stat -liberty`` gives one area per submodule (its
    input ports' buffer trees included). The
    units sum exactly to the hierarchical total (checked); that total is somewhat different
    from the flat one, because ABC cannot optimise across module boundaries.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from kaleido_hw.config import KaleidoConfig
from kaleido_hw.flow import sram_macros
from kaleido_hw.flow.buffer_tree import (buffer_register_outputs, find_buffer_cell,
                                         liberty_clock_pins, liberty_pins)


__all__ = ["DEFAULT_LIBERTY", "LIBERTY_ENV", "LIBERTY_PACKAGE", "STA_PACKAGE", "ABC_SCRIPT",
           "BUFFER_FANOUT", "CLOCK_PERIOD_NS", "SWITCHING_ACTIVITY", "DUTY", "CLOCK_PORT",
           "HIGH_LOAD_PF", "PathStage",
           "StdCellUnit", "StdCellResult", "ModuleStat", "TimingPath", "liberty_path",
           "stdcell_available", "liberty_cells", "yosys_script", "map_script", "join_script",
           "finish_script", "buffered",
           "sta_script",
           "parse_stat", "parse_hierarchy", "parse_timing", "parse_power", "NetlistIndex",
           "run_yosys", "run_sta", "time_netlist", "synth_stdcell", "UNIT_SUM_TOLERANCE",
           "MEMORY_DECLARATION"]

#: The OSU 0.18 um standard cells of Debian's ``qflow-tech-osu018``.
DEFAULT_LIBERTY = Path("/usr/share/qflow/tech/osu018/osu018_stdcells.lib")
#: Environment variable that selects another Liberty file.
LIBERTY_ENV = "KALEIDO_LIBERTY"
#: Debian packages of the library and of OpenSTA (named in the "missing" messages).
LIBERTY_PACKAGE = "qflow-tech-osu018"
STA_PACKAGE = "opensta"
#: Largest fanout ABC leaves unbuffered (``buffer -N``).
BUFFER_FANOUT = 8
#: ABC commands after ``abc -liberty``: strash (AIG), dch (choices), map (delay-oriented
#: mapping onto the library), topo, buffer (fanout <= BUFFER_FANOUT), upsize and dnsize (gate
#: sizing), stime -p (print the timing ABC ends with). Commas become blanks inside ABC.
ABC_SCRIPT = f"+strash;dch;map;topo;buffer,-N,{BUFFER_FANOUT};upsize;dnsize;stime,-p"
#: Clock period of the timing and power runs: 10 ns = 100 MHz for every top (power figures
#: then compare as energy per cycle). The worst path is reported whatever its slack.
CLOCK_PERIOD_NS = 10.0
#: Toggle probability per clock cycle of every non-clock net (vectorless power).
SWITCHING_ACTIVITY = 0.1
#: Fraction of the time every non-clock net is high.
DUTY = 0.5
#: The clock port every generated top has (rising edge, ``docs/integration.md``).
CLOCK_PORT = "clk"
#: A path stage that drives more than this load is flagged as an unbuffered high-fanout net:
#: 1 pF is about 100 minimum inputs (an OSU INVX1 input is 0.0093 pF). ABC buffers the nets
#: of the logic it maps, but not the outputs of flip-flops (its primary inputs), so a
#: register that selects among thousands of bits keeps one minimum-size driver.
HIGH_LOAD_PF = 1.0


@dataclass
class StdCellUnit:
    """Standard-cell area of one submodule of a top (hierarchical map, its own cells only)."""
    path: str            # below the top, e.g. "acc_unit"; "" = the top module's own logic
    area_um2: float
    cells: int
    ffs: int


@dataclass
class StdCellResult:
    """Figures of one top on the standard cells; ``None`` where a tool was missing or failed
    (then ``notes`` says why)."""
    top: str
    area_um2: float | None = None
    cells: int | None = None
    ffs: int | None = None
    path_ns: float | None = None     # minimum clock period: worst path arrival + setup of its endpoint (0 for an output port)
    arrival_ns: float | None = None
    startpoint: str | None = None
    endpoint: str | None = None
    fmax_mhz: float | None = None    # 1000 / path_ns
    power_mw: float | None = None    # OpenSTA vectorless, at the stated clock and activity
    sram_um2: float = 0.0            # part of area_um2 in SRAM macros (memories of the top)
    sram_bits: int = 0
    units: list = field(default_factory=list)   # per-submodule std-cell area (hierarchical map), summing to the top's area
    notes: list[str] = field(default_factory=list)

    @property
    def logic_um2(self) -> float | None:
        """Standard-cell area: ``area_um2`` without the SRAM macros."""
        return None if self.area_um2 is None else self.area_um2 - self.sram_um2


# -- the library and the tools -------------------------------------------------------------------

def liberty_path() -> Path:
    """The Liberty file in use: ``$KALEIDO_LIBERTY`` if set, else :data:`DEFAULT_LIBERTY`."""
    return Path(os.environ.get(LIBERTY_ENV) or DEFAULT_LIBERTY)


def stdcell_available() -> str | None:
    """None when yosys, the Liberty file and OpenSTA (``sta``) are all there; otherwise one
    message that names what is missing and the Debian package that provides it."""
    missing = []
    if shutil.which("yosys") is None:
        missing.append("yosys not found ('sudo apt-get install yosys')")
    lib = liberty_path()
    if not lib.is_file():
        if os.environ.get(LIBERTY_ENV):
            missing.append(f"the Liberty file {lib} ({LIBERTY_ENV}) not found")
        else:
            missing.append(f"the OSU 0.18 um cells {lib} not found "
                           f"('sudo apt-get install {LIBERTY_PACKAGE}')")
    if shutil.which("sta") is None:
        missing.append(f"OpenSTA 'sta' not found ('sudo apt-get install {STA_PACKAGE}')")
    if not missing:
        return None
    return "; ".join(missing) + " (make install does it where apt is available)"


_CELL = re.compile(r"^\s*cell\s*\(\s*\"?([^\s\")]+)\"?\s*\)\s*\{", re.M)


def liberty_cells(text: str) -> tuple[frozenset[str], frozenset[str]]:
    """(all cells, sequential cells) of a Liberty file's text; a cell is sequential when its
    group has an ``ff`` or ``latch`` group."""
    starts = [(m.start(), m.group(1)) for m in _CELL.finditer(text)]
    cells, sequential = set(), set()
    for i, (pos, name) in enumerate(starts):
        body = text[pos:starts[i + 1][0] if i + 1 < len(starts) else len(text)]
        cells.add(name)
        if re.search(r"(?:^|[{;])\s*(ff|latch|ff_bank|latch_bank)\s*\(", body, re.M):
            sequential.add(name)
    if not cells:
        raise ValueError("no 'cell (NAME) {' group in the Liberty file")
    return frozenset(cells), frozenset(sequential)


def yosys_script(top: str, verilog_file: str, liberty: str, *, flatten: bool = True,
                 json_file: str = "mapped.json") -> str:
    """The yosys script that maps ``top`` of ``verilog_file`` onto ``liberty`` (one command
    per line; run with ``yosys -s``) and writes the mapped design as JSON for the buffer
    trees (:func:`buffered`). ``flatten=False`` keeps every submodule a module."""
    lines = [f"read_verilog {verilog_file}",
             f"synth {'-flatten ' if flatten else ''}-top {top}",
             f"dfflibmap -liberty {liberty}",
             f"abc -liberty {liberty} -script {ABC_SCRIPT}",
             "opt_clean",
             f"write_json {json_file}"]
    return "\n".join(lines) + "\n"


def map_script(top: str, verilog_file: str, liberty: str, *, flatten: bool = False,
               register_memories: str | None = None, blackbox: list[str] | None = None,
               il_file: str = "mapped.il") -> str:
    """The yosys script that maps ``top`` onto ``liberty`` with its memories kept as
    ``$mem_v2`` cells (``synth -run begin:fine`` stops after ``memory -nomap``); writes
    ``mems.txt`` (the memories, :func:`kaleido_hw.flow.sram_macros.parse_memories`) and
    ``il_file`` (the design, for :func:`kaleido_hw.flow.sram_macros.macro_script`).
    ``register_memories``: a yosys name pattern of memories mapped to flip-flops instead.
    ``blackbox``: modules left alone (made black boxes, then left out of ``il_file``, and no
    ``mems.txt``), so that several scripts can map parts of one design at once and
    :func:`join_script` joins them."""
    lines = [f"read_verilog {verilog_file}"]
    if blackbox:
        lines += [f"hierarchy -check -top {top}", "blackbox " + " ".join(blackbox),
                  "synth -run coarse:fine"]      # "begin" is the hierarchy line above
    else:
        lines.append(f"synth {'-flatten ' if flatten else ''}-top {top} -run begin:fine")
    if register_memories:
        lines.append(f"memory_map {register_memories}")
    lines += ["opt -fast -full", "techmap", "opt -fast",
              f"dfflibmap -liberty {liberty}",
              f"abc -liberty {liberty} -script {ABC_SCRIPT}",
              "opt_clean"]
    lines += ["delete =A:blackbox"] if blackbox else ["tee -q -o mems.txt dump t:$mem_v2"]
    lines.append(f"write_rtlil {il_file}")
    return "\n".join(lines) + "\n"


def join_script(top: str, il_files: list[str]) -> str:
    """The yosys script that joins the parts mapped by :func:`map_script` with ``blackbox``
    into ``mapped.il`` and writes ``mems.txt``, as one :func:`map_script` would."""
    lines = [f"read_rtlil {f}" for f in il_files]
    lines += [f"hierarchy -top {top}", "tee -q -o mems.txt dump t:$mem_v2",
              "write_rtlil mapped.il"]
    return "\n".join(lines) + "\n"


def finish_script(top: str, json_file: str, liberties: list[str], *, stat_file: str = "stat.txt",
                  netlist_file: str | None = None) -> str:
    """The yosys script that reads the buffered JSON netlist back, prints ``stat`` with the
    Liberty areas and writes the Verilog netlist for OpenSTA."""
    lines = [f"read_liberty -lib {lib}" for lib in liberties]
    lines += [f"read_json {json_file}",
              f"hierarchy -top {top}",
              f"tee -q -o {stat_file} stat " + " ".join(f"-liberty {lib}" for lib in liberties)]
    if netlist_file:
        lines.append(f"write_verilog -noattr -simple-lhs {netlist_file}")
    return "\n".join(lines) + "\n"


def buffered(work: Path, liberty_text: str, sequential: frozenset[str], *,
             json_in: str = "mapped.json", json_out: str = "buffered.json",
             macros: frozenset[str] = frozenset()) -> int:
    """Buffer trees on the flip-flop outputs of ``work/json_in``, on the input nets of the
    ``macros`` cells, on the input ports of its submodules and on the nets their output
    ports drive, clocks excepted
    (:mod:`kaleido_hw.flow.buffer_tree`, at most :data:`BUFFER_FANOUT` loads
    per net, like ABC's own buffering), written to ``work/json_out``. Returns the number of
    buffers inserted."""
    design = json.loads((work / json_in).read_text())
    clocks = liberty_clock_pins(liberty_text)
    n = buffer_register_outputs(design, sequential, find_buffer_cell(liberty_text),
                                BUFFER_FANOUT, liberty_pins(liberty_text),
                                {cell: clocks.get(cell, frozenset()) for cell in macros},
                                clocks=clocks)
    (work / json_out).write_text(json.dumps(design))
    return n


def sta_script(top: str, netlist_file: str, liberties: list[str], *,
               period_ns: float = CLOCK_PERIOD_NS, activity: float = SWITCHING_ACTIVITY,
               duty: float = DUTY, clock: str = CLOCK_PORT) -> str:
    """The OpenSTA script that times ``netlist_file`` and estimates its power (see the module
    docstring for the constraints); run with ``sta -no_splash -exit``."""
    lines = [f"read_liberty {lib}" for lib in liberties]
    lines += [f"read_verilog {netlist_file}",
              f"link_design {top}",
              f"create_clock -name {clock} -period {period_ns:g} [get_ports {clock}]",
              f"set_input_delay 0 -clock {clock} "
              f"[delete_from_list [all_inputs] [get_ports {clock}]]",
              f"set_output_delay 0 -clock {clock} [all_outputs]",
              "report_checks -path_delay max -digits 3 -fields {cap slew}",
              f"set_power_activity -global -activity {activity:g} -duty {duty:g}",
              "report_power"]
    return "\n".join(lines) + "\n"


def run_yosys(script: str, workdir: Path, *, timeout: int = 3600,
              script_file: str = "flow.ys") -> str:
    """Run a yosys script (written to ``workdir/script_file``); raises RuntimeError with the
    end of yosys' message when it fails."""
    (workdir / script_file).write_text(script)
    r = subprocess.run(["yosys", "-q", "-s", script_file], cwd=workdir, capture_output=True,
                       text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"yosys failed: {(r.stderr or r.stdout).strip()[-400:]}")
    return r.stdout


def run_sta(script: str, workdir: Path, *, timeout: int = 3600) -> str:
    """Run an OpenSTA script (written to ``workdir/sta.tcl``) and return its report; raises
    RuntimeError when ``sta`` fails or prints an error."""
    (workdir / "sta.tcl").write_text(script)
    r = subprocess.run(["sta", "-no_splash", "-exit", "sta.tcl"], cwd=workdir,
                       capture_output=True, text=True, timeout=timeout)
    out = r.stdout + r.stderr
    errors = [line for line in out.splitlines() if line.startswith("Error")]
    if r.returncode != 0 or errors:
        raise RuntimeError(f"sta failed: {(chr(10).join(errors) or out.strip())[-400:]}")
    return r.stdout


# -- parsers of the tools' text output -----------------------------------------------------------

@dataclass
class ModuleStat:
    """One ``=== module ===`` block of yosys ``stat``: its own cells by type (submodule
    instances included, as yosys counts them) and, with ``-liberty``, its chip area."""
    cells: int
    types: dict[str, int]
    area_um2: float | None


def parse_stat(text: str) -> dict[str, ModuleStat]:
    """yosys ``stat`` (with or without ``-liberty``) -> {module: ModuleStat}, in file order.

    The ``design hierarchy`` summary is not a module (see :func:`parse_hierarchy`); module
    names lose yosys' leading backslash.
    """
    modules = {}
    blocks = re.split(r"^=== (.+?) ===\s*$", text, flags=re.M)
    for name, body in zip(blocks[1::2], blocks[2::2]):
        if name.strip() == "design hierarchy":
            continue
        cells = re.search(r"Number of cells:\s+(\d+)", body)
        if cells is None:
            continue
        types = {t.lstrip("\\"): int(n) for t, n in
                 re.findall(r"^\s+(\$\S+|\\\S+|[A-Za-z_][\w$.]*)\s+(\d+)\s*$", body, re.M)}
        area = re.search(r"Chip area for module .*?: ([\d.]+)", body)
        modules[name.strip().lstrip("\\")] = ModuleStat(
            int(cells.group(1)), types, float(area.group(1)) if area else None)
    if not modules:
        raise ValueError("no module statistics found in the yosys stat output")
    return modules


def parse_hierarchy(text: str) -> tuple[dict[str, int], float | None]:
    """The ``design hierarchy`` block of ``stat`` -> ({module: instance count}, chip area of
    the top module with everything below it, or None without ``-liberty``). A flat design has
    no such block: ({}, None)."""
    _, sep, tail = text.partition("=== design hierarchy ===")
    if not sep:
        return {}, None
    head = tail.split("Number of wires", 1)[0]
    counts = {name.lstrip("\\"): int(n)
              for name, n in re.findall(r"^\s+(\S+)\s+(\d+)\s*$", head, re.M)}
    area = re.search(r"Chip area for top module .*?: ([\d.]+)", tail)
    return counts, float(area.group(1)) if area else None


@dataclass
class PathStage:
    """One driven output on a timing path (``report_checks -fields {cap slew}``)."""
    pin: str            # e.g. "_67484_/Q"
    load_pf: float      # capacitance the pin drives
    delay_ns: float     # this stage's delay


@dataclass
class TimingPath:
    """The worst setup path of an OpenSTA ``report_checks`` (names as OpenSTA prints them)."""
    startpoint: str
    start_kind: str     # OpenSTA's description, e.g. "input port clocked by clk"
    endpoint: str
    end_kind: str
    arrival_ns: float
    required_ns: float
    stages: list[PathStage] = field(default_factory=list)

    def min_period_ns(self, period_ns: float) -> float:
        """The clock period at which this path has zero slack: arrival + (period - required),
        i.e. arrival + the endpoint's setup time (or output delay) with an ideal clock."""
        return self.arrival_ns + period_ns - self.required_ns


def parse_timing(text: str) -> TimingPath:
    """OpenSTA ``report_checks -path_delay max`` -> the reported path; ValueError when there
    is none (e.g. no path between clocked points)."""
    start = re.search(r"^Startpoint: (\S+)\s*\(([^)]*)\)", text, re.M)
    end = re.search(r"^Endpoint: (\S+)\s*\(([^)]*)\)", text, re.M)
    arrival = re.search(r"^\s*(-?[\d.]+)\s+data arrival time", text, re.M)
    required = re.search(r"^\s*(-?[\d.]+)\s+data required time", text, re.M)
    if not (start and end and arrival and required):
        raise ValueError("no timing path in the OpenSTA report (is the clock port "
                         f"'{CLOCK_PORT}' driving any register?)")
    arrival_part = text[:arrival.start()]
    stages = [PathStage(pin, float(cap), float(delay)) for cap, _slew, delay, _time, pin in
              re.findall(r"^\s*([\d.]+)\s+([\d.]+)\s+(-?[\d.]+)\s+(-?[\d.]+)\s+[v^]\s+(\S+)",
                         arrival_part, re.M)]
    return TimingPath(start.group(1), " ".join(start.group(2).split()), end.group(1),
                      " ".join(end.group(2).split()), float(arrival.group(1)),
                      float(required.group(1)), stages)


def parse_power(text: str) -> float:
    """OpenSTA ``report_power`` -> total power in watts (the ``Total`` row's last figure)."""
    m = re.search(r"^Total\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)", text, re.M)
    if m is None:
        raise ValueError("no 'Total' row in the OpenSTA power report")
    return float(m.group(4))


# -- names of the path's ends --------------------------------------------------------------------

_MODULE = re.compile(r"^module (\\\S+|\w+)\s*\(", re.M)
_INSTANCE = re.compile(r"^  (\\\S+|[A-Za-z_][\w$]*) +(\\\S+|[A-Za-z_][\w$]*) *\(\n(.*?)\n  \);",
                       re.M | re.S)


def _plain(name: str) -> str:
    """A Verilog identifier as a tool prints it: no escape backslash, no blank before [i]."""
    return name.strip().lstrip("\\").replace(" [", "[")


class NetlistIndex:
    """What a ``write_verilog -noattr`` netlist says about its registers: for every module,
    each flip-flop instance's Q net and each instance of a submodule or macro (any type that
    is not a combinational library cell). Used to name a timing path's ends by the register
    they are (``acc_unit.r0[19]``) instead of the instance ABC made up (``_2255_``)."""

    def __init__(self, netlist: str, cells: frozenset[str], sequential: frozenset[str]):
        self.flops: dict[str, dict[str, str]] = {}
        self.others: dict[str, dict[str, str]] = {}
        starts = [(m.start(), _plain(m.group(1))) for m in _MODULE.finditer(netlist)]
        for i, (pos, module) in enumerate(starts):
            body = netlist[pos:starts[i + 1][0] if i + 1 < len(starts) else len(netlist)]
            flops, others = self.flops.setdefault(module, {}), self.others.setdefault(module, {})
            for m in _INSTANCE.finditer(body):
                kind, inst = _plain(m.group(1)), _plain(m.group(2))
                if kind in sequential:
                    q = re.search(r"\.Q\((.*)\)", m.group(3))
                    if q:
                        flops[inst] = _plain(q.group(1))
                elif kind not in cells:
                    others[inst] = kind

    def describe(self, top: str, path: str) -> tuple[str, str | None]:
        """(name, kind) of the instance at OpenSTA path ``a/b/inst`` below ``top``: a
        flip-flop becomes ``a/b/<its Q net>``, kind "register"; a submodule or macro keeps its
        name, kind = its cell type; anything else (None kind) is returned as given."""
        *hier, leaf = path.split("/")
        module = top
        for inst in hier:
            module = self.others.get(module, {}).get(inst)
            if module is None:
                return path, None
        prefix = "/".join(hier) + "/" if hier else ""
        if leaf in self.flops.get(module, {}):
            return prefix + self.flops[module][leaf], "register"
        if leaf in self.others.get(module, {}):
            return path, self.others[module][leaf]
        return path, None


#: The ``$N`` yosys appends to the name of a net's alias (``r1$37[21]``).
_ALIAS_SUFFIX = re.compile(r"[$][0-9]+(?=[\[.]|$)")


def _end_name(index: NetlistIndex | None, top: str, name: str, kind: str) -> str:
    """A path end for the report: ``name (kind)`` with registers named by their net (the
    ``$N`` suffixes yosys gives aliases of a net left out)."""
    if "port" in kind:
        return f"{name} ({kind.split(' clocked')[0]})"
    if index is not None:
        named, what = index.describe(top, name)
        if what is not None:
            return f"{_ALIAS_SUFFIX.sub('', named)} ({what})"
    return f"{name} ({kind.split(' clocked')[0]})"


def time_netlist(top: str, netlist: Path, liberties: list[Path], workdir: Path, *,
                 index: NetlistIndex | None = None, timeout: int = 3600) -> dict:
    """OpenSTA on a mapped netlist: {"arrival_ns", "path_ns", "fmax_mhz", "startpoint",
    "endpoint", "power_mw", "notes"} (see the module docstring for constraints and power;
    a note flags a path stage that drives more than :data:`HIGH_LOAD_PF`)."""
    text = run_sta(sta_script(top, netlist.name, [str(lib) for lib in liberties]), workdir,
                   timeout=timeout)
    path = parse_timing(text)
    period = path.min_period_ns(CLOCK_PERIOD_NS)
    out = {"arrival_ns": round(path.arrival_ns, 3), "path_ns": round(period, 3),
           "fmax_mhz": round(1000 / period, 1) if period > 0 else None,
           "startpoint": _end_name(index, top, path.startpoint, path.start_kind),
           "endpoint": _end_name(index, top, path.endpoint, path.end_kind),
           "power_mw": round(1000 * parse_power(text), 3), "notes": []}
    heavy = [st for st in path.stages if st.load_pf > HIGH_LOAD_PF]
    if heavy:
        st = max(heavy, key=lambda x: x.delay_ns)
        inst = st.pin.rsplit("/", 1)[0]
        name = _end_name(index, top, inst, "cell")
        out["notes"].append(
            f"path has a heavily loaded stage: {st.pin} = {name} drives {st.load_pf:.1f} pF "
            f"({st.delay_ns:.1f} ns of {path.arrival_ns:.1f} ns, with the slow slew it gives "
            f"the next gate)")
    return out


# -- one top -------------------------------------------------------------------------------------

def _generated_verilog(top_name: str, config: KaleidoConfig) -> str:
    from kaleido_hw.flow.generate import TOPS, build_top, emit_verilog

    tops = {t.module: t for t in TOPS}
    if top_name not in tops:
        raise ValueError(f"top must be one of {', '.join(tops)} (or pass verilog=...), "
                         f"got {top_name!r}")
    return emit_verilog(build_top(tops[top_name], config), top_name)


def _ffs(types: dict[str, int], sequential: frozenset[str]) -> int:
    return sum(n for t, n in types.items() if t in sequential)


def _lib_cells(types: dict[str, int], cells: frozenset[str]) -> int:
    return sum(n for t, n in types.items() if t in cells)


#: A Verilog memory declaration (``reg [W-1:0] name [D-1:0];``): Amaranth writes every
#: ``amaranth.lib.memory`` instance as one.
MEMORY_DECLARATION = re.compile(r"^\s*reg\s+(\[[^\]]*\]\s+)?\S+\s+\[", re.M)


def _map_with_macros(top: str, work: Path, lib: Path, result: StdCellResult) -> Path:
    """Flat mapping of a top with memories: each memory becomes an SRAM macro
    (:mod:`kaleido_hw.flow.sram_macros`, the engine flow's density and timing) instead of
    flip-flops and read multiplexers, as an ASIC would build it; fills ``result.sram_um2``
    and ``sram_bits`` and writes ``work/buffered.json``. Returns the macros' Liberty file."""
    lib_text = lib.read_text()
    _, sequential = liberty_cells(lib_text)
    run_yosys(map_script(top, f"{top}.v", str(lib), flatten=True), work)
    memories = sram_macros.parse_memories((work / "mems.txt").read_text(), top)
    macro_lib = work / "sram_macros.lib"
    macro_text = sram_macros.macro_liberty(m.shape for m in memories)
    macro_lib.write_text(macro_text)
    run_yosys(sram_macros.macro_script(memories, top, str(lib), macro_lib.name), work)
    macro_cells, _ = liberty_cells(macro_text)
    buffered(work, lib_text + macro_text, sequential | macro_cells, json_in="macros.json",
             macros=macro_cells)
    result.sram_um2 = sum(sram_macros.macro_area_um2(m.shape) for m in memories)
    result.sram_bits = sum(m.shape.bits for m in memories)
    return macro_lib


def synth_stdcell(top_name: str, config: KaleidoConfig, *, units: bool = False,
                  verilog: str | None = None, keep: Path | None = None) -> StdCellResult:
    """Map ``top_name`` onto the standard cells, time it and estimate its power.

    ``verilog``: the Verilog source to use (any design whose top module is ``top_name`` and
    whose clock port is ``clk``); by default a fresh generation of the top from ``config``.
    ``units``: also the per-submodule breakdown (a second, hierarchical mapping). ``keep``: a
    folder that receives the Verilog, the scripts, the stat outputs and the netlist.
    Memories become SRAM macros (:func:`_map_with_macros`). A missing tool or a failed run
    gives a result with ``None`` figures and a note.
    """
    result = StdCellResult(top_name)
    why = stdcell_available()
    if why:
        result.notes.append(f"skipped: {why}")
        return result
    source = verilog if verilog is not None else _generated_verilog(top_name, config)
    lib = liberty_path()
    lib_text = lib.read_text()
    cells, sequential = liberty_cells(lib_text)
    with tempfile.TemporaryDirectory(prefix="kaleido-stdcell-") as tmp:
        work = Path(keep) if keep is not None else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        (work / f"{top_name}.v").write_text(source)
        try:
            netlist = work / f"{top_name}.net.v"
            libs = [lib]
            if MEMORY_DECLARATION.search(source):
                libs.append(_map_with_macros(top_name, work, lib, result))
            else:
                run_yosys(yosys_script(top_name, f"{top_name}.v", str(lib)), work)
                buffered(work, lib_text, sequential)
            run_yosys(finish_script(top_name, "buffered.json", [str(x) for x in libs],
                                    netlist_file=netlist.name), work)
            if len(libs) > 1:
                netlist.write_text(sram_macros.join_macro_clocks(netlist.read_text()))
            flat = parse_stat((work / "stat.txt").read_text())[top_name]
            result.area_um2 = flat.area_um2
            result.cells = _lib_cells(flat.types, cells)
            result.ffs = _ffs(flat.types, sequential)
            index = NetlistIndex(netlist.read_text(), cells, sequential)
            timing = time_netlist(top_name, netlist, libs, work, index=index)
            result.notes += timing.pop("notes")
            for key, value in timing.items():
                setattr(result, key, value)
            if units:
                result.units = _units(top_name, work, lib, cells, sequential)
        except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
            result.notes.append(f"failed: {e}")
    return result


#: Largest |sum of the units - hierarchical total| / total: yosys prints areas with six
#: decimals, so only rounding may differ.
UNIT_SUM_TOLERANCE = 1e-6


def _units(top: str, work: Path, lib: Path, cells: frozenset[str],
           sequential: frozenset[str]) -> list[StdCellUnit]:
    """The hierarchical map of ``top`` (already written to ``work/<top>.v``), one row per
    module, checked to sum to yosys' hierarchical total."""
    run_yosys(yosys_script(top, f"{top}.v", str(lib), flatten=False, json_file="hier.json"),
              work)
    buffered(work, lib.read_text(), sequential, json_in="hier.json", json_out="hier_buf.json")
    run_yosys(finish_script(top, "hier_buf.json", [str(lib)], stat_file="hier_stat.txt"), work)
    text = (work / "hier_stat.txt").read_text()
    stats = parse_stat(text)
    counts, total = parse_hierarchy(text)
    units = []
    for name, s in stats.items():
        n = counts.get(name, 1)
        path = "" if name == top else name[len(top) + 1:] if name.startswith(top + ".") else name
        units.append(StdCellUnit(path, n * (s.area_um2 or 0.0), n * _lib_cells(s.types, cells),
                                 n * _ffs(s.types, sequential)))
    got = sum(u.area_um2 for u in units)
    if total is None:       # a top without submodules: one unit, the whole top
        total = got
    if abs(got - total) > UNIT_SUM_TOLERANCE * max(total, 1.0):
        raise ValueError(f"{top}: the units' areas sum to {got:.1f} um2, yosys' hierarchical "
                         f"total is {total:.1f} um2")
    return units
