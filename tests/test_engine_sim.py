"""The TileEngine cocotb bench (sim/engine) from pytest, on Verilator and Icarus.

``make test`` runs the quick set on both simulators (small grids 2x4x4 and 3x5x4 with
d = 16: random, smooth, all-equal and alternating-sign data, reuse and dense; other
directions and thresholds; every error bit), and the quick set on a 1 x 4 array variant on
Icarus. The hunyuanvideo head (d = 128 on 2x4x8) runs with ``KALEIDO_ENGINE_SET=standard``
or ``full`` (``make -C sim/engine``, the default, runs it) and in ``make regress`` (the full
bench on both simulators, through ``tests/test_regress.py``), to keep ``make test`` within
its budget.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "sim"))
from runner import SIMULATORS, run_bench, run_variant  # noqa: E402

from kaleido_hw.config import KaleidoConfig  # noqa: E402

#: Bench test set per simulator in ``make test`` (see sim/engine/test_engine.py).
SETS = {"verilator": "quick", "icarus": "quick"}


@pytest.mark.sim
@pytest.mark.parametrize("sim", SIMULATORS)
def test_engine_bench(sim):
    run_bench("engine", "tile_engine", sim, extra_env={"KALEIDO_ENGINE_SET": SETS[sim]})


@pytest.mark.sim
def test_engine_bench_narrow_array_variant(monkeypatch):
    """A 1 x 4 array generated with 16 channels per token (the bench reads the geometry from
    the variant's manifest): the wide array's loads outlast short quads, so the sequencer
    stalls between quads, which the cycle model must count exactly."""
    monkeypatch.setenv("KALEIDO_ENGINE_SET", "quick")
    config = KaleidoConfig(rows=1, cols=4, engine_max_head_dim=16)
    run_variant("engine", "tile_engine", config, "r1c4-d16", sim="icarus")
