"""The LinearEngine cocotb bench (sim/linear_engine) from pytest, on Verilator and Icarus.

``make test`` runs the quick set (four layers on the odd 3x3x5 grid: smooth data with
window 2 reuse and window 3 dense, nibble-edge data with window 3 reuse, alternating signs
with window 2 reuse, per-channel directions, Y under back-pressure; then every error bit).
``make -C sim/linear_engine`` (the full set: five data kinds x windows 2, 3 x reuse, dense)
and ``make regress`` run the rest.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "sim"))
from runner import SIMULATORS, run_bench  # noqa: E402


@pytest.mark.sim
@pytest.mark.parametrize("sim", SIMULATORS)
def test_linear_engine_bench(sim):
    run_bench("linear_engine", "linear_engine", sim, extra_env={"KALEIDO_LINEAR_SET": "quick"})
