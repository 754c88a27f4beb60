"""Energy of one attention head (Q @ K^T) on the engine: counters x per-event energies.

Inputs
    * the engine counters of a run (``golden.engine.model.EngineCounters.totals()``, or the
      stored paper-scale ones of ``data/paper_counters.json``);
    * the per-event energies of the PEs measured on their gate-level netlists
      (``data/pe_events.json``, ``make energy``, :mod:`kaleido_hw.flow.gate_energy`), as
      measured on the stand-alone PE (``calibration="pe"``) or rescaled so that 16 of them
      match the measured 4 x 4 array's dense step and idle cycle (``"array"``: decoders,
      skew registers and drain read-out included, operands arriving from neighbours);
    * the MergeMatcher's energy per cycle, issuing or idle, and the ClusterScheduler's
      while it streams entries, measured the same way (its SRAM macros left out: the SRAM
      traffic is priced below);
    * per-byte SRAM and DRAM energies from published figures (:mod:`golden.energy.memory`).

PE-cycles (every PE of every array, every cycle, gets exactly one class)
    ``busy_pe_cycles`` take a term: LOW_PAIR for the PE-cycles that carry two channels (the
    busy PE-cycles the matcher saves against the same run without it), LOW for the head's
    other low-nibble steps (counted apart by :mod:`golden.energy.op_mix`; the counters do
    not say), MUL for the rest. The
    other PE-cycles of issued steps see operands flow by without taking a term ("idle");
    bubble steps and array-idle cycles have still inputs ("clock"). Each tile's R x C
    results shift out through the drain chain, (R + 1) / 2 PEs on average: that many
    "drain - clock" increments per result. Dense on plain arrays uses BaselinePE's classes
    (``mac`` for ``mul``), with the same counters.

Dispatcher
    One ClusterScheduler (the Q side's; two with ``sched_sides = "qk"``, ``HeadShape.schedulers``)
    with the scheduler, each at its gate-level energy
    of a streaming cycle every engine cycle (an upper bound: a scheduler streams only during
    a chunk's pre-pass); one MergeMatcher per array
    with the matcher, measured at gate level (``pe_events.json``): a slot-issuing cycle per
    pass-3 step (``issued[3]``), a clock-only cycle otherwise.

Memory traffic
    SRAM: every issued step reads R row and C column operand bytes (plus 2-bit reuse codes
    when reuse is on; a merged slot adds the second row byte); every quad writes its 4 tiles
    of R x C 24-bit partial results to the accumulation buffer and reads them back once to
    sum the chunk planes. DRAM: Q and K (N x d bytes each) are read once when both fit in
    the on-chip buffer; otherwise Q is held in buffer halves and K streamed once per half.
    S stays on chip (the vector unit consumes it; its energy is not counted here).

Plain numpy; no hardware imports.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from golden.energy.memory import dram_pj_per_byte, sram_pj_per_byte


__all__ = ["DATA", "VARIANTS", "COMPONENTS", "CALIBRATIONS", "Energies", "load_energies", "HeadShape",
           "head_energy", "dram_bytes", "linear_energy", "PAPER_BUFFER_BYTES"]

DATA = Path(__file__).resolve().parent / "data"
#: Variants of the model: the engine's five on ReusePE arrays, and dense on plain arrays.
VARIANTS = ("dense-plain", "dense", "pe", "pe-sh", "pe-m", "full")
#: Components of the breakdown, in report order.
COMPONENTS = ("pe", "dispatcher", "sram", "dram")
#: The paper's on-chip buffer (Sec. 7: 96 MB).
PAPER_BUFFER_BYTES = 96 * 2 ** 20
_FLAGS = {"dense-plain": (False, False, False), "dense": (False, False, False),
          "pe": (True, False, False), "pe-sh": (True, True, False),
          "pe-m": (True, False, True), "full": (True, True, True)}


@dataclass(frozen=True)
class Energies:
    """pJ per event: ``reuse`` and ``plain`` PE classes, dispatcher blocks per cycle, SRAM
    and DRAM per byte."""
    reuse: dict
    plain: dict
    scheduler_pj: float
    matcher_pj: float               # a MergeMatcher cycle that issues a slot
    sram_pj_per_byte: float
    dram_pj_per_byte: float
    calibration: str = "pe"
    arrays: dict | None = None      # {"reuse"|"plain": {array event: pJ per array-cycle}}
    matcher_idle_pj: float | None = None   # a MergeMatcher cycle without a slot (None: = busy)


#: How the PE classes are priced: as measured on the stand-alone PE, or scaled so that a
#: dense step of 16 PEs and an idle cycle match the measured 4 x 4 array (decoders, skew
#: registers and drain read-out included).
#: ``array-step`` prices whole array steps instead of PE classes: every issued step at the
#: measured array's dense step (dense variants) or mixed-code step (reuse variants: codes
#: uniform over FULL/HALF/NONE, not the head's mix), bubbles and idle cycles at its clock.
CALIBRATIONS = ("pe", "array", "array-step")
#: PEs of the measured arrays (``pe_array``, ``baseline_array`` at the default 4 x 4).
ARRAY_PES = 16


def _array_calibrated(pe: dict, array: dict, active: str, pes: int) -> dict:
    """PE classes rescaled to an array's measurement: the clock floor becomes the array's
    clock / ``pes``; every class's part above the clock floor is scaled by the array's
    (dense step - clock) / (``pes`` x (PE ``active`` - PE clock))."""
    k = (array["dense_step"] - array["clock"]) / (pes * (pe[active] - pe["clock"]))
    floor = array["clock"] / pes
    return {name: floor + k * (v - pe["clock"]) for name, v in pe.items()}


def load_energies(data: Path = DATA, sram_size: str = "1MB", node_nm: int = 180,
                  calibration: str = "pe") -> Energies:
    """The stored measurements (``pe_events.json``, ``dispatcher.json``) and the published
    memory figures (:mod:`golden.energy.memory`); ``calibration`` one of
    :data:`CALIBRATIONS`."""
    if calibration not in CALIBRATIONS:
        raise ValueError(f"calibration must be one of {', '.join(CALIBRATIONS)}, "
                         f"got {calibration!r}")
    ev = json.loads((Path(data) / "pe_events.json").read_text())["events"]
    disp = json.loads((Path(data) / "dispatcher.json").read_text())["blocks"]
    reuse = {k: v["pj"] for k, v in ev["kaleido_pe"].items()}
    plain = {k: v["pj"] for k, v in ev["baseline_pe"].items()}
    arrays = {"reuse": {k: v["pj"] for k, v in ev["pe_array"].items()},
              "plain": {k: v["pj"] for k, v in ev["baseline_array"].items()}}
    if calibration == "array":
        pes = ARRAY_PES
        reuse = _array_calibrated(reuse, {k: v["pj"] for k, v in ev["pe_array"].items()},
                                  "mul", pes)
        plain = _array_calibrated(plain, {k: v["pj"] for k, v in ev["baseline_array"].items()},
                                  "mac", pes)
    matcher = {k: v["pj"] for k, v in ev["merge_matcher"].items()}
    # The gate-level figure where measured, else the vectorless estimate.
    scheduler = (ev["cluster_scheduler"]["schedule"]["pj"] if "cluster_scheduler" in ev
                 else disp["cluster_scheduler"]["pj_per_cycle"])
    return Energies(reuse, plain, scheduler, matcher["match"],
                    sram_pj_per_byte(sram_size, node_nm), dram_pj_per_byte(), calibration,
                    arrays, matcher["clock"])


@dataclass(frozen=True)
class HeadShape:
    """Shape of the head and of the engine: N tokens of d channels, P arrays of R x C,
    ``schedulers`` ClusterSchedulers (1: the Q side's, ``sched_sides = "q"``; 2: both
    sides')."""
    tokens: int
    head_dim: int
    arrays: int
    rows: int = 4
    cols: int = 4
    buffer_bytes: int = PAPER_BUFFER_BYTES
    schedulers: int = 1

    @classmethod
    def from_counters(cls, d: dict, **changes) -> "HeadShape":
        """From a ``head_counters`` JSON (``tokens``, ``head_dim``, ``arrays``, ``rows``,
        ``cols``)."""
        values = {k: d[k] for k in ("tokens", "head_dim", "arrays", "rows", "cols")}
        values.update(changes)
        return cls(**values)


def dram_bytes(shape: HeadShape) -> int:
    """Bytes read from DRAM for Q and K (see the module docstring)."""
    q = k = shape.tokens * shape.head_dim
    if q + k <= shape.buffer_bytes:
        return q + k
    half = shape.buffer_bytes // 2
    return q + k * -(-q // half)


def head_energy(counters: dict, shape: HeadShape, variant: str, e: Energies,
                low: int = 0, pair_cycles: int | None = None) -> dict:
    """Energy in pJ of one run, by component and by PE class: ``{"total", "pe",
    "dispatcher", "sram", "dram", "pe_classes": {class: pJ}, "sram_bytes", "dram_bytes",
    "pe_cycles"}``. ``counters``: ``EngineCounters.totals()`` of the run (for
    ``dense-plain``: the dense run's). With ``e.calibration == "array-step"`` the PE part
    has two classes, ``step`` (issued steps) and ``clock`` (see :data:`CALIBRATIONS`).
    ``low``: busy PE-cycles of the reuse schedule that are LOW steps
    (:func:`golden.energy.op_mix.busy_op_mix`), priced at ``low``; each LOW_PAIR cycle
    takes two of them. 0 prices every non-pair busy cycle as MUL (an upper bound); ignored
    for the dense variants. ``pair_cycles``: busy PE-cycles that carry two channels (the
    busy PE-cycles the matcher saved: busy of the same run without matcher minus this
    run's); None bounds them by ``merged`` x R x C."""
    if variant not in _FLAGS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    reuse, sched, matched = _FLAGS[variant]
    plain = variant == "dense-plain"
    ev = e.plain if plain else e.reuse
    mul = ev["mac"] if plain else ev["mul"]
    R, C, P = shape.rows, shape.cols, shape.arrays
    rc = R * C
    cycles = int(counters["cycles"])
    issued = sum(int(x) for x in counters["issued"])
    busy = int(counters["busy_pe_cycles"])
    merged = int(counters["merged"])
    bubbles = int(counters["bubbles"])
    idle_arrays = int(counters["idle"])
    quads = int(counters["quads"])
    pairs = min(merged * rc, busy) if pair_cycles is None else min(int(pair_cycles), busy)
    if merged == 0:
        pairs = 0
    if int(low) < 0 or pairs < 0:
        raise ValueError(f"low and pair_cycles must be >= 0, got {low!r}, {pair_cycles!r}")
    lows = min(max(int(low) - 2 * pairs, 0), busy - pairs) if reuse else 0
    classes = {
        "mul": (busy - pairs - lows) * mul,
        "low": lows * (ev["low"] if not plain else mul),
        "low_pair": pairs * (ev["low_pair"] if not plain else mul),
        "idle": (issued * rc - busy) * ev["idle"],
        "clock": (bubbles + idle_arrays) * rc * ev["clock"],
        "drain": quads * 4 * rc * (R + 1) / 2 * (ev["drain"] - ev["clock"]),
    }
    pe_cycles = issued * rc + (bubbles + idle_arrays) * rc
    if pe_cycles != P * rc * cycles:
        raise ValueError(f"counters inconsistent: {pe_cycles} PE-cycles classified, "
                         f"P*R*C*cycles = {P * rc * cycles}")
    if e.calibration == "array-step":
        if rc != ARRAY_PES:
            raise ValueError(f"calibration 'array-step' prices the measured 4 x 4 arrays: "
                             f"rows x cols must be {ARRAY_PES}, got {R} x {C}")
        arr = e.arrays["plain" if plain else "reuse"]
        step = arr["reuse_step" if reuse else "dense_step"]
        classes = {"step": issued * step, "clock": (bubbles + idle_arrays) * arr["clock"]}
    dispatcher = cycles * shape.schedulers * e.scheduler_pj if sched else 0.0
    if matched:
        # One slot per pass-3 step of each array; the matcher idles (clocked) otherwise.
        slots = int(counters["issued"][3])
        idle_pj = e.matcher_pj if e.matcher_idle_pj is None else e.matcher_idle_pj
        dispatcher += slots * e.matcher_pj + (P * cycles - slots) * idle_pj
    operand = issued * (R + C) * (1 + (0.25 if reuse else 0.0)) + merged * R
    accumulate = 2 * quads * 4 * rc * 3
    sram_b = operand + accumulate
    dram_b = dram_bytes(shape)
    out = {"variant": variant, "pe": float(sum(classes.values())), "dispatcher": dispatcher,
           "sram": sram_b * e.sram_pj_per_byte, "dram": dram_b * e.dram_pj_per_byte,
           "pe_classes": {k: float(v) for k, v in classes.items()},
           "sram_bytes": float(sram_b), "dram_bytes": int(dram_b), "pe_cycles": pe_cycles,
           "cycles": cycles}
    out["total"] = sum(out[c] for c in COMPONENTS)
    return out


def linear_energy(counters: dict, rows: int, cols: int, arrays: int, tokens: int, c_in: int,
                  c_out: int, window: int, reuse: bool, e: Energies,
                  buffer_bytes: int = PAPER_BUFFER_BYTES) -> dict:
    """Energy in pJ of one linear layer ``Y = X @ W`` run on the engine core, from the
    counters of its program (``kaleido_hw.engine.host.linear_counters``, the interpreter's
    ``core_counters``: ``compute``, ``issued0..3``, ``busy_pe_cycles``, ``quads``), the same
    components as :func:`head_energy`. ``reuse`` False: the dense run on a plain build
    (BaselinePE arrays: every busy PE-cycle a ``mac``); True: a reuse run on ReusePE arrays
    (every busy PE-cycle a ``mul``: the core's quads issue the tile decoder's MUL and LOW
    words, so LOW steps are priced high; the PE's own linear mode, whose three-register
    anchor step is the ``linear`` event, is not what the core runs). The PE-cycles are those
    of the COMPUTEs (``compute`` x P x R x C); a quad drains 4 tiles of R x C for windows of
    2 (T0..T3) and 3 for windows of 3. SRAM: R + C operand bytes per issued step (+ 2-bit
    codes with reuse), every drained tile's 24-bit outputs written once; DRAM: X and W read
    once (when they fit; else W once per buffer half of X) and Y written once."""
    check = {"rows": rows, "cols": cols, "arrays": arrays, "tokens": tokens, "c_in": c_in,
             "c_out": c_out}
    for name, value in check.items():
        if int(value) < 1:
            raise ValueError(f"{name} must be >= 1, got {value!r}")
    if window not in (2, 3):
        raise ValueError(f"window must be 2 or 3, got {window!r}")
    ev = e.reuse if reuse else e.plain
    active = ev["mul"] if reuse else ev["mac"]
    rc = rows * cols
    cycles = int(counters["compute"])
    issued = sum(int(counters[f"issued{p}"]) for p in range(4))
    busy = int(counters["busy_pe_cycles"])
    tiles = int(counters["quads"]) * (4 if window == 2 else 3)
    all_pe = arrays * rc * cycles
    classes = {"mul": busy * active, "idle": (issued * rc - busy) * ev["idle"],
               "clock": (all_pe - issued * rc) * ev["clock"],
               "drain": tiles * rc * (rows + 1) / 2 * (ev["drain"] - ev["clock"])}
    sram_b = issued * (rows + cols) * (1 + (0.25 if reuse else 0.0)) + tiles * rc * 3
    x, w, y = tokens * c_in, c_in * c_out, tokens * c_out
    dram_b = x + w + y if x + w <= buffer_bytes else x + w * -(-x // (buffer_bytes // 2)) + y
    out = {"variant": "linear-reuse" if reuse else "linear-plain",
           "pe": float(sum(classes.values())), "dispatcher": 0.0,
           "sram": sram_b * e.sram_pj_per_byte, "dram": dram_b * e.dram_pj_per_byte,
           "pe_classes": {k: float(v) for k, v in classes.items()},
           "sram_bytes": float(sram_b), "dram_bytes": int(dram_b), "pe_cycles": all_pe,
           "cycles": cycles}
    out["total"] = sum(out[c] for c in COMPONENTS)
    return out
