"""Quality of the integer attention pipeline (``kaleido-hw report --only attention``).

Per preset, seed and V reuse (off, on): :func:`golden.vector.integer_attention_quality` on a
synthetic head (``golden.workloads.make_qkv``), i.e. the integer softmax of the vector unit
and ``O = P_q @ V_eff / 255`` against float64 ``softmax(S_exact * scale) @ V``, next to the
float reuse path of ``golden.attention_quality``. Rows are averaged over the seeds for the
table (PSNR in dB, mean of the per-seed values).
"""

from __future__ import annotations

import numpy as np

from golden.numerics import PRESETS, ChannelGroups
from golden.vector import integer_attention_quality
from golden.vector.online import online_attention_quality
from golden.workloads import make_qkv


__all__ = ["ATTENTION_GRID", "PATHS", "attention_rows", "summarize", "table_rows",
           "LENGTH_GRIDS", "LENGTH_PRESETS", "LENGTH_PATHS", "KEY_BOX", "length_row",
           "length_rows", "length_summary", "length_table_rows"]

#: A modest grid: every key of every query, 256 tokens.
ATTENTION_GRID = "4x8x8"
#: The compared outputs, in table order.
PATHS = ("int_exact", "int_reuse", "float_reuse", "int_vs_float_reuse")


def attention_rows(presets=None, grid: str = ATTENTION_GRID, seeds: int = 3,
                   full_bits: int = 5, half_bits: int = 3) -> list[dict]:
    """One row per (preset, seed, V reuse) with every path's PSNR, cosine and MSE."""
    rows = []
    for preset in presets or sorted(PRESETS):
        groups = ChannelGroups.from_preset(preset)
        for seed in range(seeds):
            qkv = make_qkv(preset, grid, seed)
            q, k, v = qkv
            for reuse_v in (False, True):
                res = integer_attention_quality(q, k, v, qkv.grid, groups, qkv.scale,
                                                full_bits, half_bits, reuse_v=reuse_v)
                row = {"preset": preset, "seed": seed, "reuse_v": reuse_v, "grid": grid,
                       "mult": res["mult"], "shift": res["shift"],
                       "v_reduction": res["v_reduction"], "merged_equal": res["merged_equal"]}
                for path in PATHS:
                    for key in ("psnr", "cosine", "mse"):
                        row[f"{path}_{key}"] = res[path][key]
                rows.append(row)
    return rows


def summarize(rows: list[dict]) -> dict:
    """Mean over seeds per preset and V reuse: ``{preset: {"off"|"on": {column: mean}}}``."""
    out: dict = {}
    for row in rows:
        out.setdefault(row["preset"], {}).setdefault("on" if row["reuse_v"] else "off",
                                                      []).append(row)
    cols = [f"{p}_{k}" for p in PATHS for k in ("psnr", "cosine", "mse")] + ["v_reduction"]
    return {p: {v: {c: float(np.mean([r[c] for r in rs])) for c in cols}
                for v, rs in by.items()} for p, by in out.items()}


def table_rows(summary: dict) -> list[list[str]]:
    """Markdown rows: preset, V reuse, then PSNR / cosine of each path, and the P@V saving."""
    out = []
    for preset, by in summary.items():
        for v in ("off", "on"):
            a = by[v]
            out.append([preset, v] + [f"{a[f'{p}_psnr']:.1f} / {a[f'{p}_cosine']:.5f}"
                                      for p in PATHS] + [f"{100 * a['v_reduction']:.1f}%"])
    return out


#: Head lengths of the length sweep: 256 to 16,384 tokens.
LENGTH_GRIDS = ("4x8x8", "4x16x16", "8x16x16", "8x32x32", "16x32x32")
LENGTH_PRESETS = ("hunyuanvideo", "wan2.1", "cogvideox-5b")
#: Outputs of the length sweep, in table order.
LENGTH_PATHS = ("row_softmax", "online", "online_block", "float_reuse", "online_exact")
#: The engine core's key box at its default 64 tokens (``docs/engine.md``).
KEY_BOX = (2, 2, 16)
#: Query rows evaluated per head (evenly spaced; every key is used).
LENGTH_QUERIES = 256


def length_row(q, k, v, grid, preset: str, scale: float, full_bits: int = 5,
               half_bits: int = 3, label: str = "") -> dict:
    """One head of the length sweep: every path's PSNR, cosine and MSE, the P statistics."""
    res = online_attention_quality(q, k, v, grid, ChannelGroups.from_preset(preset), scale,
                                   KEY_BOX, LENGTH_QUERIES, full_bits, half_bits)
    row = {"preset": preset, "grid": str(grid), "tokens": int(q.shape[0]), "label": label,
           **{key: res[key] for key in ("queries", "blocks", "p_zero", "p_zero_online",
                                        "row_weight", "rescales", "v_reduction",
                                        "v_reduction_blocks")}}
    for path in LENGTH_PATHS:
        for key in ("psnr", "cosine", "mse"):
            row[f"{path}_{key}"] = res[path][key]
    return row


def length_rows(presets=LENGTH_PRESETS, grids=LENGTH_GRIDS, seeds: int = 2,
                full_bits: int = 5, half_bits: int = 3) -> list[dict]:
    """One row per (preset, grid, seed) of synthetic heads (``make_qkv``)."""
    rows = []
    for preset in presets:
        for grid in grids:
            for seed in range(seeds):
                qkv = make_qkv(preset, grid, seed)
                row = length_row(qkv.q, qkv.k, qkv.v, qkv.grid, preset, qkv.scale,
                                 full_bits, half_bits)
                rows.append({**row, "seed": seed})
    return rows


def length_summary(rows: list[dict]) -> dict:
    """Mean over seeds: ``{(preset, grid): {column: mean}}`` in row order."""
    groups: dict = {}
    for row in rows:
        groups.setdefault((row["preset"], row["grid"]), []).append(row)
    cols = [f"{p}_{k}" for p in LENGTH_PATHS for k in ("psnr", "cosine", "mse")] + [
        "tokens", "p_zero", "p_zero_online", "row_weight", "rescales", "v_reduction",
        "v_reduction_blocks"]
    return {key: {c: float(np.mean([r[c] for r in rs])) for c in cols}
            for key, rs in groups.items()}


def length_table_rows(summary: dict) -> list[list[str]]:
    """Markdown rows: preset, tokens, PSNR / cosine of each path, share of P = 0 (section 14,
    section 15), section 14's mean row sum of P (of 255)."""
    out = []
    for (preset, _grid), a in summary.items():
        out.append([preset, f"{int(a['tokens']):,}"]
                   + [f"{a[f'{p}_psnr']:.1f} / {a[f'{p}_cosine']:.4f}" for p in LENGTH_PATHS]
                   + [f"{100 * a['p_zero']:.1f}% / {100 * a['p_zero_online']:.1f}%",
                      f"{a['row_weight']:.0f}"])
    return out
