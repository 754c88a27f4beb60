"""``kaleido-hw report``: the quick run writes every plot with its numbers, the numbers are
sane (reuse beats both skip baselines, S is the exact product, shares add up), and bad
``--workload`` input exits 2 with one line."""

from __future__ import annotations

import csv
import fcntl
import json
import os

import numpy as np
import pytest

from golden.numerics import exact_matmul
from golden.workloads import make_qkv
from kaleido_hw.cli import main
from kaleido_hw.reports.report import DEFAULT_PRESETS, MOTIONS, ON_REQUEST, REPORTS


DEFAULT_REPORTS = [n for n in REPORTS if n not in ON_REQUEST]


@pytest.fixture(scope="session")
def quick(tmp_path_factory):
    """The ``--quick`` report, made once per pytest run: xdist workers share the folder of
    the run's temporary directories, and a lock makes the others wait for the first."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    out = root / "report-quick"
    with (root / "report-quick.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "summary.md").exists():
            assert main(["report", "--quick", "--jobs", "1", "--out", str(out)]) == 0
        fcntl.flock(lock, fcntl.LOCK_UN)
    return out


def load(out, name):
    doc = json.loads((out / f"{name}.json").read_text())
    with (out / f"{name}.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(doc["rows"]) > 0, name
    assert doc["report"] == name and doc["paper"] == REPORTS[name].paper
    assert {"settings", "summary", "notes", "rows", "files", "title", "workload"} <= set(doc)
    return doc, rows


def test_quick_run_writes_every_report(quick):
    for name in DEFAULT_REPORTS:
        for ext in ("png", "json", "csv"):
            path = quick / f"{name}.{ext}"
            assert path.stat().st_size > 0, path
        assert (quick / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (quick / "patterns-groups.png").exists() and (quick / "patterns-S.npz").exists()
    for name in ON_REQUEST:
        assert not (quick / f"{name}.json").exists(), f"{name} runs only on request"
    summary = (quick / "summary.md").read_text()
    for name in DEFAULT_REPORTS:
        assert f"`{name}`" in summary and f"({name}.png)" in summary


def test_reuse_beats_both_skip_baselines(quick):
    doc, rows = load(quick, "reuse-vs-skip")
    assert doc["settings"]["seeds"] == 3 and doc["settings"]["grid"] == "4x8x8"
    assert sorted(doc["summary"]) == sorted(DEFAULT_PRESETS)
    for row in doc["rows"]:
        assert 0.2 < row["saving"] < 0.75, row
        assert row["reuse_mse"] < min(row["skip_smallest_mse"], row["skip_masks_mse"]), row
    for preset, s in doc["summary"].items():
        assert s["heads"] == 3 and s["reuse_best"] == 3
        assert s["mean_mse"]["reuse"] < min(s["mean_mse"]["skip_smallest"],
                                            s["mean_mse"]["skip_masks"])
        assert min(s["geomean_mse_ratio"].values()) > 1
    assert float(rows[0]["reuse_mse"]) == pytest.approx(doc["rows"][0]["reuse_mse"])


def test_thresholds_cover_every_pair(quick):
    doc, _ = load(quick, "thresholds")
    pairs = {(r["full_bits"], r["half_bits"]): r for r in doc["rows"]}
    assert set(pairs) == {(f, h) for f in range(1, 8) for h in range(f)}
    for r in doc["rows"]:
        assert r["speedup"] >= 1.0 and r["cycles_reuse"] <= r["cycles_dense"], r
        assert 0 < r["utilization_reuse"] <= 1 and 0 < r["utilization_dense"] <= 1
    # full_bits 7: FULL only on equal values, so the output is exact (PSNR inf -> null).
    assert all(pairs[(7, h)]["psnr"] is None and pairs[(7, h)]["mse"] == 0 for h in range(7))
    assert pairs[(1, 0)]["speedup"] > pairs[(7, 0)]["speedup"]
    assert pairs[(1, 0)]["oracle_reduction"] > pairs[(5, 3)]["oracle_reduction"] > 0
    assert 30 < doc["summary"]["default"]["psnr"] < 90
    assert doc["summary"]["default"] == pairs[(5, 3)]


def test_patterns_are_the_exact_scores_and_shares(quick):
    doc, rows = load(quick, "patterns")
    q, k, _ = make_qkv("hunyuanvideo", "4x8x8", seed=0)
    s = np.load(quick / "patterns-S.npz")["S"]
    assert s.shape == (256, 256)
    assert np.array_equal(s, exact_matmul(q, k.T))
    for row in rows:
        assert sum(float(row[c]) for c in ("full", "half", "none")) == pytest.approx(1.0)
    assert {(r["operand"], r["group"]) for r in rows} == {(o, g) for o in "qk" for g in "tyx"}
    # Followers only: the y-group pairs along t, so its followers are the odd frames.
    assert {int(r["t"]) for r in rows if r["group"] == "y"} == {1, 3}


def test_motion_and_array_size(quick):
    doc, _ = load(quick, "motion")
    assert len(doc["rows"]) == len(DEFAULT_PRESETS) * len(MOTIONS)
    for preset in DEFAULT_PRESETS:
        lo, hi = doc["summary"][preset]["low"], doc["summary"][preset]["high"]
        assert lo["speedup"] >= 1 and hi["speedup"] >= 1
        # Faster motion leaves less to reuse (the oracle saving drops).
        assert lo["oracle_reduction"] > hi["oracle_reduction"]
    doc, _ = load(quick, "array-size")
    assert {(r["preset"], r["rows"]) for r in doc["rows"]} == \
        {(p, n) for p in DEFAULT_PRESETS for n in (2, 4, 8)}
    assert any("without the dispatcher" in n for n in doc["notes"])
    for r in doc["rows"]:
        assert r["speedup"] >= 1 and 0 < r["utilization_reuse"] <= 1
        assert r["pe_cycles_reuse"] == r["rows"] * r["cols"] * r["cycles_reuse"]


def test_head_report(quick):
    """Every preset has a dense, an s-reuse and a reuse row; the stages add up; reuse is
    faster in S, in P @ V and over the whole head, and V reuse adds to S reuse."""
    doc, _ = load(quick, "head")
    assert [(r["preset"], r["run"]) for r in doc["rows"]] == \
        [(p, run) for p in DEFAULT_PRESETS for run in ("dense", "s-reuse", "reuse")]
    for r in doc["rows"]:
        assert r["total"] == r["s"] + r["pv"] + r["exposed_softmax"] >= r["s"] + r["pv"]
    for preset in DEFAULT_PRESETS:
        sp = doc["summary"][preset]
        assert sp["s_speedup"] > 1 and sp["pv_speedup"] > 1 and sp["head_speedup"] > 1
        assert sp["v_gain"] > 1


def test_user_workload(tmp_path, capsys):
    w = make_qkv("cogvideox-5b", "2x4x4", seed=3)
    np.savez(tmp_path / "head.npz", q=w.q, k=w.k, v=w.v)
    out = tmp_path / "out"
    assert main(["report", "--workload", str(tmp_path / "head.npz"), "--grid", "2x4x4",
                 "--model", "cogvideox-5b", "--jobs", "1", "--out", str(out),
                 "--only", "reuse-vs-skip,motion,array-size"]) == 0
    assert "motion" in capsys.readouterr().out
    doc, _ = load(out, "reuse-vs-skip")
    assert doc["workload"] == {"file": "head.npz", "grid": "2x4x4", "model": "cogvideox-5b"}
    assert len(doc["rows"]) == 1 and doc["rows"][0]["preset"] == "cogvideox-5b"
    assert not (out / "motion.json").exists()
    assert "`motion`: skipped" in (out / "summary.md").read_text()
    doc, _ = load(out, "array-size")
    assert [r["rows"] for r in doc["rows"]] == [2, 4, 8]


def _bad(tmp_path, **arrays):
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize("case, needle", [
    ("float", "q must be an int8 array"),
    ("shape", "k must have shape (N, 64) = (32, 64)"),
    ("missing", "lacks k"),
    ("v_rows", "v must have shape (N, d) = (32, d)"),
    ("not_npz", "cannot read"),
    ("no_grid", "--workload needs --grid"),
    ("only", "--only must name reports from"),
    ("scale", "scale must be a positive finite number"),
])
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, case, needle):
    q = np.zeros((32, 64), np.int8)
    grid = ["--grid", "2x4x4"]
    extra = []
    if case == "float":
        path = _bad(tmp_path, q=q.astype(np.float32), k=q)
    elif case == "shape":
        path = _bad(tmp_path, q=q, k=np.zeros((32, 128), np.int8))
    elif case == "missing":
        path = _bad(tmp_path, q=q)
    elif case == "v_rows":
        path = _bad(tmp_path, q=q, k=q, v=np.zeros((31, 64), np.int8))
    elif case == "not_npz":
        path = tmp_path / "bad.npz"
        path.write_text("not an archive")
    elif case == "no_grid":
        path, grid = _bad(tmp_path, q=q, k=q), []
    elif case == "only":
        path, extra = _bad(tmp_path, q=q, k=q), ["--only", "thresholds,fig99"]
    else:
        path = _bad(tmp_path, q=q, k=q, v=q, scale=np.float64(-1.0))
    out = tmp_path / "out"
    code = main(["report", "--workload", str(path), *grid, "--model", "cogvideox-5b",
                 "--out", str(out), *extra])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("kaleido-hw report: error: ") and err.count("\n") == 1, err
    assert needle in err, err
    assert not out.exists(), "nothing may be written on bad input"


def test_area_is_skipped_without_yosys(tmp_path, monkeypatch, capsys):
    import shutil
    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda n, *a, **k: None if n == "yosys" else real(n))
    assert main(["report", "--only", "area", "--out", str(tmp_path)]) == 0
    assert "skipped: yosys not found" in capsys.readouterr().out
    assert "`area`: skipped" in (tmp_path / "summary.md").read_text()


def test_energy_report(quick):
    doc, rows = load(quick, "energy")
    scopes = {r["scope"] for r in doc["rows"]}
    assert scopes == {"paper", "ablation", "linear"}
    for r in doc["rows"]:
        parts = r["pe_pj"] + r["dispatcher_pj"] + r["sram_pj"] + r["dram_pj"]
        assert r["total_pj"] == pytest.approx(parts, rel=1e-9)
        if r["variant"] == "pe":
            assert r["vs_pe"] == 1.0
    assert {r["calibration"] for r in doc["rows"] if r["scope"] == "paper"} == {
        "pe", "array", "array-step"}
    paper = {r["variant"]: r for r in doc["rows"]
             if r["scope"] == "paper" and r["calibration"] == "array"}
    assert set(paper) == {"dense-plain", "dense", "pe", "pe-sh", "pe-m", "full"}
    assert paper["dense-plain"]["saving_vs_dense_plain"] == 1.0
    assert paper["pe"]["dispatcher_pj"] == 0 < paper["full"]["dispatcher_pj"]
    assert "hunyuanvideo" in doc["summary"]["paper"]["array-step"]
    assert any("16 nm" in n for n in doc["notes"])
