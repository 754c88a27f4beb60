"""Measured LinearEngine cycles, dense vs reuse, on a synthetic activation (the README's
"Linear layers in RTL" figure): runs the RTL of the default build in Amaranth simulation
(no Verilog tools needed), checks Y bit-exact against ``golden.linear`` and every counter
against ``golden.engine.linear.linear_counters``, and prints the cycles.

    .venv/bin/python sim/engine/linear/measure_linear.py [--grid 4x4x4] [--window 2]
        [--arrays P]

About a minute or two per window. The default build (4 arrays of 4 x 4, ``linear_max_in`` =
32, ``linear_max_out`` = 16, 64 tokens) sets the largest layer: C_in = 32 -> C_out = 16;
``--arrays`` changes only ``engine_arrays``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


REPO = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from linear_rtl_harness import Job, run_jobs  # noqa: E402

from golden import make_activations  # noqa: E402
from golden.engine.linear import linear_counters  # noqa: E402
from golden.numerics import as_grid  # noqa: E402
from golden.window import linear  # noqa: E402
from kaleido_hw.config import KaleidoConfig  # noqa: E402
from kaleido_hw.engine.linear_engine import counters_from_model  # noqa: E402


def main(argv=None) -> int:
    """Run the measurement; print one line per mode and the speedup."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grid", default="4x4x4")
    parser.add_argument("--window", type=int, default=2, choices=(2, 3))
    parser.add_argument("--seed", type=int, default=500)
    parser.add_argument("--arrays", type=int, default=KaleidoConfig().engine_arrays)
    args = parser.parse_args(argv)
    cfg = KaleidoConfig(engine_arrays=args.arrays)
    grid = as_grid(args.grid)
    x, _ = make_activations(grid, cfg.linear_max_in, seed=args.seed)
    w = np.random.default_rng(args.seed).integers(-128, 128, (cfg.linear_max_in,
                                                               cfg.linear_max_out)).astype(np.int8)
    jobs = [Job(x, w, grid, 0, args.window, reuse=r) for r in (False, True)]
    outs = run_jobs(cfg, jobs)
    cycles = {}
    for job, out in zip(jobs, outs):
        want = (linear(x, w, grid, 0, args.window) if job.reuse
                else x.astype(np.int64) @ w.astype(np.int64))
        assert out["error"] == 0 and np.array_equal(out["Y"], want), "Y differs from golden"
        model = linear_counters(x, w, grid, 0, args.window, cfg.rows, cfg.cols,
                                cfg.engine_arrays, reuse=job.reuse)
        assert out["counters"] == counters_from_model(model), "counters differ from the model"
        c = out["counters"]
        mode = "reuse" if job.reuse else "dense"
        cycles[mode] = c["cycles"]
        print(f"{mode:5s}: {c['cycles']} cycles, {c['busy_pe_cycles']} busy PE-cycles, "
              f"F1 {c['issued1']} issued / {c['skipped1']} skipped, F2 {c['issued2']} issued")
    print(f"{grid} {cfg.linear_max_in}->{cfg.linear_max_out} window {args.window} on "
          f"{cfg.engine_arrays} x {cfg.rows}x{cfg.cols}: "
          f"speedup {cycles['dense'] / cycles['reuse']:.3f}x "
          f"(RTL = cycle model, Y bit-exact)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
