"""``golden.engine.linear_layer`` (through ``kaleido_hw.engine.host.linear_counters``): a
whole linear layer's counters without running its program equal the program interpreter's
(``core_counters`` of ``run_linear(..., engine=True)``), which the RTL core matches."""

import numpy as np
import pytest

from golden.engine.core_model import core_counters
from golden.engine.linear_layer import LAYER_COUNTERS, linear_layer_counters
from golden.numerics import ChannelGroups
from golden.workloads import make_activations
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.host import linear_counters, run_linear
from kaleido_hw.engine.kaleido_engine import plain_config

CASES = {
    # grid, c_in, c_out, config keys, plan arguments
    "pe": ("3x4x6", 40, 24, {}, {"variant": "pe"}),
    "full-partial-block": ("3x4x6", 40, 70, {}, {"variant": "full"}),
    "dense-slices": ("3x4x6", 200, 30, {"acc_width": 32, "engine_max_head_dim": 64},
                     {"variant": "dense"}),
    "padded-boxes": ("5x7x9", 24, 40, {"engine_max_tokens": 32}, {"variant": "pe-sh"}),
    "padded-full": ("5x7x9", 24, 40, {"engine_max_tokens": 32}, {"variant": "full"}),
    "window3": ("7x5x4", 24, 11, {"engine_max_tokens": 36, "engine_window3": True},
                {"window": 3}),
    "plain": ("3x4x6", 40, 24, "plain", {}),
    "y-direction": ("4x6x4", 16, 20, {}, {"variant": "pe",
                                          "groups": ChannelGroups((0,) * 16, (1, 1, 2))}),
}


@pytest.mark.parametrize("case", CASES)
def test_layer_counters_equal_the_interpreter(case):
    grid, c_in, c_out, keys, plan_args = CASES[case]
    cfg = plain_config(KaleidoConfig()) if keys == "plain" else KaleidoConfig(**keys)
    x, _ = make_activations(grid, c_in, seed=3)
    w = np.random.default_rng(1).integers(-128, 128, (c_in, c_out)).astype(np.int8)
    run = run_linear(cfg, x, w, grid, engine=True, **plan_args)
    want = core_counters(run.result)
    got = linear_counters(cfg, x, c_out, grid, **plan_args)
    assert got.pop("plan").commands == run.plan.commands
    assert got.pop("computes") == len(run.result.blocks)
    assert got == want
    assert want["compute"] > 0 and want["busy_pe_cycles"] > 0


def test_counters_follow_the_activation():
    # Two layers whose activations differ: different counters (the model reads X).
    cfg = KaleidoConfig()
    a, _ = make_activations("3x4x6", 32, seed=3)
    b, _ = make_activations("3x4x6", 32, seed=4, noise=0.5)
    ca = linear_counters(cfg, a, 16, "3x4x6", variant="pe")
    cb = linear_counters(cfg, b, 16, "3x4x6", variant="pe")
    assert ca["compute"] != cb["compute"]
    assert set(LAYER_COUNTERS) <= set(ca)


def test_bad_input_is_named():
    groups = ChannelGroups((0,) * 8)
    x = np.zeros((12, 8), np.int8)
    with pytest.raises(ValueError, match="x must be an"):
        linear_layer_counters(x[:5], "1x3x4", 4, (1, 3, 4), groups)
    with pytest.raises(ValueError, match="c_out"):
        linear_layer_counters(x, "1x3x4", 0, (1, 3, 4), groups)
    with pytest.raises(ValueError, match="window must be 2 or 3"):
        linear_layer_counters(x, "1x3x4", 4, (1, 3, 4), groups, window=4)
    with pytest.raises(ValueError, match="x must be an int8"):
        linear_layer_counters(x.astype(np.float32), "1x3x4", 4, (1, 3, 4), groups)
    with pytest.raises(ValueError, match="box must be three"):
        linear_layer_counters(x, "1x3x4", 4, (1, 3), groups)
    with pytest.raises(ValueError, match="plain core"):
        linear_layer_counters(x, "1x3x4", 4, (1, 3, 4), groups, window=3, plain=True)
