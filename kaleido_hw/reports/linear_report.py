"""``kaleido-hw linear-report``: what reuse buys in the linear layers, alone and together with
attention (the analogue of the paper's Fig. 20; ``docs/linear.md``).

For each preset, one transformer block at a reduced width is built on a token grid:

* ``heads`` attention heads of the preset's head_dim (``golden.workloads.make_qkv``, one seed
  per head), so ``d_model = heads * head_dim``, and an MLP of the real model's width ratio;
* the four linear layers of the block, each on synthetic int8 activations with the video's
  spatio-temporal correlation: QKV projection (``d -> 3d``) and MLP up-projection (``d -> m``)
  on ``golden.workloads.make_activations`` fields (the normalized hidden state), the output
  projection (``d -> d``) on the heads' real attention output ``softmax(S * scale) @ V``,
  and the MLP down-projection (``m -> d``) on ``GELU`` of the up-projection's float output;
  weights are Gaussian, quantized to int8.

Cycles come from the exact cycle models on the same hardware (P arrays of R x C): the engine
core running each linear layer as its program (``kaleido_hw.engine.host.plan_linear``;
``kaleido_hw.engine.host.linear_counters``, the counters the program's interpreter gives,
``docs/engine.md``, "Linear blocks"): the reuse runs (variant ``pe``, windows of 2 and of 3,
the latter on a core built with ``engine_window3``) against the dense run on the plain build
of the same core (``plain_config``: BaselinePEs, its own chunk width), the competitive
reference. ``compute`` cycles (the core's cycles in COMPUTEs) are compared: memory waits
depend on the memory and are left out on both sides. The core is the default build at the
figure's array shape with ``acc_width = 32`` (so that the MLP's 2,048-channel sums stay
exact). Attention scores ``Q K^T`` of every head: ``golden.engine.model.engine_counters``
(variant ``full`` vs ``dense``; P V and softmax are not counted on either side). Speedup =
dense cycles / reuse cycles. The quality column is the PSNR of each layer's output
``X_eff @ W`` against the exact ``X @ W`` (peak = max |exact|).

Because the block is narrower than the real model and the grid smaller, the attention /
linear mix differs from the real one; ``mix_speedup`` reweights the two measured speedups by
the real model's dense op counts (QK^T: heads * N^2 * head_dim; linear: 12 d^2-equivalent
per token) at its full latent grid, an extrapolation stated as such.
"""

from __future__ import annotations

import csv
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from golden.checks import check_axes
from golden.engine.model import EngineParams, engine_counters
from golden.numerics import PRESETS, ChannelGroups, exact_matmul, quantize
from golden.quality import attention_output
from golden.window import linear, linear_ops, window_anchor_index, window_masks
from golden.workloads import GRIDS, grid_named, make_activations, make_qkv
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.host import linear_counters


#: Presets of the figure.
DEFAULT_PRESETS = ("hunyuanvideo", "wan2.1", "cogvideox-5b")

#: The real models: hidden size, MLP width, heads, latent grid of a typical video.
REAL_MODELS = {
    "hunyuanvideo": {"d_model": 3072, "mlp": 12288, "heads": 24, "grid": "hunyuanvideo-720p"},
    "wan2.1": {"d_model": 5120, "mlp": 13824, "heads": 40, "grid": "wan-480p"},
    "cogvideox-5b": {"d_model": 3072, "mlp": 12288, "heads": 48, "grid": "cogvideox"},
}

LAYERS = ("qkv", "out", "mlp_up", "mlp_down")

COLUMNS = ("preset", "layer", "c_in", "c_out", "dense_cycles", "reuse_cycles", "speedup",
           "util_dense", "util_reuse", "hw_reduction", "oracle_reduction", "full", "half",
           "none", "psnr_db", "w2_cycles", "w3_cycles", "w3_gain")


def report_cores(rows: int, cols: int, arrays: int) -> tuple:
    """The two engine cores of the figure: ``(reuse, plain)``. ``reuse``: the default build
    with P arrays of R x C, ``acc_width = 32`` (a 2,048-channel sum stays exact) and
    ``engine_window3`` (windows of 3 next to windows of 2); ``plain``: its plain build
    (``plain_config``), the dense reference."""
    from kaleido_hw.engine.kaleido_engine import plain_config
    reuse = KaleidoConfig(rows=rows, cols=cols, engine_arrays=arrays, acc_width=32,
                          engine_window3=True)
    return reuse, plain_config(reuse.replace(engine_window3=False))


def linear_groups(c_in: int, direction: int) -> ChannelGroups:
    """Every one of ``c_in`` input channels in group t, reused along ``direction``."""
    return ChannelGroups((0,) * c_in, (direction, 1, 2), name=f"all-{'tyx'[direction]}-{c_in}")


def _gelu(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def _weight(rng, c_in, c_out):
    """Gaussian weights (std 1/sqrt(c_in)): ``(float, int8)``."""
    wf = rng.standard_normal((c_in, c_out)) / math.sqrt(c_in)
    return wf, quantize(wf)[0]


def block_layers(preset: str, grid, heads: int, seed: int = 0):
    """The four linear layers of one reduced-width block and the block's heads.

    Returns ``(layers, qkvs, dims)``: ``layers`` maps a layer name to ``(x, w)`` (int8
    activation (N, c_in), int8 weight (c_in, c_out)); ``qkvs`` are the heads' ``QKV``;
    ``dims`` gives ``d_model`` and ``mlp``.
    """
    grid = grid_named(grid)
    p = PRESETS[preset]
    real = REAL_MODELS[preset]
    d = heads * p.head_dim
    m = max(8, int(round(d * real["mlp"] / real["d_model"] / 8)) * 8)
    rng = np.random.default_rng([seed, 61])
    qkvs = [make_qkv(preset, grid, seed=seed * 1000 + h) for h in range(heads)]
    x_in, _ = make_activations(grid, d, seed=seed * 1000 + 500)
    x_mlp, s_mlp = make_activations(grid, d, seed=seed * 1000 + 501)
    attn = np.concatenate([attention_output(h.q, h.k, h.v, h.scale) for h in qkvs], axis=1)
    x_out, _ = quantize(attn)
    w1f, w1 = _weight(rng, d, m)
    x_down, _ = quantize(_gelu((x_mlp.astype(np.float64) * s_mlp) @ w1f))
    layers = {
        "qkv": (x_in, _weight(rng, d, 3 * d)[1]),
        "out": (x_out, _weight(rng, d, d)[1]),
        "mlp_up": (x_mlp, w1),
        "mlp_down": (x_down, _weight(rng, m, d)[1]),
    }
    return layers, qkvs, {"d_model": d, "mlp": m}


def _psnr(exact, approx):
    err = float(np.mean((exact.astype(np.float64) - approx) ** 2))
    peak = float(np.abs(exact).max())
    return math.inf if err == 0 else 10 * math.log10(peak * peak / err)


def _fractions(masks, grid, window, directions):
    """FULL / HALF / NONE fractions of the window followers (anchors and tokens outside a
    complete window excluded)."""
    axes = np.broadcast_to(np.asarray(directions), (masks.shape[1],))   # one axis for all
    fol = np.zeros(masks.shape, bool)
    for axis in range(3):
        ch = axes == axis
        if ch.any():
            fol[:, ch] = (window_anchor_index(grid, axis, window) >= 0)[:, None]
    codes = masks[fol]
    counts = np.bincount(codes, minlength=3)[:3] / max(codes.size, 1)
    return [float(c) for c in counts]


def linear_figures(out_dir, presets=DEFAULT_PRESETS, grid="medium", heads: int = 4,
                   arrays: int = 4, rows: int = 4, cols: int = 4, window: int = 2,
                   directions=0, seed: int = 0, full_bits: int = 5, half_bits: int = 3,
                   log=None) -> dict:
    """Run the figure: write ``linear_report.png``, ``.json`` and ``.csv`` to ``out_dir``
    (nothing when it is None) and return ``{"settings", "layers" (rows per preset and layer), "summary" (per preset)}``.

    ``presets`` among :data:`REAL_MODELS`; ``grid`` a VideoGrid, ``TxHxW`` or GRIDS name;
    ``heads`` of the reduced block (``d_model = heads * head_dim``); ``arrays``, ``rows``,
    ``cols`` the hardware (P arrays of R x C); ``window`` 2 or 3 and ``directions`` (one axis
    for every input channel) the linear layers' reuse rule; ``full_bits``/``half_bits`` the
    thresholds of both attention and linear layers; ``log`` an optional progress callback.

    summary keys per preset: ``linear_speedup``, ``attention_speedup`` (each alone);
    the block (attention scores + the four linear layers) with reuse in attention only
    (``attention_only_speedup``: linear layers dense) and in both (``combined_speedup``),
    which is the paper's Fig. 20 comparison; the same two weighted by the real model's dense
    op counts instead of this block's cycles (``mix_attention_only_speedup``,
    ``mix_speedup``); ``linear_share_dense`` (linear share of the dense cycles here),
    ``real_linear_share`` (of the real model's dense ops), the widths and cycle totals.
    """
    grid = grid_named(grid)
    presets = list(presets)
    for p in presets:
        if p not in REAL_MODELS:
            raise ValueError(f"presets must be among {', '.join(REAL_MODELS)}, got {p!r}")
    if isinstance(heads, bool) or not isinstance(heads, int) or not 1 <= heads <= 64:
        raise ValueError(f"heads must be an integer in [1, 64], got {heads!r}")
    if not isinstance(directions, str) and np.ndim(directions) != 0:
        raise ValueError(f"directions must be one axis for every input channel: 0 (t), 1 (y), "
                         f"2 (x) or 't', 'y', 'x', got {directions!r}")
    directions = int(check_axes(directions, 1)[0])
    params = EngineParams(rows=rows, cols=cols, arrays=arrays)
    reuse_core, plain = report_cores(rows, cols, arrays)
    log = log or (lambda msg: None)
    rows_out, summary = [], {}
    t_all = time.time()
    for preset in presets:
        t0 = time.time()
        log(f"{preset}: building the block on {grid} ...")
        layers, qkvs, dims = block_layers(preset, grid, heads, seed)
        groups = ChannelGroups.from_preset(preset)
        lin = {"dense": 0, "reuse": 0}
        for name in LAYERS:
            x, w = layers[name]
            c_out = w.shape[1]
            groups_lin = linear_groups(x.shape[1], directions)
            c = {key: linear_counters(core, x, c_out, grid, groups_lin, variant=variant,
                                      window=win, full_bits=full_bits, half_bits=half_bits)
                 for key, core, variant, win in (("dense", plain, "dense", 2),
                                                 ("w2", reuse_core, "pe", 2),
                                                 ("w3", reuse_core, "pe", 3))}
            c["reuse"] = c[f"w{window}"]
            masks = window_masks(x, grid, directions, window, full_bits, half_bits)
            y = linear(x, w, grid, directions, window, full_bits, half_bits)
            exact = exact_matmul(x, w)
            pes = arrays * rows * cols
            full, half, none = _fractions(masks, grid, window, directions)
            rows_out.append({
                "preset": preset, "layer": name, "c_in": x.shape[1], "c_out": c_out,
                "dense_cycles": c["dense"]["compute"], "reuse_cycles": c["reuse"]["compute"],
                "speedup": c["dense"]["compute"] / c["reuse"]["compute"],
                "util_dense": c["dense"]["busy_pe_cycles"] / (pes * c["dense"]["compute"]),
                "util_reuse": c["reuse"]["busy_pe_cycles"] / (pes * c["reuse"]["compute"]),
                "hw_reduction": 1 - c["reuse"]["busy_pe_cycles"] / c["dense"]["busy_pe_cycles"],
                "oracle_reduction": linear_ops(masks, c_out)["reduction"],
                "full": full, "half": half, "none": none, "psnr_db": _psnr(exact, y),
                "w2_cycles": c["w2"]["compute"], "w3_cycles": c["w3"]["compute"],
                "w3_gain": c["w2"]["compute"] / c["w3"]["compute"]})
            lin["dense"] += c["dense"]["compute"]
            lin["reuse"] += c["reuse"]["compute"]
        log(f"{preset}: attention scores of {heads} heads ...")
        att = {"dense": 0, "reuse": 0}
        for qkv in qkvs:
            q, k, _ = qkv
            att["dense"] += engine_counters(q, k, grid, groups, params, "dense",
                                            full_bits, half_bits).cycles
            att["reuse"] += engine_counters(q, k, grid, groups, params, "full",
                                            full_bits, half_bits).cycles
        real = REAL_MODELS[preset]
        n_real = GRIDS[real["grid"]].n
        ops_att = real["heads"] * n_real * n_real * PRESETS[preset].head_dim
        ops_lin = n_real * (4 * real["d_model"] ** 2 + 2 * real["d_model"] * real["mlp"])
        s_lin = lin["dense"] / lin["reuse"]
        s_att = att["dense"] / att["reuse"]
        summary[preset] = {
            "d_model": dims["d_model"], "mlp": dims["mlp"], "heads": heads,
            "linear_dense_cycles": lin["dense"], "linear_reuse_cycles": lin["reuse"],
            "attention_dense_cycles": att["dense"], "attention_reuse_cycles": att["reuse"],
            "linear_speedup": s_lin, "attention_speedup": s_att,
            "attention_only_speedup": (lin["dense"] + att["dense"]) /
            (lin["dense"] + att["reuse"]),
            "combined_speedup": (lin["dense"] + att["dense"]) / (lin["reuse"] + att["reuse"]),
            "linear_share_dense": lin["dense"] / (lin["dense"] + att["dense"]),
            "real_grid": real["grid"], "real_linear_share": ops_lin / (ops_lin + ops_att),
            "mix_attention_only_speedup": (ops_att + ops_lin) / (ops_att / s_att + ops_lin),
            "mix_speedup": (ops_att + ops_lin) / (ops_att / s_att + ops_lin / s_lin),
            "seconds": time.time() - t0,
        }
    settings = {"presets": presets, "grid": str(grid), "heads": heads, "arrays": arrays,
                "rows": rows, "cols": cols, "window": window,
                "directions": np.asarray(directions).tolist(), "seed": seed,
                "full_bits": full_bits, "half_bits": half_bits,
                "attention_model": "golden.engine.model.engine_counters (variant full vs dense)",
                "linear_model": "kaleido_hw.engine.host.linear_counters: the engine core's "
                                "compute cycles, variant pe (windows of 2 and 3) vs dense on "
                                "the plain build",
                "seconds": time.time() - t_all}
    result = {"settings": settings, "layers": rows_out, "summary": summary}
    if out_dir is not None:
        _write(Path(out_dir), result)
    return result


def _write(out: Path, result: dict) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    (out / "linear_report.json").write_text(json.dumps(result, indent=1) + "\n")
    with (out / "linear_report.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, COLUMNS)
        w.writeheader()
        for row in result["layers"]:
            w.writerow({k: row[k] for k in COLUMNS})
    fig = plot_linear(result, plt)
    fig.savefig(out / "linear_report.png", dpi=120)
    plt.close(fig)


def plot_linear(result: dict, plt):
    """The Fig. 20 figure of a :func:`linear_figures` result (speedups per preset, and per
    linear layer), as a matplotlib figure."""
    s = result["summary"]
    presets = list(s)
    bars = (("linear_speedup", "linear layers alone"),
            ("attention_speedup", "attention QK^T alone"),
            ("attention_only_speedup", "block, reuse in attention only"),
            ("combined_speedup", "block, reuse in attention + linear"),
            ("mix_attention_only_speedup", "real op mix, attention only"),
            ("mix_speedup", "real op mix, attention + linear"))
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 4.4), gridspec_kw={"width_ratios": [3, 2]})
    width = 0.8 / len(bars)
    for i, (key, label) in enumerate(bars):
        xs = np.arange(len(presets)) + (i - (len(bars) - 1) / 2) * width
        vals = [s[p][key] for p in presets]
        ax.bar(xs, vals, width, label=label)
        for x, v in zip(xs, vals):
            ax.text(x, v, f"{v:.2f}", ha="center", va="bottom", fontsize=6)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(np.arange(len(presets)), presets)
    ax.set_ylabel("speedup over dense (same hardware)")
    st = result["settings"]
    ax.set_title(f"Kaleido on {st['arrays']}x {st['rows']}x{st['cols']} arrays, "
                 f"grid {st['grid']}, {st['heads']} heads", fontsize=9)
    ax.legend(fontsize=6, loc="lower right")
    width = 0.8 / len(presets)
    for i, p in enumerate(presets):
        vals = [r["speedup"] for r in result["layers"] if r["preset"] == p]
        ax2.bar(np.arange(len(LAYERS)) + (i - (len(presets) - 1) / 2) * width, vals, width,
                label=p)
    ax2.axhline(1.0, color="grey", lw=0.8)
    ax2.set_xticks(np.arange(len(LAYERS)), LAYERS)
    ax2.set_ylabel("speedup over dense")
    ax2.set_title(f"per linear layer (window {st['window']})", fontsize=9)
    ax2.legend(fontsize=7)
    fig.tight_layout()
    return fig


def add_arguments(parser):
    """Options of ``kaleido-hw linear-report``."""
    parser.add_argument("--out", default="report", metavar="DIR",
                        help="output folder for linear_report.{png,json,csv}; default report/")
    parser.add_argument("--presets", default=",".join(DEFAULT_PRESETS),
                        help=f"comma-separated, among {', '.join(REAL_MODELS)}; default all")
    parser.add_argument("--grid", default="medium",
                        help="token grid TxHxW or a GRIDS name; default medium (8x16x16)")
    parser.add_argument("--heads", type=int, default=4,
                        help="heads of the reduced block (d_model = heads * head_dim); default 4")
    parser.add_argument("--arrays", type=int, default=4, help="P arrays; default 4")
    parser.add_argument("--rows", type=int, default=4, help="R rows per array; default 4")
    parser.add_argument("--cols", type=int, default=4, help="C columns per array; default 4")
    parser.add_argument("--window", type=int, default=2, choices=(2, 3),
                        help="window of the linear layers' reuse rule; default 2")
    parser.add_argument("--direction", default="t", choices=("t", "y", "x"),
                        help="reuse axis of every input channel; default t")
    parser.add_argument("--seed", type=int, default=0, help="workload seed; default 0")


def _print(result):
    st = result["settings"]
    print(f"linear layers + attention, {st['arrays']} arrays of {st['rows']}x{st['cols']} "
          f"(engine core; dense on its plain build), grid {st['grid']}, window {st['window']}; "
          f"speedup = dense / reuse compute cycles")
    head = (f"{'preset':<13} {'layer':<9} {'c_in':>5} {'c_out':>5} {'dense cycles':>13} "
            f"{'reuse cycles':>13} {'speedup':>8} {'hw red':>7} {'oracle':>7} {'FULL':>6} "
            f"{'PSNR dB':>8}")
    print(head)
    print("-" * len(head))
    for r in result["layers"]:
        print(f"{r['preset']:<13} {r['layer']:<9} {r['c_in']:>5} {r['c_out']:>5} "
              f"{r['dense_cycles']:>13,} {r['reuse_cycles']:>13,} {r['speedup']:>7.3f}x "
              f"{r['hw_reduction']:>7.1%} {r['oracle_reduction']:>7.1%} {r['full']:>6.1%} "
              f"{r['psnr_db']:>8.1f}")
    print()
    print("windows of 2 and of 3 on the engine core (variant pe; compute cycles)")
    head = (f"{'preset':<13} {'layer':<9} {'dense':>12} {'w2':>12} {'w3':>12} "
            f"{'w2/dense':>8} {'w3/dense':>8} {'w3 gain':>8}")
    print(head)
    print("-" * len(head))
    for r in result["layers"]:
        d = r["dense_cycles"]
        print(f"{r['preset']:<13} {r['layer']:<9} {d:>12,} {r['w2_cycles']:>12,} "
              f"{r['w3_cycles']:>12,} {d / r['w2_cycles']:>7.3f}x "
              f"{d / r['w3_cycles']:>7.3f}x {r['w3_gain']:>7.3f}x")
    print()
    print("block = attention scores (QK^T) + the four linear layers; 'att only': linear "
          "layers dense; 'real mix': the same speedups weighted by the real model's dense ops")
    head = (f"{'preset':<13} {'d_model':>7} {'mlp':>5} {'linear':>8} {'attention':>9} "
            f"{'lin share':>9} {'att only':>8} {'att+lin':>8} {'real lin share':>14} "
            f"{'real: att only':>14} {'real: att+lin':>13}")
    print(head)
    print("-" * len(head))
    for p, s in result["summary"].items():
        print(f"{p:<13} {s['d_model']:>7} {s['mlp']:>5} {s['linear_speedup']:>7.3f}x "
              f"{s['attention_speedup']:>8.3f}x {s['linear_share_dense']:>9.1%} "
              f"{s['attention_only_speedup']:>7.3f}x {s['combined_speedup']:>7.3f}x "
              f"{s['real_linear_share']:>14.1%} {s['mix_attention_only_speedup']:>13.3f}x "
              f"{s['mix_speedup']:>12.3f}x")


def run(args) -> int:
    """``kaleido-hw linear-report``: run :func:`linear_figures` and print its tables."""
    presets = [p.strip() for p in args.presets.split(",") if p.strip()]
    for p in presets:
        if p not in REAL_MODELS:
            raise ValueError(f"--presets must name presets among {', '.join(REAL_MODELS)}, "
                             f"got {p!r}")
    for name in ("arrays", "rows", "cols"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be at least 1, got {getattr(args, name)}")
    if not 1 <= args.heads <= 64:
        raise ValueError(f"--heads must be in [1, 64], got {args.heads}")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("kaleido-hw linear-report: error: matplotlib is needed: pip install -e "
              "'.[report]' (make install does it)", file=sys.stderr)
        return 2
    result = linear_figures(args.out, presets, grid_named(args.grid), args.heads, args.arrays,
                            args.rows, args.cols, args.window, "tyx".index(args.direction),
                            args.seed, log=lambda m: print(m, file=sys.stderr, flush=True))
    _print(result)
    print(f"wrote linear_report.png/.json/.csv to {args.out}/ in "
          f"{result['settings']['seconds']:.0f} s")
    return 0
