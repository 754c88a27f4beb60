"""Buffer trees on flip-flop outputs and macro inputs (``kaleido_hw/flow/buffer_tree.py``): the library's buffer is
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
                                         liberty_pins)


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
    pin(CLK) { direction : input; } pin(D) { direction : input; }
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
