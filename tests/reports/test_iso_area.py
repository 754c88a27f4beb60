"""The iso-area report (``kaleido-hw report --only iso-area``, ``kaleido_hw.reports.iso_area``) with a
stand-in for the standard-cell flow: the module ``kaleido_hw.flow.stdcell`` is replaced by a fake
whose ``synth_stdcell`` returns fixed areas and paths, so the report's arithmetic, its files,
its cache, its level-2 reading and its skip messages are checked without the flow."""

from __future__ import annotations

import csv
import json
import sys
import types
from dataclasses import dataclass, field

import pytest

import kaleido_hw.flow.synth  # noqa: F401  (takes names from the real stdcell at import: load it
#                                            before a test puts the fake in its place)
from golden.engine.model import EngineParams, engine_counters, plain_walk
from golden.numerics import ChannelGroups
from kaleido_hw.cli import main
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.kaleido_engine import plain_config
from kaleido_hw.reports import iso_area as ia
from kaleido_hw.reports.report import Settings, Source


#: Fake standard-cell figures per top: (area um2, critical path ns).
FAKE = {"baseline_array": (10_000.0, 0.80), "pe_array": (26_000.0, 0.95),
        "merged_array": (29_000.0, 1.00), "cluster_scheduler": (60_000.0, 0.90),
        "merge_matcher": (5_000.0, 1.10)}


@dataclass
class FakeResult:
    top: str
    area_um2: float | None
    cells: int = 1
    ffs: int = 1
    path_ns: float | None = 1.0
    arrival_ns: float | None = 1.0
    startpoint: str = "a"
    endpoint: str = "b"
    fmax_mhz: float | None = 1000.0
    power_mw: float | None = None
    units: list = field(default_factory=list)
    notes: list = field(default_factory=list)


def fake_stdcell(calls: list, available=None):
    mod = types.ModuleType("kaleido_hw.flow.stdcell")

    def synth_stdcell(top, config, *, units=False):
        calls.append(top)
        area, path = FAKE[top]
        return FakeResult(top, area, path_ns=path, arrival_ns=path, fmax_mhz=1000 / path)

    mod.synth_stdcell = synth_stdcell
    mod.stdcell_available = lambda: available
    mod.StdCellResult = FakeResult
    return mod


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)        # the cache goes to build/ of the working directory
    return tmp_path


def _plain_cycles(preset: str, config: dict) -> int:
    """Cycles of the plain build's own walk (one group along x, in chunks of its own width)
    on the report's head of ``preset``: the reference of the iso-area figure."""
    cfg = plain_config(KaleidoConfig.from_dict(config))
    q, k = Source(preset, Settings.make(quick=True).grid, 0).load()[:2]
    groups = ChannelGroups.from_preset(preset)
    return int(engine_counters(q, k, Settings.make(quick=True).grid, plain_walk(groups),
                               EngineParams.from_config(cfg), "dense").cycles)


def _run(out) -> dict:
    assert main(["report", "--quick", "--jobs", "1", "--only", "iso-area", "--out",
                 str(out)]) == 0
    doc = json.loads((out / "iso-area.json").read_text())
    with (out / "iso-area.csv").open() as f:
        assert len(list(csv.DictReader(f))) == len(doc["rows"]) > 0
    assert (out / "iso-area.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return doc


def test_report_arithmetic_cache_and_level2(in_tmp, monkeypatch):
    calls = []
    monkeypatch.setitem(sys.modules, "kaleido_hw.flow.stdcell", fake_stdcell(calls))
    doc = _run(in_tmp / "r1")
    assert sorted(calls) == sorted(FAKE)                     # every level-1 top once
    rows = doc["rows"]
    P = doc["summary"]["config"]["engine_arrays"]
    att = [r for r in rows if r["kind"] == "attention"]
    assert {r["preset"] for r in att} == {"hunyuanvideo", "wan2.1", "cogvideox-5b"}
    assert all(r["level"] == 1 for r in rows)                 # no engine cache here
    for preset in {r["preset"] for r in att}:
        by = {r["variant"]: r for r in att if r["preset"] == preset}
        assert list(by) == list(ia.VARIANTS)
        assert by["dense"]["relative"] == 1.0
        assert by["dense"]["area_um2"] == P * FAKE["baseline_array"][0]
        assert by["full"]["area_um2"] == (P * FAKE["merged_array"][0]
                                          + 1 * FAKE["cluster_scheduler"][0]
                                          + P * FAKE["merge_matcher"][0])
        assert by["pe-sh"]["period_ns"] == 0.95 and by["pe-m"]["period_ns"] == 1.10
        for r in by.values():
            want = r["cycle_speedup"] / r["area_ratio"] / r["period_ratio"]
            assert r["relative"] == pytest.approx(want, rel=1e-12)
            n = r["elements"] ** 0.5
            assert r["elements_per_ns_mm2"] == pytest.approx(
                n * n / (r["cycles"] * r["period_ns"]) / (r["area_um2"] * 1e-6))
        assert by["pe"]["cycle_speedup"] > 1.0               # reuse needs fewer cycles
        # The reference runs the plain build's schedule (one group along x), not the
        # grouped dense walk of the ablation.
        assert by["dense"]["cycles"] == _plain_cycles(preset, doc["summary"]["config"])
    lin = [r for r in rows if r["kind"] == "linear"]
    assert {r["variant"] for r in lin} == {"dense", "reuse"}
    assert all(r["area_um2"] == P * FAKE["pe_array" if r["variant"] == "reuse"
                                         else "baseline_array"][0] for r in lin)
    text = " ".join(doc["notes"])
    assert "left out" in text and "Paper: about 2x fewer cycles" in text
    assert doc["summary"]["paper"]["iso_area_time"] == pytest.approx(2 / 1.31)
    assert "`iso-area`" in (in_tmp / "r1" / "summary.md").read_text()

    # A second report takes the areas from build/: no synthesis.
    calls.clear()
    _run(in_tmp / "r2")
    assert calls == []
    assert json.loads((in_tmp / ia.CACHE).read_text())["key"]["sources"] == \
        ia.source_hash(FAKE)

    # Level 2: whole-engine builds with a standard-cell area in the engine cache.
    builds = [{"arrays": P, "dispatcher": "none", "engine_pe": "plain", "area_um2": 1e6,
               "path_ns": 1.0},
              {"arrays": P, "dispatcher": "none", "area_um2": 1.5e6, "path_ns": 1.0},
              {"config": {"engine_arrays": P, "engine_dispatcher": "full"},
               "stdcell": {"area_um2": 2e6, "fmax_mhz": 800.0}},
              {"arrays": P, "dispatcher": "full", "transistors": 5}]      # no um2: ignored
    (in_tmp / ia.ENGINE_CACHE).write_text(json.dumps({"builds": builds}))
    doc = _run(in_tmp / "r3")
    l2 = {(r["preset"], r["variant"]): r for r in doc["rows"] if r["level"] == 2}
    assert {v for _, v in l2} == {"dense", "pe", "full"}
    r = l2[("hunyuanvideo", "full")]
    assert r["area_ratio"] == 2.0 and r["period_ratio"] == pytest.approx(1.25)

    # The same PEs in another array shape (kaleido-hw synth --engine --engine-shape 2x2):
    # a level-2 point of its own, its cycles the model's on that shape.
    from kaleido_hw.flow.engine_area import AREA_CONFIG, FLOW, source_hash
    key = {"flow": FLOW, "sources": source_hash()}
    shaped = AREA_CONFIG.replace(rows=2, cols=2)
    pes = P * AREA_CONFIG.rows * AREA_CONFIG.cols
    (in_tmp / ia.ENGINE_CACHE).write_text(json.dumps({"entries": [
        {"key": {"config": AREA_CONFIG.to_dict(), **key}, "builds": builds},
        {"key": {"config": shaped.to_dict(), **key}, "builds": [
            {"arrays": pes // 4, "dispatcher": "full", "area_um2": 4e6, "path_ns": 1.0}]}]}))
    doc = _run(in_tmp / "r4")
    l2 = {(r["preset"], r["variant"]): r for r in doc["rows"] if r["level"] == 2}
    assert {v for _, v in l2} == {"dense", "pe", "full", "full-2x2"}
    r = l2[("wan2.1", "full-2x2")]
    assert r["area_ratio"] == 4.0 and r["blocks"] == f"P={pes // 4} of 2x2 reuse full"
    cfg = KaleidoConfig.from_dict(doc["summary"]["config"])
    q, k = Source("wan2.1", Settings.make(quick=True).grid, 0).load()[:2]
    want = engine_counters(q, k, Settings.make(quick=True).grid,
                           ChannelGroups.from_preset("wan2.1"),
                           EngineParams.from_config(cfg.replace(rows=2, cols=2),
                                                    arrays=pes // 4), "full").cycles
    assert r["cycles"] == want != l2[("wan2.1", "full")]["cycles"]
    assert "full-2x2" in doc["summary"]["level2"]


def test_skipped_without_the_flow(in_tmp, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "kaleido_hw.flow.stdcell",
                        fake_stdcell([], "standard cells: install the Debian package foo-cells"))
    assert main(["report", "--quick", "--only", "iso-area", "--out", "r"]) == 0
    assert "skipped: standard cells: install the Debian package foo-cells" in \
        capsys.readouterr().out
    assert "`iso-area`: skipped" in (in_tmp / "r" / "summary.md").read_text()
    assert not (in_tmp / "r" / "iso-area.json").exists()
    monkeypatch.setitem(sys.modules, "kaleido_hw.flow.stdcell", None)    # module missing
    assert main(["report", "--quick", "--only", "iso-area", "--out", "r"]) == 0
    assert "skipped: the standard-cell flow (kaleido_hw.flow.stdcell) is not available" in \
        capsys.readouterr().out


def test_blocks_and_engine_cache_reading(tmp_path):
    assert ia.level1_blocks("dense", 4) == [("baseline_array", 4)]
    assert ia.level1_blocks("pe-sh", 2) == [("pe_array", 2), ("cluster_scheduler", 1)]
    assert ia.level1_blocks("pe-sh", 2, 2) == [("pe_array", 2), ("cluster_scheduler", 2)]
    assert ia.level1_blocks("full", 3) == [("merged_array", 3), ("cluster_scheduler", 1),
                                           ("merge_matcher", 3)]
    with pytest.raises(ValueError, match="variant must be one of"):
        ia.level1_blocks("fast", 4)
    assert ia.read_engine_cache(tmp_path / "none.json")[0] == {}
    path = tmp_path / "engine_area.json"
    path.write_text("{not json")
    assert "unreadable" in ia.read_engine_cache(path)[1]
    # The current whole-engine format: yosys transistors, no um2, no plain build.
    path.write_text(json.dumps({"key": {}, "builds": [
        {"arrays": 4, "dispatcher": "none", "config": {}, "modules": []}]}))
    got, why = ia.read_engine_cache(path, arrays=4)
    assert got == {} and "area_um2" in why
    path.write_text(json.dumps({"builds": [{"arrays": 4, "dispatcher": "full",
                                            "area_um2": 5.0, "path_ns": 1.0}]}))
    # One entry per configuration: the comparison builds' entry is read.
    from kaleido_hw.flow.engine_area import AREA_CONFIG
    plain = {"arrays": 4, "dispatcher": "none", "engine_pe": "plain", "area_um2": 2.0,
             "path_ns": 1.0}
    entry = {"key": {"config": {"engine_max_tokens": 64}}, "builds": [
        plain, {"arrays": 4, "dispatcher": "full", "area_um2": 9.0, "path_ns": 1.0}]}
    small = {"key": {"config": AREA_CONFIG.to_dict()}, "builds": [
        plain, {"arrays": 4, "dispatcher": "full", "area_um2": 5.0, "path_ns": 1.0}]}
    path.write_text(json.dumps({"entries": [entry, small]}))
    assert ia.read_engine_cache(path, arrays=4)[0]["full"]["area_um2"] == 5.0
    path.write_text(json.dumps({"entries": [entry]}))
    assert ia.read_engine_cache(path, arrays=4)[0]["full"]["area_um2"] == 9.0
    # The cache as engine_area.save_cache writes it: EngineArea records, whole-engine area
    # in total_area_um2, dispatcher and PEs in the build's configuration.
    from dataclasses import asdict
    from kaleido_hw.flow.engine_area import EngineArea, variant_config
    real = []
    for variant, area in (("plain", 3e6), ("full", 7e6)):
        cfg = variant_config(AREA_CONFIG, 4, variant)
        real.append(asdict(EngineArea(4, variant, cfg.to_dict(), total_area_um2=area,
                                      path_ns=10.0)))
    path.write_text(json.dumps({"entries": [{"key": {"config": AREA_CONFIG.to_dict()},
                                             "builds": real}]}))
    got, why = ia.read_engine_cache(path, arrays=4)
    assert why == "" and got["dense"]["area_um2"] == 3e6 and got["full"]["area_um2"] == 7e6
    # A key with the flow version and the engine's source hash: used only while both match.
    from kaleido_hw.flow.engine_area import FLOW, source_hash
    for sources, fresh in ((source_hash(), True), ("0" * 16, False)):
        key = {"config": AREA_CONFIG.to_dict(), "flow": FLOW, "sources": sources}
        path.write_text(json.dumps({"entries": [{"key": key, "builds": real}]}))
        got, why = ia.read_engine_cache(path, arrays=4)
        assert (got != {}) == fresh and (why == "" if fresh else "stale" in why)
    path.write_text(json.dumps({"builds": [{"arrays": 4, "dispatcher": "full",
                                            "area_um2": 5.0, "path_ns": 1.0}]}))
    got, why = ia.read_engine_cache(path, arrays=4)
    assert got == {} and "plain-engine build" in why


def test_alternative_builds_are_read_beside_the_comparison_builds(tmp_path):
    """``read_alternative_builds``: the reuse builds of the comparison configuration in another
    array shape with the same PEs, named ``<variant>-<R>x<C>``, or with another chunk width,
    ``<variant>-w<W>``; plain builds, other PE counts, the configuration's own shape and width
    and stale entries are left out."""
    from dataclasses import asdict
    from kaleido_hw.flow.engine_area import AREA_CONFIG, FLOW, EngineArea, source_hash, \
        variant_config

    def entry(base, builds, sources=None):
        key = {"config": base.to_dict(), "flow": FLOW, "sources": sources or source_hash()}
        return {"key": key, "builds": [
            asdict(EngineArea(p, v, variant_config(base, p, v).to_dict(), total_area_um2=a,
                              path_ns=t)) for p, v, a, t in builds]}

    two = AREA_CONFIG.replace(rows=2, cols=2)
    eight = AREA_CONFIG.replace(sched_pattern_width=8, matcher_channels=8)
    path = tmp_path / "engine_area.json"
    path.write_text(json.dumps({"entries": [
        entry(AREA_CONFIG, [(4, "plain", 9e6, 6.8), (4, "full", 18e6, 7.6)]),
        entry(two, [(16, "plain", 1e6, 1.0), (16, "full", 37e6, 7.4), (8, "full", 20e6, 7.4)]),
        entry(eight, [(4, "none", 13e6, 7.3), (4, "full", 15e6, 7.4), (1, "full", 5e6, 7.0)]),
        entry(AREA_CONFIG.replace(rows=1, cols=1), [(64, "full", 90e6, 7.0)], "0" * 16),
    ]}))
    got = ia.read_alternative_builds(4, 4, 4, path=path)
    assert list(got) == ["full-2x2", "pe-w8", "full-w8"]
    assert got["full-2x2"]["area_um2"] == 37e6 and got["full-2x2"]["period_ns"] == 7.4
    assert (got["full-2x2"]["arrays"], got["full-2x2"]["rows"], got["full-2x2"]["cols"],
            got["full-2x2"]["width"], got["full-2x2"]["variant"]) == (16, 2, 2, 16, "full")
    assert (got["full-w8"]["rows"], got["full-w8"]["width"], got["full-w8"]["matcher_channels"],
            got["full-w8"]["area_um2"]) == (4, 8, 8, 15e6)
    assert "chunks of 8" in got["full-w8"]["build"]
    # Seen from 16 arrays of 2x2 the 4x4 builds are the other shape; seen from chunks of 8,
    # the comparison builds are the other width.
    assert list(ia.read_alternative_builds(16, 2, 2, path=path)) == ["full-4x4", "pe-4x4w8",
                                                                     "full-4x4w8"]
    assert list(ia.read_alternative_builds(4, 4, 4, 8, path=path)) == ["full-w16",
                                                                       "full-2x2w16"]
    assert ia.read_alternative_builds(4, 4, 4, path=tmp_path / "none.json") == {}
    # The comparison builds are still read as before.
    assert ia.read_engine_cache(path, arrays=4)[0]["full"]["area_um2"] == 18e6


def test_cropped_heads_are_noted_once(in_tmp, monkeypatch):
    """The report takes its heads twice (the ablation's cycles and the plain reference's):
    they are built once, and the note that they were cut to their first frames appears once."""
    monkeypatch.setitem(sys.modules, "kaleido_hw.flow.stdcell", fake_stdcell([]))
    assert main(["report", "--quick", "--jobs", "1", "--only", "iso-area", "--max-tokens",
                 "128", "--out", "r"]) == 0
    notes = json.loads((in_tmp / "r" / "iso-area.json").read_text())["notes"]
    cropped = [n for n in notes if n.startswith("The engine model ran on the first 2 frames")]
    assert len(cropped) == 1, notes
