"""The attention_head cocotb bench (sim/engine/head) from pytest, on Verilator and Icarus, on
a small generated variant (two 2 x 2 arrays, 16 tokens, 16 channels, 4 vector lanes): O
bit-exact to ``golden.engine.head.head_output``, both blocks' counters equal their models;
the same with S and P @ V on one set of arrays (``engine_pe = "reuse-pv"``); ``make -C
sim/engine/head`` runs it on the default build (four 4 x 4 arrays, 64 tokens, 128
channels). ``make test`` runs both on Icarus, ``make regress`` on Verilator too (the engine
core's attention path, ``sim/engine/core``, is the head's main bench now)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "sim"))
from runner import SIMULATORS, run_variant  # noqa: E402

from kaleido_hw.config import KaleidoConfig  # noqa: E402


#: Verilator in make regress only (make test's time budget).
SIMS = [pytest.param(s, marks=pytest.mark.full_set) if s == "verilator" else s
        for s in SIMULATORS]

SMALL = KaleidoConfig(rows=2, cols=2, engine_arrays=2, engine_max_tokens=16,
                      engine_max_head_dim=16, sched_pattern_width=4, matcher_channels=4,
                      sched_entries=4, vector_lanes=4, vector_max_row=16, vector_row_buffers=3)


@pytest.mark.sim
@pytest.mark.parametrize("sim", SIMS)
def test_attention_head_bench(sim):
    run_variant("engine/head", "attention_head", SMALL, f"p2r2c2-{sim}", sim=sim)


@pytest.mark.sim
@pytest.mark.parametrize("sim", SIMS)
def test_attention_head_bench_on_one_set_of_arrays(sim):
    """``engine_pe = "reuse-pv"``: S and P @ V share the engine's arrays (with the P @ V
    mode); the bench's checks (O, every counter) are the same."""
    run_variant("engine/head", "attention_head", SMALL.replace(engine_pe="reuse-pv"),
                f"p2r2c2-shared-{sim}", sim=sim)
