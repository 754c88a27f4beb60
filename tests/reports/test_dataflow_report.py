"""``kaleido-hw dataflow`` and the ``dataflow`` section of ``kaleido-hw report``: rows, JSON,
CSV and plot on a small head; a user .npz head; bad names exit 2."""

from __future__ import annotations

import csv
import json

import numpy as np

from golden.workloads import make_qkv
from kaleido_hw.cli import main


def test_dataflow_command(tmp_path, capsys):
    js, cs, png = tmp_path / "d.json", tmp_path / "d.csv", tmp_path / "d.png"
    assert main(["dataflow", "--grid", "2x4x8", "--regimes", "default,fast", "--candidates",
                 "m123,rowfifo4", "--json", str(js), "--csv", str(cs), "--plot", str(png)]) == 0
    rows = json.loads(js.read_text())
    names = {r["candidate"] for r in rows}
    assert {"dense", "pe", "full", "m123", "rowfifo4", "ceiling", "ceiling-free"} <= names
    assert {r["regime"] for r in rows} == {"default", "fast"}
    with cs.open() as f:
        assert len(list(csv.DictReader(f))) == len(rows)
    assert png.read_bytes()[:4] == b"\x89PNG"
    for r in rows:
        if r["kind"] != "bound":
            ceil = next(x for x in rows if x["label"] == r["label"] and x["candidate"] == "ceiling")
            assert r["cycles"] >= ceil["cycles"] or r["pes"] != ceil["pes"] or \
                r["candidate"] == "full-T"
    assert "Targets (issue 15)" in capsys.readouterr().out


def test_dataflow_user_head_and_errors(tmp_path, capsys):
    q, k, _ = make_qkv("cogvideox-5b", (2, 4, 8), seed=1)
    path = tmp_path / "head.npz"
    np.savez(path, q=q, k=k, preset="cogvideox-5b")
    js = tmp_path / "u.json"
    assert main(["dataflow", "--workload", str(path), "--grid", "2x4x8", "--candidates", "m3q",
                 "--json", str(js)]) == 0
    rows = json.loads(js.read_text())
    assert {r["regime"] for r in rows} == {"user"}
    assert main(["dataflow", "--candidates", "nope"]) == 2
    assert "--candidates must name" in capsys.readouterr().err
    assert main(["dataflow", "--workload", str(path)]) == 2      # no grid


def test_report_section(tmp_path):
    out = tmp_path / "rep"
    assert main(["report", "--quick", "--only", "dataflow", "--jobs", "1", "--out", str(out)]) == 0
    doc = json.loads((out / "dataflow.json").read_text())
    assert doc["report"] == "dataflow" and len(doc["rows"]) > 0
    assert (out / "dataflow.png").read_bytes()[:4] == b"\x89PNG"
    assert "hunyuanvideo smooth" in doc["summary"]
