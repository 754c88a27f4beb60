"""Buffer trees on flip-flop outputs, macro inputs, submodule input ports and instance outputs
(``kaleido_hw/flow/buffer_tree.py``): the library's buffer is
found, every load keeps its connection through at most ``ceil(log_N(loads))`` buffers, no net
drives more than N inputs afterwards, and a real mapped design keeps its function (the cocotb
benches run the generated RTL; here the netlist is checked structurally on yosys' JSON)."""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest

from kaleido_hw.flow import stdcell
from kaleido_hw.flow.buffer_tree import (BufferCell, buffer_register_outputs, find_buffer_cell,
                                         liberty_clock_pins, liberty_pins)


LIB = """
library (tiny) {
  cell (BUFX2) { area : 24; pin(A) { direction : input; }
    pin(Y) { direction : output; function : "A"; } }
  cell (BUFX4) { area : 32; pin(A) { direction : input; }
    pin(Y) { direction : output; function : "A"; } }
  cell (CLKBUF3) { area : 136; pin(A) { direction : input; }
    pin(Y) { direction : output; function : "A"; } }
  cell (INVX1) { area : 16; pin(A) { direction : input; }
    pin(Y) { direction : output; function : "(!A)"; } }
  cell (DFFPOSX1) { area : 96; ff (DS0000, P0000) { next_state : "D"; clocked_on : "CLK"; }
    pin(CLK) { direction : input; clock : true; } pin(D) { direction : input; }
    pin(Q) { direction : output; function : "DS0000"; } }
}
"""


def _design(loads: int):
    """One flip-flop whose Q (bit 3) drives ``loads`` inverters, one of them twice."""
    cells = {"ff": {"type": "DFFPOSX1", "connections": {"CLK": [2], "D": [4], "Q": [3]}}}
    for i in range(loads):
        cells[f"inv{i}"] = {"type": "INVX1", "connections": {"A": [3], "Y": [100 + i]}}
    return {"modules": {"top": {"ports": {"q": {"direction": "output", "bits": [3]}},
                                "cells": cells, "netnames": {}}}}


def _loads(module):
    fan = Counter()
    for c in module["cells"].values():
        for port, d in c["port_directions"].items():
            if d == "input":
                fan.update(b for b in c["connections"][port] if isinstance(b, int))
    return fan


def test_finds_the_strongest_plain_buffer_and_the_pins():
    assert find_buffer_cell(LIB) == BufferCell("BUFX4", "A", "Y", 32.0)
    assert liberty_pins(LIB)["DFFPOSX1"] == {"CLK": "input", "D": "input", "Q": "output"}
    with pytest.raises(ValueError, match="no plain buffer"):
        find_buffer_cell(LIB.replace('function : "A"', 'function : "(!A)"'))


@pytest.mark.parametrize("loads,fanout", [(3, 8), (8, 8), (9, 8), (64, 8), (65, 8), (1000, 4)])
def test_tree_bounds_every_fanout_and_depth(loads, fanout):
    design = _design(loads)
    n = buffer_register_outputs(design, frozenset({"DFFPOSX1"}), find_buffer_cell(LIB), fanout,
                                liberty_pins(LIB))
    module = design["modules"]["top"]
    fan = _loads(module)
    assert max(fan.values()) <= fanout
    if loads <= fanout:
        assert n == 0 and fan[3] == loads
        return
    # Every inverter reaches bit 3 through a chain of buffers no deeper than the bound.
    driver = {c["connections"]["Y"][0]: c["connections"]["A"][0]
              for c in module["cells"].values() if c["type"] == "BUFX4"}
    depth_bound = math.ceil(math.log(loads, fanout))
    for i in range(loads):
        bit, depth = module["cells"][f"inv{i}"]["connections"]["A"][0], 0
        while bit != 3:
            bit, depth = driver[bit], depth + 1
        assert depth <= depth_bound
    assert module["ports"]["q"]["bits"] == [3]          # the port keeps the register's net
    assert all(f"$fanout_net${b}" in module["netnames"] for b in driver)


def test_nets_into_macros_get_trees():
    """A gate (not a register) driving 40 pins of a macro gets a tree only when the macro's
    type is named: ABC never saw those loads."""
    def design():
        cells = {"g": {"type": "INVX1", "connections": {"A": [2], "Y": [3]}},
                 "mem": {"type": "SRAM",
                         "port_directions": {"WE": "input", "CLK": "input", "Q": "output"},
                         "connections": {"WE": [3] * 40, "CLK": [5] * 40, "Q": [4]}}}
        return {"modules": {"top": {"ports": {}, "cells": cells, "netnames": {}}}}
    plain = design()
    assert buffer_register_outputs(plain, frozenset(), find_buffer_cell(LIB), 8,
                                   liberty_pins(LIB)) == 0
    with_macros = design()
    n = buffer_register_outputs(with_macros, frozenset(), find_buffer_cell(LIB), 8,
                                liberty_pins(LIB), macros={"SRAM": frozenset({"CLK"})})
    fan = _loads(with_macros["modules"]["top"])
    assert n == 5 and max(v for b, v in fan.items() if b != 5) <= 8
    mem = with_macros["modules"]["top"]["cells"]["mem"]["connections"]
    assert 3 not in mem["WE"] and mem["CLK"] == [5] * 40     # the clock pins are left alone


def test_bad_fanout_rejected():
    with pytest.raises(ValueError, match="fanout must be at least 2"):
        buffer_register_outputs(_design(3), frozenset(), find_buffer_cell(LIB), 1, {})


@pytest.mark.skipif(stdcell.stdcell_available() is not None,
                    reason=str(stdcell.stdcell_available()))
def test_real_flow_buffers_a_wide_register(tmp_path):
    """A 1-bit register selecting between two 64-bit buses: after the flow no flip-flop
    output drives more than BUFFER_FANOUT inputs, and yosys reads the result back."""
    (tmp_path / "sel.v").write_text(
        "module sel(input clk, input s, input [63:0] a, b, output reg [63:0] y);\n"
        "  reg r; always @(posedge clk) begin r <= s; y <= r ? a : b; end\nendmodule\n")
    lib = stdcell.liberty_path()
    stdcell.run_yosys(stdcell.yosys_script("sel", "sel.v", str(lib)), tmp_path)
    lib_text = lib.read_text()
    _, sequential = stdcell.liberty_cells(lib_text)
    assert stdcell.buffered(tmp_path, lib_text, sequential) > 0
    design = json.loads((tmp_path / "buffered.json").read_text())
    module = design["modules"]["sel"]
    regs = {b for c in module["cells"].values() if c["type"] in sequential
            for p, d in c["port_directions"].items() if d == "output"
            for b in c["connections"][p]}
    fan = _loads(module)
    assert max(fan[b] for b in regs) <= stdcell.BUFFER_FANOUT
    stdcell.run_yosys(stdcell.finish_script("sel", "buffered.json", [str(lib)],
                                            netlist_file="sel.net.v"), tmp_path)
    assert "module sel" in (tmp_path / "sel.net.v").read_text()


#: Port directions of an instance of the submodule ``sub`` of :func:`_hierarchical`.
SUB_PORTS = {"s": "input", "clk": "input", "rst": "input", "q": "output"}


def _hierarchical(loads: int):
    """A top whose input ports ``s`` (bit 2) and ``clk`` (bit 3) feed two instances of ``sub``;
    in ``sub`` the input port ``s`` (bit 10) drives ``loads`` inverters, ``rst`` (bit 12) drives
    ``loads`` inverters too, and ``clk`` (bit 11) the clocks of ``loads`` flip-flops. In the
    top, ``s`` also drives ``loads`` inverters of its own."""
    sub = {"ff0": {"type": "DFFPOSX1", "connections": {"CLK": [11], "D": [13], "Q": [14]}}}
    for i in range(loads):
        sub[f"inv{i}"] = {"type": "INVX1", "connections": {"A": [10], "Y": [100 + i]}}
        sub[f"rinv{i}"] = {"type": "INVX1", "connections": {"A": [12], "Y": [1000 + i]}}
        sub[f"ff{i + 1}"] = {"type": "DFFPOSX1",
                             "connections": {"CLK": [11], "D": [100 + i], "Q": [2000 + i]}}
    sub_ports = {"s": {"direction": "input", "bits": [10]},
                 "clk": {"direction": "input", "bits": [11]},
                 "rst": {"direction": "input", "bits": [12]},
                 "q": {"direction": "output", "bits": [14]}}
    top = {f"u{k}": {"type": "sub", "port_directions": dict(SUB_PORTS),
                     "connections": {"s": [2], "clk": [3], "rst": [4], "q": [20 + k]}}
           for k in range(2)}
    for i in range(loads):
        top[f"inv{i}"] = {"type": "INVX1", "connections": {"A": [2], "Y": [100 + i]}}
    top_ports = {"s": {"direction": "input", "bits": [2]},
                 "clk": {"direction": "input", "bits": [3]},
                 "rst": {"direction": "input", "bits": [4]},
                 "q": {"direction": "output", "bits": [20, 21]}}
    return {"modules": {
        "top": {"attributes": {"top": "1"}, "ports": top_ports, "cells": top, "netnames": {}},
        "sub": {"ports": sub_ports, "cells": sub, "netnames": {}}}}


def _depth_to(module, cell, pin, root):
    """Buffers between ``root`` and ``cell``'s pin (None when the pin is not reached)."""
    driver = {c["connections"]["Y"][0]: c["connections"]["A"][0]
              for c in module["cells"].values() if c["type"] == "BUFX4"}
    bit, depth = module["cells"][cell]["connections"][pin][0], 0
    while bit != root:
        if bit not in driver:
            return None
        bit, depth = driver[bit], depth + 1
    return depth


def test_submodule_input_ports_get_trees_but_not_the_clock_nor_the_top():
    """A submodule's input port with 40 loads drives at most ``fanout`` buffers and reaches
    every load through at most ``ceil(log_8(40))`` = 2 of them (the synchronous reset too);
    its clock port, the top's input ports and the net into the instances are left alone."""
    loads, fanout = 40, 8
    design = _hierarchical(loads)
    n = buffer_register_outputs(design, frozenset({"DFFPOSX1"}), find_buffer_cell(LIB), fanout,
                                liberty_pins(LIB), clocks=liberty_clock_pins(LIB))
    assert n == 2 * 5                         # s and rst: 5 buffers of 8 loads each
    sub, top = design["modules"]["sub"], design["modules"]["top"]
    fan = _loads(sub)
    assert fan[10] <= fanout and fan[12] <= fanout
    assert max(v for b, v in fan.items() if b != 11) <= fanout
    for i in range(loads):
        assert 1 <= _depth_to(sub, f"inv{i}", "A", 10) <= math.ceil(math.log(loads, fanout))
        assert 1 <= _depth_to(sub, f"rinv{i}", "A", 12) <= 2
    assert fan[11] == loads + 1                # the clock: the clock tree's business
    assert all(c["connections"]["CLK"] == [11] for c in sub["cells"].values()
               if c["type"] == "DFFPOSX1")
    assert sub["ports"]["s"]["bits"] == [10]   # the port keeps its net, the roots hang on it
    assert _loads(top)[2] == loads + 2         # the top's inputs: driven by the environment
    assert all(c["connections"]["A"] == [2] for name, c in top["cells"].items()
               if name.startswith("inv"))


def test_clock_found_through_an_instance():
    """A module whose clock port reaches flip-flops only through a submodule's clock port:
    that port is a clock too, even with more than ``fanout`` instances on it."""
    design = _hierarchical(3)
    mid = {f"s{k}": {"type": "sub", "port_directions": dict(SUB_PORTS),
                     "connections": {"s": [5], "clk": [6], "rst": [7], "q": [30 + k]}}
           for k in range(12)}
    design["modules"]["mid"] = {
        "ports": {"s": {"direction": "input", "bits": [5]},
                  "clk": {"direction": "input", "bits": [6]},
                  "rst": {"direction": "input", "bits": [7]},
                  "q": {"direction": "output", "bits": [30]}},
        "cells": mid, "netnames": {}}
    design["modules"]["top"]["cells"]["m"] = {
        "type": "mid", "port_directions": dict(SUB_PORTS),
        "connections": {"s": [2], "clk": [3], "rst": [4], "q": [40]}}
    n = buffer_register_outputs(design, frozenset({"DFFPOSX1"}), find_buffer_cell(LIB), 8,
                                liberty_pins(LIB), clocks=liberty_clock_pins(LIB))
    fan = _loads(design["modules"]["mid"])
    assert fan[6] == 12 and fan[5] <= 8 and fan[7] <= 8
    assert n == 2 * 2                          # s and rst of mid: two groups each


def test_instance_outputs_get_trees_in_the_parent_but_not_a_clock():
    """An instance's output (``q`` of ``u0``, bit 20) that drives 40 gates of the parent gets a
    tree there, each gate at most ``ceil(log_8(40))`` = 2 buffers from it; the output of
    ``u1`` (bit 21), which clocks 40 flip-flops of the parent, is a clock and keeps its net;
    the parent's output port keeps bit 20 itself."""
    loads, fanout = 40, 8
    design = _hierarchical(3)
    top = design["modules"]["top"]
    for i in range(loads):
        top["cells"][f"oinv{i}"] = {"type": "INVX1", "connections": {"A": [20], "Y": [500 + i]}}
        top["cells"][f"off{i}"] = {"type": "DFFPOSX1",
                                   "connections": {"CLK": [21], "D": [600 + i], "Q": [700 + i]}}
    n = buffer_register_outputs(design, frozenset({"DFFPOSX1"}), find_buffer_cell(LIB), fanout,
                                liberty_pins(LIB), clocks=liberty_clock_pins(LIB))
    fan = _loads(top)
    assert fan[20] <= fanout and fan[21] == loads
    assert n == 5                              # 40 loads of bit 20 in 5 groups; sub has 3 loads
    for i in range(loads):
        assert 1 <= _depth_to(top, f"oinv{i}", "A", 20) <= math.ceil(math.log(loads, fanout))
    assert top["ports"]["q"]["bits"] == [20, 21]


@pytest.mark.skipif(stdcell.stdcell_available() is not None,
                    reason=str(stdcell.stdcell_available()))
def test_real_flow_buffers_submodule_ports(tmp_path):
    """The hierarchy kept: a submodule whose select and synchronous reset ports steer 64
    register bits, and whose output steers the enables of 64 registers of its parent. ABC
    leaves the 64 loads on each; after the flow no input port of the submodule but its clock
    and no instance output drives more than BUFFER_FANOUT inputs, and yosys reads it back."""
    (tmp_path / "h.v").write_text(
        "module sub(input clk, input rst, input s, input [63:0] a, b, output reg [63:0] y,\n"
        "           output e);\n"
        "  always @(posedge clk) if (rst) y <= 0; else y <= s ? a : b;\n"
        "  assign e = ~s;\nendmodule\n"
        "module h(input clk, input rst, input s, input [63:0] a, b, output [63:0] y, z,\n"
        "         output reg [63:0] w);\n"
        "  reg r; always @(posedge clk) r <= s;\n  wire e0, e1;\n"
        "  always @(posedge clk) if (e0) w <= a ^ b;\n"
        "  sub u0(clk, rst, r, a, b, y, e0);\n  sub u1(clk, rst, r, b, a, z, e1);\nendmodule\n")
    lib = stdcell.liberty_path()
    stdcell.run_yosys(stdcell.yosys_script("h", "h.v", str(lib), flatten=False), tmp_path)
    lib_text = lib.read_text()
    _, sequential = stdcell.liberty_cells(lib_text)
    stdcell.buffered(tmp_path, lib_text, sequential)
    design = json.loads((tmp_path / "buffered.json").read_text())
    sub = design["modules"]["sub"]
    fan = _loads(sub)
    ports = {name: fan[p["bits"][0]] for name, p in sub["ports"].items()
             if p["direction"] == "input"}
    assert ports["clk"] > stdcell.BUFFER_FANOUT       # the clock is left to the clock tree
    assert max(v for k, v in ports.items() if k != "clk") <= stdcell.BUFFER_FANOUT
    top = design["modules"]["h"]
    assert _loads(top)[top["ports"]["rst"]["bits"][0]] == 2
    e0 = top["cells"]["u0"]["connections"]["e"][0]      # an instance's output: 64 enables
    assert 0 < _loads(top)[e0] <= stdcell.BUFFER_FANOUT
    stdcell.run_yosys(stdcell.finish_script("h", "buffered.json", [str(lib)],
                                            netlist_file="h.net.v"), tmp_path)
    assert "module sub" in (tmp_path / "h.net.v").read_text()
