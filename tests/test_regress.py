"""``make regress SEEDS=N``: every cocotb bench x simulator x N random seeds, in parallel.

The benches are the registry ``sim/runner.BENCHES``; each case runs one bench on one
simulator with one ``COCOTB_RANDOM_SEED`` (through ``sim/runner.run_bench``), with
``KALEIDO_SEEDS=1`` inside the bench so that the N seeds are N separate, parallel cases.
Seeds are ``KALEIDO_SEED_BASE + 1 .. KALEIDO_SEED_BASE + N`` (base 0 when unset, so a plain
pytest run collects the same cases on every xdist worker); run as a script, as ``make
regress`` does, a fresh random base is drawn for every regression and printed.

Skipped unless ``KALEIDO_SEEDS`` is set, so ``make test`` does not run it. All seeds of one
bench on one simulator share a build folder: they form one xdist group (``--dist loadgroup``)
and, since pytest 9.2 silently disables that grouping (pytest-xdist issue 1386), they also
take a file lock on the folder, so two workers never build or run in it at once.

    make regress SEEDS=8 JOBS=2
    KALEIDO_SEEDS=4 python tests/test_regress.py -n 2       # the same; extra args go to pytest
    KALEIDO_SEEDS=2 KALEIDO_SEED_BASE=7 python -m pytest tests/test_regress.py -k 'pe and icarus'

At the end, one line per bench (passed / failed / skipped per simulator); every failing case
prints the command that reruns exactly it.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "sim"))
from runner import BENCHES, SIMULATORS, run_bench  # noqa: E402


SEEDS = int(os.environ.get("KALEIDO_SEEDS", "0") or 0)
SEED_BASE = int(os.environ.get("KALEIDO_SEED_BASE", "0") or 0)
CASES = [(bench, sim, SEED_BASE + i) for bench in BENCHES for sim in SIMULATORS
         for i in range(1, SEEDS + 1)]


@contextmanager
def build_lock(bench: str, sim: str):
    """Exclusive use of ``sim_build/<bench>/<sim>/`` (the runner's build folder) across
    processes."""
    path = REPO / "sim_build" / bench / sim / ".regress.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def rerun_command(bench: str, sim: str, seed: int) -> str:
    """Shell commands that run exactly one case again: the make flow (same top, simulator and
    seed), or this very pytest case."""
    return (f"COCOTB_RANDOM_SEED={seed} KALEIDO_SEEDS=1 make -C sim/{bench} SIM={sim}\n"
            f"     or: KALEIDO_SEEDS=1 KALEIDO_SEED_BASE={seed - 1} .venv/bin/python -m pytest "
            f"'tests/test_regress.py::test_regress[{bench}-{sim}-seed{seed}]'")


@pytest.mark.sim
@pytest.mark.skipif(SEEDS < 1, reason="regression run only: make regress SEEDS=N "
                                       "(or set KALEIDO_SEEDS=N)")
@pytest.mark.parametrize(
    "bench, sim, seed",
    [pytest.param(b, s, seed, marks=pytest.mark.xdist_group(f"regress-{b}-{s}"),
                  id=f"{b}-{s}-seed{seed}") for b, s, seed in CASES] or [("none", "none", 0)])
def test_regress(bench, sim, seed, monkeypatch, record_property):
    record_property("regress", f"{bench} {sim} {seed}")
    # The runner lets os.environ override its extra_env: set the per-case values here.
    monkeypatch.setenv("KALEIDO_SEEDS", "1")
    monkeypatch.setenv("COCOTB_RANDOM_SEED", str(seed))
    failure = None
    try:
        with build_lock(bench, sim):
            run_bench(bench, BENCHES[bench], sim, seed=seed)
    except (AssertionError, FileNotFoundError, SystemExit) as e:
        # The cocotb runner exits (SystemExit) when a cocotb test fails.
        failure = (f"exit {e.code}: see the cocotb log in the captured output"
                   if isinstance(e, SystemExit) else str(e))
    if failure is not None:
        pytest.fail(f"{bench} on {sim}, seed {seed} failed ({failure})\n  rerun: "
                    f"{rerun_command(bench, sim, seed)}", pytrace=False)


class RegressSummary:
    """pytest plugin: one line per bench, and the rerun command of every failing case."""

    def __init__(self):
        self.results: dict[tuple[str, str], dict[str, int]] = {}
        self.failed: list[tuple[str, str, int]] = []
        self.start = time.monotonic()

    def pytest_runtest_logreport(self, report):
        case = dict(report.user_properties).get("regress")
        if case is None or not (report.when == "call" or report.failed):
            return
        bench, sim, seed = case.split()
        counts = self.results.setdefault((bench, sim), {"passed": 0, "failed": 0, "skipped": 0})
        counts[report.outcome] += 1
        if report.failed:
            self.failed.append((bench, sim, int(seed)))

    def pytest_terminal_summary(self, terminalreporter):
        if not self.results:
            return
        tr = terminalreporter
        tr.section(f"regress: {SEEDS} seed(s) per bench and simulator, "
                   f"base {SEED_BASE} ({time.monotonic() - self.start:.0f} s)")
        for bench in BENCHES:
            parts = []
            for sim in SIMULATORS:
                c = self.results.get((bench, sim))
                if c is None:
                    continue
                total = sum(c.values())
                text = f"{sim} {c['passed']}/{total} passed"
                if c["failed"]:
                    text += f", {c['failed']} FAILED"
                if c["skipped"]:
                    text += f", {c['skipped']} skipped"
                parts.append(text)
            if parts:
                status = "FAIL" if any(self.results.get((bench, s), {}).get("failed")
                                       for s in SIMULATORS) else "ok"
                tr.write_line(f"{bench:<12} {status:<4}  " + "; ".join(parts))
        for bench, sim, seed in sorted(self.failed):
            tr.write_line(f"rerun {bench} on {sim}, seed {seed}:  "
                          f"{rerun_command(bench, sim, seed)}")


def main(argv: list[str]) -> int:
    """``make regress``: draw a fresh seed base (unless given) and run this module."""
    if int(os.environ.get("KALEIDO_SEEDS", "0") or 0) < 1:
        print("regress: set KALEIDO_SEEDS=N (make regress SEEDS=N)", file=sys.stderr)
        return 2
    os.environ.setdefault("KALEIDO_SEED_BASE", str(int.from_bytes(os.urandom(3), "big")))
    global SEED_BASE, SEEDS
    SEED_BASE = int(os.environ["KALEIDO_SEED_BASE"])
    SEEDS = int(os.environ["KALEIDO_SEEDS"])
    print(f"regress: benches {', '.join(BENCHES)}; simulators {', '.join(SIMULATORS)}; "
          f"seeds {SEED_BASE + 1}..{SEED_BASE + SEEDS} (KALEIDO_SEED_BASE={SEED_BASE})",
          flush=True)
    return int(pytest.main([__file__, "--dist", "loadgroup", *argv],
                           plugins=[RegressSummary()]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
