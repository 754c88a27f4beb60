"""``kaleido-hw bench``: speed of the golden model (a benchmark, not a test).

1. Reuse analysis of one full attention head: masks of Q and of K plus the oracle op counts,
   on the hunyuanvideo-720p grid (33 x 45 x 80 = 118,800 tokens x 128 channels, int8). The
   budget is 1 s (median of ``--repeat`` runs); workload synthesis is not timed.
2. Exact reuse-accelerated scores ``S = Q_eff @ K_eff.T`` of one block (default 4096 tokens,
   grid 4x32x32): the golden path (``attention_scores``: masks, effective operands and the
   exact float-BLAS product) and its product kernel (``exact_matmul``) against plain
   ``np.matmul`` on int64 and on float64, in GMAC/s; all four results must be bit-identical.

Exit status 1 when a result is not exact, or (with ``--strict``) when the budget is missed.
"""

from __future__ import annotations

import json
import os
import statistics
import time

import numpy as np

from golden.numerics import (ChannelGroups, attention_scores, effective_operand, exact_matmul,
                             oracle_ops, reuse_masks)
from golden.workloads import grid_named, make_qkv


def add_arguments(parser):
    """Options of ``kaleido-hw bench``."""
    parser.add_argument("--model", default="hunyuanvideo", help="preset; default hunyuanvideo")
    parser.add_argument("--grid", default="hunyuanvideo-720p",
                        help="grid of the reuse analysis; default hunyuanvideo-720p (33x45x80)")
    parser.add_argument("--block-grid", default="4x32x32",
                        help="grid of the S block; default 4x32x32 (4096 tokens)")
    parser.add_argument("--repeat", type=int, default=7, help="timed runs per figure; default 7")
    parser.add_argument("--budget", type=float, default=1.0,
                        help="seconds allowed for the reuse analysis; default 1.0")
    parser.add_argument("--strict", action="store_true", help="exit 1 when over budget")
    parser.add_argument("--seed", type=int, default=0, help="workload seed; default 0")
    parser.add_argument("--json", action="store_true", help="print JSON")


def _times(fn, repeat):
    out, result = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        out.append(time.perf_counter() - t)
    return out, result


def bench(args) -> dict:
    """Time the reuse analysis of a full head and the exact-S throughput; check bit-exactness."""
    if not 1 <= args.repeat <= 100:
        raise ValueError(f"repeat must be in [1, 100], got {args.repeat}")
    if not args.budget > 0:
        raise ValueError(f"budget must be a positive number of seconds, got {args.budget}")
    groups = ChannelGroups.from_preset(args.model)
    grid = grid_named(args.grid)
    t = time.perf_counter()
    w = make_qkv(args.model, grid, seed=args.seed)
    synth = time.perf_counter() - t

    def analysis():
        mq = reuse_masks(w.q, grid, groups)
        mk = reuse_masks(w.k, grid, groups)
        return oracle_ops(mq, mk)

    times, ops = _times(analysis, args.repeat)
    median = statistics.median(times)
    result = {
        "cpus": os.cpu_count(), "numpy": np.__version__,
        "analysis": {"model": args.model, "grid": str(grid), "tokens": grid.n,
                     "head_dim": groups.head_dim, "synthesis_s": synth,
                     "median_s": median, "min_s": min(times), "runs": len(times),
                     "budget_s": args.budget, "within_budget": median <= args.budget,
                     "oracle_reduction": ops["reduction"]},
    }

    bgrid = grid_named(args.block_grid)
    b = make_qkv(args.model, bgrid, seed=args.seed)
    qe = effective_operand(b.q, reuse_masks(b.q, bgrid, groups), bgrid, groups)
    ke = effective_operand(b.k, reuse_masks(b.k, bgrid, groups), bgrid, groups)
    macs = bgrid.n * bgrid.n * groups.head_dim
    qi, ki = qe.astype(np.int64), ke.astype(np.int64)
    qd, kd = qe.astype(np.float64), ke.astype(np.float64)
    methods = {
        "attention_scores": (lambda: attention_scores(b.q, b.k, bgrid, groups), args.repeat),
        "exact_matmul": (lambda: exact_matmul(qe, ke.T), args.repeat),
        "matmul_int64": (lambda: np.matmul(qi, ki.T), min(args.repeat, 3)),
        "matmul_float64": (lambda: np.matmul(qd, kd.T).astype(np.int64), args.repeat),
    }
    reference = None
    block = {"grid": str(bgrid), "tokens": bgrid.n, "macs": macs, "methods": {}}
    exact = True
    for name, (fn, repeat) in methods.items():
        ts, s = _times(fn, repeat)
        if reference is None:
            reference = s
        same = bool(np.array_equal(s, reference))
        exact &= same
        med = statistics.median(ts)
        block["methods"][name] = {"median_s": med, "gmacs": macs / med / 1e9, "runs": repeat,
                                  "bit_exact": same}
    block["all_bit_exact"] = exact
    result["scores"] = block
    return result


def format_report(r: dict) -> str:
    """The result of :func:`bench` as readable text."""
    a, s = r["analysis"], r["scores"]
    verdict = "within" if a["within_budget"] else "OVER"
    lines = [
        f"kaleido-hw bench ({r['cpus']} CPUs, numpy {r['numpy']})",
        f"reuse analysis, {a['model']} {a['grid']} ({a['tokens']:,} tokens x {a['head_dim']} "
        f"int8; masks of Q and K + oracle counts):",
        f"  median {a['median_s']:.3f} s, min {a['min_s']:.3f} s over {a['runs']} runs: "
        f"{verdict} the {a['budget_s']:g} s budget (workload synthesis {a['synthesis_s']:.2f} s, "
        f"not timed; oracle QK^T reduction {100 * a['oracle_reduction']:.1f}%)",
        f"exact S of a {s['tokens']}-token block (grid {s['grid']}, {s['macs'] / 1e9:.2f} GMAC):",
        f"  {'method':34} {'median s':>9} {'GMAC/s':>8}  bit-exact",
    ]
    labels = {"attention_scores": "golden attention_scores (all)",
              "exact_matmul": "golden exact_matmul (product only)",
              "matmul_int64": "np.matmul int64",
              "matmul_float64": "np.matmul float64 BLAS"}
    for name, m in s["methods"].items():
        lines.append(f"  {labels[name]:34} {m['median_s']:9.4f} {m['gmacs']:8.2f}  "
                     f"{'yes' if m['bit_exact'] else 'NO'}")
    return "\n".join(lines)


def run(args) -> int:
    """``kaleido-hw bench``: exit 1 if S is not bit-exact, or (``--strict``) over budget."""
    result = bench(args)
    print(json.dumps(result, indent=2) if args.json else format_report(result))
    if not result["scores"]["all_bit_exact"]:
        return 1
    if args.strict and not result["analysis"]["within_budget"]:
        return 1
    return 0
