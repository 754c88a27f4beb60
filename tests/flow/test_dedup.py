"""Shared modules in the generated Verilog compute what one module per instance computes.

A small design with repeated blocks (driven through expressions, so Amaranth invents port
names that differ per instance), one block that differs only by a constant, a two-level
hierarchy, an instance named by a Verilog keyword, and a memory: its shared and unshared
Verilog run side by side in Icarus on random inputs and must print the same outputs.
"""

import shutil

import pytest
from amaranth import Module, Signal
from amaranth.back import rtlil
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out
from icarus_harness import run_icarus

from kaleido_hw.flow.dedup import instance_modules, share_identical_modules
from kaleido_hw.flow.generate import emit_verilog, zero_memory_init_skipped


class _Leaf(wiring.Component):
    a: In(4)
    y: Out(6)

    def __init__(self, k):
        self.k = k
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        r = Signal(6)
        m.d.sync += r.eq(self.a * 3 + self.k)
        m.d.comb += self.y.eq(r ^ self.a)
        return m


class _Pair(wiring.Component):
    a: In(4)
    y: Out(7)

    def __init__(self, k):
        self.k = k
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        m.submodules.lo = lo = _Leaf(self.k)
        m.submodules.table = hi = _Leaf(self.k)      # "table" is a Verilog keyword
        m.d.comb += [lo.a.eq(self.a + 1), hi.a.eq(self.a[1:] << 1), self.y.eq(lo.y + hi.y)]
        return m


class _Top(wiring.Component):
    x: In(16)
    we: In(1)
    y: Out(28)
    q: Out(8)

    def elaborate(self, platform):
        m = Module()
        outs = []
        for i, k in enumerate((1, 1, 2, 1)):
            m.submodules[f"pair{i}"] = p = _Pair(k)
            m.d.comb += p.a.eq(self.x[4 * i:4 * i + 4] ^ i)
            outs.append(p.y)
        m.d.comb += self.y.eq(outs[0] | (outs[1] << 7) | (outs[2] << 14) | (outs[3] << 21))
        m.submodules.mem = mem = memory.Memory(shape=8, depth=4, init=[])
        w, r = mem.write_port(), mem.read_port()
        m.d.comb += [w.addr.eq(self.x[:2]), w.data.eq(self.x[8:]), w.en.eq(self.we),
                     r.addr.eq(self.x[2:4]), self.q.eq(r.data)]
        return m


_BENCH = """
module bench;
  reg clk = 0, rst = 1, we = 0;
  reg [15:0] x = 0;
  wire [27:0] y;
  wire [7:0] q;
  top dut(.clk(clk), .rst(rst), .x(x), .we(we), .y(y), .q(q));
  integer i;
  initial begin
    #1 clk = 1; #1 clk = 0; rst = 0;
    for (i = 0; i < 4; i = i + 1) begin x = i | (i << 8); we = 1; #1 clk = 1; #1 clk = 0; end
    we = 0;
    for (i = 0; i < %d; i = i + 1) begin
      x = $random; #1 clk = 1; #1 clk = 0; $display("%%h %%h", y, q);
    end
    $finish;
  end
endmodule
"""


def _run(tmp_path, name, verilog):
    return run_icarus(tmp_path, name, verilog + _BENCH % 200)


@pytest.mark.skipif(shutil.which("iverilog") is None, reason="needs Icarus Verilog")
def test_shared_modules_compute_the_same(tmp_path):
    plain = emit_verilog(_Top(), "top")
    shared = share_identical_modules(plain)
    # 1 top + 4 pairs + 8 leaves -> top, one pair and one leaf per constant (k = 1, 2).
    assert plain.count("\nmodule ") == 13
    assert shared.count("\nmodule ") == 5
    assert shared == emit_verilog(_Top(), "top", share=True)
    assert share_identical_modules(shared) == shared       # a fixed point
    assert "pair1" in shared and r"\table " in shared      # instance names are kept
    out = _run(tmp_path, "shared", shared)
    assert out == _run(tmp_path, "plain", plain)
    assert len(out.splitlines()) == 200 and "x" not in out     # every word read was written


def test_instance_paths_are_the_same_shared_or_not():
    """Every instance keeps its hierarchical path; only the module behind it changes."""
    plain = emit_verilog(_Top(), "top")
    shared = share_identical_modules(plain)
    a, b = instance_modules(plain, "top"), instance_modules(shared, "top")
    assert list(a) == list(b) == ["", "pair0", "pair0.lo", "pair0.table", "pair1", "pair1.lo",
                                  "pair1.table", "pair2", "pair2.lo", "pair2.table", "pair3",
                                  "pair3.lo", "pair3.table"]
    assert all(m == ("top." + p if p else "top") for p, m in a.items())
    assert b["pair3.table"] == b["pair0.lo"] == "top.pair0.lo" and b["pair2"] == "top.pair2"
    assert len(set(b.values())) == 5


def test_an_unrecognised_instantiation_keeps_its_module():
    text = ("module top(a);\n  input a;\n  wire a;\n  \\top.u  u (\n    .a(a)\n  );\n"
            "  \\top.v  v(.a(a));\nendmodule\n\n"
            "module \\top.u (a);\n  input a;\n  wire a;\nendmodule\n\n"
            "module \\top.v (a);\n  input a;\n  wire a;\nendmodule\n")
    with pytest.raises(ValueError, match="still instantiated"):
        share_identical_modules(text)


def test_zero_memory_initialisers_are_dropped_others_kept():
    class _Mems(wiring.Component):
        a: In(2)
        y: Out(16)

        def elaborate(self, platform):
            m = Module()
            m.submodules.ram = ram = memory.Memory(shape=8, depth=4, init=[])
            m.submodules.rom = rom = memory.Memory(shape=8, depth=4, init=[5, 0, 7, 1])
            r0, r1 = ram.read_port(domain="comb"), rom.read_port(domain="comb")
            w = ram.write_port()
            m.d.comb += [r0.addr.eq(self.a), r1.addr.eq(self.a), w.addr.eq(self.a),
                         w.data.eq(self.a), w.en.eq(1), self.y.eq(r0.data | (r1.data << 8))]
            return m

    il = rtlil.convert(_Mems(), name="mems", emit_src=False)
    assert il.count("$meminit_v2") == 2
    with zero_memory_init_skipped():
        kept = rtlil.convert(_Mems(), name="mems", emit_src=False)
    assert kept.count("$meminit_v2") == 1 and "00000001000001110000000000000101" in kept
    assert rtlil.convert(_Mems(), name="mems", emit_src=False) == il     # restored after
    verilog = emit_verilog(_Mems(), "mems")
    assert "rom[0] = 8'h05;" in verilog and "ram[0] =" not in verilog
