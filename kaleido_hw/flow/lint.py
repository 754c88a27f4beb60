"""``kaleido-hw lint``: ``verilator --lint-only -Wall`` on every generated file.

Waivers live in ``kaleido_hw/flow/lint_waivers.vlt``, each with the reason it is needed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path


WAIVERS = Path(__file__).with_name("lint_waivers.vlt")


def lint_file(path, top: str) -> subprocess.CompletedProcess:
    """Run ``verilator --lint-only -Wall`` with the waiver file on one Verilog file."""
    exe = shutil.which("verilator")
    if exe is None:
        raise FileNotFoundError("verilator not found on PATH; run 'make install' and use the "
                                "wrapper in tools/bin (the Makefile puts it first on PATH)")
    return subprocess.run([exe, "--lint-only", "-Wall", "--top-module", top,
                           str(WAIVERS), str(path)], capture_output=True, text=True)


def lint_problems(path, top: str) -> list[str]:
    """What ``verilator --lint-only -Wall`` reports on one Verilog file: its ``%`` lines
    (warnings and errors), or its output when it fails without any; empty when clean."""
    result = lint_file(path, top)
    out = result.stdout + result.stderr
    lines = [line for line in out.splitlines() if line.startswith("%")]
    if result.returncode != 0 and not lines:
        lines = [out.strip() or f"verilator exited with {result.returncode}"]
    return lines


def lint_component(component, top: str, folder) -> list[str]:
    """:func:`lint_problems` of an Amaranth ``component``'s Verilog, generated as module
    ``top`` into ``folder`` (a scratch folder: a block that is not a top of ``rtl_out``)."""
    from kaleido_hw.flow.generate import emit_verilog

    path = Path(folder) / f"{top}.v"
    path.write_text(emit_verilog(component, top))
    return lint_problems(path, top)


def add_arguments(parser):
    """Options of ``kaleido-hw lint``."""
    parser.add_argument("--dir", default="rtl_out", help="folder with manifest.json (default: rtl_out)")


def run(args) -> int:
    """``kaleido-hw lint``: lint every top of the manifest; exit 1 if any is not clean."""
    manifest = Path(args.dir) / "manifest.json"
    if not manifest.exists():
        raise ValueError(f"--dir must hold a manifest.json from 'kaleido-hw generate'; none in {args.dir}")
    failed = 0
    for top in json.loads(manifest.read_text())["tops"]:
        result = lint_file(Path(args.dir) / top["file"], top["module"])
        status = "clean" if result.returncode == 0 and not result.stderr.strip() else "FAILED"
        print(f"{top['file']}: {status}")
        if status != "clean":
            failed += 1
            print(result.stdout + result.stderr)
    return 1 if failed else 0
