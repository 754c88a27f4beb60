"""Energy model (``golden.energy``): counters x per-event energies, memory figures, the stored
paper-scale counters."""

import dataclasses
import json

import pytest

from golden.energy import memory
from golden.energy.head_counters import head_counters
from golden.energy.model import (DATA, VARIANTS, Energies, HeadShape, _array_calibrated,
                                 dram_bytes, head_energy, linear_energy, load_energies)
from golden.workloads import make_qkv

#: Round per-event figures, so that the expected sums can be written out by hand.
E = Energies(reuse={"mul": 10.0, "low": 6.0, "low_pair": 11.0, "linear": 12.0, "idle": 4.0,
                    "drain": 3.0, "clock": 2.0},
             plain={"mac": 7.0, "idle": 3.0, "drain": 1.5, "clock": 1.0},
             scheduler_pj=100.0, matcher_pj=50.0, sram_pj_per_byte=2.0, dram_pj_per_byte=20.0)


def counters(**changes):
    # 1 array of 2x2, 10 cycles: 6 issued steps, 1 bubble, 3 idle cycles; 20 busy PE-cycles.
    c = {"cycles": 10, "busy_pe_cycles": 20, "issued": [3, 1, 1, 1], "merged": 1,
         "bubbles": 1, "idle": 3, "quads": 1}
    c.update(changes)
    return c


SHAPE = HeadShape(tokens=8, head_dim=4, arrays=1, rows=2, cols=2)


def test_every_pe_cycle_gets_one_class_and_the_sums_are_exact():
    r = head_energy(counters(), SHAPE, "full", E)
    assert r["pe_cycles"] == 1 * 4 * 10
    assert r["pe_classes"] == {"mul": 16 * 10.0, "low": 0.0, "low_pair": 4 * 11.0,
                               "idle": 4 * 4.0, "clock": 4 * 4 * 2.0,
                               "drain": 1 * 4 * 4 * 1.5 * 1.0}
    # 7 LOW steps in the head, 2 pair cycles take 4 of them: 3 priced at LOW.
    r7 = head_energy(counters(), SHAPE, "full", E, low=7, pair_cycles=2)
    assert r7["pe_classes"] == {"mul": 15 * 10.0, "low": 3 * 6.0, "low_pair": 2 * 11.0,
                                "idle": 4 * 4.0, "clock": 4 * 4 * 2.0,
                                "drain": 1 * 4 * 4 * 1.5 * 1.0}
    assert head_energy(counters(), SHAPE, "dense", E, low=7)["pe_classes"]["low"] == 0
    with pytest.raises(ValueError, match="low and pair_cycles must be >= 0"):
        head_energy(counters(), SHAPE, "pe", E, low=-1)
    assert r["dispatcher"] == 10 * (1 * 100.0 + 1 * 50.0)    # the Q side's scheduler, a matcher
    assert r["sram_bytes"] == 6 * 4 * 1.25 + 1 * 2 + 2 * 4 * 4 * 3
    assert r["dram_bytes"] == 64
    assert r["total"] == pytest.approx(r["pe"] + r["dispatcher"] + r["sram"] + r["dram"])


def test_matcher_idles_between_slots():
    import dataclasses
    e = dataclasses.replace(E, matcher_idle_pj=5.0)
    # issued[3] = 1 slot at 50 pJ, the other 9 matcher-cycles at 5 pJ.
    assert head_energy(counters(), SHAPE, "pe-m", e)["dispatcher"] == 50.0 + 9 * 5.0


def test_variants_price_their_hardware():
    c = counters(merged=0)
    plain = head_energy(c, SHAPE, "dense-plain", E)
    assert plain["pe_classes"]["mul"] == 20 * 7.0 and plain["dispatcher"] == 0
    assert head_energy(c, SHAPE, "pe", E)["dispatcher"] == 0
    assert head_energy(c, SHAPE, "pe-sh", E)["dispatcher"] == 10 * 100.0     # Q side only
    two = dataclasses.replace(SHAPE, schedulers=2)                           # sched_sides qk
    assert head_energy(c, two, "pe-sh", E)["dispatcher"] == 10 * 200.0
    assert head_energy(c, SHAPE, "pe-m", E)["dispatcher"] == 10 * 50.0
    assert head_energy(c, SHAPE, "dense", E)["sram_bytes"] < head_energy(c, SHAPE, "pe",
                                                                         E)["sram_bytes"]


def test_array_calibration_matches_the_array():
    pe = {"mul": 10.0, "idle": 4.0, "clock": 2.0}
    array = {"dense_step": 4 * 7.0, "clock": 4 * 3.0}      # 4 PEs: 7 per step, 3 per idle cycle
    cal = _array_calibrated(pe, array, "mul", 4)
    assert cal["clock"] == 3.0 and cal["mul"] == pytest.approx(7.0)
    assert cal["idle"] == pytest.approx(3.0 + (7.0 - 3.0) / (10.0 - 2.0) * (4.0 - 2.0))


def test_array_step_pricing():
    arrays = {"reuse": {"dense_step": 50.0, "reuse_step": 60.0, "clock": 8.0},
              "plain": {"dense_step": 40.0, "clock": 5.0}}
    e = Energies(E.reuse, E.plain, 100.0, 50.0, 2.0, 20.0, "array-step", arrays)
    shape = HeadShape(8, 4, 1, rows=4, cols=4)
    c = {"cycles": 10, "busy_pe_cycles": 60, "issued": [3, 1, 1, 1], "merged": 0,
         "bubbles": 1, "idle": 3, "quads": 1}
    assert head_energy(c, shape, "full", e)["pe_classes"] == {"step": 6 * 60.0,
                                                              "clock": 4 * 8.0}
    assert head_energy(c, shape, "dense-plain", e)["pe"] == 6 * 40.0 + 4 * 5.0
    with pytest.raises(ValueError, match="rows x cols must be 16"):
        head_energy(counters(), SHAPE, "pe", e)
    with pytest.raises(ValueError, match="calibration must be one of"):
        load_energies(calibration="chip")


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="variant must be one of"):
        head_energy(counters(), SHAPE, "sparse", E)
    with pytest.raises(ValueError, match="counters inconsistent"):
        head_energy(counters(idle=4), SHAPE, "pe", E)
    with pytest.raises(ValueError, match="size must be one of"):
        memory.sram_pj_per_byte("2MB")
    with pytest.raises(ValueError, match="node_nm must be 45 or 180"):
        memory.sram_pj_per_byte("1MB", 16)
    with pytest.raises(ValueError, match="window must be 2 or 3"):
        linear_energy(counters(), 2, 2, 1, 8, 4, 4, 0, True, E)
    with pytest.raises(ValueError, match="c_out must be >= 1"):
        linear_energy(counters(), 2, 2, 1, 8, 4, 0, 2, True, E)


def test_dram_traffic_follows_the_buffer():
    assert dram_bytes(HeadShape(100, 10, 1, buffer_bytes=2000)) == 2000
    # Q = K = 1000 B, buffer 1000 B: Q in two halves of 500 B, K streamed twice.
    assert dram_bytes(HeadShape(100, 10, 1, buffer_bytes=1000)) == 1000 + 2 * 1000


def test_memory_figures_are_the_cited_ones():
    assert memory.sram_pj_per_byte("1MB", 45) == 100.0 / 8
    assert memory.sram_pj_per_byte("8KB", 180) == 10.0 / 8 * 16
    assert memory.dram_pj_per_byte() == pytest.approx(1300.0 / 8)


def test_counters_of_a_small_head_price_consistently():
    d = head_counters("hunyuanvideo", "2x4x4", arrays=2)
    shape = HeadShape.from_counters(d)
    res = {v: head_energy(d["variants"]["dense" if v == "dense-plain" else v], shape, v, E)
           for v in VARIANTS}
    # Same counters, cheaper events: plain arrays cost less PE energy than dense on ReusePEs.
    assert res["dense-plain"]["pe"] < res["dense"]["pe"]
    # Reuse skips work: fewer busy PE-cycles than dense, so less MUL energy.
    assert res["pe"]["pe_classes"]["mul"] < res["dense"]["pe_classes"]["mul"]


def test_op_mix_counts_the_engines_busy_cycles():
    from golden.energy.op_mix import busy_op_mix
    from golden.numerics import ChannelGroups
    q, k, _ = make_qkv("hunyuanvideo", "2x4x4", seed=0)
    mix = busy_op_mix(q, k, "2x4x4", ChannelGroups.from_preset("hunyuanvideo"))
    d = head_counters("hunyuanvideo", "2x4x4", arrays=2, variants=("pe",))
    assert mix["busy"] == d["variants"]["pe"]["busy_pe_cycles"]
    assert 0 < mix["low"] < mix["mul"]
    paper = json.loads((DATA / "paper_op_mix.json").read_text())
    counters_ = json.loads((DATA / "paper_counters.json").read_text())
    assert paper["busy"] == counters_["variants"]["pe"]["busy_pe_cycles"]
    assert paper["command"].startswith("python -m golden.energy.op_mix")


def test_linear_layer_energy():
    from kaleido_hw.engine.host import linear_counters
    from kaleido_hw.reports.linear_report import report_cores
    import numpy as np
    q, _, _ = make_qkv("hunyuanvideo", "2x4x4", seed=0)
    reuse_core, plain = report_cores(4, 4, 1)
    out = {}
    for reuse in (False, True):
        c = linear_counters(reuse_core if reuse else plain, q, 8, "2x4x4",
                            variant="pe" if reuse else "dense")
        out[reuse] = linear_energy(c, 4, 4, 1, q.shape[0], q.shape[1], 8, 2, reuse, E)
        assert out[reuse]["pe_cycles"] == 16 * c["compute"]
        assert out[reuse]["pe_classes"]["clock"] > 0
    assert out[True]["cycles"] < out[False]["cycles"]
    assert out[True]["pe"] < out[False]["pe"]


def test_stored_data_is_complete():
    for cal in ("pe", "array", "array-step"):
        load_energies(calibration=cal)
    e = load_energies()
    assert set(e.reuse) == {"mul", "low", "low_pair", "linear", "idle", "drain", "clock"}
    assert set(e.plain) == {"mac", "idle", "drain", "clock"}
    d = json.loads((DATA / "paper_counters.json").read_text())
    assert d["command"].startswith("python -m golden.energy.head_counters")
    assert d["tokens"] == 33 * 45 * 80 and d["arrays"] == 16384
    assert set(d["variants"]) == {"dense", "pe", "pe-sh", "pe-m", "full"}
    shape = HeadShape.from_counters(d)
    for v in ("pe", "full"):
        head_energy(d["variants"][v], shape, v, e)       # consistent counters
    disp = json.loads((DATA / "dispatcher.json").read_text())
    assert disp["command"].startswith("python -m kaleido_hw.flow.gate_energy")
