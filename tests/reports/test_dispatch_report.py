"""``kaleido-hw dispatch-report``: the helpers cut the streams as documented, and the command
produces consistent figures on a small grid."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kaleido_hw.cli import main
from kaleido_hw.reports.dispatch_report import cluster_spread, entry_codes, matcher_batches


def test_entry_codes_keeps_followers_and_whole_batches():
    codes = np.arange(10 * 4, dtype=np.uint8).reshape(10, 4) % 3
    followers = np.zeros((10, 4), dtype=bool)
    followers[[1, 2, 4, 7, 8], 0] = True        # batch 0 (channels 0-1): 5 followers
    followers[[0, 3], 3] = True                 # batch 1 (channels 2-3): 2 followers
    out = entry_codes(codes, followers, width=2, entries=2)
    # 4 of batch 0's 5 followers (a partial batch is dropped), then both of batch 1's.
    assert out.tolist() == codes[[1, 2, 4, 7], 0:2].tolist() + codes[[0, 3], 2:4].tolist()


def test_matcher_batches_cut_queues_into_column_groups_and_channel_slices():
    # 2 queues of capacity 3, 4 channels; cols 2 pads each queue with one FULL token.
    codes = (np.arange(6)[:, None] * 10 + np.arange(4)[None, :]) % 3
    b = matcher_batches(codes.astype(np.uint8), capacity=3, cols=2, channels=2)
    assert b.shape == (2 * 2 * 2, 2, 2)
    assert b[0].tolist() == codes[0:2, 0:2].tolist()            # queue 0, tokens 0-1, ch 0-1
    assert b[1].tolist() == codes[0:2, 2:4].tolist()            # same tokens, ch 2-3
    assert b[2].tolist() == [codes[2, 0:2].tolist(), [0, 0]]    # token 2 + FULL padding
    assert b[4].tolist() == codes[3:5, 0:2].tolist()            # queue 1


def test_cluster_spread():
    pats = np.array([[[0b0000, 0b0011], [0b1111, 0b1111]]], dtype=np.uint64)
    assert cluster_spread(pats) == pytest.approx((2 + 0) / 2)


def test_report_on_a_small_grid(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["dispatch-report", "--grid", "small", "--lookahead", "1", "--lookahead", "4",
                 "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Hamming spread" in text and "Merge efficiency" in text
    r = json.loads(out.read_text())
    assert set(r["workloads"]) == {"hunyuanvideo/q", "hunyuanvideo/k", "wan2.1/q", "wan2.1/k"}
    for s in r["workloads"].values():
        assert s["entries"] % 64 == 0 and s["batches"] >= 1
        assert 0 < s["spread_scheduled"] and 0 < s["spread_arrival"]
        for m in s["matcher"].values():
            one, four = m["lookahead"]["1"], m["lookahead"]["4"]
            assert one["slots_per_nonempty_channel"] == 1.0 and one["merged"] == 0
            assert 0.5 <= four["slots_per_nonempty_channel"] <= 1.0
            assert four["slots"] == m["nonempty_channels"] - four["merged"]


def test_report_rejects_bad_lookahead(capsys):
    assert main(["dispatch-report", "--grid", "tiny", "--lookahead", "0"]) == 2
    assert "--lookahead must be at least 1" in capsys.readouterr().err
