"""``kaleido-hw linear-report`` (the Fig. 20 analogue, docs/linear.md): every figure from the
engine core's exact layer counters, the attention from the engine's cycle model."""

import json

import pytest

from golden import VideoGrid


def test_linear_report_small(tmp_path):
    from golden.engine.core_model import core_counters
    from golden.engine.model import EngineParams, engine_counters
    from golden.numerics import ChannelGroups
    from kaleido_hw.engine.host import linear_counters, run_linear
    from kaleido_hw.reports.linear_report import (LAYERS, block_layers, linear_figures,
                                                  linear_groups, report_cores)

    grid = VideoGrid(3, 4, 4)
    res = linear_figures(tmp_path, ["cogvideox-5b"], grid, heads=1, arrays=2, window=3,
                         seed=1)
    for name in ("linear_report.png", "linear_report.json", "linear_report.csv"):
        assert (tmp_path / name).stat().st_size > 0
    assert json.loads((tmp_path / "linear_report.json").read_text())["summary"] == \
        json.loads(json.dumps(res["summary"]))
    s = res["summary"]["cogvideox-5b"]
    layers, qkvs, dims = block_layers("cogvideox-5b", grid, 1, seed=1)
    assert dims == {"d_model": 64, "mlp": 256} and s["d_model"] == 64
    reuse_core, plain = report_cores(4, 4, 2)
    assert plain.engine_pe == "plain" and reuse_core.engine_window3
    dense = reuse = 0
    for row, name in zip(res["layers"], LAYERS):
        x, w = layers[name]
        assert row["layer"] == name and (row["c_in"], row["c_out"]) == w.shape
        c_out = w.shape[1]
        d = linear_counters(plain, x, c_out, grid, variant="dense")["compute"]
        w2, w3 = (linear_counters(reuse_core, x, c_out, grid, variant="pe",
                                  window=win)["compute"] for win in (2, 3))
        assert (row["dense_cycles"], row["reuse_cycles"]) == (d, w3)     # window=3
        assert (row["w2_cycles"], row["w3_cycles"]) == (w2, w3)
        assert row["w3_gain"] == w2 / w3 and row["speedup"] == d / w3
        dense, reuse = dense + d, reuse + w3
    assert (s["linear_dense_cycles"], s["linear_reuse_cycles"]) == (dense, reuse)
    # the counters are the program interpreter's (the RTL core's) on the smallest layer
    x, w = layers["out"]
    run = run_linear(reuse_core, x, w, grid, linear_groups(x.shape[1], 0), engine=True,
                     variant="pe", window=3)
    assert core_counters(run.result)["compute"] == res["layers"][1]["reuse_cycles"]
    q, k, _ = qkvs[0]
    groups = ChannelGroups.from_preset("cogvideox-5b")
    params = EngineParams(rows=4, cols=4, arrays=2)
    ad = engine_counters(q, k, grid, groups, params, "dense").cycles
    ar = engine_counters(q, k, grid, groups, params, "full").cycles
    assert (s["attention_dense_cycles"], s["attention_reuse_cycles"]) == (ad, ar)
    assert s["combined_speedup"] == pytest.approx((dense + ad) / (reuse + ar))
    assert s["attention_only_speedup"] == pytest.approx((dense + ad) / (dense + ar))
    lo, hi = sorted((s["linear_speedup"], s["attention_speedup"]))
    assert lo <= s["mix_speedup"] <= hi


def test_linear_report_cli_rejects_bad_input(capsys):
    from kaleido_hw.cli import main
    assert main(["linear-report", "--presets", "sora"]) == 2
    assert "--presets must name presets" in capsys.readouterr().err
    assert main(["linear-report", "--arrays", "0"]) == 2


def test_linear_report_rejects_per_channel_directions(tmp_path):
    from kaleido_hw.reports.linear_report import linear_figures
    with pytest.raises(ValueError, match="directions must be one axis"):
        linear_figures(tmp_path, ["wan2.1"], "2x2x2", heads=1, directions=[0, 1])
    with pytest.raises(ValueError, match="presets must be among"):
        linear_figures(tmp_path, ["sora"], "2x2x2", heads=1)
    assert not any(tmp_path.iterdir())            # nothing written before the checks
