"""``kaleido-hw analyze``: what channel-wise reuse finds in one attention head.

For a preset and a token grid it synthesizes Q/K/V (``golden.workloads``; or reads them from
an ``.npz``), computes the reuse masks of Q and K, and prints per channel group and in total
the FULL/HALF/NONE fractions of the followers, the oracle QK^T op reduction, and the quality
of the reused attention output against the exact one and against the two skip baselines
(``docs/numerics.md``). ``--json`` prints the same as JSON (non-finite numbers as null).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from golden.checks import as_int8, check_tokens
from golden.numerics import (AXES, CODE_NAMES, FULL, GROUP_NAMES, HALF, ChannelGroups, code_counts,
                             follower_mask, oracle_cap, oracle_from_counts, reuse_masks)
from golden.quality import attention_quality
from golden.workloads import DEFAULTS, GRIDS, grid_named, make_qkv


#: Default quality budget: score elements evaluated (all queries while N*N fits).
AUTO_SCORES = 1 << 24


def add_arguments(parser):
    """Options of ``kaleido-hw analyze``."""
    parser.add_argument("--model", default="hunyuanvideo",
                        help="preset (channel partition of the head); default hunyuanvideo")
    parser.add_argument("--grid", default="8x16x16",
                        help=f"TxHxW tokens or one of {', '.join(GRIDS)}; default 8x16x16")
    parser.add_argument("--seed", type=int, default=0, help="workload seed; default 0")
    parser.add_argument("--full-bits", type=int, default=5,
                        help="FULL when the top 1+full_bits bits agree; default 5")
    parser.add_argument("--half-bits", type=int, default=3,
                        help="HALF when the top 1+half_bits bits agree; default 3")
    parser.add_argument("--directions", default="xty",
                        help="reuse axis of the t-, y- and x-group, three of t/y/x; default xty")
    parser.add_argument("--motion", type=float, default=DEFAULTS["motion"],
                        help="workload motion in tokens/frame along x; "
                             f"default {DEFAULTS['motion']}")
    parser.add_argument("--noise", type=float, default=DEFAULTS["noise"],
                        help=f"workload new content per frame, 0..1; default {DEFAULTS['noise']}")
    parser.add_argument("--smooth", type=float, default=DEFAULTS["smooth"],
                        help="workload spatial correlation length in tokens; "
                             f"default {DEFAULTS['smooth']}")
    parser.add_argument("--input", metavar="FILE.npz",
                        help="analyze arrays q, k (and optionally v, scale) from an .npz instead "
                             "of a synthetic workload")
    parser.add_argument("--reuse-v", action="store_true",
                        help="also reuse V (window rule along t) in the quality figures")
    parser.add_argument("--window", type=int, default=2, help="V window size, 2..3; default 2")
    parser.add_argument("--queries", type=int, default=None,
                        help="query rows evaluated for quality (evenly spaced; 0 = no quality "
                             f"figures); default: all up to {AUTO_SCORES:,} scores "
                             f"(N*N), else {AUTO_SCORES:,} // N rows")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _directions(text: str) -> tuple[int, int, int]:
    t = str(text).lower()
    if len(t) != 3 or any(c not in AXES for c in t):
        raise ValueError(f"directions must be three letters from t, y, x (reuse axis of the t-, "
                         f"y- and x-group, e.g. xty), got {text!r}")
    return tuple(AXES.index(c) for c in t)


def _load_input(path, grid, d):
    try:
        data = np.load(path)
    except (OSError, ValueError) as e:
        raise ValueError(f"--input must be an .npz file with arrays q and k (optionally v and "
                         f"scale), could not read {path}: {e}") from None
    names = set(getattr(data, "files", ()))
    if not {"q", "k"} <= names:
        raise ValueError(f"--input must hold arrays q and k (optionally v and scale), "
                         f"{path} has {sorted(names)}")
    q, k = as_int8(data["q"], "q"), as_int8(data["k"], "k")
    for name, x in (("q", q), ("k", k)):
        check_tokens(x, name, grid.n, str(grid), d)
    v = None
    if "v" in names:
        v = as_int8(data["v"], "v")
        check_tokens(v, "v", grid.n, str(grid))
    scale = float(data["scale"]) if "scale" in names else 1.0 / math.sqrt(d)
    return q, k, v, scale


def _fractions(counts, followers):
    full, half = int(counts[FULL].sum()), int(counts[HALF].sum())
    if followers == 0:
        return {"full": 0.0, "half": 0.0, "none": 0.0}
    return {"full": full / followers, "half": half / followers,
            "none": (followers - full - half) / followers}


def analyze(args) -> dict:
    """Reuse fractions per group, oracle QK^T reduction and quality of one synthetic head."""
    grid = grid_named(args.grid)
    directions = _directions(args.directions)
    groups = ChannelGroups.from_preset(args.model, directions)
    d = groups.head_dim
    queries = args.queries
    if queries is None:
        queries = grid.n if grid.n * grid.n <= AUTO_SCORES else max(1, AUTO_SCORES // grid.n)
    if queries < 0:
        raise ValueError(f"queries must be >= 0 (0 = no quality figures), got {queries}")
    queries = min(queries, grid.n)
    if args.input:
        q, k, v, scale = _load_input(args.input, grid, d)
        workload = {"input": str(Path(args.input))}
    else:
        w = make_qkv(args.model, grid, seed=args.seed, motion=args.motion, noise=args.noise,
                     smooth=args.smooth)
        q, k, v, scale = w.q, w.k, w.v, w.scale
        workload = dict(w.knobs)
    mq = reuse_masks(q, grid, groups, args.full_bits, args.half_bits)
    mk = reuse_masks(k, grid, groups, args.full_bits, args.half_bits)
    cq, ck = code_counts(mq), code_counts(mk)
    fol = follower_mask(grid, groups).sum(axis=0)

    def row(name, chans, axis):
        ops = oracle_from_counts(cq[:, chans], ck[:, chans])
        followers = int(fol[chans].sum())
        return {"group": name, "channels": int(len(chans)), "direction": axis,
                "followers": followers / (grid.n * len(chans)) if len(chans) else 0.0,
                "q": _fractions(cq[:, chans], followers), "k": _fractions(ck[:, chans], followers),
                "reduction": ops["reduction"]}

    rows = [row(GROUP_NAMES[g], groups.channels(g), AXES[directions[g]]) for g in range(3)]
    total = row("total", np.arange(d), "")
    ops = oracle_from_counts(cq, ck)
    result = {
        "model": args.model, "grid": str(grid), "tokens": grid.n, "head_dim": d,
        "full_bits": args.full_bits, "half_bits": args.half_bits,
        "directions": {GROUP_NAMES[g]: AXES[directions[g]] for g in range(3)},
        "workload": workload, "groups": rows, "total": total,
        "oracle": {"dense": ops["dense"], "cost": ops["cost"], "reduction": ops["reduction"],
                   "cap": oracle_cap(grid, groups)},
        "quality": None,
    }
    if queries and v is not None:
        result["quality"] = attention_quality(
            q, k, v, grid, groups, scale, args.full_bits, args.half_bits, reuse_v=args.reuse_v,
            window=args.window, queries=queries)
    return result


def _pct(x):
    return f"{100 * x:5.1f}%"


def _num(x, fmt):
    return format(x, fmt) if math.isfinite(x) else str(x)


def format_table(r: dict) -> str:
    """The result of :func:`analyze` as a readable table."""
    lines = [
        f"kaleido-hw analyze: {r['model']}, grid {r['grid']} ({r['tokens']} tokens), "
        f"head_dim {r['head_dim']}",
        f"FULL: top {1 + r['full_bits']} bits equal (full_bits {r['full_bits']}); "
        f"HALF: top {1 + r['half_bits']} bits equal (half_bits {r['half_bits']})",
        "workload: " + ", ".join(f"{k} {v}" for k, v in r["workload"].items()),
        "",
        "fractions of the followers; followers = share of (token, channel) slots",
        f"{'group':6} {'ch':>4} {'dir':>3} {'followers':>9} | "
        f"{'Q FULL':>6} {'HALF':>6} {'NONE':>6} | {'K FULL':>6} {'HALF':>6} {'NONE':>6} | "
        f"{'QK^T reduction':>14}",
    ]
    for g in r["groups"] + [r["total"]]:
        lines.append(
            f"{g['group']:6} {g['channels']:>4} {g['direction']:>3} {_pct(g['followers']):>9} | "
            + " ".join(f"{_pct(g['q'][c.lower()]):>6}" for c in CODE_NAMES) + " | "
            + " ".join(f"{_pct(g['k'][c.lower()]):>6}" for c in CODE_NAMES) + " | "
            + f"{_pct(g['reduction']):>14}")
    o = r["oracle"]
    lines += ["", f"oracle QK^T reduction {_pct(o['reduction']).strip()} "
                  f"(pairing cap {_pct(o['cap']).strip()}): {o['cost']:,.1f} of {o['dense']:,} "
                  f"products"]
    qa = r["quality"]
    if qa:
        v = (f", V reused (P@V reduction {_pct(qa['v_reduction']).strip()})" if qa["reuse_v"]
             else ", V exact")
        lines += ["", f"quality: float64 attention output vs exact, {qa['queries']} queries{v}; "
                      f"baselines skip {_pct(qa['saving']).strip()} of QK^T",
                  f"{'method':24} {'MSE':>11} {'PSNR dB':>8} {'cosine':>8} {'MSE / reuse':>11}"]
        for key, label in (("reuse", "reuse (Kaleido)"),
                           ("skip_smallest", "skip smallest |QK^T|"),
                           ("skip_masks", "skip with the same masks")):
            m = qa[key]
            ratio = 1.0 if key == "reuse" else qa["mse_ratio"][key]
            lines.append(f"{label:24} {_num(m['mse'], '11.4g'):>11} {_num(m['psnr'], '8.2f'):>8} "
                         f"{m['cosine']:8.5f} {_num(ratio, '11.2f'):>11}")
    return "\n".join(lines)


def _jsonable(x):
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(x) else None
    return x


def run(args) -> int:
    """``kaleido-hw analyze``: print the table (or JSON with ``--json``)."""
    result = analyze(args)
    print(json.dumps(_jsonable(result), indent=2) if args.json else format_table(result))
    return 0
