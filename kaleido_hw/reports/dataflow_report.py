"""``kaleido-hw dataflow``: the dataflow study of issue 15 (``docs/dataflow.md``).

Every candidate of ``golden.engine.dataflow.CANDIDATES`` (today's variants first) and the
ceilings, on synthetic heads (``golden.workloads.make_qkv``; regimes default, smooth: noise
0.02 and smooth 5, fast: motion 3) or on a user head (``--workload FILE.npz``: int8 ``q``,
``k`` of shape (N, d), optional ``grid`` (3 ints) and ``preset`` (string) arrays; ``--grid``
and ``--model`` give or override them). Per row: cycles, speedup over dense and over pe on
the same PEs, PE utilization, hardware op reduction and its ratio to the oracle, and the
share of the gap between today's full variant and the ceiling that the candidate closes.

The default (hunyuanvideo, three regimes, 8x16x16, the default candidates) takes about a
minute; ``--presets all --candidates all`` is the full sweep of the doc (about 15 minutes).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from golden.engine.dataflow import (CANDIDATES, DEFAULT_CANDIDATES, REGIMES, load_npz_head,
                                    regime_head, study)
from golden.numerics import PRESETS
from golden.workloads import grid_named
from kaleido_hw.reports.engine_report import write_rows


#: The issue's targets for the design it picks (item 3).
TARGETS = {"utilization": 0.90, "over_pe": 1.25, "hw_of_oracle": 0.80}
#: Rows shown in the plot besides the candidates.
BOUNDS = ("ceiling-1op", "ceiling-passes", "ceiling", "ceiling-nat", "ceiling-free")


def add_arguments(parser):
    """Options of ``kaleido-hw dataflow``."""
    parser.add_argument("--presets", default="hunyuanvideo",
                        help=f"synthetic heads' presets, comma-separated, or 'all' "
                             f"({', '.join(PRESETS)}); default hunyuanvideo")
    parser.add_argument("--regimes", default=",".join(REGIMES),
                        help=f"workload regimes among {', '.join(REGIMES)}; default all")
    parser.add_argument("--grid", default=None,
                        help="token grid TxHxW (or a golden GRIDS name) of the synthetic heads "
                             "(default 8x16x16) or of --workload (default: the file's 'grid')")
    parser.add_argument("--candidates", default=",".join(DEFAULT_CANDIDATES),
                        help=f"candidates, comma-separated, or 'all' ({', '.join(CANDIDATES)}); "
                             f"default {','.join(DEFAULT_CANDIDATES)}")
    parser.add_argument("--workload", metavar="FILE.npz",
                        help="a user head instead of the synthetic ones: int8 q, k (N, d), "
                             "optional arrays grid (T, H, W) and preset")
    parser.add_argument("--model", default=None,
                        help="preset of --workload (default: the file's 'preset')")
    parser.add_argument("--seed", type=int, default=0, help="workload seed; default 0")
    parser.add_argument("--json", metavar="FILE", help="also write every row as JSON")
    parser.add_argument("--csv", metavar="FILE", help="also write every row as CSV")
    parser.add_argument("--plot", metavar="FILE.png", help="also draw the plot (matplotlib)")
    parser.add_argument("--from-json", metavar="FILE[,FILE]",
                        help="print (and plot) the rows of earlier --json runs instead of "
                             "running the study (a (head, candidate) row of a later file "
                             "replaces an earlier one)")
    parser.add_argument("--pivot", metavar="NAME[,NAME]",
                        help="print one table per metric (heads x candidates) instead of the "
                             "long table; metrics: " + ", ".join(PIVOT_METRICS) + ", or 'all'")
    parser.add_argument("--show", metavar="NAME[,NAME]",
                        help="candidates (and bounds) shown by --pivot and --plot; default all "
                             "of the run")
    parser.add_argument("--heads", metavar="LABEL[,LABEL]",
                        help="with --from-json: keep only these heads (labels such as "
                             "'hunyuanvideo default')")


#: Metrics of ``--pivot``: row key and format.
PIVOT_METRICS = {"utilization": "pct", "speedup": "x", "over_pe": "x", "hw_of_oracle": "pct",
                 "gap_closed": "pct"}


def pivot_table(rows: list[dict], metric: str, show=None) -> str:
    """Markdown table of one metric: a line per head, a column per candidate or bound."""
    labels = list(dict.fromkeys(r["label"] for r in rows))
    names = list(show or dict.fromkeys(r["candidate"] for r in rows))
    fmt = (lambda v: _pct(v)) if PIVOT_METRICS[metric] == "pct" else (lambda v: f"{v:.3f}x")
    by = {(r["label"], r["candidate"]): r for r in rows}
    lines = ["| head | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for label in labels:
        cells = [fmt(by[label, n][metric]) if (label, n) in by else "-" for n in names]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _names(text: str, allowed, what: str) -> list[str]:
    if text.strip() == "all":
        return list(allowed)
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in allowed]
    if bad or not names:
        raise ValueError(f"--{what} must name entries of {', '.join(allowed)} (or 'all'), "
                         f"got {text!r}")
    return names


def candidate_names(text: str) -> list[str]:
    """Candidates of ``--candidates``; dense, pe and full always run (the references)."""
    names = _names(text, CANDIDATES, "candidates")
    return list(dict.fromkeys(["dense", "pe", "full"] + names))


def heads_of(args):
    """The heads of the command line."""
    if args.workload:
        return [load_npz_head(args.workload, grid_named(args.grid) if args.grid else None,
                              args.model)]
    grid = grid_named(args.grid or "8x16x16")
    presets = _names(args.presets, PRESETS, "presets")
    regimes = _names(args.regimes, REGIMES, "regimes")
    return [regime_head(p, grid, r, args.seed) for p in presets for r in regimes]


def _pct(x):
    return f"{100 * x:.1f}%"


def format_table(rows: list[dict]) -> str:
    """Markdown table: one line per (head, candidate or bound)."""
    head = ["head", "candidate", "cycles", "speedup", "over pe", "PE util.", "hw op red.",
            "hw / oracle", "gap closed"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        lines.append("| " + " | ".join((
            r["label"], r["candidate"] + ("" if r["exact"] else " (estimate)"),
            f"{r['cycles']:,}", f"{r['speedup']:.3f}x", f"{r['over_pe']:.3f}x",
            _pct(r["utilization"]), _pct(r["hw_op_reduction"]), _pct(r["hw_of_oracle"]),
            _pct(r["gap_closed"]))) + " |")
    return "\n".join(lines)


def targets(rows: list[dict], name: str) -> list[str]:
    """How candidate ``name`` and the ceiling compare with the issue's targets, per head."""
    out = []
    for label in dict.fromkeys(r["label"] for r in rows):
        by = {r["candidate"]: r for r in rows if r["label"] == label}
        for cand in (name, "ceiling"):
            if cand not in by:
                continue
            r = by[cand]
            out.append(f"{label} {cand}: PE util. {_pct(r['utilization'])} (target >= 90%), "
                       f"over pe {r['over_pe']:.3f}x (>= 1.25x), hw op reduction "
                       f"{_pct(r['hw_of_oracle'])} of the oracle (>= 80%)")
        need = joint_target_cycles(by)
        if need is not None and "ceiling" in by:
            out.append(f"{label}: the utilization and op-reduction targets together need at most {need:,.0f} cycles "
                       f"({by['dense']['cycles'] / need:.3f}x over dense); the ceiling is "
                       f"{by['ceiling']['cycles']:,} cycles")
    return out


def joint_target_cycles(by: dict):
    """The most cycles a 4x4 design may take and meet the utilization and op-reduction
    targets together: busy <= (1 - 0.8 * oracle) * busy(dense) and busy >= 0.9 * PEs *
    cycles give cycles <= (1 - 0.8 * oracle) * busy(dense) / (0.9 * PEs). ``by``: the rows
    of one head by candidate (needs ``dense``); None without it."""
    d = by.get("dense")
    if d is None:
        return None
    busy = d["busy"] * (1 - TARGETS["hw_of_oracle"] * d["oracle_reduction"])
    return busy / (TARGETS["utilization"] * d["pes"])


def plot(rows: list[dict], plt, names=None):
    """Speedup over dense and PE utilization of every candidate and bound (or of ``names``,
    in that order), per head."""
    import numpy as np
    labels = list(dict.fromkeys(r["label"] for r in rows))
    if names is None:
        names = list(dict.fromkeys(r["candidate"] for r in rows
                                   if r["candidate"] != "ceiling-nat"))
    fig, axes = plt.subplots(2, 1, figsize=(min(16, 4 + 0.6 * len(names)), 7))
    width = 0.8 / max(len(labels), 1)
    x = np.arange(len(names))
    for i, label in enumerate(labels):
        by = {r["candidate"]: r for r in rows if r["label"] == label}
        for ax, key, scale in ((axes[0], "speedup", 1), (axes[1], "utilization", 100)):
            vals = [scale * by[n][key] if n in by else np.nan for n in names]
            bars = ax.bar(x + i * width, vals, width, label=label)
            for n, b in zip(names, bars):
                if n in BOUNDS:
                    b.set_hatch("//")
                    b.set_alpha(0.6)
    axes[0].set_ylabel("speedup over dense (x)")
    axes[1].set_ylabel("PE utilization (%)")
    axes[1].axhline(100 * TARGETS["utilization"], color="k", lw=0.8, ls="--")
    for ax in axes:
        ax.set_xticks(x + 0.4 - width / 2, names, rotation=30, ha="right", fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].legend(fontsize=7, ncol=min(3, len(labels)))
    fig.suptitle(f"Dataflow candidates and ceilings (hatched), grid {rows[0]['grid']}; "
                 f"dashed: 90% utilization target", fontsize=10)
    fig.tight_layout()
    return fig


def run_study(heads, names, stream=None) -> list[dict]:
    """``golden.engine.dataflow.study`` with a progress line per head on ``stream``."""
    stream = stream or sys.stderr
    rows = []
    for i, head in enumerate(heads):
        t0 = time.monotonic()
        rows += study([head], names)
        print(f"dataflow: {head.label} ({i + 1}/{len(heads)}) {time.monotonic() - t0:.1f}s",
              file=stream)
    return rows


def run(args) -> int:
    """Run the study, print the table and the targets, write --json / --csv / --plot."""
    metrics = None
    if args.pivot:
        metrics = _names(args.pivot, PIVOT_METRICS, "pivot")
    if args.heads and not args.from_json:
        raise ValueError("--heads filters the rows of --from-json")
    print("Dataflow study (golden.engine.dataflow): 4 arrays of 4x4 unless the candidate says, "
          "W=16, E=64, K=4, L=4, full/half bits 5/3; speedup and 'over pe' on the candidate's "
          "own PEs; gap closed = (full - cycles) / (full - ceiling)")
    if args.from_json:
        merged = {}
        for path in args.from_json.split(","):
            for r in json.loads(Path(path).read_text()):
                merged[r["label"], r["candidate"]] = r
        rows = list(merged.values())
        if args.heads:
            keep = _names(args.heads, list(dict.fromkeys(r["label"] for r in rows)), "heads")
            rows = [r for r in rows if r["label"] in keep]
    else:
        rows = run_study(heads_of(args), candidate_names(args.candidates))
    print()
    show = None
    if args.show:
        show = _names(args.show, list(dict.fromkeys(r["candidate"] for r in rows)), "show")
    if metrics:
        for metric in metrics:
            print(f"### {metric}\n")
            print(pivot_table(rows, metric, show))
            print()
    else:
        print(format_table([r for r in rows if show is None or r["candidate"] in show]))
    print("\nTargets (issue 15):")
    best = "m123-fifo4" if any(r["candidate"] == "m123-fifo4" for r in rows) else "m123"
    for line in targets(rows, best):
        print(f"  {line}")
    write_rows(rows, args.json, args.csv)
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        shown = [r for r in rows if show is None or r["candidate"] in show]
        plot(shown, plt, show).savefig(args.plot, dpi=120)
    return 0
