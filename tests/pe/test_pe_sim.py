"""The PE cocotb benches (sim/pe/reuse, sim/pe/baseline) from pytest, on Verilator and Icarus.

The default configuration runs on ``rtl_out/``; a narrow-accumulator variant (20 bits, the
cogvideox-5b minimum, so the random traffic wraps) is generated into ``sim_build/`` and run
on Icarus (seconds to build; the bench reads the width from the ports).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "sim"))
from runner import SIMULATORS, run_bench, run_variant  # noqa: E402

from kaleido_hw.config import KaleidoConfig  # noqa: E402


BENCHES = [("pe/reuse", "kaleido_pe"), ("pe/baseline", "baseline_pe")]


@pytest.mark.sim
@pytest.mark.parametrize("sim", SIMULATORS)
@pytest.mark.parametrize("bench, top", BENCHES, ids=[b for b, _ in BENCHES])
def test_pe_bench(bench, top, sim):
    run_bench(bench, top, sim)


@pytest.mark.sim
@pytest.mark.parametrize("bench, top", BENCHES, ids=[b for b, _ in BENCHES])
def test_pe_bench_narrow_accumulator(bench, top):
    run_variant(bench, top, KaleidoConfig(preset="cogvideox-5b", acc_width=20), "acc20")
