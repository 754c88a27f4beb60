"""Run a Verilog design with its ``bench`` module in Icarus and return what it printed:
the tests that compare two forms of the same generated Verilog run both through this."""

from __future__ import annotations

import subprocess
from pathlib import Path


def run_icarus(folder: Path, name: str, source: str) -> str:
    """Compile ``source`` (the design plus a top module ``bench``) as ``folder/name`` and
    return the simulation's standard output."""
    src = folder / f"{name}.v"
    src.write_text(source)
    exe = folder / name
    subprocess.run(["iverilog", "-o", str(exe), "-s", "bench", str(src)], check=True,
                   capture_output=True, text=True)
    return subprocess.run(["vvp", "-n", str(exe)], check=True, capture_output=True,
                          text=True).stdout
