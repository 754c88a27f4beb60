"""The TileEngine cocotb bench (sim/engine/tile) from pytest, on Verilator and Icarus.

``make test`` runs the quick set (small grids 2x4x4 and 3x5x4 with d = 16: random, smooth,
all-equal and alternating-sign data, reuse and dense; other directions and thresholds; every
error bit) on Verilator against the default tile_engine (generated on demand), and on Icarus
against a 1 x 4 array variant with 16 channels per token, whose wide loads outlast short
quads, so the sequencer stalls between quads (the cycle model must count that exactly).
The default build on Icarus and the hunyuanvideo head (d = 128 on 2x4x8) run in
``make -C sim/engine/tile [SIM=icarus]`` and in ``make regress`` (the full bench on both
simulators, through ``tests/test_regress.py``); they are left out of ``make test`` for its
time budget.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "sim"))
from runner import run_bench, run_variant  # noqa: E402

from kaleido_hw.config import KaleidoConfig  # noqa: E402


@pytest.mark.sim
def test_engine_bench_verilator():
    """The committed default build (4 x 4 array, d <= 128), quick set, on Verilator."""
    run_bench("engine/tile", "tile_engine", "verilator", extra_env={"KALEIDO_ENGINE_SET": "quick"})


@pytest.mark.sim
def test_engine_bench_narrow_array_icarus(monkeypatch):
    """A 1 x 4 array generated with 16 channels per token (the bench reads the geometry from
    the variant's manifest), quick set, on Icarus."""
    monkeypatch.setenv("KALEIDO_ENGINE_SET", "quick")
    config = KaleidoConfig(rows=1, cols=4, engine_max_head_dim=16)
    run_variant("engine/tile", "tile_engine", config, "r1c4-d16", sim="icarus")
