"""The block_attention cocotb bench (sim/engine/block) from pytest, on Icarus (and on Verilator
in ``make regress``: its build takes most of a minute), on a small generated variant (two 4 x 4 arrays, 8 lanes, 16-token boxes, 16 channels); ``make -C
sim/engine/block`` runs it on the default build (four 4 x 4 arrays, 64-token boxes)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "sim"))
from runner import run_variant, simulator_params  # noqa: E402

from kaleido_hw.config import KaleidoConfig  # noqa: E402


SMALL = KaleidoConfig(engine_arrays=2, vector_lanes=8, engine_max_tokens=16,
                      engine_max_head_dim=16, vector_max_row=16, vector_row_buffers=3)


@pytest.mark.sim
@pytest.mark.parametrize("sim", simulator_params(regress_only=("verilator",)))
def test_block_attention_bench(sim):
    run_variant("engine/block", "block_attention", SMALL, f"p2l8-{sim}", sim=sim)
