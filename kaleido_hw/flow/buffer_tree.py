"""Buffer trees on the outputs of flip-flops, on the nets into memory macros and on the input
ports of submodules, of a mapped netlist (a step of the standard-cell flow,
:mod:`kaleido_hw.flow.stdcell`).

Why. ABC buffers and sizes the nets of the logic it maps, but a flip-flop's output is one of
its inputs, which it leaves alone: a register bit that steers thousands of gates (a queue's
read pointer selecting among 64 entries, a pass index fanning out to every PE decoder) keeps
its minimum-size flip-flop as the only driver, and the timing report shows tens of
nanoseconds of pure load that any placed flow removes with a buffer tree. This step builds
that tree in the mapped netlist, the same way for every design, so that baselines and
reuse designs are compared on the same footing. The nets into SRAM macros have the same
blind spot from the other side: the memories become macros after ABC, which saw their
inputs as primary outputs without load, so a write enable shared by the 64 bits of a word
lane of eight macros (512 pins, 8.8 pF) kept one small gate as its driver. A module's input
ports are the third blind spot: with the hierarchy kept (the engine flow,
:mod:`kaleido_hw.flow.engine_area`), ABC maps each module on its own and takes its input
ports as ideal drivers, so a register of the engine's top that drives a sequencer's input
port (the chunk controller's group index) reached thousands of gates (3.5 pF) inside the
sequencer through no buffer at all. The same holds the other way round: a submodule's output
port is an ideal driver to ABC when it maps the parent, so a gate of a sequencer whose output
steered the enables of 200 fetch registers in its parent (6.9 pF) had no buffer either.

How. The netlist is yosys' JSON after mapping. For every flip-flop output bit, every bit
that drives an input pin of a macro, every input port bit of a module that another module
of the design instantiates and every bit that an instance's output port drives, with more
than ``fanout`` cell inputs in its module, the loads are cut into groups of at most
``fanout``; each group gets a buffer (the library's strongest plain buffer) whose input joins
the next level, which is grouped again until at most ``fanout``
inputs remain on the driver (the flip-flop, the gate, the port or the instance). A bit with
``n`` loads gets ``ceil(log_fanout(n))`` levels. Module output ports keep the driver's own net (the timing
constraints put no load on them). The buffers count in the area like every other cell.

Which ports. Only the ports of instantiated modules: the ports of a top (a module no
other module instantiates) are driven by the environment, whose drive strength the
constraints do not model (every input arrives at 0 ns from an ideal driver, as in a flat
mapping, where the block-top flow's ports are left alone as before), so the flat tops of
``make synth`` keep exactly the netlist they had. A port bit that reaches a clock pin (a pin
marked ``clock : true`` in the Liberty file, directly or through a submodule's clock port) is
the clock: that is the clock tree's business, and STA takes the clock as ideal, so it gets no
tree; neither does an instance's output bit that reaches one. Every other port bit is an
ordinary net, a synchronous ``rst`` included (it steers the reset value of every register of
the module and is buffered like any other high-fanout net).
A port driven by a tree in its parent counts as one load there, like any other cell input.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass


__all__ = ["BufferCell", "liberty_pins", "liberty_clock_pins", "find_buffer_cell",
           "buffer_register_outputs"]


@dataclass(frozen=True)
class BufferCell:
    """A non-inverting buffer of the library: its name, input and output pin."""
    name: str
    input_pin: str
    output_pin: str
    area: float


_CELL = re.compile(r"\bcell\s*\(\s*\"?([^\s\")]+)\"?\s*\)\s*\{")
_PIN = re.compile(r"\bpin\s*\(\s*\"?(\w+)\"?\s*\)\s*\{")


def _group(text: str, open_brace: int) -> str:
    """The body of the Liberty group whose ``{`` is at ``open_brace`` (nested groups kept)."""
    depth = 0
    for i in range(open_brace, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[open_brace + 1:i]
    raise ValueError("unbalanced braces in the Liberty file")


def _cells(liberty_text: str):
    """(name, area or None, {pin: (direction, function)}) of every cell of a Liberty file."""
    for m in _CELL.finditer(liberty_text):
        name, body = m.group(1), _group(liberty_text, m.end() - 1)
        pins = {}
        for pm in _PIN.finditer(body):
            pin = _group(body, pm.end() - 1)
            direction = re.search(r"direction\s*:\s*(\w+)", pin)
            function = re.search(r"function\s*:\s*\"([^\"]*)\"", pin)
            pins[pm.group(1)] = (direction.group(1) if direction else None,
                                 function.group(1).strip() if function else None)
        area = re.search(r"\barea\s*:\s*([0-9.]+)", body)
        yield name, float(area.group(1)) if area else None, pins


def liberty_clock_pins(liberty_text: str) -> dict[str, frozenset[str]]:
    """{cell: its pins marked ``clock : true``} of a Liberty file (a clock net is the clock
    tree's business, not a buffer tree's)."""
    out = {}
    for m in _CELL.finditer(liberty_text):
        body = _group(liberty_text, m.end() - 1)
        out[m.group(1)] = frozenset(
            pm.group(1) for pm in _PIN.finditer(body)
            if re.search(r"\bclock\s*:\s*true", _group(body, pm.end() - 1)))
    return out


def liberty_pins(liberty_text: str) -> dict[str, dict[str, str]]:
    """{cell: {pin: "input" / "output" / ...}} of a Liberty file (yosys' JSON of a mapped
    netlist gives no port directions for library cells)."""
    return {name: {pin: d for pin, (d, _) in pins.items() if d}
            for name, _, pins in _cells(liberty_text)}


def find_buffer_cell(liberty_text: str) -> BufferCell:
    """The largest-area (strongest) plain buffer of a Liberty file: one input, one output
    whose function is that input, not a clock buffer (a name starting with CLK)."""
    found = []
    for name, area, pins in _cells(liberty_text):
        if name.upper().startswith("CLK"):
            continue
        inputs = [p for p, (d, _) in pins.items() if d == "input"]
        outputs = [(p, f) for p, (d, f) in pins.items() if d == "output"]
        if len(inputs) == 1 and len(outputs) == 1 and outputs[0][1] == inputs[0] and area:
            found.append(BufferCell(name, inputs[0], outputs[0][0], area))
    if not found:
        raise ValueError("the Liberty file has no plain buffer cell (one input, output = input)")
    return max(found, key=lambda c: (c.area, c.name))


def _clock_bits(design: dict, clocks: dict[str, frozenset[str]]) -> dict[str, set[int]]:
    """{module: its bits that reach a clock pin}: a pin of ``clocks`` (cell type: its clock
    pins) or, through an instance, a clock bit of another module's port. The input port bits
    among them are the module's clock ports; the others are clocks its instances drive."""
    modules = design["modules"]
    found: dict[str, set[int]] = {}

    def of(name: str) -> set[int]:
        if name in found:
            return found[name]
        found[name] = set()            # the hierarchy has no cycles; this ends a bad one
        out = set()
        for cell in modules[name].get("cells", {}).values():
            sub = modules.get(cell["type"])
            for port, bits in cell["connections"].items():
                if port in clocks.get(cell["type"], ()):
                    out.update(b for b in bits if isinstance(b, int))
                elif sub is not None and port in sub.get("ports", {}):
                    inner = sub["ports"][port]["bits"]
                    out.update(b for i, b in enumerate(bits) if isinstance(b, int)
                               and i < len(inner) and inner[i] in of(cell["type"]))
        found[name] = out
        return out

    for name in modules:
        of(name)
    return found


def buffer_register_outputs(design: dict, sequential: frozenset[str], buffer: BufferCell,
                            fanout: int, pins: dict[str, dict[str, str]],
                            macros: dict[str, frozenset[str]] | None = None,
                            clocks: dict[str, frozenset[str]] | None = None) -> int:
    """Insert buffer trees (see the module docstring) into every module of ``design``, a
    yosys JSON netlist (``write_json``), in place. ``sequential``: the cell types whose
    outputs are register outputs (the library's flip-flops, memory macros); ``macros``: cell
    types whose input nets get trees as well (the memory macros), each with the input pins
    to leave alone (its clocks, :func:`liberty_clock_pins`); ``pins``: the
    port directions of the library's cells (:func:`liberty_pins`), used where the JSON has
    none; ``clocks``: the clock pins of the library's cells (:func:`liberty_clock_pins`),
    which tell a submodule's clock ports from the input ports that get trees. Returns the
    number of buffers inserted."""
    if fanout < 2:
        raise ValueError(f"fanout must be at least 2, got {fanout}")
    for module in design["modules"].values():
        for cell in module.get("cells", {}).values():
            if "port_directions" not in cell:
                known = pins.get(cell["type"], {})
                cell["port_directions"] = {p: known.get(p, "input") for p in cell["connections"]}
    instantiated = {c["type"] for m in design["modules"].values()
                    for c in m.get("cells", {}).values()} & set(design["modules"])
    clock_bits = _clock_bits(design, clocks or {})
    inserted = 0
    for module_name, module in design["modules"].items():
        cells = module.get("cells", {})
        if not cells:
            continue
        registers = set()
        if module_name in instantiated:        # a submodule: its input ports (not the clock)
            registers.update(b for p in module.get("ports", {}).values()
                             if p["direction"] == "input" for b in p["bits"]
                             if isinstance(b, int) and b not in clock_bits[module_name])
        for cell in cells.values():
            if cell["type"] in instantiated:   # a submodule's output: a driver ABC never saw
                for port, direction in cell["port_directions"].items():
                    if direction == "output":
                        registers.update(b for b in cell["connections"][port] if
                                         isinstance(b, int) and b not in clock_bits[module_name])
            if cell["type"] in sequential:
                for port, direction in cell["port_directions"].items():
                    if direction == "output":
                        registers.update(b for b in cell["connections"][port] if isinstance(b, int))
            if cell["type"] in (macros or {}):
                for port, direction in cell["port_directions"].items():
                    if direction == "input" and port not in macros[cell["type"]]:
                        registers.update(b for b in cell["connections"][port] if isinstance(b, int))
        loads = defaultdict(list)
        for name, cell in cells.items():
            for port, direction in cell["port_directions"].items():
                if direction != "input":
                    continue
                for i, bit in enumerate(cell["connections"][port]):
                    if bit in registers:
                        loads[bit].append((name, port, i))
        used = [b for n in module.get("netnames", {}).values() for b in n["bits"]
                if isinstance(b, int)]
        used += [b for p in module.get("ports", {}).values() for b in p["bits"]
                 if isinstance(b, int)]
        used += [b for c in cells.values() for bits in c["connections"].values() for b in bits
                 if isinstance(b, int)]
        next_bit = max(used, default=1) + 1
        for bit in sorted(loads):
            level = loads[bit]
            depth = 0
            while len(level) > fanout:
                groups = [level[k:k + fanout] for k in range(0, len(level), fanout)]
                parents = []
                for k, group in enumerate(groups):
                    net = next_bit
                    next_bit += 1
                    name = f"$fanout${bit}${depth}${k}"
                    cells[name] = {
                        "hide_name": 1, "type": buffer.name, "parameters": {}, "attributes": {},
                        "port_directions": {buffer.input_pin: "input",
                                            buffer.output_pin: "output"},
                        "connections": {buffer.input_pin: [bit], buffer.output_pin: [net]},
                    }
                    module.setdefault("netnames", {})[f"$fanout_net${net}"] = {
                        "hide_name": 1, "bits": [net], "attributes": {}}
                    for cell_name, port, i in group:
                        cells[cell_name]["connections"][port][i] = net
                    parents.append((name, buffer.input_pin, 0))
                    inserted += 1
                level = parents
                depth += 1
    return inserted


def main(argv=None) -> int:
    """``python -m kaleido_hw.flow.buffer_tree MAPPED.json BUFFERED.json --liberty LIB``: the step
    of ``docs/integration.md`` between the two yosys scripts."""
    import argparse
    import json
    from pathlib import Path

    from kaleido_hw.flow.stdcell import BUFFER_FANOUT, liberty_cells

    parser = argparse.ArgumentParser(prog="python -m kaleido_hw.flow.buffer_tree",
                                     description="buffer trees on the flip-flop outputs "
                                                 "and submodule input ports of a yosys "
                                                 "JSON netlist mapped onto LIB")
    parser.add_argument("mapped", help="yosys write_json output")
    parser.add_argument("buffered", help="where to write the buffered netlist (JSON)")
    parser.add_argument("--liberty", required=True, help="the Liberty file it is mapped onto")
    parser.add_argument("--fanout", type=int, default=BUFFER_FANOUT,
                        help=f"most loads per net (default {BUFFER_FANOUT}, as ABC's buffer -N)")
    args = parser.parse_args(argv)
    text = Path(args.liberty).read_text()
    design = json.loads(Path(args.mapped).read_text())
    n = buffer_register_outputs(design, liberty_cells(text)[1], find_buffer_cell(text),
                                args.fanout, liberty_pins(text),
                                clocks=liberty_clock_pins(text))
    Path(args.buffered).write_text(json.dumps(design))
    print(f"{n} buffers inserted")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
