"""Which operation the busy PE-cycles of a head are: MUL or a low-nibble step (LOW).

The engine's counters give the number of busy PE-cycles but not their operation, and a LOW
step costs less than a MUL (``data/pe_events.json``). Every (row unit, column unit) pair of a
head meets in exactly one PE of one quad, and in each pass and channel that PE does what
``golden.array.schedule.DECODE`` says for the pair's two follower codes. So the mix over the
whole head is a sum over channels of (row code histogram) x (column code histogram) through
the decode table: no quad is walked. Merged slots (the matcher) are not separated here.

Plain numpy; no hardware imports.
"""

from __future__ import annotations

import numpy as np

from golden.array.schedule import DECODE, PASSES, Op, _plans


__all__ = ["busy_op_mix", "main"]


def busy_op_mix(q, k, grid, groups, full_bits: int = 5, half_bits: int = 3) -> dict:
    """``{"busy", "mul", "low"}`` of the reuse schedule of one head: busy PE-cycles over all
    unit pairs and passes (equal to the engine's ``busy_pe_cycles`` without the matcher),
    and how many of them are MUL and LOW (LOW_COL + LOW_ROW) steps."""
    _, plans = _plans(q, k, grid, groups, full_bits, half_bits, True)
    op = DECODE[0]
    counts = np.zeros(4, np.int64)
    for pl in plans:
        hq = np.stack([(pl.qc == c).sum(axis=0) for c in range(4)], axis=1)   # (n, 4)
        hk = np.stack([(pl.kc == c).sum(axis=0) for c in range(4)], axis=1)
        pairs = hq.T.astype(np.int64) @ hk.astype(np.int64)                  # (4, 4)
        for p in range(PASSES):
            counts += np.bincount(op[p].ravel(), weights=pairs.ravel(),
                                  minlength=4).astype(np.int64)
    mul = int(counts[Op.MUL])
    low = int(counts[Op.LOW_COL] + counts[Op.LOW_ROW])
    return {"busy": mul + low, "mul": mul, "low": low}


def main(argv=None) -> int:
    """Command line: the op mix of one synthetic head, as JSON with the command."""
    import argparse
    import json
    import sys

    from golden.numerics import PRESETS, ChannelGroups
    from golden.workloads import grid_named, make_qkv

    p = argparse.ArgumentParser(prog="python -m golden.energy.op_mix",
                                description="MUL / LOW mix of a head's busy PE-cycles")
    p.add_argument("--preset", default="hunyuanvideo")
    p.add_argument("--grid", default="8x16x16")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    if a.preset not in PRESETS:
        p.error(f"--preset must be one of {', '.join(sorted(PRESETS))}, got {a.preset!r}")
    g = grid_named(a.grid)
    q, k, _ = make_qkv(a.preset, g, seed=a.seed)
    d = {"preset": a.preset, "grid": a.grid, "seed": a.seed,
         **busy_op_mix(q, k, g, ChannelGroups.from_preset(a.preset))}
    d["command"] = "python -m golden.energy.op_mix " + " ".join(
        sys.argv[1:] if argv is None else argv)
    with open(a.out, "w") as f:
        json.dump(d, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
