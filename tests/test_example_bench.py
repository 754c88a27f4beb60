"""The minimal cocotb bench of ``docs/integration.md`` (``sim/example``, against
``rtl_out/baseline_pe.v``) on both simulators, through the make flow a user runs, with
``WAVES=1``: both of its tests must pass and the waveform must cover the whole simulation.
(One run per simulator: the waves run is the plain run plus tracing.)
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "sim"))
from runner import SIMULATORS, skip_unless_simulator, tool_env  # noqa: E402


BENCH = REPO / "sim" / "example"


def fst_time_range(path: Path) -> tuple[int, int]:
    """(start, end) time of an FST file, in its time unit, from the header block (block type
    0, then the 8-byte block length and the start and end times, big-endian)."""
    head = path.read_bytes()[:25]
    assert len(head) == 25 and head[0] == 0, f"{path} does not start with an FST header block"
    _, start, end = struct.unpack(">QQQ", head[1:])
    return start, end


def vcd_end_time(path: Path) -> int:
    """Last ``#time`` stamp of a VCD file."""
    stamps = [line for line in path.read_text().splitlines() if line.startswith("#")]
    assert stamps, f"{path} has no time stamps"
    return int(stamps[-1][1:])


@pytest.mark.sim
@pytest.mark.parametrize("sim", SIMULATORS)
def test_example_waves(sim):
    """``make -C sim/example SIM=<sim> WAVES=1`` passes and writes
    ``sim_build/<sim>-waves/baseline_pe.fst`` (VCD on Verilator without the lz4 headers) that
    spans the simulated time (1 ps resolution)."""
    tool_env()
    skip_unless_simulator(sim)
    build = BENCH / "sim_build" / f"{sim}-waves"
    results = build / "results.xml"
    for old in (build / "baseline_pe.fst", build / "baseline_pe.vcd", results):
        old.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("WAVES", "COCOTB_RANDOM_SEED")}
    r = subprocess.run(["make", "-C", str(BENCH), f"SIM={sim}", "WAVES=1",
                        f"COCOTB_RESULTS_FILE={results}"],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, f"make failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    cases = list(ET.parse(results).getroot().iter("testcase"))
    assert len(cases) == 2, f"expected the bench's 2 tests, got {len(cases)}"
    sim_ns = 0.0
    for case in cases:
        assert case.find("failure") is None and case.find("error") is None, case.attrib
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        assert props["sim_time_unit"] == "ns"
        sim_ns = max(sim_ns, float(props["sim_time_stop"]))
    assert sim_ns > 1000, f"the bench simulated only {sim_ns} ns"
    fst, vcd = build / "baseline_pe.fst", build / "baseline_pe.vcd"
    if fst.exists():
        start, end = fst_time_range(fst)
    else:
        assert sim == "verilator" and vcd.exists(), f"no waveform in {build}"
        start, end = 0, vcd_end_time(vcd)
    assert start == 0 and end >= sim_ns * 1000 - 1, (start, end, sim_ns)
