"""KaleidoConfig: defaults are valid, every bad value is rejected with the key and the range."""

import subprocess
import sys

import pytest

from kaleido_hw.config import ConfigError, KaleidoConfig, min_acc_width


def test_defaults_are_valid_and_round_trip(tmp_path):
    cfg = KaleidoConfig()
    path = tmp_path / "c.toml"
    path.write_text(cfg.to_toml(every_key=True))
    assert len(path.read_text().splitlines()) == len(KaleidoConfig.keys())
    assert KaleidoConfig.from_toml(path) == cfg
    # Only the keys that differ from the defaults, of every value type.
    other = cfg.replace(rows=2, preset="wan2.1", core_attention=True)
    assert other.changed() == {"rows": 2, "preset": "wan2.1", "core_attention": True}
    path.write_text(other.to_toml())
    assert path.read_text() == 'preset = "wan2.1"\nrows = 2\ncore_attention = true\n'
    assert KaleidoConfig.from_toml(path) == other
    assert cfg.to_toml() == "" and cfg.changed() == {}


@pytest.mark.parametrize("channels,width", [(1, 16), (16, 20), (44, 21), (56, 21), (63, 21), (64, 22), (65, 22)])
def test_min_acc_width_is_tight(channels, width):
    assert min_acc_width(channels) == width
    # The bound: the largest sum, channels * (-128 * -128), fits; one bit less does not.
    assert channels * 16384 < 2 ** (width - 1)
    assert channels * 16384 >= 2 ** (width - 2)


@pytest.mark.parametrize("key,value,needle", [
    ("preset", "sora", "preset must be one of"),
    ("full_bits", 8, "full_bits must be in [4, 7]"),
    ("core_attention", 1, "core_attention must be true or false"),
    ("half_bits", 2, "half_bits must be in [3, 6]"),
    ("full_bits", 4, None),
    ("acc_width", 20, "acc_width must be in [21, 48]"),
    ("acc_width", "24", "acc_width must be an integer"),
    ("rows", 0, "rows must be in [1, 16]"),
    ("sched_clusters", 5, "sched_clusters must divide sched_entries (64)"),
    ("sched_lfsr_seed", 0, "sched_lfsr_seed must be in [1, 65535]"),
    ("matcher_lookahead", 0, "matcher_lookahead must be in [1, 16]"),
    ("engine_arrays", 65, "engine_arrays must be in [1, 64]"),
    ("engine_dispatcher", "scheduler+matcher", "engine_dispatcher must be one of none, scheduler, matcher, full"),
    ("engine_stall_seed", 0x10000, "engine_stall_seed must be in [0, 65535]"),
    ("engine_pe", "baseline", "engine_pe must be one of reuse, plain, reuse-pv, got 'baseline'"),
    ("engine_pe", "plain", "engine_pe = 'plain' needs engine_dispatcher = 'none'"),
])
def test_bad_values_name_the_key_and_range(key, value, needle):
    if needle is None:
        KaleidoConfig(**{key: value})
        return
    with pytest.raises(ConfigError, match=__import__("re").escape(needle)):
        KaleidoConfig(**{key: value})


def test_half_bits_must_be_below_full_bits():
    with pytest.raises(ConfigError, match="full_bits must be greater than half_bits"):
        KaleidoConfig(full_bits=4, half_bits=4)


def test_plain_engine_needs_no_dispatcher():
    """engine_pe = "plain" is accepted with engine_dispatcher = "none" only; the error names
    both keys and the dispatcher asked for."""
    assert KaleidoConfig(engine_pe="plain", engine_dispatcher="none").engine_pe == "plain"
    assert KaleidoConfig().engine_pe == "reuse"
    for dispatcher in ("scheduler", "matcher", "full"):
        with pytest.raises(ConfigError, match=f"engine_pe = 'plain' needs engine_dispatcher = "
                                              f"'none'.*got engine_dispatcher = '{dispatcher}'"):
            KaleidoConfig(engine_pe="plain", engine_dispatcher=dispatcher)


def test_narrow_accumulator_is_accepted_for_a_preset_with_small_groups():
    assert KaleidoConfig(preset="cogvideox-5b", acc_width=20).acc_width == 20
    with pytest.raises(ConfigError, match="exact for the 56-channel groups"):
        KaleidoConfig(acc_width=20)


def test_unknown_toml_key_and_bad_toml(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text("acc_widht = 24\n")
    with pytest.raises(ConfigError, match="unknown configuration key.*acc_widht.*allowed keys"):
        KaleidoConfig.from_toml(p)
    p.write_text("acc_width = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        KaleidoConfig.from_toml(p)
    with pytest.raises(ConfigError, match="does not exist"):
        KaleidoConfig.from_toml(tmp_path / "missing.toml")


def test_cli_rejects_bad_config_before_writing(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text("rows = 99\n")
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "kaleido_hw", "generate", "--config", str(p),
                        "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 2
    assert "rows must be in [1, 16], got 99" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not out.exists()
