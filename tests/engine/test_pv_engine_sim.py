"""The pv_engine cocotb bench (sim/engine/pv) from pytest, on Icarus (and on Verilator in
``make regress``), on a small generated variant (two 2 x 3 arrays, 32 keys and queries, 16
channels: padding row and column blocks, bubbles at one key, one to two column blocks per
array), and the same on the engine's arrays with the P @ V mode folded in (``engine_pe =
"reuse-pv"``, PvMergedArrays); ``make -C sim/engine/pv`` runs it on rtl_out's default build
(four 4 x 4 arrays)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "sim"))
from runner import run_variant, simulator_params  # noqa: E402

from kaleido_hw.config import KaleidoConfig  # noqa: E402


SMALL = KaleidoConfig(rows=2, cols=3, engine_arrays=2, engine_max_tokens=32,
                      engine_max_head_dim=16)


@pytest.mark.sim
@pytest.mark.parametrize("sim", simulator_params(regress_only=("verilator",)))
def test_pv_engine_bench(sim):
    run_variant("engine/pv", "pv_engine", SMALL, f"p2r2c3-{sim}", sim=sim)


@pytest.mark.sim
@pytest.mark.parametrize("sim", simulator_params(regress_only=("verilator",)))
def test_pv_engine_bench_on_the_folded_arrays(sim):
    run_variant("engine/pv", "pv_engine", SMALL.replace(engine_pe="reuse-pv"),
                f"p2r2c3-pvmode-{sim}", sim=sim)
