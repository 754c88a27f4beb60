"""``kaleido-hw report --only attention``: rows, summary and table of the integer pipeline."""

from __future__ import annotations

from kaleido_hw.reports import attention_report as ar
from kaleido_hw.reports.report import REPORTS, ON_REQUEST


def test_rows_summary_table():
    rows = ar.attention_rows(presets=["cogvideox-5b"], grid="2x4x4", seeds=2)
    assert len(rows) == 4 and all(r["merged_equal"] for r in rows)
    summary = ar.summarize(rows)
    assert set(summary["cogvideox-5b"]) == {"off", "on"}
    off, on = summary["cogvideox-5b"]["off"], summary["cogvideox-5b"]["on"]
    assert off["v_reduction"] == 0 < on["v_reduction"]
    # Reusing more can only cost accuracy here; the integer softmax itself stays > 30 dB.
    assert on["int_reuse_mse"] >= off["int_reuse_mse"] and off["int_exact_psnr"] > 30
    table = ar.table_rows(summary)
    assert [r[:2] for r in table] == [["cogvideox-5b", "off"], ["cogvideox-5b", "on"]]


def test_registered():
    assert "attention" in REPORTS and "attention" not in ON_REQUEST


def test_length_rows_summary_table():
    rows = ar.length_rows(presets=["wan2.1"], grids=["2x4x4", "4x8x8"], seeds=1)
    assert [r["tokens"] for r in rows] == [32, 256]
    summary = ar.length_summary(rows)
    assert list(summary) == [("wan2.1", "2x4x4"), ("wan2.1", "4x8x8")]
    long = summary[("wan2.1", "4x8x8")]
    # Section 15 keeps the float path's quality; section 14 loses P to rounding.
    assert abs(long["online_psnr"] - long["float_reuse_psnr"]) < 0.5
    assert long["online_psnr"] > long["row_softmax_psnr"] and long["p_zero"] > long["p_zero_online"]
    table = ar.length_table_rows(summary)
    assert [r[:2] for r in table] == [["wan2.1", "32"], ["wan2.1", "256"]] and len(table[0]) == 9
    assert abs(long["online_block_psnr"] - long["float_reuse_psnr"]) < 0.5
    assert "attention-length" in REPORTS and "attention-length" not in ON_REQUEST
