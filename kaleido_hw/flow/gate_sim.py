"""Gate-level simulation of a mapped standard-cell netlist and per-net toggle counts.

One concern: run a netlist written by :mod:`kaleido_hw.flow.stdcell` (yosys + ABC on the OSU
0.18 um cells) in Icarus Verilog with the library's own cell models, under a per-cycle
input stream, and count for every net bit how often it switched and how long it was high.
:mod:`kaleido_hw.flow.gate_energy` hands these figures to OpenSTA as switching activity.

Simulation
    The cell models (:data:`CELL_MODELS`, Debian ``qflow-tech-osu018``) are plain gate
    primitives and UDPs with ``specify`` blocks; Icarus ignores the specify delays unless it
    is asked for them, so the simulation is *zero-delay*: every net settles once per input
    change and glitches (hazards between unequal path delays) are not seen. Switching power
    is therefore a lower bound on what a timed simulation (or silicon) would show; the
    datapath adders and multipliers are where glitches matter most.

Testbench (:func:`testbench`)
    A clock of :data:`PERIOD_NS`; reset high for two cycles, then the stream: input word
    ``i`` is applied at the falling edge before rising edge ``i`` (the registers sample it
    there), so every net settles well inside the cycle. The first ``warmup`` words only
    bring the registers into a typical state; the value-change dump covers the following
    words (``$dumpvars(1, dut)``: the netlist's own nets, not the cells' insides).

Toggle counts (:func:`toggle_counts`)
    The dump is read with ``vcdvcd`` (PyPI). Per net bit: the number of 0<->1 changes (a
    change from or to x/z is not counted), and the fraction of the dumped time it was 1.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


__all__ = ["CELL_MODELS", "PERIOD_NS", "NetActivity", "iverilog_available", "port_widths",
           "testbench", "simulate", "toggle_counts"]

#: The Verilog models of the OSU 0.18 um cells (same package as the Liberty file).
CELL_MODELS = Path("/usr/share/qflow/tech/osu018/osu018_stdcells.v")
#: Clock period of the testbench in ns (only the order of events matters: zero delay).
PERIOD_NS = 10


@dataclass(frozen=True)
class NetActivity:
    """Switching of one net bit over the dumped window."""
    toggles: int      # 0<->1 changes
    high: float       # fraction of the window the bit was 1


def iverilog_available() -> str | None:
    """None when ``iverilog``/``vvp`` and the cell models are there; else what is missing."""
    missing = [t for t in ("iverilog", "vvp") if shutil.which(t) is None]
    out = [f"{t} not found ('sudo apt-get install iverilog')" for t in missing]
    if not CELL_MODELS.is_file():
        out.append(f"the cell models {CELL_MODELS} not found "
                   f"('sudo apt-get install qflow-tech-osu018')")
    return "; ".join(out) or None


_PORT = re.compile(r"^\s*(input|output)\s+(?:\[(\d+):(\d+)\]\s+)?(\w+)\s*;", re.M)


def port_widths(netlist: str, top: str) -> dict[str, tuple[str, int]]:
    """``{port: (direction, width)}`` of module ``top`` of a ``write_verilog`` netlist."""
    m = re.search(rf"^module {re.escape(top)}\s*\(.*?^endmodule", netlist, re.M | re.S)
    if m is None:
        raise ValueError(f"module {top!r} not found in the netlist")
    return {name: (d, int(hi) - int(lo) + 1 if hi else 1)
            for d, hi, lo, name in _PORT.findall(m.group(0))}


def testbench(top: str, ports: dict[str, tuple[str, int]], inputs: list[str], words: int,
              warmup: int, clock: str = "clk", reset: str = "rst") -> str:
    """The Icarus testbench of the module docstring: ``inputs`` (in this order, MSB first)
    are concatenated into one word per cycle read from ``stim.hex`` (``words`` lines)."""
    if not 0 <= warmup < words:
        raise ValueError(f"warmup must be in 0..words-1 = {words - 1}, got {warmup}")
    width = sum(ports[p][1] for p in inputs)
    decl = "\n".join(f"  reg [{ports[p][1] - 1}:0] {p} = 0;" for p in inputs)
    conn = ",\n".join([f"    .{clock}(clk)", f"    .{reset}(rst)"] +
                      [f"    .{p}({p})" for p in inputs])
    cat = "{" + ", ".join(inputs) + "}"
    half = PERIOD_NS // 2
    return f"""`timescale 1ns/1ps
module tb;
  reg clk = 0;
  reg rst = 1;
{decl}
  reg [{width - 1}:0] stim [0:{words - 1}];
  integer i;
  always #{half} clk = ~clk;
  {top} dut (
{conn}
  );
  initial begin
    $readmemh("stim.hex", stim);
    repeat (2) @(posedge clk);
    @(negedge clk) rst = 0;
    for (i = 0; i < {words}; i = i + 1) begin
      @(negedge clk);
      if (i == {warmup}) begin
        $dumpfile("dump.vcd");
        $dumpvars(1, dut);
      end
      {cat} = stim[i];
    end
    @(negedge clk);
    $finish;
  end
endmodule
"""


def _hex_words(stream: list[dict], inputs: list[str], ports) -> str:
    lines = []
    for values in stream:
        word = 0
        for p in inputs:
            w = ports[p][1]
            v = values.get(p, 0)
            word = (word << w) | (int(v) & ((1 << w) - 1))
        lines.append(f"{word:x}")
    return "\n".join(lines) + "\n"


def simulate(netlist: Path, top: str, stream: list[dict], work: Path, *, warmup: int = 8,
             clock: str = "clk", reset: str = "rst", timeout: int = 600,
             extra_sources=()) -> Path:
    """Run ``stream`` (one ``{input port: int}`` per cycle; missing ports are 0) through the
    netlist; returns the path of the value-change dump of the words after ``warmup``.
    ``extra_sources``: more Verilog files (the SRAM macros' behavioural models,
    :func:`kaleido_hw.flow.sram_macros.macro_verilog`). RuntimeError (with the tool's
    message) when Icarus fails."""
    why = iverilog_available()
    if why:
        raise RuntimeError(why)
    text = netlist.read_text()
    ports = port_widths(text, top)
    for name in (clock, reset):
        if name not in ports:
            raise ValueError(f"{top} has no port {name!r}")
    inputs = [p for p, (d, _) in ports.items() if d == "input" and p not in (clock, reset)]
    unknown = sorted({k for cycle in stream for k in cycle} - set(inputs))
    if unknown:
        raise ValueError(f"stream names ports {unknown} that are not inputs of {top} "
                         f"(inputs: {', '.join(inputs)})")
    work.mkdir(parents=True, exist_ok=True)
    (work / "stim.hex").write_text(_hex_words(stream, inputs, ports))
    (work / "tb.v").write_text(testbench(top, ports, inputs, len(stream), warmup, clock, reset))
    r = subprocess.run(["iverilog", "-g2005", "-o", "tb.vvp", "tb.v", str(netlist.resolve()),
                        str(CELL_MODELS), *(str(Path(x).resolve()) for x in extra_sources)],
                       cwd=work, capture_output=True, text=True,
                       timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"iverilog failed: {(r.stderr or r.stdout).strip()[-400:]}")
    r = subprocess.run(["vvp", "-n", "tb.vvp"], cwd=work, capture_output=True, text=True,
                       timeout=timeout)
    if r.returncode != 0 or not (work / "dump.vcd").is_file():
        raise RuntimeError(f"vvp failed: {(r.stderr or r.stdout).strip()[-400:]}")
    return work / "dump.vcd"


_RANGE = re.compile(r"^(.*?)\s*\[(\d+):(\d+)\]$")


def _bits(value: str, width: int) -> str:
    """A VCD value left-extended to ``width`` (0 for a leading 0 or 1, else that letter)."""
    v = value.lower()
    if len(v) >= width:
        return v[-width:]
    pad = "0" if v[0] in "01" else v[0]
    return pad * (width - len(v)) + v


def toggle_counts(vcd_path: Path, scope: str = "tb.dut") -> tuple[dict, int]:
    """``({(net, bit): NetActivity}, window)`` of the dump's signals directly in ``scope``;
    ``window`` in the dump's time unit (ps for :func:`testbench`'s ``1ns/1ps``). ``net`` is
    the name without escape, ``bit`` the index for a vector (None for a scalar)."""
    from vcdvcd import VCDVCD

    vcd = VCDVCD(str(vcd_path))
    start = min((tv[0][0] for tv in (s.tv for s in vcd.data.values()) if tv), default=0)
    end = vcd.endtime
    window = end - start
    if window <= 0:
        raise ValueError(f"{vcd_path}: the dump covers no time")
    prefix = scope + "."
    out = {}
    for sig in vcd.data.values():
        width = int(sig.size)
        for ref in sig.references:
            if not ref.startswith(prefix):
                continue
            name = ref[len(prefix):]
            m = _RANGE.match(name)
            if m:
                base, hi, lo = m.group(1), int(m.group(2)), int(m.group(3))
                idx = list(range(hi, lo - 1, -1)) if hi >= lo else list(range(hi, lo + 1))
            else:
                base, idx = name, [None]
            base = base.lstrip("\\").strip()
            tv = [(t, _bits(v, width)) for t, v in sig.tv]
            for pos, bit in enumerate(idx):
                toggles, high, last_t, last_v = 0, 0.0, start, None
                for t, v in tv:
                    b = v[pos]
                    if last_v == "1":
                        high += t - last_t
                    if last_v in ("0", "1") and b in ("0", "1") and b != last_v:
                        toggles += 1
                    last_t, last_v = t, b
                if last_v == "1":
                    high += end - last_t
                out[(base, bit)] = NetActivity(toggles, high / window)
    return out, window
