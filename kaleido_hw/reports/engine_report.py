"""``kaleido-hw engine-report``: what the dispatcher and the arrays buy (``docs/engine.md``).

From the engine's exact cycle model (``golden.engine.model.engine_counters``) on synthetic heads
(``golden.workloads.make_qkv``):

- ``ablation`` (paper Fig. 19): per preset, every variant (dense, pe, pe-sh, pe-m, full) on
  P arrays: speedup over dense on the same hardware, PE utilization
  (busy / (P * R * C * cycles)), hardware op reduction (``1 - busy / busy(dense)``) and its
  ratio to the oracle reduction (``golden.oracle_ops``);
- ``scaling`` (paper Fig. 21/22): arrays 1, 2, 4, ..., 64 of 4 x 4, and the per-array size
  2 x 2 / 4 x 4 / 8 x 8 at a constant total of PEs, variants pe and full (and dense, the
  reference of every speedup);
- ``paper`` (``--paper``): one 720p hunyuanvideo head (33x45x80, d = 128) on the paper's
  128 x 128 arrays (P = 16,384 arrays of 4 x 4); minutes per variant. Beside the compute
  cycles, the DRAM cycles of the head at the paper's 819.2 GB/s and 1 GHz
  (``golden.engine.core_model.head_traffic``): with S stored in full as this core's programs
  do, and with S kept on chip (a fused head: Q, K, V in, O out).
- ``grids`` (``--only grids``): every preset on every grid of :data:`GRID_SWEEP`, dense, pe,
  pe-m and full on P arrays: no reuse variant may take more cycles than dense (the command
  exits 1 if one does); a few seconds.

Tables on stdout; ``--json`` / ``--csv`` write the rows.
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

from golden.engine.core_model import PAPER_CLOCK_GHZ, PAPER_DRAM_GBPS, dram_cycles, head_traffic
from golden.engine.model import VARIANTS, EngineParams, engine_counters
from golden.numerics import PRESETS, ChannelGroups, oracle_ops, reuse_masks
from golden.workloads import grid_named, make_qkv
from kaleido_hw.config import KaleidoConfig


SECTIONS = ("ablation", "scaling", "paper", "grids")
#: Grids of the ``grids`` section, from tiny heads (whose chunks are shorter than a
#: scheduler pre-pass: every chunk after the first falls back to natural order) to the
#: ablation's.
GRID_SWEEP = ("1x2x2", "2x3x2", "2x4x4", "2x4x8", "2x8x8", "4x8x8", "4x8x16", "4x16x16",
              "8x16x16")
GRID_VARIANTS = ("dense", "pe", "pe-m", "full")
ABLATION_PRESETS = ("hunyuanvideo", "wan2.1", "cogvideox-5b")
#: Array counts of the scaling sweep (4 x 4 arrays).
SCALING_ARRAYS = (1, 2, 4, 8, 16, 32, 64)
#: Constant-PE sweep: (rows = cols, arrays) with rows * cols * arrays = 256.
SCALING_SIZES = ((2, 64), (4, 16), (8, 4))
SCALING_VARIANTS = ("dense", "pe", "full")
#: The paper's hardware: 128 x 128 arrays of 4 x 4 PEs, and its 720p HunyuanVideo head.
PAPER_ARRAYS = 16384
PAPER_GRID = "hunyuanvideo-720p"
#: The issue's targets.
TARGETS = {"util_full": 0.85, "dispatcher_speedup": 1.2, "hw_of_oracle": 0.70}


def add_arguments(parser):
    """Options of ``kaleido-hw engine-report``."""
    parser.add_argument("--only", metavar="NAME[,NAME]",
                        help="sections: ablation, scaling (default both); 'paper' also runs "
                             "the 720p head (same as --paper); 'grids': every preset on grids "
                             "2x4x4 .. 8x16x16, exit 1 if full is slower than dense")
    parser.add_argument("--grid", default="8x16x16",
                        help="token grid of ablation and scaling (TxHxW or a golden GRIDS "
                             "name); default 8x16x16")
    parser.add_argument("--arrays", type=int, default=4,
                        help="arrays P of the ablation; default 4")
    parser.add_argument("--presets", default=",".join(ABLATION_PRESETS),
                        help=f"ablation presets; default {','.join(ABLATION_PRESETS)}")
    parser.add_argument("--scaling-preset", default="hunyuanvideo",
                        help="preset of the scaling sweep; default hunyuanvideo")
    parser.add_argument("--paper", action="store_true",
                        help="also the 720p hunyuanvideo head on 16,384 4x4 arrays (minutes "
                             "per variant)")
    parser.add_argument("--paper-variants", default=",".join(VARIANTS),
                        help=f"variants of --paper; default {','.join(VARIANTS)}")
    parser.add_argument("--seed", type=int, default=0, help="workload seed; default 0")
    parser.add_argument("--json", metavar="FILE", help="also write every row as JSON")
    parser.add_argument("--csv", metavar="FILE", help="also write every row as CSV")


def base_params(config: KaleidoConfig | None = None, **changes) -> EngineParams:
    """Engine parameters of the default configuration with ``changes``."""
    return EngineParams.from_config(config or KaleidoConfig(), **changes)


def _progress(label: str, total: int):
    from kaleido_hw.reports.report import Progress
    return Progress(label, total)


class Head:
    """One attention head (int8 ``q``, ``k`` on ``grid`` with ``preset``'s channel groups)
    and its oracle reduction."""

    def __init__(self, preset: str, grid, q, k):
        self.preset, self.grid = preset, grid_named(grid)
        self.groups = ChannelGroups.from_preset(preset)
        self.q, self.k = q, k
        self.oracle = oracle_ops(reuse_masks(self.q, self.grid, self.groups),
                                 reuse_masks(self.k, self.grid, self.groups))["reduction"]

    @classmethod
    def synthetic(cls, preset: str, grid, seed: int = 0) -> "Head":
        """The ``golden.workloads.make_qkv`` head of ``preset`` on ``grid``."""
        q, k, _ = make_qkv(preset, grid_named(grid), seed=seed)
        return cls(preset, grid, q, k)

    def run(self, params: EngineParams, variant: str, progress=None):
        """``(EngineCounters, seconds)`` of one variant on ``params``."""
        t0 = time.monotonic()
        c = engine_counters(self.q, self.k, self.grid, self.groups, params, variant,
                            progress=progress)
        return c, time.monotonic() - t0


def _row(section, head, params, variant, c, dense, seconds, **extra):
    pes = params.arrays * params.rows * params.cols
    busy = int(c.busy_pe_cycles.sum())
    dense_busy = int(dense.busy_pe_cycles.sum())
    hw = 1.0 - busy / dense_busy
    row = {"section": section, "preset": head.preset, "grid": str(head.grid),
           "arrays": params.arrays, "array": f"{params.rows}x{params.cols}", "pes": pes,
           "variant": variant, "cycles": int(c.cycles), "dense_cycles": int(dense.cycles),
           "speedup": dense.cycles / c.cycles, "utilization": busy / (pes * c.cycles),
           "hw_op_reduction": hw, "oracle_reduction": head.oracle,
           "hw_of_oracle": hw / head.oracle if head.oracle else float("nan"),
           "merged": int(c.merged.sum()), "busy_pe_cycles": busy,
           "idle_share": float(c.idle.sum()) / (params.arrays * c.cycles),
           "seconds": seconds}
    row.update(extra)
    return row


def ablation(heads, arrays: int, config=None) -> list[dict]:
    """Every variant on every head, on ``arrays`` arrays of the configured size."""
    params = base_params(config, arrays=arrays)
    bar = _progress("ablation", len(heads) * len(VARIANTS))
    rows = [r for head in heads for r in _variant_rows("ablation", head, params, VARIANTS, bar)]
    bar.close()
    return rows


def _variant_rows(section, head, params, variants, bar) -> list[dict]:
    """Rows of ``variants`` (dense and pe among them) on one head, with the speedup over pe."""
    runs = {}
    for variant in variants:
        runs[variant] = head.run(params, variant)
        bar.advance()
    pe_cycles = runs["pe"][0].cycles
    return [_row(section, head, params, variant, c, runs["dense"][0], sec,
                 speedup_over_pe=pe_cycles / c.cycles) for variant, (c, sec) in runs.items()]


def scaling(head, config=None) -> list[dict]:
    """Arrays 1..64 of 4 x 4, and 2x2 / 4x4 / 8x8 arrays at 256 PEs in all, on ``head``."""
    points = [("arrays", base_params(config, rows=4, cols=4, arrays=p)) for p in SCALING_ARRAYS]
    points += [("size", base_params(config, rows=r, cols=r, arrays=p)) for r, p in SCALING_SIZES]
    bar = _progress("scaling", len(points) * len(SCALING_VARIANTS))
    rows = []
    one = {}
    for sweep, params in points:
        runs = {}
        for variant in SCALING_VARIANTS:
            runs[variant] = head.run(params, variant)
            bar.advance()
        for variant, (c, sec) in runs.items():
            if sweep == "arrays" and params.arrays == 1:
                one[variant] = c.cycles
            extra = {"sweep": sweep}
            if sweep == "arrays":
                extra["speedup_over_1_array"] = one[variant] / c.cycles
                extra["scaling_efficiency"] = one[variant] / c.cycles / params.arrays
            rows.append(_row("scaling", head, params, variant, c, runs["dense"][0], sec,
                             **extra))
    bar.close()
    return rows


def paper(variants, seed: int = 0, config=None) -> list[dict]:
    """The 720p hunyuanvideo head on 16,384 arrays of 4 x 4 (dense always runs)."""
    head = Head.synthetic("hunyuanvideo", PAPER_GRID, seed)
    params = base_params(config, rows=4, cols=4, arrays=PAPER_ARRAYS)
    order = ["dense"] + [v for v in variants if v != "dense"]
    runs = {}
    for variant in order:
        bar = _progress(f"paper {variant}", 1)
        done = {"n": 0}

        def tick(i, total, bar=bar, done=done):
            bar.total = total
            while done["n"] < i:
                done["n"] += 1
                if done["n"] < total:
                    bar.advance()
        runs[variant] = head.run(params, variant, progress=tick)
        bar.done = bar.total
        bar.close()
    pe_cycles = runs["pe"][0].cycles if "pe" in runs else None
    memory = paper_memory(head.grid.n, head.groups.head_dim)
    rows = []
    for variant in order:
        c, sec = runs[variant]
        rows.append(_row("paper", head, params, variant, c, runs["dense"][0], sec,
                         speedup_over_pe=pe_cycles / c.cycles if pe_cycles else None,
                         **memory))
    return rows


def paper_memory(n_tokens: int, head_dim: int) -> dict:
    """DRAM cycles of one head at the paper's bandwidth and clock: ``dram_cycles_s_out``
    (Q and K in, S out as int32: this core's programs) and ``dram_cycles_fused`` (S kept on
    chip: Q, K, V in, O out)."""
    return {f"dram_cycles_{name}": dram_cycles(head_traffic(n_tokens, head_dim,
                                                            fused=fused)["total"])
            for name, fused in (("s_out", False), ("fused", True))}


def format_memory(rows: list[dict]) -> str:
    """The paper section's compute against DRAM time, one line per variant."""
    lines = [f"DRAM at {PAPER_DRAM_GBPS:.1f} GB/s (16 x DDR5-6400), {PAPER_CLOCK_GHZ:g} GHz: "
             f"cycles of the head's transfers against its compute (S out: Q, K in and S out "
             f"as int32; fused: S on chip, Q, K, V in and O out as int32)",
             "| variant | compute cycles | DRAM, S out | DRAM / compute | DRAM, fused | "
             "DRAM / compute |", "|---|---|---|---|---|---|"]
    for r in rows:
        if "dram_cycles_s_out" not in r:
            continue
        lines.append(f"| {r['variant']} | {r['cycles']:,} | {r['dram_cycles_s_out']:,} | "
                     f"{r['dram_cycles_s_out'] / r['cycles']:.2f}x | "
                     f"{r['dram_cycles_fused']:,} | {r['dram_cycles_fused'] / r['cycles']:.4f}x |")
    return "\n".join(lines)


def grids(presets, arrays: int, seed: int = 0, config=None) -> list[dict]:
    """Dense, pe and full on every grid of :data:`GRID_SWEEP` for every preset."""
    params = base_params(config, arrays=arrays)
    bar = _progress("grids", len(presets) * len(GRID_SWEEP) * len(GRID_VARIANTS))
    rows = [r for preset in presets for grid in GRID_SWEEP
            for r in _variant_rows("grids", Head.synthetic(preset, grid, seed), params,
                                   GRID_VARIANTS, bar)]
    bar.close()
    return rows


def slower_than_dense(rows: list[dict]) -> list[dict]:
    """The rows of a reuse variant that take more cycles than dense on the same head."""
    return [r for r in rows if r["variant"] != "dense" and r["cycles"] > r["dense_cycles"]]


def _pct(x):
    return "-" if x is None else f"{100 * x:.1f}%"


def _x(x):
    return "-" if x is None else f"{x:.3f}x"


def format_table(rows: list[dict]) -> str:
    """A markdown table of rows of one section."""
    head = ["preset", "grid", "P", "array", "variant", "cycles", "speedup", "over pe",
            "PE util.", "hw op red.", "oracle", "hw / oracle", "idle", "time"]
    sweep = any("sweep" in r for r in rows)
    if sweep:
        head[7] = "over 1 array"
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        other = r.get("speedup_over_1_array") if sweep else r.get("speedup_over_pe")
        if sweep and r.get("sweep") == "size":
            other = None
        lines.append("| " + " | ".join(str(x) for x in (
            r["preset"], r["grid"], r["arrays"], r["array"], r["variant"], f"{r['cycles']:,}",
            _x(r["speedup"]), _x(other), _pct(r["utilization"]),
            _pct(r["hw_op_reduction"]), _pct(r["oracle_reduction"]), _pct(r["hw_of_oracle"]),
            _pct(r["idle_share"]), f"{r['seconds']:.1f}s")) + " |")
    return "\n".join(lines)


def targets(rows: list[dict]) -> list[str]:
    """How the full variant compares with the issue's targets, per preset/section."""
    out = []
    for r in rows:
        if r["variant"] != "full" or r["section"] in ("scaling", "grids"):
            continue
        over_pe = r.get("speedup_over_pe")
        out.append(
            f"{r['section']} {r['preset']} {r['grid']} P={r['arrays']}: PE util. "
            f"{_pct(r['utilization'])} (target >= 85%), full over pe {_x(over_pe)} "
            f"(target >= 1.2x), hw op reduction {_pct(r['hw_of_oracle'])} of the oracle "
            f"(target >= 70%)")
    return out


def _sections(args) -> list[str]:
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        bad = [n for n in names if n not in SECTIONS]
        if bad or not names:
            raise ValueError(f"--only must name sections from {', '.join(SECTIONS)}, "
                             f"got {args.only!r}")
    else:
        names = ["ablation", "scaling"]
    if args.paper and "paper" not in names:
        names.append("paper")
    return names


def run(args) -> int:
    """Run the selected sections, print the tables, write --json / --csv."""
    names = _sections(args)
    grid = grid_named(args.grid)
    presets = [p.strip() for p in args.presets.split(",") if p.strip()]
    for p in presets + [args.scaling_preset]:
        if p not in PRESETS:
            raise ValueError(f"--presets / --scaling-preset must be presets among "
                             f"{', '.join(sorted(PRESETS))}, got {p!r}")
    if not 1 <= args.arrays <= 1 << 20:
        raise ValueError(f"--arrays must be an integer in [1, 1048576], got {args.arrays}")
    paper_variants = [v.strip() for v in args.paper_variants.split(",") if v.strip()]
    bad = [v for v in paper_variants if v not in VARIANTS]
    if bad or not paper_variants:
        raise ValueError(f"--paper-variants must name variants from {', '.join(VARIANTS)}, "
                         f"got {args.paper_variants!r}")
    cfg = KaleidoConfig()
    print(f"KaleidoEngine cycle model (golden.engine.model), {cfg.rows}x{cfg.cols} arrays unless "
          f"said, W={cfg.sched_pattern_width}, E={cfg.sched_entries}, K={cfg.sched_clusters}, "
          f"L={cfg.matcher_lookahead}, full/half bits {cfg.full_bits}/{cfg.half_bits}; speedup "
          f"= dense cycles / cycles on the same hardware")
    rows = []
    for name in names:
        if name == "ablation":
            part = ablation([Head.synthetic(p, grid, args.seed) for p in presets],
                            args.arrays, cfg)
        elif name == "scaling":
            part = scaling(Head.synthetic(args.scaling_preset, grid, args.seed), cfg)
        elif name == "grids":
            part = grids(sorted(PRESETS), args.arrays, args.seed, cfg)
        else:
            part = paper(paper_variants, args.seed, cfg)
        print(f"\n## {name}\n")
        print(format_table(part))
        if name == "paper":
            print("\n" + format_memory(part))
        rows += part
    lines = targets(rows)
    if lines:
        print("\nTargets (issue 6):")
        for line in lines:
            print(f"  {line}")
    status = 0
    if "grids" in names:
        grid_rows = [r for r in rows if r["section"] == "grids"]
        slow = slower_than_dense(grid_rows)
        full = [r for r in grid_rows if r["variant"] == "full"]
        worst = min(full, key=lambda r: r["speedup"])
        print(f"\ngrids: full over dense {min(r['speedup'] for r in full):.3f}x .. "
              f"{max(r['speedup'] for r in full):.3f}x over {len(full)} heads (slowest: "
              f"{worst['preset']} {worst['grid']}); "
              + ("no reuse variant is slower than dense" if not slow else
                 "SLOWER than dense: " + ", ".join(f"{r['variant']} {r['preset']} {r['grid']}"
                                                   for r in slow)))
        status = 1 if slow else 0
    write_rows(rows, args.json, args.csv)
    return status


def write_rows(rows: list[dict], json_path=None, csv_path=None) -> None:
    """Write report rows as JSON and/or CSV (columns: every key, in order of first use;
    a missing or None value is an empty cell)."""
    if json_path:
        Path(json_path).write_text(json.dumps(rows, indent=1) + "\n")
    if csv_path:
        columns = list(dict.fromkeys(k for r in rows for k in r))
        with open(csv_path, "w", newline="") as f:
            w = csv.DictWriter(f, columns)
            w.writeheader()
            for r in rows:
                w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in columns})
