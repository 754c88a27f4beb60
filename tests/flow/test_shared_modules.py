"""Blocks built once (``kaleido_hw.flow.shared_modules``): the Verilog computes what the
whole-design conversion computes, a design that reads a shared block's internals is refused,
and the engine blocks' sharing keys are only equal for identical hardware."""

import dataclasses
import shutil

import pytest
from amaranth import Module, Signal
from amaranth.back import rtlil
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from icarus_harness import run_icarus

from kaleido_hw.config import KaleidoConfig
from kaleido_hw.dispatch.merged_array import MergedArray
from kaleido_hw.array.array import PEArray
from kaleido_hw.engine.array_sequencer import ArraySequencer
from kaleido_hw.engine.pv_sequencer import PvSequencer
from kaleido_hw.flow.dedup import instance_modules
from kaleido_hw.flow.generate import emit_verilog
from kaleido_hw.flow.shared_modules import convert_shared, shared_key


class _Block(wiring.Component):
    """A registered block with a comb output; ``k`` shapes its netlist."""
    a: In(4)
    y: Out(6)

    def __init__(self, k):
        self.k = k
        self.r = Signal(6, name="r")
        super().__init__()

    def shared_module_key(self):
        return self.k

    def elaborate(self, platform):
        m = Module()
        r = self.r
        m.d.sync += r.eq(self.a * 3 + self.k)
        m.d.comb += self.y.eq(r ^ self.a)
        return m


class _Top(wiring.Component):
    x: In(16)
    y: Out(24)

    def __init__(self, peek=None):
        self.peek = peek
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        blocks = []
        for i, k in enumerate((1, 1, 2, 1)):
            m.submodules[f"blk{i}"] = b = _Block(k)
            # Driven through expressions: the whole-design conversion invents port names.
            m.d.comb += b.a.eq(self.x[4 * i:4 * i + 4] ^ i)
            blocks.append(b)
        out = blocks[0].y | (blocks[1].y << 6) | (blocks[2].y << 12) | (blocks[3].y << 18)
        if self.peek is not None:       # reads an internal register of a shared block
            m.d.comb += self.y.eq(out ^ blocks[self.peek].r)
        else:
            m.d.comb += self.y.eq(out)
        return m


_BENCH = """
module bench;
  reg clk = 0, rst = 1;
  reg [15:0] x = 0;
  wire [23:0] y;
  top dut(.clk(clk), .rst(rst), .x(x), .y(y));
  integer i;
  initial begin
    #1 clk = 1; #1 clk = 0; rst = 0;
    for (i = 0; i < 100; i = i + 1) begin
      x = $random; #1 clk = 1; #1 clk = 0; $display("%h", y);
    end
    $finish;
  end
endmodule
"""


def _run(tmp_path, name, verilog):
    return run_icarus(tmp_path, name, verilog + _BENCH)


def test_blocks_are_converted_once_per_key():
    text = convert_shared(_Top(), "top")
    # One module per key (k = 1 from blk0, k = 2 from blk2), each named after its first
    # instance; the other instances point at them.
    assert text.count("module \\top.blk") == 2
    assert "module \\top.blk0\n" in text and "module \\top.blk2\n" in text
    assert "cell \\top.blk0 \\blk3\n" in text and "cell \\top.blk2 \\blk2\n" in text


@pytest.mark.skipif(shutil.which("iverilog") is None, reason="needs Icarus Verilog")
def test_shared_conversion_computes_the_same(tmp_path):
    whole, shared = emit_verilog(_Top(), "top"), emit_verilog(_Top(), "top", share=True)
    assert list(instance_modules(shared, "top")) == list(instance_modules(whole, "top"))
    assert shared.count("\nmodule ") == 3
    out = _run(tmp_path, "shared", shared)
    assert out == _run(tmp_path, "whole", whole)
    assert len(out.splitlines()) == 100 and "x" not in out


@pytest.mark.parametrize("peek", [0, 1, 3], ids=["first", "copy", "last-copy"])
def test_reading_a_shared_blocks_internals_is_refused(peek):
    """Across an Instance the register would be an undriven net: refuse, naming it, whether
    the block is the one converted (blk0) or a copy that is never elaborated."""
    with pytest.raises(ValueError, match=r"does not export as ports: r\b"):
        convert_shared(_Top(peek=peek), "top")


def test_copies_are_not_elaborated(monkeypatch):
    """Only the first block of each key is elaborated (the copies become instances of it)."""
    calls = []
    elaborate = _Block.elaborate
    monkeypatch.setattr(_Block, "elaborate",
                        lambda self, platform: calls.append(self.k) or elaborate(self, platform))
    convert_shared(_Top(), "top")
    assert sorted(calls) == [1, 2]


SMALL = KaleidoConfig(engine_arrays=2, rows=2, cols=2, engine_max_tokens=16,
                      engine_max_head_dim=16, sched_pattern_width=8, sched_entries=8,
                      sched_clusters=2, matcher_channels=8)


def _rtlil(component):
    return rtlil.convert(component, name="block", emit_src=False)


def test_sequencer_key_is_sound():
    """The P sequencers of a build are one module: equal keys, equal netlists; with stall
    injection each array's gates differ, and so do the keys."""
    a, b = ArraySequencer(SMALL, 0), ArraySequencer(SMALL, 1)
    assert shared_key(a) == shared_key(b)
    assert _rtlil(a) == _rtlil(b)
    stalled = dataclasses.replace(SMALL, engine_stall_seed=3)
    a, b = ArraySequencer(stalled, 0), ArraySequencer(stalled, 1)
    assert shared_key(a) != shared_key(b)
    assert _rtlil(a) != _rtlil(b)


def test_pv_sequencer_key_is_sound():
    """pv_engine's P sequencers are one module (the array index is a port); another stride
    is another key and another netlist."""
    a, b = PvSequencer(2, 3, 6, 3, 4), PvSequencer(2, 3, 6, 3, 4)
    assert shared_key(a) == shared_key(b)
    assert _rtlil(a) == _rtlil(b)
    c = PvSequencer(2, 3, 6, 3, 2)
    assert shared_key(a) != shared_key(c)
    assert _rtlil(a) != _rtlil(c)


@pytest.mark.filterwarnings("ignore:.*created but never used")
def test_array_key_is_sound():
    """Arrays share a key only with the same cell, layouts and tag width."""
    a, b = MergedArray(SMALL, tag_width=9), MergedArray(SMALL, tag_width=9)
    assert shared_key(a) == shared_key(b)
    assert _rtlil(a) == _rtlil(b)
    assert shared_key(a) != shared_key(MergedArray(SMALL, tag_width=8))
    assert shared_key(a) != shared_key(PEArray(SMALL, tag_width=9))
