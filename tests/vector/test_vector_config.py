"""KaleidoConfig's vector-unit keys: defaults and clear errors before anything is built."""

from __future__ import annotations

import pytest

from kaleido_hw.config import ConfigError, KaleidoConfig


def test_defaults():
    cfg = KaleidoConfig()
    assert (cfg.vector_lanes, cfg.vector_max_row, cfg.vector_score_bits,
            cfg.vector_row_buffers) == (16, 256, 24, 5)


@pytest.mark.parametrize("changes, match", [
    ({"vector_lanes": 0}, r"vector_lanes must be in \[1, 64\], got 0"),
    ({"vector_lanes": 65}, r"vector_lanes must be in \[1, 64\]"),
    ({"vector_max_row": 100}, r"vector_max_row must be a multiple of vector_lanes \(16\) "
                              r"in \[16, 4096\], got 100"),
    ({"vector_max_row": 8}, r"vector_max_row must be in \[16, 4096\]"),
    ({"vector_max_row": 8192}, r"vector_max_row must be in \[16, 4096\]"),
    ({"vector_score_bits": 8}, r"vector_score_bits must be in \[16, 32\]"),
    ({"vector_row_buffers": 1}, r"vector_row_buffers must be in \[2, 8\]"),
    ({"vector_lanes": 4.0}, r"vector_lanes must be an integer"),
])
def test_errors(changes, match):
    with pytest.raises(ConfigError, match=match):
        KaleidoConfig(**changes)


def test_unknown_key():
    with pytest.raises(ConfigError, match=r"unknown configuration key\(s\) vector_lane;"):
        KaleidoConfig.from_dict({"vector_lane": 8})
