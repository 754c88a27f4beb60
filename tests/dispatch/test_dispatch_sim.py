"""The dispatcher's cocotb benches (sim/dispatch/scheduler, sim/dispatch/matcher) from pytest.

Default configuration: ``rtl_out/`` on Icarus (and on Verilator in ``make regress``). A non-default variant (clusters
not a power of two, narrow ids, 3 columns, lookahead 2) is generated into ``sim_build/`` and
run on Icarus, whose build takes seconds (the same bench runs it on Verilator with
``make -C sim/<bench> KALEIDO_MANIFEST=... RTL_DIR=...``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "sim"))
from runner import run_bench, run_variant, simulator_params  # noqa: E402

from kaleido_hw.config import KaleidoConfig  # noqa: E402


VARIANT = KaleidoConfig(sched_entries=24, sched_clusters=3, sched_pattern_width=12,
                        matcher_channels=6, matcher_lookahead=2, cols=3, token_id_width=10,
                        sched_lfsr_seed=0x1234)
BENCHES = [("dispatch/scheduler", "cluster_scheduler"), ("dispatch/matcher", "merge_matcher")]


@pytest.mark.sim
@pytest.mark.parametrize("sim", simulator_params(regress_only=("verilator",)))
@pytest.mark.parametrize("bench, top", BENCHES, ids=[b for b, _ in BENCHES])
def test_dispatch_bench(bench, top, sim):
    run_bench(bench, top, sim)


@pytest.mark.sim
@pytest.mark.parametrize("bench, top", BENCHES, ids=[b for b, _ in BENCHES])
def test_dispatch_bench_variant(bench, top):
    run_variant(bench, top, VARIANT, "variant")
