"""Energy of the engine variants (``kaleido-hw report --only energy``; ``docs/energy.md``).

Rows of :func:`golden.energy.model.head_energy` for

- ``paper``: the stored 720p hunyuanvideo head on 16,384 arrays of 4 x 4
  (``golden/energy/data/paper_counters.json``), every variant and dense on plain arrays;
- ``ablation``: a synthetic head per preset on :data:`ENERGY_GRID` and the configured arrays
  (counters computed here, seconds);
- ``linear``: one linear layer (the head's Q as activations, a random int8 weight) on plain
  and ReusePE arrays (:func:`golden.energy.model.linear_energy`).

The paper-scale rows come under every calibration of the PE energies
(``golden.energy.model.CALIBRATIONS``), the others under :data:`PRIMARY`. Every row is
flat (CSV-ready): the components in pJ, the PE classes in pJ, the energy
normalized to ``pe`` (Fig. 19's normalization) and the saving against dense on plain arrays.
"""

from __future__ import annotations

import json

import numpy as np

from golden.energy.head_counters import head_counters
from golden.energy.model import (CALIBRATIONS, COMPONENTS, DATA, VARIANTS, Energies, HeadShape,
                                 head_energy, linear_energy, load_energies)


__all__ = ["ENERGY_GRID", "PRESETS", "PAPER_FIG19_DISPATCHER_SAVING", "PAPER_OVERALL_SAVING",
           "head_rows", "paper_rows", "ablation_rows", "linear_rows", "table_rows",
           "NODE_NOTE", "default_energies", "all_paper_rows", "PRIMARY"]

#: The calibration of the per-preset and linear rows and of the figures' first panels
#: (``golden.energy.model.CALIBRATIONS``; the paper-scale rows come in all three).
PRIMARY = "array"
#: Grid of the per-preset rows (the engine ablation's).
ENERGY_GRID = "8x16x16"
PRESETS = ("hunyuanvideo", "wan2.1", "cogvideox-5b")
#: Paper, Sec. 7: the dispatcher (pe -> full) saves 9.0% energy (Fig. 19); Kaleido saves up
#: to 16.0x energy against the baselines (Fig. 18b, normalized to an A100 GPU).
PAPER_FIG19_DISPATCHER_SAVING = 0.090
PAPER_OVERALL_SAVING = 16.0
#: What the technology node changes (printed with the report).
NODE_NOTE = ("180 nm vs 16 nm: the PE events, dispatcher and SRAM all scale with C V^2, so "
             "ratios among them (variant vs variant, ReusePE vs BaselinePE) carry to 16 nm to "
             "first order; absolute pJ do not (a 16 nm FinFET at 0.8 V is one to two orders "
             "of magnitude lower), and DRAM, which does not scale with the logic node, "
             "weighs relatively more at 16 nm than here.")


def head_rows(counters: dict, e: Energies, scope: str, low: int = 0) -> list[dict]:
    """One row per model variant (``dense-plain`` priced on the dense run's counters);
    ``low``: the head's LOW busy PE-cycles (:func:`golden.energy.op_mix.busy_op_mix`)."""
    shape = HeadShape.from_counters(counters)
    runs = counters["variants"]
    # PE-cycles with two channels: what the matcher saved against the run without it.
    without = {"pe-m": "pe", "full": "pe-sh"}
    pairs = {v: runs[w]["busy_pe_cycles"] - runs[v]["busy_pe_cycles"]
             for v, w in without.items() if v in runs and w in runs}
    res = {v: head_energy(runs["dense" if v == "dense-plain" else v], shape, v, e, low,
                          pairs.get(v))
           for v in VARIANTS if (v == "dense-plain" and "dense" in runs) or v in runs}
    pe_total = res["pe"]["total"] if "pe" in res else None
    plain_total = res["dense-plain"]["total"] if "dense-plain" in res else None
    rows = []
    for v, r in res.items():
        row = {"scope": scope, "calibration": e.calibration, "preset": counters["preset"],
               "grid": counters["grid"], "arrays": counters["arrays"], "variant": v,
               "cycles": r["cycles"], "total_pj": r["total"]}
        row.update({f"{c}_pj": r[c] for c in COMPONENTS})
        row.update({f"pe_{k}_pj": x for k, x in r["pe_classes"].items()})
        row["sram_bytes"], row["dram_bytes"] = r["sram_bytes"], r["dram_bytes"]
        row["vs_pe"] = r["total"] / pe_total if pe_total else None
        row["pe_vs_pe"] = r["pe"] / res["pe"]["pe"] if pe_total else None
        row["saving_vs_dense_plain"] = plain_total / r["total"] if plain_total else None
        rows.append(row)
    return rows


def paper_rows(e: Energies) -> list[dict]:
    """Rows of the stored paper-scale counters."""
    mix = json.loads((DATA / "paper_op_mix.json").read_text())
    return head_rows(json.loads((DATA / "paper_counters.json").read_text()), e, "paper",
                     mix["low"])


def ablation_rows(e: Energies, arrays: int, grid: str = ENERGY_GRID, presets=PRESETS,
                  seed: int = 0) -> list[dict]:
    """Rows of one synthetic head per preset on ``grid`` and ``arrays`` arrays of 4 x 4."""
    from golden.energy.op_mix import busy_op_mix
    from golden.numerics import ChannelGroups
    from golden.workloads import grid_named, make_qkv

    rows = []
    for p in presets:
        q, k, _ = make_qkv(p, grid_named(grid), seed=seed)
        low = busy_op_mix(q, k, grid_named(grid), ChannelGroups.from_preset(p))["low"]
        rows += head_rows(head_counters(p, grid, arrays, seed=seed), e, "ablation", low)
    return rows


def linear_rows(e: Energies, arrays: int, preset: str = "hunyuanvideo", grid: str = "4x16x16",
                c_out: int = 128, window: int = 2, seed: int = 0) -> list[dict]:
    """One linear layer on the engine core, dense on a plain build and reuse (variant pe)
    on ReusePE arrays: X = the head's Q (N x d), W a random int8 (d x ``c_out``); counters
    from ``kaleido_hw.engine.host.linear_counters`` (the core's program, exact)."""
    from golden.workloads import grid_named, make_qkv
    from kaleido_hw.engine.host import linear_counters
    from kaleido_hw.reports.linear_report import report_cores

    g = grid_named(grid)
    x, _, _ = make_qkv(preset, g, seed=seed)
    reuse_core, _ = report_cores(4, 4, arrays)
    # the plain build at its best for energy: the reuse build's 16-channel chunks (its own
    # 4-channel chunks, best for area and time, drain four times the tiles; docs/energy.md)
    plain = reuse_core.replace(engine_pe="plain", engine_dispatcher="none",
                               engine_window3=False)
    rows, plain_total = [], None
    for reuse in (False, True):
        c = linear_counters(reuse_core if reuse else plain, x, c_out, g,
                            variant="pe" if reuse else "dense",
                            window=window if reuse else 2)
        r = linear_energy(c, 4, 4, arrays, x.shape[0], x.shape[1], c_out, window, reuse, e)
        if not reuse:
            plain_total = r["total"]
        row = {"scope": "linear", "calibration": e.calibration, "preset": preset,
               "grid": grid, "arrays": arrays, "variant": r["variant"], "cycles": r["cycles"],
               "total_pj": r["total"]}
        row.update({f"{k}_pj": r[k] for k in COMPONENTS})
        row.update({f"pe_{k}_pj": v for k, v in r["pe_classes"].items()})
        row["sram_bytes"], row["dram_bytes"] = r["sram_bytes"], r["dram_bytes"]
        row["saving_vs_dense_plain"] = plain_total / r["total"]
        rows.append(row)
    return rows


def _f(x, spec):
    return "-" if x is None else format(x, spec)


def table_rows(rows: list[dict]) -> list[list[str]]:
    """Markdown rows: scope, calibration, preset, variant, cycles, total uJ, PE / dispatcher /
    SRAM / DRAM shares, energy / pe, saving vs dense on plain arrays."""
    out = []
    for r in rows:
        t = r["total_pj"]
        out.append([r["scope"], r["calibration"], r["preset"], r["variant"], str(r["cycles"]),
                    f"{t * 1e-6:.4g}"] + [f"{100 * r[f'{c}_pj'] / t:.1f}%" for c in COMPONENTS]
                   + [_f(r.get("vs_pe"), ".3f"), _f(r.get("saving_vs_dense_plain"), ".3f")])
    return out


def default_energies(calibration: str = PRIMARY) -> Energies:
    """The stored measurements (:func:`golden.energy.model.load_energies`)."""
    return load_energies(calibration=calibration)


def all_paper_rows() -> list[dict]:
    """:func:`paper_rows` under every calibration."""
    return [row for cal in CALIBRATIONS for row in paper_rows(load_energies(calibration=cal))]
