"""Memories as SRAM macros: area from a published 180 nm SRAM density, timing as black boxes.

The engine's ``amaranth.lib.memory`` instances are not standard cells. In the standard-cell
flows (:func:`kaleido_hw.flow.stdcell.synth_stdcell` for a block top,
:mod:`kaleido_hw.flow.engine_area` for whole engines) each one stays a yosys ``$mem_v2`` cell through the
mapping and then becomes an instance of a black-box macro, one Liberty cell per memory shape
(:func:`macro_name`), written by :func:`macro_liberty`: its area comes from the density
below, and OpenSTA times it like a register file with a clock-to-output delay and setup
times. No function, no power model (OpenSTA reports the macros' power as 0).

Source: GlobalFoundries' open 180 nm SRAM macros (GF180MCU PDK,
https://github.com/google/globalfoundries-pdk-ip-gf180mcu_fd_ip_sram, release 1.0; datasheets
``cells/gf180mcu_fd_ip_sram__sram<N>x8m8wm1/*.rst`` and ``specs/*.csv``), the only 180 nm SRAM
compiler output whose dimensions and timing are published openly:

* node and cell: GF 180 nm, 6-transistor bit cell of :data:`BITCELL_UM2` = 13.5 um2 (the
  datasheet's "Features"; it uses 5 V-capable devices, so it is larger than a 1.8 V-only
  0.18 um foundry cell would be, as the OSU cells, drawn on scalable lambda rules, are
  larger than a foundry's 0.18 um library);
* density: the macros are :data:`GF180_MACRO_WIDTH_UM` wide for every depth and grow by
  36 um in height per 64 words of 8 bits (``6_Physical_Dimensions.csv``, :data:`GF180_MACROS`),
  i.e. :data:`SRAM_UM2_PER_BIT` = 30.37 um2 per added bit: the bit cell plus its share of the
  row decoders and wordline drivers. The array efficiency assumed is therefore
  :data:`ARRAY_EFFICIENCY` = 13.5 / 30.37 = 44%;
* what is left out: the fixed periphery (sense amplifiers, column multiplexers, control,
  about 85,000 um2 per GF180 macro, the height-0 intercept). A real design would merge the
  engine's many small banks into a few macros that share it; pricing every bank as its own
  macro would add that much per bank, so the SRAM figures here are a lower bound for tiny
  banks;
* read ports: a memory with R read ports is priced as R copies of a single-port array (the
  write port writes all of them), the usual way to build extra read ports from
  single-port SRAM;
* timing: the 64 x 8 macro at its nominal 5.0 V, typical process, 25 C
  (``specs/5_AC_Characteristics1.csv``): clock to Q :data:`CLOCK_TO_Q_NS` = 4.48 ns (Tal,
  the slower edge), setup :data:`SETUP_NS` = 0.70 ns (Tasl, the largest address/control/data
  setup); output transition :data:`OUTPUT_TRANSITION_NS` at 0.03 pF and the pin capacitances
  from the same macro's 5.0 V Liberty file and ``3_Capacitance_loading.csv``. A 5 V macro at
  5 V stands in for a 1.8 V-native 0.18 um macro (at 1.8 V the 5 V devices are three times
  slower, which no 1.8 V design would accept).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


__all__ = ["BITCELL_UM2", "GF180_MACRO_WIDTH_UM", "GF180_MACROS", "GF180_WORD_BITS",
           "SRAM_UM2_PER_BIT", "ARRAY_EFFICIENCY", "CLOCK_TO_Q_NS", "SETUP_NS",
           "OUTPUT_TRANSITION_NS", "INPUT_CAP_PF", "CLOCK_CAP_PF", "MemoryShape", "macro_name",
           "macro_area_um2", "macro_liberty", "MEM_PARAMETERS", "MemoryCell", "parse_memories",
           "macro_script", "join_macro_clocks", "MACRO_NAME", "macro_verilog"]

#: 6T bit cell of the GF180MCU SRAM macros (datasheet, "Features").
BITCELL_UM2 = 13.5
#: Width of every GF180MCU 8-bit-word macro (``6_Physical_Dimensions.csv``).
GF180_MACRO_WIDTH_UM = 431.86
#: Words -> height (um) of the GF180MCU x8 macros (``6_Physical_Dimensions.csv``).
GF180_MACROS = {64: 232.88, 128: 268.88, 256: 340.88, 512: 484.88}
GF180_WORD_BITS = 8


def _marginal_um2_per_bit() -> float:
    """Area per added bit of the GF180MCU macros: the slope of area over bits between the
    smallest and the largest published depth (the heights are exactly linear in depth)."""
    lo, hi = min(GF180_MACROS), max(GF180_MACROS)
    d_area = GF180_MACRO_WIDTH_UM * (GF180_MACROS[hi] - GF180_MACROS[lo])
    return d_area / ((hi - lo) * GF180_WORD_BITS)


#: Area of one SRAM bit with its share of the row periphery (30.37 um2).
SRAM_UM2_PER_BIT = _marginal_um2_per_bit()
#: Bit-cell area over SRAM_UM2_PER_BIT.
ARRAY_EFFICIENCY = BITCELL_UM2 / SRAM_UM2_PER_BIT
#: Clock-to-Q of a read (GF180MCU 64x8, typ. 5.0 V 25 C, Tal).
CLOCK_TO_Q_NS = 4.4822
#: Setup of address, enables and data to the clock (largest of them, Tasl).
SETUP_NS = 0.7027
#: Read-data transition at a 0.03 pF load (5.0 V Liberty, rise).
OUTPUT_TRANSITION_NS = 0.195
#: Input capacitance of an address pin (the largest non-clock pin) and of the clock.
INPUT_CAP_PF = 0.0345
CLOCK_CAP_PF = 0.296

#: Parameters of a yosys ``$mem_v2`` cell; all are removed from a macro instance.
MEM_PARAMETERS = ("MEMID", "SIZE", "OFFSET", "ABITS", "WIDTH", "INIT", "RD_PORTS",
                  "RD_CLK_ENABLE", "RD_CLK_POLARITY", "RD_TRANSPARENCY_MASK",
                  "RD_COLLISION_X_MASK", "RD_WIDE_CONTINUATION", "RD_CE_OVER_SRST",
                  "RD_ARST_VALUE", "RD_SRST_VALUE", "RD_INIT_VALUE", "WR_PORTS",
                  "WR_CLK_ENABLE", "WR_CLK_POLARITY", "WR_PRIORITY_MASK",
                  "WR_WIDE_CONTINUATION")


@dataclass(frozen=True)
class MemoryShape:
    """What a macro needs to know of a ``$mem_v2`` cell."""
    words: int
    width: int
    abits: int
    read_ports: int
    write_ports: int
    sync_read: bool = True     # every read port registered (RD_CLK_ENABLE all ones)

    @property
    def bits(self) -> int:
        """Capacity in bits."""
        return self.words * self.width


def macro_name(shape: MemoryShape) -> str:
    """The Liberty cell of a shape, e.g. ``KSRAM_32x24_a5_r1w1`` (``_async`` for
    combinational reads)."""
    return (f"KSRAM_{shape.words}x{shape.width}_a{shape.abits}_r{shape.read_ports}"
            f"w{shape.write_ports}{'' if shape.sync_read else '_async'}")


def macro_area_um2(shape: MemoryShape) -> float:
    """Area of the macro: bits x read ports x :data:`SRAM_UM2_PER_BIT` (um2, to the 0.001 um2
    the Liberty file carries)."""
    return round(shape.bits * max(1, shape.read_ports) * SRAM_UM2_PER_BIT, 3)


def _pin(name: str, width: int, direction: str, body: str) -> str:
    group = f"pin({name})" if width == 1 else f"bus({name})"
    bus = "" if width == 1 else f"bus_type : w{width}; "
    return f"    {group} {{ {bus}direction : {direction}; {body}}}\n"


def _scalar(kind: str, value: float) -> str:
    return f'{kind}(scalar) {{ values("{value:g}"); }} '


def _setup(clock: str) -> str:
    return (f'timing() {{ related_pin : "{clock}"; timing_type : setup_rising; '
            + _scalar("rise_constraint", SETUP_NS) + _scalar("fall_constraint", SETUP_NS) + "} ")


def _cell(shape: MemoryShape) -> tuple[str, set[int]]:
    r, w, a, d = shape.read_ports, shape.write_ports, shape.abits, shape.width
    cap = f"capacitance : {INPUT_CAP_PF:g}; "
    out_arc = (_scalar("cell_rise", CLOCK_TO_Q_NS) + _scalar("cell_fall", CLOCK_TO_Q_NS)
               + _scalar("rise_transition", OUTPUT_TRANSITION_NS)
               + _scalar("fall_transition", OUTPUT_TRANSITION_NS))
    if shape.sync_read:
        read = f'timing() {{ related_pin : "RD_CLK"; timing_type : rising_edge; {out_arc}}} '
        raddr = cap + _setup("RD_CLK")
    else:     # combinational read: address -> data in the clock-to-Q time
        read = f'timing() {{ related_pin : "RD_ADDR"; {out_arc}}} '
        raddr = cap
    body = (_pin("RD_CLK", 1, "input", f"clock : true; capacitance : {CLOCK_CAP_PF:g}; ")
            + _pin("RD_EN", r, "input", cap + (_setup("RD_CLK") if shape.sync_read else ""))
            + _pin("RD_ARST", r, "input", cap)
            + _pin("RD_SRST", r, "input", cap)
            + _pin("RD_ADDR", r * a, "input", raddr)
            + _pin("RD_DATA", r * d, "output", read)
            + _pin("WR_CLK", 1, "input", f"clock : true; capacitance : {CLOCK_CAP_PF:g}; ")
            + _pin("WR_EN", w * d, "input", cap + _setup("WR_CLK"))
            + _pin("WR_ADDR", w * a, "input", cap + _setup("WR_CLK"))
            + _pin("WR_DATA", w * d, "input", cap + _setup("WR_CLK")))
    widths = {x for x in (r, r * a, r * d, w * d, w * a) if x > 1}
    text = (f"  cell({macro_name(shape)}) {{\n    area : {macro_area_um2(shape):.3f};\n"
            f"    dont_use : true;\n    dont_touch : true;\n{body}  }}\n")
    return text, widths


def macro_liberty(shapes, name: str = "kaleido_sram_macros") -> str:
    """A Liberty library with one black-box cell per shape of ``shapes``.

    Pins follow yosys' ``$mem_v2`` ports, so that a retyped memory cell connects as it is:
    ``RD_CLK``/``WR_CLK`` (one clock each; the flow joins a multi-port memory's identical
    clock bits), ``RD_EN``, ``RD_ARST``, ``RD_SRST``, ``RD_ADDR``, ``RD_DATA`` (R ports
    side by side), ``WR_EN`` (per bit), ``WR_ADDR``, ``WR_DATA``.
    """
    cells, widths = [], set()
    for shape in sorted(set(shapes), key=macro_name):
        text, w = _cell(shape)
        cells.append(text)
        widths |= w
    head = [f"library({name}) {{",
            "  delay_model : table_lookup;",
            '  time_unit : "1ns";', '  voltage_unit : "1V";', '  current_unit : "1uA";',
            '  leakage_power_unit : "1nW";', '  pulling_resistance_unit : "1kohm";',
            "  capacitive_load_unit(1,pf);",
            "  nom_process : 1;", "  nom_voltage : 1.8;", "  nom_temperature : 25;",
            "  input_threshold_pct_rise : 50;", "  input_threshold_pct_fall : 50;",
            "  output_threshold_pct_rise : 50;", "  output_threshold_pct_fall : 50;",
            "  slew_lower_threshold_pct_rise : 20;", "  slew_upper_threshold_pct_rise : 80;",
            "  slew_lower_threshold_pct_fall : 20;", "  slew_upper_threshold_pct_fall : 80;"]
    types = [f"  type(w{x}) {{ base_type : array; data_type : bit; bit_width : {x}; "
             f"bit_from : {x - 1}; bit_to : 0; downto : true; }}" for x in sorted(widths)]
    return "\n".join(head + types) + "\n" + "".join(cells) + "}\n"


# -- in the yosys flow -----------------------------------------------------------------------------

@dataclass(frozen=True)
class MemoryCell:
    """One ``$mem_v2`` cell of a yosys ``dump``."""
    path: str            # module below the top ("" for the top)
    name: str
    shape: MemoryShape


def parse_memories(dump: str, top: str) -> list[MemoryCell]:
    """``dump t:$mem_v2`` output -> the memory cells with their module below ``top``."""
    out = []
    module = ""        # yosys prints no module header when the design has only the top
    cell = None
    params: dict[str, str] = {}

    def flush():
        if cell is None:
            return
        need = ("WIDTH", "SIZE", "ABITS", "RD_PORTS", "WR_PORTS")
        if any(not re.fullmatch(r"-?\d+", params.get(k, "")) for k in need):
            raise ValueError(f"memory {cell} in {module}: no {'/'.join(need)} in the yosys dump")
        clk_enable = params.get("RD_CLK_ENABLE", "1'1").split("'")[-1]
        shape = MemoryShape(int(params["SIZE"]), int(params["WIDTH"]), int(params["ABITS"]),
                               int(params["RD_PORTS"]), int(params["WR_PORTS"]),
                               sync_read=set(clk_enable) <= {"1"})
        out.append(MemoryCell(module, cell, shape))

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
            if len(parts) >= 3:
                params[parts[1][1:]] = parts[2]
        elif s == "end":
            flush()
            cell, params = None, {}
    flush()
    return out


def macro_script(memories: list[MemoryCell], top: str, liberty: str, macro_lib: str,
                 json_file: str = "macros.json") -> str:
    """yosys, step 3: every memory cell becomes an instance of its shape's macro (type set,
    ``$mem_v2`` parameters removed), undefined constants become 0 (OpenSTA's Verilog reader
    needs that), and the design goes to JSON for the buffer trees; step 4 is
    :func:`kaleido_hw.flow.stdcell.finish_script` with both libraries."""
    by_shape: dict[str, list[str]] = {}
    for m in memories:
        module = top if m.path == "" else f"{top}.{m.path}"
        by_shape.setdefault(macro_name(m.shape), []).append(f"{module}/{m.name}")
    lines = ["read_rtlil mapped.il"]
    lines += [f"chtype -set {name} {' '.join(cells)}" for name, cells in by_shape.items()]
    if by_shape:
        lines.append("setparam " + " ".join(f"-unset {p}" for p in MEM_PARAMETERS)
                     + " t:KSRAM_*")
    lines += ["setundef -zero", f"write_json {json_file}"]
    return "\n".join(lines) + "\n"


_MULTI_CLOCK = re.compile(r"\.(RD_CLK|WR_CLK)\(\{ ([^,{}]+?)(?:, \2)* \}\)")


def join_macro_clocks(netlist: str) -> str:
    """A macro has one read and one write clock pin: ``.RD_CLK({ clk, clk, clk })`` (one bit
    per port, all the same clock) becomes ``.RD_CLK(clk)``. Ports on different clocks stay as
    they are (OpenSTA then refuses the netlist, and the build says so)."""
    return _MULTI_CLOCK.sub(r".\1(\2)", netlist)


# -- behavioural models for gate-level simulation -------------------------------------------------

#: A macro cell's name: words, width, address bits, read and write ports, ``_async`` reads.
MACRO_NAME = re.compile(r"\bKSRAM_(\d+)x(\d+)_a(\d+)_r(\d+)w(\d+)(_async)?\b")


def macro_verilog(netlist: str) -> str:
    """Behavioural Verilog of every macro cell a mapped netlist instantiates, for a gate-level
    simulation of the logic around them (the macros themselves have no cell model): each read
    port registers ``mem[RD_ADDR]`` on ``RD_CLK`` when ``RD_EN`` (the old word when the same
    edge writes it, as the memories are built: no transparency), or reads it combinationally
    for an ``_async`` macro; each write port writes the bits whose ``WR_EN`` is set. Contents
    and read data start at 0 (an SRAM's are arbitrary; 0 keeps X out of the toggle counts)."""
    out = []
    for name in sorted({m.group(0) for m in MACRO_NAME.finditer(netlist)}):
        words, width, abits, r, w, asyn = MACRO_NAME.fullmatch(name).groups()
        words, width, abits, r, w = int(words), int(width), int(abits), int(r), int(w)
        read = (f"    for (p = 0; p < {r}; p = p + 1)\n"
                f"      if (RD_EN[p]) RD_DATA[p*{width} +: {width}] <= "
                f"mem[RD_ADDR[p*{abits} +: {abits}]];\n")
        if asyn:
            read_block = (f"  always @* begin\n"
                          f"    for (p = 0; p < {r}; p = p + 1)\n"
                          f"      RD_DATA[p*{width} +: {width}] = "
                          f"mem[RD_ADDR[p*{abits} +: {abits}]];\n  end\n")
        else:
            read_block = f"  always @(posedge RD_CLK) begin\n{read}  end\n"
        out.append(
            f"module {name} (RD_CLK, RD_EN, RD_ARST, RD_SRST, RD_ADDR, RD_DATA, WR_CLK, WR_EN,\n"
            f"    WR_ADDR, WR_DATA);\n"
            f"  input RD_CLK, WR_CLK;\n"
            f"  input [{r - 1}:0] RD_EN, RD_ARST, RD_SRST;\n"
            f"  input [{r * abits - 1}:0] RD_ADDR;\n"
            f"  output reg [{r * width - 1}:0] RD_DATA;\n"
            f"  input [{w * width - 1}:0] WR_EN, WR_DATA;\n"
            f"  input [{w * abits - 1}:0] WR_ADDR;\n"
            f"  reg [{width - 1}:0] mem [0:{words - 1}];\n"
            f"  integer p, b, i;\n"
            f"  initial begin\n"
            f"    for (i = 0; i < {words}; i = i + 1) mem[i] = 0;\n"
            f"    RD_DATA = 0;\n"
            f"  end\n"
            f"{read_block}"
            f"  always @(posedge WR_CLK) begin\n"
            f"    for (p = 0; p < {w}; p = p + 1)\n"
            f"      for (b = 0; b < {width}; b = b + 1)\n"
            f"        if (WR_EN[p*{width} + b])\n"
            f"          mem[WR_ADDR[p*{abits} +: {abits}]][b] <= WR_DATA[p*{width} + b];\n"
            f"  end\n"
            f"endmodule\n")
    return "\n".join(out)
