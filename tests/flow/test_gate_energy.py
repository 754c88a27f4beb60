"""Gate-level energy flow (``kaleido_hw.flow.gate_sim``, ``kaleido_hw.flow.gate_energy``): toggle
counts of a tiny netlist checked against its stimulus, the pricing of measured toggles, the PE
event streams and the stored per-event table."""

import json
from pathlib import Path

import pytest

from golden.pe.model import BaselineCtrl, Op, PECtrl
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.flow import gate_energy as ge
from kaleido_hw.flow import stdcell
from kaleido_hw.flow.gate_sim import iverilog_available, simulate, toggle_counts

TOOLS = stdcell.stdcell_available() or iverilog_available()
needs_tools = pytest.mark.skipif(TOOLS is not None, reason=f"gate-level flow unavailable: {TOOLS}")

#: A register and an XOR: q follows d, x = q ^ {q[2:0], q[3]} (combinational, 4 cells).
TINY = """
module tiny(input clk, input rst, input [3:0] d, output reg [3:0] q, output [3:0] x);
  always @(posedge clk) q <= rst ? 4'd0 : d;
  assign x = q ^ {q[2:0], q[3]};
endmodule
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    work = tmp_path_factory.mktemp("tiny")
    r = stdcell.synth_stdcell("tiny", KaleidoConfig(), verilog=TINY, keep=work)
    assert r.area_um2, r.notes
    return work / "tiny.net.v"


@needs_tools
def test_toggles_of_a_register_follow_the_stimulus(tiny, tmp_path):
    values = [0x0, 0xF, 0x5, 0x5, 0xA, 0x0, 0x3, 0xC] * 8
    stream = [{"d": v} for v in values]
    warm = 4
    act, window = toggle_counts(simulate(tiny, "tiny", stream, tmp_path, warmup=warm))
    assert window == (len(values) - warm) * 10_000     # ps: one period per word after warmup
    for bit in range(4):
        seq = [(v >> bit) & 1 for v in values[warm - 1:]]   # q holds word warm-1 at dump start
        expected = sum(a != b for a, b in zip(seq, seq[1:]))
        assert act[("q", bit)].toggles == expected
        assert act[("d", bit)].toggles >= expected - 1
    assert act[("clk", None)].toggles >= 2 * (len(values) - warm)


@needs_tools
def test_measured_toggles_price_the_combinational_cells(tiny, tmp_path):
    lib = stdcell.liberty_path()
    design = ge._design("tiny", tiny, lib)
    ge.reference_power(design, lib, tmp_path / "ref")
    quiet = [{"d": 0x6}] * 40
    busy = [{"d": v} for v in [0x1, 0x2, 0x7, 0xC, 0x0, 0xF, 0x9] * 6]
    out, acts = {}, {}
    for name, stream in (("quiet", quiet), ("busy", busy)):
        act, _ = toggle_counts(simulate(tiny, "tiny", stream, tmp_path / name, warmup=4))
        out[name] = ge.event_energy(design, lib, act, len(stream) - 4, tmp_path / name)
        acts[name] = act
    assert out["busy"]["total"] > 2 * out["quiet"]["total"]
    # Constant data: only the registers' clock pins and leakage remain.
    assert out["quiet"]["switching"] == pytest.approx(0.0, abs=1e-9)
    # Switching of the combinational cells is exactly 1/2 C V^2 f per measured toggle of
    # their output nets (C = the Liberty input capacitances the net drives); the cells
    # that drive only output ports (no load: the x outputs) keep OpenSTA's figure.
    cycles = len(busy) - 4
    expected, unloaded = 0.0, 0
    for kind, _name, conns in design.instances:
        if kind in design.sequential:
            continue
        outs = [key for pin, key in conns
                if key is not None and design.cells[kind][pin][0] == "output"]
        if sum(design.loads.get(k, 0.0) for k in outs) == 0:
            unloaded += 1
            continue
        expected += sum(0.5 * design.voltage ** 2 * 1e9 / ge.PERIOD_NS * 1e-12 *
                        design.loads[k] * acts["busy"][k].toggles / cycles for k in outs)
    assert out["busy"]["fallback_cells"] == unloaded < len(design.instances)
    assert expected > 0
    assert out["busy"]["comb_switching"] == pytest.approx(expected, rel=1e-3)


@needs_tools
def test_baseline_pe_events_order(tmp_path):
    res = {e.event: e for e in ge.measure_top("baseline_pe", ("mac", "clock"), cycles=96,
                                               warmup=8, work=tmp_path)}
    assert res["mac"].pj > 2 * res["clock"].pj > 0
    assert res["clock"].toggles_per_cycle == 0


def test_event_streams_carry_the_event():
    s = ge.event_stream("kaleido_pe", "low_pair", 300)
    ops = {PECtrl.unpack(w["row__ctrl"]).op for w in s}
    assert ops == {Op.LOW_PAIR}
    assert sum(PECtrl.unpack(w["row__ctrl"]).clear & 1 for w in s) == 3     # every 128 steps
    b = ge.event_stream("baseline_pe", "mac", 10)
    assert all(BaselineCtrl.unpack(w["row__ctrl"]).acc == 1 for w in b)
    assert ge.event_stream("kaleido_pe", "clock", 5) == [{}] * 5
    assert all(w["drain_in__valid"] == 1 for w in ge.event_stream("baseline_pe", "drain", 5))


def test_array_streams_follow_the_step_layouts():
    s = ge.array_stream("reuse_step", 40)
    for c, w in enumerate(s):
        for r in range(4):
            row = (w["row"] >> (15 * r)) & 0x7FFF
            assert (row >> 10) & 1 == 1                          # valid
            assert (row >> 11) & 3 == (c // ge.ARRAY_PASS_STEPS) % 4   # pass_idx
            assert (row >> 13) & 1 == int(c % ge.ARRAY_PASS_STEPS == 0)   # first
            assert (row >> 14) & 1 == 1                          # issue
            assert (row >> 8) & 3 in (0, 1, 2)                   # a real code
    dense = ge.array_stream("dense_step", 8)
    assert all((w["col"] >> (11 * j + 8)) & 3 == 2 for w in dense for j in range(4))  # NONE
    bubble = ge.array_stream("bubble", 20)
    assert all(w == bubble[0] for w in bubble) and (bubble[0]["row"] >> 14) & 1 == 0


def test_matcher_stream_offers_a_batch_every_few_cycles():
    cfg = KaleidoConfig()
    s = ge.matcher_stream("match", 3 * ge.MATCHER_BATCH_CYCLES, cfg)
    assert all(w["i__valid"] == 1 and w["o__ready"] == 1 for w in s)
    payloads = [w["i__payload"] for w in s]
    assert len(set(payloads)) == 3
    ids = cfg.cols * cfg.token_id_width
    codes = [(payloads[0] >> (ids + 2 * i)) & 3 for i in range(cfg.cols * cfg.matcher_channels)]
    assert set(codes) <= {0, 1, 2} and len(set(codes)) == 3
    assert ge.matcher_stream("clock", 4) == [{}] * 4


def test_scheduler_stream_carries_a_heads_work_patterns():
    cfg = KaleidoConfig()
    s = ge.scheduler_stream("schedule", 300, cfg)
    assert all(w["i__valid"] == 1 and w["o__ready"] == 1 for w in s)
    T, W = cfg.token_id_width, cfg.sched_pattern_width
    ids = [w["i__payload"] & ((1 << T) - 1) for w in s]
    patterns = {w["i__payload"] >> T for w in s}
    assert ids[:3] == [0, 1, 2] and max(patterns) < 1 << W and len(patterns) > 4
    assert ge.scheduler_stream("clock", 3) == [{}] * 3


@pytest.mark.skipif(iverilog_available() is not None, reason="Icarus Verilog missing")
def test_sram_macro_model_reads_the_old_word_and_writes_by_bit(tmp_path):
    """The behavioural model of a macro (gate-level runs of tops with memories): a registered
    read returns the word before a write on the same edge, writes take only enabled bits."""
    import subprocess

    from kaleido_hw.flow.sram_macros import macro_verilog
    model = macro_verilog("  KSRAM_8x4_a3_r1w1 m (")
    tb = """
module tb;
  reg clk = 0; reg re = 0; reg [2:0] ra = 0, wa = 0; reg [3:0] we = 0, wd = 0;
  wire [3:0] rd;
  KSRAM_8x4_a3_r1w1 m (.RD_CLK(clk), .RD_EN(re), .RD_ARST(1'b0), .RD_SRST(1'b0),
    .RD_ADDR(ra), .RD_DATA(rd), .WR_CLK(clk), .WR_EN(we), .WR_ADDR(wa), .WR_DATA(wd));
  always #5 clk = ~clk;
  initial begin
    wa = 3; wd = 4'hA; we = 4'hF; @(posedge clk); #1;
    wd = 4'h5; we = 4'h3; re = 1; ra = 3; @(posedge clk); #1;   // read old 0xA, write low bits
    $display("%h", rd);
    we = 0; @(posedge clk); #1;
    $display("%h", rd);
    $finish;
  end
endmodule
"""
    (tmp_path / "m.v").write_text(model)
    (tmp_path / "tb.v").write_text(tb)
    subprocess.run(["iverilog", "-o", "tb.vvp", "tb.v", "m.v"], cwd=tmp_path, check=True)
    out = subprocess.run(["vvp", "-n", "tb.vvp"], cwd=tmp_path, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == ["a", "9"]


def test_bad_arguments_name_the_parameter():
    with pytest.raises(ValueError, match="event of baseline_pe must be one of"):
        ge.event_stream("baseline_pe", "mul", 4)
    with pytest.raises(ValueError, match="top must be one of"):
        ge.event_stream("vector_unit", "mac", 4)
    with pytest.raises(ValueError, match="event of cluster_scheduler must be one of"):
        ge.scheduler_stream("match", 4)
    with pytest.raises(ValueError, match="event of merge_matcher must be one of"):
        ge.matcher_stream("idle", 4)
    with pytest.raises(ValueError, match="event of an array must be one of"):
        ge.array_stream("mac", 4)
    with pytest.raises(ValueError, match="cycles must exceed warmup"):
        ge.measure_top("baseline_pe", cycles=4, warmup=8)


def test_stored_table_is_complete_and_reproducible():
    d = json.loads(ge.DATA_FILE.read_text())
    assert d["command"].startswith("python -m kaleido_hw.flow.gate_energy")
    assert d["period_ns"] == ge.PERIOD_NS
    for top, events in ge.EVENTS.items():
        assert set(d["events"][top]) == set(events)
        e = d["events"][top]
        for name, row in e.items():
            assert row["pj"] == pytest.approx(row["total_mw"] * ge.PERIOD_NS, rel=1e-9)
            assert row["pj"] >= e["clock"]["pj"] * 0.999, name
    k = d["events"]["kaleido_pe"]
    assert k["low"]["pj"] < k["mul"]["pj"]
