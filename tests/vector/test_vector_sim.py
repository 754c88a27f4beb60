"""The vector unit's cocotb benches (sim/vector/softmax, block, output) from pytest.

Default configuration: ``rtl_out/vector_unit.v`` on Verilator and Icarus, the generated
``block_softmax`` and ``block_output`` on Icarus (on Verilator too in ``make regress``: their
builds take most of a minute). A variant (5 lanes, 20-score rows, 32-bit scores,
two row buffers: lanes not a power of two, the fewest buffers; 5 query rows of state for the
units of long heads) is generated into ``sim_build/`` and run on Icarus.
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
                        vector_row_buffers=2, engine_max_tokens=5)


#: (bench folder below sim/, top)
BENCHES = [("vector/softmax", "vector_unit"), ("vector/block", "block_softmax"),
           ("vector/output", "block_output")]


@pytest.mark.sim
@pytest.mark.parametrize("bench, top, sim", [
    # the block benches' Verilator builds take most of a minute: make regress runs them
    pytest.param(bench, top, sim, id=f"{bench}-{top}-{sim}",
                 marks=pytest.mark.full_set if sim == "verilator" and bench != "vector/softmax"
                 else ())
    for bench, top in BENCHES for sim in SIMULATORS])
def test_vector_bench(bench, top, sim):
    run_bench(bench, top, sim)


@pytest.mark.sim
@pytest.mark.parametrize("bench, top", BENCHES)
def test_vector_bench_variant(bench, top):
    run_variant(bench, top, VARIANT, "variant")
