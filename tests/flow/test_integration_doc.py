"""The recipes of ``docs/integration.md`` work as written: the manifest check, the yosys
standard-cell script and the OpenSTA script, and the Python call for a user's own top. They
run on ``baseline_pe``, the smallest top, in a scratch folder."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kaleido_hw.flow import stdcell


REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "integration.md").read_text()


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
    why = stdcell.stdcell_available()
    if why:
        pytest.skip(f"standard-cell flow unavailable: {why}")
    (tmp_path / "rtl_out").symlink_to(REPO / "rtl_out")
    (tmp_path / "build").mkdir()
    return tmp_path


def run(cmd: list[str], cwd: Path) -> str:
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300,
                       env=os.environ.copy())
    assert r.returncode == 0, r.stderr[-2000:] or r.stdout[-2000:]
    return r.stdout + r.stderr


def test_standard_cell_and_sta_scripts(scratch):
    mapping, finish = [b.replace("kaleido_pe", "baseline_pe") for b in blocks("yosys")]
    (scratch / "map.ys").write_text(mapping)
    run(["yosys", "-q", "-s", "map.ys"], scratch)
    (shell,) = [b.replace("kaleido_pe", "baseline_pe") for b in blocks("sh")
                if "kaleido_hw.flow.buffer_tree" in b]
    cmd = shell.split()
    assert cmd[:3] == ["python", "-m", "kaleido_hw.flow.buffer_tree"]
    run([sys.executable, *cmd[1:]], scratch)
    (scratch / "finish.ys").write_text(finish)
    run(["yosys", "-q", "-s", "finish.ys"], scratch)
    stat = (scratch / "build" / "baseline_pe.stat.txt").read_text()
    assert re.search(r"Chip area for module .*baseline_pe.*: [1-9]", stat), stat[-500:]
    assert "DFFPOSX1" in (scratch / "build" / "baseline_pe.net.v").read_text()
    (tcl,) = [b.replace("kaleido_pe", "baseline_pe") for b in blocks("tcl")]
    (scratch / "build" / "baseline_pe.tcl").write_text(tcl)
    out = run(["sta", "-no_splash", "-exit", "build/baseline_pe.tcl"], scratch)
    assert "Error" not in out, out[-2000:]
    path = stdcell.parse_timing(out)
    assert path.endpoint and 1.0 < path.arrival_ns < 10.0
    assert 0 < stdcell.parse_power(out) < 0.1


def test_own_top_python_recipe(scratch, monkeypatch, capsys):
    (snippet,) = [b for b in blocks("python") if "synth_stdcell" in b]
    (scratch / "my_design.v").write_text(
        (REPO / "rtl_out" / "baseline_pe.v").read_text().replace("baseline_pe", "my_top"))
    monkeypatch.chdir(scratch)
    exec(compile(snippet, "docs/integration.md", "exec"), {})
    out = capsys.readouterr().out
    assert "-> r0[" in out and out.strip().endswith("[]"), out
    assert (scratch / "build" / "my_top" / "my_top.net.v").exists()


def test_core_host_snippet_runs():
    """Section 6's host-library example plans a 1,024-token head at the given addresses."""
    (snippet,) = [b for b in blocks("python") if "plan_head" in b]
    scope = {}
    exec(compile(snippet, "docs/integration.md", "exec"), scope)
    plan, words = scope["plan"], scope["words"]
    assert plan.grid.n == 1024 and len(words) == len(plan.commands)
    assert all(0 <= w < 1 << 128 for w in words)
    assert plan.addrs.q == 0x8000_0000
