"""``kaleido-hw analyze`` and ``kaleido-hw bench`` (issue 2, sections 5 and 6)."""

import json
import subprocess
import sys

import numpy as np
import pytest

from golden import ChannelGroups, attention_quality, code_counts, make_qkv, oracle_ops, reuse_masks
from kaleido_hw.cli import main


def run_cli(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_analyze_json_matches_golden(capsys):
    code, out, err = run_cli(capsys, "analyze", "--model", "wan2.1", "--grid", "4x8x8",
                             "--seed", "2", "--json")
    assert code == 0 and err == ""
    r = json.loads(out)
    w = make_qkv("wan2.1", "4x8x8", seed=2)
    g = ChannelGroups.from_preset("wan2.1")
    mq, mk = reuse_masks(w.q, w.grid, g), reuse_masks(w.k, w.grid, g)
    ops = oracle_ops(mq, mk)
    assert r["oracle"]["reduction"] == ops["reduction"] == r["total"]["reduction"]
    assert r["oracle"]["cap"] == 0.75 and r["tokens"] == 256 and r["head_dim"] == 128
    assert [x["group"] for x in r["groups"]] == ["t", "y", "x"]
    assert [x["direction"] for x in r["groups"]] == ["x", "t", "y"]
    assert [x["channels"] for x in r["groups"]] == [44, 42, 42]
    # 4x8x8: every axis even, so half of the (token, channel) slots are followers
    assert [x["followers"] for x in r["groups"] + [r["total"]]] == [0.5] * 4
    cq, ck = code_counts(mq), code_counts(mk)
    assert r["total"]["q"]["full"] == cq[0].sum() / (256 * 128 / 2)
    assert r["total"]["k"]["half"] == ck[1].sum() / (256 * 128 / 2)
    y = g.channels(1)
    assert r["groups"][1]["k"]["full"] == ck[0, y].sum() / (256 * len(y) / 2)
    for row in r["groups"] + [r["total"]]:
        for side in ("q", "k"):
            assert sum(row[side].values()) == pytest.approx(1.0)
    q = attention_quality(w.q, w.k, w.v, w.grid, g, w.scale)
    assert r["quality"]["reuse"]["mse"] == pytest.approx(q["reuse"]["mse"], rel=1e-12)
    assert r["quality"]["mse_ratio"]["skip_masks"] > 1


def test_analyze_table(capsys):
    code, out, _ = run_cli(capsys, "analyze", "--grid", "small", "--queries", "64",
                           "--reuse-v", "--directions", "yxt")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "kaleido-hw analyze: hunyuanvideo, grid 4x8x8 (256 tokens), head_dim 128"
    rows = [ln for ln in lines if ln.split(" ")[0] in ("t", "y", "x", "total")]
    assert [r.split()[2] for r in rows[:3]] == ["y", "x", "t"]
    assert any(ln.startswith("oracle QK^T reduction") for ln in lines)
    assert any("64 queries, V reused" in ln for ln in lines)
    for label in ("reuse (Kaleido)", "skip smallest |QK^T|", "skip with the same masks"):
        assert any(ln.startswith(label) for ln in lines)


def test_analyze_input_file(capsys, tmp_path):
    w = make_qkv("cogvideox-5b", "2x4x4", seed=4)
    path = tmp_path / "head.npz"
    np.savez(path, q=w.q, k=w.k.astype(np.int16), v=w.v, scale=w.scale)
    code, out, _ = run_cli(capsys, "analyze", "--model", "cogvideox-5b", "--grid", "2x4x4",
                           "--input", str(path), "--json")
    assert code == 0
    r = json.loads(out)
    g = ChannelGroups.from_preset("cogvideox-5b")
    ops = oracle_ops(reuse_masks(w.q, w.grid, g), reuse_masks(w.k, w.grid, g))
    assert r["oracle"]["reduction"] == ops["reduction"]
    assert r["workload"] == {"input": str(path)}


@pytest.mark.parametrize("argv,message", [
    (["--model", "sora"], "preset must be one of cogvideox-5b, hunyuanvideo, longcat, opensora-plan-1.3, wan2.1, got 'sora'"),
    (["--grid", "8x16"], "grid must be TxHxW (e.g. 8x16x16) or one of tiny, small, medium, hunyuanvideo-720p"),
    (["--grid", "0x4x4"], "grid must be TxHxW"),
    (["--full-bits", "8"], "full_bits must be an integer in [1, 7], got 8"),
    (["--half-bits", "5"], "half_bits must be an integer in [0, 4] (below full_bits = 5), got 5"),
    (["--directions", "xtz"], "directions must be three letters from t, y, x"),
    (["--queries", "-1"], "queries must be >= 0"),
    (["--window", "4", "--reuse-v"], "window must be an integer in [2, 3], got 4"),
    (["--noise", "2"], "noise must be a number in [0.0, 1.0], got 2.0"),
])
def test_analyze_bad_input_exits_2_with_one_line(capsys, argv, message):
    code, out, err = run_cli(capsys, "analyze", "--grid", "tiny", *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("kaleido-hw analyze: error: ")
    assert message in err


def test_analyze_input_shape_mismatch(capsys, tmp_path):
    w = make_qkv("hunyuanvideo", "2x4x4", seed=0)
    path = tmp_path / "head.npz"
    np.savez(path, q=w.q, k=w.k)
    code, _, err = run_cli(capsys, "analyze", "--grid", "2x4x8", "--input", str(path))
    assert code == 2
    assert "q must have shape (N, 128) = (64, 128) for grid 2x4x8 and head_dim 128, got (32, 128)" in err
    np.savez(path, q=w.q, k=w.k[:, :64])
    code, _, err = run_cli(capsys, "analyze", "--grid", "2x4x4", "--input", str(path))
    assert code == 2 and "k must have shape (N, 128) = (32, 128)" in err
    np.savez(path, q=w.q)
    code, _, err = run_cli(capsys, "analyze", "--grid", "2x4x4", "--input", str(path))
    assert code == 2 and "--input must hold arrays q and k" in err
    code, _, err = run_cli(capsys, "analyze", "--input", str(tmp_path / "missing.npz"))
    assert code == 2 and "--input must be an .npz file" in err


def test_analyze_process_exit_code():
    """The installed entry point path: a real process, exit status 2, one line on stderr."""
    p = subprocess.run([sys.executable, "-m", "kaleido_hw", "analyze", "--model", "nope"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().splitlines() == [
        "kaleido-hw analyze: error: preset must be one of cogvideox-5b, hunyuanvideo, longcat, "
        "opensora-plan-1.3, wan2.1, got 'nope'"]


def test_bench_small(capsys):
    code, out, _ = run_cli(capsys, "bench", "--grid", "small", "--block-grid", "2x8x8",
                           "--repeat", "1", "--json")
    assert code == 0
    r = json.loads(out)
    assert r["analysis"]["tokens"] == 256 and r["scores"]["tokens"] == 128
    assert r["scores"]["all_bit_exact"] is True
    assert set(r["scores"]["methods"]) == {"attention_scores", "exact_matmul", "matmul_int64",
                                           "matmul_float64"}
