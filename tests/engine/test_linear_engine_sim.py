"""The LinearEngine cocotb bench (sim/engine/linear) from pytest, on Icarus, and on Verilator
in ``make regress`` (its build takes most of a minute).

``make test`` runs the quick set on a small generated variant (the default build, 4 arrays
with 32 -> 16 channels, takes minutes to compile): P = 2 arrays of 2 x 2 with
``linear_max_in`` = ``linear_max_out`` = 8, so the layers have 4 or 3 column blocks (2/2 and
2/1 per array). The quick set: four layers on the odd 3x3x5 grid (smooth data with window 2
reuse and window 3 dense, nibble-edge data with window 3 reuse, alternating signs with window
2 reuse), per-channel directions, Y under back-pressure, every counter (per-array ones
included) against ``golden.engine.linear.linear_counters``; then every error bit.
``make -C sim/engine/linear`` (the full set on rtl_out, the default build: five data kinds x
windows 2, 3 x reuse, dense) and ``make regress`` run the rest.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "sim"))
from runner import run_variant, simulator_params  # noqa: E402

from kaleido_hw.config import KaleidoConfig  # noqa: E402


#: The small build of the quick run: two 2 x 2 arrays, 8 -> 8 channels.
P2_CONFIG = KaleidoConfig(engine_arrays=2, rows=2, cols=2, linear_max_in=8, linear_max_out=8)


@pytest.mark.sim
@pytest.mark.parametrize("sim", simulator_params(regress_only=("verilator",)))
def test_linear_engine_bench(sim, monkeypatch):
    monkeypatch.setenv("KALEIDO_LINEAR_SET", "quick")
    run_variant("engine/linear", "linear_engine", P2_CONFIG, f"p2-r2c2-{sim}", sim=sim)
