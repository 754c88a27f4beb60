"""Energy per event of the PEs, the 4 x 4 arrays and the dispatcher's MergeMatcher and
ClusterScheduler, measured on their gate-level netlists (``make energy``).

Method (``docs/energy.md``, section 1):

1. map the PE top onto the OSU 0.18 um cells (:func:`kaleido_hw.flow.stdcell.synth_stdcell`,
   the same flow as the area figures, so BaselinePE and ReusePE are built alike);
2. for each *event class* (:data:`EVENTS`), drive the netlist with a stream in which every
   cycle is that event, with operands taken from a synthetic attention head
   (:func:`golden.workloads.make_qkv`; Q values on the row ports, K values on the column
   port, channel by channel, the accumulator cleared every ``head_dim`` steps as a tile
   would), and simulate it at gate level (:mod:`kaleido_hw.flow.gate_sim`, zero delay);
3. price the window (:func:`event_energy`). Registers: OpenSTA with each register output's
   measured activity (toggles per cycle) and duty (fraction of time high), and each input
   port bit's (:func:`power_script`); the clock toggles twice a cycle
   (``create_clock``). Combinational cells: OpenSTA 2.0 ignores a pin activity inside
   combinational logic (it propagates its own from the registers and inputs), so each cell
   is priced from a *reference* run (:func:`reference_power`: every register output and
   input at activity 0.5): its reference power times (measured toggles / reference toggles)
   of its output nets, weighted by their load capacitance; the reference toggles follow
   from the reference switching power, ``P_sw = 1/2 C V^2 f a``. Switching power is then
   exactly ``1/2 C V^2`` per measured toggle; internal power is taken as proportional to
   output toggles (it also has a part from input edges that do not reach the output, which
   this misses);
4. energy of one event = that power x :data:`PERIOD_NS`: the whole PE for one cycle, clock
   and leakage included. ``clock`` (every input constant) is the floor a PE pays in a cycle
   in which it does nothing; the energy model (``golden/energy``) charges every PE-cycle
   the energy of its class. OpenSTA's own propagated estimate of each window is kept next
   to it (``sta_pj``) for comparison.

Zero-delay simulation: glitches are not counted (a lower bound on switching power). No wire
capacitance (nothing is placed) and an ideal clock net (no clock tree), as in the area flow.
A top with memories (the scheduler) keeps them as SRAM macros: simulated with behavioural
models (:func:`kaleido_hw.flow.sram_macros.macro_verilog`), linked as black boxes, not
powered (the energy model prices SRAM accesses itself).
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from golden.pe.model import BaselineCtrl, Code, Op, Part, PECtrl, Split
from golden.pe.modes import linear_words
from golden.workloads import make_qkv
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.flow.gate_sim import port_widths, simulate, toggle_counts
from kaleido_hw.flow.sram_macros import MACRO_NAME, macro_verilog
from kaleido_hw.flow.stdcell import (CLOCK_PORT, liberty_path, run_sta,
                                     stdcell_available, synth_stdcell)


__all__ = ["PERIOD_NS", "PE_TOPS", "ARRAY_TOPS", "ARRAY_PASS_STEPS", "array_stream", "MATCHER_TOPS", "MATCHER_BATCH_CYCLES", "matcher_stream", "SCHEDULER_TOPS", "scheduler_stream",
           "EVENTS", "EventEnergy", "operand_stream", "event_stream",
           "netlist_pins", "liberty_pin_caps", "parse_instance_power", "power_script",
           "parse_power_groups", "REFERENCE_ACTIVITY", "reference_power", "event_energy", "measure_top",
           "measure", "DATA_FILE", "DISPATCHER_FILE", "DISPATCHER_TOPS",
           "dispatcher_vectorless", "main"]

#: Clock period of the power runs (100 MHz, the area flow's): pJ per cycle = mW * 10.
PERIOD_NS = 10.0
#: The PE tops and the event classes measured on each.
PE_TOPS = ("baseline_pe", "kaleido_pe")
#: The 4 x 4 array tops (one event = one cycle of the whole array).
ARRAY_TOPS = ("baseline_array", "pe_array")
EVENTS = {
    "baseline_pe": ("mac", "idle", "drain", "clock"),
    "kaleido_pe": ("mul", "low", "low_pair", "linear", "idle", "drain", "clock"),
    "baseline_array": ("dense_step", "bubble", "clock"),
    "pe_array": ("dense_step", "reuse_step", "bubble", "clock"),
    "merge_matcher": ("match", "clock"),
    "cluster_scheduler": ("schedule", "clock"),
}
#: Dispatcher blocks measured at gate level.
MATCHER_TOPS = ("merge_matcher",)
#: The scheduler: its string queue and output banks are SRAM macros, simulated with
#: behavioural models (:func:`kaleido_hw.flow.sram_macros.macro_verilog`) and left out of the
#: power (the model prices SRAM accesses separately); its logic is measured like the others.
SCHEDULER_TOPS = ("cluster_scheduler",)
#: Cycles a matcher batch is held on the input (about the slots a 16-channel batch takes).
MATCHER_BATCH_CYCLES = 8
#: Channel steps per pass in the array streams (the chunk width W, ``sched_pattern_width``).
ARRAY_PASS_STEPS = 16
#: What each event class is (one cycle of one PE).
EVENT_DOCS = {
    "mac": "BaselinePE accumulates a0*b into R0 (the dense step)",
    "mul": "ReusePE MUL: the full 8x8 product a0*b into R0 (pass 0, dense word, follower byte)",
    "low": "ReusePE LOW: one low-nibble lane a0*lo(b) into R0 (a HALF code's remaining part)",
    "low_pair": "ReusePE LOW_PAIR: two channels in one step, a0*b[3:0] + a1*b[7:4] into R0",
    "linear": "ReusePE linear-mode anchor step: MUL split on the row, R0 takes the product, "
              "R1 takes it too where the follower's code shares it (random codes)",
    "idle": "no term taken (op IDLE / acc 0) while operands keep flowing through the PE",
    "drain": "drain chain shifting a 24-bit value through the PE, operands still",
    "clock": "every input constant: clock and leakage only",
    "dense_step": "array: one channel step of a dense quad pass on every row and column "
                  "(codes NONE, passes 0-3 of 16 steps, each pass's first step drains the "
                  "previous tile), the drain read-out included",
    "reuse_step": "array: as dense_step with every row's and column's follower code drawn "
                  "uniformly from FULL, HALF, NONE per channel (each PE decodes its share)",
    "bubble": "array: steps that issue nothing (issue 0), operands held",
    "match": "MergeMatcher: a new batch (C token ids, C x M codes uniform over FULL, HALF, "
             "NONE) offered every 8 cycles, input valid and output ready always high",
    "schedule": "ClusterScheduler: one entry per cycle in (token id, the W-channel work "
                "pattern of a hunyuanvideo token's follower codes) and out, input valid and "
                "output ready always high; its SRAM macros not included",
}
#: Where ``make energy`` stores the result (with the command that made it).
DATA_FILE = Path(__file__).resolve().parents[2] / "golden" / "energy" / "data" / "pe_events.json"
#: Where the dispatcher blocks' per-cycle energy goes.
DISPATCHER_FILE = DATA_FILE.with_name("dispatcher.json")
#: The dispatcher blocks whose vectorless estimate is stored beside the gate-level figures
#: (:data:`MATCHER_TOPS`, :data:`SCHEDULER_TOPS`), which are the ones the model uses.
DISPATCHER_TOPS = ("cluster_scheduler", "merge_matcher")


@dataclass
class EventEnergy:
    """One event class on one top: power split as OpenSTA reports it, and pJ per cycle."""
    top: str
    event: str
    internal_mw: float
    switching_mw: float
    leakage_mw: float
    total_mw: float
    pj: float                 # total_mw * PERIOD_NS
    toggles_per_cycle: float  # sum over net bits of toggles / cycles
    sta_pj: float             # OpenSTA's own estimate (combinational activity propagated)
    fallback_cells: int       # combinational cells priced by OpenSTA's propagation

    def as_dict(self) -> dict:
        """JSON-ready."""
        return dict(self.__dict__)


def operand_stream(cycles: int, head_dim: int = 128, seed: int = 0, preset: str = "hunyuanvideo",
                   grid: str = "2x4x4") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(a0, a1, b)`` int arrays of ``cycles`` operands from a synthetic head: ``a0`` walks
    query token i's channels, ``a1`` token i+1's (the second row token), ``b`` key token j's,
    over the token pairs (i, j) in order."""
    q, k, _ = make_qkv(preset, grid, seed=seed)
    n, d = q.shape
    d = min(d, head_dim)
    pairs = -(-cycles // d)
    i = np.arange(pairs) % n
    j = (np.arange(pairs) * 7 + 3) % n
    a0 = q[i, :d].reshape(-1)[:cycles]
    a1 = q[(i + 1) % n, :d].reshape(-1)[:cycles]
    b = k[j, :d].reshape(-1)[:cycles]
    return a0.astype(int), a1.astype(int), b.astype(int)


def _u8(x) -> int:
    return int(x) & 0xFF


def _pack_fields(fields) -> int:
    """(value, width) pairs, first at bit 0 (``amaranth.lib.data`` order)."""
    word, pos = 0, 0
    for value, width in fields:
        word |= (int(value) & ((1 << width) - 1)) << pos
        pos += width
    return word


def array_stream(event: str, cycles: int, rows: int = 4, cols: int = 4, seed: int = 0
                 ) -> list[dict]:
    """``cycles`` input words of a 4 x 4 array top (``row``, ``col``, ``tag``; the layouts
    of ``kaleido_hw.array.layouts``: a row is a [0:8], qc [8:10], valid [10], pass_idx
    [11:13], first [13], issue [14]; a column b [0:8], kc [8:10], valid [10]) in which every
    cycle is ``event`` (``dense_step``, ``reuse_step``, ``bubble``, ``clock``)."""
    allowed = ("dense_step", "reuse_step", "bubble", "clock")
    if event not in allowed:
        raise ValueError(f"event of an array must be one of {', '.join(allowed)}, "
                         f"got {event!r}")
    q, k, _ = make_qkv("hunyuanvideo", "2x4x4", seed=seed)
    n, d = q.shape
    rng = np.random.default_rng(seed + 2)
    out = []
    for c in range(cycles):
        if event == "clock":
            out.append({})
            continue
        held = event == "bubble"          # nothing issued, nothing moves on the ports
        step, ch = (0, 1) if held else (c // ARRAY_PASS_STEPS, c % ARRAY_PASS_STEPS)
        pass_idx, first = step % 4, int(ch == 0)
        chan = 0 if held else (c * 5) % d
        issue = 0 if held else 1
        row_word = col_word = 0
        for r in range(rows):
            qc = Code.NONE if event != "reuse_step" else int(rng.integers(0, 3))
            a = q[(step * rows + r) % n, chan]
            row_word |= _pack_fields(((a, 8), (qc, 2), (1, 1), (pass_idx, 2),
                                      (first, 1), (issue, 1))) << (15 * r)
        for j in range(cols):
            kc = Code.NONE if event != "reuse_step" else int(rng.integers(0, 3))
            b = k[(step * cols + j + 7) % n, chan]
            col_word |= _pack_fields(((b, 8), (kc, 2), (1, 1))) << (11 * j)
        out.append({"row": row_word, "col": col_word, "tag": step & 0xFF})
    return out


def matcher_stream(event: str, cycles: int, config: KaleidoConfig | None = None,
                   seed: int = 0) -> list[dict]:
    """``cycles`` input words of ``merge_matcher`` (``i__valid``, ``i__payload``: C token
    ids of ``token_id_width`` bits, then the 2-bit codes token-major; ``o__ready``) in which
    every cycle is ``event`` (``match`` or ``clock``)."""
    if event not in ("match", "clock"):
        raise ValueError(f"event of merge_matcher must be one of match, clock, got {event!r}")
    cfg = config or KaleidoConfig()
    C, M, T = cfg.cols, cfg.matcher_channels, cfg.token_id_width
    rng = np.random.default_rng(seed + 3)
    out, payload = [], 0
    for c in range(cycles):
        if event == "clock":
            out.append({})
            continue
        if c % MATCHER_BATCH_CYCLES == 0:
            tokens = rng.integers(0, 1 << T, C)
            codes = rng.integers(0, 3, C * M)
            payload = _pack_fields([(t, T) for t in tokens] + [(x, 2) for x in codes])
        out.append({"i__valid": 1, "i__payload": payload, "o__ready": 1})
    return out


def scheduler_stream(event: str, cycles: int, config: KaleidoConfig | None = None,
                     seed: int = 0) -> list[dict]:
    """``cycles`` input words of ``cluster_scheduler`` (``i__valid``, ``i__payload``: token id
    of ``token_id_width`` bits, then the W-bit pattern, bit j = channel j has work;
    ``o__ready``) in which every cycle is ``event`` (``schedule`` or ``clock``). The patterns
    are a hunyuanvideo head's: per token, channel j of a W-channel chunk of its y group has
    work unless its follower code is FULL."""
    if event not in ("schedule", "clock"):
        raise ValueError(f"event of cluster_scheduler must be one of schedule, clock, got "
                         f"{event!r}")
    from golden.numerics import FULL, ChannelGroups, reuse_masks

    cfg = config or KaleidoConfig()
    T, W = cfg.token_id_width, cfg.sched_pattern_width
    q, _, _ = make_qkv("hunyuanvideo", "4x8x8", seed=seed)
    groups = ChannelGroups.from_preset("hunyuanvideo")
    codes = reuse_masks(q, "4x8x8", groups)
    chans = np.flatnonzero(np.asarray(groups.group_of) == 1)[:W]
    work = codes[:, chans] != FULL                                   # (N, W)
    patterns = (work.astype(np.int64) << np.arange(W)).sum(axis=1)
    out = []
    for c in range(cycles):
        if event == "clock":
            out.append({})
            continue
        tok = c % patterns.size
        out.append({"i__valid": 1, "i__payload": (tok % (1 << T)) | (int(patterns[tok]) << T),
                    "o__ready": 1})
    return out


def event_stream(top: str, event: str, cycles: int, head_dim: int = 128, seed: int = 0,
                 acc_width: int = 24) -> list[dict]:
    """``cycles`` input words (``{port: int}``) of ``top`` in which every cycle is ``event``."""
    if top not in EVENTS:
        raise ValueError(f"top must be one of {', '.join(EVENTS)}, got {top!r}")
    if event not in EVENTS[top]:
        raise ValueError(f"event of {top} must be one of {', '.join(EVENTS[top])}, "
                         f"got {event!r}")
    if top in ARRAY_TOPS:
        return array_stream(event, cycles, seed=seed)
    if top in MATCHER_TOPS:
        return matcher_stream(event, cycles, seed=seed)
    if top in SCHEDULER_TOPS:
        return scheduler_stream(event, cycles, seed=seed)
    a0, a1, b = operand_stream(cycles, head_dim, seed)
    rng = np.random.default_rng(seed + 1)
    drain_data = rng.integers(-(1 << (acc_width - 1)), 1 << (acc_width - 1), cycles)
    codes = rng.choice([Code.FULL, Code.HALF, Code.NONE], cycles)
    anchor = linear_words(2).anchor
    out = []
    for c in range(cycles):
        first = c % head_dim == 0
        if event == "clock":
            out.append({})
            continue
        if event == "drain":
            out.append({"drain_in__valid": 1, "drain_in__data": int(drain_data[c])})
            continue
        if top == "baseline_pe":
            ctrl = BaselineCtrl(acc=int(event == "mac"), clear=int(first and event == "mac"))
            out.append({"row__a0": _u8(a0[c]), "col__b": _u8(b[c]), "row__ctrl": ctrl.pack()})
            continue
        word = {"row__a0": _u8(a0[c]), "col__b": _u8(b[c])}
        clear = 0b001 if first else 0
        if event == "mul":
            ctrl = PECtrl(Op.MUL, Split.COL, (Part.PROD, Part.NONE, Part.NONE), clear)
        elif event == "low":
            ctrl = PECtrl(Op.LOW, Split.COL, (Part.LOW, Part.NONE, Part.NONE), clear)
        elif event == "low_pair":
            word["row__a1"] = _u8(a1[c])
            word["col__b"] = (int(b[c]) & 0xF) | ((int(a1[(c + 1) % cycles]) & 0xF) << 4)
            ctrl = PECtrl(Op.LOW_PAIR, Split.COL, (Part.PROD, Part.NONE, Part.NONE), clear)
        elif event == "linear":
            ctrl = anchor.resolve(qc0=int(codes[c])).with_(clear=0b011 if first else 0)
        else:   # idle
            ctrl = PECtrl()
        word["row__ctrl"] = ctrl.pack()
        out.append(word)
    return out


_INSTANCE = re.compile(r"^  (\w+) +(\\\S+ |\w+) *\((.*?)\);", re.M | re.S)
_CONN = re.compile(r"\.(\w+)\(([^()]*)\)")


def _net_key(expr: str):
    """``(net, bit)`` of a netlist connection (``name``, ``name[3]``, ``\\esc``, ``\\esc [3]``;
    an escaped name runs to the first blank, as in Verilog); None for a constant."""
    expr = expr.strip()
    if not expr or expr[0].isdigit() or "'" in expr:
        return None
    if expr.startswith("\\"):
        name, _, rest = expr[1:].partition(" ")
        m = re.fullmatch(r"\s*(?:\[(\d+)\])?", rest)
        if m is None:
            raise ValueError(f"unexpected connection {expr!r} in the netlist")
        return name, int(m.group(1)) if m.group(1) else None
    m = re.fullmatch(r"([\w$.]+)\s*(?:\[(\d+)\])?", expr)
    if m is None:
        raise ValueError(f"unexpected connection {expr!r} in the netlist")
    return m.group(1), int(m.group(2)) if m.group(2) else None


def netlist_pins(netlist: str, top: str) -> list[tuple[str, str, list]]:
    """``[(cell type, instance, [(pin, (net, bit) or None)])]`` of module ``top`` of a
    ``write_verilog`` netlist (None: a constant). An SRAM macro is listed without its pins:
    it is a black box here (no load, no power; the model prices SRAM accesses itself)."""
    m = re.search(rf"^module {re.escape(top)}\s*\(.*?^endmodule", netlist, re.M | re.S)
    if m is None:
        raise ValueError(f"module {top!r} not found in the netlist")
    return [(kind, inst.lstrip("\\").strip(),
             [] if MACRO_NAME.fullmatch(kind) else
             [(pin, _net_key(e)) for pin, e in _CONN.findall(body)])
            for kind, inst, body in _INSTANCE.findall(m.group(0))]


_LIB_CELL = re.compile(r"^\s*cell\s*\(\s*\"?([^\s\")]+)\"?\s*\)\s*\{", re.M)
_LIB_PIN = re.compile(r"pin\s*\(\s*\"?(\w+)\"?\s*\)\s*\{\s*direction\s*:\s*(\w+)\s*;"
                      r"\s*capacitance\s*:\s*([\d.eE+-]+)", re.S)


def liberty_pin_caps(text: str) -> dict[str, dict[str, tuple[str, float]]]:
    """``{cell: {pin: (direction, capacitance pF)}}`` of a Liberty file's text."""
    starts = [(mm.start(), mm.group(1)) for mm in _LIB_CELL.finditer(text)]
    out = {}
    for i, (pos, name) in enumerate(starts):
        body = text[pos:starts[i + 1][0] if i + 1 < len(starts) else len(text)]
        out[name] = {p: (d, float(c)) for p, d, c in _LIB_PIN.findall(body)}
    return out


_VOLTAGE = re.compile(r"nom_voltage\s*:\s*([\d.]+)")
_INST_POWER = re.compile(r"^\s*([\d.eE+-]+)\s+([\d.eE+-]+)\s+([\d.eE+-]+)\s+([\d.eE+-]+)\s+(\S+)\s*$",
                         re.M)


def parse_instance_power(text: str) -> dict[str, tuple[float, float, float]]:
    """``report_power -instances`` -> ``{instance: (internal, switching, leakage)}`` in W."""
    return {m.group(5): (float(m.group(1)), float(m.group(2)), float(m.group(3)))
            for m in _INST_POWER.finditer(text)}


def power_script(top: str, netlist: str, liberty, pins: dict, ports: dict, *,
                 default_input: float = 0.0, period_ns: float = PERIOD_NS,
                 clock: str = CLOCK_PORT) -> str:
    """OpenSTA script: the netlist, the clock, the activity (toggles per cycle, duty) of the
    given register-output ``pins`` and input port bits ``ports`` (others:
    ``default_input``), then the power of every instance.

    OpenSTA 2.0 uses a pin's own activity only where its propagation starts (input ports
    and register outputs); inside combinational logic it computes every activity from the
    cell inputs', whatever a pin was given (checked on this build), which is why
    :func:`event_energy` prices combinational cells itself. Its ``set_power_activity -pins``
    calls a Tcl helper this build lacks (``invalid command name "get_pins_error"``), so pins
    are annotated with what it would run, ``sta::set_power_pin_activity``; and a
    ``-global`` activity would override every pin's, so none is set."""
    libs = [liberty] if isinstance(liberty, (str, Path)) else list(liberty)
    lines = [f"read_liberty {lib}" for lib in libs]
    lines += [f"read_verilog {netlist}", f"link_design {top}",
             f"create_clock -name {clock} -period {period_ns:g} [get_ports {clock}]",
             f"set_power_activity -input -activity {default_input:g} -duty 0.5"]
    groups: dict = {}
    for pin, (a, d) in pins.items():
        groups.setdefault((round(a, 6), round(d, 4)), []).append(pin)
    for (a, d), names in sorted(groups.items()):
        for i in range(0, len(names), 200):
            lines.append(f"foreach p [get_pins {{{' '.join(names[i:i + 200])}}}] "
                         f"{{ sta::set_power_pin_activity $p {a:g} {d:g} }}")
    for port, (a, d) in sorted(ports.items()):
        lines.append(f"set_power_activity -input_ports [get_ports {{{port}}}] "
                     f"-activity {a:g} -duty {d:g}")
    lines += ["report_power -digits 6", "report_power -instances [get_cells *] -digits 6"]
    return "\n".join(lines) + "\n"


def parse_power_groups(text: str) -> tuple[float, float, float, float]:
    """``report_power`` -> (internal, switching, leakage, total) of the ``Total`` row, W."""
    m = re.search(r"^Total\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)", text, re.M)
    if m is None:
        raise ValueError("no 'Total' row in the OpenSTA power report")
    return tuple(float(x) for x in m.groups())


@dataclass
class _Design:
    """What :func:`event_energy` needs of a netlist: its cells' pins and their nets, the
    load of every net, and OpenSTA's per-instance power at the reference activity."""
    top: str
    netlist: Path
    instances: list
    cells: dict
    sequential: frozenset
    loads: dict
    voltage: float
    input_ports: frozenset = frozenset()
    reference: dict = None
    macro_liberties: tuple = ()      # black-box SRAM macros: linked, not powered


def _design(top: str, netlist: Path, liberty: Path, macro_liberties=()) -> _Design:
    from kaleido_hw.flow.stdcell import liberty_cells

    lib_text = liberty.read_text()
    cells = liberty_pin_caps(lib_text)   # macros need none: netlist_pins lists them pinless
    _, sequential = liberty_cells(lib_text)
    instances = netlist_pins(netlist.read_text(), top)
    loads: dict = {}
    for kind, _inst, conns in instances:
        for pin, key in conns:
            d, c = cells[kind].get(pin, ("input", 0.0))
            if key is not None and d == "input":
                loads[key] = loads.get(key, 0.0) + c
    voltage = float(_VOLTAGE.search(lib_text).group(1))
    inputs = frozenset(p for p, (d, _) in port_widths(netlist.read_text(), top).items()
                       if d == "input" and p != CLOCK_PORT)
    return _Design(top, netlist, instances, cells, sequential, loads, voltage, inputs,
                   macro_liberties=tuple(str(x) for x in macro_liberties))


def _register_pins(design: _Design, activity: dict | None, cycles: int, value=None) -> dict:
    """``{"inst/Q": (activity, duty)}`` of every register output: measured, or ``value``."""
    out = {}
    for kind, inst, conns in design.instances:
        if kind not in design.sequential:
            continue
        for pin, key in conns:
            if design.cells[kind].get(pin, ("",))[0] != "output" or key is None:
                continue
            if value is not None:
                out[f"{inst}/{pin}"] = value
            else:
                a = activity[key]
                out[f"{inst}/{pin}"] = (a.toggles / cycles, a.high)
    return out


#: Activity and duty of every propagation start in the reference run (the per-toggle
#: energy of each combinational cell is read off it).
REFERENCE_ACTIVITY = (0.5, 0.5)


def _run_power(design: _Design, liberty: Path, pins: dict, ports: dict, work: Path,
               default_input: float) -> tuple[tuple, dict]:
    script = power_script(design.top, str(design.netlist.resolve()),
                          [str(liberty), *design.macro_liberties], pins, ports,
                          default_input=default_input)
    text = run_sta(script, work)
    return parse_power_groups(text), parse_instance_power(text)


def reference_power(design: _Design, liberty: Path, work: Path) -> dict:
    """OpenSTA's per-instance power with every input and register output at
    :data:`REFERENCE_ACTIVITY` (its propagation gives nearly every net a non-zero activity)."""
    work.mkdir(parents=True, exist_ok=True)
    _, inst = _run_power(design, liberty, _register_pins(design, None, 1, REFERENCE_ACTIVITY),
                         {}, work, REFERENCE_ACTIVITY[0])
    design.reference = inst
    return inst


def event_energy(design: _Design, liberty: Path, activity: dict, cycles: int, work: Path
                 ) -> dict:
    """Power (W) of one measured window, in three parts:

    - registers: OpenSTA with their measured output activity (and every input port bit's),
      clock pins toggling twice a cycle: internal + switching + leakage of the register
      cells, as reported;
    - combinational cells: per cell, its reference power (:func:`reference_power`) scaled by
      measured / reference toggles of its output nets, weighted by their load capacitance.
      The reference toggles come from the reference switching power
      (``P_sw = 1/2 C V^2 f a``); a cell whose outputs have no load (they drive ports only)
      or no reference activity keeps OpenSTA's propagated figure of this window;
    - leakage of all cells.

    Returns ``{"internal", "switching", "leakage", "total", "sta_total", "fallback_cells",
    "comb_switching"}`` (``sta_total``: OpenSTA's own propagated estimate of the window, for
    comparison; ``comb_switching``: the part of ``switching`` of the scaled combinational
    cells)."""
    freq = 1e9 / PERIOD_NS
    ports = {f"{n}[{b}]" if b is not None else n: (a.toggles / cycles, a.high)
             for (n, b), a in activity.items()
             if n in design.input_ports}
    groups, inst = _run_power(design, liberty, _register_pins(design, activity, cycles), ports,
                              work, 0.0)
    ref = design.reference
    internal = switching = leakage = comb_switching = 0.0
    fallback = 0
    half_cv2f = 0.5 * design.voltage ** 2 * freq * 1e-12     # W per (pF x toggle/cycle)
    for kind, name, conns in design.instances:
        i_int, i_sw, i_leak = inst.get(name, (0.0, 0.0, 0.0))
        leakage += i_leak
        if kind in design.sequential:
            internal += i_int
            switching += i_sw
            continue
        outs = [key for pin, key in conns
                if key is not None and design.cells[kind].get(pin, ("",))[0] == "output"]
        load = sum(design.loads.get(k, 0.0) for k in outs)
        r_int, r_sw, _ = ref.get(name, (0.0, 0.0, 0.0))
        ref_toggles = r_sw / half_cv2f if load > 0 else 0.0          # sum over outputs of C*a
        if load <= 0 or ref_toggles <= 0:
            internal += i_int
            switching += i_sw
            fallback += 1
            continue
        measured = sum(design.loads.get(k, 0.0) * activity[k].toggles / cycles for k in outs)
        scale = measured / ref_toggles
        internal += r_int * scale
        switching += r_sw * scale
        comb_switching += r_sw * scale
    return {"internal": internal, "switching": switching, "leakage": leakage,
            "total": internal + switching + leakage, "sta_total": groups[3],
            "fallback_cells": fallback, "comb_switching": comb_switching}


def measure_top(top: str, events=None, cycles: int = 512, warmup: int = 16, seed: int = 0,
                config: KaleidoConfig | None = None, work: Path | None = None,
                progress=None) -> list[EventEnergy]:
    """:class:`EventEnergy` of every event class (default all of ``EVENTS[top]``) of ``top``
    (see the module docstring). ``work`` keeps the netlist, dumps and scripts."""
    if top not in EVENTS:
        raise ValueError(f"top must be one of {', '.join(EVENTS)}, got {top!r}")
    events = list(events or EVENTS[top])
    for e in events:
        if e not in EVENTS[top]:
            raise ValueError(f"events of {top} must be among {', '.join(EVENTS[top])}, "
                             f"got {e!r}")
    if cycles <= warmup:
        raise ValueError(f"cycles must exceed warmup = {warmup}, got {cycles}")
    why = stdcell_available()
    if why:
        raise RuntimeError(why)
    config = config or KaleidoConfig()
    liberty = liberty_path()
    with tempfile.TemporaryDirectory(prefix="kaleido-energy-") as tmp:
        base = Path(work) if work is not None else Path(tmp)
        synth = synth_stdcell(top, config, keep=base / top)
        if synth.area_um2 is None:
            raise RuntimeError(f"{top}: synthesis failed: {'; '.join(synth.notes)}")
        netlist = base / top / f"{top}.net.v"
        text = netlist.read_text()
        macros = []
        if MACRO_NAME.search(text):
            (base / top / "macros.v").write_text(macro_verilog(text))
            macros = [base / top / "macros.v"]
        design = _design(top, netlist, liberty,
                         [base / top / "sram_macros.lib"] if macros else ())
        reference_power(design, liberty, base / top / "reference")
        out = []
        for event in events:
            run = base / top / event
            stream = event_stream(top, event, cycles + warmup, seed=seed,
                                  acc_width=config.acc_width)
            vcd = simulate(netlist, top, stream, run, warmup=warmup, extra_sources=macros)
            activity, _ = toggle_counts(vcd)
            p = event_energy(design, liberty, activity, cycles, run)
            toggles = sum(a.toggles for (n, _), a in activity.items()
                          if n != CLOCK_PORT and not n.endswith(".clk"))
            out.append(EventEnergy(top, event, 1e3 * p["internal"], 1e3 * p["switching"],
                                   1e3 * p["leakage"], 1e3 * p["total"],
                                   1e3 * p["total"] * PERIOD_NS, toggles / cycles,
                                   1e3 * p["sta_total"] * PERIOD_NS, p["fallback_cells"]))
            if progress:
                progress(top, event)
    return out


def measure(tops=PE_TOPS + ARRAY_TOPS + MATCHER_TOPS + SCHEDULER_TOPS, cycles: int = 2048,
            array_cycles: int = 512,
            seed: int = 0, work: Path | None = None, progress=None) -> dict:
    """Every event of every top in ``tops`` (``cycles`` measured cycles per PE event,
    ``array_cycles`` per array event): ``{"period_ns", "cycles", "array_cycles", "seed",
    "liberty", "docs", "events": {top: {event: EventEnergy.as_dict()}}}``."""
    unknown = [t for t in tops if t not in EVENTS]
    if unknown:
        raise ValueError(f"tops must be among {', '.join(EVENTS)}, got {unknown}")
    res = {"period_ns": PERIOD_NS, "cycles": cycles, "array_cycles": array_cycles,
           "seed": seed, "liberty": str(liberty_path()), "docs": EVENT_DOCS, "events": {}}
    for top in tops:
        n = array_cycles if top in ARRAY_TOPS else cycles
        res["events"][top] = {e.event: e.as_dict()
                              for e in measure_top(top, cycles=n, seed=seed, work=work,
                                                   progress=progress)}
    return res


def dispatcher_vectorless(config: KaleidoConfig | None = None) -> dict:
    """Per-cycle energy of the dispatcher blocks from the area flow's vectorless power
    (:func:`kaleido_hw.flow.stdcell.synth_stdcell`: every net toggling with probability
    ``SWITCHING_ACTIVITY`` per cycle at 100 MHz; SRAM macros carry no power model, so the
    scheduler's memories are not in it): ``{"method", "blocks": {top: {"power_mw",
    "pj_per_cycle", "area_um2", "sram_bits"}}}``."""
    from kaleido_hw.flow.stdcell import CLOCK_PERIOD_NS, SWITCHING_ACTIVITY

    config = config or KaleidoConfig()
    blocks = {}
    for top in DISPATCHER_TOPS:
        r = synth_stdcell(top, config)
        if r.power_mw is None:
            raise RuntimeError(f"{top}: synthesis failed: {'; '.join(r.notes)}")
        blocks[top] = {"power_mw": r.power_mw, "pj_per_cycle": r.power_mw * CLOCK_PERIOD_NS,
                       "area_um2": r.area_um2, "sram_bits": r.sram_bits}
    return {"method": f"OpenSTA vectorless, activity {SWITCHING_ACTIVITY:g} per cycle on "
                      f"every net, {CLOCK_PERIOD_NS:g} ns clock; SRAM macros not powered",
            "blocks": blocks}


def main(argv=None) -> int:
    """``python -m kaleido_hw.flow.gate_energy [--cycles N] [--array-cycles N] [--out FILE]``:
    measure every event of both PEs, both 4 x 4 arrays, the MergeMatcher and the ClusterScheduler and write the JSON (default
    :data:`DATA_FILE`) with the command; the dispatcher blocks' vectorless figures go to
    :data:`DISPATCHER_FILE`."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m kaleido_hw.flow.gate_energy",
                                description="per-event energy of the PEs from gate-level "
                                            "toggle counts and OpenSTA")
    p.add_argument("--cycles", type=int, default=2048, help="measured cycles per PE event")
    p.add_argument("--array-cycles", type=int, default=512,
                   help="measured cycles per event of the 4x4 arrays")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(DATA_FILE), help="PE table (JSON)")
    p.add_argument("--dispatcher-out", default=str(DISPATCHER_FILE),
                   help="dispatcher blocks' per-cycle energy (JSON)")
    p.add_argument("--only", choices=("pe", "dispatcher"), default=None,
                   help="measure only the PEs or only the dispatcher blocks")
    a = p.parse_args(argv)
    command = "python -m kaleido_hw.flow.gate_energy " + " ".join(
        sys.argv[1:] if argv is None else argv)
    if a.only != "pe":
        disp = dispatcher_vectorless()
        disp["command"] = command
        Path(a.dispatcher_out).write_text(json.dumps(disp, indent=1) + "\n")
        for top, d in disp["blocks"].items():
            print(f"{top:18s} {d['pj_per_cycle']:8.1f} pJ/cycle (vectorless)")
    if a.only == "dispatcher":
        return 0
    res = measure(cycles=a.cycles, array_cycles=a.array_cycles, seed=a.seed,
                  progress=lambda t, e: print(f"{t} {e}", file=sys.stderr))
    res["command"] = command
    Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    for top, ev in res["events"].items():
        for e, d in ev.items():
            print(f"{top:14s} {e:10s} {d['pj']:8.3f} pJ/cycle  ({d['toggles_per_cycle']:.1f} "
                  f"net toggles/cycle)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
