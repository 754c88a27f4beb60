"""Engine counters of one attention head for every variant, stored for the energy model.

The paper-scale run (one 720p hunyuanvideo head on 16,384 arrays of 4 x 4) takes minutes per
variant, so its counters are computed once and kept in ``golden/energy/data/`` with the
command that made them::

    python -m golden.energy.head_counters --preset hunyuanvideo --grid hunyuanvideo-720p \
        --arrays 16384 --out golden/energy/data/paper_counters.json

Plain numpy; no hardware imports.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from golden.engine.model import VARIANTS, EngineParams, engine_counters
from golden.numerics import PRESETS, ChannelGroups
from golden.workloads import grid_named, make_qkv


__all__ = ["head_counters", "main"]


def head_counters(preset: str, grid, arrays: int, variants=VARIANTS, seed: int = 0,
                  rows: int = 4, cols: int = 4) -> dict:
    """``{"preset", "grid", "tokens", "head_dim", "arrays", "rows", "cols", "variants":
    {variant: EngineCounters.totals()}}`` of the synthetic head of ``preset`` on ``grid``
    (``golden.workloads.make_qkv``), engine parameters of the default configuration with
    ``arrays`` arrays of ``rows`` x ``cols``."""
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {', '.join(sorted(PRESETS))}, got {preset!r}")
    for v in variants:
        if v not in VARIANTS:
            raise ValueError(f"variants must be among {', '.join(VARIANTS)}, got {v!r}")
    g = grid_named(grid)
    q, k, _ = make_qkv(preset, g, seed=seed)
    groups = ChannelGroups.from_preset(preset)
    params = EngineParams(rows=rows, cols=cols, arrays=arrays)
    out = {"preset": preset, "grid": str(grid), "tokens": int(q.shape[0]),
           "head_dim": int(q.shape[1]), "arrays": arrays, "rows": rows, "cols": cols,
           "seed": seed, "variants": {}}
    for v in variants:
        t0 = time.monotonic()
        c = engine_counters(q, k, g, groups, params, v)
        out["variants"][v] = dict(c.totals(), seconds=round(time.monotonic() - t0, 1))
    return out


def main(argv=None) -> int:
    """Command line: compute :func:`head_counters` and write it as JSON (with the command)."""
    p = argparse.ArgumentParser(prog="python -m golden.energy.head_counters",
                                description="engine counters of one head, every variant")
    p.add_argument("--preset", default="hunyuanvideo")
    p.add_argument("--grid", default="8x16x16")
    p.add_argument("--arrays", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    d = head_counters(a.preset, a.grid, a.arrays, seed=a.seed)
    d["command"] = "python -m golden.energy.head_counters " + " ".join(
        sys.argv[1:] if argv is None else argv)
    with open(a.out, "w") as f:
        json.dump(d, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
