"""The recipes of ``docs/integration.md`` work as written: the manifest check, the Yosys
script (generic gates) and its standard-cell variant (on a tiny Liberty library made here).
They run on ``baseline_pe``, the smallest top, in a scratch folder."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC = (REPO / "docs" / "integration.md").read_text()

#: Enough cells for ABC (it needs a buffer) and dfflibmap.
MINI_LIB = """library(mini) {
  cell(BUF) { area: 2; pin(A) { direction: input; } pin(Y) { direction: output; function: "A"; } }
  cell(INV) { area: 2; pin(A) { direction: input; } pin(Y) { direction: output; function: "A'"; } }
  cell(NAND2) { area: 4; pin(A) { direction: input; } pin(B) { direction: input; }
    pin(Y) { direction: output; function: "(A*B)'"; } }
  cell(NOR2) { area: 4; pin(A) { direction: input; } pin(B) { direction: input; }
    pin(Y) { direction: output; function: "(A+B)'"; } }
  cell(DFF) { area: 18; ff(IQ, IQN) { clocked_on: "C"; next_state: "D"; }
    pin(C) { direction: input; clock: true; } pin(D) { direction: input; }
    pin(Q) { direction: output; function: "IQ"; } }
}
"""


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC, flags=re.S)


def test_manifest_snippet_runs(monkeypatch, capsys):
    (snippet,) = [b for b in blocks("python") if "manifest.json" in b]
    monkeypatch.chdir(REPO)
    exec(compile(snippet, "docs/integration.md", "exec"), {})
    out = capsys.readouterr().out
    assert "baseline_pe" in out and "configuration:" in out


@pytest.fixture
def scratch(tmp_path):
    if shutil.which("yosys") is None:
        pytest.skip("yosys not installed ('sudo apt-get install yosys')")
    (tmp_path / "rtl_out").symlink_to(REPO / "rtl_out")
    (tmp_path / "build").mkdir()
    return tmp_path


def yosys(script: str, cwd: Path) -> None:
    (cwd / "flow.ys").write_text(script)
    r = subprocess.run(["yosys", "-q", "-s", "flow.ys"], cwd=cwd, capture_output=True, text=True,
                       timeout=300, env=os.environ.copy())
    assert r.returncode == 0, r.stderr[-2000:] or r.stdout[-2000:]


def test_yosys_script(scratch):
    flow = blocks("yosys")[0].replace("kaleido_pe", "baseline_pe")
    yosys(flow, scratch)
    stat = (scratch / "build" / "baseline_pe.stat.txt").read_text()
    assert "Estimated number of transistors" in stat
    assert "Longest topological path" in (scratch / "build" / "baseline_pe.ltp.txt").read_text()
    assert "module baseline_pe" in (scratch / "build" / "baseline_pe.netlist.v").read_text()


def test_yosys_liberty_variant(scratch):
    flow, liberty = (b.replace("kaleido_pe", "baseline_pe") for b in blocks("yosys")[:2])
    head = "\n".join(line for line in flow.splitlines() if not line.startswith(("tee", "write")))
    (scratch / "cells.lib").write_text(MINI_LIB)
    yosys(head + "\n" + liberty, scratch)
    area = (scratch / "build" / "baseline_pe.area.txt").read_text()
    assert re.search(r"Chip area for module .*baseline_pe.*: [1-9]", area), area[-500:]
    mapped = (scratch / "build" / "baseline_pe.mapped.v").read_text()
    assert "NAND2" in mapped and "DFF" in mapped
