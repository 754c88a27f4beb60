"""What reuse buys for a whole attention head (``kaleido-hw report --only head``; the analogue
of the paper's Fig. 18a at head level).

Per preset, on a synthetic head (``golden.workloads.make_qkv``): the cycles of S on the
engine's P arrays (``golden.engine.model``), of the vector unit's integer softmax and of
P @ V on the same arrays (``golden.engine.pv``), in the row-block pipeline of
``golden.engine.head``; dense (S dense, P @ V dense) against s-reuse (S with the ``full``
variant, P @ V dense: arrays that cannot reuse V in P @ V) and reuse (S full, P @ V with V
reuse in windows of 2 along t: the P @ V mode folded into the arrays, ``docs/linear.md``,
"P @ V in the ReusePE"). The speedup of the whole head is the dense total over the run's
total on the same arrays; ``v_gain`` is what V reuse adds, s-reuse's total over reuse's.
"""

from __future__ import annotations

import numpy as np

from golden.engine.head import head_cycles
from golden.engine.model import EngineParams
from golden.numerics import ChannelGroups, attention_scores
from golden.vector import softmax_int, softmax_scale
from golden.workloads import make_qkv


__all__ = ["HEAD_PRESETS", "head_rows", "table_rows", "plot_head"]

#: Presets of the report (the ablation's).
HEAD_PRESETS = ("hunyuanvideo", "wan2.1", "cogvideox-5b")
#: The runs compared: S variant and V reuse.
RUNS = {"dense": ("dense", False), "s-reuse": ("full", False), "reuse": ("full", True)}


def head_rows(presets=HEAD_PRESETS, grid="8x16x16", params: EngineParams | None = None,
              seed: int = 0, full_bits: int = 5, half_bits: int = 3, lanes: int = 16,
              buffers: int = 5) -> list[dict]:
    """One row per (preset, run) with the stage cycles, the total and, on the s-reuse and
    reuse rows, the speedups of S, P @ V and the whole head over dense (on the reuse row
    also ``v_gain``, the s-reuse total over the reuse total)."""
    params = params or EngineParams()
    rows = []
    for preset in presets:
        qkv = make_qkv(preset, grid, seed=seed)
        q, k, v = qkv
        groups = ChannelGroups.from_preset(preset)
        pair = softmax_scale(qkv.scale)
        # P of each S variant, once: the s-reuse and reuse runs share theirs.
        scores = {"dense": q.astype(np.int64) @ k.astype(np.int64).T,
                  "full": attention_scores(q, k, qkv.grid, groups, full_bits, half_bits)}
        probs = {variant: softmax_int(s, *pair) for variant, s in scores.items()}
        out = {}
        for run, (variant, v_reuse) in RUNS.items():
            c = head_cycles(q, k, v, probs[variant], qkv.grid, groups, params, variant, v_reuse,
                            full_bits=full_bits, half_bits=half_bits, lanes=lanes,
                            buffers=buffers)
            out[run] = c
            rows.append({"preset": preset, "grid": str(qkv.grid), "run": run,
                         "s_variant": variant, "v_reuse": v_reuse, "arrays": params.arrays,
                         "array": f"{params.rows}x{params.cols}", "lanes": lanes,
                         **c.as_dict()})
        d = out["dense"]
        for row in rows[-len(RUNS):]:
            r = out[row["run"]]
            if row["run"] != "dense":
                row.update({"s_speedup": d.s / r.s, "pv_speedup": d.pv / r.pv,
                            "head_speedup": d.total / r.total})
        rows[-1]["v_gain"] = out["s-reuse"].total / out["reuse"].total
    return rows


def table_rows(rows: list[dict]) -> list[list[str]]:
    """Markdown rows: preset, run, S, softmax, P @ V, total cycles, speedups over dense, the
    gain of V reuse (reuse row)."""
    out = []
    for row in rows:
        sp = (f"{row['s_speedup']:.3f}x / {row['pv_speedup']:.3f}x / "
              f"{row['head_speedup']:.3f}x" if "head_speedup" in row else "")
        gain = f"{row['v_gain']:.3f}x" if "v_gain" in row else ""
        out.append([row["preset"], row["run"], f"{row['s']:,}", f"{row['softmax']:,}",
                    f"{row['pv']:,}", f"{row['exposed_softmax']:,}", f"{row['total']:,}", sp,
                    gain])
    return out


def plot_head(rows: list[dict], plt):
    """Stacked bars per preset, one per run, normalized to the dense head's total."""
    presets = list(dict.fromkeys(r["preset"] for r in rows))
    fig, ax = plt.subplots(figsize=(8, 3.8))
    x = np.arange(len(presets))
    width = 0.76 / len(RUNS)
    for i, run in enumerate(RUNS):
        by = {r["preset"]: r for r in rows if r["run"] == run}
        dense = {r["preset"]: r["total"] for r in rows if r["run"] == "dense"}
        s = np.array([by[p]["s"] / dense[p] for p in presets])
        pv = np.array([by[p]["pv"] / dense[p] for p in presets])
        ex = np.array([by[p]["exposed_softmax"] / dense[p] for p in presets])
        pos = x + (i - (len(RUNS) - 1) / 2) * width
        alpha = 1.0 - 0.25 * i
        ax.bar(pos, s, width * 0.95, color="tab:blue", alpha=alpha, label=f"S ({run})")
        ax.bar(pos, pv, width * 0.95, bottom=s, color="tab:orange", alpha=alpha,
               label=f"P @ V ({run})")
        if ex.any():
            ax.bar(pos, ex, width * 0.95, bottom=s + pv, color="tab:gray",
                   label=f"softmax ({run})")
    ax.set_xticks(x, presets, fontsize=8)
    ax.set_ylabel("cycles / dense head")
    ax.set_ylim(0, 1.3)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle("A whole head: S, softmax and P @ V; dense, S reuse only, S and V reuse "
                 "(same arrays)", fontsize=10)
    fig.tight_layout()
    return fig
