"""Iso-area throughput of the engine variants (``kaleido-hw report --only iso-area``).

What a reuse engine buys per unit of silicon and time: for every variant, **result elements
per ns per mm2** = ``elements / (cycles * clock period) / area``, divided by the same figure
of the dense schedule on plain (BaselinePE) arrays, which is therefore 1.0.

- Attention scores S = Q K^T: elements N^2 of one head; cycles from the engine's exact cycle
  model ``golden.engine.model.engine_counters`` (the RTL matches it: the dense variant on the
  ``plain_engine`` top, every variant on ``kaleido_engine``), on the report's engine
  settings (P arrays of R x C, as the ablation report).
- Linear layers Y = X_eff W: output elements N * C_out of the four layers of one reduced
  transformer block; cycles from the engine core's exact layer counters
  (``kaleido_hw.engine.host.linear_counters``: compute cycles), reuse (variant pe) on ReusePE
  arrays against the dense run on the plain build of the core (BaselinePE arrays, its own
  chunk width).

Area and clock period come from the standard-cell flow (``kaleido_hw.flow.stdcell``, imported
only when the report runs; without it, or when ``stdcell_available()`` names a missing
package, the report is skipped with that message):

- **Level 1** (always, from small tops): P times the variant's array (``baseline_array``
  for dense on plain arrays, ``pe_array`` for pe and pe-sh, ``merged_array`` for pe-m and
  full) plus the dispatcher blocks the variant adds (one ``cluster_scheduler`` for pe-sh
  and full, two with ``sched_sides = "qk"``; one ``merge_matcher`` per array for pe-m and
  full); the period is the
  longest critical path among those blocks. Level 1 leaves out what every variant has: the
  sequencers, the buffers, the memories and the control (and the glue that the dispatcher
  adds to the sequencers), so it compares the computing fabric, as the paper's "PE-array
  area" does. Linear layers: P x ``baseline_array`` against P x ``pe_array`` (the
  engine core runs linear blocks on the tile cells of its S arrays: ``pe_array`` is the
  variant pe build's).
- **Level 2** (when ``make synth-engine`` left ``build/engine_area.json``): whole-engine
  area and period per build, read by :func:`read_engine_cache` (see there for the fields);
  a variant gets a level-2 figure when the cache has its build.

Level-1 syntheses are cached in :data:`CACHE` under a key of the configuration and a hash of
the Python sources of the synthesized tops and of the flow, so a repeated report does not
synthesize again.

The paper's claim for comparison: about 2x fewer cycles at about 1.31x the PE-array area on
the same 1 GHz clock, i.e. about 1.53x the elements per ns per mm2 of the plain accelerator.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from kaleido_hw.config import KaleidoConfig
from kaleido_hw.flow.sources import module_file, sources_hash


__all__ = ["VARIANTS", "LINEAR_VARIANTS", "CACHE", "ENGINE_CACHE", "PAPER", "LEVEL1_NOTE",
           "level1_blocks", "linear_blocks", "source_hash", "stdcell_results", "variant_area",
           "read_engine_cache", "read_alternative_builds", "ALTERNATIVE_KEYS",
           "throughput_rows"]

#: Attention variants, the reference (dense on plain arrays) first.
VARIANTS = ("dense", "pe", "pe-sh", "pe-m", "full")
#: Linear-layer variants: the dense schedule on plain arrays, window reuse on ReusePE arrays.
LINEAR_VARIANTS = ("dense", "reuse")
#: Level-1 standard-cell results (relative to the working directory, like make's outputs).
CACHE = Path("build") / "iso_area_stdcell.json"
#: The whole-engine cache of ``make synth-engine`` (``kaleido_hw.flow.engine_area``).
ENGINE_CACHE = Path("build") / "engine_area.json"
#: The paper's figures: cycles of the plain accelerator over Kaleido's, Kaleido's PE-array
#: area over the plain one's, same clock.
PAPER = {"cycle_speedup": 2.0, "area_ratio": 1.31}
PAPER["iso_area_time"] = PAPER["cycle_speedup"] / PAPER["area_ratio"]
LEVEL1_NOTE = ("Level 1 counts the PE arrays and the dispatcher blocks only: the sequencers, "
               "buffers, memories and control that every variant has are left out (as the "
               "paper's PE-array area leaves them out).")

#: StdCellResult fields kept in the cache and the rows.
_FIELDS = ("top", "area_um2", "cells", "ffs", "path_ns", "arrival_ns", "startpoint", "endpoint",
           "fmax_mhz", "power_mw", "units", "notes")


def level1_blocks(variant: str, arrays: int, schedulers: int = 1) -> list[tuple[str, int]]:
    """``[(top, count)]`` of the level-1 area of an attention ``variant`` on ``arrays``
    arrays; ``schedulers``: ClusterSchedulers of a scheduling variant (1 with ``sched_sides
    = "q"``, 2 with ``"qk"``)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    matcher = variant in ("pe-m", "full")
    array = {"dense": "baseline_array"}.get(variant, "merged_array" if matcher else "pe_array")
    blocks = [(array, arrays)]
    if variant in ("pe-sh", "full"):
        blocks.append(("cluster_scheduler", schedulers))
    if matcher:
        blocks.append(("merge_matcher", arrays))
    return blocks


def linear_blocks(variant: str, arrays: int) -> list[tuple[str, int]]:
    """``[(top, count)]`` of the level-1 area of the linear layers' ``variant``."""
    if variant not in LINEAR_VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(LINEAR_VARIANTS)}, got {variant!r}")
    return [("baseline_array" if variant == "dense" else "pe_array", arrays)]


def source_hash(tops) -> str:
    """SHA-256 (16 hex digits) of the Python sources of ``tops`` and of the standard-cell
    flow: the module of each top's class (``kaleido_hw.flow.generate.TOPS``) and
    ``kaleido_hw/flow/stdcell.py``, with every ``kaleido_hw`` or ``golden`` module they import
    (:func:`kaleido_hw.flow.sources.sources_hash`)."""
    from kaleido_hw.flow.generate import TOPS

    targets = {t.module: t.python_module for t in TOPS}
    entries = [f for t in tops for f in module_file(targets[t])]
    return sources_hash(entries + module_file("kaleido_hw.flow.stdcell"))


def _as_dict(result) -> dict:
    if dataclasses.is_dataclass(result):
        d = dataclasses.asdict(result)
    else:
        d = {k: getattr(result, k, None) for k in _FIELDS}
    out = {k: d.get(k) for k in _FIELDS}
    if out["notes"] is not None and not isinstance(out["notes"], list):
        out["notes"] = [str(out["notes"])] if isinstance(out["notes"], str) else list(out["notes"])
    return out


def stdcell_results(tops, config: KaleidoConfig, synth, cache: Path = CACHE,
                    log=None) -> tuple[dict, list[str]]:
    """``({top: result dict}, [tops synthesized now])`` for ``tops`` at ``config``.

    ``synth(top, config)`` runs the flow (``kaleido_hw.flow.stdcell.synth_stdcell``). Results come
    from ``cache`` when its key (configuration and :func:`source_hash`) matches; new results
    are added to it."""
    tops = list(dict.fromkeys(tops))
    key = {"config": config.to_dict(), "sources": source_hash(tops)}
    cache = Path(cache)
    stored = {}
    try:
        data = json.loads(cache.read_text())
        if data.get("key") == key:
            stored = data.get("results", {})
    except (OSError, ValueError, AttributeError):
        stored = {}
    fresh = []
    for top in tops:
        if top in stored and stored[top].get("area_um2") is not None:
            continue
        if log:
            log(f"standard-cell synthesis of {top} ...")
        stored[top] = _as_dict(synth(top, config))
        fresh.append(top)
    if fresh:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps({"key": key, "results": stored}, indent=1) + "\n")
    return {t: stored[t] for t in tops}, fresh


def variant_area(blocks, results: dict) -> dict:
    """Area (um2, the sum of count x block area) and period (ns, the longest block path) of
    ``blocks`` = ``[(top, count)]``."""
    area = sum(n * results[t]["area_um2"] for t, n in blocks)
    period = max(results[t]["path_ns"] for t, _ in blocks)
    slowest = max(blocks, key=lambda b: results[b[0]]["path_ns"])[0]
    return {"area_um2": area, "period_ns": period, "critical_block": slowest,
            "blocks": " + ".join(f"{n} x {t}" for t, n in blocks)}


# -- level 2: the whole-engine cache -----------------------------------------------------------

_DISPATCHER_VARIANT = {"none": "pe", "scheduler": "pe-sh", "matcher": "pe-m", "full": "full"}


def _first(d: dict, *keys):
    for k in keys:
        v = d.get(k) if isinstance(d, dict) else None
        if v is not None:
            return v
    return None


def read_engine_cache(path: Path = ENGINE_CACHE, arrays: int | None = None
                      ) -> tuple[dict, str]:
    """Whole-engine area and period per variant from ``make synth-engine``'s cache:
    ``({variant: {"area_um2", "period_ns", "arrays", "build"}}, why)`` (``why`` says what is
    missing when the dict is empty).

    The format of that file is not fixed yet, so it is read defensively: a top-level
    ``builds`` list (or dict of builds), or ``entries`` of such (one per configuration: the
    one of ``engine_area.AREA_CONFIG`` is taken when there, else the first; an entry whose
    key names another flow version or other engine sources is stale and not used); per build
    the array count (``arrays``, else
    ``config.engine_arrays``), the dispatcher (``dispatcher``, else
    ``config.engine_dispatcher``), the PEs (``engine_pe``, else ``config.engine_pe``, else
    "reuse"), the standard-cell area ``area_um2`` or ``total_area_um2`` (what
    ``engine_area.EngineArea`` writes; at the build or in a ``stdcell`` dict) and
    the period ``path_ns`` (same places; else ``1000 / fmax_mhz``). Builds without an area in
    um2 (the yosys transistor estimates of the current flow) are not used. A plain build
    (engine_pe "plain") is the dense reference; reuse builds map dispatcher none / scheduler
    / matcher / full to pe / pe-sh / pe-m / full. Only builds with ``arrays`` arrays are
    taken (when given)."""
    entries, why = _engine_entries(path)
    if entries is None:
        return {}, why
    from kaleido_hw.flow.engine_area import AREA_CONFIG
    # One entry per base configuration: the comparison builds (engine_area.AREA_CONFIG)
    # when there, else the first.
    mine = [e for e in entries if (e.get("key") or {}).get("config") == AREA_CONFIG.to_dict()]
    data = (mine or entries)[0]
    if _stale(data):
        return {}, (f"{path} is stale (the flow or the engine's sources changed since "
                    f"'make synth-engine-compare' wrote it)")
    builds = data.get("builds") if isinstance(data, dict) else None
    if isinstance(builds, dict):
        builds = list(builds.values())
    if not isinstance(builds, list):
        return {}, f"{path} has no list of builds"
    out = {}
    for b in _parsed_builds(builds):
        if arrays is not None and b["arrays"] != arrays:
            continue
        out[b["variant"]] = {k: b[k] for k in ("area_um2", "period_ns", "arrays", "build")}
    if not out:
        return {}, (f"{path} has no build with a standard-cell area (area_um2) and period"
                    + (f" for {arrays} arrays" if arrays is not None else ""))
    if "dense" not in out:
        return {}, f"{path} has no plain-engine build (engine_pe 'plain'), the reference"
    return out, ""


#: Keys in which an alternative whole-engine build differs from the comparison configuration
#: (:func:`read_alternative_builds`): the array shape and the chunk width.
ALTERNATIVE_KEYS = ("rows", "cols", "sched_pattern_width", "matcher_channels")


def read_alternative_builds(arrays: int, rows: int, cols: int, width: int | None = None,
                            path: Path = ENGINE_CACHE) -> dict:
    """Whole-engine builds of ``make synth-engine-compare`` with the same PEs as ``arrays``
    arrays of ``rows`` x ``cols`` but another array shape (``kaleido-hw synth --engine
    --engine-shape RxC``) or another chunk width than ``width`` (default: the comparison
    configuration's ``sched_pattern_width``; ``--engine-chunk-width W``), as
    ``{name: {"area_um2", "period_ns", "arrays", "rows", "cols", "width", "matcher_channels",
    "variant", "build"}}``, named ``<variant>-<R>x<C>`` (other shape), ``<variant>-w<W>``
    (other width) or ``<variant>-<R>x<C>w<W>`` (both). Only reuse builds (a plain build takes
    its own chunk width: the reference); stale entries, other flow or engine sources, are
    left out."""
    from kaleido_hw.flow.engine_area import AREA_CONFIG
    width = AREA_CONFIG.sched_pattern_width if width is None else width
    entries, _ = _engine_entries(path)
    base = {k: v for k, v in AREA_CONFIG.to_dict().items() if k not in ALTERNATIVE_KEYS}
    out = {}
    for e in entries or []:
        cfg = (e.get("key") or {}).get("config")
        builds = e.get("builds")
        if not isinstance(cfg, dict) or not isinstance(builds, list) or _stale(e):
            continue
        r, c, w = cfg.get("rows"), cfg.get("cols"), cfg.get("sched_pattern_width")
        if ({k: v for k, v in cfg.items() if k not in ALTERNATIVE_KEYS} != base
                or (r, c, w) == (rows, cols, width)):
            continue
        tag = (f"{r}x{c}" if (r, c) != (rows, cols) else "") + (f"w{w}" if w != width else "")
        chunks = f", chunks of {w}" if w != width else ""
        for b in _parsed_builds(builds):
            if b["variant"] == "dense" or b["arrays"] * r * c != arrays * rows * cols:
                continue
            out[f"{b['variant']}-{tag}"] = {
                "area_um2": b["area_um2"], "period_ns": b["period_ns"],
                "arrays": b["arrays"], "rows": r, "cols": c, "width": w,
                "matcher_channels": cfg.get("matcher_channels"), "variant": b["variant"],
                "build": f"P={b['arrays']} of {r}x{c}{chunks} {b['build'].split(' ', 1)[1]}"}
    return out


def _engine_entries(path: Path):
    """``(entries, why)``: the engine builds' entries of the cache at ``path`` (one per base
    configuration; a file of the older single-entry format is one entry), or ``(None, why)``
    when there are none. An entry whose key names a ``top`` is another top's (the engine
    core's) and left out."""
    path = Path(path)
    if not path.exists():
        return None, f"no {path} ('make synth-engine' writes it)"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        return None, f"{path} is unreadable ({e})"
    entries = data.get("entries") if isinstance(data, dict) else None
    if not (isinstance(entries, list) and entries):
        return [data], ""
    entries = [e for e in entries if isinstance(e, dict) and "top" not in (e.get("key") or {})]
    return (entries, "") if entries else (None, f"{path} has no engine builds")


def _stale(entry) -> bool:
    """The entry's key names another flow version or other engine sources."""
    key = entry.get("key") if isinstance(entry, dict) else None
    if not isinstance(key, dict):
        return False
    from kaleido_hw.flow.engine_area import FLOW, source_hash
    return ("flow" in key and key["flow"] != FLOW) or ("sources" in key
                                                       and key["sources"] != source_hash())


def _parsed_builds(builds: list) -> list[dict]:
    """The builds of a cache entry with an area and a period, as ``{"variant", "arrays",
    "area_um2", "period_ns", "build"}`` (see :func:`read_engine_cache` for the fields read)."""
    out = []
    for b in builds:
        if not isinstance(b, dict):
            continue
        cfg = b.get("config") if isinstance(b.get("config"), dict) else {}
        sc = b.get("stdcell") if isinstance(b.get("stdcell"), dict) else {}
        p = _first(b, "arrays") or cfg.get("engine_arrays")
        disp = _first(b, "dispatcher") or cfg.get("engine_dispatcher")
        pe = _first(b, "engine_pe") or cfg.get("engine_pe") or "reuse"
        # engine_area.EngineArea writes the whole engine (logic + SRAM) as total_area_um2.
        area = _first(b, "area_um2", "total_area_um2") or sc.get("area_um2")
        period = _first(b, "path_ns") or sc.get("path_ns")
        fmax = _first(b, "fmax_mhz") or sc.get("fmax_mhz")
        if period is None and fmax:
            period = 1000.0 / fmax
        variant = "dense" if pe == "plain" else _DISPATCHER_VARIANT.get(disp)
        if area is None or period is None or variant is None:
            continue
        # A plain build's chunks are its own (plain_chunk_width): said in its name.
        width = cfg.get("sched_pattern_width") if pe == "plain" else None
        chunks = f", chunks of {width}" if width else ""
        out.append({"variant": variant, "arrays": p, "area_um2": float(area),
                    "period_ns": float(period), "build": f"P={p} {pe} {disp}{chunks}"})
    return out


# -- throughput ----------------------------------------------------------------------------------

def throughput_rows(kind: str, preset: str, elements: int, cycles: dict, areas: dict,
                    level: int) -> list[dict]:
    """One row per variant of ``cycles`` (``{variant: cycles}``, the reference first) with
    ``areas[variant]`` (``variant_area`` or a level-2 entry): elements per ns per mm2, and
    that relative to the reference, with the three factors (cycle speedup, area ratio,
    period ratio) whose combination it is."""
    ref = next(iter(cycles))
    rows = []
    for variant, cyc in cycles.items():
        if variant not in areas:
            continue
        a = areas[variant]
        per_ns = elements / (cyc * a["period_ns"])
        rows.append({"kind": kind, "preset": preset, "variant": variant, "level": level,
                     "elements": elements, "cycles": int(cyc), "period_ns": a["period_ns"],
                     "area_um2": a["area_um2"], "blocks": a.get("blocks", a.get("build")),
                     "critical_block": a.get("critical_block"),
                     "elements_per_ns": per_ns,
                     "elements_per_ns_mm2": per_ns / (a["area_um2"] * 1e-6)})
    base = next((r for r in rows if r["variant"] == ref), None)
    for r in rows:
        if base is None:
            r.update(relative=None, cycle_speedup=None, area_ratio=None, period_ratio=None)
            continue
        r["relative"] = r["elements_per_ns_mm2"] / base["elements_per_ns_mm2"]
        r["cycle_speedup"] = base["cycles"] / r["cycles"]
        r["area_ratio"] = r["area_um2"] / base["area_um2"]
        r["period_ratio"] = r["period_ns"] / base["period_ns"]
    return rows
