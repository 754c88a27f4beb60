"""The plain-engine cocotb bench (sim/engine/plain) from pytest, on generated variants with
d = 16 channels per token (the default d = 128 build takes minutes):

- P = 3 arrays of 2 x 2 (6 banks per plane: not a power of two) with chunks of 4 channels
  (groups 4/6/6: 1 + 2 + 2 chunks, four barriers per run), 64 tokens, on Icarus: the quick
  set (an even and an odd grid, every error bit), in make test;
- marked ``full_set`` (``make regress``): P = 2 arrays of 4 x 4, 64 tokens, on Verilator
  (quick set), and with ``KALEIDO_ENGINE_SET=full`` P = 4 arrays of 4 x 4 on Verilator and
  P = 1 array of 2 x 2 on Icarus, every small-grid run (other directions, an interleaved
  channel map, an empty group).

Every run checks S = Q @ K^T bit-exact (read out under random back-pressure) and every
engine and per-array counter against ``golden.engine.model.engine_counters`` (variant dense).
``make regress`` runs the full bench on the default plain_engine (P = 4, d = 128: also the
hunyuanvideo head) on both simulators.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "sim"))
from runner import run_variant  # noqa: E402

from kaleido_hw.config import KaleidoConfig  # noqa: E402


#: variant -> (configuration, simulator, bench set). The configuration is the manifest's;
#: the plain_engine top makes it plain (engine_pe "plain", engine_dispatcher "none").
VARIANTS = {
    "p2-d16": (KaleidoConfig(engine_arrays=2, engine_max_head_dim=16, engine_max_tokens=64),
               "verilator", "quick"),
    "p3-r2-w4-d16": (KaleidoConfig(engine_arrays=3, rows=2, cols=2, sched_pattern_width=4,
                                   matcher_channels=4, engine_max_head_dim=16,
                                   engine_max_tokens=64), "icarus", "quick"),
    "p4-d16": (KaleidoConfig(engine_arrays=4, engine_max_head_dim=16, engine_max_tokens=64),
               "verilator", "full"),
    "p1-r2-d16": (KaleidoConfig(engine_arrays=1, rows=2, cols=2, engine_max_head_dim=16,
                                engine_max_tokens=64), "icarus", "full"),
}


#: Variants only make regress runs (marked full_set: make test's time budget); make test keeps
#: the three-array, 2 x 2 build on Icarus.
FULL_ONLY = ("p2-d16", "p4-d16", "p1-r2-d16")


@pytest.mark.sim
@pytest.mark.parametrize("variant", [pytest.param(v, marks=pytest.mark.full_set)
                                     if v in FULL_ONLY else v for v in VARIANTS])
def test_plain_engine_bench(variant, monkeypatch):
    config, sim, bench_set = VARIANTS[variant]
    monkeypatch.setenv("KALEIDO_ENGINE_SET", bench_set)
    run_variant("engine/plain", "plain_engine", config, variant, sim=sim)
