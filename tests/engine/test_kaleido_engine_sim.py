"""The KaleidoEngine cocotb bench (sim/engine/kaleido) from pytest, on generated variants
with d = 16 channels per token (the default d = 128 engine takes minutes to build):

- P = 2 arrays of 4 x 4 (the default array shape), chunks of 16, 64 tokens, scheduler and
  matcher, on Verilator: the standard set (every variant once on grids 2x4x4 and 3x5x4 with
  random / smooth / all-equal data; other directions and thresholds; every error bit but
  ``dispatcher``; ``KALEIDO_ENGINE_SET=full`` in ``make -C sim/engine/kaleido`` runs all 12
  small-grid runs);
- P = 2 arrays of 4 x 4 with chunks of 4 channels (groups 4/6/6 give 1 + 2 + 2 chunks: four
  barriers per run, two planes per group), scheduler batches of 16 units, both dispatcher
  blocks, and P = 1 with the matcher only (the scheduler bit is rejected: ``dispatcher``),
  32 tokens, on Icarus: the quick set (the 2x4x4 runs, directions and thresholds, error
  bits). Every build is marked ``full_set`` and runs in ``make regress``: in ``make test``
  (its time budget) the engine runs inside the core, through the core's benches
  (``test_core_sim``) and its Amaranth-simulator tests (``test_core``, and this engine's own,
  ``test_kaleido_engine``).

Every run checks S bit-exact (read out under random back-pressure) and every engine and
per-array counter against ``golden.engine.model.engine_counters``; every dispatcher run also the
scheduler's orders and the matcher's slots (probe wires, ``golden.engine.trace``).
``make regress`` runs the full bench on the default kaleido_engine (the default configuration:
P = 4, d = 128) on both simulators; ``KALEIDO_ENGINE_SET=full`` adds the P = 4, d = 16 build
on Verilator (left out of ``make test`` for its budget: it takes twice the P = 2 build;
the cases marked ``full_set`` run with ``KALEIDO_ENGINE_SET=full``, as ``make regress``
runs them).

With ``KALEIDO_ENGINE_SET=full`` also three builds with stall injection on every internal
stream (``engine_stall_seed``; the bench's ``stall`` set: full, pe-m, pe-sh on 2x2x4 and
an odd 3x3x3 grid): P = 2 arrays of 4 x 4 with chunks of 4 on Icarus, P = 1 (chunks of 4)
and P = 2 (chunks of 8) arrays of 2 x 2 on Verilator.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "sim"))
from runner import run_variant  # noqa: E402

from kaleido_hw.config import KaleidoConfig  # noqa: E402


#: variant -> (configuration, simulator, bench set)
VARIANTS = {
    "p2-d16": (KaleidoConfig(engine_arrays=2, engine_max_head_dim=16, engine_max_tokens=64),
               "verilator", "standard"),
    "p4-d16": (KaleidoConfig(engine_arrays=4, engine_max_head_dim=16, engine_max_tokens=64),
               "verilator", "standard"),
    # Both sides ordered (sched_sides "qk": a plane per chunk) on Icarus; the others "q".
    "p2-w4-d16": (KaleidoConfig(engine_arrays=2, sched_pattern_width=4, matcher_channels=4,
                                sched_entries=16, engine_max_head_dim=16,
                                engine_max_tokens=32, sched_sides="qk"), "icarus", "quick"),
    "p1-d16": (KaleidoConfig(engine_arrays=1, engine_max_head_dim=16, engine_max_tokens=32,
                             engine_dispatcher="matcher"), "icarus", "quick"),
    # Stall injection on every internal stream (engine_stall_seed): the dispatcher variants
    # with the order / slot invariants on 2x2x4 and 3x3x3 grids (KALEIDO_ENGINE_SET=full:
    # make test is over its time budget).
    "p2-w4-d16-stall": (KaleidoConfig(engine_arrays=2, sched_pattern_width=4,
                                      matcher_channels=4, sched_entries=8,
                                      engine_max_head_dim=16, engine_max_tokens=32,
                                      engine_stall_seed=0x0C0C, sched_sides="qk"),
                        "icarus", "stall"),
    "p1-r2-stall": (KaleidoConfig(engine_arrays=1, rows=2, cols=2, sched_pattern_width=4,
                                  matcher_channels=4, sched_entries=8, engine_max_head_dim=16,
                                  engine_max_tokens=32, engine_stall_seed=0xB00F),
                    "verilator", "stall"),
    "p2-r2-stall": (KaleidoConfig(engine_arrays=2, rows=2, cols=2, sched_pattern_width=8,
                                  matcher_channels=8, sched_entries=8, engine_max_head_dim=16,
                                  engine_max_tokens=32, engine_stall_seed=0x1DEA),
                    "verilator", "stall"),
}


@pytest.mark.sim
@pytest.mark.full_set          # every build: make regress (make test runs the engine in the core)
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_kaleido_engine_bench(variant, monkeypatch):
    config, sim, bench_set = VARIANTS[variant]
    monkeypatch.setenv("KALEIDO_ENGINE_SET", bench_set)
    run_variant("engine/kaleido", "kaleido_engine", config, variant, sim=sim)
