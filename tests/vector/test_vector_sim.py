"""The vector unit's cocotb bench (sim/vector/softmax) from pytest.

Default configuration: ``rtl_out/vector_unit.v`` on Verilator and Icarus. A variant (5
lanes, 20-score rows, 32-bit scores, two row buffers: lanes not a power of two, the fewest
buffers) is generated into ``sim_build/`` and run on Icarus.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "sim"))
from runner import SIMULATORS, run_bench, run_variant  # noqa: E402

from kaleido_hw.config import KaleidoConfig  # noqa: E402


VARIANT = KaleidoConfig(vector_lanes=5, vector_max_row=20, vector_score_bits=32,
                        vector_row_buffers=2)


@pytest.mark.sim
@pytest.mark.parametrize("sim", SIMULATORS)
def test_vector_softmax_bench(sim):
    run_bench("vector/softmax", "vector_unit", sim)


@pytest.mark.sim
def test_vector_softmax_bench_variant():
    run_variant("vector/softmax", "vector_unit", VARIANT, "variant")
