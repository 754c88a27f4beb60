"""``kaleido-hw tile-report``: what reuse buys on one PE array (``docs/array.md``).

For synthetic hunyuanvideo and wan2.1 heads (``golden.workloads.make_qkv``) it reports, per
token grid, the dense and reuse cycles of the same TileEngine hardware (speedup = dense /
reuse), PE utilization (busy PE-cycles / (R*C*cycles)), and the hardware op reduction
(``1 - busy(reuse) / busy(dense)``) against the oracle reduction of ``golden.oracle_ops``.

Two sources: the RTL (``--rtl``: the tile_engine generated with the default configuration, simulated with
cocotb, S checked bit-exact, the counters read back; the grid must fit
``engine_max_tokens``) and the cycle model (``golden.array.schedule.tile_counters``, which the
benches prove equal to the RTL's counters) on larger grids up to the real sizes.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from golden.array.schedule import tile_counters
from golden.numerics import ChannelGroups, oracle_ops, reuse_masks
from golden.workloads import grid_named, make_qkv
from kaleido_hw.config import KaleidoConfig


REPO = Path(__file__).resolve().parents[1]

#: The real (full-size) latent grid of each preset's model.
FULL_GRIDS = {"hunyuanvideo": "hunyuanvideo-720p", "wan2.1": "wan-480p",
              "cogvideox-5b": "cogvideox", "longcat": "wan-480p",
              "opensora-plan-1.3": "hunyuanvideo-480p"}

COLUMNS = ("preset", "grid", "source", "dense_cycles", "reuse_cycles", "speedup",
           "util_reuse", "util_dense", "hw_reduction", "oracle_reduction", "hw_of_oracle")


def add_arguments(parser):
    """Options of ``kaleido-hw tile-report``."""
    parser.add_argument("--presets", default="hunyuanvideo,wan2.1",
                        help="comma-separated presets; default hunyuanvideo,wan2.1")
    parser.add_argument("--grids", default="2x4x8,small,medium,full",
                        help="cycle-model grids, TxHxW or names (small, medium, ...; 'full' = "
                             "the preset's real size); default 2x4x8,small,medium,full")
    parser.add_argument("--rtl", action="store_true",
                        help="also simulate the generated tile_engine (rtl_out/) on --rtl-grid")
    parser.add_argument("--rtl-grid", default="2x4x8",
                        help="grid of the RTL runs (T*H*W <= engine_max_tokens); default 2x4x8")
    parser.add_argument("--sim", default="verilator", choices=("verilator", "icarus"),
                        help="simulator of the RTL runs; default verilator")
    parser.add_argument("--seed", type=int, default=0, help="workload seed; default 0")
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON")


def _row(preset, grid, source, dense, reuse, oracle, rows, cols):
    pes = rows * cols
    return {
        "preset": preset, "grid": str(grid), "source": source,
        "dense_cycles": dense["cycles"], "reuse_cycles": reuse["cycles"],
        "speedup": dense["cycles"] / reuse["cycles"],
        "util_reuse": reuse["busy_pe_cycles"] / (pes * reuse["cycles"]),
        "util_dense": dense["busy_pe_cycles"] / (pes * dense["cycles"]),
        "hw_reduction": 1 - reuse["busy_pe_cycles"] / dense["busy_pe_cycles"],
        "oracle_reduction": oracle,
        "hw_of_oracle": (1 - reuse["busy_pe_cycles"] / dense["busy_pe_cycles"]) / oracle
        if oracle else float("nan"),
    }


def _oracle(q, k, grid, groups):
    return oracle_ops(reuse_masks(q, grid, groups), reuse_masks(k, grid, groups))["reduction"]


def model_row(preset, grid, config, seed):
    """One report row from the cycle model: dense and reuse counters of a synthetic head."""
    groups = ChannelGroups.from_preset(preset)
    q, k, _ = make_qkv(preset, grid, seed=seed)
    t0 = time.time()
    counters = {}
    for mode, reuse in (("dense", False), ("reuse", True)):
        c = tile_counters(q, k, grid, groups, config.rows, config.cols, config.full_bits,
                          config.half_bits, reuse=reuse)
        counters[mode] = {"cycles": c.cycles, "busy_pe_cycles": c.busy_pe_cycles}
    row = _row(preset, grid, "model", counters["dense"], counters["reuse"],
               _oracle(q, k, grid, groups), config.rows, config.cols)
    row["seconds"] = time.time() - t0
    row["counters"] = counters
    return row


def rtl_rows(presets, grid, config, seed, sim):
    """Simulate the generated tile_engine on ``grid`` for every preset (dense and reuse)."""
    sys.path.insert(0, str(REPO / "sim"))
    from runner import run_bench

    from kaleido_hw.engine.tile_engine import check_run

    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="tile-report-") as tmp:
        tmp = Path(tmp)
        runs, data = [], {}
        for preset in presets:
            groups = ChannelGroups.from_preset(preset)
            check_run(config, grid, groups, config.full_bits, config.half_bits)
            q, k, _ = make_qkv(preset, grid, seed=seed)
            data[preset] = (q, k, groups)
            np.savez(tmp / f"{preset}.npz", q=q, k=k)
            for mode, reuse in (("dense", False), ("reuse", True)):
                bound = tile_counters(q, k, grid, groups, config.rows, config.cols,
                                      reuse=reuse).cycles
                runs.append({"name": f"{preset}/{mode}", "npz": str(tmp / f"{preset}.npz"),
                             "grid": list(grid.shape), "preset": preset, "reuse": reuse,
                             "max_cycles": bound + 1000})
        jobs = tmp / "jobs.json"
        out = tmp / "results.json"
        jobs.write_text(json.dumps({"runs": runs, "out": str(out)}))
        run_bench("engine", "tile_engine", sim, test_module="measure_engine",
                  extra_env={"KALEIDO_TILE_JOBS": str(jobs)})
        results = {r["name"]: r["counters"] for r in json.loads(out.read_text())}
    rows = []
    for preset, (q, k, groups) in data.items():
        dense, reuse = results[f"{preset}/dense"], results[f"{preset}/reuse"]
        row = _row(preset, grid, f"rtl ({sim})", dense, reuse, _oracle(q, k, grid, groups),
                   config.rows, config.cols)
        model = model_row(preset, grid, config, seed)["counters"]
        row["model_agrees"] = all(
            model[mode][key] == got[key] for mode, got in (("dense", dense), ("reuse", reuse))
            for key in ("cycles", "busy_pe_cycles"))
        row["seconds"] = (time.time() - t0) / len(data)
        rows.append(row)
    return rows


def _config() -> KaleidoConfig:
    manifest = REPO / "rtl_out" / "manifest.json"
    if manifest.exists():
        return KaleidoConfig.from_dict(json.loads(manifest.read_text())["config"])
    return KaleidoConfig()


def _print(rows, config):
    print(f"TileEngine, one {config.rows}x{config.cols} array, full_bits {config.full_bits}, "
          f"half_bits {config.half_bits}; speedup = dense cycles / reuse cycles on the same "
          f"hardware; hw reduction = 1 - busy PE-cycles (reuse / dense)")
    head = (f"{'preset':<13} {'grid':<10} {'source':<15} {'dense cycles':>16} {'reuse cycles':>16} "
            f"{'speedup':>8} {'util':>6} {'util dense':>10} {'hw red':>7} {'oracle':>7} "
            f"{'hw/oracle':>9} {'time':>7}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['preset']:<13} {r['grid']:<10} {r['source']:<15} {r['dense_cycles']:>16,} "
              f"{r['reuse_cycles']:>16,} {r['speedup']:>7.3f}x {r['util_reuse']:>6.1%} "
              f"{r['util_dense']:>10.1%} {r['hw_reduction']:>7.1%} {r['oracle_reduction']:>7.1%} "
              f"{r['hw_of_oracle']:>9.1%} {r['seconds']:>6.1f}s"
              + ("" if "model_agrees" not in r else
                 ("  (= cycle model)" if r["model_agrees"] else "  (DIFFERS from the model)")))


def run(args) -> int:
    """``kaleido-hw tile-report``: print the table of RTL and cycle-model rows."""
    config = _config()
    presets = [p.strip() for p in args.presets.split(",") if p.strip()]
    for p in presets:
        if p not in FULL_GRIDS:
            raise ValueError(f"--presets must name presets among {', '.join(FULL_GRIDS)}, "
                             f"got {p!r}")
    rows = []
    if args.rtl:
        grid = grid_named(args.rtl_grid)
        if grid.n > config.engine_max_tokens:
            raise ValueError(f"--rtl-grid {grid} has {grid.n} tokens; the generated TileEngine "
                             f"holds engine_max_tokens = {config.engine_max_tokens}")
        print(f"simulating tile_engine (default configuration) on {grid} ({args.sim}) ...", file=sys.stderr)
        rows += rtl_rows(presets, grid, config, args.seed, args.sim)
    for preset in presets:
        for name in (g.strip() for g in args.grids.split(",") if g.strip()):
            grid = grid_named(FULL_GRIDS[preset] if name == "full" else name)
            print(f"cycle model: {preset} on {grid} ...", file=sys.stderr, flush=True)
            rows.append(model_row(preset, grid, config, args.seed))
    _print(rows, config)
    for r in rows:
        r.pop("counters", None)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    bad = [r for r in rows if r.get("model_agrees") is False]
    return 1 if bad else 0
