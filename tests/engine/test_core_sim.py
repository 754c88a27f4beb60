"""The engine core's cocotb bench (sim/engine/core: ``kaleido_core``, the CoreController and
the AxiDma behind one command stream, against cocotbext-axi's AxiRam with random pauses on
every AXI channel) from pytest, on small generated builds (d = 16, boxes of 16 or 32 tokens)
(Icarus in ``make test``; the Verilator build, which takes minutes, is marked ``full_set``
and runs in ``make regress``): a head of several boxes (padding at the grid's edge) with the memory
equal to the interpreter's byte for byte and the counters equal to
``golden.engine.core_model.core_counters``; a malformed command, an AXI error response and a
reset in the middle of a run, each followed by a clean run; and the files of ``kaleido-hw
program`` for a small build, at a base address high in the AXI space, replayed by the bench's
``test_program``.

``make regress`` runs the bench on the default build (``rtl_out/kaleido_core.v``: 4 arrays of
4 x 4, d = 128, boxes of 64 tokens) with its small head; ``make bench-head`` runs the
1,024-token hunyuanvideo head on it (``KALEIDO_CORE_GRID=4x16x16``, ``docs/engine.md``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "sim"))
from runner import run_variant  # noqa: E402

from kaleido_hw.cli import main  # noqa: E402
from kaleido_hw.config import KaleidoConfig  # noqa: E402
from token_data import smooth_tensors  # noqa: E402

#: variant -> (configuration, simulator, grid)
VARIANTS = {
    "p2-full-d16": (KaleidoConfig(engine_arrays=2, engine_max_head_dim=16, engine_max_tokens=32),
                    "verilator", "2x4x6"),
    "p1-none-d16": (KaleidoConfig(engine_arrays=1, rows=2, cols=2, engine_max_head_dim=16,
                                  engine_max_tokens=16, engine_dispatcher="none"),
                    "icarus", "2x3x5"),
}


#: Builds with the attention path (``core_attention``): variant -> (configuration,
#: simulator, grid); only the bench's ``test_attention_head`` runs on them.
ATTENTION_VARIANTS = {
    f"att-p2-d16-{sim}": (KaleidoConfig(rows=2, cols=2, engine_arrays=2, engine_max_tokens=16,
                                        engine_max_head_dim=16, engine_dispatcher="none",
                                        vector_lanes=4, vector_max_row=16,
                                        core_attention=True), sim, "2x3x5")
    for sim in ("icarus", "verilator")}


@pytest.mark.sim
@pytest.mark.parametrize("variant", [
    # the Verilator build takes about 6 minutes: make regress runs it
    pytest.param(v, marks=pytest.mark.full_set) if ATTENTION_VARIANTS[v][1] == "verilator"
    else v for v in ATTENTION_VARIANTS])
def test_core_attention_bench(variant, monkeypatch):
    """Whole attention heads through the core's AXI port on both simulators: O bit-exact."""
    config, sim, grid = ATTENTION_VARIANTS[variant]
    monkeypatch.setenv("KALEIDO_CORE_GRID", grid)
    run_variant("engine/core", "kaleido_core", config, variant, sim=sim,
                testcase="test_attention_head")


#: The xdist group of the tests that build and run the Icarus variant: one worker builds it.
P1_GROUP = pytest.mark.xdist_group("core-p1-none-d16")


@pytest.mark.sim
@pytest.mark.parametrize("variant", [
    # the Verilator build of the core takes minutes: make regress runs it
    pytest.param(v, marks=pytest.mark.full_set if VARIANTS[v][1] == "verilator" else P1_GROUP)
    for v in VARIANTS])
def test_core_bench(variant, monkeypatch):
    config, sim, grid = VARIANTS[variant]
    monkeypatch.setenv("KALEIDO_CORE_GRID", grid)
    run_variant("engine/core", "kaleido_core", config, variant, sim=sim)


@pytest.mark.sim
@P1_GROUP
def test_core_bench_runs_program_files(tmp_path, monkeypatch):
    """``kaleido-hw program`` files (S of a padded 2x3x5 head, groups 4/6/6 of the user's
    data, base 0x4000_0000) for the small Icarus build run through the Verilog core with
    cocotbext-axi's AxiRam: the memory it leaves is ``memory_out.bin``, its counters and
    cycles are ``program.json``'s (the bench's ``test_program``)."""
    config, sim, _ = VARIANTS["p1-none-d16"]
    toml = tmp_path / "core.toml"
    toml.write_text(config.to_toml())
    q, k = smooth_tensors((2, 3, 5), 16, 3, 2)
    np.savez(tmp_path / "head.npz", q=q, k=k)
    out = tmp_path / "program"
    assert main(["program", "--out", str(out), "--config", str(toml), "--grid", "2x3x5",
                 "--groups", "4,6,6", "--workload", str(tmp_path / "head.npz"),
                 "--base", "0x40000000"]) == 0
    assert "cycles_axi_ram" in json.loads((out / "program.json").read_text())
    monkeypatch.setenv("KALEIDO_PROGRAM", str(out))
    run_variant("engine/core", "kaleido_core", config, "p1-none-d16", sim=sim,
                testcase="test_program")
